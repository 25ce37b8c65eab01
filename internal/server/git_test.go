package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/server"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/agtest"
	"github.com/ag-coord/ag/internal/testutil/syncbuf"
)

// fakeGit is what the store will be for /git/: repositories by name with their mainline
// commit, and the git objects of all of them in one go-git memory storage.
type fakeGit struct {
	t       *testing.T
	mu      sync.Mutex
	objects *memory.Storage
	repos   map[string]plumbing.Hash
	files   map[string]map[string][]byte
	n       int

	reads       atomic.Int64 // every call, repositories and objects
	objectReads atomic.Int64
	down        atomic.Bool // every call fails as a database that went away does
	objectsDown atomic.Bool // every object read fails so
}

func newFakeGit(t *testing.T) *fakeGit {
	return &fakeGit{t: t, objects: memory.NewStorage(), repos: map[string]plumbing.Hash{}, files: map[string]map[string][]byte{}}
}

// errDown is what a store's driver says when its database is gone: it names the database host.
var errDown = errors.New("dial tcp 10.9.8.7:5432: connect: connection refused")

func (f *fakeGit) GetRepository(_ context.Context, name string) (store.Repository, error) {
	f.reads.Add(1)
	if f.down.Load() {
		return store.Repository{}, errDown
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	main, ok := f.repos[name]
	if !ok {
		return store.Repository{}, store.ErrNotFound
	}
	r := store.Repository{Name: name}
	if !main.IsZero() {
		r.Mainline = main.String() // read back by mainlineCommit: the fake's MainlineCommit
	}
	return r, nil
}

// mainlineCommit is the function the server reads a repository's mainline commit with.
func mainlineCommit(r store.Repository) string { return r.Mainline }

func (f *fakeGit) ReadGitObject(_ context.Context, id plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	f.reads.Add(1)
	f.objectReads.Add(1)
	if f.down.Load() || f.objectsDown.Load() {
		return plumbing.InvalidObject, nil, errDown
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	o, err := f.objects.EncodedObject(plumbing.AnyObject, id)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return plumbing.InvalidObject, nil, store.ErrNotFound
	}
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	r, err := o.Reader()
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	defer r.Close()
	content, err := io.ReadAll(r)
	return o.Type(), content, err
}

// create makes an empty repository.
func (f *fakeGit) create(repo string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.repos[repo] = plumbing.ZeroHash
	f.files[repo] = map[string][]byte{}
}

// commit applies edits (path → content, nil to delete) to repo's mainline as a new commit.
func (f *fakeGit) commit(repo, msg string, edits map[string][]byte) plumbing.Hash {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	files := maps.Clone(f.files[repo])
	if files == nil {
		files = map[string][]byte{}
	}
	for p, c := range edits {
		if c == nil {
			delete(files, p)
		} else {
			files[p] = c
		}
	}
	root, err := gitstore.WriteFiles(f.objects, files)
	if err != nil {
		f.t.Fatal(err)
	}
	f.n++
	when := time.Unix(1700000000+int64(f.n)*60, 0).UTC()
	var parents []plumbing.Hash
	if main := f.repos[repo]; !main.IsZero() {
		parents = []plumbing.Hash{main}
	}
	id, err := gitstore.WriteCommit(f.objects, gitstore.Commit{
		Tree: root, Parents: parents, Message: msg,
		Author:    object.Signature{Name: "Ada Agent", Email: "ada@agents.example", When: when},
		Committer: object.Signature{Name: "ag", Email: "ag@ag.example", When: when},
		Trailers:  []gitstore.Trailer{{Key: "Ag-Change", Value: fmt.Sprintf("chg_%04d", f.n)}},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.repos[repo], f.files[repo] = id, files
	return id
}

func (f *fakeGit) main(repo string) plumbing.Hash {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.repos[repo]
}

// gitServer is the production handler over a SQLite store (for principals and tokens) serving
// /git/ from a fakeGit, with a token for each role.
type gitServer struct {
	url    string
	srv    *server.Server
	git    *fakeGit
	logs   *syncbuf.Buffer
	tokens map[string]string // by role: admin, agent, reader, worker
}

func startGitServer(t *testing.T, cfg server.Config) *gitServer {
	t.Helper()
	st := agtest.OpenStore(t, "sqlite", nil)
	ctx := context.Background()
	adminToken, _, err := server.Bootstrap(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	g := &gitServer{git: newFakeGit(t), logs: &syncbuf.Buffer{}, tokens: map[string]string{"admin": adminToken}}
	cfg.Store = st
	cfg.Logger = slog.New(slog.NewTextHandler(g.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g.srv = server.New(cfg)
	server.ServeGitFrom(g.srv, g.git, mainlineCommit)
	hs := httptest.NewServer(g.srv.Handler())
	t.Cleanup(hs.Close)
	g.url = hs.URL
	admin := client.New(hs.URL, adminToken, client.WithRetries(0, 0))
	for role, r := range map[string]agwpv1.Role{"agent": agwpv1.Role_ROLE_AGENT, "reader": agwpv1.Role_ROLE_READER, "worker": agwpv1.Role_ROLE_WORKER} {
		res, err := admin.Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: role + "-1", Role: r})
		if err != nil {
			t.Fatal(err)
		}
		g.tokens[role] = res.GetToken()
	}
	return g
}

// do sends a request to the server with the Authorization header given ("" for none), and
// answers the response with its body read.
func (g *gitServer) do(t *testing.T, method, path, authorization string, body io.Reader, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, g.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(req.Header, header)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func basic(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// TestGitGateAuthenticatesFirst ensures /git/ answers nothing of a repository, and reads
// nothing of the store, before the caller is authenticated with a token (bearer, or the
// password of Basic whatever the user name) and its role may read repositories: a missing or
// bad token is a 401 with the Basic challenge git answers with its credential helpers, and a
// one-line message that does not echo the token; a worker, and a push, are 403; an unknown or
// malformed repository is 404 once authenticated.
func TestGitGateAuthenticatesFirst(t *testing.T) {
	t.Parallel()
	g := startGitServer(t, server.Config{})
	g.git.commit("app", "Import app", map[string][]byte{"README.md": []byte("# app\n")})
	const refs = "/git/app.git/info/refs?service=git-upload-pack"
	const forged = "agt_forged-token-never-issued"
	uploadPack := http.Header{"Content-Type": {"application/x-git-upload-pack-request"}}

	for _, c := range []struct {
		name, method, path, auth string
		body                     string
		header                   http.Header
	}{
		{"no token", "GET", refs, "", "", nil},
		{"no token, another repository", "GET", "/git/nosuch.git/info/refs?service=git-upload-pack", "", "", nil},
		{"no token, not a repository's path", "GET", "/git/", "", "", nil},
		{"no token, push", "GET", "/git/app.git/info/refs?service=git-receive-pack", "", "", nil},
		{"no token, upload-pack", "POST", "/git/app.git/git-upload-pack", "", "0000", uploadPack},
		{"forged bearer", "GET", refs, "Bearer " + forged, "", nil},
		{"forged Basic", "GET", refs, basic("ag", forged), "", nil},
		{"Basic without password", "GET", refs, basic(g.tokens["reader"], ""), "", nil},
		{"token in another scheme", "GET", refs, "Token " + g.tokens["reader"], "", nil},
	} {
		res, body := g.do(t, c.method, c.path, c.auth, strings.NewReader(c.body), c.header)
		if res.StatusCode != http.StatusUnauthorized || res.Header.Get("WWW-Authenticate") != `Basic realm="ag"` {
			t.Errorf("%s: %d with WWW-Authenticate %q, want 401 with Basic realm=\"ag\"", c.name, res.StatusCode, res.Header.Get("WWW-Authenticate"))
		}
		if strings.Count(body, "\n") != 1 || !strings.HasSuffix(body, "\n") || strings.Contains(body, forged) || strings.Contains(body, g.tokens["reader"]) {
			t.Errorf("%s: body %q, want one line without the token", c.name, body)
		}
	}
	if n := g.git.reads.Load(); n != 0 {
		t.Fatalf("requests without a valid token read the source %d times", n)
	}

	for _, c := range []struct {
		name, method, path, auth string
		want                     int
		says                     string
	}{
		{"reader, bearer", "GET", refs, "Bearer " + g.tokens["reader"], 200, "refs/heads/main"},
		{"reader, lower-case bearer", "GET", refs, "bearer " + g.tokens["reader"], 200, "refs/heads/main"},
		{"agent, Basic", "GET", refs, basic("anyone", g.tokens["agent"]), 200, "refs/heads/main"},
		{"admin, Basic", "GET", refs, basic("ag", g.tokens["admin"]), 200, "refs/heads/main"},
		{"without .git", "GET", "/git/app/info/refs?service=git-upload-pack", "Bearer " + g.tokens["reader"], 200, "refs/heads/main"},
		{"worker", "GET", refs, "Bearer " + g.tokens["worker"], 403, "role worker"},
		{"push", "GET", "/git/app.git/info/refs?service=git-receive-pack", "Bearer " + g.tokens["agent"], 200, "refs/heads/main\x00report-status"},
		{"reader's push", "GET", "/git/app.git/info/refs?service=git-receive-pack", "Bearer " + g.tokens["reader"], 403, "role reader, which may not push"},
		{"reader's push's POST", "POST", "/git/app.git/git-receive-pack", "Bearer " + g.tokens["reader"], 403, "may not push"},
		{"push's POST without commands", "POST", "/git/app.git/git-receive-pack", "Bearer " + g.tokens["admin"], 400, "the push's commands"},
		{"unknown repository", "GET", "/git/nosuch.git/info/refs?service=git-upload-pack", "Bearer " + g.tokens["reader"], 404, "not found"},
		{"malformed repository", "GET", "/git/No%20Such.git/info/refs?service=git-upload-pack", "Bearer " + g.tokens["reader"], 404, "not a repository's git URL"},
		{"no path in the repository", "GET", "/git/app.git", "Bearer " + g.tokens["reader"], 404, "not a repository's git URL"},
		{"dumb protocol", "GET", "/git/app.git/HEAD", "Bearer " + g.tokens["reader"], 404, "smart HTTP"},
	} {
		res, body := g.do(t, c.method, c.path, c.auth, nil, nil)
		if res.StatusCode != c.want || !strings.Contains(body, c.says) {
			t.Errorf("%s: %d %q, want %d saying %q", c.name, res.StatusCode, body, c.want, c.says)
		}
	}
	for _, token := range g.tokens {
		if strings.Contains(g.logs.String(), token) {
			t.Fatalf("the server log holds a token:\n%s", g.logs.String())
		}
	}
	if lines := g.logs.Lines("msg=git", "principal=reader-1", "repository=app", "status=200"); len(lines) == 0 {
		t.Errorf("no request line names the principal and the repository:\n%s", g.logs.String())
	}
}

// TestGitRefusesBodiesBeforeReadingThem ensures an upload-pack request without a token is
// refused while the client still holds back its body, that a declared size over the limit is
// refused unread, and that one principal has at most its share of fetches in flight while
// another principal is not held back.
func TestGitRefusesBodiesBeforeReadingThem(t *testing.T) {
	t.Parallel()
	g := startGitServer(t, server.Config{GitFetchesPerPrincipal: 1})
	g.git.commit("app", "Import app", map[string][]byte{"README.md": []byte("# app\n")})
	const path = "/git/app.git/git-upload-pack"
	header := func(auth string) http.Header {
		h := http.Header{"Content-Type": {"application/x-git-upload-pack-request"}}
		if auth != "" {
			h.Set("Authorization", auth)
		}
		return h
	}

	for _, auth := range []string{"", "Bearer agt_forged", basic("ag", "agt_forged")} {
		_, answered := postHeld(t, g.url, path, header(auth), 15<<20, 1<<20)
		if a := answerWithin(t, "a held upload-pack without a valid token", answered); !strings.Contains(a, "HTTP 401") {
			t.Fatalf("a held upload-pack with Authorization %q: %s, want 401", auth, a)
		}
	}
	if n := g.git.reads.Load(); n != 0 {
		t.Fatalf("requests without a valid token read the source %d times", n)
	}
	_, answered := postHeld(t, g.url, path, header("Bearer "+g.tokens["reader"]), 1<<30, 0)
	if a := answerWithin(t, "a declared 1 GiB upload-pack", answered); !strings.Contains(a, "HTTP 413") {
		t.Fatalf("a declared 1 GiB upload-pack: %s, want 413", a)
	}

	_, held := postHeld(t, g.url, path, header("Bearer "+g.tokens["reader"]), 1<<20, 0)
	waitUntil(t, "the server holds the reader's fetch", func() bool { return server.GitFetches(g.srv) == 1 })
	_, answered = postHeld(t, g.url, path, header(basic("ag", g.tokens["reader"])), 1<<20, 0)
	if a := answerWithin(t, "the reader's second fetch", answered); !strings.Contains(a, "HTTP 429") || !strings.Contains(a, "reader-1") {
		t.Fatalf("the reader's second fetch: %s, want 429 naming the principal", a)
	}
	res, body := g.do(t, "POST", path, "Bearer "+g.tokens["agent"], strings.NewReader(wantRequest(g.git.main("app"))), header(""))
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "PACK") {
		t.Fatalf("the agent's fetch while the reader holds one: %d %q, want a pack", res.StatusCode, body)
	}
	select {
	case a := <-held:
		t.Fatalf("the held fetch was answered early: %s", a)
	default:
	}
}

// TestGitHidesStoreErrors ensures a store that cannot answer is logged with its details and
// answered without them, whether it fails on the repository or on its objects.
func TestGitHidesStoreErrors(t *testing.T) {
	t.Parallel()
	g := startGitServer(t, server.Config{})
	main := g.git.commit("app", "Import app", map[string][]byte{"README.md": []byte("# app\n")})
	auth := "Bearer " + g.tokens["reader"]
	uploadPack := http.Header{"Content-Type": {"application/x-git-upload-pack-request"}}
	if res, body := g.do(t, "POST", "/git/app.git/git-upload-pack", auth, strings.NewReader(wantRequest(main)), uploadPack); res.StatusCode != 200 || !strings.Contains(body, "PACK") {
		t.Fatalf("upload-pack with the store up: %d, no pack in %q", res.StatusCode, body)
	}

	g.git.down.Store(true)
	res, body := g.do(t, "GET", "/git/app.git/info/refs?service=git-upload-pack", auth, nil, nil)
	if res.StatusCode != http.StatusInternalServerError || strings.Contains(body, "10.9.8.7") {
		t.Errorf("info/refs with the store down: %d %q, want 500 without the database's address", res.StatusCode, body)
	}
	// The repository answers, its objects do not: the error can only be told inside the answer.
	g.git.down.Store(false)
	g.git.objectsDown.Store(true)
	_, body = g.do(t, "POST", "/git/app.git/git-upload-pack", auth, strings.NewReader(wantRequest(main)), uploadPack)
	if strings.Contains(body, "10.9.8.7") || !strings.Contains(body, "the server log has the details") {
		t.Errorf("upload-pack whose objects cannot be read: %q, want the generic message without the database's address", body)
	}
	if n := len(g.logs.Lines("10.9.8.7")); n < 2 {
		t.Errorf("the server log holds the store's error %d times, want once per failure:\n%s", n, g.logs.String())
	}
}

// wantRequest is an upload-pack request for one commit, done at once.
func wantRequest(h plumbing.Hash) string {
	want := fmt.Sprintf("want %s side-band-64k ofs-delta\n", h)
	return fmt.Sprintf("%04x%s0000%04xdone\n", len(want)+4, want, len("done\n")+4)
}

// TestGitIsNotServedWithoutGitObjects ensures a server whose store keeps no git objects still
// authenticates /git/ first, then answers 404.
func TestGitIsNotServedWithoutGitObjects(t *testing.T) {
	t.Parallel()
	srv := agtest.Start(t, agtest.Options{})
	for auth, want := range map[string]int{"": 401, "Bearer " + srv.AdminToken: 404} {
		req, _ := http.NewRequest("GET", srv.URL+"/git/app.git/info/refs?service=git-upload-pack", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("with Authorization %q: %d %q, want %d", auth, res.StatusCode, b, want)
		}
	}
}

// gitEnv is the environment of the git commands the tests run: no user or system
// configuration, no prompt, no proxy, fixed identities and dates.
func gitEnv(t *testing.T) []string {
	home := t.TempDir()
	return []string{
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + home,
		"PATH=" + os.Getenv("PATH"),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=",
		"SSH_ASKPASS=",
		"NO_PROXY=*",
		"GIT_AUTHOR_NAME=Ada Agent",
		"GIT_AUTHOR_EMAIL=ada@agents.example",
		"GIT_COMMITTER_NAME=ag",
		"GIT_COMMITTER_EMAIL=ag@ag.example",
		"LC_ALL=C",
	}
}

// gitRunner runs git and keeps everything git printed, to look for tokens in it.
type gitRunner struct {
	t      *testing.T
	env    []string
	mu     sync.Mutex
	output strings.Builder
}

func (r *gitRunner) run(dir string, env []string, args ...string) (string, string, error) {
	return r.runWith(dir, env, "", args...)
}

// runInput runs git with stdin as its standard input.
func (r *gitRunner) runInput(dir, stdin string, args ...string) (string, string, error) {
	return r.runWith(dir, nil, stdin, args...)
}

func (r *gitRunner) runWith(dir string, env []string, stdin string, args ...string) (string, string, error) {
	cmd := exec.Command("git", args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Dir = dir
	cmd.Env = append(append([]string{}, r.env...), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r.mu.Lock()
	r.output.WriteString(stdout.String() + stderr.String())
	r.mu.Unlock()
	return stdout.String(), stderr.String(), err
}

func (r *gitRunner) must(dir string, env []string, args ...string) string {
	r.t.Helper()
	out, errOut, err := r.run(dir, env, args...)
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

func (r *gitRunner) head(dir, ref string) plumbing.Hash {
	r.t.Helper()
	return plumbing.NewHash(strings.TrimSpace(r.must(dir, nil, "rev-parse", ref)))
}

// TestGitCloneAndFetchThroughTheServer ensures the real git client, through the server's
// whole HTTP stack: clones a repository's mainline with a bearer token in http.extraHeader, as
// a clean repository (`git fsck --strict`) whose HEAD is the branch main at the mainline
// commit; fetches the mainline after it moved; clones with a credential helper answering the
// 401 (a script, and `ag git-credential` itself); and that a clone without a token, with a
// forged one or a worker's, and of an unknown repository fail, as does a push, without git
// printing a token anywhere.
func TestGitCloneAndFetchThroughTheServer(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	g := startGitServer(t, server.Config{})
	g.git.commit("app", "Import app", map[string][]byte{"README.md": []byte("# app\n"), "src/main.go": []byte("package main\n")})
	for i := range 5 {
		g.git.commit("app", fmt.Sprintf("Step %d", i), map[string][]byte{fmt.Sprintf("steps/%d.txt", i): fmt.Appendf(nil, "%d\n", i)})
	}
	g.git.create("empty")
	git := &gitRunner{t: t, env: gitEnv(t)}
	url := g.url + "/git/app.git"
	bearer := func(role string) []string {
		return []string{"-c", "http.extraHeader=Authorization: Bearer " + g.tokens[role]}
	}
	tmp := t.TempDir()

	// A reader clones with its token in a header, and fetches after the mainline moved.
	dir := filepath.Join(tmp, "reader")
	git.must("", nil, append(bearer("reader"), "clone", "-q", url, dir)...)
	t.Logf("the clone read %d objects from the source", g.git.objectReads.Load())
	if got, want := git.head(dir, "HEAD"), g.git.main("app"); got != want {
		t.Fatalf("cloned HEAD %s, want the mainline %s", got, want)
	}
	if got := strings.TrimSpace(git.must(dir, nil, "symbolic-ref", "HEAD")); got != "refs/heads/main" {
		t.Errorf("the clone's HEAD is %s, want refs/heads/main", got)
	}
	git.must(dir, nil, "fsck", "--strict", "--no-dangling", "--full")
	if b, err := os.ReadFile(filepath.Join(dir, "src", "main.go")); err != nil || string(b) != "package main\n" {
		t.Errorf("src/main.go in the clone: %q, %v", b, err)
	}
	if n := strings.Count(git.must(dir, nil, "log", "--format=%H"), "\n"); n != 6 {
		t.Errorf("the clone holds %d commits, want 6", n)
	}
	readsBefore := g.git.objectReads.Load()
	next := g.git.commit("app", "Move on", map[string][]byte{"README.md": []byte("# app v2\n"), "steps/0.txt": nil})
	git.must(dir, nil, append(bearer("reader"), "fetch", "-q", "origin")...)
	if got := git.head(dir, "origin/main"); got != next {
		t.Fatalf("origin/main after the fetch %s, want %s", got, next)
	}
	git.must(dir, nil, "merge", "-q", "--ff-only", "origin/main")
	git.must(dir, nil, "fsck", "--strict", "--no-dangling", "--full")
	t.Logf("the fetch of one commit read %d objects from the source", g.git.objectReads.Load()-readsBefore)

	// An agent clones with a credential helper: git is answered 401, asks it, sends Basic.
	script := filepath.Join(tmp, "helper.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntest \"$1\" = get || exit 0\ncat >/dev/null\necho username=agent\necho password="+g.tokens["agent"]+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	helped := filepath.Join(tmp, "helped")
	git.must("", nil, "-c", "credential.helper=!"+script, "clone", "-q", url, helped)
	git.must(helped, nil, "fsck", "--strict", "--no-dangling", "--full")

	// The same with `ag git-credential`, as git runs it: the test binary runs as ag.
	agHelper := []string{"-c", "credential.helper=!'" + os.Args[0] + "' git-credential"}
	agEnv := []string{runAsAg + "=1", "AG_SERVER=" + g.url, "AG_TOKEN=" + g.tokens["reader"]}
	viaAg := filepath.Join(tmp, "via-ag")
	git.must("", agEnv, append(agHelper, "clone", "-q", url, viaAg)...)
	third := g.git.commit("app", "Third", map[string][]byte{"src/main.go": []byte("package main\n\nfunc main() {}\n")})
	git.must(viaAg, agEnv, append(agHelper, "pull", "-q", "--ff-only")...)
	if got := git.head(viaAg, "HEAD"); got != third {
		t.Fatalf("HEAD after git pull with ag git-credential: %s, want %s", got, third)
	}
	git.must(viaAg, nil, "fsck", "--strict", "--no-dangling", "--full")
	// An empty repository clones as one (git warns), with nothing checked out.
	git.must("", nil, append(bearer("reader"), "clone", "-q", g.url+"/git/empty.git", filepath.Join(tmp, "empty"))...)

	// Refusals: each clone fails, and says why.
	for _, c := range []struct {
		name string
		args []string
		env  []string
		says string
	}{
		{"no token", []string{"clone", url}, nil, "could not read Username"},
		{"a forged token", []string{"-c", "http.extraHeader=Authorization: Bearer agt_forged-token", "clone", url}, nil, "could not read Username"},
		{"a forged token from a helper", append(agHelper, "clone", url), []string{runAsAg + "=1", "AG_SERVER=" + g.url, "AG_TOKEN=agt_forged-token"}, "Authentication failed"},
		{"a worker's token", append(bearer("worker"), "clone", url), nil, "role worker"},
		{"another server's helper", append(agHelper, "clone", url), []string{runAsAg + "=1", "AG_SERVER=https://ag.example", "AG_TOKEN=" + g.tokens["reader"]}, "could not read Username"},
		{"an unknown repository", append(bearer("reader"), "clone", g.url+"/git/nosuch.git"), nil, "not found"},
	} {
		target := filepath.Join(tmp, "refused-"+strings.ReplaceAll(c.name, " ", "-"))
		_, stderr, err := git.run("", c.env, append(c.args, target)...)
		if err == nil {
			t.Errorf("clone with %s succeeded", c.name)
		} else if !strings.Contains(stderr, c.says) {
			t.Errorf("clone with %s: %v, want a message saying %q:\n%s", c.name, err, c.says, stderr)
		}
		if strings.Contains(stderr, "agt_forged-token") {
			t.Errorf("clone with %s printed the token:\n%s", c.name, stderr)
		}
	}

	// A reader's push is refused, with a message git shows, and the mainline stays.
	git.must(dir, nil, "commit", "-q", "--allow-empty", "-m", "local")
	_, stderr, err := git.run(dir, nil, append(bearer("reader"), "push", "origin", "HEAD:refs/for/main")...)
	if err == nil || !strings.Contains(stderr, "may not push") {
		t.Errorf("git push: %v, want a refusal saying the reader may not push:\n%s", err, stderr)
	}
	if got := g.git.main("app"); got != third {
		t.Errorf("the mainline after a refused push: %s, want %s", got, third)
	}

	for role, token := range g.tokens {
		if strings.Contains(git.output.String(), token) {
			t.Errorf("git printed the %s's token", role)
		}
		if strings.Contains(g.logs.String(), token) {
			t.Errorf("the server logged the %s's token", role)
		}
	}
}
