package gitstore

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// shallowFile answers the commits of a clone's .git/shallow, sorted; none when it has none.
func shallowFile(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ".git", "shallow"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	ids := strings.Fields(string(b))
	slices.Sort(ids)
	return ids
}

// TestShallowRepositoryIsServedShallow serves what a shallow clone holds (depth 3 of ten
// commits, a merge below where it stops, a merge above) as a repository whose history stops
// there: git clones it shallow at the same commits (.git/shallow), with the same commit ids,
// `git fsck --strict` clean, and nothing below is ever read; after the mainline moves, the
// shallow clone fetches, and so do the whole history the shallow clone was made of and a
// client shallow at another commit; `git clone --depth` is refused, saying so.
func TestShallowRepositoryIsServedShallow(t *testing.T) {
	t.Parallel()
	needGit(t)
	env := gitEnv(t)
	h := newHistory(t, env)
	for i := range 5 {
		h.commit("Step "+strings.Repeat("i", i+1), map[string]string{"steps.txt": strings.Repeat("x\n", i+1)})
	}
	h.git("checkout", "-q", "-b", "side")
	h.commit("Side below", map[string]string{"side/below.txt": "below\n"})
	h.git("checkout", "-q", "main")
	h.commit("Main below", map[string]string{"main.txt": "below\n"})
	h.git("merge", "-q", "--no-edit", "side") // below the boundary
	h.git("checkout", "-q", "side")
	h.commit("Side above", map[string]string{"side/above.txt": "above\n"})
	h.git("checkout", "-q", "main")
	h.commit("Main above", map[string]string{"main.txt": "above\n"})
	h.git("merge", "-q", "--no-edit", "side") // its parents are where depth 2 stops
	if n := len(strings.Fields(h.git("rev-list", "HEAD"))); n != 11 {
		t.Fatalf("the history has %d commits", n)
	}

	shal := filepath.Join(t.TempDir(), "shallow")
	git(t, env, "", nil, "clone", "-q", "--depth", "2", "file://"+h.dir, shal)
	boundary := shallowFile(t, shal)
	if len(boundary) != 2 {
		t.Fatalf("the shallow clone stops at %v, want two commits", boundary)
	}
	head := strings.TrimSpace(git(t, env, shal, nil, "rev-parse", "HEAD"))
	r := &served{t: t, s: loadRepo(t, env, shal), main: plumbing.NewHash(head),
		root: plumbing.NewHash(strings.TrimSpace(git(t, env, shal, nil, "rev-parse", "HEAD^{tree}")))}
	for _, id := range boundary {
		r.shallow = append(r.shallow, plumbing.NewHash(id))
	}
	r.n = 100
	srv := httptest.NewServer(NewHandler(r.open))
	t.Cleanup(srv.Close)

	clone := filepath.Join(t.TempDir(), "clone")
	if _, stderr, err := gitRun(env, "", nil, "clone", srv.URL, clone); err != nil {
		t.Fatalf("git clone of a shallow repository: %v\n%s", err, stderr)
	}
	if got := shallowFile(t, clone); !slices.Equal(got, boundary) {
		t.Fatalf("the clone is shallow at %v, want %v", got, boundary)
	}
	if got, want := git(t, env, clone, nil, "rev-list", "HEAD"), git(t, env, shal, nil, "rev-list", "HEAD"); got != want {
		t.Fatalf("the clone's commits:\n%s\nwant the shallow clone's:\n%s", got, want)
	}
	git(t, env, clone, nil, "fsck", "--strict", "--no-dangling", "--full")

	// The mainline moves: the shallow clone of ag fetches; so does the whole history, which
	// holds what lies below, and a clone shallow at the head the server had.
	tip := r.commit("Next", map[string][]byte{"next.txt": []byte("next\n")})
	if _, stderr, err := gitRun(env, clone, nil, "pull", "-q", "--ff-only"); err != nil {
		t.Fatalf("git pull of a shallow clone: %v\n%s", err, stderr)
	}
	if got := strings.TrimSpace(git(t, env, clone, nil, "rev-parse", "HEAD")); got != tip.String() {
		t.Fatalf("after git pull HEAD is %s, want %s", got, tip)
	}
	if got := shallowFile(t, clone); !slices.Equal(got, boundary) {
		t.Fatalf("after git pull the clone is shallow at %v, want %v", got, boundary)
	}
	git(t, env, clone, nil, "fsck", "--strict", "--no-dangling", "--full")

	if _, stderr, err := gitRun(env, h.dir, nil, "fetch", "-q", srv.URL, "main"); err != nil {
		t.Fatalf("git fetch into the whole history: %v\n%s", err, stderr)
	}
	if got := strings.TrimSpace(git(t, env, h.dir, nil, "rev-parse", "FETCH_HEAD^")); got != head {
		t.Fatalf("the whole history fetched %s on top of %s, want on top of %s", tip, got, head)
	}
	if got := shallowFile(t, h.dir); got != nil {
		t.Fatalf("a fetch made the whole history shallow at %v", got)
	}
	git(t, env, h.dir, nil, "fsck", "--strict", "--full")

	tight := filepath.Join(t.TempDir(), "tight")
	git(t, env, "", nil, "clone", "-q", "--depth", "1", "file://"+shal, tight)
	if _, stderr, err := gitRun(env, tight, nil, "fetch", "-q", srv.URL, "main"); err != nil {
		t.Fatalf("git fetch into a clone shallow at %s: %v\n%s", head, err, stderr)
	}
	if got := shallowFile(t, tight); !slices.Equal(got, []string{head}) {
		t.Fatalf("the clone shallow at the old head is shallow at %v after a fetch", got)
	}
	git(t, env, tight, nil, "merge", "-q", "--ff-only", "FETCH_HEAD")
	git(t, env, tight, nil, "fsck", "--strict", "--no-dangling", "--full")

	_, stderr, err := gitRun(env, "", nil, "clone", "--depth", "1", srv.URL, filepath.Join(t.TempDir(), "depth"))
	if err == nil || !strings.Contains(stderr, "ag serves no shallow fetch") || !strings.Contains(stderr, "history from "+boundary[0]) {
		t.Errorf("git clone --depth 1: %v, want a refusal saying ag serves no shallow fetch and where the history starts:\n%s", err, stderr)
	}
}
