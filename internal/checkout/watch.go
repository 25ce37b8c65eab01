package checkout

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/ag-coord/ag/internal/termsafe"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/ag-coord/ag/internal/repo"
)

// A checkout's watcher (`ag watch`) is what lets a scan of a large checkout stat only what
// changed, as git's fsmonitor does: it watches every directory of the checkout with inotify and
// answers, over a socket in .ag, the paths that changed since a token the checkout's index
// records. Without a watcher, or when it cannot say (it started after the index was written,
// its event queue overflowed, the token is another run's), a scan stats every file.
//
// Before it answers, the watcher creates a file in .ag and waits for the event of that file:
// every event of a change made before the question was asked has then been read (git's
// fsmonitor calls these cookies). What inotify does not see it cannot tell: a write through a
// memory mapping, a change through a hard link from outside the checkout, a network file
// system's changes made on another machine. docs/cli.md says so.

// WatchSocket is where a checkout's watcher listens, under its root.
const WatchSocket = StateDir + "/watch.sock"

// watchCookiePrefix begins the names of the watcher's cookie files in .ag.
const watchCookiePrefix = "watch-cookie-"

// maxWatchChanged bounds the paths a watcher remembers: beyond it, it starts a new session,
// and the scans that ask it read everything once.
const maxWatchChanged = 200000

// WatchToken names a point in a watcher's history: the run (session) and how many changes it
// had seen.
type WatchToken struct {
	Session string `json:"session"`
	Seq     uint64 `json:"seq"`
}

// WatchRequest is what a scan (or `ag watch --stop`) asks a watcher.
type WatchRequest struct {
	Since WatchToken `json:"since"`
	Stop  bool       `json:"stop,omitempty"`
}

// WatchAnswer is a watcher's answer to "what changed since": with Full, it cannot tell (the
// token is of another session), and the scan reads everything.
type WatchAnswer struct {
	Now   WatchToken `json:"now"`
	Full  bool       `json:"full,omitempty"`
	Paths []string   `json:"paths,omitempty"` // repository paths of files or directories that changed
}

// watcher is a running `ag watch`.
type watcher struct {
	root   string // absolute
	fw     *fsnotify.Watcher
	logf   func(format string, args ...any)
	socket os.FileInfo        // the socket file it made, to notice it being replaced or the checkout moved
	stop   context.CancelFunc // ends the watch, set by runWatch
	// dirs are the directories watched, by path: written before run starts and by run alone.
	dirs map[string]bool

	mu      sync.Mutex
	session string
	seq     uint64
	changed map[string]uint64 // path → seq of its last change
	cookies map[string]chan struct{}
	cookieN uint64
	lastAsk time.Time
	// broken is set when a directory could not be watched: from then on the watcher answers
	// that it cannot tell, until it is restarted.
	broken bool
}

// newWatcher watches every directory of the checkout at root, skipping what no repository may
// hold, and .ag itself for its cookies.
func newWatcher(root string, logf func(string, ...any)) (*watcher, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &watcher{root: root, fw: fw, logf: logf, dirs: map[string]bool{}, changed: map[string]uint64{}, cookies: map[string]chan struct{}{}, lastAsk: time.Now()}
	w.newSession()
	if err := fw.Add(filepath.Join(root, StateDir)); err != nil {
		fw.Close()
		return nil, fmt.Errorf("watch %s: %w", StateDir, err)
	}
	if err := w.watchTree(""); err != nil {
		fw.Close()
		return nil, err
	}
	return w, nil
}

func (w *watcher) newSession() {
	w.session = rand.Text()[:16]
	w.seq = 0
	clear(w.changed)
}

// watchTree adds a watch on the directory at rel ("" for the root) and every directory under
// it. Files made in a new directory before its watch was added are not lost: a scan reads
// every file under a directory the watcher names.
func (w *watcher) watchTree(rel string) error {
	return filepath.WalkDir(filepath.Join(w.root, filepath.FromSlash(rel)), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // gone meanwhile: its removal is an event of its parent
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if _, reserved := repo.ReservedSegment(d.Name()); reserved && path != w.root {
			return fs.SkipDir
		}
		if err := w.fw.Add(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fs.SkipDir
			}
			return fmt.Errorf("watch %s: %w (on Linux, fs.inotify.max_user_watches bounds the directories one user can watch)", path, err)
		}
		w.dirs[path] = true
		return nil
	})
}

