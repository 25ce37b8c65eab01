// Package chaos is the fault harness behind ag-chaos: it runs three `ag serve` replicas on one
// private PostgreSQL, a fleet of `ag-worker` processes and in-process clients (agents, and
// workers whose every request and answer it records), drives a workload of jobs, leases and
// integrations while it kills and pauses processes, expires leases and restarts the database
// on a schedule drawn from a seed, and then checks the invariants of docs/chaos.md over the
// whole recorded history, the audit log and the final state.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// Config is a run of the harness.
type Config struct {
	Seed     uint64
	Duration time.Duration // of the workload under faults; a drain and the checks follow

	AgBin, WorkerBin string // empty: built with go build into the run's directory

	Replicas        int // ag serve processes (default 3)
	Workers         int // ag-worker processes (default 3)
	Agents          int // agent goroutines (default 4, at least 2)
	RecordedWorkers int // in-process workers whose requests are recorded (default 2)

	Keep            bool      // keep the run's directory (logs, keys, history) instead of removing it
	KeepOnViolation bool      // keep it when an invariant was violated
	Out             io.Writer // progress lines and the summary; nil: discarded
	Verbose         bool      // a line per fault and phase
}

func (c *Config) defaults() error {
	if c.Duration <= 0 {
		c.Duration = 60 * time.Second
	}
	if c.Replicas == 0 {
		c.Replicas = 3
	}
	if c.Workers == 0 {
		c.Workers = 3
	}
	if c.Agents == 0 {
		c.Agents = 4
	}
	if c.RecordedWorkers == 0 {
		c.RecordedWorkers = 2
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	switch {
	case c.Replicas < 1 || c.Workers < 1 || c.RecordedWorkers < 1:
		return errors.New("at least one replica, one worker and one recorded worker")
	case c.Agents < 2:
		return errors.New("at least two agents: a lease expiry hands a path from one to another")
	case (c.AgBin == "") != (c.WorkerBin == ""):
		return errors.New("--ag and --ag-worker go together")
	}
	return nil
}

// The fixed parameters of a run.
const (
	bootstrapToken = "ag-chaos-admin-token-0123456789abcdef"
	workerLease    = 2 * time.Second // ag-worker --lease and the recorded workers' claims
	callTimeout    = 4 * time.Second // of a recorded call, beyond its long-poll wait
	gatedRepo      = "gated"
	freeRepo       = "free"
	failMarker     = "CHAOS-FAIL"
	drainTimeout   = 30 * time.Second
)

// validationCommand fails a candidate tree that holds the fail marker in any file.
var validationCommand = []string{"sh", "-c", "! grep -rqs " + failMarker + " ."}

// run is one run of the harness.
type run struct {
	cfg   Config
	dir   string
	root  context.Context // the run's: ends only when the run is interrupted
	start time.Time       // of the workload

	agBin, workerBin string
	pg               *pgtest.Cluster
	dbURL            string
	auditKey         string

	replicas []*process
	urls     []string
	workers  []*process
	admin    []*client.Client // unrecorded, one per replica: setup, drain, final state
	tokens   map[string]string

	hc       *http.Client
	hist     *History
	enqueuer *enqueuer
	recorded []*recWorker
	prober   *prober
	agents   []*agent

	mu         sync.Mutex
	faults     []injected
	violations []Violation
	notes      []string

	logMu sync.Mutex
}

// Violation is an invariant found broken.
type Violation struct {
	Invariant string
	What      string
}

func (v Violation) String() string { return v.Invariant + ": " + v.What }

func (r *run) violate(invariant, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violations = append(r.violations, Violation{Invariant: invariant, What: fmt.Sprintf(format, args...)})
}

func (r *run) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *run) recordFault(in injected) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, in)
}

// logf prints a progress line when verbose.
func (r *run) logf(format string, args ...any) {
	if !r.cfg.Verbose {
		return
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	at := 0.0
	if !r.start.IsZero() {
		at = time.Since(r.start).Seconds()
	}
	fmt.Fprintf(r.cfg.Out, "[%7.2fs] %s\n", at, fmt.Sprintf(format, args...))
}

// Run runs the harness and answers its report. An error means the harness could not do its
// work (no PostgreSQL, a build that failed, a server that never started); violations found
// are in the report.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	began := time.Now()
	r := &run{cfg: cfg, tokens: map[string]string{}, hist: &History{}}
	r.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}}
	if r.dir, err = os.MkdirTemp("", "ag-chaos-"); err != nil {
		return nil, err
	}
	defer func() {
		keep := cfg.Keep || (cfg.KeepOnViolation && rep != nil && !rep.OK())
		if rep != nil {
			rep.Kept = keep
		}
		r.teardown(keep)
	}()

	schedule := Schedule(cfg.Seed, cfg.Duration, cfg.Replicas, cfg.Workers, cfg.Agents)
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	r.logf("setup done in %v: %d replicas, %d workers; %d faults scheduled", time.Since(began).Round(time.Millisecond), len(r.replicas), len(r.workers), len(schedule))

	r.workload(ctx, schedule)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	r.drain(ctx)
	for _, w := range r.workers {
		w.terminate(10 * time.Second)
	}
	final, err := r.collect(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the final state: %w", err)
	}
	rep = r.check(final)
	rep.Seed, rep.Duration, rep.Elapsed = cfg.Seed, cfg.Duration, time.Since(began)
	rep.Schedule = schedule
	rep.Dir = r.dir
	if f, err := os.Create(filepath.Join(r.dir, "history.jsonl")); err == nil {
		_ = r.hist.WriteJSONL(f)
		f.Close()
	}
	return rep, nil
}

