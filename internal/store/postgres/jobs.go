package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ag-coord/ag/internal/jsontext"
	"github.com/ag-coord/ag/internal/store"
)

// jobFields are the columns of a job in the order scanJob reads them.
var jobFields = []string{
	"seq", "id", "kind", "state", "payload", "priority", "attempts", "max_attempts", "claimed_by",
	"lease_ns", "lease_expires_at", "run_after", "created_at", "updated_at", "finished_at",
	"last_error", "result", "output", "output_digest", "attestation_digest", "cancel_requested",
	"progress", "enqueued_by", "unique_key",
}

// jobCols answers the job columns, qualified by alias when it is not empty.
func jobCols(alias string) string {
	if alias == "" {
		return strings.Join(jobFields, ", ")
	}
	return alias + "." + strings.Join(jobFields, ", "+alias+".")
}

// jobScan receives a job row.
type jobScan struct {
	seq                   int64
	j                     store.Job
	state                 string
	payload, result       *string
	attempts, maxAttempts int64
	leaseNS               int64
	leaseExp, finished    *time.Time
}

func (s *jobScan) dest() []any {
	return []any{
		&s.seq, &s.j.ID, &s.j.Kind, &s.state, &s.payload, &s.j.Priority, &s.attempts, &s.maxAttempts,
		&s.j.Holder, &s.leaseNS, &s.leaseExp, &s.j.RunAfter, &s.j.CreatedAt, &s.j.UpdatedAt,
		&s.finished, &s.j.LastError, &s.result, &s.j.Output, &s.j.OutputDigest,
		&s.j.AttestationDigest, &s.j.CancelRequested, &s.j.Progress, &s.j.EnqueuedBy, &s.j.UniqueKey,
	}
}

func (s *jobScan) job() store.Job {
	j := s.j
	j.State = store.JobState(s.state)
	j.Payload = bytesOrNil(s.payload)
	j.Result = bytesOrNil(s.result)
	j.ClaimNumber = uint32(s.attempts)
	j.MaxAttempts = uint32(s.maxAttempts)
	j.Lease = time.Duration(s.leaseNS)
	j.LeaseExpiresAt = utcOrZero(s.leaseExp)
	j.FinishedAt = utcOrZero(s.finished)
	j.RunAfter = j.RunAfter.UTC()
	j.CreatedAt = j.CreatedAt.UTC()
	j.UpdatedAt = j.UpdatedAt.UTC()
	return j
}

func bytesOrNil(s *string) []byte {
	if s == nil {
		return nil
	}
	return []byte(*s)
}

