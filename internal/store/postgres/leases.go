package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// leaseChannel is the NOTIFY channel of commits that ended a lease (release, break), so that an
// acquirer waiting on another replica looks again.
const leaseChannel = "ag_leases"

// LeaseSignal answers a channel closed after the next release or break, here or on another
// replica.
func (db *DB) LeaseSignal() <-chan struct{} { return db.leaseSignal.Wait() }

// leaseCols are the columns of a lease in the order leaseScan reads them. The state is as of
// the statement's time ($1): an active lease past its expiry reads as expired.
func leaseCols(alias string) string {
	a := alias + "."
	return a + `id, ` + a + `repository, ` + a + `paths, ` + a + `holder, ` + a + `token, ` +
		`CASE WHEN ` + a + `state = 'active' AND ` + a + `expires_at <= {now} THEN 'expired' ELSE ` + a + `state END AS state, ` +
		a + `acquired_at, ` + a + `expires_at, ` + a + `ended_at`
}

type leaseScan struct {
	l     store.Lease
	token int64
	state string
	ended *time.Time
}

func (s *leaseScan) dest() []any {
	return []any{&s.l.ID, &s.l.Repository, &s.l.Paths, &s.l.Holder, &s.token, &s.state,
		&s.l.AcquiredAt, &s.l.ExpiresAt, &s.ended}
}

func (s *leaseScan) lease() store.Lease {
	l := s.l
	l.FencingToken = uint64(s.token)
	l.State = store.LeaseState(s.state)
	l.AcquiredAt = l.AcquiredAt.UTC()
	l.ExpiresAt = l.ExpiresAt.UTC()
	l.EndedAt = utcOrZero(s.ended)
	return l
}

// ---- overlap ----

// overlapArgs are the arrays from which overlapSQL finds the lease paths overlapping paths:
// for the i-th path p, the rows at the folds (repo.Fold) of p's ancestors (exact), at p's fold
// when p is a file, and in the range of p's fold when p is a directory. Each is an index
// lookup, never a scan of the repository.
type overlapArgs struct {
	exactIdx  []int32
	exactPath []string
	rangeIdx  []int32
	rangeLo   []string
	rangeHi   []string
}

func newOverlapArgs(paths []string) overlapArgs {
	var a overlapArgs
	for i, p := range paths {
		p = repo.Fold(p)
		for _, anc := range repo.Ancestors(p) {
			a.exactIdx = append(a.exactIdx, int32(i))
			a.exactPath = append(a.exactPath, anc)
		}
		if repo.IsDir(p) {
			// Every path that starts with "d/" lies in ["d/", "d0"): '0' follows '/' in byte
			// order, and the column's "C" collation compares bytes.
			a.rangeIdx = append(a.rangeIdx, int32(i))
			a.rangeLo = append(a.rangeLo, p)
			a.rangeHi = append(a.rangeHi, p[:len(p)-1]+"0")
		} else {
			a.exactIdx = append(a.exactIdx, int32(i))
			a.exactPath = append(a.exactPath, p)
		}
	}
	return a
}

func (a overlapArgs) args() []any {
	return []any{a.exactIdx, a.exactPath, a.rangeIdx, a.rangeLo, a.rangeHi}
}

// overlapSQL is a query of (i, lease_id, path, token): the lease_paths rows of repository $r
// whose folds overlap the fold of the i-th path of newOverlapArgs, whose arrays are $n..$n+4,
// and that satisfy cond (on lp). path is the row's, as its lease wrote it.
func overlapSQL(r, n int, cond string) string {
	return fmt.Sprintf(`SELECT c.i, lp.lease_id, lp.path, lp.token
	FROM unnest($%[2]d::int[], $%[3]d::text[]) AS c(i, path)
	JOIN lease_paths lp ON lp.repository = $%[1]d AND lp.fold = c.path AND %[7]s
	UNION ALL
	SELECT d.i, r.lease_id, r.path, r.token
	FROM unnest($%[4]d::int[], $%[5]d::text[], $%[6]d::text[]) AS d(i, lo, hi)
	CROSS JOIN LATERAL (
		SELECT lp.lease_id, lp.path, lp.token FROM lease_paths lp
		WHERE lp.repository = $%[1]d AND lp.fold >= d.lo AND lp.fold < d.hi AND %[7]s
		OFFSET 0) AS r`,
		r, n, n+1, n+2, n+3, n+4, cond)
}

