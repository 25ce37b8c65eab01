package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestAuthentication ensures calls without a valid token are unauthenticated and calls outside
// a role are permission_denied, and that revoking and disabling take effect at once.
func TestAuthentication(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})

			anon := client.New(srv.URL, "", client.WithRetries(0, 0))
			_, err := anon.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{})
			wantCode(t, "no token", err, connect.CodeUnauthenticated)
			bogus := client.New(srv.URL, "agt_not-a-token", client.WithRetries(0, 0))
			_, err = bogus.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{})
			wantCode(t, "unknown token", err, connect.CodeUnauthenticated)

			reader := srv.Principal(t, "auditor", agwpv1.Role_ROLE_READER)
			_, err = reader.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "ag.noop"})
			wantCode(t, "reader enqueues", err, connect.CodePermissionDenied)
			_, err = reader.Jobs.ClaimJob(ctx, &agwpv1.ClaimJobRequest{Worker: "w"})
			wantCode(t, "reader claims", err, connect.CodePermissionDenied)
			if _, err := reader.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{}); err != nil {
				t.Fatalf("reader lists jobs: %v", err)
			}

			agent := srv.Principal(t, "coder", agwpv1.Role_ROLE_AGENT)
			_, err = agent.Jobs.ClaimJob(ctx, &agwpv1.ClaimJobRequest{Worker: "w"})
			wantCode(t, "agent claims", err, connect.CodePermissionDenied)
			_, err = agent.Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: "x", Role: agwpv1.Role_ROLE_ADMIN})
			wantCode(t, "agent creates a principal", err, connect.CodePermissionDenied)

			worker := srv.Principal(t, "builder", agwpv1.Role_ROLE_WORKER)
			_, err = worker.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "ag.noop"})
			wantCode(t, "worker enqueues", err, connect.CodePermissionDenied)

			// A second token of the worker; revoking it leaves the first working.
			tok, err := srv.Admin.Admin.CreateToken(ctx, &agwpv1.CreateTokenRequest{Principal: "builder"})
			if err != nil {
				t.Fatalf("create token: %v", err)
			}
			second := client.New(srv.URL, tok.GetToken(), client.WithRetries(0, 0))
			who, err := second.Admin.WhoAmI(ctx, &agwpv1.WhoAmIRequest{})
			if err != nil || who.GetPrincipal().GetName() != "builder" {
				t.Fatalf("whoami with the second token = %v, %v; want builder", who, err)
			}
			if _, err := srv.Admin.Admin.RevokeToken(ctx, &agwpv1.RevokeTokenRequest{TokenId: tok.GetTokenInfo().GetId()}); err != nil {
				t.Fatalf("revoke: %v", err)
			}
			_, err = second.Admin.WhoAmI(ctx, &agwpv1.WhoAmIRequest{})
			wantCode(t, "revoked token", err, connect.CodeUnauthenticated)
			if _, err := worker.Admin.WhoAmI(ctx, &agwpv1.WhoAmIRequest{}); err != nil {
				t.Fatalf("first token after revoking the second: %v", err)
			}

			if _, err := srv.Admin.Admin.DisablePrincipal(ctx, &agwpv1.DisablePrincipalRequest{Name: "builder"}); err != nil {
				t.Fatalf("disable: %v", err)
			}
			_, err = worker.Admin.WhoAmI(ctx, &agwpv1.WhoAmIRequest{})
			wantCode(t, "disabled principal", err, connect.CodeUnauthenticated)

			_, err = srv.Admin.Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: "coder", Role: agwpv1.Role_ROLE_AGENT})
			wantCode(t, "duplicate principal", err, connect.CodeAlreadyExists)
			_, err = srv.Admin.Admin.CreateToken(ctx, &agwpv1.CreateTokenRequest{Principal: "nobody"})
			wantCode(t, "token for an unknown principal", err, connect.CodeNotFound)
		})
	}
}

