package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/durationpb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/cli"
	agmcp "github.com/ag-coord/ag/internal/mcp"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// mcpAgentSession is one agent's MCP session with `ag mcp`'s server, in process, and every
// text it was answered, so that a test can check none holds the agent's token.
type mcpAgentSession struct {
	t     *testing.T
	cs    *mcp.ClientSession
	dir   string
	token string
	mu    sync.Mutex
	seen  []string
}

// startMCPAgent connects the SDK's client to the MCP server of the agent with token in the
// checkout dir, over in-memory transports.
func startMCPAgent(t *testing.T, serverURL, token, dir string) *mcpAgentSession {
	t.Helper()
	return startMCPAgentWith(t, serverURL, token, dir, nil)
}

func startMCPAgentWith(t *testing.T, serverURL, token, dir string, opts *mcp.ClientOptions) *mcpAgentSession {
	t.Helper()
	ctx := context.Background()
	srv, err := agmcp.NewServer(dir, serverURL, token)
	if err != nil {
		t.Fatalf("MCP server for %s: %v", dir, err)
	}
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "ag-test", Version: "1"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return &mcpAgentSession{t: t, cs: cs, dir: dir, token: token}
}

// call calls a tool and answers its result, failing the test on a protocol error.
func (s *mcpAgentSession) call(name string, args any) *mcp.CallToolResult {
	s.t.Helper()
	res, err := s.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		s.t.Fatalf("%s: %v", name, err)
	}
	b, _ := json.Marshal(res)
	s.mu.Lock()
	s.seen = append(s.seen, string(b))
	s.mu.Unlock()
	return res
}

// ok calls a tool that must succeed and decodes its structured output into out.
func (s *mcpAgentSession) ok(name string, args, out any) {
	s.t.Helper()
	res := s.call(name, args)
	if res.IsError {
		s.t.Fatalf("%s(%v): tool error: %s", name, args, resultText(res))
	}
	decodeStructured(s.t, name, res, out)
}

// refused calls a tool that must fail and answers its text, which must hold every one of want.
func (s *mcpAgentSession) refused(name string, args any, want ...string) string {
	s.t.Helper()
	res := s.call(name, args)
	text := resultText(res)
	if !res.IsError {
		s.t.Fatalf("%s(%v) succeeded, want a tool error: %s", name, args, text)
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			s.t.Errorf("%s(%v): the error %q does not say %q", name, args, text, w)
		}
	}
	return text
}

// read reads a resource and answers its text, recording it.
func (s *mcpAgentSession) read(uri string) (string, error) {
	res, err := s.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.seen = append(s.seen, err.Error())
		return "", err
	}
	b, _ := json.Marshal(res)
	s.seen = append(s.seen, string(b))
	if len(res.Contents) != 1 {
		s.t.Fatalf("read %s: %d contents, want 1", uri, len(res.Contents))
	}
	return res.Contents[0].Text, nil
}

// assertNoToken fails the test when any answer of the session held the agent's token.
func (s *mcpAgentSession) assertNoToken() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, text := range s.seen {
		if strings.Contains(text, s.token) {
			s.t.Errorf("an answer holds the agent's token: %s", text)
		}
	}
}

func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func decodeStructured(t *testing.T, name string, res *mcp.CallToolResult, out any) {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: structured output %s: %v", name, b, err)
	}
}

// mcpFixture is a real server with a repository "app" and two agents, each with a checkout and
// an MCP session.
type mcpFixture struct {
	srv        *agtest.Server
	alice, bob *mcpAgentSession
}

