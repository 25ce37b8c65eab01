package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/ag-coord/ag/internal/repo"
)

// RepoStore is the part of the store that keeps repositories, their content, file leases and
// changes. Store embeds it.
type RepoStore interface {
	CandidateReader

	// CreateRepository creates a repository whose mainline is a new revision (author =
	// p.CreatedBy, no parent, no change): of the empty tree, with a root commit of its own, or,
	// with p.GitCommit, of that commit's tree and that commit, which the store must hold (an
	// unknown commit: ErrNotFound). A taken name: ErrAlreadyExists.
	CreateRepository(ctx context.Context, p CreateRepositoryParams) (Repository, error)

	// GetRepository answers a repository by name, or ErrNotFound.
	GetRepository(ctx context.Context, name string) (Repository, error)

	// ListRepositories answers repositories ordered by name.
	ListRepositories(ctx context.Context, p ListRepositoriesParams) (repos []Repository, nextPageToken string, err error)

	// PutBlobs stores contents under their digests (repo.Digest of the content, computed by the
	// caller). A blob already stored is left as it is.
	PutBlobs(ctx context.Context, blobs []Blob) error

	// GetBlob answers a blob, or ErrNotFound.
	GetBlob(ctx context.Context, digest string) (Blob, error)

	// GetBlobs answers the blobs among digests that the store holds, in no particular order; a
	// digest it does not hold is absent from the answer.
	GetBlobs(ctx context.Context, digests []string) ([]Blob, error)
	// CompactStored rewrites up to limit rows of blobs and git objects that a build before
	// compressed contents wrote (StoredUnexamined) as EncodeStored would write them, each in
	// one transaction with the others of its batch, and answers how many it rewrote: 0 once
	// none is left. A run that stops leaves rows examined or not, never half written, so the
	// next run goes on where it stopped. Replicas may run it at once (PostgreSQL skips the
	// rows another holds).
	CompactStored(ctx context.Context, limit int) (int, error)

	// MissingBlobs answers the digests among digests that the store does not hold, in the order
	// given.
	MissingBlobs(ctx context.Context, digests []string) ([]string, error)

	// BlobSizes answers the size of each blob among digests that the store holds; a digest it
	// does not hold is absent from the answer.
	BlobSizes(ctx context.Context, digests []string) (map[string]uint64, error)

	// StartBlobUpload answers the upload u.ID, creating it as u (Received 0) when the store has
	// none: a blob too large for one request is sent in parts (ADR-0027), and a client that
	// stopped part-way asks again and goes on from Received.
	StartBlobUpload(ctx context.Context, u BlobUpload) (BlobUpload, error)

	// GetBlobUpload answers the upload id as it stands, reading only: a part is checked against
	// it before it is appended. An upload the store does not hold: ErrNotFound.
	GetBlobUpload(ctx context.Context, id string) (BlobUpload, error)

	// AppendBlobUpload stores p.Content as the upload's part from p.Offset and keeps
	// p.HashState, in one transaction, if p.Offset is what the upload has received (otherwise,
	// a part sent twice or out of order: ErrFailedPrecondition; unknown upload: ErrNotFound).
	// With p.Complete, the same transaction ends the upload: its parts become the blob
	// p.Complete.Digest (its size, p.Complete.GitID), read by every blob read as if stored whole
	// (a blob already stored stays as it is and the parts are dropped). Answers the upload as
	// it is after.
	AppendBlobUpload(ctx context.Context, p AppendBlobUploadParams) (BlobUpload, error)

	// DropBlobUploads removes the uploads started before (and, with id non-empty, the upload
	// id whatever its age) with their parts, and answers how many it removed.
	DropBlobUploads(ctx context.Context, before time.Time, id string) (int, error)

	// ReadBlob calls fn with a blob's content from offset on, in order, in the pieces it is
	// stored in (a blob stored whole: one piece from offset; one stored in parts: a piece per
	// part, the first cut at offset), never the whole of a blob stored in parts at once. fn's
	// slice is valid only during the call. An offset past the end answers nothing; a blob the
	// store does not hold: ErrNotFound.
	ReadBlob(ctx context.Context, digest string, offset uint64, fn func(piece []byte) error) error

	// GetRevision answers a revision of a repository with its tree, or ErrNotFound (also when
	// the revision belongs to another repository). Listing the files reads the whole git tree.
	GetRevision(ctx context.Context, repository, revisionID string) (Revision, error)

	// DiffRevisions answers revision revisionID of repository without its tree, and what
	// changed in its tree from the revision since (of the same repository, ErrNotFound
	// otherwise): it reads only the git trees along the paths that differ (DiffTrees).
	DiffRevisions(ctx context.Context, repository, since, revisionID string) (Revision, TreeDiff, error)

	// ReadGitObject answers the type and content (without git's header) of a git commit, tree
	// or blob of any repository, or ErrNotFound.
	ReadGitObject(ctx context.Context, id plumbing.Hash) (plumbing.ObjectType, []byte, error)

	// ReadGitObjects answers the git objects among ids that the store holds (commits, trees and
	// blobs, as ReadGitObject), in no particular order; one it does not hold is absent.
	ReadGitObjects(ctx context.Context, ids []plumbing.Hash) ([]GitObject, error)

	// BlobsByGitID answers the sha256 digest and size of each stored blob among ids; an id the
	// store holds no blob of is absent from the answer.
	BlobsByGitID(ctx context.Context, ids []plumbing.Hash) (map[plumbing.Hash]BlobRef, error)

	// PutGitObjects stores trees and commits (ID the git id of Type and Data, computed by the
	// caller); one already stored is left as it is.
	PutGitObjects(ctx context.Context, objects []GitObject) error

	// PutPackedBlobs stores blobs an import sent (git's own ids, checked by the caller against
	// what Data makes), each in its row's form; a blob already stored is left as it is. A
	// StoredPackDelta's base must be stored, or come before it in blobs.
	PutPackedBlobs(ctx context.Context, blobs []PackedBlob) error

	// BlobDepths answers, of each stored blob among ids that a delta may be against (one not
	// stored in parts), how many deltas deep it is: 0 when kept whole.
	BlobDepths(ctx context.Context, ids []plumbing.Hash) (map[plumbing.Hash]int, error)

	// ReplaceWithDeltas keeps each blob of rewrites that is stored whole (compressed or not,
	// not in parts) as its delta against Base instead, in one transaction, and answers how many
	// it rewrote. One is left whole when a delta is against it (its deltas' chains would grow),
	// when Base is not stored, is in parts or is as deep as a chain may be. The deltas must make
	// the blobs (the caller made and checked them): a read checks them still. Stores of other
	// replicas' imports go on meanwhile: PutPackedBlobs counts a base's depth in its own
	// transaction.
	ReplaceWithDeltas(ctx context.Context, rewrites []BlobRewrite) (int, error)

	// BlobDeltaWalk answers the head of repository's mainline from which the last walk that
	// offered its blobs to ReplaceWithDeltas went down (zero: none did); RecordBlobDeltaWalk
	// records it.
	BlobDeltaWalk(ctx context.Context, repository string) (plumbing.Hash, error)
	RecordBlobDeltaWalk(ctx context.Context, repository string, head plumbing.Hash) error

	// ReadStoredDeltas answers the blobs among ids kept as deltas (StoredPackDelta), as they
	// are kept: a pack carries them so, never made whole.
	ReadStoredDeltas(ctx context.Context, ids []plumbing.Hash) (map[plumbing.Hash]PackDelta, error)

	// MissingGitObjects answers the ids among ids that the store holds neither as a tree or
	// commit nor as a blob, in the order given.
	MissingGitObjects(ctx context.Context, ids []plumbing.Hash) ([]plumbing.Hash, error)

	// RecordShallowCommits records that the commits ids are, or are about to be, stored without
	// their parents: the boundary of a shallow history (UploadGitObjects' shallow). Every other
	// stored object names only stored objects, so these are the only places a stored history
	// may stop. One recorded already is left as it is.
	RecordShallowCommits(ctx context.Context, ids []plumbing.Hash) error

	// HasShallowCommits reports whether RecordShallowCommits ever recorded a commit: until it
	// did, every stored commit's history is whole.
	HasShallowCommits(ctx context.Context) (bool, error)

	// AcquireLease grants a lease on p.Paths (clean lease paths, validated by the caller) to
	// p.Holder for p.TTL, unless an ACTIVE, unexpired lease of another holder overlaps one of
	// them, comparing folds (repo.FoldOverlap: "Docs/" overlaps "docs/a", "café.txt" in NFC its
	// NFD and upper-case spellings): then a *LeaseConflictError (errors.Is ErrLeaseConflict)
	// naming the first such path, its lease, holder and expiry, each path as written. The
	// lease keeps p.Paths byte for byte. The grant takes the repository's next token in the same
	// transaction, so its token is larger than every earlier grant's. Unknown repository:
	// ErrNotFound.
	AcquireLease(ctx context.Context, p AcquireLeaseParams) (Lease, error)

	// RenewLease sets a lease's expiry to now + p.TTL, keeping its token. Refused with a
	// *LeaseStateError (errors.Is ErrFailedPrecondition) when the lease was released or broken,
	// when it expired and an overlapping lease was granted since, when p.Principal is not the
	// principal of its holder, or when p.FencingToken is given (non-zero) and is not its token.
	// Unknown lease: ErrNotFound.
	RenewLease(ctx context.Context, p RenewLeaseParams) (Lease, error)

	// ReleaseLease ends a lease (state RELEASED) with the same refusals as RenewLease, except
	// that releasing an expired lease that nobody superseded is allowed.
	ReleaseLease(ctx context.Context, p ReleaseLeaseParams) (Lease, error)

	// BreakLease ends any lease that is not released or broken (state BROKEN). A lease already
	// ended: *LeaseStateError. Unknown lease: ErrNotFound.
	BreakLease(ctx context.Context, leaseID string) (Lease, error)

	// GetLease answers a lease, or ErrNotFound.
	GetLease(ctx context.Context, leaseID string) (Lease, error)

	// ListLeases answers a repository's leases, newest (largest token) first. State is
	// reported as of now: an ACTIVE lease past its expiry is answered as LeaseExpired.
	ListLeases(ctx context.Context, p ListLeasesParams) (leases []Lease, nextPageToken string, err error)

	// LeaseSignal answers a channel closed after the next release or break, so an acquirer
	// waiting for a conflicting lease to go can look again.
	LeaseSignal() <-chan struct{}

	// Integrate, in one transaction: checks every edited path's lease (see IntegrateParams),
	// stores the blobs, and applies the edits to the mainline's git tree with RebaseGit, which
	// refuses with a *repo.ConflictError an edited file that changed since the base revision
	// and with a *repo.CollisionError a file that would be a directory too (nothing is stored
	// then). Then:
	//
	// Without a validation policy on the repository it stores the new trees, a revision
	// (parent = the mainline, author, change) and its mainline commit, creates the change
	// INTEGRATED (candidate_revision = integrated_revision = the new revision), and moves the
	// repository's mainline to it.
	//
	// With a policy it stores nothing but the blobs and the change, QUEUED, with p.Edits kept
	// for the gate's advance (InQueue), which builds the candidate when the change's turn comes; the mainline
	// does not move. The change takes the repository's next queue position inside the same
	// transaction, so queue order is commit order.
	//
	// A token refusal is a *IntegrateRefusal (errors.Is ErrFailedPrecondition); unknown
	// repository or base revision: ErrNotFound.
	Integrate(ctx context.Context, p IntegrateParams) (Change, error)

	// PushedChange answers the newest change made from the pushed git commit commit (40 hex;
	// IntegrateParams.PushedCommit) in repository, or ErrNotFound.
	PushedChange(ctx context.Context, repository, commit string) (Change, error)

	// SetMirror sets repository's forge mirror (state MirrorPending), or removes it when p.URL is
	// empty, and records repository.mirror_set (the URL and branch, never the credential).
	// Unknown repository: ErrNotFound.
	SetMirror(ctx context.Context, p SetMirrorParams) (Mirror, error)

	// GetMirror answers repository's forge mirror, or ErrNotFound when it has none.
	GetMirror(ctx context.Context, repository string) (Mirror, error)

	// ListMirrors answers every repository's forge mirror, by repository.
	ListMirrors(ctx context.Context) ([]Mirror, error)

	// RecordMirrorPush records the outcome of a push to a forge mirror, unless the mirror's URL
	// is no longer p.URL (it was set again meanwhile). A mirror that becomes MirrorDiverged
	// records repository.mirror_diverged (the URL and why).
	RecordMirrorPush(ctx context.Context, p MirrorPushParams) error

	// PushedCommits answers the commits (40 hex) of repository's newest limit changes made by
	// `git push`, newest first.
	PushedCommits(ctx context.Context, repository string, limit int) ([]string, error)

	// RevisionByCommit answers the mainline revision of repository whose commit is commit (40
	// hex), without its file list (Tree), or ErrNotFound.
	RevisionByCommit(ctx context.Context, repository, commit string) (Revision, error)

	// GetChange answers a change, or ErrNotFound. A QUEUED change's QueuePosition is the number
	// of QUEUED or VALIDATING changes of its repository ahead of it.
	GetChange(ctx context.Context, changeID string) (Change, error)

	// SetValidation replaces a repository's validation policy (nil: none) and answers the
	// repository. Unknown repository: ErrNotFound.
	SetValidation(ctx context.Context, repository string, validation []byte) (Repository, error)

	// PendingQueues answers the names of the repositories that have a QUEUED or VALIDATING
	// change, so a gate that restarts, or runs on another replica, finds the work left.
	PendingQueues(ctx context.Context) ([]string, error)

	// InQueue runs fn in one transaction that holds repository's integration queue: concurrent
	// calls for the same repository, from any replica, are serialized, and Integrate with them.
	// What fn did through tx is committed when it answers nil, and nothing of it when it answers
	// an error, which InQueue answers. fn decides (the gate's queue engine, gate.RunQueue); tx
	// only carries its decisions out. Unknown repository: ErrNotFound.
	InQueue(ctx context.Context, repository string, fn func(tx QueueTx) error) error

	// ListChanges answers a repository's changes, newest first.
	ListChanges(ctx context.Context, p ListChangesParams) (changes []Change, nextPageToken string, err error)

	// ApproveChange records that principal approves the change changeID, at the store's now,
	// unless an approval is recorded already (the first one stays), and records change.approved.
	// A change in ChangeAwaitingApproval goes back to ChangeQueued in its place in the queue. It
	// holds the change's queue (as InQueue does), so that an advance never parks a change whose
	// approval it did not see. A final change: ErrFailedPrecondition; unknown: ErrNotFound.
	ApproveChange(ctx context.Context, changeID, principal string) (Change, error)
}

