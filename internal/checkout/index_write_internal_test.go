package checkout

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/repo"
)

// When a scan writes the index anew: only when the next scan gains by it, as an index of a
// large checkout is megabytes to write. These hold each reason alone, and that nothing else
// makes a scan write.

// stateContents answers the regular files of the checkout's .ag, by name, with their contents:
// a scan that wrote the index changed one of them.
func stateContents(t *testing.T, root string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, StateDir))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, StateDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = string(b)
	}
	return files
}

// writeFileAt writes content to the file at path, its mtime set to mtime: a file edited when
// the test says, before a scan or within its racy window.
func writeFileAt(t *testing.T, path, content string, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// indexWrites follows the .ag of co: each check says whether the scan since the last check
// wrote it, and what edits the scan found.
type indexWrites struct {
	t      *testing.T
	co     *Checkout
	before map[string]string
}

func followIndexWrites(t *testing.T, co *Checkout) *indexWrites {
	return &indexWrites{t: t, co: co, before: stateContents(t, co.root)}
}

func (w *indexWrites) scan(name string, wantWrite bool, wantEdits ...string) {
	w.t.Helper()
	edits, _ := editsOf(w.t, w.co)
	after := stateContents(w.t, w.co.root)
	if wrote := !maps.Equal(w.before, after); wrote != wantWrite {
		w.t.Errorf("%s: the scan wrote the index: %v, want %v", name, wrote, wantWrite)
	}
	if !slices.Equal(edits, append([]string{}, wantEdits...)) {
		w.t.Errorf("%s: edits %q, want %q", name, edits, wantEdits)
	}
	w.before = after
}

// TestAScanWritesTheIndexOnlyWhenTheNextScanGainsByIt holds that a scan writes the index when
// it hashed a file the next scan may then trust, or found a file gone that the index knew the
// content of; and not when nothing changed, nor when every file it hashed was written too
// recently to be trusted (the next scan hashes it again whatever the index says).
func TestAScanWritesTheIndexOnlyWhenTheNextScanGainsByIt(t *testing.T) {
	t.Parallel()
	co := statTestCheckout(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"})
	path := func(p string) string { return filepath.Join(co.root, filepath.FromSlash(p)) }
	edit := func(p, content string, mtime time.Time) {
		t.Helper()
		writeFileAt(t, path(p), content, mtime)
	}
	w := followIndexWrites(t, co)
	w.scan("the first scan, which hashes every file", true)
	w.scan("nothing changed", false)

	// An mtime an hour ahead is within the racy window of every scan until then.
	edit("a.txt", "A\n", time.Now().Add(time.Hour))
	w.scan("a file written too recently to be trusted", false, "modified a.txt")
	edit("b.txt", "bb\n", time.Now().Add(-time.Hour))
	w.scan("a file edited long ago", true, "modified a.txt", "modified b.txt")
	w.scan("nothing changed since", false, "modified a.txt", "modified b.txt")
	if err := os.Remove(path("c.txt")); err != nil {
		t.Fatal(err)
	}
	w.scan("a file the index knew removed", true, "modified a.txt", "modified b.txt", "deleted c.txt")
	w.scan("nothing changed since the removal", false, "modified a.txt", "modified b.txt", "deleted c.txt")
}

// serveAnswers serves root's watcher socket as a watcher would, answering each scan with the
// next answer sent on the channel.
func serveAnswers(t *testing.T, root string) chan<- WatchAnswer {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(root, WatchSocket))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	answers := make(chan WatchAnswer, 1)
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			var req WatchRequest
			if json.NewDecoder(conn).Decode(&req) == nil {
				_ = json.NewEncoder(conn).Encode(<-answers)
			}
			conn.Close()
		}
	}()
	return answers
}