func textOrNil(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

func utcOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// micros is how durations enter SQL: `$n::bigint * interval '1 microsecond'` is exact, where a
// float number of seconds would not be.
func micros(d time.Duration) int64 { return d.Microseconds() }

// ---- enqueue ----

// A conflict on the unique key inserts nothing and answers no row, and records no event; the
// caller then reads the job that holds the key. The NOTIFY is sent by the insert's own
// transaction, so other replicas hear of the job only once it is committed. $10 and $11 are the
// event's principal and holder, $12 its details.
var enqueueSQL = q(`WITH j AS (
	INSERT INTO jobs (id, kind, state, payload, priority, max_attempts, run_after, created_at, updated_at, enqueued_by, unique_key)
	VALUES ($2, $3, 'queued', $4, $5, $6, {now} + $7::bigint * interval '1 microsecond', {now}, {now}, $8, $9)
	ON CONFLICT (unique_key) WHERE unique_key <> '' AND state IN ('queued', 'claimed') DO NOTHING
	RETURNING ` + jobCols("") + `),
ev AS (` + auditRecord(`SELECT $10, $11, 'job.enqueued', 'job/' || j.id, $12 FROM j`) + `)
SELECT ` + jobCols("j") + `, pg_notify('` + notifyChannel + `', '') FROM j`)

// The details of the job events that the statements build, from the job's row u as they
// changed it.
var (
	jobObjectClaimed = jsonObject(
		mem("claim", jsonInt("u.attempts")),
		mem("lease_expires_at", jsonTime("u.lease_expires_at")))
	jobObjectExpired = jsonObject(
		mem("claim", jsonInt("u.attempts")),
		mem("state", jsonWord("u.state")))
)

// workerEvents answers the audit record of event action (an SQL expression) with details (an
// SQL expression) for each job of u, by the worker whose claim it is.
func workerEvents(action, details string) string {
	return auditRecord(`SELECT split_part(u.claimed_by, '|', 1), u.claimed_by, ` + action + `, 'job/' || u.id, ` +
		details + ` FROM u`)
}

// The literal conditions are those of the partial unique index, so that the planner can use it.
var jobByUniqueKeySQL = `SELECT ` + jobCols("") + ` FROM jobs
WHERE unique_key = $1 AND unique_key <> '' AND state IN ('queued', 'claimed')`

// EnqueueJob inserts a QUEUED job, or answers the unfinished job that holds p.UniqueKey.
func (db *DB) EnqueueJob(ctx context.Context, p store.EnqueueJobParams) (store.Job, bool, error) {
	j, existing, err := db.enqueue(ctx, db.pool, p, principalActor(ctx, p.EnqueuedBy))
	if err == nil && !existing {
		db.signal.Fire()
		db.audited()
	}
	return j, existing, err
}

// enqueue is EnqueueJob on qr, recording the job.enqueued event by actor. In a transaction the
// NOTIFY is delivered when it commits; the caller fires this replica's signals after the commit
// when the job is new.
func (db *DB) enqueue(ctx context.Context, qr querier, p store.EnqueueJobParams, actor store.Actor) (store.Job, bool, error) {
	var d detailsBuilder
	d.str("kind", p.Kind).int("max_attempts", int64(p.MaxAttempts)).int("priority", int64(p.Priority))
	if p.UniqueKey != "" {
		d.str("unique_key", p.UniqueKey)
	}
	det := d.done()
	// The job holding the key may finish between the refused insert and the read; then the key
	// is free and the insert is tried again. Each round needs another commit to interleave, so
	// the bound is never reached in practice.
	for range 100 {
		var s jobScan
		err := qr.QueryRow(ctx, enqueueSQL, db.now(), store.NewID("job"), p.Kind, textOrNil(p.Payload),
			p.Priority, int64(p.MaxAttempts), micros(p.Delay), p.EnqueuedBy, p.UniqueKey, actor.Principal, actor.Holder, det).
			Scan(append(s.dest(), nil)...)
		if err == nil {
			return s.job(), false, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) || p.UniqueKey == "" {
			return store.Job{}, false, interpretError("enqueue job", err)
		}
		err = qr.QueryRow(ctx, jobByUniqueKeySQL, p.UniqueKey).Scan(s.dest()...)
		if err == nil {
			return s.job(), true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return store.Job{}, false, interpretError("enqueue job: read the job with its unique key", err)
		}
	}
	return store.Job{}, false, fmt.Errorf("postgres: enqueue job: unique key %q kept changing hands", p.UniqueKey)
}

// ---- claim ----

// settleWhere selects the expired claims that cannot be claimed again: ExpireJobs settles
// them, and so does every claim. Rows another transaction holds are skipped: it is changing
// them anyway, and waiting could deadlock two settlers locking in different orders. The claim
// never takes such a job: it requires attempts < max_attempts and no cancel request.
const settleWhere = `state = 'claimed' AND lease_expires_at <= {now} AND (attempts >= max_attempts OR cancel_requested)`

// settleState and settleError are what settling sets. CANCELLED wins over FAILED, as in
// FailJob: someone asked for the job to stop.
const (
	settleState = `CASE WHEN jobs.cancel_requested THEN 'cancelled' ELSE 'failed' END`
	settleError = `CASE WHEN jobs.cancel_requested THEN jobs.last_error ELSE '` + store.LeaseExpiredError + `' END`
)

// settleSQL is ExpireJobs; it answers how many jobs it settled.
var settleSQL = q(`WITH u AS (
	UPDATE jobs SET
		state = ` + settleState + `,
		last_error = ` + settleError + `,
		lease_expires_at = NULL,
		finished_at = {now},
		updated_at = {now}
	WHERE seq IN (SELECT seq FROM jobs WHERE ` + settleWhere + ` FOR UPDATE SKIP LOCKED)
	RETURNING id, attempts, state),
ev AS (` + auditRecord(`SELECT '`+store.SystemPrincipal+`', '', 'job.expired', 'job/' || u.id, `+jobObjectExpired+` FROM u`) + `)
SELECT count(*) FROM u`)

// claimSQL settles expired claims and claims the best claimable jobs for a group of claimers
// in one statement, and in one UPDATE, so that it pays for one: the rows to settle and the
// rows to claim are its targets, told apart by t.n (0: settle; else the claimer, counted from
// 1), and every SET is a CASE on it. $2 are the claimers' workers, $3 their leases in ns and
// $4 how many they are: the best job goes to the first, the second best to the second, and so
// on, as if they had claimed one after the other; a claimer of several jobs is as many
// consecutive claimers. Due queued jobs and expired claims are searched apart, each through
// its own index in claim order, because one OR-ed search would sort every queued job; the
// best of both are taken. Those not taken stay locked only until this statement's
// transaction ends, and other claimers skip them meanwhile. Rows answer the settled jobs too,
// with t.n 0. Each changed job's event (job.claimed by its claimer, job.expired by the
// server) is inserted by the same statement.
func claimSQL(kindFilter string) string {
	return q(`
WITH settle AS (
	SELECT seq FROM jobs WHERE ` + settleWhere + `
	FOR UPDATE SKIP LOCKED),
due AS (
	SELECT seq, priority, run_after FROM jobs
	WHERE state = 'queued' AND run_after <= {now}` + kindFilter + `
	ORDER BY priority DESC, run_after, seq
	LIMIT $4
	FOR UPDATE SKIP LOCKED),
expired AS (
	SELECT seq, priority, run_after FROM jobs
	WHERE state = 'claimed' AND lease_expires_at <= {now} AND attempts < max_attempts AND NOT cancel_requested` + kindFilter + `
	ORDER BY priority DESC, run_after, seq
	LIMIT $4
	FOR UPDATE SKIP LOCKED),
picked AS (
	SELECT seq, row_number() OVER (ORDER BY priority DESC, run_after, seq) AS n
	FROM (SELECT * FROM due UNION ALL SELECT * FROM expired) c
	ORDER BY priority DESC, run_after, seq
	LIMIT $4),
target AS (
	SELECT seq, n FROM picked
	UNION ALL
	SELECT seq, 0 FROM settle),
u AS (
UPDATE jobs SET
	state = CASE WHEN t.n > 0 THEN 'claimed' ELSE ` + settleState + ` END,
	claimed_by = CASE WHEN t.n > 0 THEN ($2::text[])[t.n] ELSE jobs.claimed_by END,
	lease_ns = CASE WHEN t.n > 0 THEN ($3::bigint[])[t.n] ELSE jobs.lease_ns END,
	lease_expires_at = CASE WHEN t.n > 0 THEN {now} + (($3::bigint[])[t.n] / 1000) * interval '1 microsecond' END,
	attempts = CASE WHEN t.n > 0 THEN jobs.attempts + 1 ELSE jobs.attempts END,
	progress = CASE WHEN t.n > 0 THEN '' ELSE jobs.progress END,
	last_error = CASE WHEN t.n > 0 THEN jobs.last_error ELSE ` + settleError + ` END,
	finished_at = CASE WHEN t.n > 0 THEN jobs.finished_at ELSE {now} END,
	updated_at = {now}
FROM target t
WHERE jobs.seq = t.seq
RETURNING t.n, ` + jobCols("jobs") + `),
ev AS (` + auditRecord(`SELECT CASE WHEN u.n > 0 THEN split_part(u.claimed_by, '|', 1) ELSE '`+store.SystemPrincipal+`' END,
		CASE WHEN u.n > 0 THEN u.claimed_by ELSE '' END,
		CASE WHEN u.n > 0 THEN 'job.claimed' ELSE 'job.expired' END,
		'job/' || u.id,
		CASE WHEN u.n > 0 THEN `+jobObjectClaimed+` ELSE `+jobObjectExpired+` END
	FROM u`) + `)
SELECT u.n, ` + jobCols("u") + ` FROM u`)
}

// The kinds are matched with array_position rather than = ANY: the planner guesses that
// = ANY keeps few rows and that array_position ... IS NOT NULL keeps most. Expecting very few
// due jobs of the kinds (as on a table without statistics yet, whose generic plan each
// connection then keeps), it would find every due job through a bitmap and sort them all, on
// every claim, instead of walking the claim-order index to the first ones.
var (
	claimAnySQL   = claimSQL("")
	claimKindsSQL = claimSQL(" AND array_position($5::text[], kind) IS NOT NULL")
)

type claimCall = call[store.ClaimJobParams, []store.Job]

// claimPlacesMax is the most jobs one claim statement asks for, whatever the calls it
// serves: the statement's sort, locks and answer grow with it, and a call queued behind a
// statement that large would wait for all of it. A call asking for more goes alone.
const claimPlacesMax = 512

// ClaimJob settles expired claims and claims the best claimable job, or answers nil. Claims
// made at the same time for the same kinds go together (see group.go).
func (db *DB) ClaimJob(ctx context.Context, p store.ClaimJobParams) (*store.Job, error) {
	p.Max = 1
	jobs, err := db.claims.do(ctx, p, db.claimGroup, claimFits)
	if err != nil || len(jobs) == 0 {
		return nil, err
	}
	return &jobs[0], nil
}

// ClaimJobs settles expired claims and claims the p.Max best claimable jobs. It goes in the
// same groups as ClaimJob, taking p.Max consecutive places of its statement.
func (db *DB) ClaimJobs(ctx context.Context, p store.ClaimJobParams) ([]store.Job, error) {
	jobs, err := db.claims.do(ctx, p, db.claimGroup, claimFits)
	if err != nil {
		return nil, err
	}
	if jobs == nil {
		jobs = []store.Job{}
	}
	return jobs, nil
}

// claimFits lets c join claims for the same kinds while the statement stays within
// claimPlacesMax jobs.
func claimFits(batch []*claimCall, c *claimCall) bool {
	if !slices.Equal(batch[0].p.Kinds, c.p.Kinds) {
		return false
	}
	n := claimPlaces(c.p)
	for _, b := range batch {
		n += claimPlaces(b.p)
	}
	return n <= claimPlacesMax
}

// claimGroup claims for calls that want the same kinds.
func (db *DB) claimGroup(ctx context.Context, calls []*claimCall) {
	err := db.claimTogether(ctx, calls)
	if err == nil {
		return
	}
	for _, c := range calls {
		c.r = nil
	}
	if len(calls) == 1 {
		calls[0].err = interpretError("claim job", err)
		return
	}
	// Nothing was claimed: each claimer gets its own answer.
	for _, c := range calls {
		db.claimGroup(ctx, []*claimCall{c})
	}
}

// claimPlaces is how many places of a claim statement a call takes: the jobs it asks for.
func claimPlaces(p store.ClaimJobParams) int { return max(p.Max, 1) }

// claimTogether claims for calls in one statement, and sets the jobs they got. Each call
// holds claimPlaces consecutive places, in the order of calls.
func (db *DB) claimTogether(ctx context.Context, calls []*claimCall) error {
	total := 0
	for _, c := range calls {
		total += claimPlaces(c.p)
	}
	workers := make([]string, 0, total)
	leases := make([]int64, 0, total)
	for _, c := range calls {
		for range claimPlaces(c.p) {
			workers, leases = append(workers, c.p.Holder), append(leases, int64(c.p.Lease))
		}
	}
	var rows pgx.Rows
	var err error
	if kinds := calls[0].p.Kinds; len(kinds) == 0 {
		rows, err = db.pool.Query(ctx, claimAnySQL, db.now(), workers, leases, int64(total))
	} else {
		rows, err = db.pool.Query(ctx, claimKindsSQL, db.now(), workers, leases, int64(total), kinds)
	}
	if err != nil {
		return err
	}
	// The statement numbers its claims 1..K, K the jobs it found, and every one of them is
	// claimed (its row is locked by then); rows come in the UPDATE's order, which need not be
	// that one, so each job is put at its place. Calls get their places' runs of the one array,
	// capped so that appending to one cannot overwrite another's.
	var jobs []store.Job
	got := 0
	var n int64
	var s jobScan
	tag, err := pgx.ForEachRow(rows, append([]any{&n}, s.dest()...), func() error {
		if n > 0 {
			if jobs == nil {
				// Room for every place up to a bound, so that the usual statement allocates
				// once, while one that asks for many and finds few does not pay for them all.
				jobs = make([]store.Job, 0, min(total, 64))
			}
			if int(n) > len(jobs) {
				jobs = slices.Grow(jobs, int(n)-len(jobs))[:n]
			}
			jobs[n-1] = s.job()
			got++
		}
		return nil
	})
	if err != nil {
		return err
	}
	if tag.RowsAffected() > 0 {
		db.audited()
	}
	start := 0
	for _, c := range calls {
		lo, hi := min(start, len(jobs)), min(start+claimPlaces(c.p), len(jobs))
		start += claimPlaces(c.p)
		if hi == lo {
			continue
		}
		c.r = jobs[lo:hi:hi]
		if got != len(jobs) {
			// Should the statement ever leave a place empty, no caller gets a job without an id.
			c.r = slices.DeleteFunc(slices.Clone(c.r), func(j store.Job) bool { return j.ID == "" })
		}
	}
	return nil
}

// ExpireJobs settles expired claims that cannot be claimed again.
func (db *DB) ExpireJobs(ctx context.Context) (int, error) {
	var n int64
	if err := db.pool.QueryRow(ctx, settleSQL, db.now()).Scan(&n); err != nil {
		return 0, interpretError("expire jobs", err)
	}
	if n > 0 {
		db.audited()
	}
	return int(n), nil
}

// ---- changes of a claim ----

// claimCheck is the ADR-0012 check, with $2 the job id, $3 the worker and $4 the claim number
// (0: not given). The state 'claimed' comes as parameter $<stateParam>, never as a literal:
// with a literal the planner may prove the predicate of jobs_claimed_lease and walk every
// claimed job instead of looking the one up by id; a parameter keeps the (generic) plan on
// the id.
func claimCheck(stateParam int) string {
	return fmt.Sprintf(`id = $2 AND state = $%d AND claimed_by = $3 AND ($4::bigint = 0 OR attempts = $4::bigint)`, stateParam)
}

// claimedState is the value of claimCheck's state parameter.
const claimedState = string(store.JobClaimed)

// guarded runs a conditional UPDATE whose WHERE is the claim check and that answers the
// changed job (and then extra columns, which are skipped), and answers that job. No row means
// that the check refused, and changed nothing; only then is the job read, to explain the
// refusal, so the way that succeeds costs one statement.
func (db *DB) guarded(ctx context.Context, what, sql string, extra int, jobID string, explain func(store.Job) error, args ...any) (store.Job, error) {
	// The read comes after the UPDATE: a commit landing in between can show a claim that the
	// UPDATE rightly refused and that would pass now. Nothing was changed, so the UPDATE is
	// simply run again.
	for range 10 {
		var s jobScan
		dest := s.dest()
		for range extra {
			dest = append(dest, nil)
		}
		err := db.pool.QueryRow(ctx, sql, args...).Scan(dest...)
		if err == nil {
			return s.job(), nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return store.Job{}, interpretError(what, err)
		}
		err = db.pool.QueryRow(ctx, getJobSQL, jobID).Scan(s.dest()...)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.Job{}, fmt.Errorf("job %s: %w", jobID, store.ErrNotFound)
		}
		if err != nil {
			return store.Job{}, interpretError(what, err)
		}
		if err := explain(s.job()); err != nil {
			return store.Job{}, err
		}
	}
	return store.Job{}, fmt.Errorf("postgres: %s: job %s: the claim check kept racing with other changes", what, jobID)
}

