package server

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/agwp"
	"github.com/ag-coord/ag/internal/attest"
)

// TestAttestsJobTree ensures a validate job's completion is refused unless its attestation's
// subject is the tree the job names: by git tree id when the job names one, by tree digest when
// both name one, and never by what the job does not name alone.
func TestAttestsJobTree(t *testing.T) {
	t.Parallel()
	const (
		gitTree      = "89abcdef0123456789abcdef0123456789abcdef"
		otherGitTree = "0000000000000000000000000000000000000001"
	)
	tree := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	otherTree := "sha256:" + strings.Repeat("fedcba9876543210", 4)
	gitJob := agwp.ValidatePayload{GitTree: gitTree}
	bothJob := agwp.ValidatePayload{GitTree: gitTree, TreeDigest: tree}
	oldJob := agwp.ValidatePayload{TreeDigest: tree} // enqueued before git tree ids
	for _, c := range []struct {
		name            string
		payload         agwp.ValidatePayload
		treeDigest, git string // the attestation's
		wantErr         string // "" to accept
	}{
		{"git job, both", gitJob, tree, gitTree, ""},
		{"git job, the git tree alone", gitJob, "", gitTree, ""},
		{"git job, another git tree", gitJob, tree, otherGitTree, "its subject is git tree " + otherGitTree + ", but job job_1 validates git tree " + gitTree},
		{"git job, no git tree", gitJob, tree, "", "its subject names no git tree, but job job_1 validates git tree " + gitTree},
		{"both job, both", bothJob, tree, gitTree, ""},
		{"both job, the git tree alone", bothJob, "", gitTree, ""},
		{"both job, another digest", bothJob, otherTree, gitTree, "its subject is tree " + otherTree + ", but job job_1 validates tree " + tree},
		{"both job, the digest alone", bothJob, tree, "", "its subject names no git tree"},
		{"old job, both", oldJob, tree, gitTree, ""},
		{"old job, the digest alone", oldJob, tree, "", ""},
		{"old job, another digest", oldJob, otherTree, gitTree, "its subject is tree " + otherTree + ", but job job_1 validates tree " + tree},
		{"old job, the git tree alone", oldJob, "", gitTree, "its subject names no tree digest, but job job_1 validates tree " + tree},
	} {
		err := attestsJobTree(attest.Validation{TreeDigest: c.treeDigest, GitTree: c.git}, c.payload, "job_1")
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", c.name, err)
		case c.wantErr != "" && (connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "attestation: "+c.wantErr)):
			t.Errorf("%s: %v, want invalid_argument: attestation: %s", c.name, err, c.wantErr)
		}
	}
}