// Repository is a repository as stored.
type Repository struct {
	Name           string
	Mainline       string // revision id
	MainlineCommit string // the mainline's git commit id (40 hex)
	Validation     []byte // JSON of the validation policy, or nil
	CreatedAt      time.Time
	// Shallow is the commits whose parents the repository's history does not hold (it was
	// imported from a shallow clone), sorted; none for a whole history.
	Shallow []plumbing.Hash
}

// CreateRepositoryParams are the inputs of CreateRepository.
type CreateRepositoryParams struct {
	Name       string
	Validation []byte
	CreatedBy  string        // principal name, the author of the first revision
	GitCommit  plumbing.Hash // zero: an empty first revision
	// Shallow is where GitCommit's history stops (the caller checked that it stops there and
	// nowhere else), kept as Repository.Shallow, sorted.
	Shallow []plumbing.Hash
}

// EncodeShallow answers a repository's shallow commits as the stores keep them: sorted, 40 hex
// digits each, separated by spaces ("" for none).
func EncodeShallow(ids []plumbing.Hash) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	slices.Sort(s)
	return strings.Join(slices.Compact(s), " ")
}

// DecodeShallow reads what EncodeShallow wrote.
func DecodeShallow(s string) ([]plumbing.Hash, error) {
	if s == "" {
		return nil, nil
	}
	fields := strings.Fields(s)
	ids := make([]plumbing.Hash, len(fields))
	for i, f := range fields {
		id, err := ParseGitID(f)
		if err != nil {
			return nil, fmt.Errorf("shallow commit %d: %w", i, err)
		}
		ids[i] = id
	}
	return ids, nil
}

