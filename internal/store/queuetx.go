package store

import (
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/ag-coord/ag/internal/repo"
)

// QueueTx is the transaction InQueue holds on one repository's integration queue: the data
// operations the gate's queue engine (gate.RunQueue) carries out its decisions with. None of
// them decides anything of the queue's; each reads or writes what it says, inside the one
// transaction, so that the engine is written once for every store. Its events are the server's
// own (SystemPrincipal).
type QueueTx interface {
	// Mainline answers the repository's mainline revision id, as MoveMainline left it.
	Mainline() string
	// Validation answers the repository's validation policy as stored, nil for none.
	Validation() []byte
	// Pending answers up to limit QUEUED and VALIDATING changes, oldest first.
	Pending(limit int) ([]Change, error)
	// Live answers the repository's live candidates (Changes need not be filled in).
	Live() ([]Candidate, error)
	Revision(id string) (Revision, error)
	// Job answers a job and the attestation its completion stored, or nil.
	Job(id string) (Job, *Attestation, error)
	// Edits answers the edits and lease tokens a change was integrated with.
	Edits(changeID string) ([]repo.FileEdit, []uint64, error)
	// Rebase applies edits made on base to the git tree onto (RebaseGit), keeping what it
	// writes for StoreRevision.
	Rebase(base Revision, onto plumbing.Hash, edits []repo.FileEdit) (plumbing.Hash, error)
	// Project answers the git tree tree without the paths hidden (gitstore.Prune), keeping what
	// it writes for StoreRevision.
	Project(tree plumbing.Hash, hidden []string) (plumbing.Hash, error)
	// StoreRevision stores the git objects written so far and a revision of tree on parent;
	// with commit, also the mainline commit on parent's.
	StoreRevision(parent Revision, tree plumbing.Hash, changeID, author string, commit *CommitInfo) (Revision, error)
	// WriteCommit gives rev, which the mainline just moved to, its mainline commit on parent's,
	// and answers the commit's id.
	WriteCommit(rev, parent Revision, c CommitInfo) (string, error)
	// MoveMainline is the compare-and-swap of the mainline; a miss is an error, since the
	// repository is held.
	MoveMainline(from, to string) error
	// Enqueue enqueues a job as the server (EnqueueJob's rules, its unique key too); the job
	// signal fires once the transaction commits.
	Enqueue(p EnqueueJobParams) (Job, error)
	// CancelJob cancels a queued job and asks a claimed one's worker to stop, as the server;
	// a job that ended already is left alone.
	CancelJob(id string) error
	// InsertCandidate stores a new candidate with its changes.
	InsertCandidate(c Candidate) error
	// SetCandidate writes c's state, attestation and reason; it must still be in state from.
	SetCandidate(c Candidate, from CandidateState) error
	// SetChange writes c's state, revisions, job, attestation, reason, candidate and batch
	// limit; it must still be in state from. It answers the change as stored.
	SetChange(c Change, from ChangeState) (Change, error)
	// Task answers a task as of now (GetTask), for the claim check of a change that would land.
	Task(id string) (Task, error)
	// FinishTask marks the task done by the change changeID (state done, change_id, done_at;
	// the claim stays its last one) and records task.done; a task that is not current for the
	// change is refused by the caller first, with CheckTaskClaim.
	FinishTask(id, changeID string) error
	// Record records an event of the server's own.
	Record(action, subject string, details map[string]any)
}
