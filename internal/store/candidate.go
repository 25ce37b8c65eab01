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
	Changes        []string // in queue order
	// AttestationDigest is the attestation its outcome rests on, when it has one.
	AttestationDigest string
	Reason            string // why it failed, was superseded, split or cancelled
	CreatedAt         time.Time
	UpdatedAt         time.Time
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