// ListRepositoriesParams page ListRepositories.
type ListRepositoriesParams struct {
	Limit     int
	PageToken string
}

// Blob is content addressed by its digest.
type Blob struct {
	Digest  string
	Content []byte
}

// BlobUpload is a blob being sent in parts of PartBytes each (the last may be shorter).
type BlobUpload struct {
	ID        string // derived by the server from the principal, the digest and the size
	Principal string
	Digest    string // what the whole must hash to
	Size      uint64
	PartBytes uint64
	Received  uint64
	// HashState is the running hashes of the Received bytes, as the server encodes them, so
	// that any replica takes the next part without reading the earlier ones again.
	HashState []byte
	CreatedAt time.Time
}

// AppendBlobUploadParams is one part of an upload.
type AppendBlobUploadParams struct {
	ID        string
	Offset    uint64
	Content   []byte
	HashState []byte // the hashes after this part
	// Complete, set on the last part (Offset+len(Content) == Size, digest checked by the
	// caller), stores the blob.
	Complete *CompletedBlob
}

// CompletedBlob is what the store keeps of a blob sent in parts besides the parts.
type CompletedBlob struct {
	Digest string
	GitID  plumbing.Hash
}

// Revision is one state of a repository's files.
type Revision struct {
	ID         string
	Repository string
	Parent     string // "" for the first
	ChangeID   string // "" for the first
	Holder     string
	Tree       repo.Tree // GetRevision only
	TreeDigest string    // sha256 of Tree's encoding; GetRevision only
	GitTree    string    // the revision's git tree id (40 hex)
	GitCommit  string    // its mainline commit id, "" for a candidate not integrated
	CreatedAt  time.Time
}

