// Package store defines the persistence contract of ag: one interface, implemented by the SQLite
// backend (internal/store/sqlite) and the PostgreSQL backend (internal/store/postgres), and
// checked by one conformance suite (internal/store/storetest) that both must pass. It owns data
// operations only: the integration queue's decisions are the gate's (internal/gate), which acts
// through the transaction InQueue hands it (QueueTx). It imports neither the wire contract
// (agwp), the gate, the server nor the SDK.
//
// Every method is one transaction. Methods that change a claimed job check the claim inside the
// same conditional UPDATE that applies the change (ADR-0012), so a refused request changes
// nothing.
package store

import (
	"context"
	"time"

	"github.com/ag-coord/ag/internal/clock"
)

// Store is the persistence contract. Implementations are safe for concurrent use.
type Store interface {
	RepoStore
	AuditStore
	TaskStore

	// EnqueueJob inserts a QUEUED job with run_after = now + Delay. When UniqueKey is set and a
	// job with that key is QUEUED or CLAIMED, that job is answered instead and existing is true.
	EnqueueJob(ctx context.Context, p EnqueueJobParams) (job Job, existing bool, err error)

	// ClaimJob takes, in one statement, the best claimable job: QUEUED with run_after <= now, or
	// CLAIMED with lease_expires_at <= now (an expired claim goes to the next claimer), whose
	// kind is among Kinds (empty = any) and that is not cancel_requested; ordered by priority
	// desc, then run_after, then creation. It sets CLAIMED, claimed_by = Worker, the lease, and
	// attempts = attempts + 1. Before claiming it settles expired claims as ExpireJobs does, so a
	// job whose expired claim used its last attempt becomes FAILED ("lease expired") instead of
	// being claimed. Answers nil, nil when nothing is claimable.
	ClaimJob(ctx context.Context, p ClaimJobParams) (*Job, error)

	// ClaimJobs is ClaimJob for up to p.Max jobs (0 or 1: one) in one transaction: it takes the
	// p.Max best claimable jobs, each with its own claim (attempts + 1) and its own job.claimed
	// event, and answers them best first, as if ClaimJob had been called p.Max times in a row.
	// Answers an empty slice when nothing is claimable.
	ClaimJobs(ctx context.Context, p ClaimJobParams) ([]Job, error)

	// HeartbeatJob extends the lease of a claim to now + Lease (0 = the claim's own lease) and
	// records Progress when it is not empty. It is applied only when the job is CLAIMED by
	// Worker and, when FencingToken is not 0, attempts == FencingToken. An expired lease that
	// nobody claimed again is still the worker's. Refusals: ErrNotFound (no such job) or a
	// *LostClaimError (errors.Is ErrLostClaim).
	HeartbeatJob(ctx context.Context, p HeartbeatJobParams) (Job, error)

	// CompleteJob moves a claim's job to COMPLETED with its result, output and, when given, the
	// attestation, which is stored (addressed by its digest) only after the claim check passed,
	// in the same transaction. Same claim check and refusals as HeartbeatJob; besides, a job of
	// kind KindValidate without an attestation is refused with ErrAttestationRequired (checked
	// in the same conditional update, so it costs nothing to other completions).
	CompleteJob(ctx context.Context, p CompleteJobParams) (Job, error)

	// CompleteJobs applies each of ps as CompleteJob would, each with its own claim check, and
	// answers one outcome per completion, in the order of ps: the completed job, or the refusal
	// CompleteJob would have answered. A refused completion changes nothing and does not stop the
	// others. The job ids must be distinct. The error is for the batch as a whole (the database
	// failed), and then no completion was applied.
	CompleteJobs(ctx context.Context, ps []CompleteJobParams) ([]CompleteJobOutcome, error)

	// FailJob records a failed attempt of a claim. The job becomes CANCELLED when
	// cancel_requested (whatever else holds: the job was cancelled); else FAILED when Final is
	// set or attempts >= max_attempts; otherwise QUEUED again with
	// run_after = now + RetryDelay (nil: Backoff(attempts)) and claimed_by cleared. Same claim
	// check and refusals as HeartbeatJob.
	FailJob(ctx context.Context, p FailJobParams) (Job, error)

	// CancelJob cancels a QUEUED job at once (CANCELLED) and marks a CLAIMED one
	// cancel_requested, which its worker sees on its next heartbeat. A finished job is refused
	// with a *StateError (errors.Is ErrFailedPrecondition); an unknown one with ErrNotFound.
	CancelJob(ctx context.Context, jobID string) (Job, error)

	// GetJob answers one job, or ErrNotFound.
	GetJob(ctx context.Context, jobID string) (Job, error)

	// ListJobs answers jobs newest first. NextPageToken is empty on the last page.
	ListJobs(ctx context.Context, p ListJobsParams) (jobs []Job, nextPageToken string, err error)

	// CountJobs answers the number of jobs in each state (states with none may be absent).
	CountJobs(ctx context.Context) (map[JobState]int64, error)

	// ExpireJobs settles claims whose lease expired and that cannot be claimed again:
	// CANCELLED when cancel_requested, else FAILED with last_error "lease expired" when
	// attempts >= max_attempts. It answers how many jobs it settled.
	ExpireJobs(ctx context.Context) (int, error)

	// JobSignal answers a channel that is closed after the next commit that may have made a job
	// claimable (an enqueue, a retry, or, on PostgreSQL, such a commit by another replica).
	// A claimer takes the channel before it looks for a job, so it cannot miss a wake-up.
	JobSignal() <-chan struct{}

	// GetAttestation answers a stored DSSE envelope by its digest, or ErrNotFound.
	GetAttestation(ctx context.Context, digest string) (Attestation, error)

	// BootstrapAdmin creates principal p.Name with role admin and the given token, only when the
	// store has no principal at all; created reports whether it did. Replicas starting together
	// create it once.
	BootstrapAdmin(ctx context.Context, p CreatePrincipalParams) (created bool, err error)

	// CreatePrincipal creates a principal and its first token. A taken name: ErrAlreadyExists.
	CreatePrincipal(ctx context.Context, p CreatePrincipalParams) (Principal, Token, error)

	// GetPrincipal answers a principal by name, or ErrNotFound.
	GetPrincipal(ctx context.Context, name string) (Principal, error)

	// ListPrincipals answers principals ordered by name.
	ListPrincipals(ctx context.Context, p ListPrincipalsParams) (principals []Principal, nextPageToken string, err error)

	// DisablePrincipal disables a principal: its tokens stop authenticating. Idempotent.
	DisablePrincipal(ctx context.Context, name string) (Principal, error)

	// CreateToken adds a token to an existing principal (ErrNotFound otherwise).
	CreateToken(ctx context.Context, p CreateTokenParams) (Token, error)

	// RevokeToken revokes a token by id (ErrNotFound when unknown). Idempotent: revoking twice
	// keeps the first revocation time.
	RevokeToken(ctx context.Context, tokenID string) (Token, error)

	// Authenticate answers the principal and token whose sha256 is tokenHash. Unknown or
	// revoked tokens, and tokens of disabled principals: ErrNotFound.
	Authenticate(ctx context.Context, tokenHash []byte) (Principal, Token, error)

	// RegisterWorkerKey records a worker's Ed25519 public key. Registering the same key for the
	// same principal again answers the stored key; a key registered by another principal is
	// ErrAlreadyExists.
	RegisterWorkerKey(ctx context.Context, p RegisterWorkerKeyParams) (WorkerKey, error)

	// ListWorkerKeys answers the keys registered by a principal, oldest first.
	ListWorkerKeys(ctx context.Context, principal string) ([]WorkerKey, error)

	// Ready answers nil when the store is reachable and its schema is the one this build knows.
	Ready(ctx context.Context) error

	// Close releases the store's connections and background work.
	Close() error
}

