package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestKeepAliveEveryHearsACancellationAtItsOwnPace ensures that a claim heartbeaten more often
// than a third of its lease learns of a requested cancellation at its own pace: with a lease of
// a minute, KeepAlive would hear of it only after 20 s.
func TestKeepAliveEveryHearsACancellationAtItsOwnPace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := agtest.Start(t, agtest.Options{})
	worker := srv.Principal(t, "ci", agwpv1.Role_ROLE_WORKER)
	enq, err := srv.Admin.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "build"})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := worker.Claim(ctx, client.ClaimOptions{Worker: "w1", Lease: time.Minute})
	if err != nil || claim == nil {
		t.Fatalf("Claim = %v, %v; want the job", claim, err)
	}
	alive, stop := claim.KeepAliveEvery(ctx, 50*time.Millisecond)
	defer stop()
	if _, err := srv.Admin.Jobs.CancelJob(ctx, &agwpv1.CancelJobRequest{JobId: enq.GetJob().GetId()}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-alive.Done():
		if cause := context.Cause(alive); !errors.Is(cause, client.ErrCancelRequested) {
			t.Fatalf("the claim's context ended with %v, want ErrCancelRequested", cause)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the claim did not hear of the cancellation within 15 s, heartbeating every 50 ms")
	}
}

// slowHeartbeats is a job server whose heartbeats take longer than a fast pace: a busy store.
type slowHeartbeats struct {
	agwpv1connect.UnimplementedJobServiceHandler
	delay    time.Duration
	answered atomic.Int32
}

func (s *slowHeartbeats) ClaimJob(context.Context, *agwpv1.ClaimJobRequest) (*agwpv1.ClaimJobResponse, error) {
	return &agwpv1.ClaimJobResponse{Job: &agwpv1.Job{Id: "job_1", Kind: "validate", Attempts: 1}}, nil
}

func (s *slowHeartbeats) HeartbeatJob(ctx context.Context, _ *agwpv1.HeartbeatJobRequest) (*agwpv1.HeartbeatJobResponse, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.answered.Add(1)
	return &agwpv1.HeartbeatJobResponse{}, nil
}

// TestKeepAliveEveryWaitsForASlowServer ensures that heartbeats sent faster than a third of the
// lease still wait up to a third of the lease for their answer: a server slower than the pace
// keeps the claim alive.
func TestKeepAliveEveryWaitsForASlowServer(t *testing.T) {
	t.Parallel()
	s := &slowHeartbeats{delay: 300 * time.Millisecond}
	mux := http.NewServeMux()
	mux.Handle(agwpv1connect.NewJobServiceHandler(s))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	claim, err := client.New(srv.URL, "token").Claim(context.Background(), client.ClaimOptions{Worker: "w1", Lease: 3 * time.Second})
	if err != nil || claim == nil {
		t.Fatalf("Claim = %v, %v", claim, err)
	}
	alive, stop := claim.KeepAliveEvery(context.Background(), 50*time.Millisecond)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for s.answered.Load() < 2 && time.Now().Before(deadline) && alive.Err() == nil {
		<-tick.C
	}
	stop()
	if n := s.answered.Load(); n < 2 {
		t.Fatalf("%d heartbeats of a server answering in 300 ms were answered before the claim gave up, heartbeating every 50 ms; want them waited for", n)
	}
}