// TestBadInputIsRefusedWithTheField ensures invalid requests are invalid_argument naming the
// field, and change nothing.
func TestBadInputIsRefusedWithTheField(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := agtest.Start(t, agtest.Options{})
	w := srv.Principal(t, "builder", agwpv1.Role_ROLE_WORKER)
	big := strings.Repeat("x", 70<<10)
	cases := []struct {
		name  string
		call  func() error
		field string
	}{
		{"kind with capitals", func() error {
			_, err := srv.Admin.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "Build"})
			return err
		}, "kind"},
		{"empty kind", func() error {
			_, err := srv.Admin.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{})
			return err
		}, "kind"},
		{"too many attempts", func() error {
			_, err := srv.Admin.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "k", MaxAttempts: 101})
			return err
		}, "max_attempts"},
		{"negative delay", func() error {
			_, err := srv.Admin.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "k", Delay: durationpb.New(-time.Second)})
			return err
		}, "delay"},
		{"label with a space", func() error {
			_, err := w.Jobs.ClaimJob(ctx, &agwpv1.ClaimJobRequest{Worker: "my worker"})
			return err
		}, "worker"},
		{"missing label", func() error {
			_, err := w.Jobs.ClaimJob(ctx, &agwpv1.ClaimJobRequest{})
			return err
		}, "worker"},
		{"lease too short", func() error {
			_, err := w.Jobs.ClaimJob(ctx, &agwpv1.ClaimJobRequest{Worker: "w", Lease: durationpb.New(time.Millisecond)})
			return err
		}, "lease"},
		{"wait too long", func() error {
			_, err := w.Jobs.ClaimJob(ctx, &agwpv1.ClaimJobRequest{Worker: "w", Wait: durationpb.New(2 * time.Minute)})
			return err
		}, "wait"},
		{"bad kind filter", func() error {
			_, err := w.Jobs.ClaimJob(ctx, &agwpv1.ClaimJobRequest{Worker: "w", Kinds: []string{"ok", "NOT OK"}})
			return err
		}, "kinds[1]"},
		{"progress too long", func() error {
			_, err := w.Jobs.HeartbeatJob(ctx, &agwpv1.HeartbeatJobRequest{JobId: "job_x", Worker: "w", Progress: big})
			return err
		}, "progress"},
		{"output too long", func() error {
			_, err := w.Jobs.CompleteJob(ctx, &agwpv1.CompleteJobRequest{JobId: "job_x", Worker: "w", Output: big})
			return err
		}, "output"},
		{"bad output digest", func() error {
			_, err := w.Jobs.CompleteJob(ctx, &agwpv1.CompleteJobRequest{JobId: "job_x", Worker: "w", OutputDigest: "md5:abc"})
			return err
		}, "output_digest"},
		{"missing job id", func() error {
			_, err := w.Jobs.FailJob(ctx, &agwpv1.FailJobRequest{Worker: "w"})
			return err
		}, "job_id"},
		{"negative page size", func() error {
			_, err := srv.Admin.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{PageSize: -1})
			return err
		}, "page_size"},
		{"forged page token", func() error {
			_, err := srv.Admin.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{PageToken: "bm9wZQ"})
			return err
		}, "page_token"},
		{"unknown state filter", func() error {
			_, err := srv.Admin.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{States: []agwpv1.JobState{42}})
			return err
		}, "states[0]"},
		{"principal name", func() error {
			_, err := srv.Admin.Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: "Bad Name", Role: agwpv1.Role_ROLE_AGENT})
			return err
		}, "name"},
		{"principal role", func() error {
			_, err := srv.Admin.Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: "ok"})
			return err
		}, "role"},
		{"short public key", func() error {
			_, err := w.Admin.RegisterWorkerKey(ctx, &agwpv1.RegisterWorkerKeyRequest{PublicKey: []byte("short")})
			return err
		}, "public_key"},
	}
	for _, c := range cases {
		err := c.call()
		wantCode(t, c.name, err, connect.CodeInvalidArgument)
		var ce *connect.Error
		if !errors.As(err, &ce) || !strings.HasPrefix(ce.Message(), c.field+":") {
			t.Errorf("%s: message %q does not start with the field %q", c.name, err, c.field)
		}
	}
	list, err := srv.Admin.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{})
	if err != nil || len(list.GetJobs()) != 0 {
		t.Fatalf("after refused requests: %d jobs, %v; want none", len(list.GetJobs()), err)
	}

	_, err = w.Jobs.HeartbeatJob(ctx, &agwpv1.HeartbeatJobRequest{JobId: "job_unknown", Worker: "w"})
	wantCode(t, "heartbeat of an unknown job", err, connect.CodeNotFound)
	_, err = srv.Admin.Jobs.GetJob(ctx, &agwpv1.GetJobRequest{JobId: "job_unknown"})
	wantCode(t, "get an unknown job", err, connect.CodeNotFound)

	// A body above the server's limit is refused before it is read whole.
	payload, _ := structpb.NewStruct(map[string]any{"blob": strings.Repeat("y", 9<<20)})
	_, err = srv.Admin.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "k", Payload: payload})
	wantCode(t, "oversized body", err, connect.CodeResourceExhausted)

	// So is one that declares no size (chunked), once it passes the limit, and it is told so,
	// not taken for a slow body.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/agwp.v1.JobService/EnqueueJob",
		io.MultiReader(strings.NewReader(`{"kind": "k", "payload": {"blob": "`), strings.NewReader(strings.Repeat("y", 9<<20)), strings.NewReader(`"}}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+srv.AdminToken)
	req.ContentLength = -1
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("an oversized body of no declared size: %v", err)
	}
	answer, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(answer), "resource_exhausted") {
		t.Errorf("an oversized body of no declared size: %s %s; want resource_exhausted", res.Status, answer)
	}
}

// TestLongPollClaimIsWokenByEnqueue ensures a waiting claimer gets a job enqueued while it
// waits, on both stores.
func TestLongPollClaimIsWokenByEnqueue(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			// A poll interval longer than the wait: only the enqueue's wake-up can deliver the job.
			srv := agtest.Start(t, agtest.Options{Backend: backend, PollInterval: time.Hour})
			w := srv.Principal(t, "builder", agwpv1.Role_ROLE_WORKER)
			got := make(chan *agwpv1.ClaimJobResponse, 1)
			errc := make(chan error, 1)
			go func() {
				res, err := w.Jobs.ClaimJob(ctx, &agwpv1.ClaimJobRequest{Worker: "w", Wait: durationpb.New(30 * time.Second)})
				if err != nil {
					errc <- err
					return
				}
				got <- res
			}()
			// Enqueue once the claimer is waiting: no job exists before, so it must be waiting.
			waitFor(t, func() bool { return srv.WaitingRequests() > 0 })
			job := enqueue(t, srv.Admin, "ag.noop")
			select {
			case res := <-got:
				if res.GetJob().GetId() != job.GetId() {
					t.Fatalf("long poll got %v, want %s", res.GetJob(), job.GetId())
				}
			case err := <-errc:
				t.Fatal(err)
			case <-time.After(20 * time.Second):
				t.Fatal("long-polling claimer was not woken by the enqueue")
			}
			// With nothing to claim and no wait, the answer is empty at once.
			res, err := w.Jobs.ClaimJob(ctx, &agwpv1.ClaimJobRequest{Worker: "w"})
			if err != nil || res.GetJob() != nil {
				t.Fatalf("claim with nothing queued = %v, %v; want no job", res.GetJob(), err)
			}
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 20s")
		}
		<-tick.C
	}
}

// TestCancel ensures only the enqueuer or an admin cancels, a queued job is cancelled at once,
// and a claimed job's worker learns of it on its next heartbeat and is then cancelled.
func TestCancel(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend, Clock: clock.NewFake(time.Now())})
			alice := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
			bob := srv.Principal(t, "bob", agwpv1.Role_ROLE_AGENT)
			w := srv.Principal(t, "builder", agwpv1.Role_ROLE_WORKER)

			queued := enqueue(t, alice, "slow")
			_, err := bob.Jobs.CancelJob(ctx, &agwpv1.CancelJobRequest{JobId: queued.GetId()})
			wantCode(t, "another agent cancels", err, connect.CodePermissionDenied)
			res, err := alice.Jobs.CancelJob(ctx, &agwpv1.CancelJobRequest{JobId: queued.GetId()})
			if err != nil || res.GetJob().GetState() != agwpv1.JobState_JOB_STATE_CANCELLED {
				t.Fatalf("enqueuer cancels a queued job = %v, %v; want cancelled", res.GetJob().GetState(), err)
			}
			_, err = alice.Jobs.CancelJob(ctx, &agwpv1.CancelJobRequest{JobId: queued.GetId()})
			wantCode(t, "cancel a cancelled job", err, connect.CodeFailedPrecondition)

			running := enqueue(t, alice, "slow")
			claimed := claim(t, w, "w1", time.Minute)
			res, err = srv.Admin.Jobs.CancelJob(ctx, &agwpv1.CancelJobRequest{JobId: running.GetId()})
			if err != nil || res.GetJob().GetState() != agwpv1.JobState_JOB_STATE_CLAIMED || !res.GetJob().GetCancelRequested() {
				t.Fatalf("admin cancels a claimed job = %v, %v; want claimed with cancel_requested", res.GetJob(), err)
			}
			hb, err := w.Jobs.HeartbeatJob(ctx, &agwpv1.HeartbeatJobRequest{JobId: running.GetId(), Worker: "w1", FencingToken: uint64(claimed.GetAttempts())})
			if err != nil || !hb.GetCancelRequested() {
				t.Fatalf("heartbeat after cancel = %v, %v; want cancel_requested", hb, err)
			}
			failed, err := w.Jobs.FailJob(ctx, &agwpv1.FailJobRequest{JobId: running.GetId(), Worker: "w1", FencingToken: uint64(claimed.GetAttempts()), Error: "stopped"})
			if err != nil || failed.GetJob().GetState() != agwpv1.JobState_JOB_STATE_CANCELLED {
				t.Fatalf("fail after cancel = %v, %v; want cancelled", failed.GetJob(), err)
			}
		})
	}
}

// TestOperationalEndpoints ensures health, readiness, metrics and the OpenAPI document answer.
func TestOperationalEndpoints(t *testing.T) {
	t.Parallel()
	srv := agtest.Start(t, agtest.Options{})
	w := srv.Principal(t, "builder", agwpv1.Role_ROLE_WORKER)
	enqueue(t, srv.Admin, "ag.noop")
	claimed := claim(t, w, "w1", time.Minute)
	_, err := w.Jobs.CompleteJob(context.Background(), &agwpv1.CompleteJobRequest{JobId: claimed.GetId(), Worker: "w1", FencingToken: 7})
	wantCode(t, "complete with a wrong number", err, connect.CodeFailedPrecondition)

	get := func(path string) (int, string) {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Fatalf("/readyz = %d %q", code, body)
	}
	code, body := get("/metrics")
	for _, want := range []string{
		`ag_jobs{state="claimed"} 1`,
		`ag_job_claims_total 1`,
		`ag_refusals_total{method="CompleteJob",reason="stale_claim"} 1`,
		`ag_request_duration_seconds_count{code="ok",procedure="/agwp.v1.JobService/ClaimJob"} 1`,
		`ag_gate_validate_capacity 1`, // the claim above took any kind: a worker that can validate
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	code, body = get("/openapi.yaml")
	if code != 200 || !strings.Contains(body, "/agwp.v1.JobService/ClaimJob:") {
		t.Fatalf("/openapi.yaml = %d, %d bytes without ClaimJob", code, len(body))
	}

	health, err := grpchealth.NewClient(http.DefaultClient, srv.URL).Check(context.Background(), &grpchealth.CheckRequest{})
	if err != nil || health.Status != grpchealth.StatusServing {
		t.Fatalf("gRPC health = %v, %v; want serving", health, err)
	}

	// Connect JSON with curl's shape: a plain POST with a bearer token.
	req, _ := http.NewRequest("POST", srv.URL+"/agwp.v1.JobService/GetJob", bytes.NewBufferString(`{"jobId":"`+claimed.GetId()+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+srv.AdminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), `"state":"JOB_STATE_CLAIMED"`) || !strings.Contains(string(b), `"attempts":1`) {
		t.Fatalf("JSON GetJob = %d %s", res.StatusCode, b)
	}
}