// setup starts PostgreSQL, the replicas and the workers, and creates the principals and
// repositories.
func (r *run) setup(ctx context.Context) error {
	if r.cfg.AgBin != "" {
		r.agBin, r.workerBin = r.cfg.AgBin, r.cfg.WorkerBin
	} else {
		var err error
		if r.agBin, r.workerBin, err = buildBinaries(ctx, filepath.Join(r.dir, "bin")); err != nil {
			return err
		}
	}
	if err := pgtest.Available(); err != nil {
		return fmt.Errorf("no PostgreSQL: %w", err)
	}
	pg, err := pgtest.StartCluster()
	if err != nil {
		return fmt.Errorf("start PostgreSQL: %w", err)
	}
	r.pg = pg
	if r.dbURL, err = pg.CreateDatabase(ctx, "agchaos"); err != nil {
		return err
	}
	if err := durableCommits(ctx, pg.URL(), "agchaos"); err != nil {
		return err
	}
	r.auditKey = filepath.Join(r.dir, "audit.key")
	for _, d := range []string{"logs", "workers", "work", "cache"} {
		if err := os.MkdirAll(filepath.Join(r.dir, d), 0o755); err != nil {
			return err
		}
	}

	for i := range r.cfg.Replicas {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		name := fmt.Sprintf("r%d", i+1)
		r.urls = append(r.urls, "http://"+addr)
		r.replicas = append(r.replicas, &process{
			name: "replica " + name, bin: r.agBin, dir: r.dir, logPath: filepath.Join(r.dir, "logs", name+".log"),
			env: cleanEnv("AG_BOOTSTRAP_TOKEN=" + bootstrapToken),
			args: []string{"serve", "--addr", addr, "--db", r.dbURL, "--audit-key", r.auditKey,
				"--poll-interval", "250ms", "--log-level", "warn"},
		})
		r.admin = append(r.admin, client.New("http://"+addr, bootstrapToken, client.WithHTTPClient(r.hc),
			client.WithRetries(2, 200*time.Millisecond), client.WithTimeout(10*time.Second)))
	}
	// The first replica migrates the schema, creates the admin and the audit key; the others
	// start on what it made.
	for i := range r.replicas {
		if err := r.startReplica(ctx, i); err != nil {
			return err
		}
	}

	names := []struct {
		name string
		role agwpv1.Role
	}{{"fleet", agwpv1.Role_ROLE_WORKER}, {"recorder", agwpv1.Role_ROLE_WORKER}, {"enqueuer", agwpv1.Role_ROLE_AGENT}}
	for i := range r.cfg.Agents {
		names = append(names, struct {
			name string
			role agwpv1.Role
		}{fmt.Sprintf("agent-%d", i+1), agwpv1.Role_ROLE_AGENT})
	}
	for _, n := range names {
		res, err := r.admin[0].Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: n.name, Role: n.role})
		if err != nil {
			return fmt.Errorf("create principal %s: %w", n.name, err)
		}
		r.tokens[n.name] = res.GetToken()
	}
	if _, err := r.admin[0].Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: freeRepo}); err != nil {
		return fmt.Errorf("create repository %s: %w", freeRepo, err)
	}
	if _, err := r.admin[0].Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: gatedRepo,
		Validation: &agwpv1.Validation{Command: validationCommand, Timeout: durationpb.New(30 * time.Second)}}); err != nil {
		return fmt.Errorf("create repository %s: %w", gatedRepo, err)
	}

	for i := range r.cfg.Workers {
		label := fmt.Sprintf("w%d", i+1)
		r.workers = append(r.workers, &process{
			name: "worker " + label, bin: r.workerBin, dir: r.dir, logPath: filepath.Join(r.dir, "logs", label+".log"),
			env: cleanEnv(),
			args: []string{"--server", r.urls[i%len(r.urls)], "--token", r.tokens["fleet"], "--label", label,
				"--kinds", "validate,ag.noop", "--lease", workerLease.String(), "--wait", "2s", "--concurrency", "2",
				"--key", filepath.Join(r.dir, "workers", label+".key"), "--cache-dir", filepath.Join(r.dir, "cache"),
				"--work-dir", filepath.Join(r.dir, "work"), "--shutdown-grace", "3s"},
		})
	}
	for i := range r.workers {
		if err := r.startWorker(ctx, i); err != nil {
			return err
		}
	}
	r.newActors()
	return nil
}

