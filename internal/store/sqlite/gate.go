package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/ag-coord/ag/internal/gitstore"
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
			return interpretError(fmt.Sprintf("set validation of repository %q", repository), err)
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
		return nil, interpretError("pending queues", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, interpretError("pending queues", err)
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("pending queues", err)
	}
	return names, nil
}

// InQueue runs fn in one write holding repository's queue. SQLite has one writer, so the write
// holds the repository against every other InQueue and Integrate.
func (d *DB) InQueue(ctx context.Context, repository string, fn func(store.QueueTx) error) error {
	op := fmt.Sprintf("advance the queue of %q", repository)
	var enqueued bool
	err := d.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		q := &queue{d: d, ctx: ctx, tx: tx, op: op, repository: repository, now: micros(d.now())}
		if err := tx.QueryRowContext(ctx, `SELECT mainline, validation FROM repositories WHERE name = ?`, repository).
			Scan(&q.mainline, &q.validation); err != nil {
			return interpretError(op, err)
		}
		q.objs = store.NewGitObjects(ctx, gitBackend{q: tx})
		if err := fn(q); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		enqueued = q.enqueued
		return nil
	})
	if err != nil {
		return err
	}
	if enqueued {
		d.signal.Fire()
	}
	return nil
}

// queue is one InQueue's store.QueueTx, inside its write. Every event it records is the
// integration queue's: the server's own (store.SystemPrincipal).
type queue struct {
	d          *DB
	ctx        context.Context
	tx         *sql.Tx
	op         string
	repository string
	mainline   string
	validation []byte
	now        int64
	objs       *store.GitObjects
	enqueued   bool // a new job was enqueued: the job signal fires after the commit
}

func (q *queue) Mainline() string   { return q.mainline }
func (q *queue) Validation() []byte { return q.validation }

func (q *queue) Pending(limit int) ([]store.Change, error) {
	// The literal states match the partial index changes_queue, so SQLite walks only the queue.
	return queryChanges(q.ctx, q.tx, `SELECT seq, `+changeColumns+` FROM changes
		WHERE repository = ? AND state IN ('queued', 'validating') ORDER BY seq LIMIT ?`, q.repository, limit)
}

const candidateColumns = `id, repository, state, revision, parent_revision, job_id, attestation_digest, reason,
	lane, parent_tree, size, created_at, updated_at`

func scanCandidate(row scanner) (store.Candidate, error) {
	var (
		c                store.Candidate
		state            string
		created, updated int64
	)
	if err := row.Scan(&c.ID, &c.Repository, &state, &c.Revision, &c.ParentRevision, &c.JobID, &c.AttestationDigest,
		&c.Reason, &c.Lane, &c.ParentTree, &c.Size, &created, &updated); err != nil {
		return store.Candidate{}, err
	}
	c.State, c.CreatedAt, c.UpdatedAt = store.CandidateState(state), fromMicros(created), fromMicros(updated)
	return c, nil
}

func (q *queue) Live() ([]store.Candidate, error) {
	return queryCandidates(q.ctx, q.tx, `SELECT `+candidateColumns+` FROM candidates
		WHERE repository = ? AND state IN ('validating', 'passed', 'failed') ORDER BY seq`, q.repository)
}

func queryCandidates(ctx context.Context, db querier, query string, args ...any) ([]store.Candidate, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpretError("read candidates", err)
	}
	defer rows.Close()
	var cands []store.Candidate
	for rows.Next() {
		c, err := scanCandidate(rows)
		if err != nil {
			return nil, interpretError("read candidates", err)
		}
		cands = append(cands, c)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("read candidates", err)
	}
	return cands, nil
}

func (q *queue) Revision(id string) (store.Revision, error) {
	return getRevision(q.ctx, q.tx, q.repository, id)
}

func (q *queue) Job(id string) (store.Job, *store.Attestation, error) {
	job, err := getJob(q.ctx, q.tx, id)
	if err != nil {
		return store.Job{}, nil, fmt.Errorf("validate %w", err)
	}
	att, err := q.attestation(job)
	return job, att, err
}