func newMCPFixture(t *testing.T, backend string) *mcpFixture {
	t.Helper()
	srv := agtest.Start(t, agtest.Options{Backend: backend})
	src := t.TempDir()
	for p, content := range map[string]string{"src/a.go": "package a\n", "src/b.go": "package b\n", "README": "app\n"} {
		writeTestFile(t, filepath.Join(src, filepath.FromSlash(p)), content)
	}
	agRun(t, srv.URL, srv.AdminToken, "repo", "import", "app", src)
	f := &mcpFixture{srv: srv}
	for _, name := range []string{"alice", "bob"} {
		res, err := srv.Admin.Admin.CreatePrincipal(context.Background(), &agwpv1.CreatePrincipalRequest{Name: name, Role: agwpv1.Role_ROLE_AGENT})
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), name)
		agRun(t, srv.URL, res.GetToken(), "checkout", "app", dir, "--holder", "w1")
		s := startMCPAgent(t, srv.URL, res.GetToken(), dir)
		if name == "alice" {
			f.alice = s
		} else {
			f.bob = s
		}
	}
	t.Cleanup(func() {
		f.alice.assertNoToken()
		f.bob.assertNoToken()
	})
	return f
}

func agRun(t *testing.T, server, token string, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	// The flags go first: after a "--" they would be the validation command's.
	flags := []string{"--server", server, "--token", token}
	if err := cli.Run(context.Background(), append(flags, args...), &out, &errb); err != nil {
		t.Fatalf("ag %s: %v\n%s%s", strings.Join(args[:2], " "), err, out.String(), errb.String())
	}
	return out.String()
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readTestFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMCPTwoAgents ensures two agents, each with its own MCP session in its own checkout, can
// work through ag's tools alone: one leases a file, edits it on disk and integrates it; the
// other is refused the lease with a tool error naming the holder and what to do, sees it is
// behind, and sync brings the change into its checkout; the mainline resources answer the new
// content. On both stores.
func TestMCPTwoAgents(t *testing.T) {
	t.Parallel()
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			f := newMCPFixture(t, backend)
			alice, bob := f.alice, f.bob

			tools, err := alice.cs.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range tools.Tools {
				names = append(names, tool.Name)
				if tool.OutputSchema == nil || tool.InputSchema == nil {
					t.Errorf("tool %s lacks an input or output schema", tool.Name)
				}
			}
			for _, want := range []string{"status", "lease_acquire", "lease_renew", "lease_release", "lease_list", "integrate", "sync", "diff", "revert", "change_show", "job_list", "job_show"} {
				if !slices.Contains(names, want) {
					t.Errorf("tools %v lack %s", names, want)
				}
			}

			var got agmcp.LeaseAcquireOut
			alice.ok("lease_acquire", map[string]any{"paths": []string{"src/a.go"}, "ttl": "2m"}, &got)
			if got.Lease.Holder != "alice|w1" || got.Lease.State != "active" || got.Lease.FencingToken == 0 ||
				got.Lease.SecondsLeft <= 60 || !slices.Equal(got.Lease.Paths, []string{"src/a.go"}) || !got.Lease.Mine {
				t.Errorf("lease_acquire answered %+v, want an active lease of src/a.go to alice|w1 for about 2m", got.Lease)
			}
			bob.refused("lease_acquire", map[string]any{"paths": []string{"src/a.go"}},
				"src/a.go is leased to alice|w1", "lease_acquire with wait", "work on another file")

			writeTestFile(t, filepath.Join(alice.dir, "src", "a.go"), "package a\n\n// A is alice's.\nconst A = 1\n")
			var st agmcp.StatusOut
			alice.ok("status", nil, &st)
			if st.Behind || len(st.Leases) != 1 || st.Leases[0].ID != got.Lease.ID || len(st.Unleased) != 0 ||
				!slices.Equal(st.Edits, []agmcp.FileView{{Path: "src/a.go", Kind: "modified", Mode: "100644", BaseMode: "100644"}}) {
				t.Errorf("alice's status: %+v, want src/a.go modified under her one lease, not behind", st)
			}

			var in agmcp.IntegrateOut
			alice.ok("integrate", map[string]any{"message": "alice's A"}, &in)
			if in.Change.State != "integrated" || in.Change.IntegratedRevision == "" || !in.Synced ||
				!slices.Equal(in.Change.Paths, []string{"src/a.go"}) || in.Change.Author != "alice|w1" {
				t.Fatalf("integrate answered %+v, want src/a.go integrated and the checkout synced", in)
			}
			alice.ok("status", nil, &st)
			if st.Behind || len(st.Edits) != 0 || st.BaseRevision != in.Change.IntegratedRevision {
				t.Errorf("alice's status after integrate: %+v, want no edits at %s", st, in.Change.IntegratedRevision)
			}
			var shown agmcp.ChangeView
			alice.ok("change_show", map[string]any{"id": in.Change.ID}, &shown)
			if shown.State != "integrated" || shown.IntegratedRevision != in.Change.IntegratedRevision {
				t.Errorf("change_show answered %+v", shown)
			}

			bob.ok("status", nil, &st)
			if !st.Behind || st.Mainline != in.Change.IntegratedRevision {
				t.Errorf("bob's status: %+v, want behind the mainline %s", st, in.Change.IntegratedRevision)
			}
			var synced agmcp.SyncOut
			bob.ok("sync", nil, &synced)
			if synced.Revision != in.Change.IntegratedRevision || len(synced.Conflicts) != 0 ||
				!slices.Equal(synced.Updated, []agmcp.FileView{{Path: "src/a.go", Kind: "modified", Mode: "100644", BaseMode: "100644"}}) {
				t.Errorf("bob's sync answered %+v, want src/a.go updated to %s", synced, in.Change.IntegratedRevision)
			}
			if content := readTestFile(t, filepath.Join(bob.dir, "src", "a.go")); !strings.Contains(content, "alice's") {
				t.Errorf("bob's src/a.go after sync: %q, want alice's content", content)
			}

			text, err := bob.read("ag://app/mainline/src/a.go")
			if err != nil || !strings.Contains(text, "const A = 1") {
				t.Errorf("resource ag://app/mainline/src/a.go: %q, %v; want alice's content", text, err)
			}
			text, err = bob.read("ag://app/mainline")
			var listing agmcp.MainlineListing
			if err != nil || json.Unmarshal([]byte(text), &listing) != nil || listing.Revision != in.Change.IntegratedRevision || len(listing.Files) != 3 {
				t.Errorf("resource ag://app/mainline: %s, %v; want the 3 files at %s", text, err, in.Change.IntegratedRevision)
			}
			if _, err := bob.read("ag://app/mainline/src/nothing.go"); err == nil {
				t.Errorf("reading a missing file succeeded")
			}
			templates, err := bob.cs.ListResourceTemplates(context.Background(), nil)
			if err != nil || len(templates.ResourceTemplates) != 1 || templates.ResourceTemplates[0].URITemplate != "ag://app/mainline/{+path}" {
				t.Errorf("resource templates: %+v, %v", templates, err)
			}

			// Released, the file is bob's to lease.
			var rel agmcp.LeaseReleaseOut
			alice.ok("lease_release", nil, &rel)
			if len(rel.Released) != 1 || rel.Released[0].ID != got.Lease.ID {
				t.Errorf("lease_release answered %+v, want lease %s released", rel, got.Lease.ID)
			}
			bob.ok("lease_acquire", map[string]any{"paths": []string{"src/"}}, &got)
			var list agmcp.LeaseListOut
			alice.ok("lease_list", map[string]any{"all": true}, &list)
			if len(list.Leases) != 1 || list.Leases[0].Holder != "bob|w1" || list.Leases[0].Mine {
				t.Errorf("alice's lease_list all: %+v, want bob's one lease", list.Leases)
			}
			alice.ok("lease_list", nil, &list)
			if len(list.Leases) != 0 {
				t.Errorf("alice's lease_list: %+v, want none", list.Leases)
			}
			var renewed agmcp.LeaseRenewOut
			bob.ok("lease_renew", map[string]any{"ttl": "10m"}, &renewed)
			if len(renewed.Renewed) != 1 || renewed.Renewed[0].SecondsLeft < 500 {
				t.Errorf("lease_renew answered %+v, want bob's lease for 10m", renewed)
			}
		})
	}
}

