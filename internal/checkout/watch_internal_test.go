package checkout

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/testutil/syncbuf"
)

// startTestWatch runs `ag watch` on the checkout at root until the test ends, and answers once
// it answers.
func startTestWatch(t *testing.T, root string) (stop func(), log *syncbuf.Buffer) {
	t.Helper()
	log = &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunWatch(ctx, log, root, 0) }()
	stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ag watch: %v", err)
		}
	}
	// Waiting for a server to come up, not timing anything.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(30 * time.Second); ; <-tick.C {
		if _, ok := AskWatcher(root, WatchToken{}); ok {
			return stop, log
		}
		select {
		case err := <-done:
			t.Fatalf("ag watch exited: %v\n%s", err, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("ag watch did not answer\n%s", log)
		}
	}
}

// watchedEditsOf is editsOf, and whether the scan took the watcher's word.
func watchedEditsOf(t *testing.T, co *Checkout) ([]string, bool) {
	t.Helper()
	edits, s := scanEdits(t, co)
	return edits, s.watched
}

// TestWatcherTellsEveryEdit ensures that with `ag watch` running a scan takes the watcher's
// word for what did not change, and still finds every edit a full read finds (editsOf compares
// the two): a same-size edit with its mtime put back, a file in a new directory, a deletion, a
// whole directory removed, a directory renamed, a touch without a change; and that without the
// watcher (stopped, or restarted) a scan reads everything again, rightly.
func TestWatcherTellsEveryEdit(t *testing.T) {
	if !WatchSupported {
		t.Skip("ag watch is Linux's only")
	}
	t.Parallel()
	files := map[string]string{}
	for i := range 40 {
		files[fmt.Sprintf("d%d/f%d.txt", i%4, i)] = fmt.Sprintf("file %02d\n", i)
	}
	files["d0/sub/s.txt"] = "s\n"
	co := statTestCheckout(t, files)
	path := func(p string) string { return filepath.Join(co.root, filepath.FromSlash(p)) }
	stop, log := startTestWatch(t, co.root)

	// The first scan reads everything and records the watcher's token; the next takes its word.
	if edits, watched := watchedEditsOf(t, co); len(edits) != 0 || watched {
		t.Fatalf("first scan with the watcher: edits %q, watched %v; want none, read in full", edits, watched)
	}
	if edits, watched := watchedEditsOf(t, co); len(edits) != 0 || !watched {
		t.Fatalf("second scan with the watcher: edits %q, watched %v; want none, through the watcher", edits, watched)
	}
	step := func(name string, want []string, change func()) {
		t.Helper()
		change()
		edits, watched := watchedEditsOf(t, co)
		if !slices.Equal(edits, want) || !watched {
			t.Errorf("%s: edits %q (watched %v), want %q through the watcher\n%s", name, edits, watched, want, log)
		}
	}
	sortEdits := func(edits []string) []string {
		slices.SortFunc(edits, func(a, b string) int {
			_, pa, _ := strings.Cut(a, " ")
			_, pb, _ := strings.Cut(b, " ")
			return strings.Compare(pa, pb)
		})
		return edits
	}
	var want []string
	step("a same-size edit, mtime put back", append(want, "modified d1/f1.txt"), func() {
		info, err := os.Stat(path("d1/f1.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path("d1/f1.txt"), []byte("file XX\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path("d1/f1.txt"), info.ModTime(), info.ModTime()); err != nil {
			t.Fatal(err)
		}
	})
	want = append(want, "modified d1/f1.txt")
	step("a file in a new directory", sortEdits(append(slices.Clone(want), "added new/deep/n.txt")), func() {
		if err := os.MkdirAll(path("new/deep"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path("new/deep/n.txt"), []byte("new\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	want = sortEdits(append(want, "added new/deep/n.txt"))
	step("a touch without a change", want, func() {
		now := time.Now()
		if err := os.Chtimes(path("d2/f2.txt"), now, now); err != nil {
			t.Fatal(err)
		}
	})
	step("a deletion", sortEdits(append(slices.Clone(want), "deleted d2/f6.txt")), func() {
		if err := os.Remove(path("d2/f6.txt")); err != nil {
			t.Fatal(err)
		}
	})
	want = sortEdits(append(want, "deleted d2/f6.txt"))
	var goneD3, movedD0 []string
	for i := range 40 {
		switch i % 4 {
		case 3:
			goneD3 = append(goneD3, fmt.Sprintf("deleted d3/f%d.txt", i))
		case 0:
			movedD0 = append(movedD0, fmt.Sprintf("deleted d0/f%d.txt", i), fmt.Sprintf("added e0/f%d.txt", i))
		}
	}
	movedD0 = append(movedD0, "deleted d0/sub/s.txt", "added e0/sub/s.txt")
	want = sortEdits(append(want, goneD3...))
	step("a directory removed", want, func() {
		if err := os.RemoveAll(path("d3")); err != nil {
			t.Fatal(err)
		}
	})
	// A directory renamed, with a directory under it: the watcher watches everything anew, and
	// the next scan reads everything; then an edit under the moved subdirectory is seen.
	want = sortEdits(append(want, movedD0...))
	if err := os.Rename(path("d0"), path("e0")); err != nil {
		t.Fatal(err)
	}
	if edits, watched := watchedEditsOf(t, co); !slices.Equal(edits, want) || watched {
		t.Errorf("a directory renamed: edits %q (watched %v), want %q read in full", edits, watched, want)
	}
	want = sortEdits(append(slices.DeleteFunc(want, func(e string) bool { return e == "added e0/sub/s.txt" }), "added e0/sub/s.txt"))
	step("an edit under the renamed directory's subdirectory", want, func() {
		if err := os.WriteFile(path("e0/sub/s.txt"), []byte("s, edited\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if err := os.WriteFile(path("e0/sub/s2.txt"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want = sortEdits(append(want, "added e0/sub/s2.txt"))
	if edits, watched := watchedEditsOf(t, co); !slices.Equal(edits, want) || !watched {
		t.Errorf("a file added under the renamed directory's subdirectory: edits %q (watched %v), want %q through the watcher", edits, watched, want)
	}

	stop()
	if _, err := os.Lstat(path(WatchSocket)); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after the watcher stopped: %v", err)
	}
	if edits, watched := watchedEditsOf(t, co); !slices.Equal(edits, want) || watched {
		t.Errorf("without the watcher: edits %q (watched %v), want %q read in full", edits, watched, want)
	}
	// Another run of the watcher knows nothing of the index's token: the first scan reads in
	// full, the next takes its word.
	stop, _ = startTestWatch(t, co.root)
	defer stop()
	if edits, _ := watchedEditsOf(t, co); !slices.Equal(edits, want) {
		t.Errorf("with a new watcher: edits %q, want %q", edits, want)
	}
	if err := os.WriteFile(path("d1/f5.txt"), []byte("changed again\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want = sortEdits(append(want, "modified d1/f5.txt"))
	if edits, watched := watchedEditsOf(t, co); !slices.Equal(edits, want) || !watched {
		t.Errorf("with a new watcher, after an edit: edits %q (watched %v), want %q through the watcher", edits, watched, want)
	}
}

// TestABrokenWatcherCannotTell ensures a watcher that failed to watch a directory answers that
// it cannot tell, whatever token a scan brings, so that the scan reads every file.
func TestABrokenWatcherCannotTell(t *testing.T) {
	if !WatchSupported {
		t.Skip("ag watch is Linux's only")
	}
	t.Parallel()
	co := statTestCheckout(t, map[string]string{"a.txt": "a\n"})
	w, err := newWatcher(co.root, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer w.fw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.run(ctx)
	now := w.since(WatchToken{}).Now
	if ans := w.since(now); ans.Full {
		t.Fatalf("a working watcher, asked with its own token: %+v, want an answer", ans)
	}
	w.fail(errors.New("watch d: no space left on device"))
	now = w.since(WatchToken{}).Now
	if ans := w.since(now); !ans.Full {
		t.Errorf("a broken watcher, asked with its own token: %+v, want it to say it cannot tell", ans)
	}
}
