package server_test

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// validator is a worker driven by the test: it claims validate jobs and completes them with
// attestations it signs, or with forged ones.
type validator struct {
	t      *testing.T
	c      *client.Client
	label  string
	key    ed25519.PrivateKey
	signer *attest.Signer
}

func newValidator(t *testing.T, srv *agtest.Server, name string) *validator {
	t.Helper()
	c := srv.Principal(t, name, agwpv1.Role_ROLE_WORKER)
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admin.RegisterWorkerKey(context.Background(), &agwpv1.RegisterWorkerKeyRequest{PublicKey: key.Public().(ed25519.PublicKey)}); err != nil {
		t.Fatalf("register worker key: %v", err)
	}
	return &validator{t: t, c: c, label: "v1", key: key, signer: attest.NewSigner(key)}
}

// claim waits for the next validate job and answers its claim and payload.
func (v *validator) claim() (*client.Claim, client.ValidatePayload) {
	v.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		cl, err := v.c.Claim(context.Background(), client.ClaimOptions{Worker: v.label, Kinds: []string{client.KindValidate}, Lease: time.Minute, Wait: 2 * time.Second})
		if err != nil {
			v.t.Fatalf("claim a validate job: %v", err)
		}
		if cl == nil {
			continue
		}
		p, err := client.ParseValidatePayload(cl.Job.GetPayload())
		if err != nil {
			v.t.Fatalf("validate job %s: %v", cl.Job.GetId(), err)
		}
		return cl, p
	}
	v.t.Fatal("no validate job to claim within 10s")
	return nil, client.ValidatePayload{}
}

// statement answers the attestation of an honest run of the claimed job with result.
func (v *validator) statement(cl *client.Claim, p client.ValidatePayload, result string) attest.Validation {
	now := time.Now()
	exit := 0
	if result == attest.ResultFailed {
		exit = 1
	}
	st := attest.Validation{
		Repository: p.Repository, Revision: p.CandidateRevision, TreeDigest: p.TreeDigest, GitTree: p.GitTree, Result: result,
		Command: p.Command, JobID: cl.Job.GetId(), ClaimNumber: cl.Job.GetAttempts(), Worker: cl.Job.GetClaimedBy(),
		StartedAt: now.Add(-time.Second), FinishedAt: now, ExitCode: exit, LogDigest: "sha256:" + strings.Repeat("0", 64),
		Isolation: attest.IsolationBubblewrap, Network: attest.NetworkNone,
	}
	if p.Protected != nil {
		// An honest worker ran the mainline's copy of the protected paths, as asked.
		st.Protected = &attest.Protected{Revision: p.Protected.Revision, Paths: p.Protected.Paths}
	}
	return st
}

func (v *validator) envelope(signer *attest.Signer, st attest.Validation) *agwpv1.Envelope {
	v.t.Helper()
	env, err := signer.SignValidation(context.Background(), st)
	if err != nil {
		v.t.Fatalf("sign: %v", err)
	}
	pe, err := attest.ToProto(env)
	if err != nil {
		v.t.Fatal(err)
	}
	return pe
}

func (v *validator) complete(cl *client.Claim, st attest.Validation, output string) (*agwpv1.Job, error) {
	result, _ := structpb.NewStruct(map[string]any{"result": st.Result, "exit_code": st.ExitCode})
	return cl.Complete(context.Background(), client.CompleteOptions{
		Result: result, Output: output, OutputDigest: st.LogDigest, Attestation: v.envelope(v.signer, st),
	})
}

func waitChange(t *testing.T, c *client.Client, id string) *agwpv1.Change {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := c.Repos.GetChange(context.Background(), &agwpv1.GetChangeRequest{ChangeId: id, Wait: durationpb.New(5 * time.Second)})
		if err != nil {
			t.Fatalf("get change %s: %v", id, err)
		}
		ch := res.GetChange()
		switch ch.GetState() {
		case agwpv1.ChangeState_CHANGE_STATE_INTEGRATED, agwpv1.ChangeState_CHANGE_STATE_REJECTED, agwpv1.ChangeState_CHANGE_STATE_CANCELLED:
			return ch
		}
		if time.Now().After(deadline) {
			t.Fatalf("change %s still %v after 20s", id, ch.GetState())
		}
	}
}