// lostClaim explains a refused heartbeat or failure.
func lostClaim(worker string, token uint32) func(store.Job) error {
	return func(j store.Job) error { return store.ExplainLostClaim(j, worker, token) }
}

// refusedCompletion explains a refused completion.
func refusedCompletion(p store.CompleteJobParams) func(store.Job) error {
	return func(j store.Job) error {
		return store.ExplainRefusedCompletion(j, p.Holder, p.ClaimNumber, p.Attestation != nil)
	}
}

// A lease of 0 extends by the claim's own lease; the claim's lease length stays as claimed.
var heartbeatSQL = q(`
UPDATE jobs SET
	lease_expires_at = {now} + ((CASE WHEN $5::bigint > 0 THEN $5::bigint ELSE lease_ns END) / 1000) * interval '1 microsecond',
	progress = CASE WHEN $6::text <> '' THEN $6::text ELSE progress END,
	output = CASE WHEN $8::text <> '' THEN $8::text ELSE output END,
	updated_at = {now}
WHERE ` + claimCheck(7) + `
RETURNING ` + jobCols(""))

// HeartbeatJob extends the lease of a current claim.
func (db *DB) HeartbeatJob(ctx context.Context, p store.HeartbeatJobParams) (store.Job, error) {
	return db.guarded(ctx, "heartbeat job", heartbeatSQL, 0, p.JobID, lostClaim(p.Holder, p.ClaimNumber),
		db.now(), p.JobID, p.Holder, int64(p.ClaimNumber), int64(p.Lease), p.Progress, claimedState, p.Output)
}

