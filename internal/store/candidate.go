package store

import (
	"context"
	"time"
)

// CandidateState is where a candidate is in its life.
type CandidateState string

// A candidate is live while VALIDATING, PASSED or FAILED; the other states are final.
const (
	CandidateValidating CandidateState = "validating" // its validate job has not settled
	CandidatePassed     CandidateState = "passed"     // a verified pass, waiting for the candidates ahead
	CandidateFailed     CandidateState = "failed"     // failed, waiting to know whether the candidates ahead pass
	CandidateLanded     CandidateState = "landed"     // the mainline moved to its revision
	CandidateRejected   CandidateState = "rejected"   // failed on the mainline itself: its change was rejected
	CandidateSplit      CandidateState = "split"      // a batch that failed: its changes were validated in smaller parts
	CandidateSuperseded CandidateState = "superseded" // built on what is no longer ahead of it: rebuilt
	CandidateCancelled  CandidateState = "cancelled"  // its validate job was cancelled by a person
)

// Live reports whether a candidate in this state still takes part in its queue.
func (s CandidateState) Live() bool {
	return s == CandidateValidating || s == CandidatePassed || s == CandidateFailed
}

// Candidate is one tree the integration queue asked a worker to validate: its parent revision
// (the mainline, or the candidate ahead of it in the queue) with the edits of its changes, one
// or, in a batch, several, applied in queue order.
type Candidate struct {
	ID             string
	Repository     string
	State          CandidateState
	Revision       string // the candidate revision: exactly the tree validated
	ParentRevision string
	JobID          string
	Changes        []string // in queue order, when filled in
	// Size is how many changes it holds (0 for a candidate stored before sizes were).
	Size int
	// AttestationDigest is the attestation its outcome rests on, when it has one.
	AttestationDigest string
	Reason            string // why it failed, was superseded, split or cancelled
	// Lane is the policy lane it validates (ADR-0024), "" (the root lane) for the whole tree. A lane's
	// candidate revision holds the lane's view of the tree only: without other lanes' files.
	Lane string
	// ParentTree is, for a lane's candidate, the git tree of the lane's view it was built on.
	ParentTree string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// ListCandidatesParams select candidates for ListCandidates: those of one change (its history),
// or the live ones of a repository (its queue).
type ListCandidatesParams struct {
	ChangeID   string
	Repository string // with ChangeID empty: the repository's live candidates
}

// CandidateReader reads what the integration queue built. RepoStore embeds it.
type CandidateReader interface {
	// ListCandidates answers, oldest first, every candidate change p.ChangeID was in, or the
	// live candidates of p.Repository in queue order. Each candidate's Changes are filled in.
	ListCandidates(ctx context.Context, p ListCandidatesParams) ([]Candidate, error)
}
