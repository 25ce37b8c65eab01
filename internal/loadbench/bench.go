package loadbench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// Options says how hard to drive the server. Worker prefixes the names the workers claim under.
type Options struct {
	Jobs        int
	Workers     int
	Enqueuers   int
	LatencyJobs int
	Batch       int
	Kind        string
	Lease       time.Duration
	Worker      string
}

// Enqueued is what Enqueue did: the ids of the first and the last job, and when it began.
type Enqueued struct {
	First, Last string
	Start       time.Time
}

// Drained is what Drain measured.
type Drained struct {
	Done    int64
	Start   time.Time
	Elapsed time.Duration   // from the start to the last completion
	Latency []time.Duration // each job's claim→complete
}

// DrainedOutside is what TimeOutsideDrain saw: when the first job was seen taken, when all were
// seen finished, and the server's jobs by state then.
type DrainedOutside struct {
	Start, DoneAt time.Time
	Counts        map[agwpv1.JobState]uint64
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

// JobCounts answers the server's jobs by state.
func JobCounts(ctx context.Context, c *client.Client) (map[agwpv1.JobState]uint64, error) {
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

// TimeOutsideDrain times the drain of the jobs Enqueue enqueued by workers outside: from the
// first look that finds the first job taken to the first that finds them all finished. It
// looks at the first and the last job (the first and the last in claim order) every 5 ms, a
// lookup by id, and counts the jobs by state (CountJobs, which reads the whole table: not
// something to do every few milliseconds while measuring) only once the last one is finished,
// and then every 50 ms until they all are. before holds the counts before the enqueue.
func TimeOutsideDrain(ctx context.Context, c *client.Client, jobs int, first, last string, before map[agwpv1.JobState]uint64) (DrainedOutside, error) {
	target := finished(before) + uint64(jobs)
	state := func(id string) (agwpv1.JobState, error) {
		res, err := c.Jobs.GetJob(ctx, &agwpv1.GetJobRequest{JobId: id})
		return res.GetJob().GetState(), err
	}
	var d DrainedOutside
	for d.Start.IsZero() {
		st, err := state(first)
		if err != nil {
			return d, fmt.Errorf("get the first job: %w", err)
		}
		if st != agwpv1.JobState_JOB_STATE_QUEUED {
			d.Start = time.Now()
		} else if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return d, err
		}
	}
	for {
		st, err := state(last)
		if err != nil {
			return d, fmt.Errorf("get the last job: %w", err)
		}
		if st != agwpv1.JobState_JOB_STATE_QUEUED && st != agwpv1.JobState_JOB_STATE_CLAIMED {
			break
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return d, err
		}
	}
	for {
		d.DoneAt = time.Now()
		var err error
		if d.Counts, err = JobCounts(ctx, c); err != nil {
			return d, fmt.Errorf("count jobs: %w", err)
		}
		if finished(d.Counts) >= target {
			return d, nil
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return d, err
		}
	}
}

// settleQuiet is how long the audit checkpoint must stay the same to count as settled: longer
// than the server's longest wait between seals (one second) when nothing wakes its sealer.
const settleQuiet = 1500 * time.Millisecond

// Settled waits until the server's audit checkpoint stops growing, and answers its size and
// when it last grew (when it was first read, if it never did).
func Settled(ctx context.Context, c *client.Client) (uint64, time.Time, error) {
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

// Enqueue enqueues o.Jobs jobs, the first and the last on their own, so that workers outside
// can be timed by them.
func Enqueue(ctx context.Context, c *client.Client, o Options) (Enqueued, error) {
	e := Enqueued{Start: time.Now()}
	enqueue := func() (string, error) {
		res, err := c.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: o.Kind})
		if err != nil {
			return "", fmt.Errorf("enqueue: %w", err)
		}
		return res.GetJob().GetId(), nil
	}
	var err error
	if e.First, err = enqueue(); err != nil {
		return Enqueued{}, err
	}
	e.Last = e.First
	var next atomic.Int64
	next.Store(1)
	var wg sync.WaitGroup
	errs := make(chan error, o.Enqueuers)
	for range o.Enqueuers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) < int64(o.Jobs) {
				if _, err := enqueue(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return Enqueued{}, <-errs
	}
	if o.Jobs > 1 {
		if e.Last, err = enqueue(); err != nil {
			return Enqueued{}, err
		}
	}
	return e, nil
}

// Drain claims and completes o.Jobs jobs with o.Workers workers, timing the drain.
func Drain(ctx context.Context, c *client.Client, o Options) (Drained, error) {
	var wg sync.WaitGroup
	errs := make(chan error, o.Workers)
	var done atomic.Int64
	var mu sync.Mutex
	var completeLat []time.Duration
	var elapsed time.Duration
	// The drain ends with the last completion. Workers that found the queue empty meanwhile
	// are long-polling; they are called off then, and their wait is not the drain's.
	drain, drained := context.WithCancel(ctx)
	defer drained()
	start := time.Now()
	for i := range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			defer func() { mu.Lock(); completeLat = append(completeLat, mine...); mu.Unlock() }()
			opts := client.ClaimOptions{Worker: fmt.Sprintf("%s-%d", o.Worker, i), Kinds: []string{o.Kind}, Lease: o.Lease, Wait: time.Second}
			for done.Load() < int64(o.Jobs) {
				n, lat, err := claimAndComplete(drain, c, opts, o.Batch)
				if err != nil {
					if drain.Err() == nil {
						errs <- err
					}
					return
				}
				mine = append(mine, lat...)
				if now := done.Add(int64(n)); now >= int64(o.Jobs) && now-int64(n) < int64(o.Jobs) {
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
		return Drained{}, <-errs
	}
	return Drained{Done: done.Load(), Start: start, Elapsed: elapsed, Latency: completeLat}, nil
}

// Latency measures enqueue→claim of o.LatencyJobs jobs with o.Workers workers already waiting.
func Latency(ctx context.Context, c *client.Client, o Options) ([]time.Duration, error) {
	// Each job is enqueued once the one before was claimed, so that a waiting worker takes it.
	sent := make([]time.Time, o.LatencyJobs)
	claimed := make(chan int, o.LatencyJobs)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var waiting sync.WaitGroup
	for i := range o.Workers {
		waiting.Add(1)
		go func() {
			defer waiting.Done()
			for wctx.Err() == nil {
				claim, err := c.Claim(wctx, client.ClaimOptions{Worker: fmt.Sprintf("%s-%d", o.Worker, i), Kinds: []string{o.Kind}, Lease: o.Lease, Wait: 30 * time.Second})
				if err != nil || claim == nil {
					continue
				}
				claimed <- int(claim.Job.GetPayload().GetFields()["seq"].GetNumberValue())
				_, _ = claim.Complete(ctx, client.CompleteOptions{})
			}
		}()
	}
	var enqueueLat []time.Duration
	for seq := range o.LatencyJobs {
		payload, _ := structpb.NewStruct(map[string]any{"seq": seq})
		sent[seq] = time.Now()
		if _, err := c.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: o.Kind, Payload: payload}); err != nil {
			return nil, fmt.Errorf("enqueue: %w", err)
		}
		select {
		case got := <-claimed:
			enqueueLat = append(enqueueLat, time.Since(sent[got]))
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("job %d was not claimed within 30s", seq)
		}
	}
	stop()
	waiting.Wait()
	return enqueueLat, nil
}