func integrateFile(t *testing.T, c *client.Client, repoName, holder, path, content string) *agwpv1.Change {
	t.Helper()
	ctx := context.Background()
	l := acquire(t, c, repoName, holder, time.Minute, path)
	r, err := c.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: repoName})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{
		Repository: repoName, BaseRevision: r.GetRepository().GetMainline(), Holder: holder,
		FencingTokens: []uint64{l.GetFencingToken()}, Message: "write " + path, Edits: []*agwpv1.Edit{write(path, content)},
	})
	if err != nil {
		t.Fatalf("integrate %s: %v", path, err)
	}
	return res.GetChange()
}

func mainline(t *testing.T, c *client.Client, repoName string) string {
	t.Helper()
	r, err := c.Repos.GetRepository(context.Background(), &agwpv1.GetRepositoryRequest{Name: repoName})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetRepository().GetMainline()
}

// TestValidationGate ensures, over HTTP on both stores, that with a validation policy the
// mainline moves only on a passing attestation that verifies for exactly the candidate tree;
// that forged or mismatched envelopes are refused and store nothing; that a failing validation
// rejects the change with its output; and that a worker reads only its job's tree.
func TestValidationGate(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			created, err := srv.Admin.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "app", Validation: &agwpv1.Validation{
				Command: []string{"go", "test", "./..."}, Timeout: durationpb.New(time.Minute), Env: map[string]string{"CGO_ENABLED": "0"},
			}})
			if err != nil {
				t.Fatalf("create repository with a policy: %v", err)
			}
			if v := created.GetRepository().GetValidation(); !slices.Equal(v.GetCommand(), []string{"go", "test", "./..."}) ||
				v.GetTimeout().AsDuration() != time.Minute || v.GetEnv()["CGO_ENABLED"] != "0" {
				t.Fatalf("repository validation = %v", v)
			}
			start := created.GetRepository().GetMainline()
			alice := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
			ci := newValidator(t, srv, "ci")

			queued := integrateFile(t, alice, "app", "w1", "a.txt", "hello\n")
			if queued.GetState() != agwpv1.ChangeState_CHANGE_STATE_QUEUED || mainline(t, alice, "app") != start {
				t.Fatalf("integrate under a policy answered %v and the mainline is %s (was %s): want QUEUED and unmoved",
					queued.GetState(), mainline(t, alice, "app"), start)
			}

			cl, p := ci.claim()
			if p.Repository != "app" || p.Change != queued.GetId() || !slices.Equal(p.Command, []string{"go", "test", "./..."}) ||
				p.Timeout != "1m0s" || p.Env["CGO_ENABLED"] != "0" {
				t.Fatalf("validate payload = %+v", p)
			}
			validating := waitState(t, alice, queued.GetId(), agwpv1.ChangeState_CHANGE_STATE_VALIDATING)
			if validating.GetCandidateRevision() != p.CandidateRevision || validating.GetJobId() != cl.Job.GetId() {
				t.Fatalf("validating change = %v, job %s payload %+v", validating, cl.Job.GetId(), p)
			}

			// The worker reads its job's tree and blobs, and nothing else.
			tree, err := ci.c.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: "app", Revision: p.CandidateRevision})
			// A payload names the tree digest only when the candidate's was known when it was
			// enqueued; GetTree always answers it.
			if err != nil || p.TreeDigest != "" && tree.GetTreeDigest() != p.TreeDigest || len(tree.GetEntries()) != 1 {
				t.Fatalf("worker reads its candidate: %v, %v", tree, err)
			}
			if b, err := ci.c.Blob(ctx, tree.GetEntries()[0].GetDigest()); err != nil || string(b) != "hello\n" {
				t.Fatalf("worker reads its candidate's blob: %q, %v", b, err)
			}
			_, err = ci.c.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: "app"})
			wantCode(t, "a worker reads the mainline", err, connect.CodePermissionDenied)
			// What changed since another revision tells of that revision: it too must be the job's.
			_, err = ci.c.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: "app", Revision: p.CandidateRevision, Since: start})
			wantCode(t, "a worker reads its candidate since a revision of no job it holds", err, connect.CodePermissionDenied)
			other, err := alice.Repos.UploadBlobs(ctx, &agwpv1.UploadBlobsRequest{Blobs: [][]byte{[]byte("secret")}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = ci.c.Repos.GetBlob(ctx, &agwpv1.GetBlobRequest{Digest: other.GetDigests()[0]})
			wantCode(t, "a worker reads a blob of no job it holds", err, connect.CodePermissionDenied)
			// Many at once: its candidate's blob passes, one other refuses the whole call.
			var fetched []string
			collect := func(d string, _ []byte) error { fetched = append(fetched, d); return nil }
			if err := ci.c.Blobs(ctx, []string{tree.GetEntries()[0].GetDigest()}, 1, collect); err != nil || len(fetched) != 1 {
				t.Fatalf("worker reads its candidate's blob with GetBlobs: %v, %v", fetched, err)
			}
			err = ci.c.Blobs(ctx, []string{tree.GetEntries()[0].GetDigest(), other.GetDigests()[0]}, 1, collect)
			wantCode(t, "a worker reads, among many, a blob of no job it holds", err, connect.CodePermissionDenied)
			if len(fetched) != 1 {
				t.Fatalf("a refused GetBlobs delivered %d blobs", len(fetched)-1)
			}

			// Forged or mismatched envelopes are refused, and nothing is stored.
			honest := ci.statement(cl, p, attest.ResultPassed)
			_, stranger, _ := ed25519.GenerateKey(rand.Reader)
			otherTree, otherGitTree := "sha256:"+strings.Repeat("a", 64), strings.Repeat("b", 40)
			refusals := []struct {
				what string
				env  *agwpv1.Envelope
				code connect.Code
			}{
				{"an envelope signed with a key the worker did not register", ci.envelope(attest.NewSigner(stranger), honest), connect.CodeInvalidArgument},
				{"an envelope about another tree", ci.envelope(ci.signer, with(honest, func(v *attest.Validation) {
					v.TreeDigest = otherTree
					if v.GitTree != "" {
						v.GitTree = otherGitTree
					}
				})), connect.CodeInvalidArgument},
				{"an envelope naming no tree the job names", ci.envelope(ci.signer, with(honest, func(v *attest.Validation) {
					if p.GitTree != "" {
						v.GitTree, v.TreeDigest = "", cmp.Or(p.TreeDigest, otherTree)
					} else {
						v.GitTree, v.TreeDigest = otherGitTree, ""
					}
				})), connect.CodeInvalidArgument},
				{"an envelope about another job", ci.envelope(ci.signer, with(honest, func(v *attest.Validation) { v.JobID = "job_other" })), connect.CodeInvalidArgument},
				{"an envelope of another claim number", ci.envelope(ci.signer, with(honest, func(v *attest.Validation) { v.ClaimNumber++ })), connect.CodeInvalidArgument},
				{"no envelope", nil, connect.CodeInvalidArgument},
			}
			for _, r := range refusals {
				_, err := cl.Complete(ctx, client.CompleteOptions{Attestation: r.env})
				wantCode(t, r.what, err, r.code)
				job := getJob(t, alice, cl.Job.GetId())
				if job.GetState() != agwpv1.JobState_JOB_STATE_CLAIMED || job.GetAttestationDigest() != "" {
					t.Fatalf("after %s the job is %v with attestation %q: want CLAIMED with none", r.what, job.GetState(), job.GetAttestationDigest())
				}
			}
			if _, err := ci.complete(cl, honest, "ok\n"); err != nil {
				t.Fatalf("complete with an honest attestation: %v", err)
			}
			done := waitChange(t, alice, queued.GetId())
			if done.GetState() != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED || done.GetIntegratedRevision() != p.CandidateRevision ||
				done.GetAttestationDigest() == "" || mainline(t, alice, "app") != p.CandidateRevision {
				t.Fatalf("passed change = %v, mainline %s: want INTEGRATED at the candidate %s with an attestation", done, mainline(t, alice, "app"), p.CandidateRevision)
			}
			// The stored envelope verifies offline with the worker's public key.
			att, err := alice.Jobs.GetAttestation(ctx, &agwpv1.GetAttestationRequest{Digest: done.GetAttestationDigest()})
			if err != nil {
				t.Fatalf("get attestation: %v", err)
			}
			env, err := attest.Decode(att.GetEnvelopeJson())
			if err != nil {
				t.Fatal(err)
			}
			got, keyID, err := attest.VerifyValidation(ctx, env, [][]byte{ci.key.Public().(ed25519.PublicKey)})
			if err != nil || !got.Passed() || got.TreeDigest != p.TreeDigest || got.GitTree != p.GitTree || got.JobID != cl.Job.GetId() || keyID != attest.KeyID(ci.key.Public().(ed25519.PublicKey)) {
				t.Fatalf("offline verification: %+v key %s err %v", got, keyID, err)
			}

			// A failing validation rejects the change with its output; the mainline keeps the
			// last passing tree.
			passed := mainline(t, alice, "app")
			broken := integrateFile(t, alice, "app", "w1", "b.txt", "broken\n")
			cl2, p2 := ci.claim()
			if p2.Change != broken.GetId() {
				t.Fatalf("second validate job is for %s, want %s", p2.Change, broken.GetId())
			}
			if _, err := ci.complete(cl2, ci.statement(cl2, p2, attest.ResultFailed), "--- FAIL: TestB\nFAIL\n"); err != nil {
				t.Fatalf("complete with a failing attestation: %v", err)
			}
			rejected := waitChange(t, alice, broken.GetId())
			if rejected.GetState() != agwpv1.ChangeState_CHANGE_STATE_REJECTED || !strings.Contains(rejected.GetReason(), "exited with status 1") ||
				!strings.Contains(rejected.GetReason(), "--- FAIL: TestB") || mainline(t, alice, "app") != passed {
				t.Fatalf("failed change = %v (reason %q), mainline %s: want REJECTED with the output, mainline %s", rejected.GetState(), rejected.GetReason(), mainline(t, alice, "app"), passed)
			}
			// The signed FAILED attestation the rejection rests on is the change's evidence.
			if failedJob := getJob(t, alice, cl2.Job.GetId()); rejected.GetAttestationDigest() == "" || rejected.GetAttestationDigest() != failedJob.GetAttestationDigest() {
				t.Fatalf("rejected change's attestation %q, want the failing job's %q", rejected.GetAttestationDigest(), failedJob.GetAttestationDigest())
			}
		})
	}
}

