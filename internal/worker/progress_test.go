package worker_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
	"github.com/ag-coord/ag/internal/worker"
)

// The claims of these tests last a minute, so the worker's own heartbeats come every 20 s: any
// progress the server has sooner came with the heartbeats sent for progress.
const progressLease = time.Minute

type progressEnv struct {
	srv    *agtest.Server
	cancel context.CancelFunc
	done   chan struct{}
}

// startProgressWorker runs a worker of the kind test.progress with handler until t ends.
func startProgressWorker(t *testing.T, handler worker.Handler) *progressEnv {
	t.Helper()
	e := &progressEnv{srv: agtest.Start(t, agtest.Options{}), done: make(chan struct{})}
	c := e.srv.Principal(t, "w", agwpv1.Role_ROLE_WORKER)
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
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
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
		<-tick.C
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
// that its last line still arrives, and that a quiet job costs no heartbeat for progress. On the
// bubble's clock, the quiet is many times the pace, and synctest.Wait returns once every heartbeat
// the worker would send by then was sent: none coming is none sent, not one late.
func TestProgressIsPaced(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const lines = 150
		wroteIn := make(chan time.Duration, 1)
		release := make(chan struct{})
		f := newFakeJobs("test.progress", 1)
		f.startWorker(t, 1, progressLease, map[string]worker.Handler{"test.progress": func(ctx context.Context, job *worker.Job) (worker.Outcome, error) {
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
		}})
		wrote := <-wroteIn
		// The last line goes within the pace of a second.
		time.Sleep(time.Second)
		synctest.Wait()
		sent := f.heartbeats()
		if len(sent) == 0 || sent[len(sent)-1] != fmt.Sprintf("line %d", lines) {
			t.Fatalf("a second after the last of %d lines, the heartbeats carried %q, want the last line last", lines, sent)
		}
		// One at once, then at most one per second while the lines came, and one for the last.
		if limit := 2 + int(wrote/time.Second); len(sent) > limit {
			t.Errorf("%d lines written in %v went in %d heartbeats, want 1 to %d", lines, wrote, len(sent), limit)
		}
		// Quiet: no new line, for fifteen times the pace and short of the claim's own heartbeat.
		time.Sleep(15 * time.Second)
		synctest.Wait()
		if n := len(f.heartbeats()); n != len(sent) {
			t.Errorf("a quiet job sent %d heartbeats after its last line", n-len(sent))
		}
		// The claim's own heartbeat, at a third of its lease, carries no line: the clock that
		// brought nothing for progress does bring it.
		time.Sleep(progressLease / 3)
		synctest.Wait()
		if got := f.heartbeats()[len(sent):]; !reflect.DeepEqual(got, []string{""}) {
			t.Errorf("after a third of the lease, the quiet job sent the heartbeats %q, want the claim's own alone", got)
		}
		close(release)
		synctest.Wait()
		if calls := f.completionCalls(); !reflect.DeepEqual(calls, [][]string{{"job_1"}}) {
			t.Errorf("the job's completion calls are %v, want job_1's", calls)
		}
	})
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
