package gitstore

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// loadRepo stores every object of the git repository dir in a new storer, as ag holds them.
func loadRepo(t *testing.T, env []string, dir string) *countingStorer {
	t.Helper()
	s := newStorer()
	out := []byte(git(t, env, dir, nil, "cat-file", "--batch-all-objects", "--batch"))
	for len(out) > 0 {
		nl := bytes.IndexByte(out, '\n')
		f := strings.Fields(string(out[:nl]))
		if len(f) != 3 {
			t.Fatalf("cat-file --batch header %q", out[:nl])
		}
		size, err := strconv.Atoi(f[2])
		if err != nil {
			t.Fatal(err)
		}
		typ, err := plumbing.ParseObjectType(f[1])
		if err != nil {
			t.Fatal(err)
		}
		data := out[nl+1 : nl+1+size]
		out = out[nl+1+size+1:]
		id, err := writeObject(s, typ, data)
		if err != nil {
			t.Fatal(err)
		}
		if id.String() != f[0] {
			t.Fatalf("object %s stored as %s", f[0], id)
		}
	}
	return s
}

// history builds a repository with the git command line, each command a minute after the one
// before: committer times that follow the history, as ag's mainline has them.
type history struct {
	t    *testing.T
	env  []string
	dir  string
	tick int
}

func newHistory(t *testing.T, env []string) *history {
	h := &history{t: t, env: env, dir: t.TempDir()}
	h.git("init", "-q", "-b", "main")
	return h
}

