package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// SetValidation replaces a repository's validation policy.
func (d *DB) SetValidation(ctx context.Context, repository string, validation []byte) (store.Repository, error) {
	now := micros(d.now())
	actor := store.ActorOf(ctx)
	var r store.Repository
	err := d.write(ctx, "set validation", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		r, err = scanRepository(tx.QueryRowContext(ctx, `UPDATE repositories SET validation = ? WHERE name = ?
			RETURNING `+repositoryColumns, nullBytes(validation), repository))
		if err != nil {
			return interpret(fmt.Sprintf("set validation of repository %q", repository), err)
		}
		var det details
		det.raw("validation", r.Validation)
		d.record(now, actor, "repository.validation_set", "repository/"+r.Name, det.done())
		return nil
	})
	return r, err
}

// nullBytes keeps an absent policy as NULL: an empty one would read back as none, yet queue
// every change.
func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// PendingQueues answers the repositories that have a queued or validating change, by name.
func (d *DB) PendingQueues(ctx context.Context) ([]string, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT DISTINCT repository FROM changes
		WHERE state IN ('queued', 'validating') ORDER BY repository`)
	if err != nil {
		return nil, interpret("pending queues", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, interpret("pending queues", err)
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		return nil, interpret("pending queues", err)
	}
	return names, nil
}

// AdvanceQueue settles a repository's validating change and gives the queued ones their turn,
// in one write. SQLite has one writer, so the write holds the repository against every other
// AdvanceQueue and Integrate.
func (d *DB) AdvanceQueue(ctx context.Context, p store.AdvanceQueueParams) ([]store.Change, error) {
	if p.Decide == nil || p.Job == nil {
		return nil, errors.New("advance queue: Decide and Job are required")
	}
	op := fmt.Sprintf("advance the queue of %q", p.Repository)
	var (
		changed  []store.Change
		enqueued bool
	)
	err := d.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		q := queue{d: d, ctx: ctx, tx: tx, op: op, repository: p.Repository, now: micros(d.now())}
		if err := tx.QueryRowContext(ctx, `SELECT mainline, validation FROM repositories WHERE name = ?`, p.Repository).
			Scan(&q.mainline, &q.validation); err != nil {
			return interpret(op, err)
		}
		settled, err := q.settle(p, &changed)
		if err != nil || !settled {
			return err
		}
		enqueued, err = q.next(p, &changed)
		return err
	})
	if err != nil {
		return nil, err
	}
	if enqueued {
		d.signal.Fire()
	}
	return changed, nil
}

// queue is one AdvanceQueue's view of a repository, inside its write. Every event it records
// is the integration queue's: the server's own (store.SystemPrincipal).
type queue struct {
	d          *DB
	ctx        context.Context
	tx         *sql.Tx
	op         string
	repository string
	mainline   string
	validation []byte
	now        int64
}

// head answers the repository's oldest change in state, with its edits.
func (q *queue) head(state store.ChangeState) (c store.Change, edits []repo.FileEdit, found bool, err error) {
	var raw sql.NullString
	// The literal states match the partial index changes_queue, so SQLite walks only the queue.
	c, err = scanChange(q.tx.QueryRowContext(q.ctx, `SELECT edits, `+changeColumns+` FROM changes
		WHERE repository = ? AND state IN ('queued', 'validating') AND state = ? ORDER BY seq LIMIT 1`,
		q.repository, string(state)), &raw)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Change{}, nil, false, nil
	}
	if err != nil {
		return store.Change{}, nil, false, interpret(q.op+": read the queue", err)
	}
	if raw.Valid {
		if err := json.Unmarshal([]byte(raw.String), &edits); err != nil {
			return store.Change{}, nil, false, fmt.Errorf("%s: change %s: edits: %w", q.op, c.ID, err)
		}
	}
	return c, edits, true, nil
}

// update applies set to change id, which must still be in state from, records the change's
// event, and answers it as it is now. args are set's parameters from ?3 on (?1 is the id, ?2 the
// time).
func (q *queue) update(id string, from store.ChangeState, set string, args ...any) (store.Change, error) {
	all := append([]any{id, q.now}, args...)
	c, err := scanChange(q.tx.QueryRowContext(q.ctx, `UPDATE changes SET `+set+`, updated_at = ?2
		WHERE id = ?1 AND state = '`+string(from)+`' RETURNING `+changeColumns, all...))
	if err != nil {
		return store.Change{}, interpret(fmt.Sprintf("%s: update change %s", q.op, id), err)
	}
	if err := q.record(from, c); err != nil {
		return store.Change{}, err
	}
	return c, nil
}

// record records the event of c's move from state from to its state now.
func (q *queue) record(from store.ChangeState, c store.Change) error {
	var (
		action string
		det    details
	)
	switch c.State {
	case store.ChangeIntegrated:
		q.d.recordIntegrated(q.now, systemActor, c)
		return nil
	case store.ChangeValidating:
		action = "change.validating"
		det.str("candidate_revision", c.CandidateRevision).str("job", c.JobID)
	case store.ChangeRejected:
		action = "change.rejected"
		det.strIf("attestation_digest", c.AttestationDigest).str("reason", c.Reason)
	case store.ChangeCancelled:
		action = "change.cancelled"
		det.str("reason", c.Reason)
	case store.ChangeQueued:
		if from != store.ChangeValidating {
			return fmt.Errorf("%s: change %s: no event for a move from %s to %s", q.op, c.ID, from, c.State)
		}
		q.d.record(q.now, systemActor, "change.requeued", "change/"+c.ID, nil)
		return nil
	default:
		return fmt.Errorf("%s: change %s: no event for a move from %s to %s", q.op, c.ID, from, c.State)
	}
	q.d.record(q.now, systemActor, action, "change/"+c.ID, det.done())
	return nil
}

// settle decides the validating change, if any, and answers whether the queue may move on.
func (q *queue) settle(p store.AdvanceQueueParams, changed *[]store.Change) (bool, error) {
	c, _, found, err := q.head(store.ChangeValidating)
	if err != nil {
		return false, err
	}
	if !found {
		return true, nil
	}
	candidate, err := getRevision(q.ctx, q.tx, q.repository, c.CandidateRevision)
	if err != nil {
		return false, fmt.Errorf("%s: change %s: candidate %w", q.op, c.ID, err)
	}
	job, err := getJob(q.ctx, q.tx, c.JobID)
	if err != nil {
		return false, fmt.Errorf("%s: change %s: validate %w", q.op, c.ID, err)
	}
	att, err := q.attestation(job)
	if err != nil {
		return false, err
	}
	v := p.Decide(c, candidate, job, att)
	var settled store.Change
	switch v.Outcome {
	case store.VerdictPending:
		return false, nil
	case store.VerdictPass:
		moved, err := moveMainline(q.ctx, q.tx, q.repository, candidate.Parent, candidate.ID)
		if err != nil {
			return false, fmt.Errorf("%s: %w", q.op, err)
		}
		if moved {
			if err := q.commit(c, candidate, job.AttestationDigest); err != nil {
				return false, err
			}
			q.mainline = candidate.ID
			settled, err = q.update(c.ID, store.ChangeValidating,
				`state = 'integrated', integrated_revision = ?3, attestation_digest = ?4`, candidate.ID, job.AttestationDigest)
		} else {
			// The candidate passed, but on a mainline that is no longer the mainline: what was
			// validated is not what would be integrated, so it is built and validated again.
			settled, err = q.update(c.ID, store.ChangeValidating, `state = 'queued', candidate_revision = '', job_id = ''`)
		}
		if err != nil {
			return false, err
		}
	case store.VerdictReject:
		if settled, err = q.update(c.ID, store.ChangeValidating, `state = 'rejected', reason = ?3, attestation_digest = ?4`, v.Reason, v.Attestation); err != nil {
			return false, err
		}
	case store.VerdictCancel:
		if settled, err = q.update(c.ID, store.ChangeValidating, `state = 'cancelled', reason = ?3`, v.Reason); err != nil {
			return false, err
		}
	default:
		return false, fmt.Errorf("%s: change %s: Decide answered the unknown outcome %d", q.op, c.ID, v.Outcome)
	}
	*changed = append(*changed, settled)
	return true, nil
}

// commit gives candidate, which the mainline just moved to, its mainline commit.
func (q *queue) commit(c store.Change, candidate store.Revision, attestation string) error {
	parent, err := getRevision(q.ctx, q.tx, q.repository, candidate.Parent)
	if err != nil {
		return fmt.Errorf("%s: change %s: parent %w", q.op, c.ID, err)
	}
	tokens, err := q.fencingTokens(c.ID)
	if err != nil {
		return err
	}
	objs := store.NewGitObjects(q.ctx, gitBackend{q.tx})
	commit, err := q.d.writeCommit(objs, candidate, parent.GitCommit, store.CommitInfo{
		Message: c.Message, FencingTokens: tokens, Attestation: attestation, AuthoredAt: c.CreatedAt,
		CommittedAt: fromMicros(q.now), // when the mainline moves, not when the candidate was built
	})
	if err != nil {
		return fmt.Errorf("%s: change %s: %w", q.op, c.ID, err)
	}
	if err := objs.Flush(); err != nil {
		return fmt.Errorf("%s: change %s: %w", q.op, c.ID, err)
	}
	if _, err := q.tx.ExecContext(q.ctx, `UPDATE revisions SET git_commit = ? WHERE id = ?`, commit, candidate.ID); err != nil {
		return interpret(fmt.Sprintf("%s: change %s: store commit", q.op, c.ID), err)
	}
	return nil
}

// fencingTokens answers the lease tokens change id was integrated under.
func (q *queue) fencingTokens(id string) ([]uint64, error) {
	var raw string
	if err := q.tx.QueryRowContext(q.ctx, `SELECT fencing_tokens FROM changes WHERE id = ?`, id).Scan(&raw); err != nil {
		return nil, interpret(fmt.Sprintf("%s: change %s: fencing tokens", q.op, id), err)
	}
	var tokens []uint64
	if err := json.Unmarshal([]byte(raw), &tokens); err != nil {
		return nil, fmt.Errorf("%s: change %s: fencing tokens: %w", q.op, id, err)
	}
	return tokens, nil
}

// attestation answers the envelope a job's completion stored, or nil. A digest whose envelope
// is missing cannot be verified either, so Decide sees it as no attestation rather than the
// queue stopping on it.
func (q *queue) attestation(job store.Job) (*store.Attestation, error) {
	if job.AttestationDigest == "" {
		return nil, nil
	}
	var (
		a       store.Attestation
		created int64
	)
	err := q.tx.QueryRowContext(q.ctx, `SELECT digest, envelope, job_id, created_at FROM attestations WHERE digest = ?`,
		job.AttestationDigest).Scan(&a.Digest, &a.Envelope, &a.JobID, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, interpret(fmt.Sprintf("%s: attestation of job %s", q.op, job.ID), err)
	}
	a.CreatedAt = fromMicros(created)
	return &a, nil
}

// next gives queued changes their turn, oldest first, until one is validating or none is left,
// and answers whether it enqueued a new job.
func (q *queue) next(p store.AdvanceQueueParams, changed *[]store.Change) (bool, error) {
	for {
		c, edits, found, err := q.head(store.ChangeQueued)
		if err != nil || !found {
			return false, err
		}
		base, err := getRevision(q.ctx, q.tx, q.repository, c.BaseRevision)
		if err != nil {
			return false, fmt.Errorf("%s: change %s: base %w", q.op, c.ID, err)
		}
		head, err := getRevision(q.ctx, q.tx, q.repository, q.mainline)
		if err != nil {
			return false, fmt.Errorf("%s: mainline %w", q.op, err)
		}
		objs := store.NewGitObjects(q.ctx, gitBackend{q.tx})
		tree, buildErr := rebase(q.ctx, q.tx, objs, base, head, edits)
		if buildErr != nil {
			var conflict *repo.ConflictError
			var collision *repo.CollisionError
			if !errors.As(buildErr, &conflict) && !errors.As(buildErr, &collision) {
				return false, fmt.Errorf("%s: change %s: %w", q.op, c.ID, buildErr)
			}
			rejected, err := q.update(c.ID, store.ChangeQueued, `state = 'rejected', reason = ?3`, buildErr.Error())
			if err != nil {
				return false, err
			}
			*changed = append(*changed, rejected)
			continue
		}
		rp := revisionParams{repository: q.repository, parent: head, changeID: c.ID, author: c.Author, tree: tree, now: q.now}
		if q.validation == nil {
			// The policy was removed while the change waited: it is integrated as Integrate
			// would have integrated it.
			tokens, err := q.fencingTokens(c.ID)
			if err != nil {
				return false, err
			}
			rp.commit = &store.CommitInfo{Message: c.Message, FencingTokens: tokens, AuthoredAt: c.CreatedAt}
		}
		candidate, err := q.d.insertRevision(q.ctx, q.tx, objs, rp)
		if err != nil {
			return false, fmt.Errorf("%s: change %s: %w", q.op, c.ID, err)
		}
		if q.validation == nil {
			if err := mustMoveMainline(q.ctx, q.tx, q.repository, q.mainline, candidate.ID); err != nil {
				return false, fmt.Errorf("%s: %w", q.op, err)
			}
			q.mainline = candidate.ID
			integrated, err := q.update(c.ID, store.ChangeQueued,
				`state = 'integrated', candidate_revision = ?3, integrated_revision = ?3`, candidate.ID)
			if err != nil {
				return false, err
			}
			*changed = append(*changed, integrated)
			continue
		}
		job, existing, err := q.d.enqueueJob(q.ctx, q.tx, p.Job(c, candidate, q.validation), fromMicros(q.now), systemActor)
		if err != nil {
			return false, fmt.Errorf("%s: change %s: %w", q.op, c.ID, err)
		}
		validating, err := q.update(c.ID, store.ChangeQueued,
			`state = 'validating', candidate_revision = ?3, job_id = ?4`, candidate.ID, job.ID)
		if err != nil {
			return false, err
		}
		*changed = append(*changed, validating)
		return !existing, nil
	}
}
