package checkout

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/repo"
)

// socketTempDir is a temporary directory for a checkout whose watcher's socket the test
// serves. Not t.TempDir, which names the directory after the test: a socket's path holds 107
// bytes, and the directory must leave room for .ag/watch.sock under a long TMPDIR (gremlins'
// in a mutation run).
func socketTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "co")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// statTestCheckout makes a checkout in a temporary directory holding files, at a base revision
// holding the same files, with every file's mtime an hour back: old enough for the index to
// trust.
func statTestCheckout(t *testing.T, files map[string]string) *Checkout {
	t.Helper()
	dir := socketTempDir(t)
	co := &Checkout{Repository: "app", root: dir}
	base := map[string]string{}
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
		base[p] = repo.Digest([]byte(content))
	}
	co.SetBase("rev_1", regularFiles(base))
	if err := co.Save(); err != nil {
		t.Fatal(err)
	}
	return co
}

// editsOf answers the local edits of the checkout at co.root as "kind path", as a command run
// there finds them (reading the checkout's state anew), and how many files the scan hashed.
func editsOf(t *testing.T, co *Checkout) ([]string, int) {
	t.Helper()
	edits, s := scanEdits(t, co)
	return edits, len(s.hash)
}

// scanAsACommand answers the local edits of the checkout at co.root as "kind path", as a
// command run there finds them (reading the checkout's state anew), the scan, and the checkout
// as that command read it.
func scanAsACommand(t *testing.T, co *Checkout) ([]string, *scan, *Checkout) {
	t.Helper()
	fresh, err := Find(co.root)
	if err != nil {
		t.Fatal(err)
	}
	s, err := fresh.scan()
	if err != nil {
		t.Fatal(err)
	}
	edits, err := s.edits(fresh)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, e := range edits {
		out = append(out, e.Kind+" "+e.Path)
	}
	return out, s, fresh
}

// sortEditLines sorts "kind path" lines by path, as edits come.
func sortEditLines(lines []string) {
	slices.SortFunc(lines, func(a, b string) int {
		return strings.Compare(a[strings.IndexByte(a, ' '):], b[strings.IndexByte(b, ' '):])
	})
}

// scanEdits is scanAsACommand, its answer checked against a read of every file.
func scanEdits(t *testing.T, co *Checkout) ([]string, *scan) {
	t.Helper()
	out, s, fresh := scanAsACommand(t, co)
	// The answer without the index's stats: every file read and compared with the base.
	plain, _, err := ScanTree(co.root)
	if err != nil {
		t.Fatal(err)
	}
	base, err := fresh.BaseFiles()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{}
	for p, f := range plain {
		if d, ok := base[p]; !ok {
			want = append(want, "added "+p)
		} else if d.digest != f.digest {
			want = append(want, "modified "+p)
		}
	}
	for p := range base {
		if _, ok := plain[p]; !ok {
			want = append(want, "deleted "+p)
		}
	}
	sortEditLines(want)
	if !slices.Equal(out, want) {
		t.Errorf("the scan with the index found %q, reading every file %q", out, want)
	}
	return out, s
}