// rewatch drops every watch and watches the whole checkout again, in a new session. A watch
// follows its directory's inode, and fsnotify keeps the path it was given: after a directory
// with subdirectories is renamed, their events would come under the old names. Renaming a
// directory is rare enough for the next scan to read everything.
func (w *watcher) rewatch() {
	for path := range w.dirs {
		_ = w.fw.Remove(path)
	}
	clear(w.dirs)
	w.mu.Lock()
	w.newSession()
	w.mu.Unlock()
	if err := w.watchTree(""); err != nil {
		w.fail(err)
	}
}

// fail gives up telling what changed: a directory that could not be watched would hide its
// changes.
func (w *watcher) fail(err error) {
	w.logf("%v: scans read every file until ag watch is restarted", err)
	w.mu.Lock()
	w.broken = true
	w.newSession()
	w.mu.Unlock()
}

// run reads the file system's events until ctx ends.
func (w *watcher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fw.Events:
			if !ok {
				return
			}
			w.event(ev)
		case err, ok := <-w.fw.Errors:
			if !ok {
				return
			}
			w.mu.Lock()
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.logf("the event queue overflowed: scans read every file once")
			} else {
				w.logf("watch: %v: scans read every file once", err)
			}
			w.newSession()
			w.mu.Unlock()
		}
	}
}

