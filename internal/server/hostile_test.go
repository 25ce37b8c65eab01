package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/postgres"
	"github.com/ag-coord/ag/internal/testutil/agtest"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// These tests are the attacks of a hostile agent (or of anyone who can open a connection) on
// the server, each made as the attacker would make it.

// TestNobodyEnqueuesAValidateJob ensures the kinds the server starts cannot be enqueued through
// EnqueueJob, by an agent or by an admin: a validate job of the agent's own making was how an
// agent got a command of its choosing run on a validation worker, beside the worker's key.
func TestNobodyEnqueuesAValidateJob(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			agent := srv.Principal(t, "mallory", agwpv1.Role_ROLE_AGENT)
			payload, err := structpb.NewStruct(map[string]any{
				"repository": "app", "command": []any{"sh", "-c", "cat /proc/$PPID/environ"},
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, kind := range []string{"validate", "validate.batch", "ag.gate.speculate"} {
				for who, c := range map[string]*client.Client{"agent": agent, "admin": srv.Admin} {
					_, err := c.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: kind, Payload: payload})
					wantCode(t, who+" enqueues "+kind, err, connect.CodePermissionDenied)
					if msg := err.Error(); !strings.Contains(msg, `"`+kind+`"`) || !strings.Contains(msg, "reserved") {
						t.Fatalf("%s enqueues %s: message %q does not name the kind as reserved", who, kind, msg)
					}
				}
			}
			// Kinds that only look alike are anyone's.
			for _, kind := range []string{"ag.noop", "validated", "revalidate"} {
				if _, err := agent.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: kind}); err != nil {
					t.Fatalf("enqueue %s: %v", kind, err)
				}
			}
			jobs, err := srv.Admin.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{Kinds: []string{"validate"}})
			if err != nil {
				t.Fatal(err)
			}
			if n := len(jobs.GetJobs()); n != 0 {
				t.Fatalf("%d validate jobs exist after the refusals, want 0", n)
			}
		})
	}
}

// TestReservedPathsAreRefusedWhereverAPathEnters ensures no lease, Integrate or import puts a
// .git or .ag file into a repository (which `ag checkout` would write into every checkout,
// where git and ag read their configuration), nor a name no file system holds.
func TestReservedPathsAreRefusedWhereverAPathEnters(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			base := createRepo(t, srv, "app").GetMainline()
			agent := srv.Principal(t, "mallory", agwpv1.Role_ROLE_AGENT)
			okLease := acquire(t, agent, "app", "w", time.Minute, "ok.txt")
			long := strings.Repeat("x", 300)
			attacks := map[string]string{
				".ag/checkout.json":                    "no repository may hold a .ag directory",
				".git/config":                          "no repository may hold a .git directory",
				".Git/info/exclude":                    "no repository may hold a .git directory",
				"vendor/lib/.GIT/hooks/post":           "no repository may hold a .git directory",
				"GIT~1/config":                         "no repository may hold a .git directory",
				"src/" + long + "/a.go":                "has a segment of 300 bytes, more than 255",
				strings.Repeat("abcdefgh/", 460) + "x": "more than 4096",
			}
			for path, rule := range attacks {
				short := path[:min(len(path), 30)]
				_, err := agent.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{path}, Holder: "w"})
				wantCode(t, "lease "+short, err, connect.CodeInvalidArgument)
				if !strings.Contains(err.Error(), rule) {
					t.Fatalf("lease %s: %q does not give the rule %q", short, err, rule)
				}
				// The import of a folder is an Integrate by the admin, who needs no lease.
				for who, c := range map[string]*client.Client{"agent": agent, "admin (import)": srv.Admin} {
					_, err = c.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{Repository: "app", BaseRevision: base, Holder: "w", Message: "plant",
						FencingTokens: []uint64{okLease.GetFencingToken()},
						Edits:         []*agwpv1.Edit{write("ok.txt", "fine"), write(path, "[core]\n\tfsmonitor = touch /tmp/pwned\n")}})
					wantCode(t, who+" integrates "+short, err, connect.CodeInvalidArgument)
					if msg := err.Error(); !strings.Contains(msg, rule) || !strings.Contains(msg, "edits[1].path") {
						t.Fatalf("%s integrates %s: %q does not name the edit and the rule %q", who, short, msg, rule)
					}
				}
			}
			if _, found := mainlineFile(t, srv.Admin, "app", "ok.txt"); found {
				t.Fatal("a refused Integrate changed the mainline")
			}
			// A name that only starts like a reserved one is an ordinary file.
			fine := acquire(t, agent, "app", "w", time.Minute, ".gitignore", ".github/")
			if _, err := agent.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{Repository: "app", BaseRevision: base, Holder: "w", Message: "ok",
				FencingTokens: []uint64{fine.GetFencingToken()},
				Edits:         []*agwpv1.Edit{write(".gitignore", "*.o\n"), write(".github/ci.yml", "on: push\n")}}); err != nil {
				t.Fatalf("integrate .gitignore and .github/: %v", err)
			}
		})
	}
}

