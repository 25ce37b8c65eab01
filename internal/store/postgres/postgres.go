// Package postgres is the PostgreSQL backend of store.Store, for any number of ag serve
// replicas sharing one database.
//
// The database is the clock: unless Options.Clock is set (tests), every statement uses the
// database's now(), so replicas agree on lease expiry whatever their own clocks say. Every
// statement takes that time as $1, `coalesce($1::timestamptz, now())`, NULL meaning "the
// database's".
//
// Claims take jobs with FOR UPDATE SKIP LOCKED, so claimers on any replica never wait for one
// another. Claims, and completions, made at the same time go together in one statement
// (group.go), each keeping its own checks. Commits that may make a job claimable send NOTIFY
// ag_jobs, and every replica LISTENs, so a claimer long-polling on one replica is woken by an
// enqueue on another.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/store"
)

var _ store.Store = (*DB)(nil)

// DB is a store.Store on a PostgreSQL database.
type DB struct {
	pool  *pgxpool.Pool
	clock clock.Clock // nil: the database's now()
	// emailDomain is the domain of the commits' authors and committer.
	emailDomain string
	signal      store.Signal
	// leaseSignal is fired after a lease is released or broken, here or on another replica.
	leaseSignal store.Signal
	// auditSignal is fired after a commit of this store that wrote audit events.
	auditSignal store.Signal
	// messageSignal is fired after this store stored a message.
	messageSignal store.Signal
	// sealPerRecord16 is 16 times the events per record the last seal took (sealPage).
	sealPerRecord16 atomic.Int64
	// sealFinal is an audit record id up to which every record has committed or never will
	// (waitForRecordWriters): a seal reads those without waiting.
	sealFinal atomic.Int64
	// sealWaitMost bounds a seal's wait for the transactions writing records (defaultSealWaitMost).
	sealWaitMost time.Duration
	// sealReads is what the last seal read its pending records into, for the next one.
	sealReads store.Reusable[pendingPage]

	// claims and completions made at the same time go together (group.go).
	claims    group[store.ClaimJobParams, []store.Job]
	completes group[store.CompleteJobParams, store.Job]
	// manyCompletes groups CompleteJobs calls, whose completions share a statement.
	manyCompletes group[[]*completeCall, map[string]store.Job]

	stopListener context.CancelFunc
	listenerDone chan struct{}
	closeOnce    sync.Once

	// own are the backend PIDs of the pool's connections: the listener ignores their
	// notifications, since this store fires its signal itself right after such a commit and a
	// second wake-up would only send every waiting claimer to the database again.
	own pidSet

	// For tests: how many times the listener has started listening, and a signal fired each time.
	listens   atomic.Int64
	listening store.Signal
}

type pidSet struct {
	mu   sync.Mutex
	pids map[uint32]struct{}
}

func (s *pidSet) add(pid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pids == nil {
		s.pids = map[uint32]struct{}{}
	}
	s.pids[pid] = struct{}{}
}

func (s *pidSet) remove(pid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pids, pid)
}

func (s *pidSet) has(pid uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pids[pid]
	return ok
}

// notifyChannel is the NOTIFY channel of commits that may have made a job claimable.
const notifyChannel = "ag_jobs"

// Open connects to the database at url, migrates it to this build's schema (refusing, with a
// *store.SchemaTooNewError, one that a newer build migrated) and starts listening for job
// notifications. The pool holds max(16, 4*GOMAXPROCS) connections unless url sets
// pool_max_conns.
func Open(ctx context.Context, url string, opts store.Options) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse connection string: %w", err)
	}
	// Generic plans, made once per connection: planning the claim costs several times more
	// than running it, and "auto" plans anew for the first executions on every connection and
	// for good when it estimates the generic plan dearer. The indexes and statements are made
	// so that the generic plan is the right one whatever the table's statistics (see
	// claimCheck). A URL that sets plan_cache_mode wins.
	if _, set := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !set {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = int32(max(16, 4*runtime.GOMAXPROCS(0)))
	}
	db := &DB{clock: opts.Clock, emailDomain: opts.GitEmailDomain, sealWaitMost: defaultSealWaitMost}
	// A backend's PID is unique among the live backends of a server, and a connection leaves
	// the set before its backend ends, so no other replica's backend can be mistaken for ours.
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		db.own.add(c.PgConn().PID())
		return nil
	}
	cfg.BeforeClose = func(c *pgx.Conn) { db.own.remove(c.PgConn().PID()) }
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	if err := migrate(ctx, pool, knownVersion(), opts.GitEmailDomain); err != nil {
		pool.Close()
		return nil, err
	}
	db.pool = pool
	lctx, cancel := context.WithCancel(context.Background())
	db.stopListener = cancel
	db.listenerDone = make(chan struct{})
	go db.listen(lctx, cfg.ConnConfig.Copy())
	return db, nil
}

// Close stops the listener and closes the pool.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		db.stopListener()
		<-db.listenerDone
		db.pool.Close()
	})
	return nil
}