func (q *queue) Edits(changeID string) ([]repo.FileEdit, []uint64, error) {
	var (
		raw    sql.NullString
		tokens string
	)
	if err := q.tx.QueryRowContext(q.ctx, `SELECT edits, fencing_tokens FROM changes WHERE id = ?`, changeID).
		Scan(&raw, &tokens); err != nil {
		return nil, nil, interpretError("change "+changeID+": edits", err)
	}
	var edits []repo.FileEdit
	if raw.Valid {
		if err := json.Unmarshal([]byte(raw.String), &edits); err != nil {
			return nil, nil, fmt.Errorf("change %s: edits: %w", changeID, err)
		}
	}
	var toks []uint64
	if err := json.Unmarshal([]byte(tokens), &toks); err != nil {
		return nil, nil, fmt.Errorf("change %s: fencing tokens: %w", changeID, err)
	}
	return edits, toks, nil
}

func (q *queue) Rebase(base store.Revision, onto plumbing.Hash, edits []repo.FileEdit) (plumbing.Hash, error) {
	baseTree, err := store.ParseGitID(base.GitTree)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("revision %s: git tree: %w", base.ID, err)
	}
	return store.RebaseGit(q.ctx, gitBackend{q: q.tx}, q.objs, baseTree, onto, edits)
}

func (q *queue) Project(tree plumbing.Hash, hidden []string) (plumbing.Hash, error) {
	return gitstore.Prune(q.objs, tree, hidden)
}

func (q *queue) StoreRevision(parent store.Revision, tree plumbing.Hash, changeID, author string, commit *store.CommitInfo) (store.Revision, error) {
	return q.d.insertRevision(q.ctx, q.tx, q.objs, revisionParams{repository: q.repository, parent: parent,
		changeID: changeID, author: author, tree: tree, now: q.now, commit: commit})
}

func (q *queue) WriteCommit(rev, parent store.Revision, c store.CommitInfo) (string, error) {
	c.CommittedAt = fromMicros(q.now) // when the mainline moves, not when the candidate was built
	commit, err := q.d.writeCommit(q.objs, rev, parent.GitCommit, c)
	if err != nil {
		return "", err
	}
	if err := q.objs.Flush(); err != nil {
		return "", err
	}
	if _, err := q.tx.ExecContext(q.ctx, `UPDATE revisions SET git_commit = ? WHERE id = ?`, commit, rev.ID); err != nil {
		return "", interpretError("store the commit of revision "+rev.ID, err)
	}
	return commit, nil
}

func (q *queue) MoveMainline(from, to string) error {
	if err := mustMoveMainline(q.ctx, q.tx, q.repository, from, to); err != nil {
		return err
	}
	q.mainline = to
	return nil
}

func (q *queue) Enqueue(p store.EnqueueJobParams) (store.Job, error) {
	job, existing, err := q.d.enqueueJob(q.ctx, q.tx, p, fromMicros(q.now), systemActor)
	if err == nil && !existing {
		q.enqueued = true
	}
	return job, err
}

func (q *queue) CancelJob(id string) error {
	_, err := q.d.cancelJob(q.ctx, q.tx, id, q.now, systemActor)
	var stateErr *store.StateError
	if errors.As(err, &stateErr) || errors.Is(err, store.ErrNotFound) {
		return nil // it ended already, or there is none to stop
	}
	return err
}