// startReplica starts replica i and waits until it is ready.
func (r *run) startReplica(ctx context.Context, i int) error {
	p := r.replicas[i]
	var err error
	for try := 1; try <= 3; try++ {
		if err = p.start(); err != nil {
			return err
		}
		if err = waitReady(ctx, p, r.urls[i], 60*time.Second); err == nil {
			return nil
		}
		p.kill()
		if ctx.Err() != nil {
			return err
		}
	}
	return err
}

// startWorker starts worker i and waits until it has registered its key and claims. A worker
// whose replica is down exits at start; it is started again until it stays up.
func (r *run) startWorker(ctx context.Context, i int) error {
	p := r.workers[i]
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := p.start(); err != nil {
			return err
		}
		for p.running() && !p.logContains(`msg="ag-worker started"`) && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
		switch {
		case p.running() && p.logContains(`msg="ag-worker started"`):
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case time.Now().After(deadline):
			p.kill()
			return fmt.Errorf("%s did not start; its log ends:\n%s", p.name, p.logTail(15))
		}
		p.kill()
		time.Sleep(500 * time.Millisecond)
	}
}

// workload runs the actors and the fault schedule for the configured duration, and answers
// when every actor stopped and every fault was recovered from.
func (r *run) workload(ctx context.Context, schedule []Fault) {
	wctx, cancel := context.WithTimeout(ctx, r.cfg.Duration)
	defer cancel()
	r.root, r.start = ctx, time.Now()
	var wg sync.WaitGroup
	streams := map[int][]Fault{}
	for _, f := range schedule {
		streams[streamOf(f.Kind)] = append(streams[streamOf(f.Kind)], f)
	}
	for _, fs := range streams {
		wg.Go(func() { r.inject(wctx, fs, r.start) })
	}
	wg.Go(func() { r.enqueuer.run(wctx) })
	for _, w := range r.recorded {
		wg.Go(func() { w.run(wctx) })
	}
	for _, a := range r.agents {
		wg.Go(func() { a.run(wctx) })
	}
	wg.Wait()
	r.logf("workload over")
	// Every process is up again: a fault whose recovery failed left one down.
	for i, p := range r.replicas {
		if !p.running() {
			r.violate("replicas recover", "%s is down after the workload; starting it again", p.name)
			_ = r.startReplica(ctx, i)
		}
	}
	for i, p := range r.workers {
		if !p.running() {
			r.note("%s was down after the workload; started it again", p.name)
			_ = r.startWorker(ctx, i)
		}
	}
}

// drain waits, without faults, until every job is finished and every change of the gated
// repository decided, or drainTimeout passes.
func (r *run) drain(ctx context.Context) {
	deadline := time.Now().Add(drainTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		pending, err := r.pendingWork(ctx)
		if err == nil && pending == 0 {
			r.logf("drained")
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	pending, _ := r.pendingWork(ctx)
	r.note("%d jobs or changes were still pending %v after the workload", pending, drainTimeout)
}

func (r *run) pendingWork(ctx context.Context) (int, error) {
	n := 0
	// A probe's job left behind by the end of the workload is nobody else's to finish.
	res, err := r.admin[0].Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{PageSize: 1000, Kinds: []string{"ag.noop", "validate"},
		States: []agwpv1.JobState{agwpv1.JobState_JOB_STATE_QUEUED, agwpv1.JobState_JOB_STATE_CLAIMED}})
	if err != nil {
		return 0, err
	}
	n += len(res.GetJobs())
	for _, repo := range []string{gatedRepo, freeRepo} {
		cs, err := r.admin[0].Repos.ListChanges(ctx, &agwpv1.ListChangesRequest{Repository: repo, PageSize: 1000})
		if err != nil {
			return 0, err
		}
		for _, c := range cs.GetChanges() {
			if s := c.GetState(); s == agwpv1.ChangeState_CHANGE_STATE_QUEUED || s == agwpv1.ChangeState_CHANGE_STATE_VALIDATING {
				n++
			}
		}
	}
	return n, nil
}

// teardown stops every process and PostgreSQL, and removes the run's directory unless kept.
func (r *run) teardown(keep bool) {
	for _, p := range r.workers {
		p.close()
	}
	for _, p := range r.replicas {
		p.close()
	}
	if r.pg != nil {
		if b, err := os.ReadFile(r.pg.LogFile()); err == nil {
			_ = os.WriteFile(filepath.Join(r.dir, "logs", "postgres.log"), b, 0o644)
		}
		r.pg.Stop()
	}
	r.hc.CloseIdleConnections()
	if !keep {
		os.RemoveAll(r.dir)
	}
}

// durableCommits makes every commit in database name wait for its WAL to be written. The
// private cluster runs with synchronous_commit off, for speed, and a crash (the immediate
// restart this harness injects) would lose commits already acknowledged: a loss of the
// harness's making, not the product's. A database's setting overrides the server's.
func durableCommits(ctx context.Context, url, name string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+name+" SET synchronous_commit = on"); err != nil {
		return fmt.Errorf("alter database %s: %w", name, err)
	}
	return nil
}
