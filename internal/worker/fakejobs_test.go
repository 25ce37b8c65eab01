package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
	"github.com/ag-coord/ag/internal/worker"
)

// fakeJobs is a job server in memory, for the tests that run a worker in a synctest bubble.
// There the worker's timers (its heartbeats, the pace of its progress, the moment a completion
// waits for others) run on the bubble's fake clock, and synctest.Wait returns once the worker
// has done all it would do without more time passing: a call it has not made then is a call it
// would not make, which a test over a real server, whose calls cross the network and leave the
// bubble, could only hope for after sleeping.
type fakeJobs struct {
	agwpv1connect.UnimplementedJobServiceHandler

	mu          sync.Mutex
	queued      []*agwpv1.Job
	completions [][]string    // the jobs of each completion call, in the order the calls came
	progress    []string      // the progress line of each heartbeat, "" for the claim's own
	hold        chan struct{} // the first completion call waits until it is closed; nil: none waits
	release     func()        // closes hold, once
}

// newFakeJobs answers a server with jobs queued jobs of kind, job_1 to job_<jobs>.
func newFakeJobs(kind string, jobs int) *fakeJobs {
	f := &fakeJobs{}
	for i := 1; i <= jobs; i++ {
		f.queued = append(f.queued, &agwpv1.Job{Id: fmt.Sprintf("job_%d", i), Kind: kind, Attempts: 1,
			State: agwpv1.JobState_JOB_STATE_CLAIMED})
	}
	return f
}

// holdFirstCompletion has the first completion call wait until release is called, or the
// worker is stopped: it stops only once its calls have returned.
func (f *fakeJobs) holdFirstCompletion() (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hold := make(chan struct{})
	f.hold = hold
	f.release = sync.OnceFunc(func() { close(hold) })
	return f.release
}

// startWorker runs a worker of slots slots with handlers against f until t ends. Call it in
// the bubble: the worker's goroutines must be the bubble's.
func (f *fakeJobs) startWorker(t *testing.T, slots int, lease time.Duration, handlers map[string]worker.Handler) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(agwpv1connect.NewJobServiceHandler(f))
	c := client.New("http://ag.invalid", "agt_fake", client.WithRetries(0, 0),
		client.WithHTTPClient(&http.Client{Transport: inMemory{mux}}))
	w, err := worker.New(worker.Config{Client: c, Label: "w1", Concurrency: slots, Lease: lease, Wait: time.Second, Handlers: handlers})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		f.mu.Lock()
		release := f.release
		f.mu.Unlock()
		if release != nil {
			release()
		}
		cancel()
		// A worker stopped by its context answers nil: anything else went wrong on the way.
		if err := <-done; err != nil {
			t.Errorf("the worker's Run: %v", err)
		}
	})
}

// completionCalls answers the jobs of each completion call so far.
func (f *fakeJobs) completionCalls() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.completions)
}

// heartbeats answers the progress line of each heartbeat so far.
func (f *fakeJobs) heartbeats() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.progress)
}

func (f *fakeJobs) ClaimJobs(ctx context.Context, req *agwpv1.ClaimJobsRequest) (*agwpv1.ClaimJobsResponse, error) {
	f.mu.Lock()
	n := min(len(f.queued), int(req.GetMaxJobs()))
	jobs := f.queued[:n:n]
	f.queued = f.queued[n:]
	f.mu.Unlock()
	if n == 0 {
		// Nothing is ever enqueued after the test's jobs: the long poll runs its course.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(req.GetWait().AsDuration()):
		}
	}
	return &agwpv1.ClaimJobsResponse{Jobs: jobs}, nil
}

func (f *fakeJobs) HeartbeatJob(_ context.Context, req *agwpv1.HeartbeatJobRequest) (*agwpv1.HeartbeatJobResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.progress = append(f.progress, req.GetProgress())
	return &agwpv1.HeartbeatJobResponse{}, nil
}

func (f *fakeJobs) CompleteJob(_ context.Context, req *agwpv1.CompleteJobRequest) (*agwpv1.CompleteJobResponse, error) {
	f.completed([]string{req.GetJobId()})
	return &agwpv1.CompleteJobResponse{Job: &agwpv1.Job{Id: req.GetJobId(), State: agwpv1.JobState_JOB_STATE_COMPLETED}}, nil
}

func (f *fakeJobs) CompleteJobs(_ context.Context, req *agwpv1.CompleteJobsRequest) (*agwpv1.CompleteJobsResponse, error) {
	res := &agwpv1.CompleteJobsResponse{}
	var ids []string
	for _, c := range req.GetCompletions() {
		ids = append(ids, c.GetJobId())
		res.Results = append(res.Results, &agwpv1.CompleteJobsResult{})
	}
	f.completed(ids)
	return res, nil
}

// completed records a completion call of the jobs ids, and holds it when it is the one to hold.
func (f *fakeJobs) completed(ids []string) {
	f.mu.Lock()
	f.completions = append(f.completions, ids)
	hold := f.hold
	f.hold = nil
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
}

// inMemory serves a client's requests with a handler in the calling goroutine: no connection,
// no goroutine of net/http's that would outlive the bubble or block it for good.
type inMemory struct{ http.Handler }

func (m inMemory) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, r)
	return rec.Result(), nil
}