// completeUpdate completes the job, $5 result, $6 output, $7 output digest, $8 attestation
// digest (NULL: none).
const completeUpdate = `
UPDATE jobs SET
	state = 'completed',
	result = $5,
	output = $6,
	output_digest = $7,
	attestation_digest = coalesce($8::text, ''),
	lease_expires_at = NULL,
	finished_at = {now},
	updated_at = {now}
WHERE `

// completeSQL completes without an attestation; completeAttestedSQL inserts the attestation
// ($9 the envelope) from the UPDATE's output, so it exists only when the claim check passed,
// and in the same transaction. An envelope already stored (same digest, same bytes) is kept.
// Both record the job.completed event in the same statement, its details the claim number
// between the halves that completedDetails answers ($10 and $11, or $11 and $12).
var (
	completeSQL = q(`WITH u AS (` + completeUpdate + claimCheck(9) + ` AND kind <> '` + store.KindValidate + `' RETURNING ` + jobCols("") + `),
ev AS (` + completedEvents("$10::text", "$11::text") + `)
SELECT ` + jobCols("u") + ` FROM u`)
	completeAttestedSQL = q(`WITH u AS (` + completeUpdate + claimCheck(10) + ` RETURNING ` + jobCols("") + `),
attested AS (
	INSERT INTO attestations (digest, envelope, job_id, created_at)
	SELECT $8::text, $9::bytea, u.id, {now} FROM u
	ON CONFLICT (digest) DO NOTHING),
ev AS (` + completedEvents("$11::text", "$12::text") + `)
SELECT ` + jobCols("u") + ` FROM u`)
)

