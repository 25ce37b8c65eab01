// Package sqlite is the embedded backend of store.Store: one SQLite file in WAL mode.
//
// All writes go through one connection in BEGIN IMMEDIATE transactions. SQLite admits one
// writer at a time anyway; queueing writers in database/sql instead of in SQLite's busy
// handler avoids busy-retry sleeps, and taking the write lock when the transaction begins
// means a read-then-write transaction can never fail with SQLITE_BUSY halfway. Reads that
// need no transaction use a separate pool, which WAL lets run beside the writer.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/store"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// busyTimeout bounds how long a connection waits for another process holding the write lock.
const busyTimeout = 10 * time.Second

// Checkpoints, which copy the WAL into the database file and sync it, are made by a goroutine
// of their own (checkpointer) every checkpointEvery while there are writes, off the writer.
// Made by SQLite in the commit that grows the WAL past 1,000 pages, they took about half of
// the time the one writer spent committing under a full queue, about 7% of all its time. The
// writer still checkpoints at writerCheckpointPages (about 40 MB of WAL), should the
// checkpointer fall that far behind.
const (
	checkpointEvery       = 100 * time.Millisecond
	writerCheckpointPages = 10000
)

// DB is a store.Store on one SQLite file.
type DB struct {
	w      *sql.DB // the one writer connection, used only by the writer goroutine
	r      *sql.DB // readers
	clock  clock.Clock
	signal store.Signal // jobs that may have become claimable

	emailDomain string // of the commits' authors and committer

	leaseSignal   store.Signal // leases released or broken
	messageSignal store.Signal // messages stored
	auditSignal   store.Signal // commits that wrote audit events

	// events gathers the audit events of the batch the writer is committing: they are stored
	// as one record just before the commit (storeRecord). Only the writer goroutine touches it.
	events store.AuditRecordBuilder
	// sealReads is what the last seal read its pending records into, for the next one.
	sealReads store.Reusable[sealRead]

	lastSettle atomic.Int64       // store time (µs) a claim last settled expired claims
	writes     chan *writeRequest // unbuffered: a send succeeds only while the writer takes it
	closed     chan struct{}
	closeOnce  sync.Once
	writerDone chan struct{}

	checkpoints    *sql.DB     // the checkpointer's connection
	wroteSince     atomic.Bool // a commit since the checkpointer's last checkpoint
	checkpointDone chan struct{}
}

var _ store.Store = (*DB)(nil)

// tuneAllocator makes the first Open tune the C allocator (keepFreedMemory), for the whole
// process.
var tuneAllocator sync.Once

// Open opens (creating it and its directory when missing) the SQLite database at path and
// applies the migrations it lacks. A database migrated by a newer build is refused with a
// *store.SchemaTooNewError.
func Open(ctx context.Context, path string, opts store.Options) (*DB, error) {
	tuneAllocator.Do(keepFreedMemory)
	if path == "" || path == ":memory:" {
		// Two pools on one in-memory database would be two databases.
		return nil, fmt.Errorf("open sqlite: a file path is required, got %q", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("open sqlite %s: create directory: %w", path, err)
	}
	// The database holds token hashes, attestations and every file of every repository: it is
	// created for its owner only, before SQLite would create it with the umask's mode. SQLite
	// gives its WAL and shared-memory files the database file's mode.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	// A database an earlier build created with the umask's mode is made the owner's only too.
	for _, name := range []string{abs, abs + "-wal", abs + "-shm"} {
		if fi, err := os.Stat(name); err == nil && fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(name, 0o600); err != nil {
				return nil, fmt.Errorf("open sqlite %s: make %s readable by its owner only: %w", path, filepath.Base(name), err)
			}
		}
	}

	clk := opts.Clock
	if clk == nil {
		clk = clock.Real{}
	}

	w, err := sql.Open("sqlite3", dsn(abs, "_txlock", "immediate"))
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := migrate(ctx, w, clk, opts.GitEmailDomain); err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}

	// The readers open after the writer has switched the file to WAL, so they never race it.
	r, err := sql.Open("sqlite3", dsn(abs, "_query_only", "1"))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	readers := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(readers)
	r.SetMaxIdleConns(readers)
	if err := r.PingContext(ctx); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if _, err := w.ExecContext(ctx, fmt.Sprintf(`PRAGMA wal_autocheckpoint = %d`, writerCheckpointPages)); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	c, err := sql.Open("sqlite3", dsn(abs, "_txlock", "deferred"))
	if err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	c.SetMaxOpenConns(1)
	c.SetMaxIdleConns(1)
	d := &DB{w: w, r: r, clock: clk, emailDomain: opts.GitEmailDomain, writes: make(chan *writeRequest), closed: make(chan struct{}), writerDone: make(chan struct{}),
		checkpoints: c, checkpointDone: make(chan struct{})}
	go d.writer()
	go d.checkpointer()
	return d, nil
}

