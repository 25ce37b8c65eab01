package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/jackc/pgx/v5"

	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// ---- the integration queue ----
//
// A repository's queue is its QUEUED and VALIDATING changes in seq order, at most one of them
// VALIDATING. Every step of it (Integrate queueing a change, AdvanceQueue settling or starting
// a validation) runs under the repository's row lock, so replicas advancing the same queue
// take turns, and each sees what the one before it committed.

// setValidationSQL replaces the policy and records the repository.validation_set event ($4
// and $5 the actor, $6 the details).
var setValidationSQL = q(`WITH r AS (
	UPDATE repositories SET validation = $3 WHERE name = $2 RETURNING ` + repositoryCols + `),
ev AS (` + auditRecord(`SELECT $4, $5, 'repository.validation_set', 'repository/' || r.name, $6 FROM r`) + `)
SELECT * FROM r`)

// SetValidation replaces a repository's validation policy.
func (db *DB) SetValidation(ctx context.Context, repository string, validation []byte) (store.Repository, error) {
	var r store.Repository
	actor := store.ActorOf(ctx)
	err := db.pool.QueryRow(ctx, setValidationSQL, db.now(), repository, bytesOrNull(validation), actor.Principal, actor.Holder,
		details(map[string]any{"validation": jsonValue(validation)})).Scan(repositoryDest(&r)...)
	if err != nil {
		return store.Repository{}, mapErr("repository "+repository, err)
	}
	db.audited()
	finishRepository(&r)
	return r, nil
}

// pendingQueuesSQL reads changes_queue alone, whose predicate is its condition.
const pendingQueuesSQL = `SELECT DISTINCT repository FROM changes WHERE state IN ('queued', 'validating') ORDER BY repository`

