package attest

import "fmt"

// Candidate is the tree a validation must be about: a validate job's candidate, as the server
// completing the job reads it from the job's payload and the gate landing its pass reads it
// from the store. GitTree and TreeDigest are "" where the candidate does not name them.
type Candidate struct {
	Repository string
	Revision   string
	GitTree    string // 40 lowercase hex, or "" for a candidate built before git tree ids
	TreeDigest string // "sha256:<hex>", or "" when it was not computed for the candidate
}

// SubjectPart says which part of a validation's subject is not its candidate's.
type SubjectPart int

const (
	// SubjectNoTree: the candidate names neither a git tree nor a tree digest, so no subject
	// can be compared with it.
	SubjectNoTree SubjectPart = iota + 1
	// SubjectGitTree: the git tree id is absent or another.
	SubjectGitTree
	// SubjectTreeDigest: the tree digest is absent or another.
	SubjectTreeDigest
	// SubjectName: the name, <repository>@<revision>, is another.
	SubjectName
)

// SubjectMismatch is why a validation's subject is not its candidate: CheckSubject's only
// error. Its Error is the gate's wording, stored as a rejected change's reason; a caller that
// speaks to someone else (the server, to the worker completing a job) words it from the fields.
type SubjectMismatch struct {
	Part SubjectPart
	// Attested is what the validation names for Part: its git tree id, its tree digest or its
	// subject name; "" when it names none (never for SubjectName), and for SubjectNoTree.
	Attested  string
	Candidate Candidate
}

func (m *SubjectMismatch) Error() string {
	c := m.Candidate
	switch {
	case m.Part == SubjectNoTree:
		return "the candidate " + c.Revision + " names neither a git tree nor a tree digest"
	case m.Part == SubjectGitTree && m.Attested == "":
		return "the attestation names no git tree, and the candidate's is " + c.GitTree
	case m.Part == SubjectGitTree:
		return fmt.Sprintf("the attestation is about git tree %s, not the candidate's %s", m.Attested, c.GitTree)
	case m.Part == SubjectTreeDigest && m.Attested == "":
		return "the attestation names no tree digest, and the candidate's is " + c.TreeDigest
	case m.Part == SubjectTreeDigest:
		return fmt.Sprintf("the attestation is about tree %s, not the candidate's %s", m.Attested, c.TreeDigest)
	default:
		return fmt.Sprintf("the attestation is about %s, not the candidate %s@%s", m.Attested, c.Repository, c.Revision)
	}
}

// CheckSubject answers nil when v's subject is exactly candidate, or a *SubjectMismatch
// saying the first part that is not, in the order below. The server checks it before it
// stores a validate job's completion, and the gate again before the pass moves a mainline,
// so that both hold a statement to the same rule:
//
//   - A candidate naming neither a git tree nor a tree digest matches no subject: a missing id
//     must never compare equal to a missing id.
//   - The candidate's git tree id, when it has one, must be the subject's: it is what the
//     worker fetched and what the landed commit holds, and its tree digest may not be known
//     (the queue does not compute it, as that reads the whole tree).
//   - A candidate built before git tree ids names its tree digest alone, which must then be
//     the subject's, as its attestations name no git tree either.
//   - A tree digest on both sides must be the same even where the git tree ids agree: a
//     statement whose two digests name two trees attests neither.
//   - The subject's name must be the candidate's repository and revision, since the signed
//     statement is the record of what was validated: whoever reads it later must find the
//     revision that landed, not another one of the same tree.
//
// The job, claim and worker the predicate names are not the subject: each caller binds them
// to what it knows (the server to the request completing the job and the job's current claim,
// the gate to the job and claim that completed it).
func (v Validation) CheckSubject(candidate Candidate) error {
	mismatch := func(part SubjectPart, attested string) error {
		return &SubjectMismatch{Part: part, Attested: attested, Candidate: candidate}
	}
	switch {
	case candidate.GitTree == "" && candidate.TreeDigest == "":
		return mismatch(SubjectNoTree, "")
	case candidate.GitTree != "" && v.GitTree != candidate.GitTree:
		return mismatch(SubjectGitTree, v.GitTree)
	case candidate.TreeDigest == "":
	case v.TreeDigest == "" && candidate.GitTree == "":
		return mismatch(SubjectTreeDigest, "")
	case v.TreeDigest != "" && v.TreeDigest != candidate.TreeDigest:
		return mismatch(SubjectTreeDigest, v.TreeDigest)
	}
	if v.Repository != candidate.Repository || v.Revision != candidate.Revision {
		return mismatch(SubjectName, v.Subject())
	}
	return nil
}