func with(v attest.Validation, edit func(*attest.Validation)) attest.Validation {
	edit(&v)
	return v
}

func waitState(t *testing.T, c *client.Client, id string, want agwpv1.ChangeState) *agwpv1.Change {
	t.Helper()
	var ch *agwpv1.Change
	waitFor(t, func() bool {
		res, err := c.Repos.GetChange(context.Background(), &agwpv1.GetChangeRequest{ChangeId: id})
		if err != nil {
			t.Fatal(err)
		}
		ch = res.GetChange()
		return ch.GetState() == want
	})
	return ch
}

// TestWatchChangeFollowsTheQueue ensures that WatchChange streams a change through queued,
// validating with the worker's progress, and integrated, and then ends.
func TestWatchChangeFollowsTheQueue(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			if _, err := srv.Admin.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "app",
				Validation: &agwpv1.Validation{Command: []string{"make", "check"}}}); err != nil {
				t.Fatal(err)
			}
			alice := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
			ci := newValidator(t, srv, "ci")
			change := integrateFile(t, alice, "app", "w1", "a.txt", "a\n")

			stream, err := alice.Repos.WatchChange(ctx, &agwpv1.WatchChangeRequest{ChangeId: change.GetId()})
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			var seen []string
			next := func() *agwpv1.Change {
				t.Helper()
				if !stream.Receive() {
					t.Fatalf("stream ended after %v: %v", seen, stream.Err())
				}
				ch := stream.Msg().GetChange()
				seen = append(seen, fmt.Sprintf("%s/%s", ch.GetState(), ch.GetProgress()))
				return ch
			}
			first := next()
			for first.GetState() == agwpv1.ChangeState_CHANGE_STATE_QUEUED {
				first = next()
			}
			if first.GetState() != agwpv1.ChangeState_CHANGE_STATE_VALIDATING || first.GetProgress() != "waiting for a worker" {
				t.Fatalf("first validating message = %v/%q, want waiting for a worker", first.GetState(), first.GetProgress())
			}
			cl, p := ci.claim()
			if _, err := cl.Heartbeat(ctx, "running make check: 3/7 packages"); err != nil {
				t.Fatal(err)
			}
			for ch := next(); !strings.Contains(ch.GetProgress(), "3/7 packages"); ch = next() {
			}
			if _, err := ci.complete(cl, ci.statement(cl, p, attest.ResultPassed), "ok\n"); err != nil {
				t.Fatal(err)
			}
			last := next()
			for last.GetState() == agwpv1.ChangeState_CHANGE_STATE_VALIDATING {
				last = next()
			}
			if last.GetState() != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED {
				t.Fatalf("final message %v, saw %v", last.GetState(), seen)
			}
			if stream.Receive() {
				t.Fatalf("stream goes on after the final state: %v", stream.Msg())
			}
		})
	}
}