// completedEvents records the job.completed events of the jobs u completed, whose details are
// the claim number between the SQL expressions head and tail.
func completedEvents(head, tail string) string {
	return workerEvents(`'job.completed'`, head+` || (u.attempts)::text || `+tail)
}

// completedDetails answers the text of a job.completed event's details before and after the
// claim number, which the statement reads from the job (a completion need not give it): all
// but one member are known before the statement runs, and the JSON is built here, at less
// cost than by the statement.
func completedDetails(p store.CompleteJobParams) (head, tail string) {
	if p.Attestation == nil {
		head = `{"claim":`
	} else {
		head = string(jsontext.AppendString([]byte(`{"attestation_digest":`), p.Attestation.Digest)) + `,"claim":`
	}
	return head, string(append(jsontext.AppendString([]byte(`,"output_digest":`), p.OutputDigest), '}'))
}

// completeGroupSQL completes the jobs of a group of calls, $2.. holding one entry per call
// (ids, workers, claim numbers, results, outputs, output digests, and when attested,
// attestation digests (NULL: none) and envelopes; $11 and $12 the halves of the events'
// details); $9 is the state 'claimed' (see claimCheck). Each row's claim check is in the
// UPDATE's WHERE; the job ids are distinct. The completions' events are inserted by the same
// statement. The ids are looked up through = ANY, which keeps the plan on the id index whatever the
// planner thinks of unnest's rows.
func completeGroupSQL(attested bool) string {
	update := `
UPDATE jobs SET
	state = 'completed',
	result = r.result,
	output = r.output,
	output_digest = r.output_digest,
	attestation_digest = coalesce(r.att_digest, ''),
	lease_expires_at = NULL,
	finished_at = {now},
	updated_at = {now}
FROM unnest($2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[], $10::bytea[], $11::text[], $12::text[])
	AS r(id, worker, token, result, output, output_digest, att_digest, envelope, det_head, det_tail)
WHERE jobs.id = ANY($2::text[]) AND jobs.id = r.id
	AND jobs.state = $9 AND jobs.claimed_by = r.worker AND (r.token = 0 OR jobs.attempts = r.token)
	AND (r.att_digest IS NOT NULL OR jobs.kind <> '` + store.KindValidate + `')
RETURNING ` + jobCols("jobs") + `, r.det_head, r.det_tail`
	if !attested {
		return q(`WITH u AS (` + update + `),
ev AS (` + completedEvents("u.det_head", "u.det_tail") + `)
SELECT ` + jobCols("u") + ` FROM u`)
	}
	return q(`WITH u AS (` + update + `, r.att_digest, r.envelope),
attested AS (
	INSERT INTO attestations (digest, envelope, job_id, created_at)
	SELECT att_digest, envelope, id, {now} FROM u WHERE att_digest IS NOT NULL
	ON CONFLICT (digest) DO NOTHING),
ev AS (` + completedEvents("u.det_head", "u.det_tail") + `)
SELECT ` + jobCols("u") + ` FROM u`)
}

var (
	completeGroupPlainSQL    = completeGroupSQL(false)
	completeGroupAttestedSQL = completeGroupSQL(true)
)

type completeCall = call[store.CompleteJobParams, store.Job]

