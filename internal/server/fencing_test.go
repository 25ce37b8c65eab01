package server_test

import (
	"context"
	"math"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

func wantCode(t *testing.T, what string, err error, code connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded, want %s", what, code)
	}
	if got := connect.CodeOf(err); got != code {
		t.Fatalf("%s: code %s (%v), want %s", what, got, err, code)
	}
}

func getJob(t *testing.T, c *client.Client, id string) *agwpv1.Job {
	t.Helper()
	res, err := c.Jobs.GetJob(context.Background(), &agwpv1.GetJobRequest{JobId: id})
	if err != nil {
		t.Fatalf("get job %s: %v", id, err)
	}
	return res.GetJob()
}

func enqueue(t *testing.T, c *client.Client, kind string) *agwpv1.Job {
	t.Helper()
	res, err := c.Jobs.EnqueueJob(context.Background(), &agwpv1.EnqueueJobRequest{Kind: kind})
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return res.GetJob()
}

func claim(t *testing.T, c *client.Client, worker string, lease time.Duration) *agwpv1.Job {
	t.Helper()
	res, err := c.Jobs.ClaimJob(context.Background(), &agwpv1.ClaimJobRequest{Worker: worker, Lease: durationpb.New(lease)})
	if err != nil {
		t.Fatalf("claim as %s: %v", worker, err)
	}
	if res.GetJob() == nil {
		t.Fatalf("claim as %s: no job", worker)
	}
	return res.GetJob()
}

// Test_a_stale_claim_of_the_same_worker_is_fenced_off ensures that when one worker name claims a
// job twice (its first lease ran out), the first claim's number is refused on heartbeat, fail
// and complete and changes nothing, while the current number and no number are accepted
// (ADR-0012). It speaks Connect JSON over HTTP to a real server, on both stores.
func Test_a_stale_claim_of_the_same_worker_is_fenced_off(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
			srv := agtest.Start(t, agtest.Options{Backend: backend, Clock: clk})
			w := srv.Principal(t, "builder", agwpv1.Role_ROLE_WORKER, client.WithJSON())

			job := enqueue(t, srv.Admin, "ag.noop")
			first := claim(t, w, "w1", 10*time.Second)
			if first.GetId() != job.GetId() || first.GetAttempts() != 1 || first.GetClaimedBy() != "builder|w1" {
				t.Fatalf("first claim = %s attempts %d by %q, want %s attempts 1 by builder|w1", first.GetId(), first.GetAttempts(), first.GetClaimedBy(), job.GetId())
			}
			clk.Advance(11 * time.Second)
			second := claim(t, w, "w1", 10*time.Second)
			if second.GetId() != job.GetId() || second.GetAttempts() != 2 {
				t.Fatalf("second claim = %s attempts %d, want %s attempts 2", second.GetId(), second.GetAttempts(), job.GetId())
			}
			before := getJob(t, srv.Admin, job.GetId())

			_, err := w.Jobs.HeartbeatJob(ctx, &agwpv1.HeartbeatJobRequest{JobId: job.GetId(), Worker: "w1", FencingToken: 1, Progress: "stale"})
			wantCode(t, "heartbeat with claim 1", err, connect.CodeNotFound)
			_, err = w.Jobs.FailJob(ctx, &agwpv1.FailJobRequest{JobId: job.GetId(), Worker: "w1", FencingToken: 1, Error: "stale"})
			wantCode(t, "fail with claim 1", err, connect.CodeNotFound)
			_, err = w.Jobs.CompleteJob(ctx, &agwpv1.CompleteJobRequest{JobId: job.GetId(), Worker: "w1", FencingToken: 1, Output: "stale"})
			wantCode(t, "complete with claim 1", err, connect.CodeFailedPrecondition)
			// 2^32+2 is claim 2, the current one, to a server that casts instead of checking:
			// each method must refuse it as out of range (ADR-0012), not take it as claim 2.
			const wrapsToCurrent = math.MaxUint32 + 1 + 2
			_, err = w.Jobs.HeartbeatJob(ctx, &agwpv1.HeartbeatJobRequest{JobId: job.GetId(), Worker: "w1", FencingToken: wrapsToCurrent, Progress: "wrapped"})
			wantCode(t, "heartbeat with a token above u32", err, connect.CodeInvalidArgument)
			_, err = w.Jobs.FailJob(ctx, &agwpv1.FailJobRequest{JobId: job.GetId(), Worker: "w1", FencingToken: wrapsToCurrent, Error: "wrapped"})
			wantCode(t, "fail with a token above u32", err, connect.CodeInvalidArgument)
			_, err = w.Jobs.CompleteJob(ctx, &agwpv1.CompleteJobRequest{JobId: job.GetId(), Worker: "w1", FencingToken: wrapsToCurrent})
			wantCode(t, "complete with a token above u32", err, connect.CodeInvalidArgument)

			if after := getJob(t, srv.Admin, job.GetId()); !proto.Equal(before, after) {
				t.Fatalf("refused requests changed the job:\nbefore %v\nafter  %v", before, after)
			}

			clk.Advance(time.Second)
			hb, err := w.Jobs.HeartbeatJob(ctx, &agwpv1.HeartbeatJobRequest{JobId: job.GetId(), Worker: "w1", FencingToken: 2, Progress: "current"})
			if err != nil {
				t.Fatalf("heartbeat with claim 2: %v", err)
			}
			if want := clk.Now().Add(10 * time.Second); !hb.GetLeaseExpiresAt().AsTime().Equal(want) {
				t.Fatalf("heartbeat lease until %v, want %v", hb.GetLeaseExpiresAt().AsTime(), want)
			}
			if _, err := w.Jobs.HeartbeatJob(ctx, &agwpv1.HeartbeatJobRequest{JobId: job.GetId(), Worker: "w1"}); err != nil {
				t.Fatalf("heartbeat without a number: %v", err)
			}
			done, err := w.Jobs.CompleteJob(ctx, &agwpv1.CompleteJobRequest{JobId: job.GetId(), Worker: "w1", FencingToken: 2, Output: "current"})
			if err != nil {
				t.Fatalf("complete with claim 2: %v", err)
			}
			if j := done.GetJob(); j.GetState() != agwpv1.JobState_JOB_STATE_COMPLETED || j.GetOutput() != "current" || j.GetAttempts() != 2 {
				t.Fatalf("completed job = %v", j)
			}

			// No number keeps the old check by name: accepted for the current claimant.
			job2 := enqueue(t, srv.Admin, "ag.noop")
			claim(t, w, "w1", 10*time.Second)
			res, err := w.Jobs.CompleteJob(ctx, &agwpv1.CompleteJobRequest{JobId: job2.GetId(), Worker: "w1"})
			if err != nil {
				t.Fatalf("complete without a number: %v", err)
			}
			if res.GetJob().GetState() != agwpv1.JobState_JOB_STATE_COMPLETED {
				t.Fatalf("job2 state %v, want completed", res.GetJob().GetState())
			}
		})
	}
}