// nested answers a payload of depth objects inside each other.
func nested(depth int) *structpb.Struct {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{"leaf": structpb.NewBoolValue(true)}}
	for range depth - 1 {
		s = &structpb.Struct{Fields: map[string]*structpb.Value{"n": structpb.NewStructValue(s)}}
	}
	return s
}

// TestDeepPayloadsAreRefusedAtTheEdge ensures a payload or result nested thousands deep is
// refused when it is sent, instead of being stored and then failing every caller's job list
// and every worker that claims it.
func TestDeepPayloadsAreRefusedAtTheEdge(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			agent := srv.Principal(t, "mallory", agwpv1.Role_ROLE_AGENT)
			for _, depth := range []int{65, 1000, 3000} {
				_, err := agent.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "ag.noop", Payload: nested(depth)})
				wantCode(t, fmt.Sprintf("enqueue a payload %d deep", depth), err, connect.CodeInvalidArgument)
				if !strings.Contains(err.Error(), "payload: nests objects and lists more than 64 deep") {
					t.Fatalf("depth %d: %q does not name the field and the limit", depth, err)
				}
			}
			// Deeper than protobuf decodes at all, in JSON as curl would send it.
			deep := strings.Repeat(`{"n":`, 9990) + "1" + strings.Repeat("}", 9990)
			res := post(t, srv.URL, "/agwp.v1.JobService/EnqueueJob", strings.NewReader(`{"kind":"ag.noop","payload":`+deep+`}`), -1,
				http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + srv.AdminToken}})
			if code := connectCode(t, res); code != "invalid_argument" {
				t.Fatalf("a JSON payload 9,990 deep: %s, want invalid_argument", code)
			}
			list := structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStructValue(nested(64))}})
			_, err := agent.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "ag.noop",
				Payload: &structpb.Struct{Fields: map[string]*structpb.Value{"l": list}}})
			wantCode(t, "a payload 66 deep through a list", err, connect.CodeInvalidArgument)

			if _, err := agent.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "ag.noop", Payload: nested(64)}); err != nil {
				t.Fatalf("enqueue a payload 64 deep: %v", err)
			}
			worker := srv.Principal(t, "builder", agwpv1.Role_ROLE_WORKER)
			claimed, err := worker.Claim(ctx, client.ClaimOptions{Worker: "w", Wait: time.Second})
			if err != nil || claimed == nil {
				t.Fatalf("claim the 64-deep job: %v, %v", claimed, err)
			}
			_, err = worker.Jobs.CompleteJob(ctx, &agwpv1.CompleteJobRequest{JobId: claimed.Job.GetId(), Worker: "w",
				FencingToken: uint64(claimed.Job.GetAttempts()), Result: nested(200)})
			wantCode(t, "complete with a result 200 deep", err, connect.CodeInvalidArgument)
			if !strings.Contains(err.Error(), "result: nests") {
				t.Fatalf("deep result: %q does not name the field", err)
			}
			for who, c := range map[string]*client.Client{"agent": agent, "worker": worker, "admin": srv.Admin} {
				if _, err := c.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{}); err != nil {
					t.Fatalf("%s lists jobs after the attack: %v", who, err)
				}
			}
		})
	}
}