// TestMCPSyncConflict ensures sync never overwrites a local edit: when the mainline changed a
// file the agent edited too, it changes nothing and answers the conflict as data and as a tool
// error saying how to go on; and that integrate without a lease is refused with what to do.
func TestMCPSyncConflict(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, "sqlite")
	alice, bob := f.alice, f.bob

	writeTestFile(t, filepath.Join(bob.dir, "src", "b.go"), "package b // bob's\n")
	bob.refused("integrate", map[string]any{"message": "bob's b"}, "holds no leases", "lease_acquire", "src/b.go")

	alice.ok("lease_acquire", map[string]any{"paths": []string{"src/b.go"}}, &agmcp.LeaseAcquireOut{})
	writeTestFile(t, filepath.Join(alice.dir, "src", "b.go"), "package b // alice's\n")
	var in agmcp.IntegrateOut
	alice.ok("integrate", map[string]any{"message": "alice's b", "paths": []string{"src/"}, "wait": true}, &in)

	res := bob.call("sync", nil)
	if !res.IsError {
		t.Fatalf("sync over a local edit succeeded: %s", resultText(res))
	}
	var synced agmcp.SyncOut
	decodeStructured(t, "sync", res, &synced)
	if synced.Applied || len(synced.Conflicts) != 1 || synced.Conflicts[0].Path != "src/b.go" || synced.Conflicts[0].Markers || len(synced.Updated) != 0 {
		t.Errorf("sync answered %+v, want the one conflict on src/b.go, nothing applied", synced)
	}
	for _, want := range []string{"src/b.go", "changed nothing", "theirs", "ours", "merge=true", "revert"} {
		if !strings.Contains(resultText(res), want) {
			t.Errorf("sync's error %q does not say %q", resultText(res), want)
		}
	}
	if got := readTestFile(t, filepath.Join(bob.dir, "src", "b.go")); got != "package b // bob's\n" {
		t.Errorf("bob's edit after the refused sync: %q", got)
	}
	var diff agmcp.DiffOut
	bob.ok("diff", map[string]any{"paths": []string{"src/"}}, &diff)
	if len(diff.Files) != 1 || diff.Files[0].Path != "src/b.go" || !strings.Contains(diff.Files[0].Diff, "+package b // bob's") {
		t.Errorf("diff answered %+v, want bob's edit of src/b.go", diff)
	}

	// merge=true writes both versions between markers and syncs; ours goes back to bob's.
	res = bob.call("sync", map[string]any{"merge": true})
	decodeStructured(t, "sync --merge", res, &synced)
	if !res.IsError || !synced.Applied || len(synced.Conflicts) != 1 || !synced.Conflicts[0].Markers || synced.Revision != in.Change.IntegratedRevision {
		t.Fatalf("sync with merge answered %+v (%s), want applied with markers in src/b.go", synced, resultText(res))
	}
	if got := readTestFile(t, filepath.Join(bob.dir, "src", "b.go")); !strings.Contains(got, "<<<<<<< ours") || !strings.Contains(got, "package b // alice's") {
		t.Errorf("src/b.go after sync with merge: %q, want conflict markers around both versions", got)
	}
	bob.refused("integrate", map[string]any{"message": "bob's b, markers and all"}, "still hold the conflict markers", "src/b.go")
	bob.ok("sync", map[string]any{"ours": []string{"src/b.go"}}, &synced)
	if got := readTestFile(t, filepath.Join(bob.dir, "src", "b.go")); got != "package b // bob's\n" || !slices.Equal(synced.Kept, []string{"src/b.go"}) {
		t.Errorf("after sync with ours: src/b.go is %q and kept %v, want bob's version kept", got, synced.Kept)
	}

	// revert drops bob's edit: the file is the mainline's (alice's) again, nothing left to sync.
	var reverted agmcp.RevertOut
	bob.ok("revert", map[string]any{"paths": []string{"src/b.go"}}, &reverted)
	if !slices.Equal(reverted.Reverted, []agmcp.FileView{{Path: "src/b.go", Kind: "modified"}}) {
		t.Errorf("revert answered %+v", reverted)
	}
	if got := readTestFile(t, filepath.Join(bob.dir, "src", "b.go")); got != "package b // alice's\n" {
		t.Errorf("src/b.go after revert: %q, want the mainline's", got)
	}
	bob.refused("revert", map[string]any{"paths": []string{"../etc/passwd"}}, "paths", "..")
}

