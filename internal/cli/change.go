package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/repoview"
)

// validationFlags are the policy flags of `ag repo create` and `ag repo set-validation`; the
// command itself follows the repository name, after --.
type validationFlags struct{ repoview.PolicyFlags }

func (f *validationFlags) register(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&f.Timeout, "timeout", 0, "kill the validation command after this long and reject the change (default 10m on the server, at most 24h)")
	cmd.Flags().StringArrayVar(&f.Env, "env", nil, "NAME=VALUE added to the command's environment (repeatable)")
	cmd.Flags().Uint32Var(&f.Depth, "depth", 0, "validate up to this many changes at once, each on the ones ahead of it, at most 64 (default: as many as the validate workers seen, at most the server's --gate-max-depth, 8)")
	cmd.Flags().Uint32Var(&f.Batch, "batch", 0, "validate this many changes together in one run, splitting a batch that fails until the changes that broke it are found (default 1, at most 64)")
	cmd.Flags().StringArrayVar(&f.Lanes, "lane", nil, "NAME=PREFIX[,PREFIX...]:COMMAND ARGS...: a change whose paths all lie under the prefixes (\"dir/\" or a file) is validated with this command instead, "+
		"on the tree without other lanes' files, with --timeout and --env (repeatable, at most 32). "+
		"The command is split on spaces: an argument holding spaces, or a prefix holding ',' or ':', needs the API (SetValidation)")
	cmd.Flags().StringVar(&f.Network, "network", "", "the network of the validation command: none (the default: a loopback of its own) or egress "+
		"(through the worker's egress proxy, to the package registries its operator allows with ag-worker --egress-allow)")
	cmd.Flags().StringVar(&f.Isolation, "isolation", "", "the evidence a pass must carry: sandbox (the default: a run in the worker's sandbox with no more network than --network) "+
		"or none (any run a registered worker attests, even with --unsafe-no-sandbox or --sandbox-network shared: only for code you trust)")
	cmd.Flags().StringVar(&f.MaxMemory, "max-memory", "", "memory one run may use, below its worker's --max-memory (512MiB, 2GiB; default: the worker's)")
	cmd.Flags().Uint32Var(&f.MaxPids, "max-pids", 0, "processes and threads one run may have at once, below its worker's --max-pids (default: the worker's)")
	cmd.Flags().StringVar(&f.MaxDisk, "max-disk", "", "what one run may write (its checkout, home, /tmp, output), below its worker's --max-disk (default: the worker's)")
	cmd.Flags().StringArrayVar(&f.Protect, "protect", nil, "a path (\"ci/\" for a directory, or a file) validated with the mainline's copy, whose changes land only approved by a reviewer "+
		"(repeatable; the file the command runs is protected anyway)")
	cmd.Flags().StringVar(&f.Preset, "preset", "", "go, node or python: before a run, a phase that runs none of the candidate's code fills the worker's caches for the repository "+
		"(Go modules and compiled packages; npm packages; wheels), which the command sees read-only; "+
		"without a command, `go test ./...`, `npm test` or `python3 -m pytest`")
}

// validation answers the policy for command, nil when command is empty (and no flag was given).
// Its errors are the command line's.
func (f *validationFlags) validation(command []string) (*agwpv1.Validation, error) {
	v, err := f.Policy(command)
	return v, withExit(ExitUsage, err)
}

// showRepository prints what internal/repoview fetched of a repository, then its queue when
// anything is in it.
func showRepository(ctx context.Context, g *globals, c *client.Client, name string) error {
	shown, err := repoview.Fetch(ctx, c, name)
	if err != nil {
		return err
	}
	if g.json {
		return g.printJSON(shown.Repository)
	}
	if err := repoview.WriteSummary(g.stdout, shown); err != nil {
		return err
	}
	q, err := repoview.Queue(ctx, c, name)
	if err != nil || q == nil {
		return err // nil: a server from before GetQueue, and the repository was shown
	}
	if len(q.GetCandidates()) > 0 || len(q.GetWaiting()) > 0 {
		fmt.Fprintln(g.stdout)
		repoview.WriteQueue(g.stdout, q)
	}
	return nil
}

func newChangeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "change", Short: "show and follow changes"}
	var wait bool
	show := &cobra.Command{
		Use:   "show CHANGE_ID",
		Short: "show a change; with --wait, follow it until it is integrated, rejected or cancelled",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Repos.GetChange(cmd.Context(), &agwpv1.GetChangeRequest{ChangeId: args[0]})
			if err != nil {
				return err
			}
			change := res.GetChange()
			if wait {
				if change, err = checkout.FollowChange(cmd.Context(), g.followOut(), c, change); err != nil {
					return err
				}
			}
			if g.json {
				return g.printJSON(change)
			}
			printChange(g.stdout, change)
			return nil
		},
	}
	show.Flags().BoolVar(&wait, "wait", false, "follow the change until it is final")
	var limit int
	var awaiting bool
	list := &cobra.Command{
		Use:   "list REPOSITORY",
		Short: "list a repository's changes, newest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Repos.ListChanges(cmd.Context(), &agwpv1.ListChangesRequest{Repository: args[0], PageSize: int32(limit),
				AwaitingApproval: awaiting})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CHANGE\tSTATE\tAUTHOR\tPATHS\tREVISION\tCREATED\tMESSAGE")
			for _, ch := range res.GetChanges() {
				termPrintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", ch.GetId(), checkout.ChangeStateName(ch.GetState()), ch.GetAuthor(),
					len(ch.GetPaths()), dash(ch.GetIntegratedRevision()), formatTime(ch.GetCreatedAt()), checkout.FirstLineOf(ch.GetMessage()))
			}
			return tw.Flush()
		},
	}
	list.Flags().IntVar(&limit, "limit", 50, "at most this many changes")
	list.Flags().BoolVar(&awaiting, "awaiting-approval", false, "only the changes to protected paths that wait for a reviewer, oldest first")
	approve := &cobra.Command{
		Use:   "approve CHANGE_ID",
		Short: "approve a change to a repository's protected paths, so that it lands once validated (reviewer, admin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Repos.ApproveChange(cmd.Context(), &agwpv1.ApproveChangeRequest{ChangeId: args[0]})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res.GetChange())
			}
			ch := res.GetChange()
			return termPrintf(g.stdout, "change %s: approved by %s; %s\n", ch.GetId(), ch.GetApprovedBy(), checkout.ChangeStateName(ch.GetState()))
		},
	}
	cmd.AddCommand(show, list, approve)
	return cmd
}

func printChange(w io.Writer, ch *agwpv1.Change) { repoview.WriteChange(w, ch) }
