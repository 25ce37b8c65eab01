package gitstore

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// served is a repository behind a Handler whose mainline tests move.
type served struct {
	t       *testing.T
	s       *countingStorer
	mu      sync.Mutex
	main    plumbing.Hash
	root    plumbing.Hash
	n       int
	shallow []plumbing.Hash // where the history stops
}

func (r *served) open(context.Context) (Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Snapshot{Objects: r.s, Main: r.main, Shallow: r.shallow}, nil
}

// commit applies edits (path → content, nil to delete) on the mainline as a new commit.
func (r *served) commit(msg string, edits map[string][]byte) plumbing.Hash {
	r.t.Helper()
	var es []Edit
	for p, c := range edits {
		if c == nil {
			es = append(es, Edit{Path: p, Delete: true})
			continue
		}
		id, err := WriteBlob(r.s, c)
		if err != nil {
			r.t.Fatal(err)
		}
		es = append(es, Edit{Path: p, Blob: id})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	root, err := UpdateTree(r.s, r.root, es)
	if err != nil {
		r.t.Fatal(err)
	}
	r.n++
	when := time.Unix(1700000000+int64(r.n)*60, 0).UTC()
	var parents []plumbing.Hash
	if !r.main.IsZero() {
		parents = []plumbing.Hash{r.main}
	}
	id, err := WriteCommit(r.s, Commit{
		Tree: root, Parents: parents, Message: msg,
		Author:    object.Signature{Name: "Ada Agent", Email: "ada@agents.example", When: when},
		Committer: object.Signature{Name: "ag", Email: "ag@ag.example", When: when},
		Trailers: []Trailer{
			{Key: "Ag-Change", Value: fmt.Sprintf("chg_%04d", r.n)},
			{Key: "Ag-Lease-Tokens", Value: fmt.Sprintf("%d,%d", 2*r.n, 2*r.n+1)},
		},
	})
	if err != nil {
		r.t.Fatal(err)
	}
	r.main, r.root = id, root
	return id
}

var sendingRe = regexp.MustCompile(`ag: sending (\d+) objects`)

// sent answers the object counts the server said it sent, from git's stderr.
func sent(stderr string) []int {
	var out []int
	for _, m := range sendingRe.FindAllStringSubmatch(stderr, -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, n)
	}
	return out
}