// TestMCPIntegrateRejected ensures integrate on a repository that validates its changes
// answers the queued change at once without wait, and with wait follows it, with progress
// notifications, to its rejection: a tool error whose structured change has the reason and the
// failing output's tail, the edits left in the checkout.
func TestMCPIntegrateRejected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newMCPFixture(t, "sqlite")
	agRun(t, f.srv.URL, f.srv.AdminToken, "repo", "set-validation", "app", "--", "go", "test", "./...")
	var progress []string
	var mu sync.Mutex
	alice := startMCPAgentWith(t, f.srv.URL, f.alice.token, f.alice.dir, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			progress = append(progress, req.Params.Message)
		},
	})
	alice.ok("lease_acquire", map[string]any{"paths": []string{"src/"}}, &agmcp.LeaseAcquireOut{})
	writeTestFile(t, filepath.Join(alice.dir, "src", "a.go"), "package a // first\n")
	var queued agmcp.IntegrateOut
	alice.ok("integrate", map[string]any{"message": "first"}, &queued)
	if queued.Change.State != "queued" && queued.Change.State != "validating" || queued.Synced || !strings.Contains(queued.Next, "change_show") {
		t.Fatalf("integrate without wait answered %+v, want the change waiting for validation", queued)
	}

	// A worker fails the validation for good, with the test output a real run would have.
	worker := f.srv.Principal(t, "ci", agwpv1.Role_ROLE_WORKER)
	failed := make(chan error, 1)
	go func() {
		for range 2 { // the first change's job, then the second's
			res, err := worker.Jobs.ClaimJob(ctx, &agwpv1.ClaimJobRequest{Worker: "ci-1", Kinds: []string{"validate"}, Wait: durationpb.New(10 * time.Second)})
			if err == nil && res.GetJob() == nil {
				err = errors.New("no validate job to claim")
			}
			if err == nil {
				_, err = worker.Jobs.FailJob(ctx, &agwpv1.FailJobRequest{JobId: res.GetJob().GetId(), Worker: "ci-1", Final: true,
					FencingToken: uint64(res.GetJob().GetAttempts()), Error: "go test exited 1", Output: "ok  \tapp/b\n--- FAIL: TestA (0.00s)\n    a_test.go:9: got 1, want 2\nFAIL\n"})
			}
			if err != nil {
				failed <- err
				return
			}
		}
		failed <- nil
	}()

	writeTestFile(t, filepath.Join(alice.dir, "src", "b.go"), "package b // second\n")
	params := &mcp.CallToolParams{Name: "integrate", Arguments: map[string]any{"message": "second", "paths": []string{"src/b.go"}, "wait": true}}
	params.SetProgressToken("integrate-1")
	res, err := alice.cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-failed; err != nil {
		t.Fatalf("the worker: %v", err)
	}
	if !res.IsError {
		t.Fatalf("a rejected change answered no tool error: %s", resultText(res))
	}
	var got agmcp.IntegrateOut
	decodeStructured(t, "integrate", res, &got)
	if got.Change.State != "rejected" || !strings.Contains(got.Change.Reason, "go test exited 1") ||
		!strings.Contains(got.Change.OutputTail, "--- FAIL: TestA") || !slices.Equal(got.Change.Paths, []string{"src/b.go"}) {
		t.Errorf("integrate answered %+v, want src/b.go rejected with the failure's reason and output", got.Change)
	}
	if c := got.Change.Candidate; c == nil || c.State != "rejected" || !slices.Equal(c.Changes, []string{got.Change.ID}) || c.On == "" {
		t.Errorf("the rejected change's candidate is %+v, want the rejected candidate of it alone, on the mainline", c)
	}
	for _, want := range []string{"rejected", "go test exited 1", "a_test.go:9: got 1, want 2", "integrate again"} {
		if !strings.Contains(resultText(res), want) {
			t.Errorf("the tool error %q does not say %q", resultText(res), want)
		}
	}
	mu.Lock()
	if len(progress) == 0 {
		t.Errorf("no progress notification while the change was validated")
	}
	mu.Unlock()
	var st agmcp.StatusOut
	alice.ok("status", nil, &st)
	if len(st.Edits) != 2 || st.Behind {
		t.Errorf("status after the rejections: %+v, want both edits still in the checkout", st)
	}
	alice.assertNoToken()
}

