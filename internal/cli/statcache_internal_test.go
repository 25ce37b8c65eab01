package cli

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/repo"
)

// statTestCheckout makes a checkout in a temporary directory holding files, at a base revision
// holding the same files, with every file's mtime an hour back: old enough for the stat cache
// to trust.
func statTestCheckout(t *testing.T, files map[string]string) *checkout {
	t.Helper()
	dir := t.TempDir()
	co := &checkout{Repository: "app", BaseRevision: "rev_1", Files: map[string]string{}, root: dir}
	old := time.Now().Add(-time.Hour)
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(full, old, old); err != nil {
			t.Fatal(err)
		}
		co.Files[p] = repo.Digest([]byte(content))
	}
	if err := co.save(); err != nil {
		t.Fatal(err)
	}
	return co
}

// editsOf answers the checkout's local edits as "kind path", and how many files the scan hashed.
func editsOf(t *testing.T, co *checkout) ([]string, int) {
	t.Helper()
	s, err := co.scan()
	if err != nil {
		t.Fatal(err)
	}
	edits, err := co.localEdits()
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, e := range edits {
		out = append(out, e.kind+" "+e.path)
	}
	// The answer without the cache, as localEdits gave it before there was one.
	plain, _, err := scanTree(co.root)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(plain, s.files) {
		t.Errorf("the scan with the stat cache found %v, without it %v", s.files, plain)
	}
	return out, s.hashed
}