func (q *queue) InsertCandidate(c store.Candidate) error {
	if _, err := q.tx.ExecContext(q.ctx, `INSERT INTO candidates (id, repository, state, revision, parent_revision, job_id,
		lane, parent_tree, size, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, c.ID, q.repository,
		string(c.State), c.Revision, c.ParentRevision, c.JobID, c.Lane, c.ParentTree, len(c.Changes), q.now, q.now); err != nil {
		return interpretError("store candidate", err)
	}
	for i, id := range c.Changes {
		if _, err := q.tx.ExecContext(q.ctx, `INSERT INTO candidate_changes (candidate_id, change_id, position) VALUES (?, ?, ?)`,
			c.ID, id, i); err != nil {
			return interpretError("store candidate", err)
		}
	}
	return nil
}

func (q *queue) SetCandidate(c store.Candidate, from store.CandidateState) error {
	res, err := q.tx.ExecContext(q.ctx, `UPDATE candidates SET state = ?, attestation_digest = ?, reason = ?, updated_at = ?
		WHERE id = ? AND state = ?`, string(c.State), c.AttestationDigest, c.Reason, q.now, c.ID, string(from))
	if err != nil {
		return interpretError("update candidate "+c.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("update candidate %s: it is no longer %s", c.ID, from)
	}
	return nil
}

func (q *queue) SetChange(c store.Change, from store.ChangeState) (store.Change, error) {
	stored, err := scanChange(q.tx.QueryRowContext(q.ctx, `UPDATE changes SET state = ?, candidate_revision = ?,
		integrated_revision = ?, job_id = ?, attestation_digest = ?, reason = ?, candidate_id = ?, batch_limit = ?,
		updated_at = ? WHERE id = ? AND state = ? RETURNING `+changeColumns, string(c.State), c.CandidateRevision,
		c.IntegratedRevision, c.JobID, c.AttestationDigest, c.Reason, c.CandidateID, c.BatchLimit, q.now, c.ID, string(from)))
	if err != nil {
		return store.Change{}, interpretError("update change "+c.ID, err)
	}
	return stored, nil
}

func (q *queue) Task(id string) (store.Task, error) {
	return getTask(q.ctx, q.tx, id, fromMicros(q.now))
}

func (q *queue) FinishTask(id, changeID string) error {
	return q.d.finishTask(q.ctx, q.tx, id, changeID, q.now, systemActor)
}

func (q *queue) Record(action, subject string, det map[string]any) {
	var b []byte
	if det != nil {
		b = detailsOf(det)
	}
	q.d.record(q.now, systemActor, action, subject, b)
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
		return nil, interpretError(fmt.Sprintf("%s: attestation of job %s", q.op, job.ID), err)
	}
	a.CreatedAt = fromMicros(created)
	return &a, nil
}

// ListCandidates answers a change's candidates, oldest first, or a repository's live ones.
func (d *DB) ListCandidates(ctx context.Context, p store.ListCandidatesParams) ([]store.Candidate, error) {
	var (
		cands []store.Candidate
		err   error
	)
	if p.ChangeID != "" {
		cands, err = queryCandidates(ctx, d.r, `SELECT `+candidateColumns+` FROM candidates
			WHERE id IN (SELECT candidate_id FROM candidate_changes WHERE change_id = ?) ORDER BY seq`, p.ChangeID)
	} else {
		cands, err = queryCandidates(ctx, d.r, `SELECT `+candidateColumns+` FROM candidates
			WHERE repository = ? AND state IN ('validating', 'passed', 'failed') ORDER BY seq`, p.Repository)
	}
	if err != nil {
		return nil, err
	}
	if len(cands) == 0 {
		return cands, nil
	}
	args := make([]any, len(cands))
	at := make(map[string]int, len(cands))
	for i, c := range cands {
		args[i], at[c.ID] = c.ID, i
	}
	rows, err := d.r.QueryContext(ctx, `SELECT candidate_id, change_id FROM candidate_changes
		WHERE candidate_id IN (`+placeholders(1, len(cands))+`) ORDER BY candidate_id, position`, args...)
	if err != nil {
		return nil, interpretError("read candidates", err)
	}
	defer rows.Close()
	for rows.Next() {
		var cand, change string
		if err := rows.Scan(&cand, &change); err != nil {
			return nil, interpretError("read candidates", err)
		}
		cands[at[cand]].Changes = append(cands[at[cand]].Changes, change)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("read candidates", err)
	}
	return cands, nil
}