// post sends body to procedure with the headers given, as a raw HTTP client would.
func post(t *testing.T, url, procedure string, body io.Reader, size int64, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+procedure, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	req.Header = header
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post %s: %v", procedure, err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// connectCode reads the code of a Connect unary error answer.
func connectCode(t *testing.T, res *http.Response) string {
	t.Helper()
	b, _ := io.ReadAll(res.Body)
	for _, code := range []string{"unauthenticated", "permission_denied", "resource_exhausted", "invalid_argument", "deadline_exceeded", "unavailable"} {
		if bytes.Contains(b, []byte(`"code":"`+code+`"`)) {
			return code
		}
	}
	return fmt.Sprintf("HTTP %d: %s", res.StatusCode, b)
}

// heldBody offers random bytes up to offered of a declared size, then holds back the rest until
// the test ends.
type heldBody struct {
	offered int64
	sent    atomic.Int64
	release chan struct{}
}

func (b *heldBody) Read(p []byte) (int, error) {
	sent := b.sent.Load()
	if sent >= b.offered {
		<-b.release
		return 0, io.ErrUnexpectedEOF
	}
	n := int(min(int64(len(p)), b.offered-sent))
	_, _ = rand.Read(p[:n])
	b.sent.Add(int64(n))
	return n, nil
}

// postHeld posts a body declared as declared bytes of which only offered arrive, and answers
// the server's answer, or "" if none comes while the rest is held back.
func postHeld(t *testing.T, url, procedure string, header http.Header, declared, offered int64) (*heldBody, <-chan string) {
	t.Helper()
	body := &heldBody{offered: offered, release: make(chan struct{})}
	t.Cleanup(func() { close(body.release) })
	answered := make(chan string, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, url+procedure, body)
		if err != nil {
			answered <- err.Error()
			return
		}
		req.ContentLength = declared
		req.Header = header
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- "no answer: " + err.Error()
			return
		}
		defer res.Body.Close()
		answered <- connectCode(t, res)
	}()
	return body, answered
}

// answerWithin answers what the server said, failing when it said nothing in 10 s: a server
// waiting for a body the client holds back.
func answerWithin(t *testing.T, what string, answered <-chan string) string {
	t.Helper()
	select {
	case a := <-answered:
		return a
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer after 10 s: the server waits for the body instead of refusing it", what)
		return ""
	}
}

// waitUntil waits for cond, failing the test after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		<-tick.C
	}
}

// TestRequestsWithoutATokenAreRefusedBeforeTheirBody ensures random bytes without a token are
// unauthenticated (not a decoding error), and that a 63 MiB upload without a token is refused
// before the server has read it: the answer comes while the client still holds back the body.
func TestRequestsWithoutATokenAreRefusedBeforeTheirBody(t *testing.T) {
	srv := agtest.Start(t, agtest.Options{})
	garbage := make([]byte, 4096)
	_, _ = rand.Read(garbage)
	for _, ct := range []string{"application/proto", "application/json"} {
		res := post(t, srv.URL, "/agwp.v1.JobService/EnqueueJob", bytes.NewReader(garbage), int64(len(garbage)),
			http.Header{"Content-Type": {ct}})
		if code := connectCode(t, res); code != "unauthenticated" {
			t.Fatalf("random %s bytes without a token: %s, want unauthenticated", ct, code)
		}
	}
	res := post(t, srv.URL, "/agwp.v1.JobService/EnqueueJob", bytes.NewReader(garbage), int64(len(garbage)),
		http.Header{"Content-Type": {"application/grpc"}, "Te": {"trailers"}})
	_, _ = io.ReadAll(res.Body)
	if status := res.Header.Get("Grpc-Status") + res.Trailer.Get("Grpc-Status"); status != "16" {
		t.Fatalf("gRPC without a token: grpc-status %q, want 16 (unauthenticated)", status)
	}

	for _, token := range []string{"", "Bearer agt_forged"} {
		_, answered := postHeld(t, srv.URL, "/agwp.v1.RepositoryService/UploadBlobs",
			http.Header{"Content-Type": {"application/proto"}, "Authorization": {token}}, 63<<20, 1<<20)
		if code := answerWithin(t, "63 MiB upload with token "+token, answered); code != "unauthenticated" {
			t.Fatalf("63 MiB upload with token %q: %s, want unauthenticated", token, code)
		}
	}
}