// foldAll answers the fold (repo.Fold) of each path, the lease_paths.fold of its row.
func foldAll(paths []string) []string {
	folds := make([]string, len(paths))
	for i, p := range paths {
		folds[i] = repo.Fold(p)
	}
	return folds
}

// leasePathFoldMigration is the migration that adds lease_paths.fold (0013_lease_path_folds.sql).
const leasePathFoldMigration = 13

// backfillLeasePathFolds fills the fold of the lease paths recorded before
// leasePathFoldMigration, in its transaction, then makes the column NOT NULL: PostgreSQL's
// lower() follows the database's locale and normalize() does not fold case, so the fold is
// computed here, by the function every later insert uses.
func backfillLeasePathFolds(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT lease_id, path FROM lease_paths`)
	if err != nil {
		return fmt.Errorf("backfill lease path folds: %w", err)
	}
	var ids, paths []string
	var id, path string
	if _, err := pgx.ForEachRow(rows, []any{&id, &path}, func() error {
		ids = append(ids, id)
		paths = append(paths, path)
		return nil
	}); err != nil {
		return fmt.Errorf("backfill lease path folds: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE lease_paths lp SET fold = u.fold
		FROM unnest($1::text[], $2::text[], $3::text[]) AS u(lease_id, path, fold)
		WHERE lp.lease_id = u.lease_id AND lp.path = u.path`, ids, paths, foldAll(paths)); err != nil {
		return fmt.Errorf("backfill lease path folds: %w", err)
	}
	if _, err := tx.Exec(ctx, `ALTER TABLE lease_paths ALTER COLUMN fold SET NOT NULL`); err != nil {
		return fmt.Errorf("backfill lease path folds: %w", err)
	}
	return nil
}

// ---- acquire ----

// lockRepositorySQL takes the repository's row lock in the mode of the grant's UPDATE, so that
// grants (and renewals) of one repository run one at a time. It runs as a statement of its own,
// before the check: under read committed the check's snapshot is then taken once the lock is
// held, and sees every grant committed before.
const lockRepositorySQL = `SELECT true FROM repositories WHERE name = $1 FOR NO KEY UPDATE`

// acquireSQL grants the lease unless an active, unexpired lease of another holder overlaps one
// of the paths: it answers one row, with the conflict (the first requested path that has one)
// or with the new lease. The token is the repository's counter, incremented only on a grant.
// A grant records its lease.granted event, by the holder $3.
var acquireSQL = q(`WITH o AS (` + overlapSQL(2, 4, "lp.active") + `),
conflict AS (
	SELECT o.i, l.id, o.path, l.holder, l.acquired_at, l.expires_at
	FROM o JOIN leases l ON l.id = o.lease_id
	WHERE l.state = 'active' AND l.expires_at > {now} AND l.holder <> $3
	ORDER BY o.i, l.token
	LIMIT 1),
held AS (
	SELECT coalesce(sum(cardinality(l.paths)), 0)::bigint AS n FROM leases l
	WHERE $13::bigint > 0 AND l.repository = $2 AND l.state = 'active' AND l.expires_at > {now}
		AND split_part(l.holder, '|', 1) = split_part($3, '|', 1)),
over AS (
	SELECT held.n FROM held WHERE $13::bigint > 0 AND held.n + cardinality($10::text[]) > $13::bigint),
tok AS (
	UPDATE repositories SET lease_counter = lease_counter + 1
	WHERE name = $2 AND NOT EXISTS (SELECT 1 FROM conflict) AND NOT EXISTS (SELECT 1 FROM over)
	RETURNING lease_counter),
ins AS (
	INSERT INTO leases (id, repository, holder, token, paths, state, acquired_at, expires_at)
	SELECT $9, $2, $3, tok.lease_counter, $10, 'active', {now}, {now} + $11::bigint * interval '1 microsecond'
	FROM tok
	RETURNING *),
insp AS (
	INSERT INTO lease_paths (lease_id, repository, path, fold, token)
	SELECT ins.id, ins.repository, p.path, p.fold, ins.token FROM ins, unnest($10::text[], $12::text[]) AS p(path, fold)),
ev AS (` + auditRecord(`SELECT split_part($3, '|', 1), $3, 'lease.granted', 'lease/' || ins.id, `+jsonObject(
	mem("expires_at", jsonTime("ins.expires_at")),
	mem("paths", jsonTexts("ins.paths")),
	mem("repository", jsonText("ins.repository")),
	mem("token", jsonInt("ins.token")))+` FROM ins`) + `)
SELECT c.i, c.id, c.path, c.holder, c.acquired_at, c.expires_at, (SELECT n FROM over), ` + leaseCols("ins") + `
FROM (SELECT 1) AS one LEFT JOIN conflict c ON true LEFT JOIN ins ON true`)