// Ready answers nil when the database answers and its schema is the one this build knows.
func (db *DB) Ready(ctx context.Context) error {
	var v int
	if err := db.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&v); err != nil {
		return fmt.Errorf("postgres: read schema version: %w", err)
	}
	if known := knownVersion(); v != known {
		if v > known {
			return &store.SchemaTooNewError{Database: v, Known: known}
		}
		return fmt.Errorf("postgres: database schema version %d, this build needs %d", v, known)
	}
	return nil
}

// JobSignal answers a channel closed after the next commit, here or on another replica, that
// may have made a job claimable.
func (db *DB) JobSignal() <-chan struct{} { return db.signal.Wait() }

// now is the $1 of every statement: the test clock's time, or NULL for the database's now().
func (db *DB) now() any {
	if db.clock == nil {
		return nil
	}
	return db.clock.Now()
}

// sqlNow is the time of a statement; q replaces {now} with it in every query.
const sqlNow = `coalesce($1::timestamptz, now())`

func q(s string) string { return strings.ReplaceAll(s, "{now}", sqlNow) }

// ---- migrations ----

//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

var migrations = func() []migration {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		panic(err)
	}
	var ms []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			panic("postgres: migration file without a number: " + e.Name())
		}
		b, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			panic(err)
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i, m := range ms {
		if m.version != i+1 {
			panic(fmt.Sprintf("postgres: migrations must be numbered 1, 2, ...: %s", m.name))
		}
	}
	return ms
}()

func knownVersion() int { return len(migrations) }

// migrationLock is the advisory lock key under which replicas migrate, one at a time.
const migrationLock = 0x61675f6d69677231 // "ag_migr1"

// migrate applies the migrations the database lacks up to version target (knownVersion() but
// in tests of a migration), all in one transaction under an advisory lock, so that replicas
// starting together migrate once and a failed migration leaves nothing half done.
func migrate(ctx context.Context, pool *pgxpool.Pool, target int, emailDomain string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
		return fmt.Errorf("postgres: migrate: take lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("postgres: migrate: create schema_version: %w", err)
	}
	var current int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&current); err != nil {
		return fmt.Errorf("postgres: migrate: read schema version: %w", err)
	}
	if current > knownVersion() {
		return &store.SchemaTooNewError{Database: current, Known: knownVersion()}
	}
	for _, m := range migrations[min(current, target):target] {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("postgres: migration %s: %w", m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_version (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return fmt.Errorf("postgres: migration %s: record version: %w", m.name, err)
		}
		if m.version == gitMigration {
			if err := backfillGit(ctx, tx, emailDomain); err != nil {
				return fmt.Errorf("postgres: migration %s: %w", m.name, err)
			}
		}
		if m.version == leasePathFoldMigration {
			if err := backfillLeasePathFolds(ctx, tx); err != nil {
				return fmt.Errorf("postgres: migration %s: %w", m.name, err)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: migrate: commit: %w", err)
	}
	return nil
}

// ---- notifications ----

// listen fires the job signal on every ag_jobs notification from any replica, and the lease
// signal on every ag_leases one, over one connection of its own, reconnecting with backoff
// until ctx ends.
func (db *DB) listen(ctx context.Context, cfg *pgx.ConnConfig) {
	defer close(db.listenerDone)
	const minBackoff, maxBackoff = 50 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			// ag_jobs last: pg_stat_activity shows a connection's last statement, by which
			// TestListenerSurvivesADroppedConnection finds the listeners.
			_, err = conn.Exec(ctx, "LISTEN "+leaseChannel)
		}
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+notifyChannel)
		}
		if err == nil {
			backoff = minBackoff
			// A notification sent while we were not listening is lost; a claimer that waits
			// for one looks again instead. Before the listen is counted, so that a signal
			// taken once it is counted fires only for what happens after.
			db.signal.Fire()
			db.leaseSignal.Fire()
			db.listens.Add(1)
			db.listening.Fire()
			for {
				var n *pgconn.Notification
				if n, err = conn.WaitForNotification(ctx); err != nil {
					break
				}
				switch {
				case db.own.has(n.PID):
				case n.Channel == leaseChannel:
					db.leaseSignal.Fire()
				default:
					db.signal.Fire()
				}
			}
		}
		if conn != nil {
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			conn.Close(closeCtx) //nolint:errcheck // the connection is being dropped
			cancel()
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

// ---- errors ----

// interpretError is this backend's interpreter of database errors: it turns what PostgreSQL
// and pgx answer into the store's sentinels, so that callers test errors.Is and never see a
// driver error for a missing row or a taken name, and prefixes what, what was being done
// ("change c_1"). A nil err answers nil.
//
//   - pgx.ErrNoRows, no such row: store.ErrNotFound.
//   - unique_violation (SQLSTATE 23505), a name or key taken: store.ErrAlreadyExists.
//   - Anything else is wrapped as it is, after "postgres: ". A database that cannot serve now
//     (unreachable, starting or shutting down, out of connections or disk, a connection
//     lost) is not mapped here but told by store.Unavailable, which finds the driver error
//     inside (see unavailable), so that whether the request surely did not apply survives
//     any wrapping on the way.
func interpretError(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("%s: %w", what, store.ErrAlreadyExists)
	}
	return fmt.Errorf("postgres: %s: %w", what, err)
}
