package gitstore

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Tests written for the mutation run of this package (scripts/mutation, docs/testing.md): each
// holds one rule at its edges, where a mutant of it would answer otherwise.

// TestDeltaSizesReadsGitsHeaderAndRefusesADamagedOne holds the reading of a delta's two sizes,
// by which the server refuses a delta that would make more than its bound before it makes a
// byte: each size is little-endian base 128 of at most 10 bytes.
func TestDeltaSizesReadsGitsHeaderAndRefusesADamagedOne(t *testing.T) {
	cont := func(n int) []byte { return []byte(strings.Repeat("\x80", n)) }
	for _, tc := range []struct {
		name        string
		delta       []byte
		src, target uint64
		ok          bool
	}{
		{"one byte each", []byte{5, 7, 0x90}, 5, 7, true},
		{"several bytes each", []byte{0xac, 0x02, 0xff, 0xff, 0x03, 1}, 300, 65535, true},
		{"the largest of one byte", []byte{0x7f, 0}, 127, 0, true},
		{"ten bytes", append(append(cont(9), 0x01), 3), 1 << 63, 3, true},
		{"eleven bytes", append(append(cont(10), 0x01), 3), 0, 0, false},
		{"the target of eleven bytes", append([]byte{1}, append(cont(10), 0x01)...), 0, 0, false},
		{"cut in the base's size", cont(3), 0, 0, false},
		{"cut in the target's size", []byte{4, 0x81}, 0, 0, false},
		{"no target's size", []byte{4}, 0, 0, false},
		{"empty", nil, 0, 0, false},
	} {
		src, target, ok := DeltaSizes(tc.delta)
		if ok != tc.ok || ok && (src != tc.src || target != tc.target) {
			t.Errorf("%s: DeltaSizes(% x) = %d, %d, %v; want %d, %d, %v", tc.name, tc.delta, src, target, ok, tc.src, tc.target, tc.ok)
		}
	}
}

// TestFormatMessageChangesOnlyWhatGitWouldMisread holds that an agent's message reaches the
// commit as written but for a line git would take for a patch's divider, and that a trailer
// key is letters, digits and '-' only, each end of each range included.
func TestFormatMessageChangesOnlyWhatGitWouldMisread(t *testing.T) {
	msg := "Title\n\n\tindented\n  two spaces\n---x stays\n--- becomes\n---\n----\nend"
	got, err := FormatMessage(msg, nil)
	want := "Title\n\n\tindented\n  two spaces\n---x stays\n ---  becomes\n ---\n----\nend\n"
	want = strings.Replace(want, " ---  becomes", " --- becomes", 1)
	if err != nil || got != want {
		t.Errorf("FormatMessage(%q) = %q, %v; want %q", msg, got, err, want)
	}
	for _, key := range []string{"Ag-09", "AZ", "az", "a-z-0-9", "0", "9", "A", "Z", "a", "z", "-"} {
		if _, err := FormatMessage("m", []Trailer{{Key: key, Value: "v"}}); err != nil {
			t.Errorf("trailer key %q: %v; want it taken", key, err)
		}
	}
	for _, key := range []string{"/", ":", "@", "[", "`", "{", "a b", "Ag_X", "é"} {
		if _, err := FormatMessage("m", []Trailer{{Key: key, Value: "v"}}); err == nil {
			t.Errorf("trailer key %q taken; want it refused", key)
		}
	}
}

// TestAPackCacheRemovesOnlyWhatACrashLeftAnHourAgo holds that opening the cache removes a pack
// a crash left half written an hour ago, and no other file: a pack being written now, by
// another process of the same cache, is kept.
func TestAPackCacheRemovesOnlyWhatACrashLeftAnHourAgo(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, age time.Duration) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("PACK"), 0o600); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := write("new-1.pack", time.Hour+time.Minute)
	fresh := write("new-2.pack", time.Hour-time.Minute)
	kept := write("abc.pack", 48*time.Hour)
	if _, err := NewPackCache(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("%s, written by a crash over an hour ago, is still there (%v)", stale, err)
	}
	for _, p := range []string{fresh, kept} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
}

// TestACachedPackIsReadOnlyAsTheFileItsDescriptionSays holds the checks of a cache file before
// its checksum is: the description at its end within its bound, a pack of at least a header
// and a checksum, and a header of git's version 2 counting the objects the description says.
// Each part wrong alone is refused; each bound met exactly is taken.
func TestACachedPackIsReadOnlyAsTheFileItsDescriptionSays(t *testing.T) {
	file := func(magic string, version, count uint32, checksum int, meta string) string {
		var b []byte
		b = append(b, magic...)
		b = binary.BigEndian.AppendUint32(b, version)
		b = binary.BigEndian.AppendUint32(b, count)
		b = append(b, make([]byte, checksum)...)
		b = append(b, meta...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(meta)))
		b = append(b, packCacheMagic...)
		p := filepath.Join(t.TempDir(), "x.pack")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	read := func(p string) (*cachedPack, error) {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		cp, err := readCachedPack(f, p)
		if err != nil {
			f.Close()
			return nil, err
		}
		t.Cleanup(cp.close)
		return cp, nil
	}
	meta := `{"tips":[],"objects":3}`
	// A description of 1 MiB exactly, the most it may be: JSON allows the spaces.
	largest := meta + strings.Repeat(" ", 1<<20-len(meta))
	for _, tc := range []struct {
		name  string
		path  string
		bytes int64 // 0: refused
	}{
		{"a whole file", file("PACK", 2, 3, 20, meta), 32},
		{"a pack of more bytes", file("PACK", 2, 3, 21, meta), 33},
		{"a description of 1 MiB", file("PACK", 2, 3, 20, largest), 32},
		{"a description of 1 MiB and a byte", file("PACK", 2, 3, 20, largest+" "), 0},
		{"a pack of 31 bytes", file("PACK", 2, 3, 19, meta), 0},
		{"another magic", file("PACX", 2, 3, 20, meta), 0},
		{"another version", file("PACK", 3, 3, 20, meta), 0},
		{"another count", file("PACK", 2, 4, 20, meta), 0},
		{"a description that is no JSON", file("PACK", 2, 3, 20, "{"+meta), 0},
	} {
		cp, err := read(tc.path)
		switch {
		case tc.bytes == 0 && err == nil:
			t.Errorf("%s: read as a cached pack of %d bytes; want it refused", tc.name, cp.bytes)
		case tc.bytes != 0 && err != nil:
			t.Errorf("%s: %v; want it read", tc.name, err)
		case tc.bytes != 0 && (cp.bytes != tc.bytes || cp.meta.Objects != 3):
			t.Errorf("%s: read as %d bytes and %d objects, want %d and 3", tc.name, cp.bytes, cp.meta.Objects, tc.bytes)
		}
	}
}
