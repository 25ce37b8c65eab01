package worker

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/repo"
)

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// cachedBlob puts content into v's blob cache as the server's blob would be, and answers its
// digest.
func cachedBlob(t *testing.T, v *Validator, content string) string {
	t.Helper()
	d := digestOf([]byte(content))
	path := v.blobPath(d)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

func needUnix(t *testing.T) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("process groups are a Unix thing")
	}
}

// TestMaterializeWritesTheTree ensures a tree is checked out with its directories, its
// contents and mode 0644.
func TestMaterializeWritesTheTree(t *testing.T) {
	t.Parallel()
	v := &Validator{CacheDir: t.TempDir()}
	a, b := cachedBlob(t, v, "package a\n"), cachedBlob(t, v, "")
	tree := repo.Tree{{Path: "a.go", Digest: a, Size: 10}, {Path: "deep/er/b.txt", Digest: b}, {Path: "deep/c.go", Digest: a, Size: 10}}
	root := t.TempDir()
	if _, err := v.materialize(context.Background(), root, tree); err != nil {
		t.Fatalf("materialize: %v", err)
	}
	for path, want := range map[string]string{"a.go": "package a\n", "deep/er/b.txt": "", "deep/c.go": "package a\n"} {
		full := filepath.Join(root, filepath.FromSlash(path))
		got, err := os.ReadFile(full)
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", path, got, err, want)
		}
		if fi, err := os.Stat(full); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v, %v; want 0644", path, fi.Mode().Perm(), err)
		}
	}
}

// TestMaterializeRefusesEscapingPaths ensures no path of a tree writes outside the checkout,
// whatever the server answers.
func TestMaterializeRefusesEscapingPaths(t *testing.T) {
	t.Parallel()
	v := &Validator{CacheDir: t.TempDir()}
	d := cachedBlob(t, v, "x")
	for _, path := range []string{
		"../evil", "a/../../evil", "/tmp/evil", "a/./b", "./a", "a//b", "", "a/", "..", "a\\..\\..\\evil", "a\x00b",
	} {
		parent := t.TempDir()
		root := filepath.Join(parent, "tree")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := v.materialize(context.Background(), root, repo.Tree{{Path: path, Digest: d, Size: 1}})
		if err == nil {
			t.Errorf("materialize accepted path %q", path)
		}
		var found []string
		_ = filepath.WalkDir(parent, func(p string, _ os.DirEntry, _ error) error {
			if p != parent && p != root {
				found = append(found, p)
			}
			return nil
		})
		if len(found) > 0 {
			t.Errorf("path %q: materialize wrote %v", path, found)
		}
	}
	if _, err := checkoutName("a/b"); err != nil {
		t.Errorf("checkoutName refused a clean path: %v", err)
	}
}

