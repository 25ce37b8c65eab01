package checkout

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fsnotify/fsnotify"

	"github.com/ag-coord/ag/internal/testutil/syncbuf"
)

// The rules of what a watcher records, each alone. They keep a scan that takes the watcher's
// word from reading more than it must, or (worse) from missing an edit; the mutants of
// watch.go that the end-to-end TestWatcherTellsEveryEdit cannot tell apart are killed here.

// eventWatcher is a watcher of root fed events by hand, with no inotify under it: what
// event records is all there is to see.
func eventWatcher(root string, log *syncbuf.Buffer) *watcher {
	w := &watcher{root: root, dirs: map[string]bool{}, changed: map[string]uint64{}, cookies: map[string]chan struct{}{},
		logf: func(format string, args ...any) { fmt.Fprintf(log, format+"\n", args...) }}
	w.newSession()
	return w
}

// runningWatcher is a watcher of the checkout at root reading inotify's events until the test
// ends.
func runningWatcher(t *testing.T, root string) *watcher {
	t.Helper()
	if !WatchSupported {
		t.Skip("ag watch is Linux's only")
	}
	w, err := newWatcher(root, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		w.fw.Close()
	})
	return w
}

// TestAWatcherRecordsOnlyTheCheckoutsOwnPaths holds that an event of the checkout's directory
// itself, of a directory above it or beside it, or of a path in .git or .ag anywhere in it, is
// no change of a path a scan looks at; and that an event of a file of the checkout is.
func TestAWatcherRecordsOnlyTheCheckoutsOwnPaths(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "co")
	w := eventWatcher(root, &syncbuf.Buffer{})
	session := w.session
	for _, name := range []string{
		root,               // a chmod of the checkout's directory
		filepath.Dir(root), // its parent
		filepath.Join(filepath.Dir(root), "beside"),    // a directory beside it
		filepath.Join(filepath.Dir(root), "co2/a"),     // one whose name starts as the checkout's
		filepath.Join(root, ".git", "config"),          // the repository's own files
		filepath.Join(root, "sub", ".git", "HEAD"),     // a submodule's
		filepath.Join(root, "src", ".ag", "x.json"),    // a state directory lower down
		filepath.Join(root, StateDir, "checkout.json"), // the checkout's state
	} {
		w.event(fsnotify.Event{Name: name, Op: fsnotify.Chmod | fsnotify.Write})
		if len(w.changed) != 0 || w.seq != 0 {
			t.Fatalf("an event of %s recorded %v (seq %d); want nothing", name, w.changed, w.seq)
		}
	}
	w.event(fsnotify.Event{Name: filepath.Join(root, "src", "a.go"), Op: fsnotify.Write})
	if want := map[string]uint64{"src/a.go": 1}; !maps.Equal(w.changed, want) || w.session != session {
		t.Errorf("an event of src/a.go recorded %v in session %q; want %v in %q", w.changed, w.session, want, session)
	}
}

// TestAWatcherRemembersUpToItsBoundOfPaths holds that a watcher remembers maxWatchChanged
// paths, and past that starts a new session (the scans that ask it read every file once) and
// says so.
func TestAWatcherRemembersUpToItsBoundOfPaths(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	log := &syncbuf.Buffer{}
	w := eventWatcher(root, log)
	session := w.session
	for i := range maxWatchChanged - 1 {
		w.changed[fmt.Sprintf("f%d", i)] = uint64(i + 1)
	}
	w.seq = maxWatchChanged - 1
	w.event(fsnotify.Event{Name: filepath.Join(root, "last"), Op: fsnotify.Create})
	if len(w.changed) != maxWatchChanged || w.session != session || w.changed["last"] != maxWatchChanged {
		t.Fatalf("at %d paths: %d remembered, session %q (was %q), last at %d; want all, in the same session", maxWatchChanged, len(w.changed), w.session, session, w.changed["last"])
	}
	if log.String() != "" {
		t.Errorf("at its bound the watcher said %q", log)
	}
	w.event(fsnotify.Event{Name: filepath.Join(root, "one more"), Op: fsnotify.Create})
	if len(w.changed) != 0 || w.seq != 0 || w.session == session {
		t.Errorf("past its bound: %d paths remembered, seq %d, session %q (was %q); want a new session of none", len(w.changed), w.seq, w.session, session)
	}
	if want := fmt.Sprintf("more than %d paths changed", maxWatchChanged); !strings.Contains(log.String(), want) {
		t.Errorf("past its bound the watcher said %q; want %q", log, want)
	}
}

