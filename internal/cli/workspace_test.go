package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
	"github.com/ag-coord/ag/internal/cli"
	"github.com/ag-coord/ag/internal/repo"
)

// fakeRepos is a repository server that answers whatever tree a test sets, valid or not, as a
// hostile server (or anything between the client and the server) could.
type fakeRepos struct {
	agwpv1connect.UnimplementedRepositoryServiceHandler
	mu    sync.Mutex
	rev   string
	paths []string          // in the order GetTree answers them
	files map[string]string // path → content
	blobs map[string][]byte // digest → content, of every tree set so far
	// diffs makes GetTree answer a request with since as today's server does: what changed
	// since that revision (one set before); without it, the whole tree, as a server from before
	// since does.
	diffs bool
	trees map[string]map[string]string // rev → its files, of every tree set so far
	// tamper, when set, changes each GetTree answer: a hostile server's.
	tamper func(*agwpv1.GetTreeResponse)
}

// set makes rev, holding files, the tree GetTree answers; paths it does not list come after
// those it does, in path order.
func (f *fakeRepos) set(rev string, files map[string]string, order ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.blobs == nil {
		f.blobs = map[string][]byte{}
	}
	f.rev, f.files = rev, files
	if f.trees == nil {
		f.trees = map[string]map[string]string{}
	}
	f.trees[rev] = files
	f.paths = append([]string(nil), order...)
	for _, p := range slices.Sorted(maps.Keys(files)) {
		if !slices.Contains(order, p) {
			f.paths = append(f.paths, p)
		}
		f.blobs[repo.Digest([]byte(files[p]))] = []byte(files[p])
	}
}

func (f *fakeRepos) GetTree(_ context.Context, req *agwpv1.GetTreeRequest) (*agwpv1.GetTreeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := &agwpv1.GetTreeResponse{Revision: f.rev}
	since, diff := f.trees[req.GetSince()]
	diff = diff && f.diffs
	if diff {
		res.Since = req.GetSince()
		for _, p := range slices.Sorted(maps.Keys(since)) {
			if _, ok := f.files[p]; !ok {
				res.Removed = append(res.Removed, p)
			}
		}
	}
	for _, p := range f.paths {
		c := f.files[p]
		if was, ok := since[p]; diff && ok && was == c {
			continue
		}
		res.Entries = append(res.Entries, &agwpv1.TreeEntry{Path: p, Digest: repo.Digest([]byte(c)), Size: uint64(len(c))})
	}
	if f.tamper != nil {
		f.tamper(res)
	}
	return res, nil
}

// bothAnswers runs test against a server answering a sync its whole tree (from before
// GetTreeRequest.since) and one answering what changed since the checkout's base.
func bothAnswers(t *testing.T, test func(t *testing.T, diffs bool)) {
	for _, diffs := range []bool{false, true} {
		name := "whole tree"
		if diffs {
			name = "changes since the base"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, diffs)
		})
	}
}

func (f *fakeRepos) GetBlob(_ context.Context, req *agwpv1.GetBlobRequest) (*agwpv1.GetBlobResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.blobs[req.GetDigest()]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such blob"))
	}
	return &agwpv1.GetBlobResponse{Content: b}, nil
}

func (f *fakeRepos) GetBlobs(_ context.Context, req *agwpv1.GetBlobsRequest, stream *connect.ServerStream[agwpv1.GetBlobsResponse]) error {
	for _, d := range req.GetDigests() {
		f.mu.Lock()
		b, ok := f.blobs[d]
		f.mu.Unlock()
		if !ok {
			return connect.NewError(connect.CodeNotFound, fmt.Errorf("blob %s: not found", d))
		}
		if err := stream.Send(&agwpv1.GetBlobsResponse{Blobs: []*agwpv1.BlobContent{{Digest: d, Content: b}}}); err != nil {
			return err
		}
	}
	return nil
}