// TestMaterializeDropsACorruptCachedBlob ensures a cached blob whose content does not match
// its digest is refused and removed, so the next attempt fetches it again.
func TestMaterializeDropsACorruptCachedBlob(t *testing.T) {
	t.Parallel()
	v := &Validator{CacheDir: t.TempDir()}
	d := cachedBlob(t, v, "good")
	if err := os.WriteFile(v.blobPath(d), []byte("evil"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := v.materialize(context.Background(), t.TempDir(), repo.Tree{{Path: "f", Digest: d, Size: 4}})
	if err == nil {
		t.Fatal("materialize accepted a corrupt blob")
	}
	if _, err := os.Stat(v.blobPath(d)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the corrupt blob is still cached: %v", err)
	}
}

// pidLines collects the pids a command prints and signals when it printed "started".
type pidLines struct {
	mu      sync.Mutex
	pid     int
	started chan struct{}
	once    sync.Once
}

func newPidLines() *pidLines { return &pidLines{started: make(chan struct{})} }

func (p *pidLines) progress(line string) {
	if n, err := strconv.Atoi(line); err == nil {
		p.mu.Lock()
		p.pid = n
		p.mu.Unlock()
	}
	if line == "started" {
		p.once.Do(func() { close(p.started) })
	}
}

func (p *pidLines) get() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

func shSpec(t *testing.T, script string) runSpec {
	t.Helper()
	return runSpec{
		Argv: []string{"sh", "-c", script}, Dir: t.TempDir(), Env: os.Environ(), Timeout: 10 * time.Second,
		LogPath: filepath.Join(t.TempDir(), "output.log"), Grace: 200 * time.Millisecond,
	}
}

// TestRunKillsTheGroupOnTimeout ensures a command that outlives its timeout is stopped with
// everything it started, including children that ignore SIGTERM, and fails as timed out.
func TestRunKillsTheGroupOnTimeout(t *testing.T) {
	t.Parallel()
	needUnix(t)
	for name, script := range map[string]string{
		"children":         `sleep 100 & echo $$; echo started; sleep 100`,
		"ignoring SIGTERM": `trap "" TERM; sleep 100 & echo $$; echo started; sleep 100`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lines := newPidLines()
			s := shSpec(t, script)
			s.Timeout = 300 * time.Millisecond
			s.Progress = func(line string) {
				lines.progress(line)
				if line == "started" && !groupAlive(lines.get()) {
					t.Errorf("the group %d of a running command looks dead", lines.get())
				}
			}
			begin := time.Now()
			res, err := runCommand(context.Background(), s)
			if err != nil {
				t.Fatalf("runCommand: %v", err)
			}
			if elapsed := time.Since(begin); elapsed > 3*time.Second {
				t.Errorf("took %v to stop a command with a 300ms timeout", elapsed)
			}
			if !res.TimedOut || res.ExitCode != -1 || res.Reason != "timed out after 300ms" {
				t.Errorf("result = %+v, want timed out, exit code -1", res)
			}
			if lines.get() != res.Pgid {
				t.Errorf("the shell's pid is %d, the group %d", lines.get(), res.Pgid)
			}
			if groupAlive(res.Pgid) || res.Survivors {
				t.Errorf("processes of group %d outlived the run", res.Pgid)
			}
		})
	}
}

// TestRunLeavesNoChildBehind ensures what a command started in the background dies with it,
// whether it holds the output open or not.
func TestRunLeavesNoChildBehind(t *testing.T) {
	t.Parallel()
	needUnix(t)
	for _, script := range []string{`sleep 100 & echo $$`, `sleep 100 >/dev/null 2>&1 & echo $$`} {
		lines := newPidLines()
		s := shSpec(t, script)
		s.Progress = lines.progress
		res, err := runCommand(context.Background(), s)
		if err != nil || res.ExitCode != 0 || res.TimedOut {
			t.Fatalf("runCommand(%s) = %+v, %v; want exit code 0", script, res, err)
		}
		if lines.get() != res.Pgid || groupAlive(res.Pgid) {
			t.Errorf("%s: processes of group %d outlived the run", script, res.Pgid)
		}
	}
}

// TestRunStopsWhenTheContextEnds ensures a lost claim or a shutdown stops the whole group at
// once and answers the context's cause.
func TestRunStopsWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	needUnix(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	lost := errors.New("claim lost")
	lines := newPidLines()
	s := shSpec(t, `sleep 100 & sleep 100 & echo started; wait`)
	s.Progress = lines.progress
	go func() {
		<-lines.started
		cancel(lost)
	}()
	begin := time.Now()
	res, err := runCommand(ctx, s)
	if !errors.Is(err, lost) {
		t.Fatalf("runCommand = %v, want the context's cause", err)
	}
	if elapsed := time.Since(begin); elapsed > 3*time.Second {
		t.Errorf("took %v to stop", elapsed)
	}
	if res.Pgid == 0 || groupAlive(res.Pgid) {
		t.Errorf("processes of group %d outlived the run", res.Pgid)
	}
}

