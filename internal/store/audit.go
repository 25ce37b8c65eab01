package store

import (
	"context"

	"github.com/ag-coord/ag/internal/audit"
)

// AuditStore keeps the audit log: every state change writes an event in its own transaction
// (a plain insert: writers never wait on the chain), and SealAudit later gives the events
// their place in the hash chain and the Merkle tree, in batches, under a lock on the log's
// head that serializes sealers on every replica. Store embeds it.
//
// Which methods write which events (Action, Subject, Details keys):
//
//	CreatePrincipal, BootstrapAdmin principal.created   principal/<name>   role
//	DisablePrincipal               principal.disabled  principal/<name>   (only when it was enabled)
//	CreatePrincipal, CreateToken, BootstrapAdmin token.created token/<id>   principal
//	RevokeToken                    token.revoked       token/<id>         principal (only the first time)
//	RegisterWorkerKey              worker_key.registered worker_key/<key id> principal (only when new)
//	EnqueueJob                     job.enqueued        job/<id>           kind, priority, max_attempts, unique_key (when set); not when an existing job is answered
//	ClaimJob                       job.claimed         job/<id>           claim (the claim number), lease_expires_at
//	CompleteJob                    job.completed       job/<id>           claim, output_digest, attestation_digest (when attested)
//	FailJob                        job.failed          job/<id>           claim, error, state (queued: retried; failed; cancelled)
//	CancelJob                      job.cancelled | job.cancel_requested  job/<id>
//	ExpireJobs, ClaimJob's settling job.expired       job/<id>           claim, state (failed or cancelled)
//	AcquireLease                   lease.granted       lease/<id>         repository, paths, token, expires_at
//	RenewLease                     lease.renewed       lease/<id>         token, expires_at
//	ReleaseLease                   lease.released      lease/<id>         token
//	BreakLease                     lease.broken        lease/<id>         token
//	CreateRepository               repository.created  repository/<name>  git_commit and shallow (an imported history's head and where it stops, when set), validation (the policy object, when set)
//	SetValidation                  repository.validation_set repository/<name> validation (object or null)
//	SetMirror                      repository.mirror_set repository/<name>  url (or null: removed), branch; never the credential
//	RecordMirrorPush               repository.mirror_diverged repository/<name> url, reason (once, as the mirror diverges)
//	Integrate, gate advance        change.integrated   change/<id>        repository, revision, paths, attestation_digest (when validated)
//	Integrate                      change.queued       change/<id>        repository, paths
//	gate advance                   change.validating   change/<id>        candidate_revision, job
//	gate advance                   change.rejected     change/<id>        reason, attestation_digest (of a signed FAILED run)
//	gate advance                   change.cancelled    change/<id>        reason
//	gate advance                   change.requeued     change/<id>        reason (its candidate was superseded or split)
//	gate advance                   change.awaiting_approval change/<id>   attestation_digest, candidate, protected_paths
//	ApproveChange                  change.approved     change/<id>        approved_by, state (queued when it waited; only the first approval)
//	gate advance                   candidate.built     candidate/<id>     changes, job, parent_revision, revision
//	gate advance                   candidate.passed    candidate/<id>     attestation_digest, job
//	gate advance                   candidate.failed    candidate/<id>     job, reason, attestation_digest (of a signed FAILED run)
//	gate advance                   candidate.superseded candidate/<id>    job, reason (its job is cancelled: job.cancelled or job.cancel_requested)
//	gate advance                   candidate.split     candidate/<id>     changes, into (the largest part)
//	CreateTask                     task.created        task/<id>          repository, priority, depends_on (when any)
//	ClaimTask                      task.claimed        task/<id>          claim (the claim number), holder, expires_at
//	RenewTaskClaim                 task.renewed        task/<id>          claim, expires_at
//	ReleaseTaskClaim               task.released       task/<id>          claim
//	ReleaseTaskClaim (done)        task.done           task/<id>          claim
//	Integrate, gate (FinishTask)   task.done           task/<id>          claim, change (the change that finished it)
//	CancelTask                     task.cancelled      task/<id>          reason
//	SendMessage                    message.sent        message/<id>       repository, address (holder/<h>, task/<id>, change/<id> or all), recipient, size (bytes); never the text
//
// Heartbeats are not audited. A refused request writes nothing. The principal and holder of an
// event are the worker or holder the method was given when it has one ("<principal>|<label>":
// Principal = the part before "|", Holder = the whole), else ActorOf(ctx); actions the server
// takes by itself (expiry, the integration queue, including the validate jobs it enqueues)
// have Principal SystemPrincipal. A FailJob's actor is its worker parameter (a retry clears
// claimed_by).
type AuditStore interface {
	// SealAudit seals the oldest unsealed events (by insertion), p.Limit of them or a few more:
	// the events one transaction wrote are stored together (auditrecord.go) and sealed
	// together, so a seal takes whole transactions' events until it has p.Limit. It calls
	// p.Seal with the head, the pending events and a reader of the Merkle tree's stored hashes,
	// then stores what Seal answers (each event's seq, prev hash and hash; the new tree hashes;
	// the new head; the checkpoint) only if the head is still the one Seal continued, in one
	// transaction. Both stores compute the seal outside any write (SQLite outside its one
	// writer, PostgreSQL outside any transaction) and check the head when they store it,
	// computing again if another sealer moved it. It answers how many events it sealed (0: nothing pending, and
	// p.Seal is not called). p.Seal may be called more than once.
	SealAudit(ctx context.Context, p SealAuditParams) (int, error)

	// AuditSealBatch answers how many events a seal of this store should take under load:
	// SealAudit's limit when p.Limit is 0. Each seal costs a few statements however many
	// events it takes, and what a large seal holds up differs between the stores.
	AuditSealBatch() int

	// ListAuditEvents answers sealed events with seq > p.AfterSeq, by seq, at most p.Limit.
	ListAuditEvents(ctx context.Context, p ListAuditEventsParams) ([]AuditEvent, error)

	// LatestAuditCheckpoint answers the newest checkpoint, or ErrNotFound before the first seal.
	LatestAuditCheckpoint(ctx context.Context) (AuditCheckpoint, error)

	// ReadAuditHashes answers the Merkle tree's stored hashes at indexes (tlog.StoredHashIndex
	// numbering), in order; an index not stored is an error.
	ReadAuditHashes(ctx context.Context, indexes []int64) ([][]byte, error)

	// AuditSignal answers a channel closed after the next commit of this store that wrote
	// audit events, so a sealer need not poll while the server is busy.
	AuditSignal() <-chan struct{}
}

