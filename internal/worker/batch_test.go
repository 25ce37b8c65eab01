package worker_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/agtest"
	"github.com/ag-coord/ag/internal/testutil/syncbuf"
	"github.com/ag-coord/ag/internal/worker"
)

// callCounter counts the claim and completion calls that go through it.
type callCounter struct {
	claims, completions atomic.Int64
	next                http.RoundTripper
}

func (c *callCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	switch {
	case strings.HasSuffix(r.URL.Path, "/ClaimJob"), strings.HasSuffix(r.URL.Path, "/ClaimJobs"):
		c.claims.Add(1)
	case strings.HasSuffix(r.URL.Path, "/CompleteJob"), strings.HasSuffix(r.URL.Path, "/CompleteJobs"):
		c.completions.Add(1)
	}
	return c.next.RoundTrip(r)
}

type drain struct {
	srv   *agtest.Server
	calls *callCounter
	w     *worker.Worker
	ran   atomic.Int64 // jobs the handler ran
}

func newDrain(tb testing.TB, backend string, concurrency, jobs int) *drain {
	tb.Helper()
	d := &drain{srv: agtest.Start(tb, agtest.Options{Backend: backend}), calls: &callCounter{next: http.DefaultTransport}}
	c := d.srv.Principal(tb, "w", agwpv1.Role_ROLE_WORKER, client.WithHTTPClient(&http.Client{Transport: d.calls}))
	var err error
	d.w, err = worker.New(worker.Config{Client: c, Label: "w1", Concurrency: concurrency, Lease: time.Minute, Wait: time.Second,
		Handlers: map[string]worker.Handler{"test.noop": func(context.Context, *worker.Job) (worker.Outcome, error) {
			d.ran.Add(1)
			return worker.Outcome{}, nil
		}}})
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= int64(jobs) {
				if _, _, err := d.srv.Store.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "test.noop", MaxAttempts: 3, EnqueuedBy: "admin"}); err != nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return d
}

// run works the queue until every job completed, and answers how long it took.
func (d *drain) run(tb testing.TB, jobs int) time.Duration {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	var runErr error
	go func() {
		defer close(done)
		runErr = d.w.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
		// A worker stopped by its context answers nil: anything else went wrong on the way.
		if runErr != nil {
			tb.Errorf("the worker's Run: %v", runErr)
		}
	}()
	// Counting jobs by state reads the whole table: only once the handler ran them all, so that
	// the count does not take the cores the drain is measured on.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for d.ran.Load() < int64(jobs) {
		<-tick.C
	}
	tick.Reset(5 * time.Millisecond)
	for {
		n, err := d.srv.Store.CountJobs(context.Background())
		if err != nil {
			tb.Fatal(err)
		}
		if n[store.JobCompleted] == int64(jobs) {
			return time.Since(start)
		}
		if n[store.JobFailed] > 0 {
			tb.Fatalf("jobs failed: %v", n)
		}
		<-tick.C
	}
}

// TestAWorkerOfManySlotsClaimsAndCompletesInBatches ensures that a worker with many slots
// claims for all its free slots in one call and reports completions together, without being
// told a batch size, and that every job completes exactly once.
func TestAWorkerOfManySlotsClaimsAndCompletesInBatches(t *testing.T) {
	t.Parallel()
	const jobs, slots = 640, 64
	d := newDrain(t, agtest.Backends[0], slots, jobs)
	d.run(t, jobs)
	claims, completions := d.calls.claims.Load(), d.calls.completions.Load()
	t.Logf("%d jobs: %d claim calls, %d completion calls", jobs, claims, completions)
	// One job a call would take 640 of each; the first claim alone takes 64.
	if claims > jobs/4 {
		t.Errorf("%d claim calls for %d jobs with %d slots: the worker claims one at a time", claims, jobs, slots)
	}
	if completions > jobs/8 {
		t.Errorf("%d completion calls for %d jobs: the worker does not gather its completions", completions, jobs)
	}
}

// TestCompletionsWaitForTheCallInFlight ensures that completions made while a completion call
// is in flight go together in the next call, not each in a call of its own: with the first call
// held, the fifteen jobs that end meanwhile make no call until it returns, and then one.
func TestCompletionsWaitForTheCallInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const jobs = 16
		f := newFakeJobs("test.noop", jobs)
		release := f.holdFirstCompletion()
		rest := make(chan struct{})
		f.startWorker(t, jobs, time.Minute, map[string]worker.Handler{"test.noop": func(ctx context.Context, j *worker.Job) (worker.Outcome, error) {
			if j.GetId() != "job_1" {
				select {
				case <-rest:
				case <-ctx.Done():
				}
			}
			return worker.Outcome{}, nil
		}})
		// A second on the bubble's clock is far longer than a lone completion waits for others.
		time.Sleep(time.Second)
		synctest.Wait()
		if calls := f.completionCalls(); !reflect.DeepEqual(calls, [][]string{{"job_1"}}) {
			t.Fatalf("with one job done, the completion calls are %v, want job_1's alone", calls)
		}
		close(rest)
		time.Sleep(time.Second)
		synctest.Wait()
		if calls := f.completionCalls(); len(calls) != 1 {
			t.Fatalf("%d completion calls while the first is in flight, want none: they did not wait for it (%v)", len(calls)-1, calls[1:])
		}
		release()
		synctest.Wait()
		if calls := f.completionCalls(); len(calls) != 2 || len(calls[1]) != jobs-1 {
			t.Errorf("once the first call returned, the other %d completions went in the calls %v, want one", jobs-1, calls[1:])
		}
	})
}