// TestLargeUploadsAreBoundedPerPrincipal ensures one principal cannot hold more large uploads
// open than its share, that a declared size over the limit is refused unread, and that another
// principal is not held back by the first.
func TestLargeUploadsAreBoundedPerPrincipal(t *testing.T) {
	srv := agtest.Start(t, agtest.Options{UploadsPerPrincipal: 2})
	token := func(name string) string {
		res, err := srv.Admin.Admin.CreatePrincipal(context.Background(), &agwpv1.CreatePrincipalRequest{Name: name, Role: agwpv1.Role_ROLE_AGENT})
		if err != nil {
			t.Fatal(err)
		}
		return res.GetToken()
	}
	mallory, alice := token("mallory"), token("alice")
	headers := http.Header{"Content-Type": {"application/proto"}, "Authorization": {"Bearer " + mallory}}
	const upload = "/agwp.v1.RepositoryService/UploadBlobs"

	_, answered := postHeld(t, srv.URL, upload, headers, 1<<30, 0)
	if code := answerWithin(t, "a declared 1 GiB upload", answered); code != "resource_exhausted" {
		t.Fatalf("a declared 1 GiB upload: %s, want resource_exhausted", code)
	}

	// Two uploads held open: 8 MiB declared, 1 MiB sent, each holding its slot once the server
	// has taken it (the client's sending says nothing of that: the socket buffers it).
	var held []<-chan string
	for i := range 2 {
		_, answered := postHeld(t, srv.URL, upload, headers, 8<<20, 1<<20)
		held = append(held, answered)
		waitUntil(t, fmt.Sprintf("the server holds %d large uploads", i+1), func() bool { return srv.LargeUploads() == i+1 })
	}
	_, answered = postHeld(t, srv.URL, upload, headers, 4<<20, 0)
	if code := answerWithin(t, "mallory's third large upload", answered); code != "resource_exhausted" {
		t.Fatalf("mallory's third large upload: %s, want resource_exhausted", code)
	}
	ok := client.New(srv.URL, alice, client.WithRetries(0, 0))
	if _, err := ok.Repos.UploadBlobs(context.Background(), &agwpv1.UploadBlobsRequest{Blobs: [][]byte{bytes.Repeat([]byte("a"), 2<<20)}}); err != nil {
		t.Fatalf("alice's upload while mallory holds hers: %v", err)
	}
	for _, answered := range held {
		select {
		case a := <-answered:
			t.Fatalf("a held upload was answered early: %s", a)
		default:
		}
	}

	// The limit itself is taken: alice's upload declaring it takes a slot, one byte more is
	// refused unread.
	aliceHeaders := http.Header{"Content-Type": {"application/proto"}, "Authorization": {"Bearer " + alice}}
	const limit = 72 << 20
	_, answered = postHeld(t, srv.URL, upload, aliceHeaders, limit+1, 0)
	if code := answerWithin(t, "an upload declaring a byte over the limit", answered); code != "resource_exhausted" {
		t.Fatalf("an upload declaring a byte over the limit: %s, want resource_exhausted", code)
	}
	postHeld(t, srv.URL, upload, aliceHeaders, limit, 0)
	waitUntil(t, "the server holds alice's upload of the limit", func() bool { return srv.LargeUploads() == 3 })
}

