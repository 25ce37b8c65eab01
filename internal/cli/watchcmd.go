package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/ag-coord/ag/internal/checkout"
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
	pid, err := checkout.StartWatcher(root, "watch", "-C", root, "--idle", idle.String())
	switch {
	case err != nil:
		return err
	case pid == 0:
		fmt.Fprintf(g.stdout, "a watcher already watches %s\n", root)
	default:
		fmt.Fprintf(g.stdout, "watching %s (pid %d, log in %s)\n", root, pid, filepath.Join(root, checkout.WatchLog))
	}
	return nil
}

// stopWatch stops the watcher of the checkout at root, if one runs.
func stopWatch(g *globals, root string) error {
	stopped, err := checkout.StopWatcher(root)
	switch {
	case err != nil:
		return err
	case !stopped:
		fmt.Fprintf(g.stdout, "no watcher watches %s\n", root)
	default:
		fmt.Fprintf(g.stdout, "stopped the watcher of %s\n", root)
	}
	return nil
}