// TestIndexFindsEveryEdit ensures the index spares a scan from hashing files whose stat did not
// change, and that a scan finds all the same every edit: one that keeps the size and
// puts the mtime back (the racily clean case, and an old file), one that changes the size, a
// deletion and an addition; and that a file touched without a change is no edit.
func TestIndexFindsEveryEdit(t *testing.T) {
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
	// index holds the edited content's digest for this very stat.
	if err := os.WriteFile(racy, []byte("file 00\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(racy, info.ModTime(), info.ModTime()); err != nil {
		t.Fatal(err)
	}
	if edits, hashed := editsOf(t, co); len(edits) != 0 || hashed == 0 {
		t.Fatalf("after putting the content back, same size, same mtime: %q (hashed %d), want no edit", edits, hashed)
	}
	// And the other way: the index now holds the base's digest for this stat.
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

	// An old file, trusted by the index, edited to the same size with its mtime put back:
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

// TestIndexSurvivesACrash ensures what a crash can leave in .ag (the temporary file of a write
// that never finished, an index written for a new base that checkout.json never came to name)
// changes nothing, and that an index that is not whole (cut short or damaged, which no crash
// of ag's atomic writes leaves) is refused, saying what to do, rather than read as a checkout
// with fewer files.
func TestIndexSurvivesACrash(t *testing.T) {
	t.Parallel()
	co := statTestCheckout(t, map[string]string{"a.txt": "a\n", "b/c.txt": "c\n"})
	if edits, hashed := editsOf(t, co); len(edits) != 0 || hashed != 2 {
		t.Fatalf("first scan: edits %q, hashed %d", edits, hashed)
	}
	agDir := filepath.Join(co.root, StateDir)
	indexPath := filepath.Join(agDir, co.Index)
	whole, err := os.ReadFile(indexPath)
	if err != nil {
		t.Fatal(err)
	}

	// Leftovers of a crash: a write's temporary file, and a whole index of another base (none of
	// its files) that checkout.json does not name.
	if err := os.WriteFile(filepath.Join(agDir, ".ag-write-crashed"), whole[:10], 0o644); err != nil {
		t.Fatal(err)
	}
	other, err := baseIndex(regularFiles(map[string]string{"other.txt": repo.Digest([]byte("x"))}), nil)
	if err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(agDir, indexPrefix+"CRASHED")
	if err := os.WriteFile(stray, other.encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	// A crash's leftover is old; a young index beside it may be another ag's, about to be named.
	longAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stray, longAgo, longAgo); err != nil {
		t.Fatal(err)
	}
	young := filepath.Join(agDir, indexPrefix+"ANOTHERS")
	if err := os.WriteFile(young, other.encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	if edits, hashed := editsOf(t, co); len(edits) != 0 || hashed != 0 {
		t.Errorf("beside a crash's leftovers: edits %q, hashed %d; want none", edits, hashed)
	}
	// The next new base clears the stray index away.
	fresh, err := Find(co.root)
	if err != nil {
		t.Fatal(err)
	}
	base, err := fresh.BaseFiles()
	if err != nil {
		t.Fatal(err)
	}
	fresh.SetBase("rev_2", base)
	if err := fresh.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("the stray index is still there after a save: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("a young index not named by checkout.json was removed: %v", err)
	}
	if _, err := os.Stat(indexPath); !os.IsNotExist(err) {
		t.Errorf("the index of the old base is still there after a save: %v", err)
	}
	if edits, hashed := editsOf(t, co); len(edits) != 0 || hashed != 0 {
		t.Errorf("after a new base: edits %q, hashed %d; want none, with the stats carried over", edits, hashed)
	}

	indexPath = filepath.Join(agDir, fresh.Index)
	if whole, err = os.ReadFile(indexPath); err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(whole)
	flipped[len(flipped)/2] ^= 0x20
	for name, data := range map[string][]byte{
		"cut short":       whole[:len(whole)-9],
		"cut mid-entry":   whole[:len(whole)/2],
		"empty":           {},
		"a flipped bit":   flipped,
		"another version": append([]byte("ag-index\x00\x09"), whole[len(indexMagic):]...),
	} {
		if err := os.WriteFile(indexPath, data, 0o644); err != nil {
			t.Fatal(err)
		}
		co, err := Find(co.root)
		if err != nil {
			t.Fatal(err)
		}
		_, err = co.LocalEdits()
		if err == nil || !strings.Contains(err.Error(), "is damaged") || !strings.Contains(err.Error(), "run `ag checkout` again") {
			t.Errorf("%s: localEdits = %v, want the index refused as damaged, saying what to do", name, err)
		}
	}
}

// TestIndexEncoding ensures an index reads back as it was written, paths with line breaks,
// quotes and any UTF-8 among them, and that the decoder refuses entries out of order.
func TestIndexEncoding(t *testing.T) {
	t.Parallel()
	x := &index{stamp: 1234567890123456789}
	for i, p := range []string{"\"quoted\".txt", "a.txt", "dir/with space.txt", "line\nbreak", "ünï/cödé"} {
		e := indexEntry{path: p, inBase: i%2 == 0, hashed: i != 2}
		e.base = sha256.Sum256([]byte("base " + p))
		e.baseMode = []string{repo.ModeExecutable, "", repo.ModeSymlink, "", repo.ModeFile}[i]
		if !e.inBase {
			e.base = sha256Sum{}
		}
		if e.hashed {
			e.stat = fileStat{size: int64(i), mtime: 1e18 + int64(i), ctime: int64(i) * 3, ino: uint64(i) + 1<<40, mode: 0o100644}
			e.local = sha256.Sum256([]byte(p))
		}
		x.entries = append(x.entries, e)
	}
	x.watch = WatchToken{Session: "S3SS10N", Seq: 42}
	encoded := x.encode()
	got, err := decodeIndex(encoded)
	if err != nil {
		t.Fatal(err)
	}
	if got.stamp != x.stamp || got.watch != x.watch || !slices.Equal(got.entries, x.entries) {
		t.Errorf("read back %+v, want %+v", got, x)
	}
	// The versions before modes (2, without the watcher's token, and 3) are refused as such,
	// never read as a base of plain files.
	head := len(indexMagic) + 12
	v2 := append([]byte("ag-index\x00\x02"), encoded[len(indexMagic):head]...)
	v2 = append(v2, encoded[head+24:len(encoded)-4]...)
	v2 = binary.LittleEndian.AppendUint32(v2, crc32.Checksum(v2, castagnoli))
	v3 := append([]byte("ag-index\x00\x03"), encoded[len(indexMagic):len(encoded)-4]...)
	v3 = binary.LittleEndian.AppendUint32(v3, crc32.Checksum(v3, castagnoli))
	for name, old := range map[string][]byte{"2": v2, "3": v3} {
		if got, err := decodeIndex(old); !errors.Is(err, errIndexOldVersion) {
			t.Errorf("an index of version %s read back %+v, %v; want it refused as of a version before modes", name, got, err)
		}
	}
	x.entries[1], x.entries[2] = x.entries[2], x.entries[1]
	if _, err := decodeIndex(x.encode()); err == nil {
		t.Error("an index out of path order decoded")
	}
}

// TestProgressLine ensures the progress line counts files and bytes and ends with a line break,
// and that a writer that is not a terminal gets none.
func TestProgressLine(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if p := NewProgress(&buf, "checkout:", 2, 10); p != nil {
		t.Fatal("a progress line on a buffer, which is no terminal")
	}
	p := &Progress{w: &buf, verb: "checkout:", totalFiles: 3, totalBytes: 3 << 20}
	p.Add(1, 1<<20)
	p.Add(2, 2<<20)
	p.Done()
	if got := buf.String(); !strings.HasPrefix(got, "\rcheckout: 1/3 files, 1.0 MiB/3.0 MiB") || !strings.HasSuffix(got, "\rcheckout: 3/3 files, 3.0 MiB/3.0 MiB\x1b[K\n") {
		t.Errorf("progress printed %q", got)
	}
	var nilProgress *Progress
	nilProgress.Add(1, 1)
	nilProgress.Done()
}

// TestIndexRacilyClean ensures an entry whose mtime is not a window older than the scan that
// recorded it is not trusted even when the stat matches: the file may have changed after it was
// hashed, within the file system's timestamp granularity. Here the index says a file holds other
// content than it does, with its very stat: recorded right after the file was written (the racy
// case), the file is hashed again; recorded well after it, the index is trusted.
func TestIndexRacilyClean(t *testing.T) {
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
	lie := func(stamp time.Time, content string) {
		t.Helper()
		x, err := readIndex(root, co.Index)
		if err != nil {
			t.Fatal(err)
		}
		x.stamp = stamp.UnixNano()
		e := &x.entries[0]
		e.hashed, e.stat, e.local = true, statOfInfo(info), sha256.Sum256([]byte(content))
		if err := saveIndex(root, co.Index, x); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		after   time.Duration // from the file's mtime to the recording scan
		trusted bool
	}{
		{0, false},
		{50 * time.Millisecond, false},
		{10 * time.Second, true},
	} {
		lie(info.ModTime().Add(c.after), "b\n") // what the file held when hashed, the same size
		fresh, err := Find(co.root)
		if err != nil {
			t.Fatal(err)
		}
		edits, err := fresh.LocalEdits()
		if err != nil {
			t.Fatal(err)
		}
		if got := len(edits) == 1; got != c.trusted {
			t.Errorf("index recorded %v after the mtime: edits %v; want the index trusted: %v", c.after, edits, c.trusted)
		}
	}
	// A stamp in the index later than the index file's own mtime counts for no more than that.
	lie(time.Now().Add(time.Hour), "a\n")
	if got, err := readIndex(root, co.Index); err != nil || got.stamp > time.Now().UnixNano() {
		t.Errorf("loaded a stamp %v in the future (%v)", time.Unix(0, got.stamp), err)
	}
}

// TestACheckoutFromBeforeTheIndexCarriesOn ensures a checkout whose checkout.json holds its
// base files (as ag wrote them before there was an index) finds its edits as before, and that
// its next save moves the files into an index and drops the old stat cache.
func TestACheckoutFromBeforeTheIndexCarriesOn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for p, content := range map[string]string{"a.txt": "a\n", "b/c.txt": "changed\n", "new.txt": "new\n"} {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(full, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, StateDir), 0o755); err != nil {
		t.Fatal(err)
	}
	state := fmt.Sprintf(`{"repository":"app","server":"http://x","holder":"h","base_revision":"rev_1","files":{"a.txt":%q,"b/c.txt":%q,"gone.txt":%q}}`,
		repo.Digest([]byte("a\n")), repo.Digest([]byte("c\n")), repo.Digest([]byte("gone\n")))
	if err := os.WriteFile(statePath(dir), []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
	oldCache := filepath.Join(dir, StateDir, "stat")
	if err := os.WriteFile(oldCache, []byte("ag-stat-cache 1 0\nend 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{"modified b/c.txt", "deleted gone.txt", "added new.txt"}
	co, err := Find(dir)
	if err != nil {
		t.Fatal(err)
	}
	if edits, _ := editsOf(t, co); !slices.Equal(edits, want) {
		t.Errorf("edits of the old checkout: %q, want %q", edits, want)
	}
	data, err := os.ReadFile(statePath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), `"files"`) || !strings.Contains(string(data), `"index": "index-`) {
		t.Errorf("checkout.json after the first scan:\n%s\nwant the files moved into an index", data)
	}
	if _, err := os.Stat(oldCache); !os.IsNotExist(err) {
		t.Errorf("the old stat cache is still there: %v", err)
	}
	if edits, hashed := editsOf(t, co); !slices.Equal(edits, want) || hashed != 0 {
		t.Errorf("from the index: edits %q, %d read; want %q and none read", edits, hashed, want)
	}
}
