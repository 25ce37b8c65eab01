package server_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"connectrpc.com/connect"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestWhatTheConsoleReads ensures the reads the web console's jobs and workers pages rest on:
// job counts by state (every state, zeros included), jobs of one worker (one label, or every
// label of its principal), and a worker's registered keys, which an agent may not list.
func TestWhatTheConsoleReads(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			ci := srv.Principal(t, "ci", agwpv1.Role_ROLE_WORKER)
			agent := srv.Principal(t, "bot", agwpv1.Role_ROLE_AGENT)
			reader := srv.Principal(t, "eve", agwpv1.Role_ROLE_READER)
			for range 3 {
				if _, err := agent.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "build"}); err != nil {
					t.Fatal(err)
				}
			}
			claimed := map[string]string{}
			for _, label := range []string{"w1", "w2"} {
				res, err := ci.Jobs.ClaimJob(ctx, &agwpv1.ClaimJobRequest{Worker: label})
				if err != nil || res.GetJob() == nil {
					t.Fatalf("claim as %s: %v", label, err)
				}
				claimed[label] = res.GetJob().GetId()
			}
			if _, err := ci.Jobs.CompleteJob(ctx, &agwpv1.CompleteJobRequest{JobId: claimed["w1"], Worker: "w1", FencingToken: 1}); err != nil {
				t.Fatal(err)
			}

			counts, err := reader.Jobs.CountJobs(ctx, &agwpv1.CountJobsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			got := map[agwpv1.JobState]uint64{}
			for _, c := range counts.GetCounts() {
				got[c.GetState()] = c.GetCount()
			}
			want := map[agwpv1.JobState]uint64{agwpv1.JobState_JOB_STATE_QUEUED: 1, agwpv1.JobState_JOB_STATE_CLAIMED: 1,
				agwpv1.JobState_JOB_STATE_COMPLETED: 1, agwpv1.JobState_JOB_STATE_FAILED: 0, agwpv1.JobState_JOB_STATE_CANCELLED: 0}
			if len(counts.GetCounts()) != 5 || len(got) != 5 || counts.GetCountedAt() == nil {
				t.Fatalf("CountJobs answered %v, want every state once and the time", counts)
			}
			for st, n := range want {
				if got[st] != n {
					t.Errorf("CountJobs: %s = %d, want %d", st, got[st], n)
				}
			}

			for claimedBy, want := range map[string][]string{"ci|w2": {claimed["w2"]}, "ci|": {claimed["w2"], claimed["w1"]}, "bot|": nil} {
				res, err := reader.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{ClaimedBy: claimedBy})
				if err != nil {
					t.Fatalf("ListJobs(claimed_by %q): %v", claimedBy, err)
				}
				var ids []string
				for _, j := range res.GetJobs() {
					ids = append(ids, j.GetId())
				}
				if len(ids) != len(want) || (len(want) > 0 && (ids[0] != want[0] || ids[len(ids)-1] != want[len(want)-1])) {
					t.Errorf("ListJobs(claimed_by %q) answered %v, want %v", claimedBy, ids, want)
				}
			}
			if _, err := reader.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{ClaimedBy: "no label"}); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("ListJobs(claimed_by without |) = %v, want invalid_argument", err)
			}

			pub, _, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ci.Admin.RegisterWorkerKey(ctx, &agwpv1.RegisterWorkerKeyRequest{PublicKey: pub}); err != nil {
				t.Fatal(err)
			}
			keys, err := reader.Admin.ListWorkerKeys(ctx, &agwpv1.ListWorkerKeysRequest{Principal: "ci"})
			if err != nil || len(keys.GetKeys()) != 1 || string(keys.GetKeys()[0].GetPublicKey()) != string(pub) || keys.GetKeys()[0].GetPrincipal() != "ci" {
				t.Fatalf("ListWorkerKeys(ci) = %v, %v; want the key ci registered", keys, err)
			}
			if _, err := agent.Admin.ListWorkerKeys(ctx, &agwpv1.ListWorkerKeysRequest{Principal: "ci"}); connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Errorf("ListWorkerKeys as an agent = %v, want permission_denied", err)
			}
		})
	}
}

// TestARunningJobsOutputFollowsItsHeartbeats ensures that the output a worker sends with its
// heartbeats is the job's output while it runs (so people can follow it), that a heartbeat
// without output leaves it, that the completion's replaces it, and that more than 64 KiB is
// refused.
func TestARunningJobsOutputFollowsItsHeartbeats(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			ci := srv.Principal(t, "ci", agwpv1.Role_ROLE_WORKER)
			reader := srv.Principal(t, "eve", agwpv1.Role_ROLE_READER)
			if _, err := srv.Admin.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "build"}); err != nil {
				t.Fatal(err)
			}
			claim, err := ci.Jobs.ClaimJob(ctx, &agwpv1.ClaimJobRequest{Worker: "w1"})
			if err != nil {
				t.Fatal(err)
			}
			id := claim.GetJob().GetId()
			output := func() string {
				t.Helper()
				res, err := reader.Jobs.GetJob(ctx, &agwpv1.GetJobRequest{JobId: id})
				if err != nil {
					t.Fatal(err)
				}
				return res.GetJob().GetOutput()
			}
			beat := func(progress, out string) error {
				_, err := ci.Jobs.HeartbeatJob(ctx, &agwpv1.HeartbeatJobRequest{JobId: id, Worker: "w1", FencingToken: 1, Progress: progress, Output: out})
				return err
			}
			if err := beat("step one", "step one\n"); err != nil {
				t.Fatal(err)
			}
			if got := output(); got != "step one\n" {
				t.Fatalf("output after a heartbeat with output = %q, want %q", got, "step one\n")
			}
			if err := beat("still", ""); err != nil {
				t.Fatal(err)
			}
			if got := output(); got != "step one\n" {
				t.Fatalf("output after a heartbeat without output = %q, want it unchanged", got)
			}
			if err := beat("", strings.Repeat("x", 64<<10+1)); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("a heartbeat with 64 KiB + 1 of output = %v, want invalid_argument", err)
			}
			if _, err := ci.Jobs.CompleteJob(ctx, &agwpv1.CompleteJobRequest{JobId: id, Worker: "w1", FencingToken: 1, Output: "step one\nstep two\n"}); err != nil {
				t.Fatal(err)
			}
			if got := output(); got != "step one\nstep two\n" {
				t.Fatalf("output after the completion = %q, want the completion's", got)
			}
		})
	}
}