// dsn builds a mattn/go-sqlite3 data source name. The path goes in a file: URI, escaped, so
// that a '?' or '#' in a directory name cannot be read as the start of the parameters.
func dsn(absPath, key, value string) string {
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(absPath)}
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "NORMAL")
	q.Set("_foreign_keys", "1")
	q.Set("_busy_timeout", strconv.FormatInt(busyTimeout.Milliseconds(), 10))
	q.Set("_stmt_cache_size", "64")
	q.Set(key, value)
	// url.URL renders "file:///abs", which SQLite reads as an empty authority and the path.
	return u.String() + "?" + q.Encode()
}

// Close stops the writer after the batch it is committing, and the checkpointer, and releases
// the connections.
func (d *DB) Close() error {
	d.closeOnce.Do(func() { close(d.closed) })
	<-d.writerDone
	<-d.checkpointDone
	return errors.Join(d.r.Close(), d.checkpoints.Close(), d.w.Close())
}

// checkpointer checkpoints the WAL every checkpointEvery while there are commits, until Close.
// A PASSIVE checkpoint waits for no one: it copies the pages no reader still needs, and the
// writer starts the WAL over once all were copied. Its errors are not fatal to anything (the
// writer's own checkpoint at writerCheckpointPages remains), so they are dropped.
func (d *DB) checkpointer() {
	defer close(d.checkpointDone)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	for {
		select {
		case <-d.closed:
			return
		case <-t.C:
		}
		if !d.wroteSince.Swap(false) {
			continue
		}
		var busy, frames, copied int
		_ = d.checkpoints.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied)
	}
}

// Ready answers nil when the file is readable and its schema is the one this build knows.
func (d *DB) Ready(ctx context.Context) error {
	var v int
	if err := d.r.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&v); err != nil {
		return fmt.Errorf("ready: %w", err)
	}
	if known := latestVersion(); v != known {
		if v > known {
			return &store.SchemaTooNewError{Database: v, Known: known}
		}
		return fmt.Errorf("ready: schema version %d, want %d", v, known)
	}
	return nil
}

// JobSignal answers the channel that the next enqueue or retry closes.
func (d *DB) JobSignal() <-chan struct{} { return d.signal.Wait() }

type migration struct {
	version int
	name    string
	sql     string
}

// migrations are read once: they are part of the binary.
var migrations = sync.OnceValue(func() []migration {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		panic(err) // embedded at build time
	}
	var ms []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			panic("sqlite: migration file without a version number: " + e.Name())
		}
		body, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			panic(err)
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			panic(fmt.Sprintf("sqlite: migrations must be numbered 1, 2, ... without gaps; %s is number %d", m.name, i+1))
		}
	}
	return ms
})

func latestVersion() int { return len(migrations()) }