// TestGitCloneAndFetch ensures the real git client clones from the handler over smart HTTP
// (asking for protocol v2, as git does by default, and falling back to v0), that the clone is
// clean under `git fsck --strict`, that `git log` shows the commits with their trailers, that
// after the mainline moves `git fetch` fast-forwards with a pack of only the new objects, also
// from a clone with many local commits the server never saw (several rounds of negotiation),
// and that `git push` is refused.
func TestGitCloneAndFetch(t *testing.T) {
	t.Parallel()
	needGit(t)
	env := gitEnv(t)
	r := &served{t: t, s: newStorer()}
	r.commit("Import app", sampleFiles)
	for i := range 24 { // more than the 16 haves of git's first negotiation round
		r.commit(fmt.Sprintf("Step %d", i), map[string][]byte{fmt.Sprintf("steps/%02d.txt", i): fmt.Appendf(nil, "%d\n", i), "foo.c": fmt.Appendf(nil, "v%d\n", i)})
	}
	var gzipped, posts atomic.Int32
	mux := http.NewServeMux()
	mux.Handle("/git/app.git/", http.StripPrefix("/git/app.git", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost {
			posts.Add(1)
			if req.Header.Get("Content-Encoding") == "gzip" {
				gzipped.Add(1)
			}
		}
		NewHandler(r.open).ServeHTTP(w, req)
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	url := srv.URL + "/git/app.git"

	dir := filepath.Join(t.TempDir(), "app")
	_, stderr, err := gitRun(env, "", nil, "clone", "--progress", url, dir)
	if err != nil {
		t.Fatalf("git clone: %v\n%s", err, stderr)
	}
	if got := strings.TrimSpace(git(t, env, dir, nil, "rev-parse", "HEAD")); got != r.main.String() {
		t.Fatalf("cloned HEAD %s, want %s", got, r.main)
	}
	if got := strings.TrimSpace(git(t, env, dir, nil, "symbolic-ref", "HEAD")); got != "refs/heads/main" {
		t.Errorf("cloned branch %s, want refs/heads/main", got)
	}
	git(t, env, dir, nil, "fsck", "--strict", "--no-dangling", "--full")
	if got, err := os.ReadFile(filepath.Join(dir, "foo", "x.go")); err != nil || string(got) != "package foo\n" {
		t.Errorf("foo/x.go in the clone: %q, %v", got, err)
	}
	log := git(t, env, dir, nil, "log", "--format=%H %s|%(trailers:key=Ag-Change,valueonly,separator=)|%(trailers:key=Ag-Lease-Tokens,valueonly,separator=)")
	lines := strings.Split(strings.TrimSpace(log), "\n")
	if len(lines) != 25 {
		t.Fatalf("git log shows %d commits, want 25:\n%s", len(lines), log)
	}
	if want := r.main.String() + " Step 23|chg_0025|50,51"; lines[0] != want {
		t.Errorf("git log's first line %q, want %q", lines[0], want)
	}
	if !strings.HasSuffix(lines[24], " Import app|chg_0001|2,3") {
		t.Errorf("git log's last line %q", lines[24])
	}

	// The mainline moves: a change, a file that becomes a directory, a directory emptied.
	total := r.s.Writes()
	before := r.s.Writes()
	next := r.commit("Reshape", map[string][]byte{"foo.c": nil, "foo.c/main.c": []byte("int x;\n"), "foo/sub/deep/y": nil, "README.md": []byte("# app v2\n")})
	newObjects := r.s.Writes() - before
	_, stderr, err = gitRun(env, dir, nil, "fetch", "--progress")
	if err != nil {
		t.Fatalf("git fetch: %v\n%s", err, stderr)
	}
	git(t, env, dir, nil, "merge", "--ff-only", "-q", "origin/main")
	if got := strings.TrimSpace(git(t, env, dir, nil, "rev-parse", "HEAD")); got != next.String() {
		t.Fatalf("HEAD after fetch %s, want %s", got, next)
	}
	git(t, env, dir, nil, "fsck", "--strict", "--no-dangling", "--full")
	if _, err := os.Stat(filepath.Join(dir, "foo", "sub")); !os.IsNotExist(err) {
		t.Errorf("foo/sub is still there after its last file went: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "foo.c", "main.c")); string(got) != "int x;\n" {
		t.Errorf("foo.c/main.c: %q", got)
	}
	if n := sent(stderr); len(n) != 1 || n[0] > newObjects {
		t.Errorf("the fetch sent %v objects; the commit wrote %d (of %d in the store)\n%s", n, newObjects, total, stderr)
	} else {
		t.Logf("fetch of one commit: %d objects sent, of %d in the store", n[0], total)
	}

	// Forty local commits the server never saw, then the mainline moves again: git sends its
	// haves in several rounds before it finds the common commit.
	postsBefore := posts.Load()
	for i := range 40 {
		git(t, env, dir, nil, "commit", "-q", "--allow-empty", "-m", fmt.Sprintf("local %d", i))
	}
	third := r.commit("Third", map[string][]byte{"steps/00.txt": []byte("zero\n")})
	_, stderr, err = gitRun(env, dir, nil, "fetch", "--progress", "origin")
	if err != nil {
		t.Fatalf("git fetch after local commits: %v\n%s", err, stderr)
	}
	if got := strings.TrimSpace(git(t, env, dir, nil, "rev-parse", "origin/main")); got != third.String() {
		t.Fatalf("origin/main %s, want %s", got, third)
	}
	git(t, env, dir, nil, "fsck", "--strict", "--no-dangling", "--full")
	if rounds := posts.Load() - postsBefore; rounds < 2 || gzipped.Load() == 0 {
		t.Errorf("the fetch after local commits made %d requests (%d gzipped in all), want several rounds and a gzipped one", rounds, gzipped.Load())
	}
	if n := sent(stderr); len(n) != 1 || n[0] > 4 {
		t.Errorf("the fetch of one commit changing one file sent %v objects, want at most 4\n%s", n, stderr)
	}

	// Push is refused, with a message git shows.
	_, stderr, err = gitRun(env, dir, nil, "push", "origin", "HEAD:refs/heads/main")
	if err == nil || !strings.Contains(stderr, "read-only") {
		t.Errorf("git push: %v, want a refusal saying read-only:\n%s", err, stderr)
	}
	if got := strings.TrimSpace(git(t, env, dir, nil, "ls-remote", url, "refs/heads/main")); got != third.String()+"\trefs/heads/main" {
		t.Errorf("ls-remote after the refused push: %q", got)
	}
}

// TestHandlerRefuses ensures the paths and methods git does not use for a read-only fetch are
// refused with their status, and that an empty repository is advertised without references.
func TestHandlerRefuses(t *testing.T) {
	t.Parallel()
	r := &served{t: t, s: newStorer()}
	srv := httptest.NewServer(NewHandler(r.open))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		method, path, ctype string
		want                int
	}{
		{"GET", "/info/refs?service=git-receive-pack", "", http.StatusForbidden},
		{"POST", "/git-receive-pack", "application/x-git-receive-pack-request", http.StatusForbidden},
		{"GET", "/info/refs", "", http.StatusForbidden},
		{"GET", "/HEAD", "", http.StatusNotFound},
		{"GET", "/git-upload-pack", "", http.StatusMethodNotAllowed},
		{"POST", "/git-upload-pack", "text/plain", http.StatusUnsupportedMediaType},
		{"POST", "/git-upload-pack", "application/x-git-upload-pack-request", http.StatusBadRequest},
		{"GET", "/info/refs?service=git-upload-pack", "", http.StatusOK},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(""))
		if c.ctype != "" {
			req.Header.Set("Content-Type", c.ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.want)
		}
	}
	var b strings.Builder
	if err := AdvertiseRefs(&b, Snapshot{Objects: r.s}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "0000000000000000000000000000000000000000 capabilities^{}") {
		t.Errorf("empty repository advertised as %q", b.String())
	}
}
