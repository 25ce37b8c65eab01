package checkout

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/repo"
)

// splitTestCheckout makes a checkout of n files f00.txt…, every one hashed by a scan, its
// index whole.
func splitTestCheckout(t *testing.T, n int) *Checkout {
	t.Helper()
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("f%02d.txt", i)] = fmt.Sprintf("file %d\n", i)
	}
	co := statTestCheckout(t, files)
	if _, err := co.LocalEdits(); err != nil {
		t.Fatal(err)
	}
	return co
}

// moveAndSave moves the checkout at dir, read afresh, to revision with to's files in place of
// its own at those paths (removed: gone from it), and saves it as a sync does.
func moveAndSave(t *testing.T, dir, revision string, to map[string]treeFile, removed ...string) *Checkout {
	t.Helper()
	co, err := Find(dir)
	if err != nil {
		t.Fatal(err)
	}
	from := baseFilesAt(t, co, to, removed)
	co.base = nil
	root := rootAt(t, dir)
	if err := co.moveBase(root, revision, from, to); err != nil {
		t.Fatal(err)
	}
	if err := co.Save(); err != nil {
		t.Fatal(err)
	}
	return co
}

// baseFilesAt answers the base files of co at the paths of to and removed, as a sync's plan
// holds them.
func baseFilesAt(t *testing.T, co *Checkout, to map[string]treeFile, removed []string) map[string]treeFile {
	t.Helper()
	base, err := co.BaseFiles()
	if err != nil {
		t.Fatal(err)
	}
	from := map[string]treeFile{}
	for _, p := range append(slices.Collect(mapKeys(to)), removed...) {
		if f, ok := base[p]; ok {
			from[p] = f
		}
	}
	return from
}

// stateFiles answers the names of the files under dir/.ag but checkout.json.
func stateFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, StateDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != "checkout.json" {
			names = append(names, e.Name())
		}
	}
	return names
}

// indexAsRead reads the checkout at dir's index as a command would.
func indexAsRead(t *testing.T, dir string) (*Checkout, *index) {
	t.Helper()
	co, err := Find(dir)
	if err != nil {
		t.Fatal(err)
	}
	root := rootAt(t, dir)
	x, err := co.loadIndex(root)
	if err != nil {
		t.Fatal(err)
	}
	return co, x
}

func textFile(content string) treeFile {
	return treeFile{digest: repo.Digest([]byte(content)), Mode: repo.ModeFile}
}