func (w *watcher) event(ev fsnotify.Event) {
	rel, err := filepath.Rel(w.root, ev.Name)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return
	}
	rel = filepath.ToSlash(rel)
	if name, ok := strings.CutPrefix(rel, StateDir+"/"); ok {
		if strings.HasPrefix(name, watchCookiePrefix) && ev.Has(fsnotify.Create) {
			w.mu.Lock()
			if ch, ok := w.cookies[name]; ok {
				close(ch)
				delete(w.cookies, name)
			}
			w.mu.Unlock()
		}
		return
	}
	for seg := range strings.SplitSeq(rel, "/") {
		if _, reserved := repo.ReservedSegment(seg); reserved {
			return
		}
	}
	if (ev.Has(fsnotify.Rename) || ev.Has(fsnotify.Remove)) && w.dirs[ev.Name] {
		if ev.Has(fsnotify.Rename) {
			w.logf("%s was renamed: scans read every file once", rel)
			w.rewatch()
			return
		}
		for path := range w.dirs {
			if path == ev.Name || strings.HasPrefix(path, ev.Name+string(filepath.Separator)) {
				delete(w.dirs, path) // inotify dropped its watch with it
			}
		}
	}
	if ev.Has(fsnotify.Create) {
		if info, err := os.Lstat(ev.Name); err == nil && info.IsDir() {
			if err := w.watchTree(rel); err != nil {
				w.fail(err)
				return
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	w.changed[rel] = w.seq
	if len(w.changed) > maxWatchChanged {
		w.logf("more than %d paths changed: scans read every file once", maxWatchChanged)
		w.newSession()
	}
}

// since answers what changed since token, once every event before the question is read.
func (w *watcher) since(token WatchToken) WatchAnswer {
	if err := w.sync(2 * time.Second); err != nil {
		// Events may be unread, or watches not yet back (a rewatch in progress): no token
		// is given, so that the scan reads everything and records none.
		w.logf("%v: this scan reads every file", err)
		w.mu.Lock()
		w.newSession()
		w.mu.Unlock()
		return WatchAnswer{Full: true}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastAsk = time.Now()
	ans := WatchAnswer{Now: WatchToken{Session: w.session, Seq: w.seq}}
	if w.broken || token.Session != w.session || token.Seq > w.seq {
		ans.Full = true
		return ans
	}
	for p, seq := range w.changed {
		if seq > token.Seq {
			ans.Paths = append(ans.Paths, p)
		}
	}
	sort.Strings(ans.Paths)
	return ans
}

// sync makes a cookie file and waits for its event: then every event of an earlier change
// has been read.
func (w *watcher) sync(timeout time.Duration) error {
	w.mu.Lock()
	w.cookieN++
	name := fmt.Sprintf("%s%d-%s", watchCookiePrefix, w.cookieN, w.session)
	ch := make(chan struct{})
	w.cookies[name] = ch
	w.mu.Unlock()
	path := filepath.Join(w.root, StateDir, name)
	defer os.Remove(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		w.mu.Lock()
		delete(w.cookies, name)
		w.mu.Unlock()
		return fmt.Errorf("make a cookie file: %w", err)
	}
	f.Close()
	select {
	case <-ch:
		return nil
	case <-time.After(timeout):
		w.mu.Lock()
		delete(w.cookies, name)
		w.mu.Unlock()
		return errors.New("the event of a cookie file did not come")
	}
}

// serve answers the scans that connect to l until ctx ends.
func (w *watcher) serve(ctx context.Context, l net.Listener) {
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go w.answer(conn)
	}
}

func (w *watcher) answer(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var req WatchRequest
	if err := json.NewDecoder(io.LimitReader(conn, 4096)).Decode(&req); err != nil {
		return
	}
	if req.Stop {
		w.mu.Lock()
		ans := WatchAnswer{Now: WatchToken{Session: w.session, Seq: w.seq}}
		w.mu.Unlock()
		_ = json.NewEncoder(conn).Encode(ans)
		w.stop()
		return
	}
	ans := w.since(req.Since)
	if !w.stillHere() {
		ans = WatchAnswer{Now: ans.Now, Full: true}
	}
	_ = json.NewEncoder(conn).Encode(ans)
}

// stillHere reports whether the checkout is where the watcher watches it: its socket is the
// one it made. A checkout moved elsewhere is watched under its old paths.
func (w *watcher) stillHere() bool {
	info, err := os.Lstat(filepath.Join(w.root, WatchSocket))
	return err == nil && os.SameFile(info, w.socket)
}

// idleFor answers how long no scan asked.
func (w *watcher) idleFor() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return time.Since(w.lastAsk)
}

// listenWatch makes the watcher's socket in the checkout at root, replacing one no watcher
// answers on any more.
func listenWatch(root string) (net.Listener, error) {
	path := filepath.Join(root, WatchSocket)
	if len(path) >= 108 {
		return nil, fmt.Errorf("%s is too long a path for a socket (the limit is 107 bytes): a checkout this deep cannot be watched", path)
	}
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		conn.Close()
		return nil, fmt.Errorf("a watcher already watches %s", root)
	}
	if info, err := os.Lstat(path); err == nil {
		if info.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("%s is there and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// AskWatcher asks the watcher of the checkout at root what changed since token, and answers
// false when there is none, or it does not answer within a second.
func AskWatcher(root string, token WatchToken) (WatchAnswer, bool) {
	path := filepath.Join(root, WatchSocket)
	if len(path) >= 108 {
		return WatchAnswer{}, false
	}
	if info, err := os.Lstat(path); err != nil || info.Mode()&fs.ModeSocket == 0 {
		return WatchAnswer{}, false
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return WatchAnswer{}, false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if err := json.NewEncoder(conn).Encode(WatchRequest{Since: token}); err != nil {
		return WatchAnswer{}, false
	}
	var ans WatchAnswer
	if err := json.NewDecoder(bufio.NewReader(io.LimitReader(conn, 64<<20))).Decode(&ans); err != nil || ans.Now.Session == "" {
		return WatchAnswer{}, false
	}
	for _, p := range ans.Paths {
		if repo.ValidatePath(p, false) != nil {
			return WatchAnswer{}, false
		}
	}
	return ans, true
}

// sessionBytes answers a watcher session as the index keeps it.
func sessionBytes(s string) (b [16]byte) {
	copy(b[:], s)
	return b
}

// sessionString reads a session the index kept.
func sessionString(b [16]byte) string {
	return strings.TrimRight(string(b[:]), "\x00")
}

// RunWatch watches the checkout at root until ctx ends, its checkout goes, or no scan asked for
// idle (when not 0).
func RunWatch(ctx context.Context, log io.Writer, root string, idle time.Duration) error {
	logf := func(format string, args ...any) {
		// The paths it names are the checkout's file names, whatever their author called them.
		fmt.Fprintf(log, "%s ag watch: %s\n", termsafe.Line(time.Now().Format(time.RFC3339)), termsafe.Line(fmt.Sprintf(format, args...)))
	}
	w, err := newWatcher(root, logf)
	if err != nil {
		return err
	}
	defer w.fw.Close()
	l, err := listenWatch(root)
	if err != nil {
		return err
	}
	socket := filepath.Join(root, WatchSocket)
	defer func() {
		if w.stillHere() {
			os.Remove(socket)
		}
	}()
	if w.socket, err = os.Lstat(socket); err != nil {
		l.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.stop = cancel
	go w.run(ctx)
	go w.serve(ctx, l)
	logf("watching %s; scans ask %s", root, socket)
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			logf("stopped")
			return nil
		case <-tick.C:
			if _, err := os.Stat(statePath(root)); err != nil || !w.stillHere() {
				logf("the checkout is gone or moved: stopping")
				return nil
			}
			if idle > 0 && w.idleFor() > idle {
				logf("no scan asked for %s: stopping", idle)
				return nil
			}
		}
	}
}