// TestAScanWritesTheWatchersTokenOnlyWhenItSavesTheNextScanMuch holds that a scan through a
// watcher writes the index for the watcher's token alone when the token is of another run of
// the watcher, or more than 256 changes on from the index's: else the next scan is told a few
// paths again, which costs less than writing the index.
func TestAScanWritesTheWatchersTokenOnlyWhenItSavesTheNextScanMuch(t *testing.T) {
	t.Parallel()
	co := statTestCheckout(t, map[string]string{"a.txt": "a\n", "src/b.txt": "b\n"})
	editsOf(t, co) // hashes every file once, and writes the index
	answers := serveAnswers(t, co.root)
	w := followIndexWrites(t, co)
	for _, step := range []struct {
		name   string
		answer WatchAnswer
		write  bool
	}{
		{"a first token", WatchAnswer{Now: WatchToken{Session: "s1", Seq: 5}, Full: true}, true},
		{"the same token", WatchAnswer{Now: WatchToken{Session: "s1", Seq: 5}}, false},
		{"256 changes on", WatchAnswer{Now: WatchToken{Session: "s1", Seq: 5 + 256}}, false},
		{"257 changes on", WatchAnswer{Now: WatchToken{Session: "s1", Seq: 5 + 257}}, true},
		{"another run of the watcher, one change on", WatchAnswer{Now: WatchToken{Session: "s2", Seq: 1}}, true},
		{"one change on in that run", WatchAnswer{Now: WatchToken{Session: "s2", Seq: 2}}, false},
	} {
		answers <- step.answer
		w.scan(step.name, step.write)
	}
	_, x := indexAsRead(t, co.root)
	if want := (WatchToken{Session: "s2", Seq: 1}); x.watch != want {
		t.Errorf("the index's token: %+v; want the last one written, %+v", x.watch, want)
	}
}

// TestThePathTableIsTheSmallestThatKeepsHalfItsSlotsFree holds the lookup table's size, its
// memory at a large checkout's 100,000 paths: the smallest power of two of at least 8 slots
// and twice the entries, so that a probe finds a free slot soon; and that it finds each entry.
func TestThePathTableIsTheSmallestThatKeepsHalfItsSlotsFree(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ entries, slots int }{{0, 8}, {1, 8}, {4, 8}, {5, 16}, {8, 16}, {9, 32}, {100, 256}, {128, 256}, {129, 512}} {
		x := &index{}
		for i := range c.entries {
			x.entries = append(x.entries, indexEntry{path: fmt.Sprintf("f%04d", i)})
		}
		table := newPathTable(x)
		if len(table.slots) != c.slots {
			t.Errorf("%d entries: %d slots, want %d", c.entries, len(table.slots), c.slots)
		}
		for i, e := range x.entries {
			if at, ok := table.find([]byte(e.path)); !ok || at != i {
				t.Errorf("%d entries: %s found at %d, %v; want %d", c.entries, e.path, at, ok, i)
			}
		}
		if _, ok := table.find([]byte("missing")); ok {
			t.Errorf("%d entries: a path of none was found", c.entries)
		}
	}
}