// AcquireLease grants a lease on p.Paths to p.Holder unless another holder's live lease
// overlaps one of them.
func (db *DB) AcquireLease(ctx context.Context, p store.AcquireLeaseParams) (store.Lease, error) {
	oa := newOverlapArgs(p.Paths)
	args := append([]any{db.now(), p.Repository, p.Holder}, oa.args()...)
	args = append(args, store.NewID("lse"), p.Paths, micros(p.TTL), foldAll(p.Paths), int64(p.MaxLivePaths))

	// One round trip, one implicit transaction: the lock, then the check and the grant.
	var batch pgx.Batch
	batch.Queue(lockRepositorySQL, p.Repository)
	batch.Queue(acquireSQL, args...)
	br := db.pool.SendBatch(ctx, &batch)
	defer br.Close()

	var locked bool
	if err := br.QueryRow().Scan(&locked); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return store.Lease{}, fmt.Errorf("repository %s: %w", p.Repository, store.ErrNotFound)
		}
		return store.Lease{}, interpretError("acquire lease", err)
	}
	var (
		ci                       *int32
		cID, cPath, cHolder      *string
		cAcquired, cExpires      *time.Time
		held                     *int64
		lID, lRepo, lHolder, lSt *string
		lPaths                   []string
		lToken                   *int64
		lAcq, lExp, lEnded       *time.Time
	)
	err := br.QueryRow().Scan(&ci, &cID, &cPath, &cHolder, &cAcquired, &cExpires, &held,
		&lID, &lRepo, &lPaths, &lHolder, &lToken, &lSt, &lAcq, &lExp, &lEnded)
	if err != nil {
		return store.Lease{}, interpretError("acquire lease", err)
	}
	if err := br.Close(); err != nil {
		return store.Lease{}, interpretError("acquire lease", err)
	}
	if ci != nil {
		return store.Lease{}, &store.LeaseConflictError{
			Path:       p.Paths[*ci],
			LeaseID:    *cID,
			LeasePath:  *cPath,
			Holder:     *cHolder,
			AcquiredAt: cAcquired.UTC(),
			ExpiresAt:  cExpires.UTC(),
		}
	}
	if held != nil {
		return store.Lease{}, &store.LeaseCapError{Principal: store.PrincipalOf(p.Holder), Repository: p.Repository,
			Held: int(*held), Asked: len(p.Paths), Max: p.MaxLivePaths}
	}
	if lID == nil {
		return store.Lease{}, fmt.Errorf("postgres: acquire lease: neither a grant nor a conflict")
	}
	s := leaseScan{l: store.Lease{ID: *lID, Repository: *lRepo, Paths: lPaths, Holder: *lHolder,
		AcquiredAt: *lAcq, ExpiresAt: *lExp}, token: *lToken, state: *lSt, ended: lEnded}
	db.audited()
	return s.lease(), nil
}

// ---- renew, release, break ----

