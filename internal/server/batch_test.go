package server_test

import (
	"context"
	"strings"
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

// TestClaimJobsAndCompleteJobs ensures a worker claims several jobs in one call, each with its
// own claim number, and completes them in one call where each completion is checked on its own:
// a stale claim number, an unknown job and a completion without the claim number the server
// requires are refused with CompleteJob's codes and change nothing, while the others complete.
// It speaks Connect JSON over HTTP to a real server, on both stores.
func TestClaimJobsAndCompleteJobs(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
			srv := agtest.Start(t, agtest.Options{Backend: backend, Clock: clk, RequireFencing: true})
			w := srv.Principal(t, "builder", agwpv1.Role_ROLE_WORKER, client.WithJSON())

			var ids []string
			for range 5 {
				ids = append(ids, enqueue(t, srv.Admin, "ag.noop").GetId())
			}
			// The first job's claim expires and is claimed again by the batch: claim number 2.
			claim(t, w, "w1", 10*time.Second)
			clk.Advance(11 * time.Second)

			res, err := w.Jobs.ClaimJobs(ctx, &agwpv1.ClaimJobsRequest{Worker: "w1", MaxJobs: 4, Lease: durationpb.New(time.Minute)})
			if err != nil {
				t.Fatalf("claim jobs: %v", err)
			}
			got := res.GetJobs()
			if len(got) != 4 {
				t.Fatalf("claim jobs answered %d jobs, want 4", len(got))
			}
			for i, j := range got {
				wantAttempts := uint32(1)
				if i == 0 {
					wantAttempts = 2
				}
				if j.GetId() != ids[i] || j.GetState() != agwpv1.JobState_JOB_STATE_CLAIMED || j.GetClaimedBy() != "builder|w1" || j.GetAttempts() != wantAttempts {
					t.Fatalf("claimed job %d = %s %v by %q attempts %d, want %s claimed by builder|w1 attempts %d",
						i, j.GetId(), j.GetState(), j.GetClaimedBy(), j.GetAttempts(), ids[i], wantAttempts)
				}
				if want := clk.Now().Add(time.Minute); !j.GetLeaseExpiresAt().AsTime().Equal(want) {
					t.Fatalf("job %d lease until %v, want %v", i, j.GetLeaseExpiresAt().AsTime(), want)
				}
			}
			if j := getJob(t, srv.Admin, ids[4]); j.GetState() != agwpv1.JobState_JOB_STATE_QUEUED {
				t.Fatalf("the fifth job is %v, want still queued", j.GetState())
			}
			before := map[string]*agwpv1.Job{ids[0]: getJob(t, srv.Admin, ids[0]), ids[2]: getJob(t, srv.Admin, ids[2])}

			done, err := w.Jobs.CompleteJobs(ctx, &agwpv1.CompleteJobsRequest{Completions: []*agwpv1.CompleteJobRequest{
				{JobId: ids[0], Worker: "w1", FencingToken: 1, Output: "stale"},
				{JobId: ids[1], Worker: "w1", FencingToken: 1, Output: "one"},
				{JobId: ids[2], Worker: "w1", Output: "no number"},
				{JobId: "job_unknown", Worker: "w1", FencingToken: 1},
				{JobId: ids[3], Worker: "w1", FencingToken: 1, Output: "three"},
			}})
			if err != nil {
				t.Fatalf("complete jobs: %v", err)
			}
			rs := done.GetResults()
			if len(rs) != 5 {
				t.Fatalf("complete jobs answered %d results, want 5", len(rs))
			}
			wantRefused := []struct {
				i    int
				code string
				says string
			}{{0, "failed_precondition", "claim"}, {2, "failed_precondition", "fencing_token"}, {3, "not_found", "job_unknown"}}
			for _, w := range wantRefused {
				r := rs[w.i]
				if r.GetJob() != nil || r.GetErrorCode() != w.code || !strings.Contains(r.GetErrorMessage(), w.says) {
					t.Fatalf("result %d = job %v, %q %q; want refused %s naming %q", w.i, r.GetJob(), r.GetErrorCode(), r.GetErrorMessage(), w.code, w.says)
				}
			}
			for i, id := range map[int]string{1: ids[1], 4: ids[3]} {
				j := rs[i].GetJob()
				if rs[i].GetErrorCode() != "" || j.GetId() != id || j.GetState() != agwpv1.JobState_JOB_STATE_COMPLETED {
					t.Fatalf("result %d = %v (%q %q), want job %s completed", i, j, rs[i].GetErrorCode(), rs[i].GetErrorMessage(), id)
				}
			}
			for id, b := range before {
				if after := getJob(t, srv.Admin, id); !proto.Equal(b, after) {
					t.Fatalf("a refused completion changed job %s:\nbefore %v\nafter  %v", id, b, after)
				}
			}

			// The refused ones complete once they carry their current claim numbers; a second
			// completion of a completed job is refused. This call omits the completed jobs from
			// its answer: those applied answer empty results, the refused one its code.
			again, err := w.Jobs.CompleteJobs(ctx, &agwpv1.CompleteJobsRequest{OmitJobs: true, Completions: []*agwpv1.CompleteJobRequest{
				{JobId: ids[0], Worker: "w1", FencingToken: 2, Output: "zero"},
				{JobId: ids[2], Worker: "w1", FencingToken: 1, Output: "two"},
				{JobId: ids[1], Worker: "w1", FencingToken: 1},
			}})
			if err != nil {
				t.Fatalf("complete jobs again: %v", err)
			}
			for i, id := range []string{ids[0], ids[2]} {
				r := again.GetResults()[i]
				if r.GetJob() != nil || r.GetErrorCode() != "" || r.GetErrorMessage() != "" {
					t.Fatalf("second call, result %d = %v (%q %q), want an empty result", i, r.GetJob(), r.GetErrorCode(), r.GetErrorMessage())
				}
				if j := getJob(t, srv.Admin, id); j.GetState() != agwpv1.JobState_JOB_STATE_COMPLETED || j.GetOutput() == "" {
					t.Fatalf("after the second call job %s is %v with output %q, want completed with its output", id, j.GetState(), j.GetOutput())
				}
			}
			if r := again.GetResults()[2]; r.GetJob() != nil || r.GetErrorCode() != "failed_precondition" {
				t.Fatalf("completing a completed job again = %v %q, want failed_precondition", r.GetJob(), r.GetErrorCode())
			}

			// Nothing left but the fifth job: a batch answers what there is, then nothing.
			res, err = w.Jobs.ClaimJobs(ctx, &agwpv1.ClaimJobsRequest{Worker: "w1", MaxJobs: 10})
			if err != nil || len(res.GetJobs()) != 1 || res.GetJobs()[0].GetId() != ids[4] {
				t.Fatalf("claim jobs with one queued = %v, %v; want the fifth job", res.GetJobs(), err)
			}
			res, err = w.Jobs.ClaimJobs(ctx, &agwpv1.ClaimJobsRequest{Worker: "w1", MaxJobs: 10})
			if err != nil || len(res.GetJobs()) != 0 {
				t.Fatalf("claim jobs with nothing queued = %v, %v; want none", res.GetJobs(), err)
			}
		})
	}
}