// TestARemovedDirectoryTakesTheDirectoriesUnderItOffTheWatchList holds that once a watched
// directory is removed, neither it nor a directory under it is on the watcher's list (inotify
// dropped their watches), and that a directory beside it whose name starts with its name is.
func TestARemovedDirectoryTakesTheDirectoriesUnderItOffTheWatchList(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	w := eventWatcher(root, &syncbuf.Buffer{})
	for _, d := range []string{"", "a", "a/b", "a/b/c", "ab", "z"} {
		w.dirs[filepath.Join(root, d)] = true
	}
	w.event(fsnotify.Event{Name: filepath.Join(root, "a"), Op: fsnotify.Remove})
	var left []string
	for d := range w.dirs {
		rel, _ := filepath.Rel(root, d)
		left = append(left, rel)
	}
	slices.Sort(left)
	if want := []string{".", "ab", "z"}; !slices.Equal(left, want) {
		t.Errorf("after a was removed the watcher watches %q; want %q", left, want)
	}
	if _, ok := w.changed["a"]; !ok {
		t.Errorf("the removal of a is not recorded: %v", w.changed)
	}
}

// TestAWatcherWatchesNoReservedDirectory holds that the watcher adds no watch in .git or .ag,
// at the top or lower down (it watches .ag for its cookies only, apart from the checkout's
// directories), so that git's own writes are no events.
func TestAWatcherWatchesNoReservedDirectory(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{".git/objects/ab", StateDir + "/conflicts", "src/lib", "sub/.git/refs"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.FromSlash(d)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w := runningWatcher(t, root)
	var watched []string
	for d := range w.dirs {
		rel, _ := filepath.Rel(root, d)
		watched = append(watched, filepath.ToSlash(rel))
	}
	slices.Sort(watched)
	if want := []string{".", "src", "src/lib", "sub"}; !slices.Equal(watched, want) {
		t.Errorf("the watcher watches %q; want %q", watched, want)
	}
}

// TestAWatcherNamesWhatChangedSinceTheTokenAndNothingBefore holds that an answer names the
// paths changed after the token the scan brings, not the last path the scan already saw, and
// that a file renamed is two paths changed in the same session, no directory's rename that
// would make the next scan read everything.
func TestAWatcherNamesWhatChangedSinceTheTokenAndNothingBefore(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, StateDir), 0o700); err != nil {
		t.Fatal(err)
	}
	w := runningWatcher(t, root)
	write := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, name), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.txt")
	first := w.since(WatchToken{})
	if !first.Full {
		t.Fatalf("asked with no token: %+v; want a full scan", first)
	}
	write("b.txt")
	ans := w.since(first.Now)
	if ans.Full || !slices.Equal(ans.Paths, []string{"b.txt"}) {
		t.Fatalf("after b.txt was written: %+v; want b.txt alone", ans)
	}
	if again := w.since(ans.Now); again.Full || len(again.Paths) != 0 {
		t.Errorf("asked again with nothing written: %+v; want no path", again)
	}
	if err := os.Rename(filepath.Join(root, "a.txt"), filepath.Join(root, "c.txt")); err != nil {
		t.Fatal(err)
	}
	renamed := w.since(ans.Now)
	if renamed.Full || renamed.Now.Session != ans.Now.Session || !slices.Equal(renamed.Paths, []string{"a.txt", "c.txt"}) {
		t.Errorf("after a.txt was renamed c.txt: %+v; want a.txt and c.txt in session %q", renamed, ans.Now.Session)
	}
}

// TestAWatcherKnowsItsSocketFromAnother holds that a watcher is still here only while the
// socket it made is at its path: a file put in its place (the checkout moved, another watcher
// started) is not its own.
func TestAWatcherKnowsItsSocketFromAnother(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	path := filepath.Join(root, WatchSocket)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mine, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	w := &watcher{root: root, socket: mine}
	if !w.stillHere() {
		t.Fatalf("a watcher does not know its own socket")
	}
	// Made before the first is gone, so that the two are apart.
	if err := os.WriteFile(path+".new", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	if w.stillHere() {
		t.Errorf("a watcher takes another file at its socket's path for its own")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if w.stillHere() {
		t.Errorf("a watcher whose socket is gone says it is still here")
	}
}
