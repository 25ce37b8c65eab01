package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/repoview"
	"github.com/ag-coord/ag/internal/termsafe"
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
	list := &cobra.Command{
		Use:   "list REPOSITORY",
		Short: "list a repository's changes, newest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Repos.ListChanges(cmd.Context(), &agwpv1.ListChangesRequest{Repository: args[0], PageSize: int32(limit)})
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
	cmd.AddCommand(show, list)
	return cmd
}

func printChange(w io.Writer, ch *agwpv1.Change) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	termPrintf(tw, "change\t%s\n", ch.GetId())
	termPrintf(tw, "repository\t%s\n", ch.GetRepository())
	termPrintf(tw, "state\t%s\n", checkout.ChangeStateName(ch.GetState()))
	termPrintf(tw, "author\t%s\n", ch.GetAuthor())
	termPrintf(tw, "message\t%s\n", checkout.FirstLineOf(ch.GetMessage()))
	termPrintf(tw, "paths\t%s\n", strings.Join(ch.GetPaths(), ", "))
	termPrintf(tw, "base\t%s\n", ch.GetBaseRevision())
	termPrintf(tw, "candidate\t%s\n", dash(ch.GetCandidateRevision()))
	termPrintf(tw, "integrated\t%s\n", dash(ch.GetIntegratedRevision()))
	if h := ch.GetHistory(); len(h) > 0 && h[len(h)-1].GetLane() != "" {
		// Its candidate is the lane's view of the tree, which is what the attestation is about.
		termPrintf(tw, "lane\t%s\n", h[len(h)-1].GetLane())
	}
	termPrintf(tw, "validate job\t%s\n", dash(ch.GetJobId()))
	termPrintf(tw, "attestation\t%s\n", dash(ch.GetAttestationDigest()))
	termPrintf(tw, "created\t%s\n", formatTime(ch.GetCreatedAt()))
	termPrintf(tw, "updated\t%s\n", formatTime(ch.GetUpdatedAt()))
	if ch.GetState() == agwpv1.ChangeState_CHANGE_STATE_QUEUED {
		termPrintf(tw, "queue\t%s\n", strings.TrimSpace(strings.Trim(checkout.QueuePlace(ch), " ()")))
	}
	if c := ch.GetCandidate(); c != nil && ch.GetState() == agwpv1.ChangeState_CHANGE_STATE_VALIDATING {
		termPrintf(tw, "in candidate\t%s\n", checkout.DescribeCandidate(c))
	}
	_ = tw.Flush()
	if ch.GetReason() != "" {
		fmt.Fprintf(w, "reason: %s\n", termsafe.Text(ch.GetReason()))
	}
	if h := ch.GetHistory(); len(h) > 1 || (len(h) == 1 && len(h[0].GetChanges()) > 1) {
		fmt.Fprintf(w, "validated %d times:\n", len(h))
		for _, c := range h {
			line := fmt.Sprintf("  %s  %s", c.GetId(), checkout.CandidateStateName(c.GetState()))
			var about []string
			if l := c.GetLane(); l != "" {
				about = append(about, "lane "+l)
			}
			if n := len(c.GetChanges()); n > 1 {
				about = append(about, fmt.Sprintf("a batch of %d", n))
			}
			if len(about) > 0 {
				line += " (" + strings.Join(about, ", ") + ")"
			}
			if r := c.GetReason(); r != "" && c.GetState() != agwpv1.CandidateState_CANDIDATE_STATE_REJECTED {
				line += ": " + checkout.FirstLineOf(r)
			}
			termPrintf(w, "%s\n", line)
		}
	}
}