func serveRepos(t *testing.T, f *fakeRepos) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(agwpv1connect.NewRepositoryServiceHandler(f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// hostilePaths are paths no checkout may hold, each with a piece of the rule that refuses it.
var hostilePaths = []struct{ path, rule string }{
	{"../x", `".." segment`},
	{"/abs", "starts with '/'"},
	{".ag/checkout.json", `".ag"`},
	{".git/config", `".git"`},
	{".GIT/config", `".GIT"`},
	{"src/" + strings.Repeat("n", 300), "300 bytes, more than 255"},
}

// listTree answers every file, directory and link under dir by its slash path, a directory's
// with a trailing '/' and a link's as "-> target".
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(d.Name(), "index-") && filepath.Base(filepath.Dir(path)) == ".ag" {
			// A checkout's index has a name of its own each time its base revision changes.
			rel = strings.TrimSuffix(rel, d.Name()) + "index-*"
		}
		switch {
		case d.IsDir():
			rel += "/"
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(path)
			rel += " -> " + target
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	return out
}

// checkoutFiles answers the files of a checkout with their contents, its .ag/ aside.
func checkoutFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, p := range listTree(t, dir) {
		if strings.HasPrefix(p, ".ag/") || strings.HasSuffix(p, "/") || strings.Contains(p, " -> ") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		got[p] = string(b)
	}
	return got
}

func assertFiles(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	if got := checkoutFiles(t, dir); !maps.Equal(got, want) {
		t.Errorf("%s holds %v, want %v (all: %q)", dir, got, want, listTree(t, dir))
	}
}

// baseRevision answers the revision a checkout's state says it is at.
func baseRevision(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, ".ag", "checkout.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		BaseRevision string `json:"base_revision"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	return st.BaseRevision
}

// TestCheckoutRefusesHostilePaths ensures `ag checkout` of a tree holding a path no checkout may
// hold fails naming the path and the rule, having written nothing: no file outside the target,
// no target directory (or, for an existing empty one, nothing in it), no staging directory.
func TestCheckoutRefusesHostilePaths(t *testing.T) {
	t.Parallel()
	for _, h := range hostilePaths {
		for _, existing := range []bool{false, true} {
			t.Run(fmt.Sprintf("%.20s/existing=%v", h.path, existing), func(t *testing.T) {
				t.Parallel()
				f := &fakeRepos{}
				// The valid files come first, so a client writing as it reads has written them.
				f.set("rev_1", map[string]string{"a.txt": "a\n", "src/b.txt": "b\n", h.path: "planted\n"}, "a.txt", "src/b.txt", h.path)
				url := serveRepos(t, f)
				parent := t.TempDir()
				target := filepath.Join(parent, "co")
				if existing {
					if err := os.Mkdir(target, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				out, err := runAg("checkout", "app", target, "--server", url, "--token", "t")
				if err == nil || !strings.Contains(err.Error(), h.path) || !strings.Contains(err.Error(), h.rule) {
					t.Fatalf("ag checkout of a tree holding %q: %v\n%s\nwant a refusal naming the path and %q", h.path, err, out, h.rule)
				}
				want := []string(nil)
				if existing {
					want = []string{"co/"}
				}
				if got := listTree(t, parent); !slices.Equal(got, want) {
					t.Errorf("after the refused checkout, %s holds %q, want %q", parent, got, want)
				}
			})
		}
	}
}

// TestCheckoutFailureLeavesNothing ensures a checkout that fails half way (here a blob the
// server cannot answer) leaves no target directory and no staging directory behind, and that
// an existing empty target is left empty, then that a checkout into it works.
func TestCheckoutFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	f := &fakeRepos{}
	f.set("rev_1", map[string]string{"a.txt": "a\n", "b/c.txt": "c\n"})
	url := serveRepos(t, f)
	// A tree naming a blob the server does not hold: the checkout fails after writing a.txt.
	f.mu.Lock()
	f.files["b/c.txt"] = "not served\n"
	f.mu.Unlock()
	parent := t.TempDir()
	for _, target := range []string{filepath.Join(parent, "new", "nested"), filepath.Join(parent, "empty")} {
		if filepath.Base(target) == "empty" {
			if err := os.Mkdir(target, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := runAg("checkout", "app", target, "--server", url, "--token", "t"); err == nil || !strings.Contains(err.Error(), "b/c.txt") {
			t.Fatalf("ag checkout %s with a blob missing: %v\n%s\nwant an error naming b/c.txt", target, err, out)
		}
	}
	if got := listTree(t, parent); !slices.Equal(got, []string{"empty/"}) {
		t.Errorf("after the failed checkouts, %s holds %q, want only the empty directory that was there", parent, got)
	}
	f.set("rev_1", map[string]string{"a.txt": "a\n", "b/c.txt": "c\n"})
	empty := filepath.Join(parent, "empty")
	if out, err := runAg("checkout", "app", empty, "--server", url, "--token", "t"); err != nil {
		t.Fatalf("ag checkout into an empty directory: %v\n%s", err, out)
	}
	assertFiles(t, empty, map[string]string{"a.txt": "a\n", "b/c.txt": "c\n"})
	if got := listTree(t, filepath.Join(empty, ".ag")); !slices.Equal(got, []string{"checkout.json", "index-*"}) {
		t.Errorf("the checkout's .ag/ holds %q, want only checkout.json and its index", got)
	}
	want := []string{"empty/", "empty/.ag/", "empty/.ag/checkout.json", "empty/.ag/index-*", "empty/a.txt", "empty/b/", "empty/b/c.txt"}
	if got := listTree(t, parent); !slices.Equal(got, want) {
		t.Errorf("%s holds %q, want the checkout alone: %q", parent, got, want)
	}
}

// newCheckout checks out files from a fake server into a new directory and answers the fake,
// its URL, the checkout and the directory holding it.
func newCheckout(t *testing.T, files map[string]string, diffs ...bool) (f *fakeRepos, url, dir, parent string) {
	t.Helper()
	f = &fakeRepos{diffs: len(diffs) > 0 && diffs[0]}
	f.set("rev_1", files)
	url = serveRepos(t, f)
	parent = t.TempDir()
	dir = filepath.Join(parent, "co")
	if out, err := runAg("checkout", "app", dir, "--server", url, "--token", "t"); err != nil {
		t.Fatalf("ag checkout: %v\n%s", err, out)
	}
	assertFiles(t, dir, files)
	return f, url, dir, parent
}

// TestSyncRefusesHostilePaths ensures `ag sync` to a tree holding a path no checkout may hold
// fails naming the path and the rule, and changes nothing: not the checkout's files, not its
// state, nothing beside it.
func TestSyncRefusesHostilePaths(t *testing.T) {
	t.Parallel()
	bothAnswers(t, func(t *testing.T, diffs bool) {
		for _, h := range hostilePaths {
			t.Run(fmt.Sprintf("%.20s", h.path), func(t *testing.T) {
				t.Parallel()
				files := map[string]string{"a.txt": "a\n", "gone.txt": "gone\n"}
				f, url, dir, parent := newCheckout(t, files, diffs)
				f.set("rev_2", map[string]string{"a.txt": "a, changed\n", "new.txt": "new\n", h.path: "planted\n"}, "a.txt", "new.txt", h.path)
				out, err := runAg("sync", "-C", dir, "--server", url, "--token", "t")
				if err == nil || !strings.Contains(err.Error(), h.path) || !strings.Contains(err.Error(), h.rule) {
					t.Fatalf("ag sync to a tree holding %q: %v\n%s\nwant a refusal naming the path and %q", h.path, err, out, h.rule)
				}
				assertFiles(t, dir, files)
				if got := baseRevision(t, dir); got != "rev_1" {
					t.Errorf("after the refused sync the checkout is at %s, want rev_1", got)
				}
				want := []string{"co/", "co/.ag/", "co/.ag/checkout.json", "co/.ag/index-*", "co/a.txt", "co/gone.txt"}
				if got := listTree(t, parent); !slices.Equal(got, want) {
					t.Errorf("after the refused sync, %s holds %q, want the checkout alone: %q", parent, got, want)
				}
			})
		}
	})
}

// TestSyncDoesNotFollowSymlinks ensures a symbolic link in a checkout, planted or made by its
// user, leads no write or remove of `ag sync` anywhere: a write under a linked directory or at a
// link is refused naming the link, with nothing changed, and a file the mainline deleted under a
// linked directory stays where the link points.
func TestSyncDoesNotFollowSymlinks(t *testing.T) {
	t.Parallel()
	bothAnswers(t, func(t *testing.T, diffs bool) {
		for _, link := range []struct{ name, path, target string }{
			{"absolute directory", "sub", ""},          // -> the outside directory, by absolute path
			{"relative directory", "sub", "../victim"}, // -> the outside directory, climbing out
			{"inside directory", "sub", "inside"},      // -> a directory of the checkout
			{"file", "sub/x", ""},                      // at the very path written
		} {
			t.Run(link.name, func(t *testing.T) {
				t.Parallel()
				files := map[string]string{"a.txt": "a\n", "inside/keep.txt": "keep\n"}
				f, url, dir, parent := newCheckout(t, files, diffs)
				victim := filepath.Join(parent, "victim")
				if err := os.Mkdir(victim, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(victim, "x"), []byte("the victim's\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				target := link.target
				switch {
				case link.name == "file":
					target = filepath.Join(victim, "x")
					if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
						t.Fatal(err)
					}
				case target == "":
					target = victim
				}
				if err := os.Symlink(target, filepath.Join(dir, filepath.FromSlash(link.path))); err != nil {
					t.Fatal(err)
				}
				f.set("rev_2", map[string]string{"a.txt": "a, changed\n", "inside/keep.txt": "keep\n", "sub/x": "written by sync\n"})
				out, err := runAg("sync", "-C", dir, "--server", url, "--token", "t")
				if err == nil || !strings.Contains(err.Error(), link.path+" (a symbolic link") {
					t.Errorf("ag sync writing sub/x with %s a symbolic link to %s: %v\n%s\nwant a refusal naming it", link.path, target, err, out)
				}
				if b, err := os.ReadFile(filepath.Join(victim, "x")); err != nil || string(b) != "the victim's\n" {
					t.Errorf("the file the link leads to holds %q (%v), want it untouched", b, err)
				}
				if got := listTree(t, victim); !slices.Equal(got, []string{"x"}) {
					t.Errorf("the directory outside the checkout holds %q, want x alone", got)
				}
				assertFiles(t, dir, files)
				if got := baseRevision(t, dir); got != "rev_1" {
					t.Errorf("after the refused sync the checkout is at %s, want rev_1", got)
				}
			})
		}

		t.Run("remove", func(t *testing.T) {
			t.Parallel()
			files := map[string]string{"a.txt": "a\n", "d/f": "f\n"}
			f, url, dir, parent := newCheckout(t, files, diffs)
			victim := filepath.Join(parent, "victim")
			if err := os.Mkdir(victim, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(victim, "f"), []byte("the victim's\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(filepath.Join(dir, "d")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, filepath.Join(dir, "d")); err != nil {
				t.Fatal(err)
			}
			f.set("rev_2", map[string]string{"a.txt": "a\n"})
			if out, err := runAg("sync", "-C", dir, "--server", url, "--token", "t"); err != nil {
				t.Fatalf("ag sync deleting d/f, d a link out of the checkout: %v\n%s", err, out)
			}
			if b, err := os.ReadFile(filepath.Join(victim, "f")); err != nil || string(b) != "the victim's\n" {
				t.Errorf("the file outside the checkout holds %q (%v), want it untouched", b, err)
			}
			if got := baseRevision(t, dir); got != "rev_2" {
				t.Errorf("after the sync the checkout is at %s, want rev_2", got)
			}
		})
	})
}

// TestSyncFileAndDirectorySwap ensures `ag sync` takes a mainline that turned files into
// directories and back, at the top and nested, and refuses, changing nothing, when what stands
// in the way is the user's: a local edit, or a file added under a directory that became a file.
func TestSyncFileAndDirectorySwap(t *testing.T) {
	t.Parallel()
	bothAnswers(t, func(t *testing.T, diffs bool) {
		files := map[string]string{"a": "a file\n", "n/m/o": "o\n", "n/keep": "keep\n", "z": "z\n"}
		dirs := map[string]string{"a/b/c": "c under a\n", "n/m": "m, now a file\n", "n/keep": "keep\n", "z": "z\n"}
		f, url, dir, _ := newCheckout(t, files, diffs)
		sync := func(rev string, want map[string]string) {
			t.Helper()
			f.set(rev, want)
			if out, err := runAg("sync", "-C", dir, "--server", url, "--token", "t"); err != nil {
				t.Fatalf("ag sync to %s: %v\n%s", rev, err, out)
			}
			assertFiles(t, dir, want)
			if got := baseRevision(t, dir); got != rev {
				t.Errorf("after the sync the checkout is at %s, want %s", got, rev)
			}
		}
		sync("rev_2", dirs)
		// A directory that never held a file does not stand in the way.
		if err := os.MkdirAll(filepath.Join(dir, "a", "b", "empty"), 0o755); err != nil {
			t.Fatal(err)
		}
		sync("rev_3", files)
		sync("rev_4", dirs)

		refused := func(rev string, to map[string]string, want ...string) {
			t.Helper()
			before := checkoutFiles(t, dir)
			f.set(rev, to)
			out, err := runAg("sync", "-C", dir, "--server", url, "--token", "t")
			if err == nil {
				t.Fatalf("ag sync to %s succeeded: %s; want a refusal naming %q", rev, out, want)
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ag sync to %s: %v; want it to name %q", rev, err, w)
				}
			}
			assertFiles(t, dir, before)
		}
		// A file the user added under a/, which the mainline turns into a file again.
		writeFile(t, filepath.Join(dir, "a", "b"), "mine", []byte("mine\n"))
		refused("rev_5", files, "a/b/mine (a file of yours, where the mainline now has the file a)")
		if err := os.Remove(filepath.Join(dir, "a", "b", "mine")); err != nil {
			t.Fatal(err)
		}
		// A nested repository there.
		if err := os.MkdirAll(filepath.Join(dir, "a", "b", ".git"), 0o755); err != nil {
			t.Fatal(err)
		}
		refused("rev_5", files, "a/b/.git")
		if err := os.Remove(filepath.Join(dir, "a", "b", ".git")); err != nil {
			t.Fatal(err)
		}
		// A local edit of the file the mainline turns into a directory: the conflict rule.
		writeFile(t, filepath.Join(dir, "n"), "m", []byte("m, edited\n"))
		refused("rev_5", files, "n/m")
		writeFile(t, filepath.Join(dir, "n"), "m", []byte("m, now a file\n"))
		sync("rev_5", files)
	})
}

// TestScanSkipsNestedRepositories ensures a vendored repository or a submodule in a checkout
// (a .git directory or file below the top) is skipped by what reads the checkout, as git skips
// a nested repository, rather than failing every `ag sync`, `ag status` and `ag integrate`.
func TestScanSkipsNestedRepositories(t *testing.T) {
	t.Parallel()
	files := map[string]string{"a.txt": "a\n"}
	f, url, dir, _ := newCheckout(t, files)
	if err := os.MkdirAll(filepath.Join(dir, "vendor", "lib", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "vendor", "lib", ".git"), "config", []byte("[core]\n"))
	writeFile(t, filepath.Join(dir, "vendor", "lib"), "lib.go", []byte("package lib\n"))
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub"), ".Git", []byte("gitdir: ../.git/modules/sub\n"))
	f.set("rev_2", map[string]string{"a.txt": "a, changed\n"})
	if out, err := runAg("sync", "-C", dir, "--server", url, "--token", "t"); err != nil {
		t.Fatalf("ag sync with a nested .git: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "vendor", "lib", ".git", "config")); err != nil || string(b) != "[core]\n" {
		t.Errorf("the nested repository's config: %q (%v), want it untouched", b, err)
	}
	// The vendored file is an added local edit; the nested repository is not.
	f.set("rev_3", map[string]string{"a.txt": "a, changed\n", "vendor/lib/lib.go": "package lib // theirs\n"})
	_, err := runAg("sync", "-C", dir, "--server", url, "--token", "t")
	if err == nil || !strings.Contains(err.Error(), "vendor/lib/lib.go") || strings.Contains(err.Error(), ".git") {
		t.Errorf("ag sync over an added vendor/lib/lib.go: %v; want the conflict naming it and nothing under .git", err)
	}
}

// TestCheckoutRecordsWhatItWrote ensures a checkout's index records the stat of every file it
// wrote, so that the first status after it, once past the racy window, reads no file; and that
// an edit is still found.
func TestCheckoutRecordsWhatItWrote(t *testing.T) {
	t.Parallel()
	files := map[string]string{"a.txt": "a\n", "b/c.txt": "c\n", "b/d/e.txt": "e\n"}
	for _, inside := range []bool{false, true} {
		f := &fakeRepos{}
		f.set("rev_1", files)
		url := serveRepos(t, f)
		dir := filepath.Join(t.TempDir(), "co")
		if inside {
			// Into an existing empty directory: the files are moved up from a staging directory.
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := runAg("checkout", "app", dir, "--server", url, "--token", "t"); err != nil {
			t.Fatalf("ag checkout: %v\n%s", err, out)
		}
		if err := cli.AgeCheckout(dir, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		edits, hashed, err := cli.ScanCheckout(dir)
		if err != nil {
			t.Fatal(err)
		}
		// A file moved into place gets a new ctime (unless within the same clock tick): moved up
		// from staging, a.txt may be read once.
		mostHashed := 0
		if inside {
			mostHashed = 1
		}
		if len(edits) != 0 || hashed > mostHashed {
			t.Errorf("checkout (into an existing directory: %v), first scan: edits %q, %d files read; want none, and at most %d read", inside, edits, hashed, mostHashed)
		}
		if err := os.WriteFile(filepath.Join(dir, "b", "d", "e.txt"), []byte("E\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if edits, _, err := cli.ScanCheckout(dir); err != nil || !slices.Equal(edits, []string{"modified b/d/e.txt"}) {
			t.Errorf("after an edit: %q, %v; want b/d/e.txt modified", edits, err)
		}
	}
}