// TestMCPRefusesHostilePaths ensures a path given to a tool or a resource that would leave the
// checkout or reach .git or .ag is refused before the server is asked, with what to give instead.
func TestMCPRefusesHostilePaths(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, "sqlite")
	for _, p := range []struct{ path, rule string }{
		{"../x", `".." segment`},
		{".git/config", `".git"`},
		{"src/.GIT/hooks/", `".GIT"`},
		{".ag/checkout.json", `".ag"`},
		{"/etc/passwd", "starts with '/'"},
	} {
		f.alice.refused("lease_acquire", map[string]any{"paths": []string{p.path}}, p.rule, "relative to the checkout's root")
		f.alice.refused("integrate", map[string]any{"message": "m", "paths": []string{p.path}}, p.rule)
		f.alice.refused("lease_release", map[string]any{"paths": []string{p.path}}, p.rule)
	}
	for _, uri := range []string{"ag://app/mainline/../x", "ag://app/mainline/.git/config", "ag://app/mainline/%2e%2e/x", "ag://app/mainline/src/.ag/checkout.json"} {
		if text, err := f.alice.read(uri); err == nil {
			t.Errorf("read %s: %q, want it refused", uri, text)
		}
	}
	// Nothing of the refused calls reached the server as a lease.
	var list agmcp.LeaseListOut
	f.alice.ok("lease_list", map[string]any{"all": true}, &list)
	if len(list.Leases) != 0 {
		t.Errorf("leases after refused paths: %+v", list.Leases)
	}
}

