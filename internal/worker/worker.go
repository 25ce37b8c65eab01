// Package worker is the execution-plane worker's loop, used by cmd/ag-worker: it long-polls for
// jobs of the kinds it has handlers for, keeps each claim alive with heartbeats that carry the
// claim number, and completes or fails the job. It stops a handler as soon as its claim is lost,
// and on shutdown it finishes or fails what it holds, never leaving a job silently claimed.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/agwp"
	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// Handler runs one job. It must return soon after ctx is cancelled (the claim was lost, its
// cancellation requested, or the worker is shutting down). A returned error fails the attempt,
// which the server retries while attempts remain; wrap it with Permanent to fail for good.
type Handler func(ctx context.Context, job *Job) (Outcome, error)

// Job is what a handler sees of its claim.
type Job struct {
	*agwpv1.Job
	progress *progress
}

// Progress sets the job's free-text progress line. It reaches the server in a heartbeat of its
// own within about progressEvery, however often it is called: a handler may call it with every
// line of output.
func (j *Job) Progress(p string) {
	if j.progress != nil {
		j.progress.set(p)
	}
}

// FollowOutput has the job's heartbeats carry tail(), the log's tail so far, when it changed:
// people follow the output while the job runs. A handler calls it once, when its log starts.
func (j *Job) FollowOutput(tail func() string) {
	if j.progress != nil {
		j.progress.follow(tail)
	}
}

// Outcome is what a handler reports on success.
type Outcome struct {
	Result       *structpb.Struct
	Output       string
	OutputDigest string
	Attestation  *agwpv1.Envelope
}

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as a failure that retrying cannot fix.
func Permanent(err error) error { return permanentError{err} }

// Config is what a worker needs.
type Config struct {
	Client      *client.Client
	Label       string
	Handlers    map[string]Handler
	Concurrency int           // default 1
	Lease       time.Duration // default 30s
	Wait        time.Duration // long-poll wait per claim, default 30s
	// ShutdownGrace is how long running jobs may go on after shutdown begins before they are
	// stopped and failed for a retry elsewhere. Default 10s.
	ShutdownGrace time.Duration
	Logger        *slog.Logger
}

// Worker claims and runs jobs.
type Worker struct {
	cfg    Config
	kinds  []string
	log    *slog.Logger
	outage *outage // failed claims, logged once for all the loops
}