// TestAScanReadsEverythingUnderAPathTheWatcherNames holds that when a watcher names a path, the
// scan looks at every file the index knows under it, and at every file now under it: a
// directory removed whole or replaced by a file or a link (whose files are then gone, the link
// not followed), and one made or moved in with files the index never knew. inotify names each
// file `rm -r` removes, but a watcher need not (git's fsmonitor protocol names directories), so
// the watcher is played here by a server that names only the directory.
func TestAScanReadsEverythingUnderAPathTheWatcherNames(t *testing.T) {
	t.Parallel()
	co := statTestCheckout(t, map[string]string{
		"d/a.txt": "a\n", "d/sub/b.txt": "b\n", "d.txt": "d\n", "d0/c.txt": "c\n",
		"e/a.txt": "ea\n", "e/sub/b.txt": "eb\n", "f/x.txt": "x\n", "g/x.txt": "gx\n",
	})
	editsOf(t, co)
	answers := serveAnswers(t, co.root)
	path := func(p string) string { return filepath.Join(co.root, filepath.FromSlash(p)) }
	seq := uint64(0)
	var want []string
	step := func(name string, named []string, edits []string, change func()) {
		t.Helper()
		change()
		seq++
		answers <- WatchAnswer{Now: WatchToken{Session: "s1", Seq: seq}, Paths: named}
		// Not scanEdits: its read of every file takes regular files only, not the link below.
		got, s, _ := scanAsACommand(t, co)
		want = append(want, edits...)
		sortEditLines(want)
		if !s.watched || !slices.Equal(got, want) {
			t.Errorf("%s: edits %q (through the watcher: %v), want %q through the watcher", name, got, s.watched, want)
		}
	}
	step("nothing named", nil, nil, func() {})
	step("a directory removed whole", []string{"d"}, []string{"deleted d/a.txt", "deleted d/sub/b.txt"}, func() {
		if err := os.RemoveAll(path("d")); err != nil {
			t.Fatal(err)
		}
	})
	step("a directory replaced by a file", []string{"e"}, []string{"added e", "deleted e/a.txt", "deleted e/sub/b.txt"}, func() {
		if err := os.RemoveAll(path("e")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path("e"), []byte("now a file\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	// os.Root follows a link within the checkout: were f/x.txt looked up, g/x.txt would answer.
	step("a directory replaced by a link to another", []string{"f"}, []string{"added f", "deleted f/x.txt"}, func() {
		if err := os.RemoveAll(path("f")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("g", path("f")); err != nil {
			t.Fatal(err)
		}
	})
	step("a directory moved in with files", []string{"h"}, []string{"added h/new.txt", "added h/deep/er.txt"}, func() {
		if err := os.MkdirAll(path("h/deep"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"h/new.txt", "h/deep/er.txt"} {
			if err := os.WriteFile(path(p), []byte(p), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestAnIndexRecordedFromOneWithoutAWindowHasOne holds that the index a scan leaves always has
// a racy window, also when the index it started from had none (one the MCP server built from a
// new base without reading it back): with none, the next scan would trust a file written in the
// very moment the scan stat'ed it, and miss an edit made in the same moment after.
func TestAnIndexRecordedFromOneWithoutAWindowHasOne(t *testing.T) {
	t.Parallel()
	start := time.Now().UnixNano()
	x := &index{stamp: start - int64(time.Hour), entries: []indexEntry{{path: "a.txt", inBase: true}}}
	s := newScan(x)
	racy := fileStat{size: 2, mtime: start - int64(racyWindow)/2}
	s.found[0] = rehashed
	s.hash = []toHash{{path: "a.txt", entry: 0, stat: racy}}
	s.contents = []localFile{{digest: repo.Digest([]byte("a\n")), size: 2}}
	next := s.recorded(start)
	if next.window != racyWindow {
		t.Errorf("the next index's window is %v, want %v", next.window, racyWindow)
	}
	if _, ok := next.trusted(&next.entries[0], racy); ok {
		t.Errorf("a file written %v before the scan is trusted by the index it left", racyWindow/2)
	}
}

// TestAHashIsSettledOnlyAWindowBeforeTheScan holds when a file a scan hashed is one the next
// scan may trust (and so worth writing the index for): its mtime a whole racy window before
// the scan began, the index's own window (100 ms where the index file's mtime is fine), or two
// seconds where the index has none. A file written later, or after the scan began, is hashed
// again by every scan until one begins a window after it.
func TestAHashIsSettledOnlyAWindowBeforeTheScan(t *testing.T) {
	t.Parallel()
	start := time.Now().UnixNano()
	for _, c := range []struct {
		name    string
		window  time.Duration // the index's
		mtime   int64
		settled bool
	}{
		{"a fine window and a breath more before", fineRacyWindow, start - int64(fineRacyWindow) - 1, true},
		{"a fine window before", fineRacyWindow, start - int64(fineRacyWindow), false},
		{"a breath less than a fine window before", fineRacyWindow, start - int64(fineRacyWindow) + 1, false},
		{"half a fine window after", fineRacyWindow, start + int64(fineRacyWindow)/2, false},
		{"no window, two seconds and a breath before", 0, start - int64(racyWindow) - 1, true},
		{"no window, two seconds before", 0, start - int64(racyWindow), false},
		{"no window, a fine window and a breath before", 0, start - int64(fineRacyWindow) - 1, false},
		{"no window, a second after", 0, start + int64(time.Second), false},
	} {
		s := &scan{x: &index{window: c.window}, hash: []toHash{{path: "a.txt", entry: -1, stat: fileStat{size: 2, mtime: c.mtime}}}}
		if got := s.settledHashes(start); got != c.settled {
			t.Errorf("%s: settled %v, want %v", c.name, got, c.settled)
		}
	}
}

// TestAScanLeavesWhatItHashedToTheNextInTheSameProcess holds that a checkout scanned twice by
// one process (the MCP server, between an agent's calls) hashes a file edited long ago once:
// the index the first scan wrote is the one the second reads.
func TestAScanLeavesWhatItHashedToTheNextInTheSameProcess(t *testing.T) {
	t.Parallel()
	co := statTestCheckout(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	writeFileAt(t, filepath.Join(co.root, "b.txt"), "bb\n", time.Now().Add(-time.Hour))
	co, err := Find(co.root)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{2, 0} {
		s, err := co.scan()
		if err != nil {
			t.Fatal(err)
		}
		if len(s.hash) != want {
			t.Errorf("scan %d hashed %d files, want %d", i+1, len(s.hash), want)
		}
	}
}

// TestAScanWritesANewBaseWhenItHashed holds that a scan of a checkout given a new base it has
// not saved yet (a sync moving it, between its writes) writes the new base, with its index
// whole and checkout.json naming it, when the scan hashed a file, even one too recent to be
// trusted: what the scan learned is of the new base, and the old index is not its place. When
// it hashed nothing, it writes nothing: the next scan gains nothing by it, and the sync saves
// the base.
func TestAScanWritesANewBaseWhenItHashed(t *testing.T) {
	t.Parallel()
	co := statTestCheckout(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	editsOf(t, co) // hashes every file once, and writes the index
	co, err := Find(co.root)
	if err != nil {
		t.Fatal(err)
	}
	scanned := func(name string, wantHashed int, wantWrite bool, wantBase string) {
		t.Helper()
		before := stateContents(t, co.root)
		s, err := co.scan()
		if err != nil {
			t.Fatal(err)
		}
		if len(s.hash) != wantHashed {
			t.Errorf("%s: the scan hashed %d files, want %d", name, len(s.hash), wantHashed)
		}
		if wrote := !maps.Equal(before, stateContents(t, co.root)); wrote != wantWrite {
			t.Errorf("%s: the scan wrote the checkout's state: %v, want %v", name, wrote, wantWrite)
		}
		if saved, _ := indexAsRead(t, co.root); saved.BaseRevision != wantBase {
			t.Errorf("%s: the saved state's base is %s, want %s", name, saved.BaseRevision, wantBase)
		}
	}
	scanned("the index read", 0, false, "rev_1")
	co.SetBase("rev_2", regularFiles(map[string]string{"a.txt": repo.Digest([]byte("a\n")), "b.txt": repo.Digest([]byte("b\n"))}))
	scanned("a new base of the same files", 0, false, "rev_1")

	// b.txt is edited an hour ahead: within the racy window of every scan until then.
	writeFileAt(t, filepath.Join(co.root, "b.txt"), "B\n", time.Now().Add(time.Hour))
	co.SetBase("rev_3", regularFiles(map[string]string{"a.txt": repo.Digest([]byte("a\n")), "b.txt": repo.Digest([]byte("B\n"))}))
	scanned("a new base, a file of it hashed", 1, true, "rev_3")
	if edits, _ := editsOf(t, co); len(edits) != 0 {
		t.Errorf("after the new base was written: edits %q, want none", edits)
	}
}