// TestANewBaseIsWrittenAsAnOverlay ensures a new base that differs from the index by a few
// paths is written as an overlay over a link of its own to the whole index, read back as the
// same entries as the whole index of that base; that moving again replaces the overlay and
// its link, leaving no file behind; and that past a fifth of the entries changed the index is
// written whole again, with no overlay or link left.
func TestANewBaseIsWrittenAsAnOverlay(t *testing.T) {
	t.Parallel()
	co := splitTestCheckout(t, 20)
	dir := co.root
	_, before := indexAsRead(t, dir)
	whole := slices.Clone(before.entries)
	wholeName := co.Index

	moved := moveAndSave(t, dir, "rev_2", map[string]treeFile{"f03.txt": textFile("three\n"), "new.txt": textFile("new\n")}, "f07.txt")
	named, err := os.ReadFile(filepath.Join(dir, StateDir, moved.Index))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(named, []byte(overlayMagic)) {
		t.Fatalf("checkout.json names %s, which is not an overlay (%q…)", moved.Index, named[:min(len(named), 12)])
	}
	if len(named) > 3*indexRecord+200 {
		t.Errorf("the overlay of three paths is %d bytes: more than its three records", len(named))
	}
	_, x := indexAsRead(t, dir)
	if x.linkOf != moved.Index || x.shared == "" || x.shared == wholeName {
		t.Errorf("read as an overlay of %q over %q, want over a link of its own (not %s)", x.linkOf, x.shared, wholeName)
	}
	if files := stateFiles(t, dir); !slices.Equal(files, slices.Sorted(slices.Values([]string{moved.Index, x.shared}))) {
		t.Errorf(".ag holds %v, want the overlay %s and its link %s alone", files, moved.Index, x.shared)
	}
	want := map[string]indexEntry{}
	for _, e := range whole {
		want[e.path] = e
	}
	f3 := want["f03.txt"]
	f3.base = sumOf(t, textFile("three\n"))
	want["f03.txt"] = f3
	want["new.txt"] = indexEntry{path: "new.txt", inBase: true, base: sumOf(t, textFile("new\n")), baseMode: repo.ModeFile}
	f7 := want["f07.txt"]
	f7.inBase, f7.base, f7.baseMode = false, sha256Sum{}, ""
	want["f07.txt"] = f7 // still hashed on disk
	checkEntries(t, "the overlay read back", x.entries, want)

	// Moved again: a new overlay over a new link, the old pair gone.
	first := x.shared
	again := moveAndSave(t, dir, "rev_3", map[string]treeFile{"f05.txt": textFile("five\n")})
	_, y := indexAsRead(t, dir)
	if files := stateFiles(t, dir); !slices.Equal(files, slices.Sorted(slices.Values([]string{again.Index, y.shared}))) || y.shared == first {
		t.Errorf(".ag holds %v, want the new overlay %s and a new link %s alone", files, again.Index, y.shared)
	}
	f5 := want["f05.txt"]
	f5.base = sumOf(t, textFile("five\n"))
	want["f05.txt"] = f5
	checkEntries(t, "the second overlay read back", y.entries, want)

	// Past a fifth of the entries: whole, alone.
	many := map[string]treeFile{}
	for i := 10; i < 15; i++ {
		many[fmt.Sprintf("f%02d.txt", i)] = textFile(fmt.Sprintf("changed %d\n", i))
		e := want[fmt.Sprintf("f%02d.txt", i)]
		e.base = sumOf(t, textFile(fmt.Sprintf("changed %d\n", i)))
		want[e.path] = e
	}
	last := moveAndSave(t, dir, "rev_4", many)
	data, err := os.ReadFile(filepath.Join(dir, StateDir, last.Index))
	if err != nil || !bytes.HasPrefix(data, []byte(indexMagic)) {
		t.Fatalf("with 9 of 22 entries changed the index is not whole (%v)", err)
	}
	if files := stateFiles(t, dir); !slices.Equal(files, []string{last.Index}) {
		t.Errorf(".ag holds %v, want the whole index %s alone", files, last.Index)
	}
	_, z := indexAsRead(t, dir)
	checkEntries(t, "the whole index read back", z.entries, want)

	// From an overlay to a base built afresh (a sync of the whole tree): the overlay and its
	// link go with it.
	overlaid := moveAndSave(t, dir, "rev_5", map[string]treeFile{"f01.txt": textFile("one\n")})
	if _, o := indexAsRead(t, dir); o.linkOf != overlaid.Index {
		t.Fatalf("rev_5 was not written as an overlay")
	}
	afresh, err := Find(dir)
	if err != nil {
		t.Fatal(err)
	}
	base, err := afresh.BaseFiles()
	if err != nil {
		t.Fatal(err)
	}
	afresh.SetBase("rev_6", base)
	if err := afresh.Save(); err != nil {
		t.Fatal(err)
	}
	if files := stateFiles(t, dir); !slices.Equal(files, []string{afresh.Index}) {
		t.Errorf("after a base built afresh .ag holds %v, want its whole index %s alone", files, afresh.Index)
	}
}

