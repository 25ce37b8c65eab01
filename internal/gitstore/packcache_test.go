package gitstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// blobReads counts the blobs read through it: a clone from the cached pack reads none.
type blobReads struct {
	storer.EncodedObjectStorer
	n *atomic.Int64
}

func (s blobReads) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	o, err := s.EncodedObjectStorer.EncodedObject(t, h)
	if err == nil && o.Type() == plumbing.BlobObject {
		s.n.Add(1)
	}
	return o, err
}

// cachedServer serves r with the pack cache cache under the key "app", counting blob reads.
func cachedServer(t *testing.T, r *served, cache *PackCache, reads *atomic.Int64) string {
	h := NewHandler(func(ctx context.Context) (Snapshot, error) {
		snap, err := r.open(ctx)
		snap.Objects, snap.Cache, snap.CacheKey = blobReads{snap.Objects, reads}, cache, "app"
		return snap, err
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// randomFiles answers n files of size random bytes each under dir.
func randomFiles(rnd *rand.Rand, dir string, n, size int) map[string][]byte {
	files := map[string][]byte{}
	for i := range n {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(rnd.IntN(256))
		}
		files[fmt.Sprintf("%s/%03d.bin", dir, i)] = b
	}
	return files
}

// TestWholeClonesAreSentFromTheCachedPack ensures a whole clone is sent the pack the last
// whole clone was (reading no blob from the store), followed by what the mainline gained since;
// that such a pack becomes the cache once it adds many objects, and is built afresh, deltas and
// all, once it has grown a quarter past the last one built so; that a damaged cache file is
// found before a byte of it is sent, removed, and the clone built afresh; and that a cached
// pack whose commit the mainline does not reach (a repository made anew under the same name)
// is never sent. Every clone is whole and clean under `git fsck --strict`.
func TestWholeClonesAreSentFromTheCachedPack(t *testing.T) {
	t.Parallel()
	needGit(t)
	env := gitEnv(t)
	rnd := rand.New(rand.NewPCG(1, 2))
	r := &served{t: t, s: newStorer()}
	r.commit("Import", randomFiles(rnd, "data", 200, 1024))
	for i := range 10 {
		r.commit(fmt.Sprintf("Step %d", i), map[string][]byte{"steps.txt": fmt.Appendf(nil, "step %d\n", i), fmt.Sprintf("data/%03d.bin", i): fmt.Appendf(nil, "replaced %d\n", i)})
	}
	cacheDir := t.TempDir()
	cache, err := NewPackCache(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int64
	url := cachedServer(t, r, cache, &reads)

	n := 0
	clone := func(what string, wantMain plumbing.Hash) (blobsRead int64, stderr string) {
		t.Helper()
		reads.Store(0)
		n++
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("c%d", n))
		_, stderr, err := gitRun(env, "", nil, "clone", "--progress", "--bare", url, dir)
		if err != nil {
			t.Fatalf("%s: git clone: %v\n%s", what, err, stderr)
		}
		if got := strings.TrimSpace(git(t, env, dir, nil, "rev-parse", "HEAD")); got != wantMain.String() {
			t.Fatalf("%s: cloned HEAD %s, want %s", what, got, wantMain)
		}
		git(t, env, dir, nil, "fsck", "--strict", "--no-dangling", "--full")
		return reads.Load(), stderr
	}
	cachedFiles := func() []string {
		t.Helper()
		entries, err := os.ReadDir(cacheDir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}

	if got, _ := clone("the first clone", r.main); got == 0 {
		t.Fatalf("the first clone read no blob: there was no cached pack to send")
	}
	if files := cachedFiles(); len(files) != 1 || strings.HasPrefix(files[0], "new-") {
		t.Fatalf("after the first clone the cache holds %q, want one cached pack", files)
	}
	if got, _ := clone("the second clone", r.main); got != 0 {
		t.Errorf("the second clone read %d blobs, want none: the cached pack holds them", got)
	}

	// The mainline gains two blobs: sent after the cached pack, which stays as it is.
	r.commit("Two more", map[string][]byte{"new/a.txt": []byte("a\n"), "new/b.txt": []byte("b\n")})
	if got, _ := clone("a clone after one commit", r.main); got != 2 {
		t.Errorf("a clone after a commit of two blobs read %d blobs, want those 2", got)
	}
	if got, _ := clone("the next clone", r.main); got != 2 {
		t.Errorf("the next clone read %d blobs, want the same 2: the cache is rewritten only for many objects", got)
	}

	// Many small objects: what the clone sent becomes the cache; it grew less than a quarter.
	r.commit("Many small", randomFiles(rnd, "small", 300, 8))
	if got, _ := clone("a clone after many small files", r.main); got != 302 {
		t.Errorf("a clone after 300 new small files read %d blobs, want 302 (and the 2 before)", got)
	}
	if got, _ := clone("the clone after the cache took them", r.main); got != 0 {
		t.Errorf("the clone after read %d blobs, want none: the cache holds what the last clone was sent", got)
	}

	// Many large objects: the cache takes them too, and is then more than a quarter larger than
	// the pack last built afresh: the next clone builds it afresh.
	r.commit("Many large", randomFiles(rnd, "large", 300, 1024))
	if got, _ := clone("a clone after many large files", r.main); got != 300 {
		t.Errorf("a clone after 300 new large files read %d blobs, want 300", got)
	}
	if got, _ := clone("the clone after the cache grew a quarter", r.main); got == 0 {
		t.Errorf("the clone after the cached pack grew a quarter read no blob: it was not built afresh")
	}
	if got, _ := clone("the clone after it was built afresh", r.main); got != 0 {
		t.Errorf("the clone after the pack was built afresh read %d blobs, want none", got)
	}

	// A damaged cache file is found before it is sent.
	files := cachedFiles()
	if len(files) != 1 {
		t.Fatalf("the cache holds %q, want one cached pack", files)
	}
	path := filepath.Join(cacheDir, files[0])
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := clone("a clone with the cache damaged", r.main); got == 0 {
		t.Errorf("a clone with the cached pack damaged read no blob: it was sent the damaged pack")
	}
	if got, _ := clone("the clone after", r.main); got != 0 {
		t.Errorf("the clone after the damaged pack was replaced read %d blobs, want none", got)
	}

	// Another history under the same name, in the same store (whose objects are every
	// repository's): its clone holds its own objects, none of the cache's.
	other := &served{t: t, s: r.s}
	other.commit("Another import", map[string][]byte{"only.txt": []byte("the other history\n")})
	var otherReads atomic.Int64
	otherURL := cachedServer(t, other, cache, &otherReads)
	dir := filepath.Join(t.TempDir(), "other")
	if _, stderr, err := gitRun(env, "", nil, "clone", "--bare", otherURL, dir); err != nil {
		t.Fatalf("clone of another history under the same name: %v\n%s", err, stderr)
	}
	git(t, env, dir, nil, "fsck", "--strict", "--no-dangling", "--full")
	if got := strings.TrimSpace(git(t, env, dir, nil, "rev-parse", "HEAD")); got != other.main.String() {
		t.Fatalf("the other history's clone is at %s, want %s", got, other.main)
	}
	if objects := strings.Fields(git(t, env, dir, nil, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")); len(objects) != 3 {
		t.Errorf("the other history's clone holds %d objects, want its 3 (a commit, a tree, a blob)", len(objects))
	}
}

// TestWarmBuildsTheCachedPackBeforeTheFirstClone ensures Warm, which the server runs after an
// import, builds the pack the first whole clone is then sent without reading a blob, and leaves
// a cached pack the next clone can use as it is.
func TestWarmBuildsTheCachedPackBeforeTheFirstClone(t *testing.T) {
	t.Parallel()
	needGit(t)
	env := gitEnv(t)
	r := &served{t: t, s: newStorer()}
	r.commit("Import", sampleFiles)
	r.commit("More", map[string][]byte{"foo.c": []byte("int main(void) { return 1; }\n")})
	cacheDir := t.TempDir()
	cache, err := NewPackCache(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := r.open(context.Background())
	snap.CacheKey = "app"
	if err := cache.Warm(context.Background(), snap); err != nil {
		t.Fatalf("Warm: %v", err)
	}
	first, err := os.ReadDir(cacheDir)
	if err != nil || len(first) != 1 {
		t.Fatalf("after Warm the cache holds %v (%v), want one cached pack", first, err)
	}
	before, _ := first[0].Info()
	if err := cache.Warm(context.Background(), snap); err != nil {
		t.Fatalf("Warm again: %v", err)
	}
	if after, err := os.Stat(filepath.Join(cacheDir, first[0].Name())); err != nil || !os.SameFile(before, after) {
		t.Errorf("Warm with a cached pack the next clone can use wrote it again")
	}

	var reads atomic.Int64
	url := cachedServer(t, r, cache, &reads)
	dir := filepath.Join(t.TempDir(), "clone")
	if _, stderr, err := gitRun(env, "", nil, "clone", url, dir); err != nil {
		t.Fatalf("git clone: %v\n%s", err, stderr)
	}
	git(t, env, dir, nil, "fsck", "--strict", "--no-dangling", "--full")
	if got, err := os.ReadFile(filepath.Join(dir, "foo.c")); err != nil || string(got) != "int main(void) { return 1; }\n" {
		t.Errorf("foo.c in the clone: %q, %v", got, err)
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("the first clone after Warm read %d blobs, want none", n)
	}
}

// countingResponse counts the bytes a handler writes.
type countingResponse struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c countingResponse) Write(b []byte) (int, error) {
	c.n.Add(int64(len(b)))
	return c.ResponseWriter.Write(b)
}

// TestAFetchIsSentAThinPack ensures a fetch of a commit that changed a line of a large file is
// sent that file as a delta against the version the client holds (a thin pack, which git asks
// for and completes), not whole: a few hundred bytes for 64 KiB, and the fetched history clean
// under `git fsck --strict` with the file as the commit has it.
func TestAFetchIsSentAThinPack(t *testing.T) {
	t.Parallel()
	needGit(t)
	env := gitEnv(t)
	rnd := rand.New(rand.NewPCG(3, 4))
	var big strings.Builder
	for big.Len() < 64<<10 {
		fmt.Fprintf(&big, "%016x %016x\n", rnd.Uint64(), rnd.Uint64())
	}
	r := &served{t: t, s: newStorer()}
	r.commit("Import", map[string][]byte{"big.txt": []byte(big.String()), "docs/a.md": []byte("# a\n")})
	var sentBytes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		NewHandler(r.open).ServeHTTP(countingResponse{w, &sentBytes}, req)
	}))
	t.Cleanup(srv.Close)
	dir := filepath.Join(t.TempDir(), "clone")
	if _, stderr, err := gitRun(env, "", nil, "clone", srv.URL, dir); err != nil {
		t.Fatalf("git clone: %v\n%s", err, stderr)
	}

	changed := strings.Replace(big.String(), "\n", "\nthe one line changed\n", 1)
	next := r.commit("Change a line", map[string][]byte{"big.txt": []byte(changed)})
	sentBytes.Store(0)
	if _, stderr, err := gitRun(env, dir, nil, "fetch", "origin"); err != nil {
		t.Fatalf("git fetch: %v\n%s", err, stderr)
	}
	git(t, env, dir, nil, "merge", "--ff-only", "-q", "origin/main")
	if got := strings.TrimSpace(git(t, env, dir, nil, "rev-parse", "HEAD")); got != next.String() {
		t.Fatalf("HEAD after the fetch %s, want %s", got, next)
	}
	git(t, env, dir, nil, "fsck", "--strict", "--no-dangling", "--full")
	if got, err := os.ReadFile(filepath.Join(dir, "big.txt")); err != nil || string(got) != changed {
		t.Fatalf("big.txt after the fetch: %d bytes, %v; want the commit's %d", len(got), err, len(changed))
	}
	// The negotiation is a few hundred bytes; the file whole would be over 30 KiB compressed.
	if n := sentBytes.Load(); n > 4<<10 {
		t.Errorf("the fetch of a one-line change to a 64 KiB file was sent %d bytes, want a delta of it (under 4 KiB)", n)
	} else {
		t.Logf("the fetch of a one-line change to a 64 KiB file: %d bytes sent", n)
	}
}
