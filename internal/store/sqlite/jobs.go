package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

const jobColumns = `id, kind, state, payload, priority, attempts, max_attempts, claimed_by, lease_us,
	lease_expires_at, run_after, created_at, updated_at, finished_at, last_error, result, output,
	output_digest, attestation_digest, cancel_requested, progress, enqueued_by, unique_key`

type scanner interface{ Scan(dest ...any) error }

// scanJob reads the jobColumns of a row; before are columns selected ahead of them.
func scanJob(row scanner, before ...any) (store.Job, error) {
	var (
		j                                   store.Job
		state                               string
		leaseUS, runAfter, created, updated int64
		leaseExpires, finished              sql.NullInt64
	)
	dest := append(before,
		&j.ID, &j.Kind, &state, &j.Payload, &j.Priority, &j.ClaimNumber, &j.MaxAttempts, &j.Holder, &leaseUS,
		&leaseExpires, &runAfter, &created, &updated, &finished, &j.LastError, &j.Result, &j.Output,
		&j.OutputDigest, &j.AttestationDigest, &j.CancelRequested, &j.Progress, &j.EnqueuedBy, &j.UniqueKey)
	if err := row.Scan(dest...); err != nil {
		return store.Job{}, err
	}
	j.State = store.JobState(state)
	j.Lease = time.Duration(leaseUS) * time.Microsecond
	j.LeaseExpiresAt = fromNullMicros(leaseExpires)
	j.RunAfter = fromMicros(runAfter)
	j.CreatedAt = fromMicros(created)
	j.UpdatedAt = fromMicros(updated)
	j.FinishedAt = fromNullMicros(finished)
	return j, nil
}

func getJob(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id string) (store.Job, error) {
	j, err := scanJob(q.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, id))
	if err != nil {
		return store.Job{}, interpretError("job "+id, err)
	}
	return j, nil
}

// EnqueueJob inserts a queued job, or answers the live job that holds p.UniqueKey.
func (d *DB) EnqueueJob(ctx context.Context, p store.EnqueueJobParams) (store.Job, bool, error) {
	now := d.now()
	actor := principalActor(ctx, p.EnqueuedBy)
	var (
		job      store.Job
		existing bool
	)
	err := d.write(ctx, "enqueue job", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		job, existing, err = d.enqueueJob(ctx, tx, p, now, actor)
		return err
	})
	if err != nil {
		return store.Job{}, false, err
	}
	if !existing {
		d.signal.Fire()
	}
	return job, existing, nil
}