// CompleteJob completes a current claim's job and stores its attestation. Completions made at
// the same time go together (see group.go).
func (db *DB) CompleteJob(ctx context.Context, p store.CompleteJobParams) (store.Job, error) {
	return db.completes.do(ctx, p, db.completeGroup, func(batch []*completeCall, c *completeCall) bool {
		return !slices.ContainsFunc(batch, func(b *completeCall) bool { return b.p.JobID == c.p.JobID })
	})
}

// completeGroup completes for calls on distinct jobs. A call that the statement did not
// complete (refused, or when the statement failed) is run alone, to get its own answer.
func (db *DB) completeGroup(ctx context.Context, calls []*completeCall) {
	if len(calls) == 1 {
		calls[0].r, calls[0].err = db.completeOne(ctx, calls[0].p)
		return
	}
	done, err := db.completeTogether(ctx, calls)
	if err != nil {
		done = nil // nothing was changed
	}
	for _, c := range calls {
		if j, ok := done[c.p.JobID]; ok {
			c.r = j
		} else {
			c.r, c.err = db.completeOne(ctx, c.p)
		}
	}
}

// completeChunkMax is the most completions one statement of CompleteJobs applies: past that
// the round trip is shared by so many that a larger statement gains little, while its arrays,
// its locks and its answer keep growing.
const completeChunkMax = 256

// CompleteJobs completes the jobs of current claims, in as few statements as it can, each
// completion with its own claim check. A completion that its statement did not complete is
// run alone, as in completeGroup, to get its own answer.
func (db *DB) CompleteJobs(ctx context.Context, ps []store.CompleteJobParams) ([]store.CompleteJobOutcome, error) {
	out := make([]store.CompleteJobOutcome, len(ps))
	if len(ps) == 0 {
		return out, nil
	}
	// A job given twice would join two rows of a statement to one job, and the UPDATE would
	// apply either of them; so only its first completion goes in a statement, and the others
	// run alone afterwards, to be answered as CompleteJob would answer them then.
	calls := make([]completeCall, len(ps))
	batch := make([]*completeCall, 0, len(ps))
	firstOf := make(map[string]int, len(ps))
	for i := range ps {
		calls[i].p = ps[i]
		if _, dup := firstOf[ps[i].JobID]; !dup {
			firstOf[ps[i].JobID] = i
			batch = append(batch, &calls[i])
		}
	}
	var completed map[string]store.Job
	for chunk := range slices.Chunk(batch, completeChunkMax) {
		// A chunk goes with the chunks of CompleteJobs calls made at the same time, when they
		// fit together in one statement (group.go).
		done, err := db.manyCompletes.do(ctx, chunk, db.completeManyGroup, completeManyFits)
		if err != nil {
			// The statement changed nothing. When nothing was changed before it either, and
			// what failed is the database (the connection, the context) rather than this
			// statement, the batch fails as a whole, as the contract has it, instead of trying
			// each completion against a database that is not there.
			var pgErr *pgconn.PgError
			if len(completed) == 0 && !errors.As(err, &pgErr) {
				return nil, interpretError("complete jobs", err)
			}
			continue // its completions run alone below
		}
		if completed == nil {
			completed = done
		} else {
			maps.Copy(completed, done)
		}
	}
	// In the order of ps, so that a job's later completions run after its first.
	for i, p := range ps {
		if j, ok := completed[p.JobID]; ok && firstOf[p.JobID] == i {
			out[i].Job = j
		} else {
			out[i].Job, out[i].Err = db.completeOne(ctx, p)
		}
	}
	return out, nil
}

type completeManyCall = call[[]*completeCall, map[string]store.Job]

// completeManyFits lets a chunk of completions join a statement of others when together they
// stay within completeChunkMax and complete distinct jobs: two rows of one statement for one
// job (two workers, one of them stale) would have the UPDATE apply either.
func completeManyFits(batch []*completeManyCall, c *completeManyCall) bool {
	n := len(c.p)
	for _, b := range batch {
		n += len(b.p)
	}
	if n > completeChunkMax {
		return false
	}
	ids := make(map[string]struct{}, len(c.p))
	for _, x := range c.p {
		ids[x.p.JobID] = struct{}{}
	}
	for _, b := range batch {
		for _, x := range b.p {
			if _, ok := ids[x.p.JobID]; ok {
				return false
			}
		}
	}
	return true
}

// completeManyGroup completes the chunks of several CompleteJobs calls in one statement and
// answers each call the jobs of its own chunk that the statement completed. Should the shared
// statement fail, each chunk is tried in a statement of its own, so that one call's failure is
// not another's.
func (db *DB) completeManyGroup(ctx context.Context, calls []*completeManyCall) {
	if len(calls) == 1 {
		calls[0].r, calls[0].err = db.completeTogether(ctx, calls[0].p)
		return
	}
	var all []*completeCall
	for _, c := range calls {
		all = append(all, c.p...)
	}
	done, err := db.completeTogether(ctx, all)
	for _, c := range calls {
		if err != nil {
			c.r, c.err = db.completeTogether(ctx, c.p)
			continue
		}
		c.r = make(map[string]store.Job, len(c.p))
		for _, x := range c.p {
			if j, ok := done[x.p.JobID]; ok {
				c.r[x.p.JobID] = j
			}
		}
	}
}

