package attest_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/attest"
)

// TestCheckSubject ensures a validation matches a candidate only when it names the
// candidate's repository and revision and its tree: by git tree id when the candidate has one,
// by tree digest when the candidate has none, by both when both sides name both; that a
// candidate naming no tree matches nothing; and that the mismatch says which part and what
// the validation names instead.
func TestCheckSubject(t *testing.T) {
	t.Parallel()
	const otherGitTree = "0000000000000000000000000000000000000001"
	otherTree := "sha256:" + strings.Repeat("fedcba9876543210", 4)
	candidate := func(git, digest string) attest.Candidate {
		return attest.Candidate{Repository: "shop", Revision: "rev_42", GitTree: git, TreeDigest: digest}
	}
	subject := func(repository, revision, digest, git string) attest.Validation {
		return attest.Validation{Repository: repository, Revision: revision, TreeDigest: digest, GitTree: git}
	}
	of := func(digest, git string) attest.Validation { return subject("shop", "rev_42", digest, git) }
	gitOnly, both, digestOnly := candidate(gitTree, ""), candidate(gitTree, treeDigest), candidate("", treeDigest)

	for _, c := range []struct {
		name      string
		candidate attest.Candidate
		v         attest.Validation
		part      attest.SubjectPart // 0 for a match
		attested  string
		message   string
	}{
		{"git tree, both named", gitOnly, of(treeDigest, gitTree), 0, "", ""},
		{"git tree, it alone", gitOnly, of("", gitTree), 0, "", ""},
		{"git tree, another", gitOnly, of(treeDigest, otherGitTree), attest.SubjectGitTree, otherGitTree,
			"the attestation is about git tree " + otherGitTree + ", not the candidate's " + gitTree},
		{"git tree, none", gitOnly, of(treeDigest, ""), attest.SubjectGitTree, "",
			"the attestation names no git tree, and the candidate's is " + gitTree},
		{"both, both the same", both, of(treeDigest, gitTree), 0, "", ""},
		{"both, the git tree alone", both, of("", gitTree), 0, "", ""},
		{"both, another digest", both, of(otherTree, gitTree), attest.SubjectTreeDigest, otherTree,
			"the attestation is about tree " + otherTree + ", not the candidate's " + treeDigest},
		{"both, the digest alone", both, of(treeDigest, ""), attest.SubjectGitTree, "",
			"the attestation names no git tree, and the candidate's is " + gitTree},
		{"digest, both named", digestOnly, of(treeDigest, gitTree), 0, "", ""},
		{"digest, it alone", digestOnly, of(treeDigest, ""), 0, "", ""},
		{"digest, another", digestOnly, of(otherTree, gitTree), attest.SubjectTreeDigest, otherTree,
			"the attestation is about tree " + otherTree + ", not the candidate's " + treeDigest},
		{"digest, the git tree alone", digestOnly, of("", gitTree), attest.SubjectTreeDigest, "",
			"the attestation names no tree digest, and the candidate's is " + treeDigest},
		{"no tree", candidate("", ""), of(treeDigest, gitTree), attest.SubjectNoTree, "",
			"the candidate rev_42 names neither a git tree nor a tree digest"},
		{"another revision", both, subject("shop", "rev_41", treeDigest, gitTree), attest.SubjectName, "shop@rev_41",
			"the attestation is about shop@rev_41, not the candidate shop@rev_42"},
		{"another repository", both, subject("shop2", "rev_42", treeDigest, gitTree), attest.SubjectName, "shop2@rev_42",
			"the attestation is about shop2@rev_42, not the candidate shop@rev_42"},
		// The tree is compared first: the name of a statement about another tree is not news.
		{"another tree and revision", gitOnly, subject("shop", "rev_41", "", otherGitTree), attest.SubjectGitTree, otherGitTree,
			"the attestation is about git tree " + otherGitTree + ", not the candidate's " + gitTree},
	} {
		err := c.v.CheckSubject(c.candidate)
		if c.part == 0 {
			if err != nil {
				t.Errorf("%s: %v, want a match", c.name, err)
			}
			continue
		}
		var m *attest.SubjectMismatch
		if !errors.As(err, &m) || m.Part != c.part || m.Attested != c.attested || m.Candidate != c.candidate || err.Error() != c.message {
			t.Errorf("%s: %#v (%v), want part %d attesting %q: %s", c.name, err, err, c.part, c.attested, c.message)
		}
	}
}