// TestRequireFencing ensures --require-fencing refuses reports without a claim number and
// accepts them with one.
func TestRequireFencing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := agtest.Start(t, agtest.Options{RequireFencing: true})
	w := srv.Principal(t, "builder", agwpv1.Role_ROLE_WORKER)
	job := enqueue(t, srv.Admin, "ag.noop")
	claimed := claim(t, w, "w1", time.Minute)

	_, err := w.Jobs.HeartbeatJob(ctx, &agwpv1.HeartbeatJobRequest{JobId: job.GetId(), Worker: "w1"})
	wantCode(t, "heartbeat without a number", err, connect.CodeFailedPrecondition)
	_, err = w.Jobs.FailJob(ctx, &agwpv1.FailJobRequest{JobId: job.GetId(), Worker: "w1"})
	wantCode(t, "fail without a number", err, connect.CodeFailedPrecondition)
	_, err = w.Jobs.CompleteJob(ctx, &agwpv1.CompleteJobRequest{JobId: job.GetId(), Worker: "w1"})
	wantCode(t, "complete without a number", err, connect.CodeFailedPrecondition)
	if j := getJob(t, srv.Admin, job.GetId()); j.GetState() != agwpv1.JobState_JOB_STATE_CLAIMED {
		t.Fatalf("job is %v after refused reports, want still claimed", j.GetState())
	}
	if _, err := w.Jobs.CompleteJob(ctx, &agwpv1.CompleteJobRequest{JobId: job.GetId(), Worker: "w1", FencingToken: uint64(claimed.GetAttempts())}); err != nil {
		t.Fatalf("complete with the number: %v", err)
	}
}