// completeTogether completes for calls in one statement, and answers the jobs it completed.
func (db *DB) completeTogether(ctx context.Context, calls []*completeCall) (map[string]store.Job, error) {
	n := len(calls)
	ids, workers, results, outputs, digests := make([]string, n), make([]string, n), make([]*string, n), make([]string, n), make([]string, n)
	tokens := make([]int64, n)
	attDigests, envelopes := make([]*string, n), make([][]byte, n)
	heads, tails := make([]string, n), make([]string, n)
	attested := false
	for i, c := range calls {
		p := c.p
		ids[i], workers[i], tokens[i], outputs[i], digests[i] = p.JobID, p.Holder, int64(p.ClaimNumber), p.Output, p.OutputDigest
		heads[i], tails[i] = completedDetails(p)
		if len(p.Result) > 0 {
			r := string(p.Result)
			results[i] = &r
		}
		if p.Attestation != nil {
			attDigests[i], envelopes[i] = &p.Attestation.Digest, p.Attestation.Envelope
			attested = true
		}
	}
	sql := completeGroupPlainSQL
	if attested {
		sql = completeGroupAttestedSQL
	}
	rows, err := db.pool.Query(ctx, sql, db.now(), ids, workers, tokens, results, outputs, digests, attDigests,
		claimedState, envelopes, heads, tails)
	if err != nil {
		return nil, err
	}
	done := make(map[string]store.Job, n)
	var s jobScan
	_, err = pgx.ForEachRow(rows, s.dest(), func() error {
		j := s.job()
		done[j.ID] = j
		return nil
	})
	if err == nil && len(done) > 0 {
		db.audited()
	}
	return done, err
}

// completeOne completes one call in a statement of its own.
func (db *DB) completeOne(ctx context.Context, p store.CompleteJobParams) (j store.Job, err error) {
	head, tail := completedDetails(p)
	if p.Attestation == nil {
		j, err = db.guarded(ctx, "complete job", completeSQL, 0, p.JobID, refusedCompletion(p),
			db.now(), p.JobID, p.Holder, int64(p.ClaimNumber), textOrNil(p.Result), p.Output, p.OutputDigest,
			nil, claimedState, head, tail)
	} else {
		j, err = db.guarded(ctx, "complete job", completeAttestedSQL, 0, p.JobID, refusedCompletion(p),
			db.now(), p.JobID, p.Holder, int64(p.ClaimNumber), textOrNil(p.Result), p.Output, p.OutputDigest,
			p.Attestation.Digest, p.Attestation.Envelope, claimedState, head, tail)
	}
	if err == nil {
		db.audited()
	}
	return j, err
}

// backoffMicros is store.Backoff by attempt: entry k, counted from 1 as SQL arrays are, is
// Backoff(k); attempts 0 take entry 1 and attempts past the end the last (Backoff is capped
// long before). So FailJob computes the default delay from the attempts its UPDATE reads, and
// Backoff stays the one definition of the policy.
var backoffMicros = func() []int64 {
	b := make([]int64, 32)
	for i := range b {
		b[i] = store.Backoff(uint32(i + 1)).Microseconds()
	}
	return b
}()

// $5 error, $6 output, $7 final, $8 retry delay in µs (NULL: backoff), $9 the backoff table.
// The requeue notifies other replicas from its own transaction, as an enqueue does. The
// job.failed event, by the worker $3 (claimed_by is cleared on a retry), is inserted by the
// same statement.
var failSQL = q(`WITH u AS (
UPDATE jobs SET
	state = CASE
		WHEN cancel_requested THEN 'cancelled'
		WHEN $7::boolean OR attempts >= max_attempts THEN 'failed'
		ELSE 'queued' END,
	finished_at = CASE WHEN $7::boolean OR attempts >= max_attempts OR cancel_requested THEN {now} END,
	run_after = CASE
		WHEN $7::boolean OR attempts >= max_attempts OR cancel_requested THEN run_after
		ELSE {now} + coalesce($8::bigint, ($9::bigint[])[least(greatest(attempts, 1), cardinality($9::bigint[]))]) * interval '1 microsecond' END,
	claimed_by = CASE WHEN $7::boolean OR attempts >= max_attempts OR cancel_requested THEN claimed_by ELSE '' END,
	lease_expires_at = NULL,
	last_error = $5,
	output = $6,
	updated_at = {now}
WHERE ` + claimCheck(10) + `
RETURNING ` + jobCols("") + `),
ev AS (` + auditRecord(`SELECT split_part($3, '|', 1), $3, 'job.failed', 'job/' || u.id, `+jsonObject(
	mem("claim", jsonInt("u.attempts")),
	mem("error", jsonText("$5")),
	mem("state", jsonWord("u.state")))+` FROM u`) + `)
SELECT ` + jobCols("u") + `, CASE WHEN u.state = 'queued' THEN pg_notify('` + notifyChannel + `', '') END FROM u`)

// FailJob records a failed attempt: FAILED, CANCELLED, or QUEUED again after a delay.
func (db *DB) FailJob(ctx context.Context, p store.FailJobParams) (store.Job, error) {
	var delay any
	if p.RetryDelay != nil {
		delay = micros(*p.RetryDelay)
	}
	j, err := db.guarded(ctx, "fail job", failSQL, 1, p.JobID, lostClaim(p.Holder, p.ClaimNumber),
		db.now(), p.JobID, p.Holder, int64(p.ClaimNumber), p.Error, p.Output, p.Final, delay, backoffMicros, claimedState)
	if err == nil {
		db.audited()
		if j.State == store.JobQueued {
			db.signal.Fire()
		}
	}
	return j, err
}