// TestBatchRequestsAreRefusedWithTheField ensures malformed batches are refused as a whole
// with invalid_argument naming the field, and that only workers may use them.
func TestBatchRequestsAreRefusedWithTheField(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := agtest.Start(t, agtest.Options{})
	w := srv.Principal(t, "builder", agwpv1.Role_ROLE_WORKER)
	agent := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
	job := enqueue(t, srv.Admin, "ag.noop")

	_, err := w.Jobs.ClaimJobs(ctx, &agwpv1.ClaimJobsRequest{Worker: "w1", MaxJobs: 257})
	wantMessage(t, "257 jobs", err, connect.CodeInvalidArgument, "max_jobs")
	_, err = w.Jobs.ClaimJobs(ctx, &agwpv1.ClaimJobsRequest{MaxJobs: 2})
	wantMessage(t, "no worker", err, connect.CodeInvalidArgument, "worker")
	_, err = agent.Jobs.ClaimJobs(ctx, &agwpv1.ClaimJobsRequest{Worker: "w1", MaxJobs: 2})
	wantCode(t, "an agent claiming", err, connect.CodePermissionDenied)

	_, err = w.Jobs.CompleteJobs(ctx, &agwpv1.CompleteJobsRequest{})
	wantMessage(t, "no completions", err, connect.CodeInvalidArgument, "completions")
	_, err = w.Jobs.CompleteJobs(ctx, &agwpv1.CompleteJobsRequest{Completions: []*agwpv1.CompleteJobRequest{
		{JobId: job.GetId(), Worker: "w1"}, {JobId: job.GetId(), Worker: "w1"},
	}})
	wantMessage(t, "a job twice", err, connect.CodeInvalidArgument, "completions[1].job_id")
	_, err = w.Jobs.CompleteJobs(ctx, &agwpv1.CompleteJobsRequest{Completions: []*agwpv1.CompleteJobRequest{
		{JobId: job.GetId(), Worker: "w1"}, {JobId: "other", Worker: "bad label!"},
	}})
	wantMessage(t, "a bad label", err, connect.CodeInvalidArgument, "completions[1].worker")
	_, err = agent.Jobs.CompleteJobs(ctx, &agwpv1.CompleteJobsRequest{Completions: []*agwpv1.CompleteJobRequest{{JobId: job.GetId(), Worker: "w1"}}})
	wantCode(t, "an agent completing", err, connect.CodePermissionDenied)
	if j := getJob(t, srv.Admin, job.GetId()); j.GetState() != agwpv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("refused batches changed the job: %v", j.GetState())
	}
}