// enqueueJob is EnqueueJob inside a write, which InQueue shares so that a candidate and its
// validate job are stored together; a new job's event names actor. A caller that gets a new job
// (existing false) fires the job signal once the write committed.
func (d *DB) enqueueJob(ctx context.Context, tx *sql.Tx, p store.EnqueueJobParams, now time.Time, actor store.Actor) (job store.Job, existing bool, err error) {
	if p.UniqueKey != "" {
		// The literal conditions match the partial unique index, so SQLite can use it.
		j, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs
			WHERE unique_key = ? AND unique_key <> '' AND state IN ('queued', 'claimed')`, p.UniqueKey))
		if err == nil {
			return j, true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return store.Job{}, false, interpretError("enqueue job: look up unique key", err)
		}
	}
	var payload any
	if p.Payload != nil {
		payload = p.Payload
	}
	j, err := scanJob(tx.QueryRowContext(ctx, `INSERT INTO jobs
		(id, kind, state, payload, priority, max_attempts, run_after, created_at, updated_at, enqueued_by, unique_key)
		VALUES (?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?)
		RETURNING `+jobColumns,
		store.NewID("job"), p.Kind, payload, p.Priority, p.MaxAttempts,
		micros(now.Add(p.Delay)), micros(now), micros(now), p.EnqueuedBy, p.UniqueKey))
	if err != nil {
		return store.Job{}, false, interpretError("enqueue job", err)
	}
	var det details
	det.str("kind", j.Kind).int("max_attempts", int64(j.MaxAttempts)).int("priority", int64(j.Priority)).strIf("unique_key", j.UniqueKey)
	d.record(micros(now), actor, "job.enqueued", "job/"+j.ID, det.done())
	return j, false, nil
}

// settleExpired is ExpireJobs's statement: an expired claim that cannot be claimed again
// ends here. CANCELLED wins over FAILED as in FailJob: someone asked for the job to stop. It runs
// before every claim, so it reads only the expired end of the lease index. It answers what the
// jobs' job.expired events record.
const settleExpired = `UPDATE jobs INDEXED BY jobs_claimed_lease SET
	state = CASE WHEN cancel_requested <> 0 THEN 'cancelled' ELSE 'failed' END,
	last_error = CASE WHEN cancel_requested = 0 THEN '` + store.LeaseExpiredError + `' ELSE last_error END,
	lease_expires_at = NULL, finished_at = ?1, updated_at = ?1
	WHERE state = 'claimed' AND lease_expires_at <= ?1 AND (attempts >= max_attempts OR cancel_requested <> 0)
	RETURNING id, attempts, state`

// settle runs settleExpired in tx, records a job.expired event for each job it settled, and
// answers how many it settled.
func (d *DB) settle(ctx context.Context, tx *sql.Tx, now int64) (int, error) {
	rows, err := tx.QueryContext(ctx, settleExpired, now)
	if err != nil {
		return 0, interpretError("settle expired claims", err)
	}
	type settled struct {
		id, state string
		attempts  int64
	}
	var jobs []settled
	for rows.Next() {
		var s settled
		if err := rows.Scan(&s.id, &s.attempts, &s.state); err != nil {
			rows.Close()
			return 0, interpretError("settle expired claims", err)
		}
		jobs = append(jobs, s)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return 0, interpretError("settle expired claims", err)
	}
	for _, s := range jobs {
		var det details
		det.int("claim", s.attempts).str("state", s.state)
		d.record(now, systemActor, "job.expired", "job/"+s.id, det.done())
	}
	return len(jobs), nil
}

// ExpireJobs settles expired claims that cannot be claimed again.
func (d *DB) ExpireJobs(ctx context.Context) (int, error) {
	now := micros(d.now())
	var n int
	err := d.write(ctx, "expire jobs", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		n, err = d.settle(ctx, tx, now)
		if err != nil {
			return fmt.Errorf("expire jobs: %w", err)
		}
		return nil
	})
	return n, err
}

// claimSQL takes the ?4 best claimable jobs in one statement; one is for ?4 = 1. The queued
// jobs and the expired claims are searched separately so each walks its own index and stops
// after ?4 rows (the ?4 best of both are among them); an OR over both would make SQLite sort
// every match. The indexes are named because without statistics the planner prefers jobs_state
// and sorts every queued job on each claim. The limits are ?4 + 0 because SQLite compiles a
// statement again whenever a bare LIMIT parameter is bound, to plan for its value: that would
// be on every claim. A single claim compares seq with = rather than IN, which spares it the
// temporary table of IN. RETURNING answers rows in no set order, so each comes with its seq for
// the claim order to be restored.
func claimSQL(kinds int, one bool) string {
	kindFilter := ""
	if kinds > 0 {
		kindFilter = ` AND kind IN (` + placeholders(5, kinds) + `)`
	}
	in := "IN"
	if one {
		in = "="
	}
	return `UPDATE jobs SET state = 'claimed', claimed_by = ?1, lease_us = ?2, lease_expires_at = ?3 + ?2,
		attempts = attempts + 1, progress = '', updated_at = ?3
	WHERE seq ` + in + ` (
		SELECT seq FROM (
			SELECT * FROM (
				SELECT seq, priority, run_after FROM jobs INDEXED BY jobs_queued_claim_order
				WHERE state = 'queued' AND run_after <= ?3` + kindFilter + `
				ORDER BY priority DESC, run_after, seq LIMIT ?4 + 0)
			UNION ALL
			SELECT * FROM (
				SELECT seq, priority, run_after FROM jobs INDEXED BY jobs_claimed_lease
				WHERE state = 'claimed' AND lease_expires_at <= ?3 AND attempts < max_attempts
					AND cancel_requested = 0` + kindFilter + `
				ORDER BY priority DESC, run_after, seq LIMIT ?4 + 0))
		ORDER BY priority DESC, run_after, seq LIMIT ?4 + 0)
	RETURNING seq, ` + jobColumns
}

// settleEvery is how often a claim settles expired claims first (ExpireJobs always does).
const settleEvery = 250 * time.Millisecond

// ClaimJob settles expired claims, then takes the best claimable job.
func (d *DB) ClaimJob(ctx context.Context, p store.ClaimJobParams) (*store.Job, error) {
	jobs, err := d.claimJobs(ctx, "claim job", p, 1)
	if err != nil || len(jobs) == 0 {
		return nil, err
	}
	return &jobs[0], nil
}

// ClaimJobs settles expired claims, then takes the p.Max best claimable jobs.
func (d *DB) ClaimJobs(ctx context.Context, p store.ClaimJobParams) ([]store.Job, error) {
	return d.claimJobs(ctx, "claim jobs", p, max(p.Max, 1))
}

// claimJobs is ClaimJob and ClaimJobs: it claims up to n jobs in one write and answers them in
// claim order, never nil.
func (d *DB) claimJobs(ctx context.Context, op string, p store.ClaimJobParams, n int) ([]store.Job, error) {
	now := micros(d.now())
	actor := holderActor(ctx, p.Holder)
	args := make([]any, 0, 4+len(p.Kinds))
	args = append(args, p.Holder, p.Lease.Microseconds(), now, n)
	for _, k := range p.Kinds {
		args = append(args, k)
	}
	// n comes from the caller: it bounds the answer, not what is allocated before there is one.
	jobs := make([]store.Job, 0, min(n, 64))
	err := d.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		// The claim itself never hands out a job that settling would end, so settling may lag
		// a little; doing it at most every settleEvery keeps it off most claims.
		if now-d.lastSettle.Load() >= settleEvery.Microseconds() {
			if _, err := d.settle(ctx, tx, now); err != nil {
				return fmt.Errorf("%s: %w", op, err)
			}
			d.lastSettle.Store(now)
		}
		rows, err := tx.QueryContext(ctx, claimSQL(len(p.Kinds), n == 1), args...)
		if err != nil {
			return interpretError(op, err)
		}
		var (
			seq  int64
			seqs = make([]int64, 0, cap(jobs))
		)
		for rows.Next() {
			j, err := scanJob(rows, &seq)
			if err != nil {
				rows.Close()
				return interpretError(op, err)
			}
			jobs, seqs = append(jobs, j), append(seqs, seq)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return interpretError(op, err)
		}
		if len(jobs) > 1 {
			sort.Sort(claimOrder{jobs, seqs})
		}
		if auditEnabled {
			events := make([]event, len(jobs))
			for i, j := range jobs {
				var det details
				det.int("claim", int64(j.ClaimNumber)).time("lease_expires_at", j.LeaseExpiresAt)
				events[i] = event{actor: actor, action: "job.claimed", subject: "job/" + j.ID, details: det.done()}
			}
			d.recordAll(now, events)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return jobs, nil
}

// claimOrder sorts claimed jobs, whose seqs are seqs, in claim order: priority desc, run_after,
// seq. A claim changes neither priority nor run_after, so this is the order the candidates had.
type claimOrder struct {
	jobs []store.Job
	seqs []int64
}

func (o claimOrder) Len() int { return len(o.jobs) }

func (o claimOrder) Less(a, b int) bool {
	ja, jb := &o.jobs[a], &o.jobs[b]
	if ja.Priority != jb.Priority {
		return ja.Priority > jb.Priority
	}
	if !ja.RunAfter.Equal(jb.RunAfter) {
		return ja.RunAfter.Before(jb.RunAfter)
	}
	return o.seqs[a] < o.seqs[b]
}

func (o claimOrder) Swap(a, b int) {
	o.jobs[a], o.jobs[b] = o.jobs[b], o.jobs[a]
	o.seqs[a], o.seqs[b] = o.seqs[b], o.seqs[a]
}

// event is an audit event of a batch of jobs, which recordAll records.
type event struct {
	actor           store.Actor
	action, subject string
	details         detailsJSON
}

// recordAll records events of one time.
func (d *DB) recordAll(now int64, events []event) {
	for _, e := range events {
		d.record(now, e.actor, e.action, e.subject, e.details)
	}
}

// claimCheck is the WHERE of every change a claimant makes (ADR-0012): the job is still
// claimed by this worker and, when a claim number is given, by this claim. ?1 is the job id,
// ?2 the worker, ?3 the claim number.
const claimCheck = `id = ?1 AND state = 'claimed' AND claimed_by = ?2 AND (?3 = 0 OR attempts = ?3)`

// refusal explains, from the job as it is in tx, why a claim check matched no row.
func refusal(ctx context.Context, tx *sql.Tx, op, jobID, worker string, token uint32) error {
	j, err := getJob(ctx, tx, jobID)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := store.ExplainLostClaim(j, worker, token); err != nil {
		return err
	}
	return fmt.Errorf("%s: job %s: the claim check matched no row although the claim is current", op, jobID)
}

// HeartbeatJob extends a claim's lease and records its progress.
func (d *DB) HeartbeatJob(ctx context.Context, p store.HeartbeatJobParams) (store.Job, error) {
	now := micros(d.now())
	var job store.Job
	err := d.write(ctx, "heartbeat job", func(ctx context.Context, tx *sql.Tx) error {
		j, err := scanJob(tx.QueryRowContext(ctx, `UPDATE jobs SET
				lease_expires_at = ?4 + CASE WHEN ?5 > 0 THEN ?5 ELSE lease_us END,
				progress = CASE WHEN ?6 <> '' THEN ?6 ELSE progress END,
				output = CASE WHEN ?7 <> '' THEN ?7 ELSE output END,
				updated_at = ?4
			WHERE `+claimCheck+` RETURNING `+jobColumns,
			p.JobID, p.Holder, p.ClaimNumber, now, p.Lease.Microseconds(), p.Progress, p.Output))
		if errors.Is(err, sql.ErrNoRows) {
			return refusal(ctx, tx, "heartbeat job", p.JobID, p.Holder, p.ClaimNumber)
		}
		if err != nil {
			return interpretError("heartbeat job "+p.JobID, err)
		}
		job = j
		return nil
	})
	return job, err
}

// CompleteJob finishes a claim's job and stores its attestation, only once the claim check passed.
func (d *DB) CompleteJob(ctx context.Context, p store.CompleteJobParams) (store.Job, error) {
	now := micros(d.now())
	actor := holderActor(ctx, p.Holder)
	var job store.Job
	err := d.write(ctx, "complete job", func(ctx context.Context, tx *sql.Tx) error {
		j, refused, err := completeJob(ctx, tx, p, now)
		if err != nil {
			return err
		}
		if refused != nil {
			return refused
		}
		if auditEnabled {
			e := completedEvent(j, actor)
			d.record(now, e.actor, e.action, e.subject, e.details)
		}
		job = j
		return nil
	})
	return job, err
}

// CompleteJobs applies each completion as CompleteJob does, all in one write.
func (d *DB) CompleteJobs(ctx context.Context, ps []store.CompleteJobParams) ([]store.CompleteJobOutcome, error) {
	out := make([]store.CompleteJobOutcome, len(ps))
	if len(ps) == 0 {
		return out, nil
	}
	now := micros(d.now())
	actors := make([]store.Actor, len(ps))
	for i, p := range ps {
		actors[i] = holderActor(ctx, p.Holder)
	}
	err := d.write(ctx, "complete jobs", func(ctx context.Context, tx *sql.Tx) error {
		events := make([]event, 0, len(ps))
		for i, p := range ps {
			j, refused, err := completeJob(ctx, tx, p, now)
			if err != nil {
				return err
			}
			if refused != nil {
				// The claim check matched no row, so the refusal changed nothing: no savepoint
				// is needed for the others to go on.
				out[i].Err = refused
				continue
			}
			out[i].Job = j
			if auditEnabled {
				events = append(events, completedEvent(j, actors[i]))
			}
		}
		d.recordAll(now, events)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// completeJob applies one completion in tx: the conditional UPDATE and, once it passed, the
// attestation. A refusal (refused) changed nothing and is the caller's answer for this
// completion; err is a failure of the database, after which the write must roll back.
func completeJob(ctx context.Context, tx *sql.Tx, p store.CompleteJobParams, now int64) (job store.Job, refused, err error) {
	attDigest := ""
	if p.Attestation != nil {
		attDigest = p.Attestation.Digest
	}
	var result any
	if p.Result != nil {
		result = p.Result
	}
	j, err := scanJob(tx.QueryRowContext(ctx, `UPDATE jobs SET
			state = 'completed', finished_at = ?4, updated_at = ?4, lease_expires_at = NULL,
			result = ?5, output = ?6, output_digest = ?7, attestation_digest = ?8
		WHERE `+claimCheck+` AND (kind <> '`+store.KindValidate+`' OR ?8 <> '') RETURNING `+jobColumns,
		p.JobID, p.Holder, p.ClaimNumber, now, result, p.Output, p.OutputDigest, attDigest))
	if errors.Is(err, sql.ErrNoRows) {
		j, err := getJob(ctx, tx, p.JobID)
		if errors.Is(err, store.ErrNotFound) {
			return store.Job{}, fmt.Errorf("complete job: %w", err), nil
		}
		if err != nil {
			return store.Job{}, nil, fmt.Errorf("complete job: %w", err)
		}
		if err := store.ExplainRefusedCompletion(j, p.Holder, p.ClaimNumber, attDigest != ""); err != nil {
			return store.Job{}, err, nil
		}
		// Not a rule's refusal but a contradiction: still this completion's answer only, since
		// nothing changed.
		return store.Job{}, fmt.Errorf("complete job: job %s: the claim check matched no row although the claim is current", p.JobID), nil
	}
	if err != nil {
		return store.Job{}, nil, interpretError("complete job "+p.JobID, err)
	}
	if p.Attestation != nil {
		// An envelope is addressed by its digest: storing the same one twice is one row.
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO attestations (digest, envelope, job_id, created_at)
			VALUES (?, ?, ?, ?)`, p.Attestation.Digest, p.Attestation.Envelope, p.JobID, now); err != nil {
			return store.Job{}, nil, interpretError("complete job "+p.JobID+": store attestation", err)
		}
	}
	return j, nil, nil
}

