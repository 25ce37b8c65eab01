package checkout

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
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