// TestRunReportsExitAndLog ensures the exit code, the digest of the whole log (stdout and
// stderr), its tail from a line boundary, and the last line as progress.
func TestRunReportsExitAndLog(t *testing.T) {
	t.Parallel()
	needUnix(t)
	var last string
	s := shSpec(t, `i=0; while [ $i -lt 12000 ]; do echo "line number $i"; i=$((i+1)); done; echo "  to stderr  " >&2; echo; exit 3`)
	s.Progress = func(line string) { last = line }
	res, err := runCommand(context.Background(), s)
	if err != nil {
		t.Fatalf("runCommand: %v", err)
	}
	var want strings.Builder
	for i := range 12000 {
		want.WriteString("line number " + strconv.Itoa(i) + "\n")
	}
	want.WriteString("  to stderr  \n\n")
	log := want.String()
	if res.ExitCode != 3 || res.TimedOut || res.Reason != "" {
		t.Errorf("result = %+v, want exit code 3", res)
	}
	if got := digestOf([]byte(log)); res.LogDigest != got || res.LogBytes != int64(len(log)) {
		t.Errorf("log digest %s of %d bytes, want %s of %d", res.LogDigest, res.LogBytes, got, len(log))
	}
	if len(res.Tail) > maxOutputBytes || len(res.Tail) < maxOutputBytes-100 {
		t.Errorf("tail is %d bytes, want just under %d", len(res.Tail), maxOutputBytes)
	}
	if !strings.HasSuffix(log, res.Tail) || log[len(log)-len(res.Tail)-1] != '\n' {
		t.Errorf("the tail does not start at a line: %.40q", res.Tail)
	}
	if last != "to stderr" {
		t.Errorf("last progress = %q, want the last non-empty line", last)
	}

	s = shSpec(t, `echo fine`)
	if res, err := runCommand(context.Background(), s); err != nil || res.ExitCode != 0 || res.Tail != "fine\n" {
		t.Errorf("runCommand(echo fine) = %+v, %v", res, err)
	}
}