func (h *history) git(args ...string) string {
	h.t.Helper()
	h.tick++
	date := fmt.Sprintf("%d +0000", 1700000000+60*h.tick)
	env := append(slices.Clip(h.env), "GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date)
	return strings.TrimSpace(git(h.t, env, h.dir, nil, args...))
}

// write sets files (path → content; "" deletes the path, a file or a directory).
func (h *history) write(files map[string]string) {
	h.t.Helper()
	for p, c := range files {
		full := filepath.Join(h.dir, filepath.FromSlash(p))
		if c == "" {
			if err := os.RemoveAll(full); err != nil {
				h.t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			h.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			h.t.Fatal(err)
		}
	}
}

// commit writes files and commits everything in the work tree.
func (h *history) commit(msg string, files map[string]string) string {
	h.t.Helper()
	h.write(files)
	h.git("add", "-A")
	h.git("commit", "-q", "--allow-empty", "-m", msg)
	return h.git("rev-parse", "HEAD")
}

// objectSet answers the ids `git rev-list --objects args...` prints in dir.
func objectSet(t *testing.T, env []string, dir string, args ...string) map[string]bool {
	t.Helper()
	set := map[string]bool{}
	for _, line := range strings.Split(git(t, env, dir, nil, append([]string{"rev-list", "--objects"}, args...)...), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			set[f[0]] = true
		}
	}
	return set
}

// checkSent compares the objects objectsToSend answers for wants and haves with git's. Each is
// sent once; every object the wants reach and the haves do not is sent; nothing else is sent
// but objects the haves reach (objectsToSend says when it sends those). When committer times
// follow the history (inOrder), both walks find the commits to send exactly, and every object
// `git rev-list --objects WANTS --not HAVES` lists must be sent too; otherwise git's walk, like
// ag's, may take a commit the client has for one to send, and lists more than it needs.
func checkSent(t *testing.T, env []string, dir string, s *countingStorer, wants, haves []string, inOrder bool) (sent, extra int) {
	t.Helper()
	var w, c []plumbing.Hash
	for _, h := range wants {
		w = append(w, plumbing.NewHash(h))
	}
	for _, h := range haves {
		c = append(c, plumbing.NewHash(h))
	}
	ids, _, err := objectsToSend(context.Background(), s, w, c, nil)
	if err != nil {
		t.Fatalf("objectsToSend(%v, %v): %v", wants, haves, err)
	}
	reached := objectSet(t, env, dir, wants...)
	had := map[string]bool{}
	if len(haves) > 0 {
		had = objectSet(t, env, dir, haves...)
	}
	gits := objectSet(t, env, dir, append(append(slices.Clone(wants), "--not"), haves...)...)
	seen := map[string]bool{}
	for _, id := range ids {
		h := id.String()
		switch {
		case seen[h]:
			t.Errorf("wants %v, haves %v: %s sent twice", wants, haves, h)
		case !reached[h]:
			t.Errorf("wants %v, haves %v: sent %s, which the wants do not reach", wants, haves, h)
		case !gits[h] && !had[h]:
			t.Errorf("wants %v, haves %v: sent %s, which neither git sends nor the client has", wants, haves, h)
		case !gits[h]:
			extra++
		}
		seen[h] = true
	}
	for h := range reached {
		if !seen[h] && (!had[h] || inOrder && gits[h]) {
			t.Errorf("wants %v, haves %v: %s not sent (git sends %d objects, ag %d)", wants, haves, h, len(gits), len(ids))
		}
	}
	return len(ids), extra
}

// TestCloneAfterARevert is the history of the report: two files in lib/, one changed and
// changed back, so that lib/ is again the tree of two commits before, and a dependency bumped
// and downgraded the same way. Built as ag builds its mainline, the clone must be whole.
func TestCloneAfterARevert(t *testing.T) {
	t.Parallel()
	needGit(t)
	env := gitEnv(t)
	r := &served{t: t, s: newStorer()}
	r.commit("Import", map[string][]byte{"README.md": []byte("# app\n"), "go.mod": []byte("require x v1.2.0\n")})
	r.commit("Add lib", map[string][]byte{"lib/b.go": []byte("package lib // b\n"), "lib/c.go": []byte("package lib // c\n")})
	r.commit("Change c.go", map[string][]byte{"lib/c.go": []byte("package lib // c, changed\n")})
	r.commit("Revert c.go", map[string][]byte{"lib/c.go": []byte("package lib // c\n")})
	r.commit("Bump x", map[string][]byte{"go.mod": []byte("require x v1.3.0\n")})
	r.commit("Downgrade x", map[string][]byte{"go.mod": []byte("require x v1.2.0\n")})
	r.commit("Touch README", map[string][]byte{"README.md": []byte("# app, again\n")})
	srv := httptest.NewServer(NewHandler(r.open))
	t.Cleanup(srv.Close)
	dir := filepath.Join(t.TempDir(), "app")
	if _, stderr, err := gitRun(env, "", nil, "clone", "-q", srv.URL, dir); err != nil {
		t.Fatalf("git clone: %v\n%s", err, stderr)
	}
	git(t, env, dir, nil, "fsck", "--strict", "--no-dangling", "--full")
	if got, err := os.ReadFile(filepath.Join(dir, "lib", "b.go")); err != nil || string(got) != "package lib // b\n" {
		t.Errorf("lib/b.go in the clone: %q, %v", got, err)
	}
	// With no haves, what git sends is exactly what the clone needs.
	if sent, extra := checkSent(t, env, dir, r.s, []string{r.main.String()}, nil, true); extra != 0 {
		t.Errorf("the clone sent %d objects, %d more than git", sent, extra)
	}
}

// wholeHistories build histories in which trees and blobs come back: subtrees reverted, old
// blobs under new paths, directories renamed there and back, merges of branches that did so.
// Each answers the commits its client starts from besides each commit of main, and the
// branch to serve as ag's mainline is main.
var wholeHistories = map[string]func(h *history) (haves [][]string){
	"subtree reverts": func(h *history) [][]string {
		h.commit("Import", map[string]string{"README.md": "# app\n", "go.mod": "require x v1.2.0\n"})
		h.commit("Add lib", map[string]string{"lib/b.go": "package lib // b\n", "lib/c.go": "package lib // c\n"})
		h.commit("Change c.go", map[string]string{"lib/c.go": "package lib // c v2\n"})
		h.git("revert", "--no-edit", "HEAD")
		h.commit("Bump x", map[string]string{"go.mod": "require x v1.3.0\n"})
		h.git("revert", "--no-edit", "HEAD")
		h.git("revert", "--no-edit", "HEAD")
		h.commit("Add d.go", map[string]string{"lib/d.go": "package lib // d\n", "lib/deep/e.go": "package deep\n"})
		h.commit("Remove d.go", map[string]string{"lib/d.go": "", "lib/deep": ""})
		h.commit("Change c.go again", map[string]string{"lib/c.go": "package lib // c v2\n"})
		return nil
	},
	"old blobs under new paths": func(h *history) [][]string {
		first := h.commit("Import", map[string]string{"a/x.txt": "one\n", "a/y.txt": "two\n", "top.txt": "top\n"})
		h.commit("Drop x", map[string]string{"a/x.txt": ""})
		h.commit("x comes back as b/x", map[string]string{"b/x.txt": "one\n"})
		h.commit("a copy of the first a/", map[string]string{"c/x.txt": "one\n", "c/y.txt": "two\n"})
		h.commit("Drop c", map[string]string{"c": ""})
		h.git("checkout", "HEAD~1", "--", "c")
		h.commit("Restore c", nil)
		h.commit("Emptied", map[string]string{"a": "", "b": "", "c": "", "top.txt": ""})
		h.git("checkout", first, "--", ".")
		h.commit("Back to the first tree", nil)
		h.commit("y under a new name", map[string]string{"deep/er/y.txt": "two\n", "deep/er/z.txt": "one\n"})
		return nil
	},
	"directory renames": func(h *history) [][]string {
		h.commit("Import", map[string]string{"lib/a.go": "package lib\n", "lib/sub/b.go": "package sub // b\n", "lib/sub/c.go": "package sub // c\n"})
		h.git("mv", "lib", "pkg")
		h.commit("Rename lib to pkg", nil)
		h.commit("Change c.go", map[string]string{"pkg/sub/c.go": "package sub // c v2\n"})
		h.git("mv", "pkg/sub", "sub")
		h.commit("Move sub up", nil)
		h.git("mv", "sub", "pkg/sub")
		h.commit("Move sub back, c.go as it was", map[string]string{"pkg/sub/c.go": "package sub // c\n"})
		h.git("mv", "pkg", "lib")
		h.commit("Rename pkg back to lib", nil)
		h.git("mv", "lib/sub/b.go", "lib/sub/b2.go")
		h.commit("Rename a file", nil)
		return nil
	},
	"merges": func(h *history) [][]string {
		base := h.commit("Import", map[string]string{"lib/b.go": "package lib // b\n", "lib/c.go": "package lib // c\n", "README.md": "# app\n"})
		h.git("checkout", "-q", "-b", "side")
		h.commit("Side: change c.go", map[string]string{"lib/c.go": "package lib // c v2\n"})
		h.git("revert", "--no-edit", "HEAD")
		side := h.commit("Side: add side.txt", map[string]string{"side.txt": "side\n"})
		h.git("checkout", "-q", "main")
		h.commit("Main: change b.go", map[string]string{"lib/b.go": "package lib // b v2\n"})
		h.commit("Main: change b.go back", map[string]string{"lib/b.go": "package lib // b\n"})
		h.git("merge", "-q", "--no-ff", "-m", "Merge side", "side")
		h.git("checkout", "-q", "-b", "rename", base)
		h.git("mv", "lib", "pkg")
		renamed := h.commit("Rename: lib to pkg", map[string]string{"pkg/c.go": "package lib // c v2\n"})
		h.git("checkout", "-q", "main")
		h.git("merge", "-q", "--no-ff", "-m", "Merge rename", "rename")
		h.commit("Main: lib/ as it was", map[string]string{"lib/b.go": "package lib // b\n", "lib/c.go": "package lib // c\n"})
		return [][]string{{side}, {renamed}, {base, side}, {side, renamed}}
	},
}

// TestClonesAndFetchesAreWhole clones each of wholeHistories from the handler with the real
// git client, and fetches it into clients that hold each commit of main and a few sets of
// commits of other branches: every clone and fetch must succeed and be whole under
// `git fsck --strict`, and what is sent must be what git sends (checkSent).
func TestClonesAndFetchesAreWhole(t *testing.T) {
	t.Parallel()
	needGit(t)
	for name, build := range wholeHistories {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := gitEnv(t)
			h := newHistory(t, env)
			haveSets := build(h)
			main := h.git("rev-parse", "main")
			s := loadRepo(t, env, h.dir)
			srv := httptest.NewServer(NewHandler(func(context.Context) (Snapshot, error) {
				return Snapshot{Objects: s, Main: plumbing.NewHash(main)}, nil
			}))
			t.Cleanup(srv.Close)
			tmp := t.TempDir()

			clone := filepath.Join(tmp, "clone")
			if _, stderr, err := gitRun(env, "", nil, "clone", "-q", srv.URL, clone); err != nil {
				t.Fatalf("git clone: %v\n%s", err, stderr)
			}
			git(t, env, clone, nil, "fsck", "--strict", "--no-dangling", "--full")
			if got := strings.TrimSpace(git(t, env, clone, nil, "rev-parse", "HEAD")); got != main {
				t.Fatalf("cloned HEAD %s, want %s", got, main)
			}
			if got, want := git(t, env, clone, nil, "ls-tree", "-r", "HEAD"), git(t, env, h.dir, nil, "ls-tree", "-r", "main"); got != want {
				t.Errorf("the clone's files:\n%s\nwant:\n%s", got, want)
			}
			if sent, extra := checkSent(t, env, h.dir, s, []string{main}, nil, true); extra != 0 {
				t.Errorf("the clone sent %d objects, %d more than git", sent, extra)
			}

			for _, c := range strings.Fields(h.git("rev-list", "main")) {
				haveSets = append(haveSets, []string{c})
			}
			var sent, extra int
			for i, haves := range haveSets {
				client := filepath.Join(tmp, fmt.Sprintf("client%d", i))
				git(t, env, "", nil, "init", "-q", "--bare", client)
				var specs []string
				for j, c := range haves {
					specs = append(specs, fmt.Sprintf("%s:refs/heads/have%d", c, j))
				}
				// Over git's own transport, the client holds exactly what its commits reach.
				git(t, env, client, nil, append([]string{"fetch", "-q", h.dir}, specs...)...)
				if _, stderr, err := gitRun(env, client, nil, "fetch", "-q", srv.URL, "+refs/heads/main:refs/remotes/origin/main"); err != nil {
					t.Errorf("haves %v: git fetch: %v\n%s", haves, err, stderr)
					continue
				}
				if _, stderr, err := gitRun(env, client, nil, "fsck", "--strict", "--no-dangling", "--full"); err != nil {
					t.Errorf("haves %v: git fsck after the fetch: %v\n%s", haves, err, stderr)
				}
				if got := strings.TrimSpace(git(t, env, client, nil, "rev-parse", "refs/remotes/origin/main")); got != main {
					t.Errorf("haves %v: fetched %s, want %s", haves, got, main)
				}
				n, x := checkSent(t, env, h.dir, s, []string{main}, haves, true)
				sent += n
				extra += x
			}
			t.Logf("%d fetches sent %d objects, %d of them the client had", len(haveSets), sent, extra)
		})
	}
}

