package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/ag-coord/ag/internal/checkout"
	"github.com/spf13/cobra"
)

// newWatchCmd is `ag watch`.
func newWatchCmd(g *globals) *cobra.Command {
	var (
		background, stop bool
		idle             time.Duration
	)
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "watch the checkout's files, so that status, diff and integrate stat only what changed",
		Long: `ag watch watches every directory of the checkout with inotify, until interrupted, and
answers scans over .ag/watch.sock: ag status, diff, integrate, sync and revert then stat only the
paths that changed since the last scan instead of every file. Linux only. --background starts it
detached (its log in .ag/watch.log) and returns once it answers; --stop stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			co, err := checkout.Find(g.dir)
			if err != nil {
				return err
			}
			switch {
			case stop:
				return stopWatch(g, co.Root())
			case !checkout.WatchSupported:
				return withExit(ExitUsage, errors.New("ag watch needs Linux's inotify: elsewhere a scan stats every file"))
			case background:
				return startWatch(g, co.Root(), idle)
			}
			return checkout.RunWatch(cmd.Context(), g.stderr, co.Root(), idle)
		},
	}
	cmd.Flags().BoolVar(&background, "background", false, "start the watcher detached and return once it answers")
	cmd.Flags().BoolVar(&stop, "stop", false, "stop the checkout's watcher")
	cmd.Flags().DurationVar(&idle, "idle", 0, "stop after no scan asked for this long (0: never)")
	return cmd
}

// startWatch starts `ag watch` detached on the checkout at root, and returns once it answers.
func startWatch(g *globals, root string, idle time.Duration) error {
	if _, ok := checkout.AskWatcher(root, checkout.WatchToken{}); ok {
		fmt.Fprintf(g.stdout, "a watcher already watches %s\n", root)
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// Through the checkout's os.Root: a symbolic link planted as the log must not make ag
	// append to a file elsewhere.
	checkoutRoot, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	logFile, err := checkoutRoot.OpenFile(filepath.Join(checkout.StateDir, "watch.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	checkoutRoot.Close()
	if err != nil {
		return err
	}
	defer logFile.Close()
	c := exec.Command(self, "watch", "-C", root, "--idle", idle.String())
	c.Stdout, c.Stderr = logFile, logFile
	detach(c)
	if err := c.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	deadline := time.After(60 * time.Second)
	for {
		if _, ok := checkout.AskWatcher(root, checkout.WatchToken{}); ok {
			fmt.Fprintf(g.stdout, "watching %s (pid %d, log in %s)\n", root, c.Process.Pid, filepath.Join(root, checkout.StateDir, "watch.log"))
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("ag watch exited before it answered (%v): see %s", err, filepath.Join(root, checkout.StateDir, "watch.log"))
		case <-deadline:
			return fmt.Errorf("ag watch did not answer within a minute: see %s", filepath.Join(root, checkout.StateDir, "watch.log"))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stopWatch stops the watcher of the checkout at root, if one runs.
func stopWatch(g *globals, root string) error {
	path := filepath.Join(root, checkout.WatchSocket)
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		fmt.Fprintf(g.stdout, "no watcher watches %s\n", root)
		return nil
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := json.NewEncoder(conn).Encode(checkout.WatchRequest{Stop: true}); err != nil {
		return err
	}
	var ans checkout.WatchAnswer
	if err := json.NewDecoder(conn).Decode(&ans); err != nil {
		return fmt.Errorf("the watcher did not answer: %w", err)
	}
	fmt.Fprintf(g.stdout, "stopped the watcher of %s\n", root)
	return nil
}
