package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
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
