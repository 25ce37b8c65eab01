// Command riverbench measures River's throughput the way `ag bench` measures ag's: it
// enqueues --jobs no-op jobs first, then times a River client working them all, and then
// measures enqueue→start latency with an idle client. It is a module of its own so that
// River never enters ag's dependencies.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/mattn/go-sqlite3" // the SQLite driver ag uses
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

type options struct {
	jobs, workers, latencyJobs int
	fetchCooldown, fetchPoll   time.Duration
	insertBatch                int
}

func main() {
	var (
		o      options
		pgURL  string
		sqlite string
	)
	flag.StringVar(&pgURL, "database-url", "", "PostgreSQL URL")
	flag.StringVar(&sqlite, "sqlite", "", "SQLite database file (River's riversqlite driver)")
	flag.IntVar(&o.jobs, "jobs", 100000, "jobs of the throughput phase")
	flag.IntVar(&o.workers, "workers", 100, "River MaxWorkers of the queue")
	flag.IntVar(&o.latencyJobs, "latency-jobs", 200, "jobs of the latency phase (0: skip it)")
	flag.IntVar(&o.insertBatch, "insert-batch", 5000, "jobs per InsertMany call")
	// River's defaults (100 ms, 1 s) cap a busy queue near MaxWorkers/100 ms; these are the
	// values River's own `river bench` uses to show its throughput.
	flag.DurationVar(&o.fetchCooldown, "fetch-cooldown", 2*time.Millisecond, "River FetchCooldown")
	flag.DurationVar(&o.fetchPoll, "fetch-poll-interval", 20*time.Millisecond, "River FetchPollInterval")
	flag.Parse()
	if (pgURL == "") == (sqlite == "") {
		fatal(errors.New("give exactly one of --database-url and --sqlite"))
	}
	if o.jobs < 1 || o.workers < 1 || o.insertBatch < 1 || o.latencyJobs < 0 {
		fatal(errors.New("--jobs, --workers and --insert-batch must be positive, --latency-jobs not negative"))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if pgURL != "" {
		err = runPostgres(ctx, pgURL, o)
	} else {
		err = runSQLite(ctx, sqlite, o)
	}
	if err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "riverbench:", err)
	os.Exit(1)
}

func runPostgres(ctx context.Context, dbURL string, o options) error {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	// The same pool size ag's PostgreSQL store takes, unless the URL sets one.
	if !strings.Contains(dbURL, "pool_max_conns") {
		cfg.MaxConns = int32(max(16, 4*runtime.GOMAXPROCS(0)))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	fmt.Printf("river %s on PostgreSQL: %d workers, pool of %d connections\n", riverVersion(), o.workers, cfg.MaxConns)
	return run(ctx, riverpgxv5.New(pool), o)
}

func runSQLite(ctx context.Context, path string, o options) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	// The settings of ag's SQLite writer: WAL, synchronous=NORMAL, BEGIN IMMEDIATE.
	q := url.Values{
		"_journal_mode": {"WAL"}, "_synchronous": {"NORMAL"}, "_busy_timeout": {"5000"},
		"_txlock": {"immediate"},
	}
	db, err := sql.Open("sqlite3", "file:"+abs+"?"+q.Encode())
	if err != nil {
		return err
	}
	defer db.Close()
	// riversqlite's advice: River runs operations in parallel, which SQLite answers with
	// SQLITE_BUSY; one connection serialises them (ag's store has one writer too).
	db.SetMaxOpenConns(1)
	fmt.Printf("river %s on SQLite (%s): %d workers, one connection\n", riverVersion(), abs, o.workers)
	return run(ctx, riversqlite.New(db), o)
}

// riverVersion answers the River release built in, so that the figures say what they measured.
func riverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/riverqueue/river" {
				return m.Version
			}
		}
	}
	return "(unknown version)"
}

type benchArgs struct{}

func (benchArgs) Kind() string { return "bench" }

type latencyArgs struct{}

func (latencyArgs) Kind() string { return "bench_latency" }

func run[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], o options) error {
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// A rerun against the same database starts from an empty table, as ag's bench does.
	if err := driver.GetExecutor().Exec(ctx, "DELETE FROM river_job"); err != nil {
		return err
	}

	started := make(chan time.Time, 1)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[benchArgs]) error { return nil }))
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[latencyArgs]) error {
		started <- time.Now()
		return nil
	}))
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     o.fetchCooldown,
		FetchPollInterval: o.fetchPoll,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.workers}},
		Workers:           workers,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}

	// Enqueue everything first, then measure work alone.
	start := time.Now()
	params := make([]river.InsertManyParams, o.insertBatch)
	for i := range params {
		params[i].Args = benchArgs{}
	}
	for left := o.jobs; left > 0; left -= len(params) {
		if _, err := client.InsertMany(ctx, params[:min(left, len(params))]); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
	}
	elapsed := time.Since(start)
	fmt.Printf("enqueue:   %d jobs in %s (%.0f jobs/s, InsertMany of %d)\n", o.jobs, elapsed.Round(time.Millisecond),
		float64(o.jobs)/elapsed.Seconds(), o.insertBatch)

	// Completion events come after River's completer has written the job's state, so the
	// N-th one is the N-th job completed in the database. The channel holds them all: a
	// subscription drops the events that overflow it.
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: o.jobs + o.latencyJobs,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer unsubscribe()
	start = time.Now()
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	timeout := time.After(10 * time.Minute)
	for done := 0; done < o.jobs; {
		select {
		case ev := <-events:
			if ev.Kind != river.EventKindJobCompleted {
				return fmt.Errorf("job %d: %s", ev.Job.ID, ev.Kind)
			}
			done++
		case <-timeout:
			return fmt.Errorf("only %d of %d jobs completed in 10 minutes", done, o.jobs)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	elapsed = time.Since(start)
	completed, err := driver.GetExecutor().JobCountByState(ctx, &riverdriver.JobCountByStateParams{State: rivertype.JobStateCompleted})
	if err != nil {
		return err
	}
	if completed != o.jobs {
		return fmt.Errorf("%d jobs completed in the database, want %d", completed, o.jobs)
	}
	fmt.Printf("river: %d jobs in %.3f s: %.0f jobs/s\n", o.jobs, elapsed.Seconds(), float64(o.jobs)/elapsed.Seconds())
	if o.latencyJobs == 0 {
		return nil
	}

	// Latency: the client is idle; each job is inserted once the one before has started.
	var lats []time.Duration
	for range o.latencyJobs {
		t := time.Now()
		if _, err := client.Insert(ctx, latencyArgs{}, nil); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		select {
		case at := <-started:
			lats = append(lats, at.Sub(t))
		case <-time.After(30 * time.Second):
			return errors.New("a job did not start within 30s")
		}
	}
	fmt.Printf("enqueue→start: %s (idle client)\n", percentiles(lats))
	return nil
}

// percentiles formats p50, p90 and p99 of ds as ag bench does.
func percentiles(ds []time.Duration) string {
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	r := func(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  (n=%d)", r(at(0.5)), r(at(0.9)), r(at(0.99)), len(ds))
}