// completedEvent is the job.completed event of a completed job.
func completedEvent(j store.Job, actor store.Actor) event {
	var det details
	det.strIf("attestation_digest", j.AttestationDigest).int("claim", int64(j.ClaimNumber)).str("output_digest", j.OutputDigest)
	return event{actor: actor, action: "job.completed", subject: "job/" + j.ID, details: det.done()}
}

// FailJob records a failed attempt: the job is retried, failed for good, or cancelled.
func (d *DB) FailJob(ctx context.Context, p store.FailJobParams) (store.Job, error) {
	nowT := d.now()
	actor := holderActor(ctx, p.Holder)
	var (
		job     store.Job
		requeue bool
	)
	err := d.write(ctx, "fail job", func(ctx context.Context, tx *sql.Tx) error {
		// The outcome depends on the job's attempts (the backoff, whether any are left), so the
		// job is read first; the write lock is held since BEGIN IMMEDIATE, so it cannot move
		// before the UPDATE, which still carries the claim check itself.
		cur, err := getJob(ctx, tx, p.JobID)
		if err != nil {
			return fmt.Errorf("fail job: %w", err)
		}
		if err := store.ExplainLostClaim(cur, p.Holder, p.ClaimNumber); err != nil {
			return err
		}
		state := store.JobQueued
		switch {
		case cur.CancelRequested:
			state = store.JobCancelled
		case p.Final || cur.ClaimNumber >= cur.MaxAttempts:
			state = store.JobFailed
		}
		requeue = state == store.JobQueued
		runAfter, finished := cur.RunAfter, nowT
		claimedBy := cur.Holder
		if requeue {
			delay := store.Backoff(cur.ClaimNumber)
			if p.RetryDelay != nil {
				delay = *p.RetryDelay
			}
			runAfter, finished, claimedBy = nowT.Add(delay), time.Time{}, ""
		}
		j, err := scanJob(tx.QueryRowContext(ctx, `UPDATE jobs SET
				state = ?4, updated_at = ?5, lease_expires_at = NULL, finished_at = ?6, run_after = ?7,
				claimed_by = ?8, last_error = ?9, output = ?10
			WHERE `+claimCheck+` RETURNING `+jobColumns,
			p.JobID, p.Holder, p.ClaimNumber, string(state), micros(nowT), nullMicros(finished),
			micros(runAfter), claimedBy, p.Error, p.Output))
		if errors.Is(err, sql.ErrNoRows) {
			return refusal(ctx, tx, "fail job", p.JobID, p.Holder, p.ClaimNumber)
		}
		if err != nil {
			return interpretError("fail job "+p.JobID, err)
		}
		var det details
		det.int("claim", int64(j.ClaimNumber)).str("error", p.Error).str("state", string(state))
		d.record(micros(nowT), actor, "job.failed", "job/"+j.ID, det.done())
		job = j
		return nil
	})
	if err != nil {
		return store.Job{}, err
	}
	if requeue {
		d.signal.Fire()
	}
	return job, nil
}