// TestRunRefusesWhatCannotStart ensures a missing or non-executable command is an error, not
// a failed validation.
func TestRunRefusesWhatCannotStart(t *testing.T) {
	t.Parallel()
	needUnix(t)
	s := shSpec(t, "")
	if err := os.WriteFile(filepath.Join(s.Dir, "check.sh"), []byte("exit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{{"ag-no-such-command"}, {"./check.sh"}, {"./missing.sh"}} {
		s.Argv = argv
		if _, err := runCommand(context.Background(), s); err == nil {
			t.Errorf("runCommand(%q) started", argv)
		}
		_ = os.Remove(s.LogPath)
	}
	s.Argv = []string{"sh", "./check.sh"}
	if res, err := runCommand(context.Background(), s); err != nil || res.ExitCode != 0 {
		t.Errorf("runCommand(sh ./check.sh) = %+v, %v", res, err)
	}
}

// TestLogTail ensures the tail keeps the end of the log within the limit, from a line
// boundary when there is one, as valid UTF-8.
func TestLogTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct{ log, want string }{
		{"", ""},
		{"short\n", "short\n"},
		{"0123456789\nabcdef\n", "abcdef\n"},         // cut inside the first line: from the next one
		{"0123\n456789abc\n", "456789abc\n"},         // cut right after a newline: keep that line
		{"0123456789abcdefgh", "89abcdefgh"},         // no newline at all: the raw end
		{"0123456789\nabcdefgh\n", "abcdefgh\n"},     // a line longer than what is left: still at a line
		{"aaaaaaaaaa\xff\xfeok\n", "aaaa\ufffdok\n"}, // U+FFFD is longer than the bytes it replaces
	} {
		path := filepath.Join(dir, "log")
		if err := os.WriteFile(path, []byte(c.log), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := logTail(path, int64(len(c.log)), 10)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want || len(got) > 10 || !utf8.ValidString(got) {
			t.Errorf("logTail(%q, 10) = %q, want %q", c.log, got, c.want)
		}
	}
}

// TestProgressLine ensures progress fits the server's limit as valid UTF-8.
func TestProgressLine(t *testing.T) {
	t.Parallel()
	got := progressLine(strings.Repeat("é", 600) + "\xff")
	if len(got) > maxProgressBytes || !utf8.ValidString(got) || !strings.HasPrefix(got, "éé") {
		t.Errorf("progressLine = %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if got := progressLine("  ok  "); got != "ok" {
		t.Errorf("progressLine = %q", got)
	}
}

// TestCommandEnv ensures the command gets the worker's environment without its token, and
// the payload's variables over it.
func TestCommandEnv(t *testing.T) {
	t.Parallel()
	env, err := commandEnv([]string{"HOME=/h", "AG_TOKEN=secret", "GOFLAGS=-x"}, map[string]string{"GOFLAGS": "-count=1", "CI": "1"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(env, " "), "HOME=/h GOFLAGS=-x CI=1 GOFLAGS=-count=1"; got != want {
		t.Errorf("env = %s, want %s", got, want)
	}
	cmd := exec.Command("sh", "-c", `printf %s "$GOFLAGS"`)
	cmd.Env = env
	if out, err := cmd.Output(); err != nil || string(out) != "-count=1" {
		t.Errorf("GOFLAGS seen by the command = %q, %v", out, err)
	}
	if _, err := commandEnv(nil, map[string]string{"A=B": "x"}); err == nil {
		t.Error("a name with '=' was accepted")
	}
}

// TestHandleRefusesABadPayloadForGood ensures a payload that cannot be run fails the job
// without a retry, before anything is fetched.
func TestHandleRefusesABadPayloadForGood(t *testing.T) {
	t.Parallel()
	v := &Validator{
		Client: client.New("http://127.0.0.1:1", "unused"), Signer: attest.NewSigner(nil), CacheDir: t.TempDir(),
	}
	for _, payload := range []map[string]any{
		{},
		{"repository": "r", "candidate_revision": "rev", "tree_digest": digestOf(nil), "command": []any{}, "timeout": "1m"},
		{"repository": "r", "candidate_revision": "rev", "tree_digest": digestOf(nil), "command": []any{"true"}, "timeout": "soon"},
		{"repository": "r", "candidate_revision": "rev", "tree_digest": digestOf(nil), "command": []any{"true"}, "timeout": "1m",
			"env": map[string]any{"A=B": "x"}},
	} {
		s, err := structpb.NewStruct(payload)
		if err != nil {
			t.Fatal(err)
		}
		_, err = v.Handle(context.Background(), &Job{Job: &agwpv1.Job{Id: "job1", Kind: client.KindValidate, Payload: s}})
		var perm permanentError
		if !errors.As(err, &perm) {
			t.Errorf("payload %v: err = %v, want a permanent error", payload, err)
		}
	}
}

// handleValidate runs a validate job of payload through v.Handle, as a worker does the job
// job_1 it claimed as ci|w1.
func handleValidate(t testing.TB, v *Validator, payload map[string]any) (Outcome, error) {
	t.Helper()
	s, err := structpb.NewStruct(payload)
	if err != nil {
		t.Fatal(err)
	}
	return v.Handle(context.Background(), &Job{Job: &agwpv1.Job{Id: "job_1", Kind: client.KindValidate, Payload: s, Attempts: 1, ClaimedBy: "ci|w1"}})
}

// serveCandidate serves files as the candidate rev_1, as a server does to the worker holding
// its validate job, and answers a client of it, the tree's digest, and a signer with its public
// key.
func serveCandidate(t testing.TB, files map[string]string) (*client.Client, string, *attest.Signer, ed25519.PublicKey) {
	t.Helper()
	repos := &fakeRepos{revision: "rev_1", blobs: map[string][]byte{}}
	for p, content := range files {
		d := digestOf([]byte(content))
		repos.blobs[d] = []byte(content)
		repos.tree = append(repos.tree, repo.Entry{Path: p, Digest: d, Size: uint64(len(content))})
	}
	sort.Slice(repos.tree, func(i, j int) bool { return repos.tree[i].Path < repos.tree[j].Path })
	repos.treeDigest = repos.tree.Digest()
	mux := http.NewServeMux()
	mux.Handle(agwpv1connect.NewRepositoryServiceHandler(repos))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return client.New(srv.URL, "t"), repos.treeDigest, attest.NewSigner(priv), pub
}