// migrate applies the missing migrations in one transaction. BEGIN IMMEDIATE makes two
// processes opening the same new file migrate it once: the second waits, then sees the version.
func migrate(ctx context.Context, w *sql.DB, clk clock.Clock, emailDomain string) error {
	ms := migrations()
	known := ms[len(ms)-1].version
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&current); err != nil {
		return fmt.Errorf("migrate: read schema version: %w", err)
	}
	if current > known {
		return &store.SchemaTooNewError{Database: current, Known: known}
	}
	for _, m := range ms[current:] {
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("migrate: apply %s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version, applied_at) VALUES (?, ?)`,
			m.version, clk.Now().UnixMicro()); err != nil {
			return fmt.Errorf("migrate: record %s: %w", m.name, err)
		}
		if m.version == gitMigration {
			if err := backfillGit(ctx, tx, emailDomain); err != nil {
				return fmt.Errorf("migrate: %s: %w", m.name, err)
			}
		}
		if m.version == leasePathFoldMigration {
			if err := backfillLeasePathFolds(ctx, tx); err != nil {
				return fmt.Errorf("migrate: %s: %w", m.name, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// maxBatch bounds how many writes share one transaction.
const maxBatch = 64

// writeRequest is a write waiting for the writer goroutine.
type writeRequest struct {
	op   string
	fn   func(ctx context.Context, tx *sql.Tx) error
	done chan error
}

// errClosed is what calls get once the store is closing: to a client, a server shutting down.
var errClosed = fmt.Errorf("store is closed: %w", store.ErrUnavailable)

// write runs fn in a BEGIN IMMEDIATE transaction on the writer and answers once that
// transaction committed (or fn's error, as it is, so fn gives its errors their context).
//
// Writes that arrive while the writer is busy are committed together, each in a savepoint of
// its own (group commit): a refused or failed write rolls back only itself, and the others
// share one commit, which is where SQLite spends most of a small transaction's time. fn gets a
// context without cancellation, because cancelling one statement on the shared connection
// would interrupt whichever write of the batch runs at that moment.
func (d *DB) write(ctx context.Context, op string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	req := &writeRequest{op: op, fn: fn, done: make(chan error, 1)}
	select {
	case d.writes <- req:
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", op, ctx.Err())
	case <-d.closed:
		return fmt.Errorf("%s: %w", op, errClosed)
	}
	// Once taken, the write runs to its end: its outcome is what the caller must report.
	return <-req.done
}

// writer is the one goroutine that writes: it takes a write, gathers the ones waiting behind
// it, and commits them together.
func (d *DB) writer() {
	defer close(d.writerDone)
	// The writer spends most of its time in cgo calls into SQLite, and everything waits for it.
	// Kept on a thread of its own, it made claim+complete over the API about 17% faster without
	// the audit log and about 4% with it (docs/benchmarks.md).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	batch := make([]*writeRequest, 0, maxBatch)
	for {
		select {
		case req := <-d.writes:
			batch = append(batch[:0], req)
		case <-d.closed:
			return
		}
	gather:
		for len(batch) < maxBatch {
			select {
			case req := <-d.writes:
				batch = append(batch, req)
			default:
				break gather
			}
		}
		d.commit(batch)
	}
}

// commit runs a batch of writes in one transaction and tells each its outcome.
func (d *DB) commit(batch []*writeRequest) {
	ctx := context.Background()
	d.events.Reset(store.AuditRecordMark{})
	errs := make([]error, len(batch))
	defer func() {
		for i, req := range batch {
			req.done <- errs[i]
		}
	}()
	failAll := func(format string, err error) {
		for i, req := range batch {
			if errs[i] == nil {
				errs[i] = fmt.Errorf(format, req.op, err)
			}
		}
	}
	var audited bool
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		failAll("%s: begin: %w", err)
		return
	}
	if len(batch) == 1 {
		if errs[0] = batch[0].fn(ctx, tx); errs[0] != nil {
			tx.Rollback() //nolint:errcheck // the error of fn is the one worth answering
			return
		}
		if audited, err = d.storeRecord(ctx, tx); err != nil {
			tx.Rollback() //nolint:errcheck // the record's error is the one to answer
			errs[0] = fmt.Errorf("%s: %w", batch[0].op, err)
			return
		}
	} else {
		for i, req := range batch {
			if _, err := tx.ExecContext(ctx, `SAVEPOINT write`); err != nil {
				tx.Rollback() //nolint:errcheck // the savepoint's error is the one to answer
				failAll("%s: savepoint: %w", err)
				return
			}
			mark := d.events.Mark()
			if errs[i] = req.fn(ctx, tx); errs[i] != nil {
				d.events.Reset(mark) // its events were rolled back with it
				if _, err := tx.ExecContext(ctx, `ROLLBACK TO write`); err != nil {
					tx.Rollback() //nolint:errcheck // the transaction is unusable either way
					failAll("%s: roll back a failed write of the batch: %w", err)
					return
				}
			}
			if _, err := tx.ExecContext(ctx, `RELEASE write`); err != nil {
				tx.Rollback() //nolint:errcheck // the release's error is the one to answer
				failAll("%s: release savepoint: %w", err)
				return
			}
		}
		if audited, err = d.storeRecord(ctx, tx); err != nil {
			tx.Rollback() //nolint:errcheck // the record's error is the one to answer
			failAll("%s: %w", err)
			return
		}
	}
	if err := tx.Commit(); err != nil {
		failAll("%s: commit: %w", err)
		return
	}
	d.wroteSince.Store(true)
	if audited {
		// Before the writers hear of their commit: once a write returned, the sealer is awake.
		d.auditSignal.Fire()
	}
}

// now answers the store's time as both backends keep it: UTC, whole microseconds.
func (d *DB) now() time.Time {
	return d.clock.Now().UTC().Truncate(time.Microsecond)
}

// interpretError is this backend's interpreter of database errors: it turns what SQLite
// answers into the store's sentinels, so that callers test errors.Is and never see a driver
// error for a missing row or a taken name, and prefixes op, what was being done ("get change
// c_1"). It is for a failed call: err is not nil.
//
//   - sql.ErrNoRows, no such row: store.ErrNotFound.
//   - A UNIQUE or PRIMARY KEY constraint, a name or key taken: store.ErrAlreadyExists.
//   - A FOREIGN KEY constraint, a row naming one that does not exist: store.ErrNotFound.
//   - Anything else is wrapped as it is. A database that cannot serve now (busy or locked
//     past the timeout, full, failing, closed) is not mapped here but told by
//     store.Unavailable, which finds the driver error inside (see unavailable), so that its
//     code and whether the write surely did not apply survive any wrapping on the way.
func interpretError(op string, err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	var se sqlite3.Error
	if errors.As(err, &se) && se.Code == sqlite3.ErrConstraint {
		switch se.ExtendedCode {
		case sqlite3.ErrConstraintUnique, sqlite3.ErrConstraintPrimaryKey:
			return fmt.Errorf("%s: %w", op, store.ErrAlreadyExists)
		case sqlite3.ErrConstraintForeignKey:
			return fmt.Errorf("%s: %w", op, store.ErrNotFound)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

func micros(t time.Time) int64 { return t.UnixMicro() }

// nullMicros keeps the zero time as NULL.
func nullMicros(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func fromNullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

// placeholders answers "?n, ?n+1, ..." for count numbered parameters starting at first.
func placeholders(first, count int) string {
	var b strings.Builder
	for i := range count {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("?")
		b.WriteString(strconv.Itoa(first + i))
	}
	return b.String()
}

// pageLimit applies the API's page size rules: default 100, at most 1000.
func pageLimit(limit int) int {
	switch {
	case limit <= 0:
		return 100
	case limit > 1000:
		return 1000
	default:
		return limit
	}
}
