package checkout

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/repo"
)

// encodeOverlay answers an overlay over the whole index shared (whose checksum is crc) as
// writeEntries writes one, with extra in place of the shared index's name and checksum when not
// nil: a name cut short, or none.
func encodeOverlay(t *testing.T, shared string, crc uint32, extra []byte, entries []indexEntry) []byte {
	t.Helper()
	if extra == nil {
		extra = append([]byte{byte(len(shared))}, shared...)
		extra = append(extra, byte(crc), byte(crc>>8), byte(crc>>16), byte(crc>>24))
	}
	var b bytes.Buffer
	if _, err := writeEntries(&b, overlayMagic, 1, WatchToken{}, extra, entries); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestAnOverlayReadsItsRemovalsAndNothingCutShort holds the decoding of an overlay: one of no
// entry, and one whose removals come before and among other entries, read back whole; one whose
// shared index's name or checksum is cut short (its own checksum right), refused as damaged,
// never read past its end.
func TestAnOverlayReadsItsRemovalsAndNothingCutShort(t *testing.T) {
	t.Parallel()
	const shared = "index-SHARED"
	empty, err := decodeIndex(encodeOverlay(t, shared, 7, nil, nil))
	if err != nil || empty.shared != shared || empty.sharedCRC != 7 || len(empty.entries) != 0 {
		t.Fatalf("an overlay of no entry: %+v, %v", empty, err)
	}
	entries := []indexEntry{
		{path: "a.txt", removed: true},
		{path: "b.txt", inBase: true, baseMode: "100644"},
		{path: "c.txt", removed: true},
		{path: "d.txt", inBase: true, baseMode: "100755", hashed: true},
	}
	x, err := decodeIndex(encodeOverlay(t, shared, 7, nil, entries))
	if err != nil {
		t.Fatalf("an overlay with removals: %v", err)
	}
	var got []string
	for _, e := range x.entries {
		got = append(got, fmt.Sprintf("%s removed=%v base=%v %s hashed=%v", e.path, e.removed, e.inBase, e.baseMode, e.hashed))
	}
	want := []string{"a.txt removed=true base=false  hashed=false", "b.txt removed=false base=true 100644 hashed=false",
		"c.txt removed=true base=false  hashed=false", "d.txt removed=false base=true 100755 hashed=true"}
	if !slices.Equal(got, want) {
		t.Errorf("an overlay with removals read as\n%q\nwant\n%q", got, want)
	}
	for _, c := range []struct {
		name  string
		extra []byte
	}{
		{"no name at all", []byte{}},
		{"a name's length alone", []byte{byte(len(shared))}},
		{"a name cut short", append([]byte{byte(len(shared))}, shared[:5]...)},
		{"a name without its checksum", append([]byte{byte(len(shared))}, shared...)},
		{"a name and half a checksum", append(append([]byte{byte(len(shared))}, shared...), 7, 0)},
	} {
		if x, err := decodeIndex(encodeOverlay(t, shared, 7, c.extra, nil)); !errors.Is(err, errIndexDamaged) {
			t.Errorf("an overlay of %s: read as %+v, %v; want it refused as damaged", c.name, x, err)
		}
	}
}

// sizedWrites records the size of each write.
type sizedWrites struct {
	bytes.Buffer
	sizes []int
}

func (w *sizedWrites) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return w.Buffer.Write(p)
}

// TestAnIndexIsWrittenInWritesOfItsBuffer holds that an index is written through its one
// buffer of 64 KiB: no write is larger (the writer never holds the index whole), and the writes
// are few, each but the last nearly full; and that what is written reads back.
func TestAnIndexIsWrittenInWritesOfItsBuffer(t *testing.T) {
	t.Parallel()
	var entries []indexEntry
	for i := range 5000 {
		entries = append(entries, indexEntry{path: fmt.Sprintf("src/package%04d/file%04d.go", i/10, i), inBase: true, baseMode: "100644"})
	}
	var w sizedWrites
	if _, err := writeEntries(&w, indexMagic, 1, WatchToken{}, nil, entries); err != nil {
		t.Fatal(err)
	}
	const buffer = 64 << 10
	total := w.Len()
	if n := len(w.sizes); n > total/(buffer/2)+2 {
		t.Errorf("%d bytes written in %d writes %v; want them through a buffer of %d bytes", total, n, w.sizes, buffer)
	}
	for _, size := range w.sizes {
		if size > buffer {
			t.Errorf("a write of %d bytes, past the buffer of %d", size, buffer)
		}
	}
	x, err := decodeIndex(w.Bytes())
	if err != nil || len(x.entries) != len(entries) || x.entries[4999].path != entries[4999].path {
		t.Errorf("the index written reads back as %d entries, %v", len(x.entries), err)
	}
}