// ---- cancel and reads ----

var cancelSQL = q(`WITH u AS (
	UPDATE jobs SET
		state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
		cancel_requested = (state = 'claimed'),
		finished_at = CASE WHEN state = 'queued' THEN {now} END,
		updated_at = {now}
	WHERE id = $2 AND (state = 'queued' OR (state = 'claimed' AND NOT cancel_requested))
	RETURNING ` + jobCols("") + `),
ev AS (` + auditRecord(`SELECT $3, $4, CASE WHEN u.state = 'cancelled' THEN 'job.cancelled' ELSE 'job.cancel_requested' END,
		'job/' || u.id, NULL FROM u`) + `)
SELECT true, ` + jobCols("u") + ` FROM u
UNION ALL
SELECT false, ` + jobCols("j") + ` FROM jobs j WHERE j.id = $2 AND NOT EXISTS (SELECT 1 FROM u)`)

// CancelJob cancels a queued job and asks the worker of a claimed one to stop.
func (db *DB) CancelJob(ctx context.Context, jobID string) (store.Job, error) {
	actor := store.ActorOf(ctx)
	// As in guarded: a refusal read from a snapshot older than the row is looked at again.
	for range 10 {
		var ok bool
		var s jobScan
		err := db.pool.QueryRow(ctx, cancelSQL, db.now(), jobID, actor.Principal, actor.Holder).
			Scan(append([]any{&ok}, s.dest()...)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.Job{}, fmt.Errorf("job %s: %w", jobID, store.ErrNotFound)
		}
		if err != nil {
			return store.Job{}, interpretError("cancel job", err)
		}
		j := s.job()
		if ok {
			db.audited()
			return j, nil
		}
		if j.State == store.JobClaimed && j.CancelRequested {
			return j, nil // asked already: nothing changes
		}
		if j.State.Terminal() {
			return store.Job{}, &store.StateError{What: "job " + jobID,
				Msg: "is " + string(j.State) + "; only a queued or claimed job can be cancelled"}
		}
	}
	return store.Job{}, fmt.Errorf("postgres: cancel job %s: kept racing with other changes", jobID)
}

var getJobSQL = `SELECT ` + jobCols("") + ` FROM jobs WHERE id = $1`

// GetJob answers one job.
func (db *DB) GetJob(ctx context.Context, jobID string) (store.Job, error) {
	var s jobScan
	if err := db.pool.QueryRow(ctx, getJobSQL, jobID).Scan(s.dest()...); err != nil {
		return store.Job{}, interpretError("job "+jobID, err)
	}
	return s.job(), nil
}

// listJobsSQL filters by claimer $5: exact, or "<principal>|" for every label of the principal
// (a prefix, matched with starts_with: a name is never a pattern). Like the other filters it
// is applied while walking the jobs newest first: an index on claimed_by would cost every claim
// and completion an index insertion, to speed up a listing.
var listJobsSQL = `SELECT ` + jobCols("") + ` FROM jobs
WHERE (cardinality($1::text[]) = 0 OR state = ANY($1::text[]))
  AND (cardinality($2::text[]) = 0 OR kind = ANY($2::text[]))
  AND ($3::bigint = 0 OR seq < $3::bigint)
  AND ($5::text = '' OR claimed_by = $5 OR (right($5, 1) = '|' AND starts_with(claimed_by, $5)))
ORDER BY seq DESC
LIMIT $4`

// ListJobs answers jobs newest first, a page at a time.
func (db *DB) ListJobs(ctx context.Context, p store.ListJobsParams) ([]store.Job, string, error) {
	after, err := store.DecodeSeqPageToken(p.PageToken)
	if err != nil {
		return nil, "", err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	states := make([]string, len(p.States))
	for i, s := range p.States {
		states[i] = string(s)
	}
	kinds := p.Kinds
	if kinds == nil {
		kinds = []string{}
	}
	// One row more than the page tells whether there is a next page.
	rows, err := db.pool.Query(ctx, listJobsSQL, states, kinds, after, limit+1, p.Holder)
	if err != nil {
		return nil, "", interpretError("list jobs", err)
	}
	var jobs []store.Job
	var seqs []int64
	var s jobScan
	_, err = pgx.ForEachRow(rows, s.dest(), func() error {
		jobs = append(jobs, s.job())
		seqs = append(seqs, s.seq)
		return nil
	})
	if err != nil {
		return nil, "", interpretError("list jobs", err)
	}
	if len(jobs) > limit {
		return jobs[:limit], store.EncodeSeqPageToken(seqs[limit-1]), nil
	}
	return jobs, "", nil
}

// CountJobs answers the number of jobs in each state.
func (db *DB) CountJobs(ctx context.Context) (map[store.JobState]int64, error) {
	rows, err := db.pool.Query(ctx, `SELECT state, count(*) FROM jobs GROUP BY state`)
	if err != nil {
		return nil, interpretError("count jobs", err)
	}
	counts := map[store.JobState]int64{}
	var state string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		counts[store.JobState(state)] = n
		return nil
	})
	if err != nil {
		return nil, interpretError("count jobs", err)
	}
	return counts, nil
}
