package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

type benchOptions struct {
	jobs     int
	workers  int
	kind     string
	latency  int
	lease    time.Duration
	enqueuer int
	batch    int
}

func newBenchCmd(g *globals) *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "measure a running server: claim+complete throughput and latencies with concurrent workers",
		Long: `Drives the server at --server with the token's principal (it must be allowed to enqueue and
to claim: an admin token does both). Two phases:

  throughput  --jobs jobs are enqueued first; --workers workers then claim and complete them,
              up to --batch jobs per call (ClaimJobs, CompleteJobs; 1: ClaimJob, CompleteJob),
              each completion carrying its own claim number; prints jobs/s and claim→complete
              latency.
  latency     the workers wait (long-poll); --latency-jobs jobs are enqueued one at a time;
              prints enqueue→claim latency with waiting workers.

Jobs are of kind --kind (default ag.bench), so running ag-workers do not take them.

With --workers 0 the jobs are for workers outside, such as ag-worker --kinds ag.noop with
--kind ag.noop: it enqueues them, says "ready", and times the drain from the first claim to
the last job finished, watching the first and the last job enqueued every 5 ms. Start the
workers once it is ready; nothing else should run jobs on the server meanwhile. There is no
latency phase then.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.jobs < 1 || o.workers < 0 || o.latency < 0 || o.enqueuer < 1 {
				return errors.New("--jobs and --enqueuers must be positive, --workers and --latency-jobs not negative")
			}
			if o.batch < 1 || o.batch > client.MaxBatch {
				return fmt.Errorf("--batch must be 1 to %d, got %d", client.MaxBatch, o.batch)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			return runBench(cmd.Context(), g, c, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.jobs, "jobs", 10000, "jobs of the throughput phase")
	f.IntVar(&o.workers, "workers", 16, "concurrent workers (0: workers outside drain the jobs)")
	f.IntVar(&o.enqueuer, "enqueuers", 8, "concurrent enqueuers of the throughput phase")
	f.IntVar(&o.latency, "latency-jobs", 200, "jobs of the latency phase (0: skip it)")
	f.IntVar(&o.batch, "batch", 32, "jobs claimed and completed per call (1: one call per claim and per completion)")
	f.StringVar(&o.kind, "kind", "ag.bench", "job kind used")
	f.DurationVar(&o.lease, "lease", 30*time.Second, "claim lease")
	return cmd
}

// claimAndComplete claims up to batch jobs and completes them, with one call each way when
// batch > 1. It answers how many it completed and each one's claim→complete latency.
func claimAndComplete(ctx context.Context, c *client.Client, opts client.ClaimOptions, batch int) (int, []time.Duration, error) {
	if batch == 1 {
		claim, err := c.Claim(ctx, opts)
		if err != nil || claim == nil {
			return 0, nil, wrapErr("claim", err)
		}
		t := time.Now()
		if _, err := claim.Complete(ctx, client.CompleteOptions{}); err != nil {
			return 0, nil, fmt.Errorf("complete: %w", err)
		}
		return 1, []time.Duration{time.Since(t)}, nil
	}
	claims, err := c.ClaimMany(ctx, opts, batch)
	if err != nil || len(claims) == 0 {
		return 0, nil, wrapErr("claim", err)
	}
	t := time.Now()
	cs := make([]client.Completion, len(claims))
	for i, cl := range claims {
		cs[i].Claim = cl
	}
	_, refusals, err := c.CompleteMany(ctx, cs)
	if err != nil {
		return 0, nil, fmt.Errorf("complete: %w", err)
	}
	if err := errors.Join(refusals...); err != nil {
		return 0, nil, fmt.Errorf("complete: %w", err)
	}
	lat := time.Since(t)
	lats := make([]time.Duration, len(claims))
	for i := range lats {
		lats[i] = lat
	}
	return len(claims), lats, nil
}

// jobCounts answers the server's jobs by state.
func jobCounts(ctx context.Context, c *client.Client) (map[agwpv1.JobState]uint64, error) {
	res, err := c.Jobs.CountJobs(ctx, &agwpv1.CountJobsRequest{})
	if err != nil {
		return nil, err
	}
	counts := map[agwpv1.JobState]uint64{}
	for _, sc := range res.GetCounts() {
		counts[sc.GetState()] = sc.GetCount()
	}
	return counts, nil
}

// finished counts the jobs in a final state.
func finished(counts map[agwpv1.JobState]uint64) uint64 {
	return counts[agwpv1.JobState_JOB_STATE_COMPLETED] + counts[agwpv1.JobState_JOB_STATE_FAILED] + counts[agwpv1.JobState_JOB_STATE_CANCELLED]
}

// timeOutsideDrain times the drain of the jobs bench enqueued by workers outside: from the
// first look that finds the first job taken to the first that finds them all finished. It
// looks at the first and the last job (the first and the last in claim order) every 5 ms, a
// lookup by id, and counts the jobs by state (CountJobs, which reads the whole table: not
// something to do every few milliseconds while measuring) only once the last one is finished,
// and then every 50 ms until they all are. before holds the counts before the enqueue.
func timeOutsideDrain(ctx context.Context, g *globals, c *client.Client, jobs int, first, last string, before map[agwpv1.JobState]uint64) error {
	target := finished(before) + uint64(jobs)
	fmt.Fprintf(g.stdout, "ready:            %d jobs queued for the workers outside\n", jobs)
	state := func(id string) (agwpv1.JobState, error) {
		res, err := c.Jobs.GetJob(ctx, &agwpv1.GetJobRequest{JobId: id})
		return res.GetJob().GetState(), err
	}
	var start time.Time
	for start.IsZero() {
		st, err := state(first)
		if err != nil {
			return fmt.Errorf("get the first job: %w", err)
		}
		if st != agwpv1.JobState_JOB_STATE_QUEUED {
			start = time.Now()
		} else if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	for {
		st, err := state(last)
		if err != nil {
			return fmt.Errorf("get the last job: %w", err)
		}
		if st != agwpv1.JobState_JOB_STATE_QUEUED && st != agwpv1.JobState_JOB_STATE_CLAIMED {
			break
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	var counts map[agwpv1.JobState]uint64
	var doneAt time.Time
	for {
		doneAt = time.Now()
		var err error
		if counts, err = jobCounts(ctx, c); err != nil {
			return fmt.Errorf("count jobs: %w", err)
		}
		if finished(counts) >= target {
			break
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	elapsed := doneAt.Sub(start)
	fmt.Fprintf(g.stdout, "claim+complete:   %d jobs in %s: %.0f jobs/s (workers outside; %d failed, %d cancelled in all)\n",
		jobs, elapsed.Round(time.Millisecond), float64(jobs)/elapsed.Seconds(),
		counts[agwpv1.JobState_JOB_STATE_FAILED], counts[agwpv1.JobState_JOB_STATE_CANCELLED])
	if _, sealedAt, err := settled(ctx, c); err == nil {
		fmt.Fprintf(g.stdout, "sealed:           every event %s after the last job was seen finished\n", max(0, sealedAt.Sub(doneAt)).Round(time.Millisecond))
	}
	return nil
}

// settleQuiet is how long the audit checkpoint must stay the same to count as settled: longer
// than the server's longest wait between seals (one second) when nothing wakes its sealer.
const settleQuiet = 1500 * time.Millisecond

// settled waits until the server's audit checkpoint stops growing, and answers its size and
// when it last grew (when it was first read, if it never did).
func settled(ctx context.Context, c *client.Client) (uint64, time.Time, error) {
	var size uint64
	var grew time.Time
	for first := true; ; first = false {
		cp, err := c.Audit.GetCheckpoint(ctx, &agwpv1.GetCheckpointRequest{})
		if err != nil {
			return 0, time.Time{}, err
		}
		now := time.Now()
		if first || cp.GetSize() != size {
			size, grew = cp.GetSize(), now
		} else if now.Sub(grew) >= settleQuiet {
			return size, grew, nil
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return 0, time.Time{}, err
		}
	}
}

// sleepCtx waits d, or answers ctx's error when it ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// wrapErr gives err its operation; nil stays nil.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", op, err)
}

// percentiles formats p50, p90 and p99 of ds.
func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	r := func(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  (n=%d)", r(at(0.5)), r(at(0.9)), r(at(0.99)), len(ds))
}

func runBench(ctx context.Context, g *globals, c *client.Client, o *benchOptions) error {
	worker := "bench-" + time.Now().UTC().Format("150405")
	fmt.Fprintf(g.stdout, "ag bench against %s: %d workers, batch %d, kind %s\n", c.BaseURL(), o.workers, o.batch, o.kind)

	// Throughput: enqueue everything first, then measure claim+complete alone. The first job
	// and the last are enqueued on their own, before and after the others, so that they are
	// the first and the last in claim order: workers outside are timed by them.
	var before map[agwpv1.JobState]uint64
	if o.workers == 0 {
		var err error
		if before, err = jobCounts(ctx, c); err != nil {
			return fmt.Errorf("count jobs: %w", err)
		}
	}
	first, last, err := benchEnqueue(ctx, g, c, o)
	if err != nil {
		return err
	}
	// The drain starts on a server at rest, as a queue's benchmark starts its workers on jobs
	// inserted before: the enqueues' audit events are sealed first, or the drain would pay
	// for them.
	if size, _, err := settled(ctx, c); err != nil {
		fmt.Fprintf(g.stdout, "sealed:           not known (%v); the drain may pay for sealing the enqueues\n", err)
	} else {
		fmt.Fprintf(g.stdout, "sealed:           %d audit events before the drain\n", size)
	}

	if o.workers == 0 {
		return timeOutsideDrain(ctx, g, c, o.jobs, first, last, before)
	}
	if err := benchDrain(ctx, g, c, o, worker); err != nil {
		return err
	}
	if o.latency == 0 {
		return nil
	}
	return benchLatency(ctx, g, c, o, worker)
}

// benchEnqueue enqueues o.jobs jobs, the first and the last on their own, and answers their ids.
func benchEnqueue(ctx context.Context, g *globals, c *client.Client, o *benchOptions) (first, last string, err error) {
	start := time.Now()
	enqueue := func() (string, error) {
		res, err := c.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: o.kind})
		if err != nil {
			return "", fmt.Errorf("enqueue: %w", err)
		}
		return res.GetJob().GetId(), nil
	}
	first, err = enqueue()
	if err != nil {
		return "", "", err
	}
	last = first
	var next atomic.Int64
	next.Store(1)
	var wg sync.WaitGroup
	errs := make(chan error, o.enqueuer)
	for range o.enqueuer {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) < int64(o.jobs) {
				if _, err := enqueue(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return "", "", <-errs
	}
	if o.jobs > 1 {
		if last, err = enqueue(); err != nil {
			return "", "", err
		}
	}
	fmt.Fprintf(g.stdout, "enqueue:          %d jobs in %s (%.0f jobs/s)\n", o.jobs, time.Since(start).Round(time.Millisecond),
		float64(o.jobs)/time.Since(start).Seconds())
	return first, last, nil
}

// benchDrain claims and completes o.jobs jobs with o.workers workers, timing the drain.
func benchDrain(ctx context.Context, g *globals, c *client.Client, o *benchOptions, worker string) error {
	var wg sync.WaitGroup
	errs := make(chan error, o.workers)
	var done atomic.Int64
	var mu sync.Mutex
	var completeLat []time.Duration
	var elapsed time.Duration
	// The drain ends with the last completion. Workers that found the queue empty meanwhile
	// are long-polling; they are called off then, and their wait is not the drain's.
	drain, drained := context.WithCancel(ctx)
	defer drained()
	start := time.Now()
	for i := range o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			defer func() { mu.Lock(); completeLat = append(completeLat, mine...); mu.Unlock() }()
			opts := client.ClaimOptions{Worker: fmt.Sprintf("%s-%d", worker, i), Kinds: []string{o.kind}, Lease: o.lease, Wait: time.Second}
			for done.Load() < int64(o.jobs) {
				n, lat, err := claimAndComplete(drain, c, opts, o.batch)
				if err != nil {
					if drain.Err() == nil {
						errs <- err
					}
					return
				}
				mine = append(mine, lat...)
				if now := done.Add(int64(n)); now >= int64(o.jobs) && now-int64(n) < int64(o.jobs) {
					mu.Lock()
					elapsed = time.Since(start)
					mu.Unlock()
					drained()
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return <-errs
	}
	fmt.Fprintf(g.stdout, "claim+complete:   %d jobs in %s: %.0f jobs/s\n", done.Load(), elapsed.Round(time.Millisecond), float64(done.Load())/elapsed.Seconds())
	fmt.Fprintf(g.stdout, "claim→complete:   %s\n", percentiles(completeLat))
	if _, last, err := settled(ctx, c); err == nil {
		// What the drain left to the sealer: its jobs are audited once this is sealed too.
		fmt.Fprintf(g.stdout, "sealed:           every event %s after the last completion\n",
			max(0, last.Sub(start.Add(elapsed))).Round(time.Millisecond))
	}
	return nil
}

// benchLatency measures enqueue→claim with workers already waiting.
func benchLatency(ctx context.Context, g *globals, c *client.Client, o *benchOptions, worker string) error {
	// Latency: workers wait first; each job is enqueued once the one before was claimed.
	sent := make([]time.Time, o.latency)
	claimed := make(chan int, o.latency)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var waiting sync.WaitGroup
	for i := range o.workers {
		waiting.Add(1)
		go func() {
			defer waiting.Done()
			for wctx.Err() == nil {
				claim, err := c.Claim(wctx, client.ClaimOptions{Worker: fmt.Sprintf("%s-%d", worker, i), Kinds: []string{o.kind}, Lease: o.lease, Wait: 30 * time.Second})
				if err != nil || claim == nil {
					continue
				}
				claimed <- int(claim.Job.GetPayload().GetFields()["seq"].GetNumberValue())
				_, _ = claim.Complete(ctx, client.CompleteOptions{})
			}
		}()
	}
	var enqueueLat []time.Duration
	for seq := range o.latency {
		payload, _ := structpb.NewStruct(map[string]any{"seq": seq})
		sent[seq] = time.Now()
		if _, err := c.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: o.kind, Payload: payload}); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		select {
		case got := <-claimed:
			enqueueLat = append(enqueueLat, time.Since(sent[got]))
		case <-time.After(30 * time.Second):
			return fmt.Errorf("job %d was not claimed within 30s", seq)
		}
	}
	stop()
	waiting.Wait()
	fmt.Fprintf(g.stdout, "enqueue→claim:    %s (workers waiting)\n", percentiles(enqueueLat))
	return nil
}