// TestMCPWrongTokenNotShown ensures a refused token is named in the tool error as what to fix,
// never shown.
func TestMCPWrongTokenNotShown(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, "sqlite")
	bogus := "agt_" + strings.Repeat("x", 43)
	s := startMCPAgent(t, f.srv.URL, bogus, f.alice.dir)
	text := s.refused("status", nil, "refused this agent's token", "AG_TOKEN")
	if strings.Contains(text, bogus) {
		t.Errorf("the error shows the token: %s", text)
	}
	s.assertNoToken()
}

// TestMCPTokenNotShownInStructuredOutput ensures the agent's token is kept out of the tools'
// structured answers too, where the server's data (a job's payload, its output) pass: here a job
// whose payload holds the token, as a confused or injected agent might have enqueued it.
func TestMCPTokenNotShownInStructuredOutput(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, "sqlite")
	payload := fmt.Sprintf(`{"leaked": %q}`, f.alice.token)
	out := agRun(t, f.srv.URL, f.alice.token, "job", "enqueue", "ag.noop", "--payload", payload, "--json")
	var enqueued struct {
		Job struct {
			ID string `json:"id"`
		} `json:"job"`
	}
	if err := json.Unmarshal([]byte(out), &enqueued); err != nil || enqueued.Job.ID == "" {
		t.Fatalf("ag job enqueue --json printed %q: %v", out, err)
	}
	var job agmcp.JobView
	f.alice.ok("job_show", map[string]any{"id": enqueued.Job.ID}, &job)
	if b, _ := json.Marshal(job); !strings.Contains(string(b), "[token]") {
		t.Errorf("job_show answered %s, want the payload with the token replaced", b)
	}
	f.alice.assertNoToken()
}