// LeaseState is where a lease is in its life.
type LeaseState string

// The lease states of api.md. LeaseExpired is never stored: it is an ACTIVE lease read after
// its expiry.
const (
	LeaseActive   LeaseState = "active"
	LeaseReleased LeaseState = "released"
	LeaseExpired  LeaseState = "expired"
	LeaseBroken   LeaseState = "broken"
)

// Lease is an exclusive lease on paths of a repository.
type Lease struct {
	ID           string
	Repository   string
	Paths        []string
	Holder       string // "<principal>|<label>"
	FencingToken uint64
	State        LeaseState
	AcquiredAt   time.Time
	ExpiresAt    time.Time
	EndedAt      time.Time // zero unless released or broken
}

// AcquireLeaseParams are the inputs of AcquireLease.
type AcquireLeaseParams struct {
	Repository string
	Paths      []string // clean, deduplicated
	Holder     string
	TTL        time.Duration
	// MaxLivePaths, when not 0, bounds the paths the holder's principal holds in live leases
	// (active, not expired) of the repository, these included: a grant past it is a
	// *LeaseCapError, checked under the repository's lock.
	MaxLivePaths int
}

// RenewLeaseParams are the inputs of RenewLease.
type RenewLeaseParams struct {
	LeaseID      string
	Principal    string // the caller; must be the holder's principal unless Admin
	Admin        bool
	FencingToken uint64
	TTL          time.Duration
	// MaxAge, when not 0, is the age (since its grant) past which a lease is not renewed
	// (*LeaseAgeError), and which a renewal does not take it beyond (RenewedExpiry).
	MaxAge time.Duration
}