// SystemPrincipal is the principal of the events the server causes by itself.
const SystemPrincipal = "ag"

// Actor is who causes a state change.
type Actor struct {
	Principal string
	Holder    string // "<principal>|<label>" when acting under a label
}

type actorKey struct{}

// WithActor answers ctx carrying the actor that store methods record in audit events.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorOf answers the actor ctx carries, or the server itself.
func ActorOf(ctx context.Context) Actor {
	if a, ok := ctx.Value(actorKey{}).(Actor); ok && a.Principal != "" {
		return a
	}
	return Actor{Principal: SystemPrincipal}
}

// The audit log's model lives in internal/audit, which clients read without the store; the
// store keeps it under these names.
type (
	AuditEvent      = audit.Event
	AuditHead       = audit.Head
	AuditCheckpoint = audit.StoredCheckpoint
	AuditSeal       = audit.Seal
)

// SealAuditParams are the inputs of SealAudit.
type SealAuditParams struct {
	Limit int
	// Seal computes a seal; hashes reads stored tree hashes as of the head Seal is given. It
	// must not modify pending.
	Seal func(head AuditHead, pending []AuditEvent, hashes func(indexes []int64) ([][]byte, error)) (AuditSeal, error)
}

// ListAuditEventsParams page ListAuditEvents.
type ListAuditEventsParams struct {
	AfterSeq uint64
	Limit    int // 1..10000
}
