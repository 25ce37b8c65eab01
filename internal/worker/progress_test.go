package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
	"github.com/ag-coord/ag/internal/worker"
)

// The claims of these tests last a minute, so the worker's own heartbeats come every 20 s: any
// progress the server has sooner came with the heartbeats sent for progress.
const progressLease = time.Minute

// heartbeatCounter counts the HeartbeatJob calls that go through it.
type heartbeatCounter struct {
	n    atomic.Int64
	next http.RoundTripper
}

func (c *heartbeatCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/HeartbeatJob") {
		c.n.Add(1)
	}
	return c.next.RoundTrip(r)
}

type progressEnv struct {
	srv        *agtest.Server
	heartbeats *heartbeatCounter
	cancel     context.CancelFunc
	done       chan struct{}
}

// startProgressWorker runs a worker of the kind test.progress with handler until t ends.
func startProgressWorker(t *testing.T, handler worker.Handler) *progressEnv {
	t.Helper()
	e := &progressEnv{srv: agtest.Start(t, agtest.Options{}), heartbeats: &heartbeatCounter{next: http.DefaultTransport}, done: make(chan struct{})}
	c := e.srv.Principal(t, "w", agwpv1.Role_ROLE_WORKER, client.WithHTTPClient(&http.Client{Transport: e.heartbeats}))
	w, err := worker.New(worker.Config{Client: c, Label: "w1", Handlers: map[string]worker.Handler{"test.progress": handler},
		Lease: progressLease, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var ctx context.Context
	ctx, e.cancel = context.WithCancel(context.Background())
	var runErr error
	go func() {
		defer close(e.done)
		runErr = w.Run(ctx)
	}()
	t.Cleanup(func() {
		e.cancel()
		<-e.done
		// A worker stopped by its context answers nil: anything else went wrong on the way.
		if runErr != nil {
			t.Errorf("the worker's Run: %v", runErr)
		}
	})
	return e
}

func (e *progressEnv) enqueue(t *testing.T) string {
	t.Helper()
	res, err := e.srv.Admin.Jobs.EnqueueJob(context.Background(), &agwpv1.EnqueueJobRequest{Kind: "test.progress"})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetJob().GetId()
}

// waitJob waits up to 15 s, less than the claim's own heartbeat period, for the job to satisfy
// ok, and answers it.
func (e *progressEnv) waitJob(t *testing.T, id, what string, ok func(*agwpv1.Job) bool) *agwpv1.Job {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		res, err := e.srv.Admin.Jobs.GetJob(context.Background(), &agwpv1.GetJobRequest{JobId: id})
		if err != nil {
			t.Fatal(err)
		}
		if ok(res.GetJob()) {
			return res.GetJob()
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited for the job %s: it is %s with progress %q", what, res.GetJob().GetState(), res.GetJob().GetProgress())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func claimedWith(progress string) func(*agwpv1.Job) bool {
	return func(j *agwpv1.Job) bool {
		return j.GetState() == agwpv1.JobState_JOB_STATE_CLAIMED && j.GetProgress() == progress
	}
}

// TestProgressReachesTheServerAsItIsWritten ensures each progress line of a running job reaches
// the server while the job runs, in order, without waiting for the claim's heartbeat.
func TestProgressReachesTheServerAsItIsWritten(t *testing.T) {
	t.Parallel()
	step := make(chan struct{})
	e := startProgressWorker(t, func(ctx context.Context, job *worker.Job) (worker.Outcome, error) {
		for i := 1; i <= 3; i++ {
			job.Progress(fmt.Sprintf("line %d", i))
			select {
			case <-step:
			case <-ctx.Done():
				return worker.Outcome{}, context.Cause(ctx)
			}
		}
		return worker.Outcome{Output: "done\n"}, nil
	})
	id := e.enqueue(t)
	for i := 1; i <= 3; i++ {
		start := time.Now()
		e.waitJob(t, id, fmt.Sprintf("to show line %d", i), claimedWith(fmt.Sprintf("line %d", i)))
		t.Logf("line %d reached the server in %v", i, time.Since(start).Round(time.Millisecond))
		step <- struct{}{}
	}
	e.waitJob(t, id, "to complete", func(j *agwpv1.Job) bool { return j.GetState() == agwpv1.JobState_JOB_STATE_COMPLETED })
}

// TestProgressIsPaced ensures a job that writes many lines costs at most a heartbeat a second,
// that its last line still arrives, and that a quiet job costs no heartbeat for progress.
func TestProgressIsPaced(t *testing.T) {
	t.Parallel()
	const lines = 150
	wroteIn := make(chan time.Duration, 1)
	release := make(chan struct{})
	e := startProgressWorker(t, func(ctx context.Context, job *worker.Job) (worker.Outcome, error) {
		start := time.Now()
		for i := 1; i <= lines; i++ {
			job.Progress(fmt.Sprintf("line %d", i))
			time.Sleep(5 * time.Millisecond)
		}
		wroteIn <- time.Since(start)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return worker.Outcome{}, nil
	})
	id := e.enqueue(t)
	e.waitJob(t, id, "to show the last line", claimedWith(fmt.Sprintf("line %d", lines)))
	wrote := <-wroteIn
	sent := e.heartbeats.n.Load()
	// One at once, then at most one per second while the lines came, and one for the last.
	if limit := 2 + int64(wrote/time.Second); sent < 1 || sent > limit {
		t.Errorf("%d lines written in %v went in %d heartbeats, want 1 to %d", lines, wrote.Round(time.Millisecond), sent, limit)
	}
	time.Sleep(1500 * time.Millisecond) // quiet: no new line
	if n := e.heartbeats.n.Load(); n != sent {
		t.Errorf("a quiet job sent %d heartbeats after its last line", n-sent)
	}
	close(release)
	e.waitJob(t, id, "to complete", func(j *agwpv1.Job) bool { return j.GetState() == agwpv1.JobState_JOB_STATE_COMPLETED })
}

// TestProgressHeartbeatSeesACancellation ensures a job that writes output learns of a requested
// cancellation from the heartbeats of its progress, without waiting for the claim's own.
func TestProgressHeartbeatSeesACancellation(t *testing.T) {
	t.Parallel()
	e := startProgressWorker(t, func(ctx context.Context, job *worker.Job) (worker.Outcome, error) {
		for i := 1; ; i++ {
			job.Progress(fmt.Sprintf("line %d", i))
			select {
			case <-ctx.Done():
				return worker.Outcome{}, context.Cause(ctx)
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	id := e.enqueue(t)
	e.waitJob(t, id, "to show progress", func(j *agwpv1.Job) bool { return strings.HasPrefix(j.GetProgress(), "line ") })
	if _, err := e.srv.Admin.Jobs.CancelJob(context.Background(), &agwpv1.CancelJobRequest{JobId: id}); err != nil {
		t.Fatal(err)
	}
	e.waitJob(t, id, "to be cancelled", func(j *agwpv1.Job) bool { return j.GetState() == agwpv1.JobState_JOB_STATE_CANCELLED })
}

// TestFollowedOutputReachesTheServerWhileTheJobRuns ensures that a handler that follows its
// output has each heartbeat for progress carry the output so far, so the job's output grows on
// the server while the job runs; the completion's output replaces it.
func TestFollowedOutputReachesTheServerWhileTheJobRuns(t *testing.T) {
	t.Parallel()
	step := make(chan struct{})
	e := startProgressWorker(t, func(ctx context.Context, job *worker.Job) (worker.Outcome, error) {
		var log atomic.Value
		log.Store("")
		job.FollowOutput(func() string { return log.Load().(string) })
		for i := 1; i <= 2; i++ {
			log.Store(log.Load().(string) + fmt.Sprintf("step %d\n", i))
			job.Progress(fmt.Sprintf("step %d", i))
			select {
			case <-step:
			case <-ctx.Done():
				return worker.Outcome{}, context.Cause(ctx)
			}
		}
		return worker.Outcome{Output: "the whole log\n"}, nil
	})
	id := e.enqueue(t)
	for i, want := range []string{"step 1\n", "step 1\nstep 2\n"} {
		e.waitJob(t, id, fmt.Sprintf("to show the output %q", want), func(j *agwpv1.Job) bool {
			return j.GetState() == agwpv1.JobState_JOB_STATE_CLAIMED && j.GetOutput() == want
		})
		if i < 1 {
			step <- struct{}{}
		}
	}
	step <- struct{}{}
	e.waitJob(t, id, "to complete with its own output", func(j *agwpv1.Job) bool {
		return j.GetState() == agwpv1.JobState_JOB_STATE_COMPLETED && j.GetOutput() == "the whole log\n"
	})
}