// ReleaseLeaseParams are the inputs of ReleaseLease.
type ReleaseLeaseParams struct {
	LeaseID      string
	Principal    string
	Admin        bool
	FencingToken uint64
}

// ListLeasesParams filter and page ListLeases.
type ListLeasesParams struct {
	Repository   string
	Holder       string // exact holder, or "<principal>|" for every label of a principal; "" = all
	IncludeEnded bool   // also released, broken and expired leases
	Limit        int
	PageToken    string
}

// ChangeState is where a change is in its life.
type ChangeState string

// The change states of api.md.
const (
	ChangeQueued     ChangeState = "queued"
	ChangeValidating ChangeState = "validating"
	ChangeIntegrated ChangeState = "integrated"
	ChangeRejected   ChangeState = "rejected"
	ChangeCancelled  ChangeState = "cancelled"
	// ChangeAwaitingApproval: validated, but it touches a protected path and no reviewer
	// approved it; out of the queue until ApproveChange queues it again.
	ChangeAwaitingApproval ChangeState = "awaiting_approval"
)

// Terminal reports whether a change in this state is final.
func (s ChangeState) Terminal() bool {
	return s == ChangeIntegrated || s == ChangeRejected || s == ChangeCancelled
}

// Change is a set of edits submitted by Integrate.
type Change struct {
	ID                 string
	Repository         string
	State              ChangeState
	BaseRevision       string
	CandidateRevision  string
	IntegratedRevision string
	Holder             string // "<principal>|<label>"
	Message            string
	Paths              []string
	JobID              string
	AttestationDigest  string
	Reason             string
	CreatedAt          time.Time
	UpdatedAt          time.Time
	QueuePosition      int // GetChange only: QUEUED or VALIDATING changes ahead of a QUEUED one
	// CandidateID is the live candidate a VALIDATING change is in.
	CandidateID string
	// BatchLimit, when not 0, bounds the batch the change may be validated in: a batch it was
	// in failed, and the queue is looking for the changes that broke it.
	BatchLimit int
	// ApprovedBy is the principal who approved the change (ApproveChange), "" for none, and
	// ApprovedAt when.
	ApprovedBy string
	ApprovedAt time.Time
	// TaskID and TaskClaimNumber name the task claim the change carries (IntegrateParams), ""
	// and 0 for none.
	TaskID          string
	TaskClaimNumber uint64
}