// TestSlowBodiesAreCut ensures a body that stalls, or trickles a byte at a time, does not hold
// its connection and handler for as long as the client likes, while a long poll, whose request
// was read at once, waits its whole wait.
func TestSlowBodiesAreCut(t *testing.T) {
	srv := agtest.Start(t, agtest.Options{BodyIdleTimeout: 200 * time.Millisecond, BodyTimeout: 500 * time.Millisecond})
	res, err := srv.Admin.Admin.CreatePrincipal(context.Background(), &agwpv1.CreatePrincipalRequest{Name: "slow", Role: agwpv1.Role_ROLE_AGENT})
	if err != nil {
		t.Fatal(err)
	}
	header := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + res.GetToken()}}

	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) }) // the client side of a stalled body gives up with the test
	for name, body := range map[string]io.Reader{
		"stalled":   &trickle{payload: []byte(`{"kind": "ag.noop"}`), every: time.Hour, stop: stop},
		"trickling": &trickle{payload: []byte(`{"kind": "ag.noop", "payload": {"pad": "` + strings.Repeat("x", 100) + `"}}`), every: 50 * time.Millisecond, stop: stop},
	} {
		answered := make(chan string, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/agwp.v1.JobService/EnqueueJob", body)
			req.Header = header
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				answered <- "connection closed: " + err.Error()
				return
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			answered <- string(b)
		}()
		select {
		case a := <-answered:
			if !strings.Contains(a, "deadline_exceeded") && !strings.Contains(a, "connection closed") {
				t.Fatalf("%s body: answered %s, want deadline_exceeded", name, a)
			}
		case <-time.After(15 * time.Second): // far beyond the limits: the server held on
			t.Fatalf("%s body: no answer after 15 s with a body deadline of 0.5 s", name)
		}
	}

	// A body that keeps four times the slowest pace is read whole, past its first body timeout:
	// 256 KiB in 16 KiB every 62 ms, a second where the pace asks 4 s.
	steady := &trickle{payload: []byte(`{"kind": "ag.noop", "payload": {"pad": "` + strings.Repeat("x", 256<<10) + `"}}`),
		chunk: 16 << 10, every: 62 * time.Millisecond, stop: stop}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/agwp.v1.JobService/EnqueueJob", steady)
	req.Header = header
	if res, err := http.DefaultClient.Do(req); err != nil {
		t.Fatalf("a steady body: %v", err)
	} else {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("a steady body of 256 KiB at four times the slowest pace: %s %s", res.Status, b)
		}
	}

	worker := srv.Principal(t, "builder", agwpv1.Role_ROLE_WORKER)
	start := time.Now()
	claimed, err := worker.Claim(context.Background(), client.ClaimOptions{Worker: "w", Kinds: []string{"nothing.here"}, Wait: 1500 * time.Millisecond})
	if err != nil || claimed != nil {
		t.Fatalf("a long poll with a body deadline of 0.5 s: %v, %v; want no job and no error", claimed, err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("the long poll of 1.5 s ended after %s: the body deadline cut it", waited)
	}
}

// trickle sends payload one byte (or chunk bytes) every every, until stop is closed.
type trickle struct {
	payload []byte
	chunk   int
	every   time.Duration
	sent    int
	stop    <-chan struct{}
}

func (b *trickle) Read(p []byte) (int, error) {
	if b.sent >= len(b.payload) {
		return 0, io.EOF
	}
	if b.sent > 0 {
		select {
		case <-time.After(b.every):
		case <-b.stop:
			return 0, io.ErrUnexpectedEOF
		}
	}
	n := copy(p[:min(len(p), max(b.chunk, 1))], b.payload[b.sent:])
	b.sent += n
	return n, nil
}

