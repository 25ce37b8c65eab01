package checkout

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// serveOneAnswer listens at root's watcher socket, as a watcher would, and answers the first
// request with answer.
func serveOneAnswer(t *testing.T, root string, answer any) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, StateDir), 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(root, WatchSocket))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		var req WatchRequest
		if json.NewDecoder(conn).Decode(&req) == nil {
			_ = json.NewEncoder(conn).Encode(answer)
		}
	}()
}

// TestAskWatcherTakesOnlyPathsACheckoutMayHold holds SECURITY.md's rule of the watcher's
// answer: whoever serves the socket, a path it names that no checkout may hold (out of it, in
// .git or .ag), or an answer of no session, is no answer, and the scan reads every file.
func TestAskWatcherTakesOnlyPathsACheckoutMayHold(t *testing.T) {
	t.Parallel()
	now := WatchToken{Session: "s1", Seq: 7}
	for _, tc := range []struct {
		name   string
		answer any
		ok     bool
	}{
		{"paths of the checkout", WatchAnswer{Now: now, Paths: []string{"a.txt", "src/b.go"}}, true},
		{"a full scan", WatchAnswer{Now: now, Full: true}, true},
		{"a path out of the checkout", WatchAnswer{Now: now, Paths: []string{"a.txt", "../x"}}, false},
		{"an absolute path", WatchAnswer{Now: now, Paths: []string{"/etc/passwd"}}, false},
		{"a path in .git", WatchAnswer{Now: now, Paths: []string{".git/config"}}, false},
		{"a path in .ag", WatchAnswer{Now: now, Paths: []string{".ag/checkout.json"}}, false},
		{"no session", WatchAnswer{Paths: []string{"a.txt"}}, false},
		{"no JSON", "not an answer", false},
	} {
		root := socketTempDir(t)
		serveOneAnswer(t, root, tc.answer)
		ans, ok := AskWatcher(root, WatchToken{})
		if ok != tc.ok {
			t.Errorf("%s: answered %+v, %v; want taken: %v", tc.name, ans, ok, tc.ok)
		}
		if ok && ans.Now != now {
			t.Errorf("%s: the answer's token %+v, want %+v", tc.name, ans.Now, now)
		}
	}

	// A file that is no socket is no watcher.
	root := socketTempDir(t)
	if err := os.MkdirAll(filepath.Join(root, StateDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, WatchSocket), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := AskWatcher(root, WatchToken{}); ok {
		t.Errorf("a regular file at the socket's path was asked")
	}
}

// TestAWatchersSocketIsItsOwners holds that the socket a watcher serves is its owner's alone
// (0600), that a second watcher of the same checkout is refused, and that a file standing at
// the socket's path is not removed for it.
func TestAWatchersSocketIsItsOwners(t *testing.T) {
	t.Parallel()
	root := socketTempDir(t)
	if err := os.MkdirAll(filepath.Join(root, StateDir), 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := listenWatch(root)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	info, err := os.Lstat(filepath.Join(root, WatchSocket))
	if err != nil || info.Mode()&os.ModeSocket == 0 || info.Mode().Perm() != 0o600 {
		t.Fatalf("the watcher's socket: %v, %v; want a socket of mode 0600", info.Mode(), err)
	}
	if second, err := listenWatch(root); err == nil {
		second.Close()
		t.Errorf("a second watcher of the same checkout was let listen")
	}

	other := socketTempDir(t)
	if err := os.MkdirAll(filepath.Join(other, StateDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, WatchSocket), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if l, err := listenWatch(other); err == nil {
		l.Close()
		t.Errorf("a watcher listened where a file stood")
	}
	if b, err := os.ReadFile(filepath.Join(other, WatchSocket)); err != nil || string(b) != "mine" {
		t.Errorf("the file at the socket's path: %q, %v; want it left as it was", b, err)
	}
}