// supersededSQL answers the first lease granted after token $2 on a path overlapping one of
// the lease's paths.
var supersededSQL = `SELECT o.token, l.holder, o.path FROM (
	SELECT * FROM (` + overlapSQL(1, 3, "lp.token > $2") + `) AS x ORDER BY token LIMIT 1) AS o
JOIN leases l ON l.id = o.lease_id`

type supersession struct {
	token  int64
	holder string
	path   string
}

func (db *DB) superseded(ctx context.Context, qr querier, l store.Lease) (supersession, bool, error) {
	var s supersession
	args := append([]any{l.Repository, int64(l.FencingToken)}, newOverlapArgs(l.Paths).args()...)
	err := qr.QueryRow(ctx, supersededSQL, args...).Scan(&s.token, &s.holder, &s.path)
	if errors.Is(err, pgx.ErrNoRows) {
		return supersession{}, false, nil
	}
	if err != nil {
		return supersession{}, false, interpretError("lease "+l.ID+": find newer grants", err)
	}
	return s, true, nil
}

// checkLeaseChange answers the refusal of a renew or release of l by principal (admin) with
// token, or nil (see store.ExplainLeaseChange).
func (db *DB) checkLeaseChange(ctx context.Context, qr querier, l store.Lease, principal string, admin bool, token uint64) error {
	return store.ExplainLeaseChange(l, principal, admin, token, l.State == store.LeaseExpired, func() (store.Grant, bool, error) {
		s, ok, err := db.superseded(ctx, qr, l)
		return store.Grant{Token: uint64(s.token), Holder: s.holder, Path: s.path}, ok, err
	})
}

// leaseEvents answers the audit record of event action for each lease of u, by the actor
// whose principal and holder are parameters $p and $p+1, with details (an SQL expression).
func leaseEvents(action string, p int, details string) string {
	return auditRecord(fmt.Sprintf(`SELECT $%d, $%d, '%s', 'lease/' || u.id, %s FROM u`, p, p+1, action, details))
}

// The details of the lease events, from the row u of the lease as changed.
var (
	leaseObjectRenewed = jsonObject(mem("expires_at", jsonTime("u.expires_at")), mem("token", jsonInt("u.token")))
	leaseObjectEnded   = jsonObject(mem("token", jsonInt("u.token")))
)