// CancelJob cancels a queued job, or asks the worker of a claimed one to stop.
func (d *DB) CancelJob(ctx context.Context, jobID string) (store.Job, error) {
	now := micros(d.now())
	actor := store.ActorOf(ctx)
	var job store.Job
	err := d.write(ctx, "cancel job", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		job, err = d.cancelJob(ctx, tx, jobID, now, actor)
		return err
	})
	return job, err
}

// cancelJob is CancelJob inside a write, for actor: the integration queue cancels the jobs of
// the candidates it supersedes in its own.
func (d *DB) cancelJob(ctx context.Context, tx *sql.Tx, jobID string, now int64, actor store.Actor) (store.Job, error) {
	cur, err := getJob(ctx, tx, jobID)
	if err != nil {
		return store.Job{}, fmt.Errorf("cancel job: %w", err)
	}
	var q, action string
	switch cur.State {
	case store.JobQueued:
		q = `UPDATE jobs SET state = 'cancelled', finished_at = ?2, updated_at = ?2
			WHERE id = ?1 AND state = 'queued' RETURNING ` + jobColumns
		action = "job.cancelled"
	case store.JobClaimed:
		if cur.CancelRequested {
			return cur, nil
		}
		q = `UPDATE jobs SET cancel_requested = 1, updated_at = ?2
			WHERE id = ?1 AND state = 'claimed' RETURNING ` + jobColumns
		action = "job.cancel_requested"
	default:
		return store.Job{}, &store.StateError{What: "job " + jobID,
			Msg: fmt.Sprintf("is %s; only a queued or claimed job can be cancelled", cur.State)}
	}
	j, err := scanJob(tx.QueryRowContext(ctx, q, jobID, now))
	if err != nil {
		return store.Job{}, interpretError("cancel job "+jobID, err)
	}
	d.record(now, actor, action, "job/"+j.ID, nil)
	return j, nil
}