// Options configure a backend.
type Options struct {
	// Clock, when set, is the time every query uses. When nil, SQLite uses the system clock and
	// PostgreSQL uses the database's now(): the database is the clock that replicas share.
	Clock clock.Clock
	// GitEmailDomain is the domain of the e-mail addresses in the commits the store writes;
	// DefaultGitEmailDomain when empty.
	GitEmailDomain string
}

// JobState is where a job is in its life. The values are what the stores keep.
type JobState string

// The job states of design.md.
const (
	JobQueued    JobState = "queued"
	JobClaimed   JobState = "claimed"
	JobCompleted JobState = "completed"
	JobFailed    JobState = "failed"
	JobCancelled JobState = "cancelled"
)

// JobStates are every job state, in the order of a job's life.
var JobStates = []JobState{JobQueued, JobClaimed, JobCompleted, JobFailed, JobCancelled}

// Terminal reports whether a job in this state is finished for good.
func (s JobState) Terminal() bool {
	return s == JobCompleted || s == JobFailed || s == JobCancelled
}

// Job is a job as stored.
type Job struct {
	ID                string
	Kind              string
	State             JobState
	Payload           []byte // JSON object, or nil
	Priority          int32
	ClaimNumber       uint32        // the claims made so far, so the current claim's number (ADR-0012); the API's attempts
	MaxAttempts       uint32        // the most claims the job gets
	Holder            string        // the holder of the claim, "<principal>|<label>" (the API's claimed_by); kept after COMPLETED/FAILED, cleared on retry
	Lease             time.Duration // lease length of the current claim
	LeaseExpiresAt    time.Time     // zero unless CLAIMED
	RunAfter          time.Time
	CreatedAt         time.Time
	UpdatedAt         time.Time
	FinishedAt        time.Time // zero unless terminal
	LastError         string
	Result            []byte // JSON object, or nil
	Output            string
	OutputDigest      string
	AttestationDigest string
	CancelRequested   bool
	Progress          string
	EnqueuedBy        string // principal name
	UniqueKey         string
}