// randomPaths are the files of random histories: few names and few contents, so that trees
// and blobs recur under the same and other paths, and a and b hold the same shapes, so that
// renaming one to the other keeps every path a file or a directory.
var randomPaths = []string{"top", "a/x", "a/y", "a/c/x", "a/c/y", "b/x", "b/y", "b/c/x", "b/c/y"}

var randomContents = []string{"1\n", "2\n", "3\n"}

// randomHistory writes a history of a few branches from r: commits that change, delete and add
// files, bring back an earlier commit's whole tree or one directory of it, rename a to b or c
// across, and merge branches. Committer times follow the history, or with skewed are off by
// up to four commits either way, so that a commit may be older than its parent. It answers
// the commits and the branches' heads.
func randomHistory(t *testing.T, s *countingStorer, r *rand.Rand, skewed bool) (commits, heads []plumbing.Hash) {
	t.Helper()
	var models []map[string]string
	var branches []int
	write := func(m map[string]string, parents ...int) {
		files := make(map[string][]byte, len(m))
		for p, c := range m {
			files[p] = []byte(c)
		}
		tree, err := WriteFiles(s, files)
		if err != nil {
			t.Fatal(err)
		}
		var ps []plumbing.Hash
		for _, p := range parents {
			ps = append(ps, commits[p])
		}
		tick := len(commits)
		if skewed {
			tick += r.IntN(9) - 4
		}
		when := time.Unix(1700000000+60*int64(tick), 0).UTC()
		id, err := WriteCommit(s, Commit{
			Tree: tree, Parents: ps, Message: fmt.Sprintf("Commit %d", len(commits)),
			Author:    object.Signature{Name: "Ada Agent", Email: "ada@agents.example", When: when},
			Committer: object.Signature{Name: "ag", Email: "ag@ag.example", When: when},
		})
		if err != nil {
			t.Fatal(err)
		}
		commits = append(commits, id)
		models = append(models, m)
	}
	first := map[string]string{}
	for _, p := range randomPaths {
		if r.IntN(2) == 0 {
			first[p] = randomContents[r.IntN(len(randomContents))]
		}
	}
	write(first)
	branches = append(branches, 0)
	for n := 4 + r.IntN(20); len(commits) < n; {
		if len(branches) < 3 && r.IntN(6) == 0 {
			branches = append(branches, r.IntN(len(commits)))
		}
		b := r.IntN(len(branches))
		parents := []int{branches[b]}
		m := maps.Clone(models[branches[b]])
		if o := r.IntN(len(branches)); o != b && branches[o] != branches[b] && r.IntN(4) == 0 {
			parents = append(parents, branches[o])
			for p, c := range models[branches[o]] {
				if r.IntN(2) == 0 {
					m[p] = c
				}
			}
		}
		switch old := models[r.IntN(len(models))]; r.IntN(6) {
		case 0: // an earlier tree, whole
			m = maps.Clone(old)
		case 1: // one directory as an earlier commit had it
			dir := []string{"a/", "b/", "a/c/", "b/c/"}[r.IntN(4)]
			for _, p := range randomPaths {
				if strings.HasPrefix(p, dir) {
					delete(m, p)
					if c, ok := old[p]; ok {
						m[p] = c
					}
				}
			}
		case 2: // a directory renamed over another
			from, to := "a/", "b/"
			switch r.IntN(3) {
			case 0:
				from, to = to, from
			case 1:
				from, to = "a/c/", "b/c/"
			}
			moved := map[string]string{}
			for p, c := range m {
				if strings.HasPrefix(p, from) {
					moved[to+strings.TrimPrefix(p, from)] = c
					delete(m, p)
				} else if strings.HasPrefix(p, to) {
					delete(m, p)
				}
			}
			maps.Copy(m, moved)
		default:
			for range 1 + r.IntN(3) {
				p := randomPaths[r.IntN(len(randomPaths))]
				if r.IntN(3) == 0 {
					delete(m, p)
				} else {
					m[p] = randomContents[r.IntN(len(randomContents))]
				}
			}
		}
		write(m, parents...)
		branches[b] = len(commits) - 1
	}
	for _, h := range branches {
		heads = append(heads, commits[h])
	}
	return commits, heads
}