// TestStatCacheFindsEveryEdit ensures the stat cache spares a scan from hashing files whose stat
// did not change, and that localEdits finds all the same every edit: one that keeps the size and
// puts the mtime back (the racily clean case, and an old file), one that changes the size, a
// deletion and an addition; and that a file touched without a change is no edit.
func TestStatCacheFindsEveryEdit(t *testing.T) {
	t.Parallel()
	files := map[string]string{}
	for i := range 50 {
		files[fmt.Sprintf("d%d/f%d.txt", i%5, i)] = fmt.Sprintf("file %02d\n", i)
	}
	co := statTestCheckout(t, files)
	path := func(p string) string { return filepath.Join(co.root, filepath.FromSlash(p)) }

	if edits, hashed := editsOf(t, co); len(edits) != 0 || hashed != 50 {
		t.Fatalf("first scan: edits %q, hashed %d; want none, and every file hashed", edits, hashed)
	}
	if edits, hashed := editsOf(t, co); len(edits) != 0 || hashed != 0 {
		t.Fatalf("second scan: edits %q, hashed %d; want none, no file hashed", edits, hashed)
	}

	// Racily clean: written just before a scan records it, then edited to the same size with its
	// mtime put back. The stat is the cached one; the file was written too close to the scan to
	// be trusted, so it is hashed again.
	racy := path("d0/f0.txt")
	if err := os.WriteFile(racy, []byte("file XX\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(racy)
	if err != nil {
		t.Fatal(err)
	}
	if edits, _ := editsOf(t, co); !slices.Equal(edits, []string{"modified d0/f0.txt"}) {
		t.Fatalf("after an edit: %q", edits)
	}
	// The content back to the base's, same size, mtime put back: no edit any more, though the
	// cache holds the edited content's digest for this very stat.
	if err := os.WriteFile(racy, []byte("file 00\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(racy, info.ModTime(), info.ModTime()); err != nil {
		t.Fatal(err)
	}
	if edits, hashed := editsOf(t, co); len(edits) != 0 || hashed == 0 {
		t.Fatalf("after putting the content back, same size, same mtime: %q (hashed %d), want no edit", edits, hashed)
	}
	// And the other way: the cache now holds the base's digest for this stat.
	if err := os.WriteFile(racy, []byte("file XX\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(racy, info.ModTime(), info.ModTime()); err != nil {
		t.Fatal(err)
	}
	if edits, _ := editsOf(t, co); !slices.Equal(edits, []string{"modified d0/f0.txt"}) {
		t.Fatalf("after a same-size edit with the mtime put back: %q, want d0/f0.txt modified", edits)
	}
	if err := os.WriteFile(racy, []byte("file 00\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// An old file, trusted by the cache, edited to the same size with its mtime put back:
	// the ctime (Linux) still tells.
	if runtime.GOOS == "linux" {
		old := path("d1/f1.txt")
		info, err := os.Stat(old)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(old, []byte("file ZZ\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(old, info.ModTime(), info.ModTime()); err != nil {
			t.Fatal(err)
		}
		if edits, _ := editsOf(t, co); !slices.Equal(edits, []string{"modified d1/f1.txt"}) {
			t.Fatalf("after a same-size edit of an old file, mtime put back: %q", edits)
		}
		if err := os.WriteFile(old, []byte("file 01\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A size change, a touch without a change, a deletion and an addition.
	if err := os.WriteFile(path("d2/f2.txt"), []byte("longer than before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := os.Chtimes(path("d3/f3.txt"), now, now); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path("d4/f4.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path("d0/new.txt"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{"added d0/new.txt", "modified d2/f2.txt", "deleted d4/f4.txt"}
	edits, hashed := editsOf(t, co)
	if !slices.Equal(edits, want) {
		t.Fatalf("edits %q, want %q", edits, want)
	}
	if hashed == 0 || hashed > 6 {
		t.Errorf("hashed %d files, want those whose stat changed (and the racy ones) only", hashed)
	}
	// Once the recent writes are old enough, nothing is hashed again.
	old := time.Now().Add(-time.Minute)
	for _, p := range []string{"d0/f0.txt", "d1/f1.txt", "d2/f2.txt", "d3/f3.txt", "d0/new.txt"} {
		if err := os.Chtimes(path(p), old, old); err != nil {
			t.Fatal(err)
		}
	}
	editsOf(t, co)
	if edits, hashed := editsOf(t, co); !slices.Equal(edits, want) || hashed != 0 {
		t.Errorf("settled: edits %q, hashed %d; want %q and no file hashed", edits, hashed, want)
	}
}

// TestStatCacheSurvivesACrash ensures a stat cache cut short (as a crash in a write that was not
// atomic would leave it), damaged, or left beside a temporary file of a write that never
// finished, is ignored: the files are hashed and the edits are right, and the cache is written
// anew, whole.
func TestStatCacheSurvivesACrash(t *testing.T) {
	t.Parallel()
	co := statTestCheckout(t, map[string]string{"a.txt": "a\n", "b/c.txt": "c\n"})
	if edits, hashed := editsOf(t, co); len(edits) != 0 || hashed != 2 {
		t.Fatalf("first scan: edits %q, hashed %d", edits, hashed)
	}
	cachePath := filepath.Join(co.root, filepath.FromSlash(statCachePath))
	whole, err := os.ReadFile(cachePath)
	if err != nil {
		t.Fatal(err)
	}
	// An edit the cache does not know of, with the stat the cache has: only a cache that is
	// ignored finds it.
	a := filepath.Join(co.root, "a.txt")
	info, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	damaged := map[string][]byte{
		"cut short":       whole[:len(whole)-9],
		"cut mid-line":    whole[:len(whole)/2],
		"empty":           {},
		"another version": bytes.Replace(whole, []byte("ag-stat-cache 1"), []byte("ag-stat-cache 9"), 1),
		"a count off":     bytes.Replace(whole, []byte("end 2"), []byte("end 3"), 1),
	}
	for name, data := range damaged {
		if err := os.WriteFile(cachePath, data, 0o644); err != nil {
			t.Fatal(err)
		}
		// A write that never finished leaves its temporary file in .ag/: nothing reads it.
		if err := os.WriteFile(filepath.Join(co.root, ".ag", ".ag-write-crashed"), whole[:10], 0o644); err != nil {
			t.Fatal(err)
		}
		if edits, hashed := editsOf(t, co); len(edits) != 0 || hashed != 2 {
			t.Errorf("%s: edits %q, hashed %d; want none, with every file hashed", name, edits, hashed)
		}
		if data, err := os.ReadFile(cachePath); err != nil || !strings.HasSuffix(string(data), "end 2\n") {
			t.Errorf("%s: the cache was not written anew whole: %q, %v", name, data, err)
		}
	}
	// Saving is a write of a new file renamed over the old: the old cache is whole until then.
	if err := os.WriteFile(a, []byte("A\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(a, info.ModTime(), info.ModTime()); err != nil {
		t.Fatal(err)
	}
	if edits, _ := editsOf(t, co); !slices.Equal(edits, []string{"modified a.txt"}) {
		t.Errorf("edits %q, want a.txt modified", edits)
	}
}

// TestStatCacheEncoding ensures a cache reads back as it was written, paths with line breaks
// or a leading quote among them.
func TestStatCacheEncoding(t *testing.T) {
	t.Parallel()
	sc := &statCache{stamp: 1234567890123456789, entries: map[string]statEntry{}}
	for i, p := range []string{"a.txt", "dir/with space.txt", "line\nbreak", `"quoted".txt`, "ünï/cödé"} {
		sc.entries[p] = statEntry{size: int64(i), mtime: 1e18 + int64(i), ctime: int64(i) * 3, ino: uint64(i) + 1<<40, mode: 0o644, digest: repo.Digest([]byte(p))}
	}
	got, err := parseStatCache(sc.encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.stamp != sc.stamp || !maps.Equal(got.entries, sc.entries) {
		t.Errorf("read back %+v, want %+v", got, sc)
	}
}

// TestProgressLine ensures the progress line counts files and bytes and ends with a line break,
// and that a writer that is not a terminal gets none.
func TestProgressLine(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if p := newProgress(&globals{stderr: &buf}, "checkout:", 2, 10); p != nil {
		t.Fatal("a progress line on a buffer, which is no terminal")
	}
	p := &progress{w: &buf, verb: "checkout:", totalFiles: 3, totalBytes: 3 << 20}
	p.add(1, 1<<20)
	p.add(2, 2<<20)
	p.done()
	if got := buf.String(); !strings.HasPrefix(got, "\rcheckout: 1/3 files, 1.0 MiB/3.0 MiB") || !strings.HasSuffix(got, "\rcheckout: 3/3 files, 3.0 MiB/3.0 MiB\x1b[K\n") {
		t.Errorf("progress printed %q", got)
	}
	var nilProgress *progress
	nilProgress.add(1, 1)
	nilProgress.done()
}

// TestStatCacheRacilyClean ensures a cached entry whose mtime is not a window older than the
// scan that recorded it is not trusted even when the stat matches: the file may have changed
// after it was hashed, within the file system's timestamp granularity. Here the cache says a
// file holds other content than it does, with its very stat: written right after the file (the
// racy case), the file is hashed again; written well after it, the cache is trusted.
func TestStatCacheRacilyClean(t *testing.T) {
	t.Parallel()
	co := statTestCheckout(t, map[string]string{"a.txt": "a\n"})
	root, err := os.OpenRoot(co.root)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	info, err := root.Lstat("a.txt")
	if err != nil {
		t.Fatal(err)
	}
	lie := statOf(info, repo.Digest([]byte("b\n"))) // what the file held when hashed, the same size
	for _, c := range []struct {
		after   time.Duration // from the file's mtime to the recording scan
		trusted bool
	}{
		{0, false},
		{50 * time.Millisecond, false},
		{10 * time.Second, true},
	} {
		sc := &statCache{stamp: info.ModTime().Add(c.after).UnixNano(), entries: map[string]statEntry{"a.txt": lie}}
		if err := sc.save(root); err != nil {
			t.Fatal(err)
		}
		edits, err := co.localEdits()
		if err != nil {
			t.Fatal(err)
		}
		if got := len(edits) == 1; got != c.trusted {
			t.Errorf("cache recorded %v after the mtime: edits %v; want the cache trusted: %v", c.after, edits, c.trusted)
		}
	}
	// A stamp in the cache later than the cache file's own mtime counts for no more than that.
	sc := &statCache{stamp: time.Now().Add(time.Hour).UnixNano(), entries: map[string]statEntry{"a.txt": statOf(info, co.Files["a.txt"])}}
	if err := sc.save(root); err != nil {
		t.Fatal(err)
	}
	if got := loadStatCache(root); got.stamp > time.Now().UnixNano() {
		t.Errorf("loaded a stamp %v in the future", time.Unix(0, got.stamp))
	}
}