// TestDatabaseFailuresAreUnavailableWithoutDetails ensures that when the database is gone,
// clients are told to retry (unavailable, which the SDK retries) and are not told where the
// database is or who the server connects as, nor is anyone who asks /readyz.
func TestDatabaseFailuresAreUnavailableWithoutDetails(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := agtest.OpenStore(t, backend, nil)
			srv := agtest.Serve(t, st, agtest.Options{Backend: backend})
			agent := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
			if _, err := agent.Admin.WhoAmI(ctx, &agwpv1.WhoAmIRequest{}); err != nil {
				t.Fatal(err) // alice's token is now in the auth cache, the admin's is too
			}
			newcomer := srv.Principal(t, "bob", agwpv1.Role_ROLE_AGENT)
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			for what, call := range map[string]func() error{
				"a write": func() error {
					_, err := agent.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "ag.noop"})
					return err
				},
				"a read":                         func() error { _, err := agent.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{}); return err },
				"an uncached token's first call": func() error { _, err := newcomer.Admin.WhoAmI(ctx, &agwpv1.WhoAmIRequest{}); return err },
			} {
				err := call()
				wantCode(t, what, err, connect.CodeUnavailable)
				msg := err.Error()
				if !strings.Contains(msg, "the database is unavailable") {
					t.Fatalf("%s: %q does not say the database is unavailable", what, msg)
				}
				var ce *connect.Error
				if !errors.As(err, &ce) || ce.Meta().Get("Ag-Retry-Safe") != "true" {
					t.Errorf("%s on a closed store: no Ag-Retry-Safe: true, though nothing was applied", what)
				}
				for _, leak := range []string{"postgres", "sqlite", "user=", "ag.db", "127.0.0.1", "closed pool", "sql:"} {
					if strings.Contains(strings.ToLower(msg), leak) {
						t.Fatalf("%s: the client is told %q, which names %q", what, msg, leak)
					}
				}
			}
			res, err := http.Get(srv.URL + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(b), "postgres") || strings.Contains(string(b), "user=") || strings.Contains(string(b), ".db") {
				t.Fatalf("/readyz with the database gone: %d %q", res.StatusCode, b)
			}
		})
	}
}

// TestAPostgreSQLOutageIsUnavailableAndPasses ensures that while PostgreSQL refuses the
// server (its connections ended by an administrator, new ones refused, as in a restart) every
// call answers unavailable without the connection's details, and that calls succeed again
// once the database is back, with no restart of ag.
func TestAPostgreSQLOutageIsUnavailableAndPasses(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	st, err := postgres.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	srv := agtest.Serve(t, st, agtest.Options{Backend: "postgres"})
	agent := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
	if _, err := agent.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "ag.noop"}); err != nil {
		t.Fatal(err)
	}

	admin, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	outage := func(down bool) {
		t.Helper()
		if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS %t", name, !down)); err != nil {
			t.Fatal(err)
		}
		if down {
			if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name); err != nil {
				t.Fatal(err)
			}
		}
	}
	outage(true)
	// The pool's ended connections first (a write on one may or may not have applied, so no
	// Ag-Retry-Safe), then refused new ones (nothing was sent: safe to send again).
	refused := false
	for i := 0; i < 20 && !refused; i++ {
		_, err := agent.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "ag.noop"})
		wantCode(t, fmt.Sprintf("enqueue %d during the outage", i), err, connect.CodeUnavailable)
		if msg := err.Error(); strings.Contains(msg, name) || strings.Contains(msg, "user=") || strings.Contains(msg, "FATAL") {
			t.Fatalf("enqueue during the outage: the client is told %q", msg)
		}
		var ce *connect.Error
		refused = errors.As(err, &ce) && ce.Meta().Get("Ag-Retry-Safe") == "true"
	}
	if !refused {
		t.Fatal("no answer during the outage said Ag-Retry-Safe, though new connections are refused before anything is sent")
	}
	outage(false)
	// Connections the pool still holds from before the outage fail once each, as unavailable;
	// then the server is back, with no restart of ag.
	for i := 0; i < 20; i++ {
		if _, err = agent.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "ag.noop"}); err == nil {
			return
		}
		wantCode(t, fmt.Sprintf("enqueue %d after the outage", i), err, connect.CodeUnavailable)
	}
	t.Fatalf("enqueue after the outage: %v", err)
}