// TestAnOverlayAppliedIsTheIndexItStandsFor holds applyTo and mergeSorted: the overlay's
// entries replace the shared index's, its removals take theirs away, and what it adds comes in
// its place in path order, before, among and after the shared index's entries.
func TestAnOverlayAppliedIsTheIndexItStandsFor(t *testing.T) {
	t.Parallel()
	entry := func(p string) indexEntry { return indexEntry{path: p, inBase: true, baseMode: "100644"} }
	shared := []indexEntry{entry("b"), entry("d"), entry("f"), entry("h")}
	over := &index{entries: []indexEntry{entry("a"), entry("c"), {path: "d", removed: true}, {path: "f", inBase: true, baseMode: "100755"}, entry("g"), entry("i")}}
	if err := over.applyTo(slices.Clone(shared)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range over.entries {
		got = append(got, e.path+" "+e.baseMode)
		if e.removed {
			t.Errorf("%s is still there, marked removed", e.path)
		}
	}
	if want := []string{"a 100644", "b 100644", "c 100644", "f 100755", "g 100644", "h 100644", "i 100644"}; !slices.Equal(got, want) {
		t.Errorf("the overlay applied: %q, want %q", got, want)
	}
	for _, c := range []struct{ into, added, want string }{
		{"", "ab", "ab"}, {"ab", "", "ab"}, {"bd", "ace", "abcde"}, {"ace", "bd", "abcde"}, {"a", "b", "ab"}, {"b", "a", "ab"},
	} {
		var into, added []indexEntry
		for _, p := range c.into {
			into = append(into, entry(string(p)))
		}
		for _, p := range c.added {
			added = append(added, entry(string(p)))
		}
		merged := ""
		for _, e := range mergeSorted(into, added) {
			merged += e.path
		}
		if merged != c.want {
			t.Errorf("mergeSorted(%q, %q) = %q, want %q", c.into, c.added, merged, c.want)
		}
	}
}

// TestAnIndexGoesWithItsOwnLinkOnly holds that the link an index file has of its own (an
// overlay's link to its whole index) is the one x was read from or written as, and no other
// name's.
func TestAnIndexGoesWithItsOwnLinkOnly(t *testing.T) {
	t.Parallel()
	x := &index{shared: "index-LINK", linkOf: "index-OVER"}
	if got := x.ownLink("index-OVER"); got != "index-LINK" {
		t.Errorf("the overlay's own link: %q, want index-LINK", got)
	}
	for _, name := range []string{"index-OTHER", ""} {
		if got := x.ownLink(name); got != "" {
			t.Errorf("the own link of %q: %q, want none", name, got)
		}
	}
	if got := (&index{shared: "index-WHOLE"}).ownLink(""); got != "" {
		t.Errorf("the own link of no name, of a whole index: %q, want none", got)
	}
}

// TestAnIndexIsSavedAsAnOverlayOnlyWhenItChangedLittle holds saveIndex's choice: an index that
// changed in at most a fifth of its entries from its shared whole index is written as an
// overlay over it; one that changed more, one of no shared index, and the shared index itself
// written again under its own name, are written whole. And an empty index file is damaged.
func TestAnIndexIsSavedAsAnOverlayOnlyWhenItChangedLittle(t *testing.T) {
	t.Parallel()
	root, dir := openTestRoot(t)
	if err := os.MkdirAll(filepath.Join(dir, StateDir), 0o755); err != nil {
		t.Fatal(err)
	}
	var entries []indexEntry
	for i := range 10 {
		entries = append(entries, indexEntry{path: fmt.Sprintf("f%02d", i), inBase: true, baseMode: "100644"})
	}
	whole := &index{stamp: 1, entries: slices.Clone(entries)}
	if err := writeWhole(root, "index-SHARED", whole); err != nil {
		t.Fatal(err)
	}
	kind := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, StateDir, name))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case bytes.HasPrefix(b, []byte(overlayMagic)):
			return "overlay"
		case bytes.HasPrefix(b, []byte(indexMagic)):
			return "whole"
		}
		return "neither"
	}
	changed := func(n int) map[string]bool {
		m := map[string]bool{}
		for i := range n {
			m[entries[i].path] = true
		}
		return m
	}
	for i, c := range []struct {
		name, shared, save string
		changed            int
		want               string
	}{
		{"2 of 10 changed", "index-SHARED", "", 2, "overlay"},
		{"3 of 10 changed", "index-SHARED", "", 3, "whole"},
		{"no shared index", "", "", 1, "whole"},
		{"the shared index under its own name", "index-SHARED", "index-SHARED", 1, "whole"},
	} {
		x := &index{stamp: 2, entries: slices.Clone(entries), shared: c.shared, sharedCRC: whole.sharedCRC, changed: changed(c.changed)}
		name := cmp.Or(c.save, fmt.Sprintf("index-CASE%d", i))
		if err := saveIndex(root, name, x); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := kind(name); got != c.want {
			t.Errorf("%s: written %s, want %s", c.name, got, c.want)
		}
	}

	if err := os.WriteFile(filepath.Join(dir, StateDir, "index-EMPTY"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if x, err := readIndex(root, "index-EMPTY"); !errors.Is(err, errIndexDamaged) {
		t.Errorf("an empty index file read as %+v, %v; want it refused as damaged", x, err)
	}
}

// TestASubmodulesCommitIsKeptOnlyWhenItIsOne holds baseSum of a submodule: its commit, 40 hex
// digits, is kept in the index's first 20 bytes; one of 38 digits or 42, or not hex, is refused,
// never kept cut short or padded.
func TestASubmodulesCommitIsKeptOnlyWhenItIsOne(t *testing.T) {
	t.Parallel()
	commit := strings.Repeat("ab", 20)
	sum, err := treeFile{Mode: repo.ModeGitlink, commit: commit}.baseSum()
	if err != nil || hex.EncodeToString(sum[:20]) != commit || sum[20] != 0 {
		t.Errorf("baseSum of the commit %s = %x, %v", commit, sum, err)
	}
	for _, bad := range []string{commit[:38], commit + "ab", commit[:39] + "g", ""} {
		if sum, err := (treeFile{Mode: repo.ModeGitlink, commit: bad}).baseSum(); err == nil {
			t.Errorf("baseSum of the commit %q = %x, want it refused", bad, sum)
		}
	}
}

// TestAPathIsPlacedOnlyWhereNoFileStaysUnderIt holds checkPlace at the end of the index: a
// file the revision adds where the base has a directory is refused while a file of that
// directory stays, and taken once every one of them is removed, the last entries of the index
// among them.
func TestAPathIsPlacedOnlyWhereNoFileStaysUnderIt(t *testing.T) {
	t.Parallel()
	x := &index{entries: []indexEntry{
		{path: "a/x", inBase: true, baseMode: "100644"},
		{path: "z/1", inBase: true, baseMode: "100644"},
		{path: "z/2", inBase: true, baseMode: "100644"},
	}}
	none := func(string) (treeFile, bool, error) { return treeFile{}, false, nil }
	target := map[string]treeFile{"z": textFile("now a file\n")}
	if err := x.checkPlace("z", target, map[string]bool{"z/1": true}, none); err == nil || !strings.Contains(err.Error(), "z/2") {
		t.Errorf("z placed while z/2 stays: %v; want it refused, naming z/2", err)
	}
	if err := x.checkPlace("z", target, map[string]bool{"z/1": true, "z/2": true}, none); err != nil {
		t.Errorf("z placed once z/1 and z/2 are removed: %v", err)
	}
}