// EnqueueJobParams are the inputs of EnqueueJob, already validated.
type EnqueueJobParams struct {
	Kind        string
	Payload     []byte // JSON object, or nil
	Priority    int32
	MaxAttempts uint32 // > 0
	Delay       time.Duration
	UniqueKey   string
	EnqueuedBy  string
}

// ClaimJobParams are the inputs of ClaimJob and ClaimJobs.
type ClaimJobParams struct {
	Holder string // "<principal>|<label>"
	Kinds  []string
	Lease  time.Duration
	Max    int // ClaimJobs: the most jobs to claim; 0 = 1. ClaimJob ignores it.
}

// HeartbeatJobParams are the inputs of HeartbeatJob.
type HeartbeatJobParams struct {
	JobID       string
	Holder      string
	ClaimNumber uint32 // 0 = not given
	Lease       time.Duration
	Progress    string
	Output      string // "" = unchanged
}

// CompleteJobParams are the inputs of CompleteJob.
type CompleteJobParams struct {
	JobID        string
	Holder       string
	ClaimNumber  uint32
	Result       []byte
	Output       string
	OutputDigest string
	Attestation  *Attestation // nil: none
}

// CompleteJobOutcome is what CompleteJobs answers for one completion: Job when it was applied,
// else Err, the refusal CompleteJob would have answered (ErrNotFound, a *LostClaimError,
// ErrAttestationRequired).
type CompleteJobOutcome struct {
	Job Job
	Err error
}

// FailJobParams are the inputs of FailJob.
type FailJobParams struct {
	JobID       string
	Holder      string
	ClaimNumber uint32
	Error       string
	Output      string
	RetryDelay  *time.Duration // nil: Backoff(attempts)
	Final       bool
}

// ListJobsParams filter and page ListJobs.
type ListJobsParams struct {
	States    []JobState
	Kinds     []string
	Holder    string // exact "<principal>|<label>", or "<principal>|" for every label; "" = any
	Limit     int    // 1..1000
	PageToken string
}

// Attestation is a stored DSSE envelope.
type Attestation struct {
	Digest    string // "sha256:<hex>" of Envelope
	Envelope  []byte // the envelope's canonical bytes
	JobID     string
	CreatedAt time.Time
}

// Role decides what a principal may call.
type Role string

// The roles of api.md.
const (
	RoleAdmin  Role = "admin"
	RoleAgent  Role = "agent"
	RoleWorker Role = "worker"
	RoleReader Role = "reader"
	// RoleReviewer reads, and approves changes to a policy's protected paths.
	RoleReviewer Role = "reviewer"
)

// Principal is an authenticated identity.
type Principal struct {
	ID        string
	Name      string
	Role      Role
	Disabled  bool
	CreatedAt time.Time
}

// Token is a bearer token's record; the secret itself is never stored, only its sha256.
type Token struct {
	ID        string
	Principal string // name
	CreatedAt time.Time
	RevokedAt time.Time // zero while valid
}

// CreatePrincipalParams are the inputs of CreatePrincipal and BootstrapAdmin.
type CreatePrincipalParams struct {
	Name      string
	Role      Role
	TokenID   string
	TokenHash []byte // sha256 of the token
}

// CreateTokenParams are the inputs of CreateToken.
type CreateTokenParams struct {
	Principal string
	TokenID   string
	TokenHash []byte
}

// ListPrincipalsParams page ListPrincipals.
type ListPrincipalsParams struct {
	Limit     int
	PageToken string
}

// WorkerKey is a registered Ed25519 public key.
type WorkerKey struct {
	KeyID     string // "sha256:<hex>" of PublicKey
	Principal string
	PublicKey []byte
	CreatedAt time.Time
}

// RegisterWorkerKeyParams are the inputs of RegisterWorkerKey.
type RegisterWorkerKeyParams struct {
	KeyID     string
	Principal string
	PublicKey []byte
}