// TestIntegrationQueueKeepsOrder ensures that with 8 agents integrating at once, every change
// is validated and integrated once, in the order the queue took them, and the mainline's
// history is exactly that order.
func TestIntegrationQueueKeepsOrder(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			if _, err := srv.Admin.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "app",
				Validation: &agwpv1.Validation{Command: []string{"true"}}}); err != nil {
				t.Fatal(err)
			}
			ci := newValidator(t, srv, "ci")
			const agents, each = 8, 3
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				changes []string
			)
			for a := range agents {
				c := srv.Principal(t, fmt.Sprintf("agent%d", a), agwpv1.Role_ROLE_AGENT)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						ch := integrateFile(t, c, "app", "w", fmt.Sprintf("agent%d/file%d.txt", a, i), "x\n")
						mu.Lock()
						changes = append(changes, ch.GetId())
						mu.Unlock()
					}
				}()
			}
			// The worker validates whatever comes, in the order it comes.
			var validated []string
			for len(validated) < agents*each {
				cl, p := ci.claim()
				validated = append(validated, p.Change)
				if _, err := ci.complete(cl, ci.statement(cl, p, attest.ResultPassed), ""); err != nil {
					t.Fatalf("complete %s: %v", cl.Job.GetId(), err)
				}
			}
			wg.Wait()
			for _, id := range changes {
				if ch := waitChange(t, ci.c, id); ch.GetState() != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED {
					t.Fatalf("change %s ended %v: %s", id, ch.GetState(), ch.GetReason())
				}
			}
			// The queue's order is the order of creation (ListChanges is newest first).
			res, err := ci.c.Repos.ListChanges(ctx, &agwpv1.ListChangesRequest{Repository: "app", PageSize: 100})
			if err != nil {
				t.Fatal(err)
			}
			var queueOrder []string
			for _, ch := range slices.Backward(res.GetChanges()) {
				queueOrder = append(queueOrder, ch.GetId())
			}
			if !slices.Equal(validated, queueOrder) {
				t.Fatalf("validated in order %v, queue order %v", validated, queueOrder)
			}
			// The mainline's history, newest first, is the queue order reversed.
			var history []string
			for rev := mainline(t, ci.c, "app"); ; {
				tree, err := srv.Admin.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: "app", Revision: rev})
				if err != nil {
					t.Fatal(err)
				}
				if tree.GetChangeId() == "" {
					break
				}
				history = append(history, tree.GetChangeId())
				rev = tree.GetParent()
			}
			slices.Reverse(history)
			if !slices.Equal(history, queueOrder) {
				t.Fatalf("mainline history %v, queue order %v", history, queueOrder)
			}
		})
	}
}