// TestMCPHTTPBearer ensures `ag mcp --http` answers only requests with its bearer, and refuses
// to listen on a non-loopback address unless told it is behind a proxy.
func TestMCPHTTPBearer(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "ag", Version: "1"}, nil)
	hs := httptest.NewServer(agmcp.HTTPHandler(srv, "s3cret"))
	t.Cleanup(hs.Close)
	ctx := context.Background()

	res, err := http.Post(hs.URL+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "Authorization: Bearer") {
		t.Errorf("without a bearer: %d %s, want 401 saying what to send", res.StatusCode, body)
	}

	for _, tc := range []struct {
		bearer string
		ok     bool
	}{{"wrong", false}, {"s3cret", true}} {
		transport := &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", MaxRetries: -1,
			HTTPClient: &http.Client{Transport: bearerTransport{tc.bearer}}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, transport, nil)
		if (err == nil) != tc.ok {
			t.Errorf("connect with bearer %q: %v, want success %v", tc.bearer, err, tc.ok)
		}
		if err == nil {
			if err := cs.Ping(ctx, nil); err != nil {
				t.Errorf("ping: %v", err)
			}
			cs.Close()
		}
	}

	err = agmcp.ServeHTTP(ctx, srv, "0.0.0.0:0", "s3cret", false, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("serving on 0.0.0.0 without --insecure-listen: %v, want it refused", err)
	}
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPWaitsEndBeforeTheHostsTimeout ensures no tool call waits past the agent's bound (45 s
// in ag mcp, a second here): integrate with wait=true on a validation nobody runs answers the
// change still waiting, with what to do next, not an error; change_show with wait=true answers
// it as it stands; a lease_acquire asking to wait longer is refused saying how long it may.
func TestMCPWaitsEndBeforeTheHostsTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newMCPFixture(t, "sqlite")
	agRun(t, f.srv.URL, f.srv.AdminToken, "repo", "set-validation", "app", "--", "go", "test", "./...")
	srv, err := agmcp.NewServerWaiting(f.alice.dir, f.srv.URL, f.alice.token, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "ag-test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close(); _ = ss.Wait() })
	alice := &mcpAgentSession{t: t, cs: cs, dir: f.alice.dir, token: f.alice.token}

	alice.refused("lease_acquire", map[string]any{"paths": []string{"src/"}, "wait": "50s"}, "longer than the 1s a tool call may take")
	alice.ok("lease_acquire", map[string]any{"paths": []string{"src/"}}, &agmcp.LeaseAcquireOut{})
	writeTestFile(t, filepath.Join(alice.dir, "src", "a.go"), "package a // waits\n")
	var waited agmcp.IntegrateOut
	alice.ok("integrate", map[string]any{"message": "waits", "wait": true}, &waited)
	if waited.Change.State != "queued" && waited.Change.State != "validating" ||
		!strings.Contains(waited.Next, "still being validated after 1s: call change_show with wait=true again") {
		t.Fatalf("integrate with wait on a validation nobody runs answered %+v", waited)
	}
	var shown agmcp.ChangeView
	alice.ok("change_show", map[string]any{"id": waited.Change.ID, "wait": true}, &shown)
	if shown.ID != waited.Change.ID || shown.State != "queued" && shown.State != "validating" {
		t.Fatalf("change_show with wait answered %+v", shown)
	}
}

// TestMCPHTTPRefusesRebindingAndCrossOrigin ensures ag mcp --http, with the right bearer,
// refuses a request whose Host is not a loopback name (a page that rebound its own name to
// 127.0.0.1) and a browser's cross-site request, and serves the same request from the loopback.
func TestMCPHTTPRefusesRebindingAndCrossOrigin(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "ag", Version: "1"}, nil)
	hs := httptest.NewServer(agmcp.HTTPHandler(srv, "s3cret"))
	t.Cleanup(hs.Close)
	ping := func(header map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, hs.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer s3cret")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range header {
			if k == "Host" {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	if code, body := ping(map[string]string{"Host": "attacker.example"}); code != http.StatusForbidden || !strings.Contains(body, "Host") {
		t.Errorf("a request for Host attacker.example: %d %s, want 403 naming the Host", code, body)
	}
	if code, body := ping(map[string]string{"Origin": "https://attacker.example", "Sec-Fetch-Site": "cross-site"}); code != http.StatusForbidden {
		t.Errorf("a cross-site browser request: %d %s, want 403", code, body)
	}
	if code, body := ping(nil); code == http.StatusForbidden || code == http.StatusUnauthorized {
		t.Errorf("the same request from the loopback, same-origin: %d %s, want it served", code, body)
	}
}