// TaskClaim answers the trailer form of the change's task claim, "tsk_…#3", or "".
func (c Change) TaskClaim() string {
	if c.TaskID == "" {
		return ""
	}
	return fmt.Sprintf("%s#%d", c.TaskID, c.TaskClaimNumber)
}

// IntegrateParams are the inputs of Integrate.
//
// The lease check, for every path in Paths: among the leases whose token is in FencingTokens,
// the one with the largest token that is held by Holder and covers the path (repo.FoldCovers)
// must exist (else "not leased"), must not be released or broken, and no lease with a larger
// token (of anyone, in any state) may overlap the path (repo.FoldOverlap; else "stale,
// superseded by token N"). Expiry alone does not refuse. Paths are compared by their folds, as
// a case-insensitive, normalization-insensitive checkout would: a token of a lease on one
// spelling of a name is the token of every other. Every backend applies the rule with
// CheckIntegrateLeases, so the refusals are the same whichever stores the leases.
type IntegrateParams struct {
	Repository    string
	BaseRevision  string
	Holder        string
	FencingTokens []uint64
	Paths         []string // the edited paths, sorted, unique
	Message       string
	// Blobs are stored in the same transaction (content sent inline with the request).
	Blobs []Blob
	// Edits are the change's edits, kept with a QUEUED change (repository with a validation
	// policy) so that the gate's advance can rebuild it on a later mainline.
	Edits []repo.FileEdit
	// PushedCommit, for a change made by `git push`, is the pushed commit (40 hex) it was made
	// from: PushedChange finds the change by it, in the same transaction's write.
	PushedCommit string
	// TaskID and TaskClaimNumber, when TaskID is set, name a task claim of Holder that must be
	// current (CheckTaskClaim) in the same transaction, else a *TaskStateError; the change keeps
	// it, and landing it (here, without a policy; by the gate otherwise) finishes the task
	// (FinishTask's rule). A task of another repository: ErrNotFound.
	TaskID          string
	TaskClaimNumber uint64
}

// ListChangesParams page ListChanges.
type ListChangesParams struct {
	Repository string
	Limit      int
	PageToken  string
	// Queued answers only the QUEUED changes, oldest first (the queue's waiting ones), one page.
	Queued bool
	// AwaitingApproval answers only the AWAITING_APPROVAL changes, oldest first, one page.
	AwaitingApproval bool
}

// ErrLeaseConflict: a lease of another holder overlaps.
var ErrLeaseConflict = errors.New("lease conflict")