// TestSetValidation ensures that only an admin sets a policy, that a bad one is refused naming
// the field, and that removing it integrates queued changes at once.
func TestSetValidation(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			createRepo(t, srv, "app")
			alice := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)

			_, err := alice.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{Repository: "app", Validation: &agwpv1.Validation{Command: []string{"true"}}})
			wantCode(t, "an agent sets a policy", err, connect.CodePermissionDenied)
			for _, bad := range []struct {
				v     *agwpv1.Validation
				field string
			}{
				{&agwpv1.Validation{}, "validation.command"},
				{&agwpv1.Validation{Command: []string{""}}, "validation.command[0]"},
				{&agwpv1.Validation{Command: []string{"true"}, Timeout: durationpb.New(48 * time.Hour)}, "validation.timeout"},
				{&agwpv1.Validation{Command: []string{"true"}, Env: map[string]string{"A=B": "c"}}, "validation.env"},
				{&agwpv1.Validation{Command: []string{"true"}, Depth: 100}, "validation.depth: 100 is out of range"},
				{&agwpv1.Validation{Command: []string{"true"}, Batch: 1 << 31}, "validation.batch: 2147483648 is out of range"},
				{&agwpv1.Validation{Command: []string{"true"}, Network: "shared"}, `validation.network: "shared" is none of "none" (the default) and "egress"`},
			} {
				_, err := srv.Admin.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{Repository: "app", Validation: bad.v})
				wantCode(t, "policy "+bad.v.String(), err, connect.CodeInvalidArgument)
				if !strings.Contains(err.Error(), bad.field) {
					t.Fatalf("refusal %q does not name %s", err, bad.field)
				}
			}
			_, err = srv.Admin.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{Repository: "nope", Validation: &agwpv1.Validation{Command: []string{"true"}}})
			wantCode(t, "policy of an unknown repository", err, connect.CodeNotFound)

			res, err := srv.Admin.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{Repository: "app",
				Validation: &agwpv1.Validation{Command: []string{"true"}, Depth: 3, Batch: 4}})
			if v := res.GetRepository().GetValidation(); err != nil || v.GetDepth() != 3 || v.GetBatch() != 4 || v.GetNetwork() != "none" {
				t.Fatalf("set a policy of depth 3 in batches of 4, with no network by default: %v, %v", res, err)
			}
			res, err = srv.Admin.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{Repository: "app",
				Validation: &agwpv1.Validation{Command: []string{"true"}, Network: "egress"}})
			if v := res.GetRepository().GetValidation(); err != nil || v.GetNetwork() != "egress" {
				t.Fatalf("set a policy with egress: %v, %v", res, err)
			}
			res, err = srv.Admin.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{Repository: "app", Validation: &agwpv1.Validation{Command: []string{"true"}}})
			if err != nil || res.GetRepository().GetValidation().GetTimeout().AsDuration() != 10*time.Minute {
				t.Fatalf("set policy: %v, %v (want the default timeout of 10m)", res, err)
			}
			first := integrateFile(t, alice, "app", "w1", "a.txt", "a\n")
			validating := waitState(t, alice, first.GetId(), agwpv1.ChangeState_CHANGE_STATE_VALIDATING)
			second := integrateFile(t, alice, "app", "w1", "c.txt", "c\n")
			if second.GetState() != agwpv1.ChangeState_CHANGE_STATE_QUEUED {
				t.Fatalf("integrate behind a validating change: %v", second.GetState())
			}
			res, err = srv.Admin.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{Repository: "app"})
			if err != nil || res.GetRepository().GetValidation() != nil {
				t.Fatalf("remove policy: %v, %v", res, err)
			}
			// The validating change waits for its job; cancelling the job cancels the change,
			// and the change queued behind it integrates without validation.
			if _, err := srv.Admin.Jobs.CancelJob(ctx, &agwpv1.CancelJobRequest{JobId: validating.GetJobId()}); err != nil {
				t.Fatal(err)
			}
			if ch := waitChange(t, alice, first.GetId()); ch.GetState() != agwpv1.ChangeState_CHANGE_STATE_CANCELLED {
				t.Fatalf("change whose validate job was cancelled: %v", ch.GetState())
			}
			if ch := waitChange(t, alice, second.GetId()); ch.GetState() != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED || ch.GetAttestationDigest() != "" {
				t.Fatalf("queued change after the policy was removed: %v", ch)
			}
			direct := integrateFile(t, alice, "app", "w1", "b.txt", "b\n")
			if direct.GetState() != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED {
				t.Fatalf("integrate without a policy: %v", direct.GetState())
			}
		})
	}
}