// TestObjectsToSendMatchesGit compares what objectsToSend answers with what git sends
// (checkSent) for random histories, wanting one branch or all, with random haves: none, an
// ancestor, another branch's commits, a descendant of the wants. One history in four has
// skewed committer times. Each seed is a subtest, which
// -run 'TestObjectsToSendMatchesGit/seed=N$' runs alone.
func TestObjectsToSendMatchesGit(t *testing.T) {
	t.Parallel()
	needGit(t)
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("seed %d failed", seed)
				}
			})
			r := rand.New(rand.NewPCG(seed, 0x6167))
			env := gitEnv(t)
			s := newStorer()
			skewed := seed%4 == 0
			commits, heads := randomHistory(t, s, r, skewed)
			var all []plumbing.Hash
			iter, err := s.IterEncodedObjects(plumbing.AnyObject)
			if err != nil {
				t.Fatal(err)
			}
			if err := iter.ForEach(func(o plumbing.EncodedObject) error {
				all = append(all, o.Hash())
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			var pack bytes.Buffer
			if err := writePlainPack(&pack, s, all, nil); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			git(t, env, dir, nil, "init", "-q", "--bare")
			git(t, env, dir, pack.Bytes(), "index-pack", "--strict", "--stdin")
			for range 5 {
				wants := []string{heads[r.IntN(len(heads))].String()}
				if r.IntN(3) == 0 {
					wants = wants[:0]
					for _, h := range heads {
						wants = append(wants, h.String())
					}
				}
				var haves []string
				for range r.IntN(4) {
					haves = append(haves, commits[r.IntN(len(commits))].String())
				}
				checkSent(t, env, dir, s, wants, haves, !skewed)
			}
		})
	}
}
