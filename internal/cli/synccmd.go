package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ag-coord/ag/internal/checkout"
)

func newSyncCmd(g *globals) *cobra.Command {
	var opts checkout.SyncOptions
	var theirs, ours []string
	cmd := &cobra.Command{
		Use:   "sync [--merge] [--theirs PATH]... [--ours PATH]...",
		Short: "bring the checkout to the mainline, keeping local edits: merged where the mainline changed them too, or refused",
		Long: `Brings the checkout to the mainline. Local edits stay. A text file the mainline changed too
is merged three ways (base, yours, the mainline's); when the merge is clean it stays a local
edit, now on the new mainline. Anything else the mainline and a local edit both changed (a
merge with conflicts, a binary file, a deletion on one side) refuses the whole sync, which then
changes nothing (exit code 4) unless told how to go on:

  --merge         write text conflicts into the files between <<<<<<< ours, ||||||| base,
                  ======= and >>>>>>> theirs markers, and sync (exit code 4 all the same)
  --theirs PATH   take the mainline's version of PATH (a file, or a directory as a/),
                  dropping the local edit
  --ours PATH     keep the local version of PATH as an edit on the new mainline, so that
                  integrate can send it; after --merge, back to the version before the merge`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, err := g.workspace(cmd.Context())
			if err != nil {
				return err
			} else if g.tree != nil {
				return g.gitSync(cmd.Context(), opts.Merge || len(theirs)+len(ours) > 0)
			}
			if opts.Theirs, err = ws.Checkout.RepoPaths(g.dir, theirs); err != nil {
				return err
			}
			if opts.Ours, err = ws.Checkout.RepoPaths(g.dir, ours); err != nil {
				return err
			}
			if p := opts.BothSides(); p != "" {
				return withExit(ExitUsage, fmt.Errorf("%s is named by both --theirs and --ours", p))
			}
			opts.Progress = func(files int, bytes int64) *checkout.Progress { return newProgress(g, "sync:", files, bytes) }
			res, err := checkout.Sync(cmd.Context(), ws, opts)
			if res == nil {
				return err
			}
			if g.json {
				if perr := g.printValue(res); perr != nil {
					return perr
				}
				return err
			}
			if res.Applied {
				printSync(g, res)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&opts.Merge, "merge", false, "write text conflicts into the files between conflict markers and sync")
	cmd.Flags().StringArrayVar(&theirs, "theirs", nil, "take the mainline's version of this path, dropping the local edit (repeatable)")
	cmd.Flags().StringArrayVar(&ours, "ours", nil, "keep the local version of this path as an edit on the new mainline (repeatable)")
	return cmd
}

func printSync(g *globals, res *checkout.SyncResult) {
	w := g.stdout
	n := len(res.Updated) + len(res.Deleted)
	switch {
	case res.From != res.To:
		termPrintf(w, "synced to %s: %d files updated\n", res.To, n)
	case n == 0 && len(res.Kept) == 0:
		termPrintf(w, "already at the mainline %s\n", res.To)
	default:
		termPrintf(w, "at the mainline %s: %d files taken from it\n", res.To, n)
	}
	if len(res.Merged) > 0 {
		termPrintf(w, "merged with your edits, still local edits: %s\n", strings.Join(res.Merged, ", "))
	}
	if len(res.Kept) > 0 {
		termPrintf(w, "kept your version, as local edits: %s\n", strings.Join(res.Kept, ", "))
	}
	for _, c := range res.Conflicts {
		termPrintf(w, "conflict in %s: %s, written between markers\n", c.Path, c.Reason)
	}
}

func newDiffCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "diff [PATH...]",
		Short: "the checkout's local edits (all, or under the paths named) as a unified diff against the base revision",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := g.workspace(cmd.Context())
			if err != nil {
				return err
			}
			var sel []string
			if len(args) > 0 {
				if sel, err = ws.Checkout.RepoPaths(g.dir, args); err != nil {
					return err
				}
			}
			out, err := checkout.Diff(cmd.Context(), ws, sel)
			if err != nil {
				return err
			}
			if g.json {
				return g.printValue(out)
			}
			for _, f := range out.Files {
				fmt.Fprint(g.stdout, f.Diff)
			}
			return nil
		},
	}
}

func newRevertCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revert PATH...",
		Short: "drop the local edits of files (or of directories, as a/): back to the base revision, a new file removed",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := g.workspace(cmd.Context())
			if err != nil {
				return err
			}
			sel, err := ws.Checkout.RepoPaths(g.dir, args)
			if err != nil {
				return err
			}
			out, err := checkout.Revert(cmd.Context(), ws, sel)
			if err != nil {
				return err
			}
			if g.json {
				return g.printValue(out)
			}
			for _, e := range out.Reverted {
				verb := map[string]string{"added": "removed", "modified": "reverted", "deleted": "restored"}[e.Status]
				termPrintf(g.stdout, "%s %s (%s)\n", verb, e.Path, e.Status)
			}
			if len(out.Reverted) == 0 {
				termPrintf(g.stdout, "nothing to revert: no local edits under %s\n", strings.Join(args, " "))
			}
			return nil
		},
	}
}