// TestMadeUpProceduresCostNothing ensures paths that only look like AGWP procedures are
// answered 404 without a token being asked for, and leave no trace in the metrics: each refused
// path used to become a metrics series of its own, for ever.
func TestMadeUpProceduresCostNothing(t *testing.T) {
	srv := agtest.Start(t, agtest.Options{})
	for i := range 300 {
		res := post(t, srv.URL, fmt.Sprintf("/agwp.v1.Made%dService/Up", i), strings.NewReader("{}"), 2, http.Header{"Content-Type": {"application/json"}})
		_, _ = io.ReadAll(res.Body)
		if res.StatusCode != http.StatusNotFound {
			t.Fatalf("made-up procedure %d: HTTP %d, want 404", i, res.StatusCode)
		}
	}
	res, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	metrics, _ := io.ReadAll(res.Body)
	if strings.Contains(string(metrics), "Made1Service") {
		t.Fatal("/metrics holds a series for a made-up procedure")
	}
	// A real procedure without a token is still unauthenticated.
	res = post(t, srv.URL, "/agwp.v1.JobService/ListJobs", strings.NewReader("{}"), 2, http.Header{"Content-Type": {"application/json"}})
	if code := connectCode(t, res); code != "unauthenticated" {
		t.Fatalf("ListJobs without a token: %s", code)
	}
}

// TestACompressedUploadTakesASlot ensures a small compressed body, which may decompress to the
// whole content limit, counts as a large upload: otherwise one principal could have any number
// of 72 MiB decompressions in flight.
func TestACompressedUploadTakesASlot(t *testing.T) {
	srv := agtest.Start(t, agtest.Options{UploadsPerPrincipal: 1})
	res, err := srv.Admin.Admin.CreatePrincipal(context.Background(), &agwpv1.CreatePrincipalRequest{Name: "mallory", Role: agwpv1.Role_ROLE_AGENT})
	if err != nil {
		t.Fatal(err)
	}
	headers := http.Header{"Content-Type": {"application/proto"}, "Authorization": {"Bearer " + res.GetToken()}}
	postHeld(t, srv.URL, "/agwp.v1.RepositoryService/UploadBlobs", headers, 8<<20, 1<<20)
	waitUntil(t, "the server holds the one large upload", func() bool { return srv.LargeUploads() == 1 })
	gz := http.Header{"Content-Encoding": {"gzip"}}
	for k, v := range headers {
		gz[k] = v
	}
	_, answered := postHeld(t, srv.URL, "/agwp.v1.RepositoryService/UploadBlobs", gz, 60<<10, 0)
	if code := answerWithin(t, "a compressed upload while the slot is taken", answered); code != "resource_exhausted" {
		t.Fatalf("a 60 KiB gzip upload while the principal's one slot is taken: %s, want resource_exhausted", code)
	}
}

// TestEdgeClosesTheConnectionOfARefusedBodyOnly holds that a refusal answered before a body was
// read ends the HTTP/1 connection, so that the client's body is not drained by the server; a
// refused request without a body keeps its connection for the next.
func TestEdgeClosesTheConnectionOfARefusedBodyOnly(t *testing.T) {
	srv := agtest.Start(t, agtest.Options{})
	for _, tc := range []struct {
		body  string
		close bool
	}{{"", false}, {"0123456789", true}} {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/agwp.v1.JobService/ClaimJob", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/proto")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized || res.Close != tc.close {
			t.Errorf("a request of %d bytes without a token: %s, connection closed: %v; want 401, closed: %v",
				len(tc.body), res.Status, res.Close, tc.close)
		}
	}
}
