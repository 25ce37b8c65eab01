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
		if err := os.WriteFile(path(p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path(p), mtime, mtime); err != nil {
			t.Fatal(err)
		}
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