// New answers a worker; it runs nothing until Run.
func New(cfg Config) (*Worker, error) {
	if cfg.Client == nil || cfg.Label == "" || len(cfg.Handlers) == 0 {
		return nil, errors.New("worker: a client, a label and at least one handler are required")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 30 * time.Second
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	kinds := make([]string, 0, len(cfg.Handlers))
	for k := range cfg.Handlers {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return &Worker{cfg: cfg, kinds: kinds, log: cfg.Logger, outage: &outage{log: cfg.Logger.With("server", cfg.Client.BaseURL())}}, nil
}

// Run claims and runs jobs until ctx ends, then lets running jobs finish within the shutdown
// grace and fails the ones that do not, so another worker takes them at once.
func (w *Worker) Run(ctx context.Context) error {
	// Jobs outlive ctx by the grace period; jobCtx ends when that runs out.
	jobCtx, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelJobs()
	go func() {
		<-ctx.Done()
		t := time.NewTimer(w.cfg.ShutdownGrace)
		defer t.Stop()
		select {
		case <-t.C:
			cancelJobs()
		case <-jobCtx.Done():
		}
	}()

	comp := newCompleter(w.cfg.Client, w.cfg.Concurrency)
	defer comp.stop()
	// The free slots: one claim loop asks for as many jobs as there are, in one call, so that a
	// worker of many slots claims in batches on its own; each job gives its slot back when it
	// has been reported.
	slots := make(chan struct{}, w.cfg.Concurrency)
	for range w.cfg.Concurrency {
		slots <- struct{}{}
	}
	var running sync.WaitGroup
	w.claimLoop(ctx, slots, func(claim *client.Claim) {
		running.Add(1)
		go w.run(jobCtx, claim, comp, func() {
			slots <- struct{}{}
			running.Done()
		})
	})
	running.Wait()
	return nil
}

// claimLoop claims jobs for the free slots until ctx ends and hands each to start. A claim
// that fails is tried again with backoff, whatever the error: the server may come back, an
// operator may give the principal its role back.
func (w *Worker) claimLoop(ctx context.Context, slots chan struct{}, start func(*client.Claim)) {
	backoff := backoffMin
	most := min(w.cfg.Concurrency, client.MaxBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-slots:
		}
		n := 1
		// The slots of jobs reported together come back a few microseconds apart: waiting that
		// long for them keeps the claim whole rather than one job now and the rest after.
		n += len(receiveWithin(slots, most-n))
		claims, err := w.cfg.Client.ClaimMany(ctx, client.ClaimOptions{
			Worker: w.cfg.Label, Kinds: w.kinds, Lease: w.cfg.Lease, Wait: w.cfg.Wait,
		}, n)
		for range n - len(claims) {
			slots <- struct{}{}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.outage.failed("claim a job", err, backoff)
			sleep(ctx, backoff)
			backoff = min(backoff*2, backoffMax)
			continue
		}
		w.outage.answered()
		backoff = backoffMin
		for _, c := range claims {
			start(c)
		}
	}
}

// run executes one claimed job and reports its outcome with the claim's number; reported is
// called once the outcome has been reported (or was not to be).
func (w *Worker) run(ctx context.Context, claim *client.Claim, comp *completer, reported func()) {
	handedOver := false
	defer func() {
		if !handedOver {
			reported()
		}
	}()
	job := claim.Job
	// The job's attributes go with each line rather than into a logger of the job's own:
	// slog's handlers format the attributes of With at once, which was an eighth of a busy
	// worker's CPU with nothing logged at its level.
	jobAttrs := []any{"job", job.GetId(), "kind", job.GetKind(), "claim", job.GetAttempts()}
	log := func(level slog.Level, msg string, more ...any) {
		if w.log.Enabled(ctx, level) {
			w.log.Log(ctx, level, msg, append(jobAttrs[:len(jobAttrs):len(jobAttrs)], more...)...)
		}
	}
	log(slog.LevelInfo, "claimed")
	handler := w.cfg.Handlers[job.GetKind()]

	beat := claim.Lease() / 3
	if job.GetKind() == agwp.KindValidate {
		// The integration queue cancels the validations of candidates it superseded; the
		// worker hears of it at its next heartbeat, and a doomed run holds it until then.
		beat = min(beat, validateHeartbeat)
	}
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	stopBeats := claim.HeartbeatEvery(runCtx, beat, cancelRun)
	prog := newProgress(runCtx, claim, cancelRun, claim.Lease()/3)
	start := time.Now()
	outcome, err := handler(runCtx, &Job{Job: job, progress: prog})
	elapsed := time.Since(start).Round(time.Millisecond)
	prog.stop()
	stopBeats()
	cause := context.Cause(runCtx)

	switch {
	case errors.Is(cause, client.ErrClaimLost):
		// Another claim owns the job now: any report would be refused, and must not be tried.
		log(slog.LevelWarn, "claim lost; stopped the job", "cause", cause)
		return
	case errors.Is(cause, client.ErrCancelRequested):
		// The server makes a cancel-requested job CANCELLED when its claim fails.
		report(log, "cancelled", fail(ctx, claim, client.FailOptions{Error: "cancelled on request"}))
		return
	case err == nil:
		// The completer reports it, and calls back then: the job's goroutine has nothing left
		// to wait for.
		handedOver = true
		comp.complete(claim, client.CompleteOptions{
			Result: outcome.Result, Output: outcome.Output, OutputDigest: outcome.OutputDigest, Attestation: outcome.Attestation,
		}, func(cerr error) {
			report(log, "completed", cerr, "elapsed", elapsed)
			reported()
		})
		return
	}
	opts := client.FailOptions{Error: truncate(err.Error(), 4000), Output: outcome.Output}
	var perm permanentError
	switch {
	case errors.As(err, &perm):
		opts.Final = true
	case ctx.Err() != nil:
		// Shutting down: hand the job back now rather than after the server's backoff.
		opts.Error = "worker shut down before the job finished: " + opts.Error
		zero := time.Duration(0)
		opts.RetryDelay = &zero
	}
	report(log, "failed", fail(ctx, claim, opts), "err", err)
}

// reportTimeout is how long a report of a job's outcome may take. Reports do not end with the
// job's context, which may be over (shutdown): a report is what keeps the job from sitting
// claimed until its lease runs out.
const reportTimeout = 30 * time.Second

// fail reports a job's failure within reportTimeout, whether or not ctx has ended.
func fail(ctx context.Context, claim *client.Claim, opts client.FailOptions) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	_, err := claim.Fail(ctx, opts)
	return err
}

// report logs how the report of a job's outcome went: what was reported, with more, and err,
// the report's refusal or failure.
func report(log func(slog.Level, string, ...any), what string, err error, more ...any) {
	switch {
	case err == nil:
		log(slog.LevelInfo, what, more...)
	case client.IsLostClaim(err):
		log(slog.LevelWarn, what+" refused: the claim was lost", append(more, "err", err)...)
	default:
		log(slog.LevelError, what+" could not be reported", append(more, "err", err)...)
	}
}

// sleep waits d, or less when ctx ends first; it answers whether it waited all of d.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// validateHeartbeat is how often a validate job's claim is heartbeaten at least.
const validateHeartbeat = time.Second

// progressEvery is the least time between two heartbeats sent for progress lines.
const progressEvery = time.Second

