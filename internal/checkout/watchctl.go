package checkout

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// WatchLog is where a watcher started by StartWatcher writes, under the checkout's root.
const WatchLog = StateDir + "/watch.log"

// StartWatcher starts this program again with args (its `watch` of the checkout at root)
// detached from the caller's session, so that it outlives the terminal, its output appended to
// WatchLog; and returns once the watcher answers, with its pid, or 0 when a watcher already
// answered and nothing was started. Waiting for the answer is what lets the caller say it
// watches, rather than that it may.
func StartWatcher(root string, args ...string) (int, error) {
	if _, ok := AskWatcher(root, WatchToken{}); ok {
		return 0, nil
	}
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	// Through the checkout's os.Root: a symbolic link planted as the log must not make ag
	// append to a file elsewhere.
	checkoutRoot, err := os.OpenRoot(root)
	if err != nil {
		return 0, err
	}
	logFile, err := checkoutRoot.OpenFile(filepath.FromSlash(WatchLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	checkoutRoot.Close()
	if err != nil {
		return 0, err
	}
	defer logFile.Close()
	c := exec.Command(self, args...)
	c.Stdout, c.Stderr = logFile, logFile
	detach(c)
	if err := c.Start(); err != nil {
		return 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	deadline := time.After(60 * time.Second)
	for {
		if _, ok := AskWatcher(root, WatchToken{}); ok {
			return c.Process.Pid, nil
		}
		select {
		case err := <-exited:
			return 0, fmt.Errorf("ag watch exited before it answered (%v): see %s", err, filepath.Join(root, WatchLog))
		case <-deadline:
			return 0, fmt.Errorf("ag watch did not answer within a minute: see %s", filepath.Join(root, WatchLog))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StopWatcher asks the watcher of the checkout at root to stop, and reports whether one
// answered: none listening is no error, since stopping is then already done.
func StopWatcher(root string) (bool, error) {
	conn, err := net.DialTimeout("unix", filepath.Join(root, WatchSocket), time.Second)
	if err != nil {
		return false, nil
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := json.NewEncoder(conn).Encode(WatchRequest{Stop: true}); err != nil {
		return true, err
	}
	var ans WatchAnswer
	if err := json.NewDecoder(conn).Decode(&ans); err != nil {
		return true, fmt.Errorf("the watcher did not answer: %w", err)
	}
	return true, nil
}