// GetJob answers one job.
func (d *DB) GetJob(ctx context.Context, jobID string) (store.Job, error) {
	j, err := getJob(ctx, d.r, jobID)
	if err != nil {
		return store.Job{}, fmt.Errorf("get job: %w", err)
	}
	return j, nil
}

// ListJobs answers jobs newest first; the page token is the seq of the last job answered.
func (d *DB) ListJobs(ctx context.Context, p store.ListJobsParams) ([]store.Job, string, error) {
	after, err := store.DecodeSeqPageToken(p.PageToken)
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", err)
	}
	limit := pageLimit(p.Limit)
	q := `SELECT seq, ` + jobColumns + ` FROM jobs WHERE 1 = 1`
	var args []any
	if after > 0 {
		q += ` AND seq < ?`
		args = append(args, after)
	}
	if len(p.States) > 0 {
		q += ` AND state IN (` + placeholders(len(args)+1, len(p.States)) + `)`
		for _, s := range p.States {
			args = append(args, string(s))
		}
	}
	if len(p.Kinds) > 0 {
		q += ` AND kind IN (` + placeholders(len(args)+1, len(p.Kinds)) + `)`
		for _, k := range p.Kinds {
			args = append(args, k)
		}
	}
	switch {
	case strings.HasSuffix(p.Holder, "|"):
		// Every label of a principal: the claimants in ["alice|", "alice}"), '}' following '|'.
		// A range, not LIKE, which would read '%' and '_' in a name as wildcards. The literal
		// condition lets SQLite use the partial index jobs_claimed_by.
		q += ` AND claimed_by <> '' AND claimed_by >= ? AND claimed_by < ?`
		args = append(args, p.Holder, p.Holder[:len(p.Holder)-1]+"}")
	case p.Holder != "":
		q += ` AND claimed_by <> '' AND claimed_by = ?`
		args = append(args, p.Holder)
	}
	// One row more than the page tells whether another page follows.
	q += ` ORDER BY seq DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := d.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", interpretError("list jobs", err)
	}
	defer rows.Close()
	var (
		jobs []store.Job
		seqs []int64
	)
	for rows.Next() {
		var seq int64
		j, err := scanJob(rows, &seq)
		if err != nil {
			return nil, "", interpretError("list jobs", err)
		}
		jobs, seqs = append(jobs, j), append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, "", interpretError("list jobs", err)
	}
	next := ""
	if len(jobs) > limit {
		jobs = jobs[:limit]
		next = store.EncodeSeqPageToken(seqs[limit-1])
	}
	return jobs, next, nil
}

// CountJobs answers the number of jobs in each state.
func (d *DB) CountJobs(ctx context.Context) (map[store.JobState]int64, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT state, count(*) FROM jobs GROUP BY state`)
	if err != nil {
		return nil, interpretError("count jobs", err)
	}
	defer rows.Close()
	counts := make(map[store.JobState]int64)
	for rows.Next() {
		var (
			s string
			n int64
		)
		if err := rows.Scan(&s, &n); err != nil {
			return nil, interpretError("count jobs", err)
		}
		counts[store.JobState(s)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("count jobs", err)
	}
	return counts, nil
}

// GetAttestation answers a stored envelope by its digest.
func (d *DB) GetAttestation(ctx context.Context, digest string) (store.Attestation, error) {
	var (
		a       store.Attestation
		created int64
	)
	err := d.r.QueryRowContext(ctx, `SELECT digest, envelope, job_id, created_at FROM attestations WHERE digest = ?`, digest).
		Scan(&a.Digest, &a.Envelope, &a.JobID, &created)
	if err != nil {
		return store.Attestation{}, interpretError("get attestation "+digest, err)
	}
	a.CreatedAt = fromMicros(created)
	return a, nil
}