// progress sends a job's progress lines to the server as they come, so that whoever follows the
// job (ag job show, ag integrate) sees the output of a validation within about a second of its
// being printed, not at the next lease/3 heartbeat. Each line goes in a heartbeat of its own,
// with the claim number like every heartbeat (ADR-0012); at most one per progressEvery, only
// when a new line came since the last one, and the newest line only: a quiet command costs
// nothing beyond the lease's heartbeats, a loud one a heartbeat a second.
type progress struct {
	ctx   context.Context // the job's; run ends with it
	claim *client.Claim
	// cancel ends the run when a heartbeat says the claim is over, as KeepAlive does.
	cancel context.CancelCauseFunc
	every  time.Duration // the least time between two heartbeats
	retry  time.Duration // after a heartbeat that failed, and the timeout of each

	mu    sync.Mutex
	line  string
	fresh bool          // line was not sent yet
	tail  func() string // the output so far, when the handler follows it
	sent  string        // the output the last heartbeat sent
	// run goes from the first line on: most jobs send none, and a goroutine each would be a
	// good part of what a worker spends on a short job.
	started bool
	stopped bool
	wake    chan struct{} // a new line came; buffered 1
	done    chan struct{} // closed by stop once run started
	exited  chan struct{} // closed when run has returned
}

func newProgress(ctx context.Context, claim *client.Claim, cancel context.CancelCauseFunc, retry time.Duration) *progress {
	return &progress{ctx: ctx, claim: claim, cancel: cancel, every: progressEvery, retry: max(retry, progressEvery),
		wake: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{})}
}

// set makes line the newest progress line; it never waits for the server.
func (p *progress) set(line string) {
	p.mu.Lock()
	p.line, p.fresh = line, true
	if !p.started && !p.stopped {
		p.started = true
		go p.run()
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *progress) follow(tail func() string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tail = tail
}

// output answers the output to send with the next heartbeat: its tail when it changed since
// the last one sent, else "".
func (p *progress) output() string {
	p.mu.Lock()
	tail, sent := p.tail, p.sent
	p.mu.Unlock()
	if tail == nil {
		return ""
	}
	if out := tail(); out != sent {
		return out
	}
	return ""
}

func (p *progress) sentOutput(out string) {
	if out == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent = out
}

// take answers the newest line when it was not sent yet.
func (p *progress) take() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line, fresh := p.line, p.fresh
	p.fresh = false
	return line, fresh
}

// unsent marks line to be sent again, unless a newer one came meanwhile.
func (p *progress) unsent(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.fresh {
		p.line, p.fresh = line, true
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// run sends the lines until stop is called or the job's context ends.
func (p *progress) run() {
	ctx := p.ctx
	defer close(p.exited)
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.done:
			return
		case <-p.wake:
		}
		line, fresh := p.take()
		if !fresh {
			continue
		}
		out := p.output()
		hctx, cancel := context.WithTimeout(ctx, p.retry)
		res, err := p.claim.HeartbeatOutput(hctx, line, out)
		cancel()
		if err == nil {
			p.sentOutput(out)
		}
		pause := p.every
		switch {
		case err != nil && client.IsLostClaim(err):
			p.cancel(fmt.Errorf("%w: %v", client.ErrClaimLost, err))
			return
		case err == nil && res.GetCancelRequested():
			p.cancel(client.ErrCancelRequested)
			return
		case err != nil:
			// The server briefly away: the line goes again later, unless a newer one does.
			p.unsent(line)
			pause = p.retry
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-p.done:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// stop ends run and waits for it: no progress heartbeat is in flight once it returns.
func (p *progress) stop() {
	p.mu.Lock()
	p.stopped = true
	started := p.started
	p.mu.Unlock()
	if started {
		close(p.done)
		<-p.exited
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// Noop is the built-in kind "ag.noop": it waits payload.ms milliseconds (default 0) and
// completes; with payload.fail set it fails with that message instead. For smoke tests and
// benchmarks.
func Noop(ctx context.Context, job *Job) (Outcome, error) {
	fields := job.GetPayload().GetFields()
	ms := fields["ms"].GetNumberValue()
	if ms < 0 || ms > 24*3600*1000 {
		return Outcome{}, Permanent(fmt.Errorf("payload.ms = %v is out of range (0 to 86400000)", ms))
	}
	if ms > 0 {
		t := time.NewTimer(time.Duration(ms * float64(time.Millisecond)))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return Outcome{}, context.Cause(ctx)
		case <-t.C:
		}
	}
	if msg := fields["fail"].GetStringValue(); msg != "" {
		return Outcome{}, errors.New(msg)
	}
	result, _ := structpb.NewStruct(map[string]any{"slept_ms": ms})
	return Outcome{Result: result, Output: fmt.Sprintf("slept %vms\n", ms)}, nil
}