func sumOf(t *testing.T, f treeFile) sha256Sum {
	t.Helper()
	sum, err := f.baseSum()
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// checkEntries fails unless entries are want's, in path order.
func checkEntries(t *testing.T, what string, entries []indexEntry, want map[string]indexEntry) {
	t.Helper()
	paths := slices.Sorted(mapKeys(want))
	var wanted []indexEntry
	for _, p := range paths {
		wanted = append(wanted, want[p])
	}
	if !slices.Equal(entries, wanted) {
		t.Errorf("%s:\n%v\nwant:\n%v", what, entries, wanted)
	}
}

// TestAScanRewritesAnIndexAsItWasRead ensures a scan that records what it hashed rewrites an
// overlay in place as an overlay over the same link (and finds the same edits after), and a
// whole index as a whole one: a rewrite in place never unlinks what the named index needs.
func TestAScanRewritesAnIndexAsItWasRead(t *testing.T) {
	t.Parallel()
	co := splitTestCheckout(t, 20)
	dir := co.root
	moved := moveAndSave(t, dir, "rev_2", map[string]treeFile{"f03.txt": textFile("file 3\n" + "more\n")})
	_, x := indexAsRead(t, dir)
	link := x.shared
	// f03.txt now differs from the base; f04.txt is edited on disk, an hour back so that the
	// scan's record of it is trusted (a settled hash is what makes a scan write).
	old := time.Now().Add(-time.Hour)
	for p, content := range map[string]string{"f03.txt": "file 3\nmore\n", "f04.txt": "four\n"} {
		full := filepath.Join(dir, p)
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(full, old, old); err != nil {
			t.Fatal(err)
		}
	}
	edits, hashed := editsOf(t, co)
	if !slices.Equal(edits, []string{"modified f04.txt"}) || hashed != 2 {
		t.Fatalf("edits %v after hashing %d files, want modified f04.txt after hashing the two written", edits, hashed)
	}
	after, y := indexAsRead(t, dir)
	if after.Index != moved.Index || y.linkOf != moved.Index || y.shared != link {
		t.Errorf("after the scan checkout.json names %s read over %q, want the overlay %s rewritten over its link %s", after.Index, y.shared, moved.Index, link)
	}
	if files := stateFiles(t, dir); !slices.Equal(files, slices.Sorted(slices.Values([]string{moved.Index, link}))) {
		t.Errorf(".ag holds %v, want the overlay and its link alone", files)
	}
	if edits, hashed := editsOf(t, co); !slices.Equal(edits, []string{"modified f04.txt"}) || hashed != 0 {
		t.Errorf("the next scan finds %v hashing %d files, want modified f04.txt from the index's record, hashing none", edits, hashed)
	}

	// A whole index is rewritten whole, under its own name.
	plain := splitTestCheckout(t, 3)
	name := plain.Index
	full := filepath.Join(plain.root, "f01.txt")
	if err := os.WriteFile(full, []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(full, old, old); err != nil {
		t.Fatal(err)
	}
	if edits, hashed := editsOf(t, plain); !slices.Equal(edits, []string{"modified f01.txt"}) || hashed != 1 {
		t.Fatalf("edits %v hashing %d, want modified f01.txt hashing it", edits, hashed)
	}
	data, err := os.ReadFile(filepath.Join(plain.root, StateDir, name))
	if err != nil || !bytes.HasPrefix(data, []byte(indexMagic)) {
		t.Errorf("the whole index %s after a scan: %v, want it whole still", name, err)
	}
	if files := stateFiles(t, plain.root); !slices.Equal(files, []string{name}) {
		t.Errorf(".ag holds %v, want %s alone", files, name)
	}
}

// TestAnOverlayOutlivesARewriteOfItsWholeIndex ensures an overlay reads the index it was
// made over when another ag, which still took the whole index for the checkout's, rewrote that
// file in place afterwards: the link is of the file as it was.
func TestAnOverlayOutlivesARewriteOfItsWholeIndex(t *testing.T) {
	t.Parallel()
	co := splitTestCheckout(t, 20)
	dir := co.root
	stale, staleIndex := indexAsRead(t, dir)
	root := rootAt(t, dir)
	moveAndSave(t, dir, "rev_2", map[string]treeFile{"f03.txt": textFile("three\n")})
	_, want := indexAsRead(t, dir)
	// The other ag's scan writes the whole index it read, in place, with other stats.
	other := *staleIndex
	other.entries = slices.Clone(staleIndex.entries)
	other.entries[0].stat.size = 12345
	if err := saveIndex(root, stale.Index, &other); err != nil {
		t.Fatal(err)
	}
	_, got := indexAsRead(t, dir)
	if !slices.Equal(got.entries, want.entries) {
		t.Errorf("after the whole index was rewritten the overlay reads:\n%v\nwant:\n%v", got.entries, want.entries)
	}
}

// TestADamagedOverlayIsRefused ensures an overlay is read only over the very file it names:
// one whose checksum differs, an overlay named as the shared file, a name no ag gives, and a
// removal of a path the shared file lacks are each refused as damage, not read as a checkout
// with other files.
func TestADamagedOverlayIsRefused(t *testing.T) {
	t.Parallel()
	co := splitTestCheckout(t, 20)
	dir := co.root
	moved := moveAndSave(t, dir, "rev_2", map[string]treeFile{"f03.txt": textFile("three\n")})
	_, x := indexAsRead(t, dir)
	root := rootAt(t, dir)
	if _, err := readIndex(root, moved.Index); err != nil {
		t.Fatalf("the overlay as written: %v", err)
	}
	write := func(name string, x *index, shared string, crc uint32, entries []indexEntry) {
		t.Helper()
		extra := append([]byte{byte(len(shared))}, shared...)
		extra = append(extra, byte(crc), byte(crc>>8), byte(crc>>16), byte(crc>>24))
		var b bytes.Buffer
		if _, err := writeEntries(&b, overlayMagic, x.stamp, x.watch, extra, entries); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, StateDir, name), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	over := x.overlayEntries()
	cases := []struct {
		name    string
		shared  string
		crc     uint32
		entries []indexEntry
	}{
		{"another checksum", x.shared, x.sharedCRC + 1, over},
		{"over an overlay", moved.Index, x.sharedCRC, over},
		{"a name no ag gives", "../checkout.json", x.sharedCRC, over},
		{"a removal of what is not there", x.shared, x.sharedCRC, append(slices.Clone(over), indexEntry{path: "nowhere.txt", removed: true})},
	}
	for i, c := range cases {
		name := fmt.Sprintf("index-CASE%d", i)
		write(name, x, c.shared, c.crc, c.entries)
		if got, err := readIndex(root, name); !errors.Is(err, errIndexDamaged) {
			t.Errorf("%s: read as %v, %v; want it refused as damaged", c.name, got, err)
		}
	}
	// The control: the same writer with the right name and checksum reads.
	write("index-RIGHT", x, x.shared, x.sharedCRC, over)
	if _, err := readIndex(root, "index-RIGHT"); err != nil {
		t.Errorf("an overlay written right: %v", err)
	}
	// A removal mark is an overlay's alone.
	var b bytes.Buffer
	if _, err := writeEntries(&b, indexMagic, 1, WatchToken{}, nil, []indexEntry{{path: "a", removed: true}}); err != nil {
		t.Fatal(err)
	}
	if _, err := decodeIndex(b.Bytes()); !errors.Is(err, errIndexDamaged) {
		t.Errorf("a whole index with a removal mark: %v, want it refused as damaged", err)
	}
}

// TestALinkJustMadeIsNoLeftover ensures another ag's clean-up of a crash's leftovers, which
// keeps only the index it names, leaves an overlay's link just made (to a whole index written
// long before) for the overlay about to be named, and removes the pair once both are old.
func TestALinkJustMadeIsNoLeftover(t *testing.T) {
	t.Parallel()
	co := splitTestCheckout(t, 20)
	dir := co.root
	long := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(dir, StateDir, co.Index), long, long); err != nil {
		t.Fatal(err)
	}
	moved := moveAndSave(t, dir, "rev_2", map[string]treeFile{"f03.txt": textFile("three\n")})
	_, x := indexAsRead(t, dir)
	root := rootAt(t, dir)
	removeStaleIndexes(root, "index-ELSE")
	if files := stateFiles(t, dir); !slices.Equal(files, slices.Sorted(slices.Values([]string{moved.Index, x.shared}))) {
		t.Errorf(".ag holds %v after another ag's clean-up, want the overlay %s and its link %s", files, moved.Index, x.shared)
	}
	for _, name := range []string{moved.Index, x.shared} {
		if err := os.Chtimes(filepath.Join(dir, StateDir, name), long, long); err != nil {
			t.Fatal(err)
		}
	}
	removeStaleIndexes(root, "index-ELSE")
	if files := stateFiles(t, dir); len(files) != 0 {
		t.Errorf(".ag holds %v after a clean-up an hour later, want the pair gone", files)
	}
}

// TestAnIndexMappedPastItsEndIsDamaged ensures an index file shorter than the mapping made of
// it (cut short under a reader) is refused as damaged, not a crash of the reader.
func TestAnIndexMappedPastItsEndIsDamaged(t *testing.T) {
	t.Parallel()
	x := &index{stamp: 1, entries: []indexEntry{{path: "a.txt", inBase: true, baseMode: repo.ModeFile}}}
	path := filepath.Join(t.TempDir(), "index-CUT")
	if err := os.WriteFile(path, x.encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decodeIndexFile(f, info.Size(), 0); err != nil || len(got.entries) != 1 {
		t.Fatalf("the whole file: %v, %v", got, err)
	}
	page := int64(os.Getpagesize())
	if got, err := decodeIndexFile(f, info.Size()+4*page, 0); !errors.Is(err, errIndexDamaged) {
		t.Errorf("mapped four pages past its end: %v, %v; want it refused as damaged", got, err)
	}
}

// TestAnIndexIsWrittenThroughItsBufferWhole ensures an index larger than the buffer it is
// written through, with a path longer than that buffer, reads back as written.
func TestAnIndexIsWrittenThroughItsBufferWhole(t *testing.T) {
	t.Parallel()
	x := &index{stamp: 7, watch: WatchToken{Seq: 3}}
	for i := range 2000 {
		x.entries = append(x.entries, indexEntry{path: fmt.Sprintf("d/%04d.txt", i), inBase: true, baseMode: repo.ModeExecutable, hashed: true,
			stat: fileStat{size: int64(i), mtime: int64(i) * 7, ctime: 3, ino: uint64(i), mode: 0o100755}, base: sha256Sum{byte(i)}, local: sha256Sum{1, byte(i)}})
	}
	x.entries = append(x.entries, indexEntry{path: "e/" + strings.Repeat("x", 70_000), hashed: true, local: sha256Sum{9}})
	data := x.encode()
	got, err := decodeIndex(data)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.entries, x.entries) || got.stamp != 7 || got.watch.Seq != 3 {
		t.Errorf("read back %d entries (stamp %d, seq %d), not the %d written", len(got.entries), got.stamp, got.watch.Seq, len(x.entries))
	}
}

// TestASyncAfterIntegrateTakesTheIndexRead ensures the sync after an integrate takes the
// index the integrate read only when checkout.json still names that index at that base, and
// reads its own otherwise.
func TestASyncAfterIntegrateTakesTheIndexRead(t *testing.T) {
	t.Parallel()
	co := splitTestCheckout(t, 3)
	read, err := Find(co.root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := read.LocalEdits(); err != nil {
		t.Fatal(err)
	}
	fresh := func(change func(*Checkout)) *Checkout {
		c, err := Find(co.root)
		if err != nil {
			t.Fatal(err)
		}
		change(c)
		c.takeIndexOf(read)
		return c
	}
	if c := fresh(func(*Checkout) {}); c.idx != read.idx {
		t.Errorf("the same index at the same base was not taken")
	}
	for what, change := range map[string]func(*Checkout){
		"another index":     func(c *Checkout) { c.Index = "index-OTHER" },
		"another base":      func(c *Checkout) { c.BaseRevision = "rev_9" },
		"a base not saved":  func(c *Checkout) { c.baseChanged = true },
		"another directory": func(c *Checkout) { c.root += "/x" },
	} {
		if c := fresh(change); c.idx != nil {
			t.Errorf("with %s the index read was taken", what)
		}
	}
}