// LeaseConflictError names the lease that stands in the way of a grant.
type LeaseConflictError struct {
	Path       string // the requested path
	LeaseID    string
	LeasePath  string // the conflicting lease's path
	Holder     string
	AcquiredAt time.Time // zero when the store did not say
	ExpiresAt  time.Time
}

func (e *LeaseConflictError) Error() string {
	since := ""
	if !e.AcquiredAt.IsZero() {
		since = " since " + e.AcquiredAt.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%s is leased to %s (lease %s on %s)%s until %s", e.Path, e.Holder, e.LeaseID, e.LeasePath,
		since, e.ExpiresAt.UTC().Format(time.RFC3339))
}

// ErrResourceExhausted: a principal asked for more than its share.
var ErrResourceExhausted = errors.New("resource exhausted")

// LeaseCapError refuses a grant that would take a principal past the live leased paths it may
// hold in a repository (AcquireLeaseParams.MaxLivePaths).
type LeaseCapError struct {
	Principal  string
	Repository string
	Held       int // paths its live leases of the repository hold now
	Asked      int
	Max        int
}

func (e *LeaseCapError) Error() string {
	return fmt.Sprintf("%s holds %d leased paths of %s, and %d more would pass the %d a principal may hold at once: "+
		"release what you no longer need (ag lease release) first", e.Principal, e.Held, e.Repository, e.Asked, e.Max)
}

// Is makes errors.Is(err, ErrResourceExhausted) true.
func (e *LeaseCapError) Is(target error) bool { return target == ErrResourceExhausted }

// LeaseAgeError refuses to renew a lease older than RenewLeaseParams.MaxAge.
type LeaseAgeError struct {
	LeaseID    string
	AcquiredAt time.Time
	MaxAge     time.Duration
}

func (e *LeaseAgeError) Error() string {
	return fmt.Sprintf("lease %s was granted at %s, %s ago or more: a lease is renewed for at most %s, so that others get their turn; "+
		"release it, and acquire again when you must", e.LeaseID, e.AcquiredAt.UTC().Format(time.RFC3339), e.MaxAge, e.MaxAge)
}

// Is makes errors.Is(err, ErrFailedPrecondition) true.
func (e *LeaseAgeError) Is(target error) bool { return target == ErrFailedPrecondition }

// RenewedExpiry answers when lease l expires once renewed at now for ttl, or why it may not be:
// past maxAge (not 0) since its grant it is not renewed, and a renewal ends at that age.
func RenewedExpiry(l Lease, now time.Time, ttl, maxAge time.Duration) (time.Time, error) {
	expires := now.Add(ttl)
	if maxAge <= 0 {
		return expires, nil
	}
	end := l.AcquiredAt.Add(maxAge)
	if !now.Before(end) {
		return time.Time{}, &LeaseAgeError{LeaseID: l.ID, AcquiredAt: l.AcquiredAt, MaxAge: maxAge}
	}
	if expires.After(end) {
		expires = end
	}
	return expires, nil
}

// Is makes errors.Is(err, ErrLeaseConflict) true.
func (e *LeaseConflictError) Is(target error) bool { return target == ErrLeaseConflict }

// LeaseStateError refuses a renew, release or break of a lease that is not the caller's to
// change.
type LeaseStateError struct {
	LeaseID string
	Msg     string
}

func (e *LeaseStateError) Error() string { return "lease " + e.LeaseID + ": " + e.Msg }

// Is makes errors.Is(err, ErrFailedPrecondition) true.
func (e *LeaseStateError) Is(target error) bool { return target == ErrFailedPrecondition }

// IntegrateRefusal names the edited path whose lease check failed and why.
type IntegrateRefusal struct {
	Path   string
	Reason string // "not leased by alice|w1 among the given tokens", "lease 12 was released", "token 12 is stale: superseded by token 15 granted to bob|w2"
}

func (e *IntegrateRefusal) Error() string { return e.Path + ": " + e.Reason }

// Is makes errors.Is(err, ErrFailedPrecondition) true.
func (e *IntegrateRefusal) Is(target error) bool { return target == ErrFailedPrecondition }