// PendingQueues answers the repositories that have a QUEUED or VALIDATING change, by name.
func (db *DB) PendingQueues(ctx context.Context) ([]string, error) {
	rows, err := db.pool.Query(ctx, pendingQueuesSQL)
	if err != nil {
		return nil, mapErr("pending queues", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, mapErr("pending queues", err)
	}
	return names, nil
}

// advanceLockSQL holds the repository for AdvanceQueue, as integrateLockSQL does for Integrate
// (the row alone, for the same reason), and reads what the advance starts from.
const advanceLockSQL = `SELECT mainline, validation FROM repositories WHERE name = $1 FOR UPDATE`

// queueHeadSQL answers the oldest change of the repository $1 in state, with its edits. The
// state is a literal so that the search walks changes_queue, whose predicate it implies.
func queueHeadSQL(state store.ChangeState) string {
	return `SELECT ` + changeCols + `, edits FROM changes
	WHERE repository = $1 AND state = '` + string(state) + `' ORDER BY seq LIMIT 1`
}

var (
	validatingHeadSQL = queueHeadSQL(store.ChangeValidating)
	queuedHeadSQL     = queueHeadSQL(store.ChangeQueued)
)

// setChangeSQL writes what a step of the queue changes in a change, records its event ($9 the
// action, $10 and $11 the actor, $12 the details) and answers the change as it now is.
var setChangeSQL = q(`WITH c AS (
	UPDATE changes SET
		state = $3, candidate_revision = $4, integrated_revision = $5, job_id = $6, attestation_digest = $7,
		reason = $8, updated_at = {now}
	WHERE id = $2
	RETURNING ` + changeCols + `),
ev AS (` + auditRecord(`SELECT $10, $11, $9, 'change/' || c.id, $12 FROM c`) + `)
SELECT ` + changeCols + ` FROM c`)

// storeRevisionSQL stores a built revision and answers its time.
var storeRevisionSQL = q(`INSERT INTO revisions (id, repository, parent, change_id, author, git_tree, git_commit, created_at)
VALUES ($2, $3, $4, $5, $6, $7, $8, {now})
RETURNING created_at`)

// moveMainlineSQL is the compare-and-swap of the mainline from $2 to $3. Under the lock it
// cannot fail; the condition keeps the rule in the statement that applies it.
const moveMainlineSQL = `UPDATE repositories SET mainline = $3 WHERE name = $1 AND mainline = $2`

// advance is one AdvanceQueue transaction.
type advance struct {
	db         *DB
	tx         pgx.Tx
	p          store.AdvanceQueueParams
	mainline   string
	validation []byte
	changed    []store.Change
	enqueued   bool
}

// integratedDetails are the details of a change.integrated event of c, integrated as rev.
func integratedDetails(c store.Change, rev string) map[string]any {
	paths := c.Paths
	if paths == nil {
		paths = []string{}
	}
	d := map[string]any{"repository": c.Repository, "revision": rev, "paths": paths}
	if c.AttestationDigest != "" {
		d["attestation_digest"] = c.AttestationDigest
	}
	return d
}

// AdvanceQueue settles the repository's VALIDATING change, then gives the QUEUED ones their
// turn until one is VALIDATING or none is left, in one transaction under the repository's lock.
// Its events, the validation job's enqueue too, are the server's own (store.SystemPrincipal).
func (db *DB) AdvanceQueue(ctx context.Context, p store.AdvanceQueueParams) ([]store.Change, error) {
	if p.Decide == nil || p.Job == nil {
		return nil, errors.New("postgres: advance queue: Decide and Job are both needed")
	}
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return nil, mapErr("advance queue", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	a := &advance{db: db, tx: tx, p: p}
	if err := tx.QueryRow(ctx, advanceLockSQL, p.Repository).Scan(&a.mainline, &a.validation); err != nil {
		return nil, mapErr("repository "+p.Repository, err)
	}
	a.validation = bytesOrNull(a.validation)
	pending, err := a.settle(ctx)
	if err != nil {
		return nil, err
	}
	if !pending {
		if err := a.next(ctx); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, mapErr("advance queue: commit", err)
	}
	if a.enqueued {
		db.signal.Fire()
	}
	if len(a.changed) > 0 {
		db.audited()
	}
	return a.changed, nil
}

// head answers the oldest change of the repository that sql (validatingHeadSQL or
// queuedHeadSQL) finds, and its edits, or false when there is none.
func (a *advance) head(ctx context.Context, sql string) (store.Change, []repo.FileEdit, bool, error) {
	var s changeScan
	var js []byte
	err := a.tx.QueryRow(ctx, sql, a.p.Repository).Scan(append(s.dest(), &js)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Change{}, nil, false, nil
	}
	if err != nil {
		return store.Change{}, nil, false, mapErr("advance queue: read the queue", err)
	}
	c := s.change()
	var edits []repo.FileEdit
	if js != nil {
		if err := json.Unmarshal(js, &edits); err != nil {
			return store.Change{}, nil, false, fmt.Errorf("postgres: change %s: decode its edits: %w", c.ID, err)
		}
	}
	return c, edits, true, nil
}

// set writes c's state, revisions, job, attestation and reason with the audit event action
// and its details (nil: none), and records the change as the database answers it.
func (a *advance) set(ctx context.Context, c store.Change, action string, det map[string]any) error {
	var s changeScan
	var detJSON []byte
	if det != nil {
		detJSON = details(det)
	}
	err := a.tx.QueryRow(ctx, setChangeSQL, a.db.now(), c.ID, string(c.State), c.CandidateRevision,
		c.IntegratedRevision, c.JobID, c.AttestationDigest, c.Reason, action, systemActor.Principal, systemActor.Holder,
		textOrNil(detJSON)).Scan(s.dest()...)
	if err != nil {
		return mapErr("advance queue: change "+c.ID, err)
	}
	a.changed = append(a.changed, s.change())
	return nil
}

// moveMainline moves the mainline to rev when it is still from, and reports whether it did.
func (a *advance) moveMainline(ctx context.Context, from, rev string) (bool, error) {
	tag, err := a.tx.Exec(ctx, moveMainlineSQL, a.p.Repository, from, rev)
	if err != nil {
		return false, mapErr("advance queue: move the mainline", err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	a.mainline = rev
	return true, nil
}

// settle settles the VALIDATING change, if any, and reports whether its validation is still
// pending, which ends the advance.
func (a *advance) settle(ctx context.Context) (pending bool, err error) {
	c, _, ok, err := a.head(ctx, validatingHeadSQL)
	if err != nil || !ok {
		return false, err
	}
	candidate, err := getRevision(ctx, a.tx, c.Repository, c.CandidateRevision)
	if err != nil {
		return false, fmt.Errorf("postgres: change %s: its candidate: %w", c.ID, err)
	}
	var js jobScan
	if err := a.tx.QueryRow(ctx, getJobSQL, c.JobID).Scan(js.dest()...); err != nil {
		return false, mapErr("change "+c.ID+": its job "+c.JobID, err)
	}
	job := js.job()
	var att *store.Attestation
	if job.AttestationDigest != "" {
		got, err := getAttestation(ctx, a.tx, job.AttestationDigest)
		switch {
		case err == nil:
			att = &got
		case !errors.Is(err, store.ErrNotFound):
			return false, err
		}
	}
	v := a.p.Decide(c, candidate, job, att)
	var action string
	var det map[string]any
	switch v.Outcome {
	case store.VerdictPending:
		return true, nil
	case store.VerdictPass:
		moved, err := a.moveMainline(ctx, candidate.Parent, candidate.ID)
		if err != nil {
			return false, err
		}
		if moved {
			if err := a.commit(ctx, c, candidate, job.AttestationDigest); err != nil {
				return false, err
			}
			c.State, c.IntegratedRevision, c.AttestationDigest = store.ChangeIntegrated, candidate.ID, job.AttestationDigest
			action, det = "change.integrated", integratedDetails(c, candidate.ID)
		} else {
			// The candidate was validated on a mainline that is gone: back to its place in
			// the queue, to be built again on the new one.
			c.State, c.CandidateRevision, c.JobID = store.ChangeQueued, "", ""
			action = "change.requeued"
		}
	case store.VerdictReject:
		c.State, c.Reason, c.AttestationDigest = store.ChangeRejected, v.Reason, v.Attestation
		action, det = "change.rejected", map[string]any{"reason": v.Reason}
		if v.Attestation != "" {
			det["attestation_digest"] = v.Attestation
		}
	case store.VerdictCancel:
		c.State, c.Reason = store.ChangeCancelled, v.Reason
		action, det = "change.cancelled", map[string]any{"reason": v.Reason}
	default:
		return false, fmt.Errorf("postgres: advance queue: change %s: unknown verdict %d", c.ID, v.Outcome)
	}
	return false, a.set(ctx, c, action, det)
}

// next gives the QUEUED changes their turn, oldest first, until one is VALIDATING or none is
// left.
func (a *advance) next(ctx context.Context) error {
	for {
		c, edits, ok, err := a.head(ctx, queuedHeadSQL)
		if err != nil || !ok {
			return err
		}
		base, err := getRevision(ctx, a.tx, c.Repository, c.BaseRevision)
		if err != nil {
			return fmt.Errorf("postgres: change %s: its base: %w", c.ID, err)
		}
		mainline, err := getRevision(ctx, a.tx, c.Repository, a.mainline)
		if err != nil {
			return fmt.Errorf("postgres: advance queue: the mainline: %w", err)
		}
		backend := gitBackend{qr: a.tx}
		objs := store.NewGitObjects(ctx, backend)
		t, err := rebase(ctx, backend, objs, base, mainline, edits)
		if err != nil {
			var conflict *repo.ConflictError
			var collision *repo.CollisionError
			if !errors.As(err, &conflict) && !errors.As(err, &collision) {
				return fmt.Errorf("postgres: change %s: %w", c.ID, err)
			}
			c.State, c.Reason = store.ChangeRejected, err.Error()
			if err := a.set(ctx, c, "change.rejected", map[string]any{"reason": c.Reason}); err != nil {
				return err
			}
			continue
		}
		var commit *store.CommitInfo
		if a.validation == nil {
			// The policy was removed while the change waited: it is integrated as Integrate
			// does without one.
			tokens, err := a.fencingTokens(ctx, c.ID)
			if err != nil {
				return err
			}
			commit = &store.CommitInfo{Message: c.Message, FencingTokens: tokens, AuthoredAt: c.CreatedAt}
		}
		rev, err := a.storeRevision(ctx, c, objs, t, mainline, commit)
		if err != nil {
			return err
		}
		if a.validation == nil {
			if _, err := a.moveMainline(ctx, rev.Parent, rev.ID); err != nil {
				return err
			}
			c.State, c.CandidateRevision, c.IntegratedRevision = store.ChangeIntegrated, rev.ID, rev.ID
			if err := a.set(ctx, c, "change.integrated", integratedDetails(c, rev.ID)); err != nil {
				return err
			}
			continue
		}
		job, existing, err := a.db.enqueue(ctx, a.tx, a.p.Job(c, rev, a.validation), systemActor)
		if err != nil {
			return fmt.Errorf("change %s: enqueue its validation: %w", c.ID, err)
		}
		a.enqueued = a.enqueued || !existing
		c.State, c.CandidateRevision, c.JobID = store.ChangeValidating, rev.ID, job.ID
		return a.set(ctx, c, "change.validating", map[string]any{"candidate_revision": rev.ID, "job": job.ID})
	}
}

// rebase applies edits made on base to head's git tree (store.RebaseGit).
func rebase(ctx context.Context, b gitBackend, objs *store.GitObjects, base, head store.Revision, edits []repo.FileEdit) (plumbing.Hash, error) {
	baseTree, err := store.ParseGitID(base.GitTree)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("revision %s: git tree: %w", base.ID, err)
	}
	headTree, err := store.ParseGitID(head.GitTree)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("revision %s: git tree: %w", head.ID, err)
	}
	return store.RebaseGit(ctx, b, objs, baseTree, headTree, edits)
}

// storeRevision stores the git objects objs holds and the revision of change c with tree t on
// the mainline parent; with commit, also its mainline commit.
func (a *advance) storeRevision(ctx context.Context, c store.Change, objs *store.GitObjects, t plumbing.Hash,
	parent store.Revision, commit *store.CommitInfo) (store.Revision, error) {
	rev := store.Revision{ID: store.NewID("rev"), Repository: c.Repository, Parent: parent.ID, ChangeID: c.ID,
		Author: c.Author, GitTree: t.String()}
	if commit != nil {
		id, err := a.writeCommit(objs, rev, parent.GitCommit, *commit)
		if err != nil {
			return store.Revision{}, err
		}
		rev.GitCommit = id
	}
	if err := objs.Flush(); err != nil {
		return store.Revision{}, fmt.Errorf("postgres: change %s: %w", c.ID, err)
	}
	err := a.tx.QueryRow(ctx, storeRevisionSQL, a.db.now(), rev.ID, rev.Repository, rev.Parent,
		rev.ChangeID, rev.Author, rev.GitTree, rev.GitCommit).Scan(&rev.CreatedAt)
	if err != nil {
		return store.Revision{}, mapErr("advance queue: store the revision of change "+c.ID, err)
	}
	rev.CreatedAt = rev.CreatedAt.UTC()
	return rev, nil
}

// writeCommit writes the mainline commit of rev on top of the commit parent, dated now.
func (a *advance) writeCommit(objs *store.GitObjects, rev store.Revision, parent string, c store.CommitInfo) (string, error) {
	c.CommittedAt, c.EmailDomain = a.db.commitTime(), a.db.emailDomain
	return store.WriteRevisionCommit(objs, rev, parent, c)
}

// commit gives candidate, which the mainline just moved to, its mainline commit.
func (a *advance) commit(ctx context.Context, c store.Change, candidate store.Revision, attestation string) error {
	parent, err := getRevision(ctx, a.tx, c.Repository, candidate.Parent)
	if err != nil {
		return fmt.Errorf("postgres: change %s: its candidate's parent: %w", c.ID, err)
	}
	tokens, err := a.fencingTokens(ctx, c.ID)
	if err != nil {
		return err
	}
	objs := store.NewGitObjects(ctx, gitBackend{qr: a.tx})
	id, err := a.writeCommit(objs, candidate, parent.GitCommit, store.CommitInfo{
		Message: c.Message, FencingTokens: tokens, Attestation: attestation, AuthoredAt: c.CreatedAt,
	})
	if err != nil {
		return err
	}
	if err := objs.Flush(); err != nil {
		return fmt.Errorf("postgres: change %s: %w", c.ID, err)
	}
	if _, err := a.tx.Exec(ctx, `UPDATE revisions SET git_commit = $1 WHERE id = $2`, id, candidate.ID); err != nil {
		return mapErr("advance queue: store the commit of change "+c.ID, err)
	}
	return nil
}

// fencingTokens answers the lease tokens change id was integrated under.
func (a *advance) fencingTokens(ctx context.Context, id string) ([]uint64, error) {
	var raw string
	if err := a.tx.QueryRow(ctx, `SELECT fencing_tokens FROM changes WHERE id = $1`, id).Scan(&raw); err != nil {
		return nil, mapErr("change "+id+": its fencing tokens", err)
	}
	var tokens []uint64
	if err := json.Unmarshal([]byte(raw), &tokens); err != nil {
		return nil, fmt.Errorf("postgres: change %s: its fencing tokens: %w", id, err)
	}
	return tokens, nil
}