func wantMessage(t *testing.T, what string, err error, code connect.Code, says string) {
	t.Helper()
	wantCode(t, what, err, code)
	if !strings.Contains(err.Error(), says) {
		t.Fatalf("%s: %v, want it to name %q", what, err, says)
	}
}

// TestClaimManyIsWokenByEnqueue ensures a worker long-polling with ClaimJobs is woken by an
// enqueue and answered at once with the job there is, without waiting to fill its batch.
func TestClaimManyIsWokenByEnqueue(t *testing.T) {
	t.Parallel()
	srv := agtest.Start(t, agtest.Options{PollInterval: time.Hour})
	w := srv.Principal(t, "builder", agwpv1.Role_ROLE_WORKER)
	got := make(chan []*client.Claim, 1)
	errc := make(chan error, 1)
	go func() {
		claims, err := w.ClaimMany(context.Background(), client.ClaimOptions{Worker: "w", Wait: 30 * time.Second}, 16)
		if err != nil {
			errc <- err
			return
		}
		got <- claims
	}()
	waitFor(t, func() bool { return srv.WaitingRequests() > 0 })
	job := enqueue(t, srv.Admin, "ag.noop")
	select {
	case claims := <-got:
		if len(claims) != 1 || claims[0].Job.GetId() != job.GetId() || claims[0].FencingToken() != 1 {
			t.Fatalf("long poll got %d claims, want job %s with claim number 1", len(claims), job.GetId())
		}
		jobs, refusals, err := w.CompleteMany(context.Background(), []client.Completion{{Claim: claims[0]}})
		if err != nil || refusals[0] != nil || jobs[0].GetState() != agwpv1.JobState_JOB_STATE_COMPLETED {
			t.Fatalf("complete many = %v, %v, %v; want the job completed", jobs, refusals, err)
		}
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(20 * time.Second):
		t.Fatal("long-polling batch claimer was not woken by the enqueue")
	}
}