// changeLease runs, in one transaction, a renew or release of a lease: it reads the lease
// locked (after its repository's row, as grants take it, when lockRepository), checks the
// refusals and runs update ($1 now, $2 the lease id, then more), which answers leaseCols.
// Every path that takes both locks takes the repository's first.
func (db *DB) changeLease(ctx context.Context, what, leaseID string, lockRepository bool, principal string, admin bool,
	token uint64, check func(l store.Lease, now time.Time) error, update string, more ...any) (store.Lease, error) {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return store.Lease{}, interpretError(what, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if lockRepository {
		// The repository's row first, as grants and the fast path take it, then the lease's: a
		// renewal of an expired lease and a grant of its paths cannot both pass their checks.
		if _, err := tx.Exec(ctx, lockLeaseRepositorySQL, leaseID); err != nil {
			return store.Lease{}, interpretError(what, err)
		}
	}
	read := `SELECT ` + leaseCols("l") + ` FROM leases l WHERE l.id = $2 FOR UPDATE`
	var s leaseScan
	if err := tx.QueryRow(ctx, q(read), db.now(), leaseID).Scan(s.dest()...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return store.Lease{}, fmt.Errorf("lease %s: %w", leaseID, store.ErrNotFound)
		}
		return store.Lease{}, interpretError(what, err)
	}
	if err := db.checkLeaseChange(ctx, tx, s.lease(), principal, admin, token); err != nil {
		return store.Lease{}, err
	}
	if check != nil {
		var now time.Time
		if err := tx.QueryRow(ctx, q(`SELECT {now}`), db.now()).Scan(&now); err != nil {
			return store.Lease{}, interpretError(what, err)
		}
		if err := check(s.lease(), now); err != nil {
			return store.Lease{}, err
		}
	}
	if err := tx.QueryRow(ctx, update, append([]any{db.now(), leaseID}, more...)...).Scan(s.dest()...); err != nil {
		return store.Lease{}, interpretError(what, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return store.Lease{}, interpretError(what, err)
	}
	return s.lease(), nil
}

// renewSQL renews a lease that changeLease read and locked; $4 and $5 are the actor.
var renewSQL = q(`WITH u AS (
	UPDATE leases l SET expires_at = ` + renewedExpiry("$3", "$6") + `
	WHERE l.id = $2 RETURNING ` + leaseCols("l") + `),
ev AS (` + leaseEvents("lease.renewed", 4, leaseObjectRenewed) + `)
SELECT ` + leaseCols("u") + ` FROM u`)

// liveAndCallers is the condition of the fast path of a renew or release: the lease is active
// and unexpired ($2 its id), and the caller may change it ($3 admin, $4 principal, $5 token or
// 0). When it holds, none of the refusals applies.
//
// "Unexpired" is judged at the time the statement runs (clock_timestamp), after the
// repository's lock was taken, not at the transaction's start (now()): a grant that held the
// lock meanwhile may have found the lease expired and given its paths to someone else, and a
// renewal judged by the earlier time would then extend a superseded lease.
const liveAndCallers = `l.id = $2 AND l.state = 'active' AND l.expires_at > coalesce($1::timestamptz, clock_timestamp())
	AND ($3::boolean OR split_part(l.holder, '|', 1) = $4::text) AND ($5::bigint = 0 OR l.token = $5)`

// lockLeaseRepositorySQL takes the lock of the lease's repository as lockRepositorySQL does.
const lockLeaseRepositorySQL = `SELECT true FROM repositories
WHERE name = (SELECT repository FROM leases WHERE id = $1) FOR NO KEY UPDATE`

// renewedExpiry is store.RenewedExpiry's expiry in SQL, of the lease l: now and the TTL ttl (in
// microseconds), at most its grant and maxAge (microseconds, 0 for none).
func renewedExpiry(ttl, maxAge string) string {
	return `CASE WHEN ` + maxAge + `::bigint > 0
		THEN least({now} + ` + ttl + `::bigint * interval '1 microsecond', l.acquired_at + ` + maxAge + `::bigint * interval '1 microsecond')
		ELSE {now} + ` + ttl + `::bigint * interval '1 microsecond' END`
}

// renewFastSQL renews a live lease of the caller's younger than its maximum age ($9); $7 and
// $8 are the actor.
var renewFastSQL = q(`WITH u AS (
	UPDATE leases l SET expires_at = ` + renewedExpiry("$6", "$9") + `
	WHERE ` + liveAndCallers + ` AND ($9::bigint = 0 OR {now} < l.acquired_at + $9::bigint * interval '1 microsecond')
	RETURNING ` + leaseCols("l") + `),
ev AS (` + leaseEvents("lease.renewed", 7, leaseObjectRenewed) + `)
SELECT ` + leaseCols("u") + ` FROM u`)

// fastLeaseChange runs sql, a statement on liveAndCallers, after lock (with its argument) when
// it is given, in one round trip and one implicit transaction. It answers ok = false when the
// lease is not live or not the caller's, for the slow path to explain.
func (db *DB) fastLeaseChange(ctx context.Context, what, lock, sql string, leaseID string, admin bool, principal string,
	token uint64, more ...any) (store.Lease, bool, error) {
	var batch pgx.Batch
	if lock != "" {
		batch.Queue(lock, leaseID)
	}
	batch.Queue(sql, append([]any{db.now(), leaseID, admin, principal, int64(token)}, more...)...)
	br := db.pool.SendBatch(ctx, &batch)
	defer br.Close()
	if lock != "" {
		if _, err := br.Exec(); err != nil {
			return store.Lease{}, false, interpretError(what, err)
		}
	}
	var s leaseScan
	err := br.QueryRow().Scan(s.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Lease{}, false, nil
	}
	if err != nil {
		return store.Lease{}, false, interpretError(what, err)
	}
	if err := br.Close(); err != nil {
		return store.Lease{}, false, interpretError(what, err)
	}
	return s.lease(), true, nil
}

// RenewLease sets a lease's expiry to now + p.TTL, keeping its token.
func (db *DB) RenewLease(ctx context.Context, p store.RenewLeaseParams) (store.Lease, error) {
	// A live lease of the caller's is renewed in one round trip, under the repository's lock
	// (see changeLease); the rest is explained, or renewed when it expired unsuperseded, by
	// the slow path.
	actor := store.ActorOf(ctx)
	l, ok, err := db.fastLeaseChange(ctx, "renew lease", lockLeaseRepositorySQL, renewFastSQL, p.LeaseID, p.Admin,
		p.Principal, p.FencingToken, micros(p.TTL), actor.Principal, actor.Holder, micros(p.MaxAge))
	if err == nil && !ok {
		tooOld := func(l store.Lease, now time.Time) error {
			_, err := store.RenewedExpiry(l, now, p.TTL, p.MaxAge)
			return err
		}
		l, err = db.changeLease(ctx, "renew lease", p.LeaseID, true, p.Principal, p.Admin, p.FencingToken, tooOld, renewSQL,
			micros(p.TTL), actor.Principal, actor.Holder, micros(p.MaxAge))
	}
	if err != nil {
		return store.Lease{}, err
	}
	db.audited()
	return l, nil
}

// endLeaseSQL breaks a lease when it is still active, with its paths, records the
// lease.broken event (by the actor $3, $4) and notifies the other replicas in the same
// transaction. The lease as it is now is answered either way, with whether this statement
// ended it.
var endLeaseSQL = q(`WITH u AS (
	UPDATE leases l SET state = 'broken', ended_at = {now}
	WHERE l.id = $2 AND l.state = 'active'
	RETURNING ` + leaseCols("l") + `, pg_notify('` + leaseChannel + `', '')),
p AS (
	UPDATE lease_paths SET active = false WHERE lease_id IN (SELECT id FROM u)),
ev AS (` + leaseEvents("lease.broken", 3, leaseObjectEnded) + `)
SELECT true, ` + leaseCols("u") + ` FROM u
UNION ALL
SELECT false, ` + leaseCols("l") + ` FROM leases l WHERE l.id = $2 AND NOT EXISTS (SELECT 1 FROM u)`)

// releaseSQL releases a lease that changeLease read and locked; $3 and $4 are the actor.
var releaseSQL = q(`WITH u AS (
	UPDATE leases l SET state = 'released', ended_at = {now}
	WHERE l.id = $2
	RETURNING ` + leaseCols("l") + `, pg_notify('` + leaseChannel + `', '')),
p AS (
	UPDATE lease_paths SET active = false WHERE lease_id IN (SELECT id FROM u)),
ev AS (` + leaseEvents("lease.released", 3, leaseObjectEnded) + `)
SELECT ` + leaseCols("u") + ` FROM u`)

// releaseFastSQL releases a live lease of the caller's, as releaseSQL does; $6 and $7 are the
// actor.
var releaseFastSQL = q(`WITH u AS (
	UPDATE leases l SET state = 'released', ended_at = {now}
	WHERE ` + liveAndCallers + `
	RETURNING ` + leaseCols("l") + `, pg_notify('` + leaseChannel + `', '')),
p AS (
	UPDATE lease_paths SET active = false WHERE lease_id IN (SELECT id FROM u)),
ev AS (` + leaseEvents("lease.released", 6, leaseObjectEnded) + `)
SELECT ` + leaseCols("u") + ` FROM u`)

// ReleaseLease ends a lease (RELEASED), with the refusals of RenewLease.
func (db *DB) ReleaseLease(ctx context.Context, p store.ReleaseLeaseParams) (store.Lease, error) {
	// A live lease of the caller's is released in one statement; the rest is explained, or
	// released when it expired unsuperseded, by the slow path.
	actor := store.ActorOf(ctx)
	l, ok, err := db.fastLeaseChange(ctx, "release lease", "", releaseFastSQL, p.LeaseID, p.Admin, p.Principal, p.FencingToken,
		actor.Principal, actor.Holder)
	if err == nil && !ok {
		l, err = db.changeLease(ctx, "release lease", p.LeaseID, false, p.Principal, p.Admin, p.FencingToken, nil, releaseSQL,
			actor.Principal, actor.Holder)
	}
	if err != nil {
		return store.Lease{}, err
	}
	db.leaseSignal.Fire()
	db.audited()
	return l, nil
}

// BreakLease ends any lease that is not released or broken (BROKEN).
func (db *DB) BreakLease(ctx context.Context, leaseID string) (store.Lease, error) {
	var ended bool
	var s leaseScan
	actor := store.ActorOf(ctx)
	err := db.pool.QueryRow(ctx, endLeaseSQL, db.now(), leaseID, actor.Principal, actor.Holder).
		Scan(append([]any{&ended}, s.dest()...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Lease{}, fmt.Errorf("lease %s: %w", leaseID, store.ErrNotFound)
	}
	if err != nil {
		return store.Lease{}, interpretError("break lease", err)
	}
	l := s.lease()
	if !ended {
		return store.Lease{}, &store.LeaseStateError{LeaseID: leaseID,
			Msg: fmt.Sprintf("was already %s at %s", l.State, l.EndedAt.Format(time.RFC3339))}
	}
	db.leaseSignal.Fire()
	db.audited()
	return l, nil
}

// ---- read ----

// GetLease answers a lease.
func (db *DB) GetLease(ctx context.Context, leaseID string) (store.Lease, error) {
	var s leaseScan
	err := db.pool.QueryRow(ctx, q(`SELECT `+leaseCols("l")+` FROM leases l WHERE l.id = $2`), db.now(), leaseID).Scan(s.dest()...)
	if err != nil {
		return store.Lease{}, interpretError("lease "+leaseID, err)
	}
	return s.lease(), nil
}

// listLeasesSQL answers a page of a repository's leases, newest first, after the token $3 (0:
// from the newest), of holder $4 ("<principal>|": every label; "": all); live only answers
// only the active, unexpired ones.
func listLeasesSQL(live bool) string {
	cond := ""
	if live {
		// The literal state is the leases_active index's predicate.
		cond = ` AND l.state = 'active' AND l.expires_at > {now}`
	}
	return q(`SELECT ` + leaseCols("l") + ` FROM leases l
WHERE l.repository = $2 AND ($3::bigint = 0 OR l.token < $3)
	AND ($4::text = '' OR l.holder = $4 OR (right($4, 1) = '|' AND starts_with(l.holder, $4)))` + cond + `
ORDER BY l.token DESC LIMIT $5`)
}

var (
	listLiveLeasesSQL = listLeasesSQL(true)
	listAllLeasesSQL  = listLeasesSQL(false)
)

// ListLeases answers a repository's leases, newest first; without IncludeEnded only the
// active, unexpired ones.
func (db *DB) ListLeases(ctx context.Context, p store.ListLeasesParams) ([]store.Lease, string, error) {
	before, err := store.DecodeSeqPageToken(p.PageToken)
	if err != nil {
		return nil, "", err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	sql := listLiveLeasesSQL
	if p.IncludeEnded {
		sql = listAllLeasesSQL
	}
	rows, err := db.pool.Query(ctx, sql, db.now(), p.Repository, before, p.Holder, limit+1)
	if err != nil {
		return nil, "", interpretError("list leases", err)
	}
	var out []store.Lease
	var s leaseScan
	_, err = pgx.ForEachRow(rows, s.dest(), func() error {
		out = append(out, s.lease())
		s.l.Paths = nil // the next row's array gets a slice of its own
		return nil
	})
	if err != nil {
		return nil, "", interpretError("list leases", err)
	}
	if len(out) > limit {
		return out[:limit], store.EncodeSeqPageToken(int64(out[limit-1].FencingToken)), nil
	}
	return out, "", nil
}