// BenchmarkWorkerDrain measures a worker of 1 and 64 slots working down a queue of no-op jobs:
// jobs/s, and the claim and completion calls per job.
func BenchmarkWorkerDrain(b *testing.B) {
	for _, backend := range agtest.Backends {
		for _, slots := range []int{1, 64} {
			b.Run(backend+"/"+map[int]string{1: "1-slot", 64: "64-slots"}[slots], func(b *testing.B) {
				jobs := max(b.N, 100)
				d := newDrain(b, backend, slots, jobs)
				b.ResetTimer()
				took := d.run(b, jobs)
				b.StopTimer()
				b.ReportMetric(float64(jobs)/took.Seconds(), "jobs/s")
				b.ReportMetric(float64(d.calls.claims.Load())/float64(jobs), "claim-calls/job")
				b.ReportMetric(float64(d.calls.completions.Load())/float64(jobs), "complete-calls/job")
			})
		}
	}
}

// completionsSent records the job of every completion sent, alone or in a batch.
type completionsSent struct {
	mu   sync.Mutex
	jobs []string
}

func (c *completionsSent) RoundTrip(r *http.Request) (*http.Response, error) {
	var ids []string
	switch {
	case strings.HasSuffix(r.URL.Path, "/CompleteJob"), strings.HasSuffix(r.URL.Path, "/CompleteJobs"):
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var many agwpv1.CompleteJobsRequest
		if strings.HasSuffix(r.URL.Path, "/CompleteJobs") {
			err = proto.Unmarshal(body, &many)
		} else {
			one := &agwpv1.CompleteJobRequest{}
			err = proto.Unmarshal(body, one)
			many.Completions = append(many.Completions, one)
		}
		if err != nil {
			return nil, err
		}
		for _, c := range many.GetCompletions() {
			ids = append(ids, c.GetJobId())
		}
	}
	c.mu.Lock()
	c.jobs = append(c.jobs, ids...)
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func (c *completionsSent) of(job string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, j := range c.jobs {
		if j == job {
			n++
		}
	}
	return n
}

// TestABatchOfStaleCompletionsIsRefusedAndNotRetried ensures that when a worker's claims were
// taken over while its jobs ran (their leases ran out on the server's clock, another worker
// claimed them), the completions it reports together are each refused for the lost claim,
// logged as such, and not tried again, and the jobs stay with the claims that took them over.
func TestABatchOfStaleCompletionsIsRefusedAndNotRetried(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			const jobs = 8
			ctx := context.Background()
			clk := clock.NewFake(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
			srv := agtest.Start(t, agtest.Options{Backend: backend, Clock: clk, RequireFencing: true})
			sent := &completionsSent{}
			c := srv.Principal(t, "w", agwpv1.Role_ROLE_WORKER, client.WithHTTPClient(&http.Client{Transport: sent}))
			other := srv.Principal(t, "other", agwpv1.Role_ROLE_WORKER)
			var logs syncbuf.Buffer
			started, release := make(chan struct{}, jobs), make(chan struct{})
			w, err := worker.New(worker.Config{Client: c, Label: "w1", Concurrency: jobs, Lease: time.Minute, Wait: time.Second,
				Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				Handlers: map[string]worker.Handler{"test.noop": func(context.Context, *worker.Job) (worker.Outcome, error) {
					started <- struct{}{}
					<-release
					return worker.Outcome{Output: "stale"}, nil
				}}})
			if err != nil {
				t.Fatal(err)
			}
			for range jobs {
				if _, _, err := srv.Store.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "test.noop", MaxAttempts: 3, EnqueuedBy: "admin"}); err != nil {
					t.Fatal(err)
				}
			}
			wctx, stop := context.WithCancel(ctx)
			stopped := make(chan error, 1)
			go func() { stopped <- w.Run(wctx) }()
			for range jobs {
				<-started
			}
			// The leases run out on the server's clock; another worker claims every job again.
			clk.Advance(2 * time.Minute)
			taken, err := other.Jobs.ClaimJobs(ctx, &agwpv1.ClaimJobsRequest{Worker: "w2", MaxJobs: jobs, Lease: durationpb.New(time.Hour)})
			if err != nil || len(taken.GetJobs()) != jobs {
				t.Fatalf("the other worker claimed %d jobs (%v), want %d", len(taken.GetJobs()), err, jobs)
			}
			close(release)
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for len(logs.Lines(`msg="completed refused: the claim was lost"`)) < jobs {
				<-tick.C
			}
			stop()
			if err := <-stopped; err != nil {
				t.Fatal(err)
			}
			if lines := logs.Lines(`msg=completed `); len(lines) > 0 {
				t.Errorf("the worker logged stale completions as done: %q", lines)
			}
			for _, j := range taken.GetJobs() {
				if n := sent.of(j.GetId()); n != 1 {
					t.Errorf("job %s: its stale completion was sent %d times, want once: a refusal is not retried", j.GetId(), n)
				}
				got, err := srv.Admin.Jobs.GetJob(ctx, &agwpv1.GetJobRequest{JobId: j.GetId()})
				if err != nil {
					t.Fatal(err)
				}
				if g := got.GetJob(); g.GetState() != agwpv1.JobState_JOB_STATE_CLAIMED || g.GetClaimedBy() != "other|w2" || g.GetAttempts() != 2 || g.GetOutput() != "" {
					t.Errorf("job %s is %v by %q, claim %d, output %q; want still claimed by other|w2 under claim 2, no output",
						j.GetId(), g.GetState(), g.GetClaimedBy(), g.GetAttempts(), g.GetOutput())
				}
			}
		})
	}
}
