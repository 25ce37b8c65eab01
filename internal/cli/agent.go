package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/termsafe"
)

func (g *globals) workspace(ctx context.Context) (*checkout.Workspace, error) {
	co, err := checkout.Find(g.dir)
	if _, none := err.(*checkout.NotFoundError); none {
		return g.gitWorkspace(ctx, err)
	} else if err != nil {
		return nil, err
	}
	if !g.serverSet && co.Server != "" {
		g.server = co.Server
	}
	c, err := g.client()
	if err != nil {
		return nil, err
	}
	return checkout.NewWorkspace(ctx, co, c)
}

func newLeaseCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "lease", Short: "acquire, renew, release and list file leases of a checkout"}
	cmd.AddCommand(newLeaseAcquireCmd(g), newLeaseRenewCmd(g), newLeaseReleaseCmd(g), newLeaseListCmd(g))
	return cmd
}

func newLeaseAcquireCmd(g *globals) *cobra.Command {
	var ttl, wait time.Duration
	acquire := &cobra.Command{
		Use:   "acquire PATH...",
		Short: "lease files (a/b.go) or directories (a/) of the checkout's repository",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := g.workspace(cmd.Context())
			if err != nil {
				return err
			}
			paths, err := ws.Checkout.RepoPaths(g.dir, args)
			if err != nil {
				return err
			}
			l, waited, err := ws.AcquireLease(cmd.Context(), paths, ttl, wait)
			if err != nil {
				return leaseRefusal(err)
			}
			if g.json {
				return g.printJSON(l)
			}
			after := ""
			if wait > 0 && waited >= time.Second {
				after = ", after waiting " + waited.Round(time.Second).String()
			}
			termPrintf(g.stdout, "leased %s to %s: lease %s, token %d, until %s%s\n", strings.Join(l.GetPaths(), " "), l.GetHolder(),
				l.GetId(), l.GetFencingToken(), formatTime(l.GetExpiresAt()), after)
			return nil
		},
	}
	acquire.Flags().DurationVar(&ttl, "ttl", 0, "lease time (default 5m, at most 24h)")
	acquire.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for conflicting leases to go (at most 60s)")
	return acquire
}

func newLeaseRenewCmd(g *globals) *cobra.Command {
	var renewTTL time.Duration
	renew := &cobra.Command{
		Use:   "renew [LEASE_ID...]",
		Short: "extend the checkout's leases (all, or the ones named)",
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := g.workspace(cmd.Context())
			if err != nil {
				return err
			}
			renewed, firstErr := ws.RenewLeases(cmd.Context(), args, renewTTL)
			out := &agwpv1.ListLeasesResponse{Leases: []*agwpv1.Lease{}}
			for _, r := range renewed {
				out.Leases = append(out.Leases, r.Lease)
				if !g.json {
					termPrintf(g.stdout, "renewed %s (%s) until %s\n", r.Held.ID, strings.Join(r.Held.Paths, " "), formatTime(r.Lease.GetExpiresAt()))
				}
			}
			if err := ws.Checkout.Save(); err != nil {
				return err
			}
			if g.json {
				if err := g.printJSON(out); err != nil {
					return err
				}
			}
			return firstErr
		},
	}
	renew.Flags().DurationVar(&renewTTL, "ttl", 0, "new lease time from now (default 5m)")
	return renew
}

func newLeaseReleaseCmd(g *globals) *cobra.Command {
	release := &cobra.Command{
		Use:   "release [LEASE_ID...]",
		Short: "release the checkout's leases (all, or the ones named)",
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := g.workspace(cmd.Context())
			if err != nil {
				return err
			}
			results, firstErr := ws.ReleaseLeases(cmd.Context(), func(l checkout.HeldLease) bool { return checkout.Selected(l.ID, args) })
			out := checkout.ReleaseJSON{Released: []json.RawMessage{}, Dropped: []checkout.ReleaseDropped{}}
			for _, r := range results {
				if r.Lost != nil {
					out.Dropped = append(out.Dropped, checkout.ReleaseDropped{ID: r.Held.ID, Paths: r.Held.Paths, Reason: Explain(r.Lost)})
					if !g.json {
						termPrintf(g.stdout, "dropped %s (%s): %s\n", r.Held.ID, strings.Join(r.Held.Paths, " "), Explain(r.Lost))
					}
					continue
				}
				out.Released = append(out.Released, protoRaw(r.Lease))
				if !g.json {
					termPrintf(g.stdout, "released %s (%s)\n", r.Held.ID, strings.Join(r.Held.Paths, " "))
				}
			}
			if g.json {
				if err := g.printValue(out); err != nil {
					return err
				}
			}
			return firstErr
		},
	}
	return release
}

func newLeaseListCmd(g *globals) *cobra.Command {
	var all bool
	list := &cobra.Command{
		Use:   "list",
		Short: "who holds what in the checkout's repository, until when",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, err := g.workspace(cmd.Context())
			if err != nil {
				return err
			}
			res, err := ws.Client.Leases.ListLeases(cmd.Context(), &agwpv1.ListLeasesRequest{Repository: ws.Checkout.Repository, IncludeEnded: all, PageSize: 1000})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res)
			}
			printLeases(g, res.GetLeases())
			return nil
		},
	}
	list.Flags().BoolVar(&all, "all", false, "also released, broken and expired leases")
	return list
}

// leaseRefusal words an AcquireLease refused for a conflict by what is actually leased
// (checkout.LeaseRefusedError.Explain). Other errors pass unchanged.
func leaseRefusal(err error) error {
	var refused *checkout.LeaseRefusedError
	if !errors.As(err, &refused) {
		return err
	}
	return withExit(ExitLease, errors.New("lease refused: "+refused.Explain(Explain)))
}

func printLeases(g *globals, leases []*agwpv1.Lease) {
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATHS\tHOLDER\tTOKEN\tSTATE\tEXPIRES\tLEASE")
	for _, l := range leases {
		left := ""
		if l.GetState() == agwpv1.LeaseState_LEASE_STATE_ACTIVE {
			left = "in " + checkout.HumanDuration(time.Until(l.GetExpiresAt().AsTime()))
		}
		termPrintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", strings.Join(l.GetPaths(), " "), l.GetHolder(), l.GetFencingToken(),
			strings.ToLower(strings.TrimPrefix(l.GetState().String(), "LEASE_STATE_")), left, l.GetId())
	}
	_ = tw.Flush()
}

func newIntegrateCmd(g *globals) *cobra.Command {
	var message, task string
	var noWait bool
	var submodules []string
	cmd := &cobra.Command{
		Use:   "integrate -m MESSAGE [PATH...]",
		Short: "send the checkout's edits (all, or those under the paths named) to the mainline under the leases it holds",
		Long: `Sends the checkout's local edits to the mainline under the leases it holds, with their fencing
tokens, and follows the change until it is integrated or rejected. Named paths (files, or
directories as a/) send only the edits under them; the others stay local edits.
--submodule PATH=COMMIT moves the submodule at PATH to another commit in the same change (ag
never fetches a submodule: this is the one change of one there is); its lease is needed too.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if message == "" {
				return withExit(ExitUsage, fmt.Errorf("-m: say what the change does"))
			}
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
			moves, err := ws.Checkout.SubmoduleMoves(g.dir, submodules)
			if err != nil {
				return err
			}
			res, err := ws.Integrate(cmd.Context(), checkout.IntegrateRequest{
				Message: message, Only: sel, Moves: moves, Follow: !noWait, FollowTo: g.followOut(), Task: task,
			})
			if err != nil {
				return integrateRefusal(g, args, err)
			}
			change := res.Change
			if res.SyncErr != nil {
				return withExit(ExitCode(res.SyncErr), fmt.Errorf("integrated as %s, but updating the checkout failed: %w (run ag sync)", change.GetIntegratedRevision(), res.SyncErr))
			}
			if g.json {
				if err := g.printJSON(change); err != nil {
					return err
				}
				if s := change.GetState(); s == agwpv1.ChangeState_CHANGE_STATE_REJECTED || s == agwpv1.ChangeState_CHANGE_STATE_CANCELLED {
					return withExit(ExitRejected, fmt.Errorf("change %s was %s", change.GetId(), checkout.ChangeStateName(s)))
				}
				return nil
			}
			switch change.GetState() {
			case agwpv1.ChangeState_CHANGE_STATE_INTEGRATED:
				termPrintf(g.stdout, "change %s integrated: %d paths, mainline %s\n", change.GetId(), len(change.GetPaths()), change.GetIntegratedRevision())
				if d := change.GetAttestationDigest(); d != "" {
					termPrintf(g.stdout, "validated: attestation %s\n", d)
				}
				if id := change.GetTaskId(); id != "" {
					termPrintf(g.stdout, "task %s done: its claim %s#%d landed\n", id, id, change.GetTaskClaimNumber())
				}
			case agwpv1.ChangeState_CHANGE_STATE_REJECTED, agwpv1.ChangeState_CHANGE_STATE_CANCELLED:
				termPrintf(g.stdout, "change %s %s: %d paths; the mainline did not move\n", change.GetId(), checkout.ChangeStateName(change.GetState()), len(change.GetPaths()))
				if change.GetReason() != "" {
					fmt.Fprintf(g.stdout, "reason: %s\n", termsafe.Text(change.GetReason()))
				}
				return withExit(ExitRejected, fmt.Errorf("change %s was %s; your edits are still in the checkout", change.GetId(), checkout.ChangeStateName(change.GetState())))
			default:
				termPrintf(g.stdout, "change %s %s%s: %d paths (follow it: ag change show --wait %s)\n", change.GetId(), checkout.ChangeStateName(change.GetState()),
					checkout.QueuePlace(change), len(change.GetPaths()), change.GetId())
			}
			if p := change.GetProtectedPaths(); len(p) > 0 && change.GetApprovedBy() == "" && !checkout.FinalChange(change.GetState()) {
				termPrintf(g.stdout, "it changes the protected %s: validated with the mainline's copy, it lands once a reviewer approves it (ag change approve %s)\n",
					strings.Join(p, ", "), change.GetId())
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&message, "message", "m", "", "what the change does (required)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "print the change and return without waiting for its outcome")
	cmd.Flags().StringVar(&task, "task", "", "TASK_ID (the claim ag task claim recorded here) or TASK_ID#CLAIM: the task claim the change finishes when it lands")
	cmd.Flags().StringArrayVar(&submodules, "submodule", nil, "PATH=COMMIT: move the submodule at PATH to COMMIT (40 hex digits) in this change; repeat for more")
	return cmd
}

// integrateRefusal words for the command line what Integrate refused: nothing to send is no
// error, and each refusal gets its exit code.
func integrateRefusal(g *globals, args []string, err error) error {
	var nothing *checkout.NothingError
	var noLeases *checkout.NoLeasesError
	var follow *checkout.FollowError
	switch {
	case errors.As(err, &nothing):
		if g.json {
			return g.printValue(struct{}{})
		}
		if len(args) > 0 {
			termPrintf(g.stdout, "nothing to integrate: no local edits under %s\n", strings.Join(args, " "))
		} else {
			fmt.Fprintln(g.stdout, "nothing to integrate: no local edits")
		}
		return nil
	case errors.As(err, &noLeases):
		return withExit(ExitLease, fmt.Errorf("no leases held in this checkout: `ag lease acquire PATH...` the files you edited (%s)", noLeases.Paths()))
	case errors.As(err, &follow):
		return follow.Err
	case client.IsCode(err, connect.CodeAborted):
		return withExit(ExitConflict, fmt.Errorf("%w (ag sync brings the mainline in, merging it with your edits)", err))
	}
	return err
}

func newStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "local edits, leases held with time left, and the mainline head",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, err := g.workspace(cmd.Context())
			if err != nil {
				return err
			} else if g.tree != nil {
				return g.gitStatus(cmd.Context(), ws)
			}
			st, err := ws.Status(cmd.Context())
			if err != nil {
				return err
			}
			head := st.Mainline
			if g.json {
				return g.printValue(st.JSON(ws.Checkout))
			}
			w := g.stdout
			termPrintf(w, "repository %s, checkout of %s as %s\n", ws.Checkout.Repository, ws.Checkout.BaseRevision, ws.Checkout.Holder)
			if head == ws.Checkout.BaseRevision {
				termPrintf(w, "mainline %s: up to date\n", head)
			} else {
				termPrintf(w, "mainline %s: it moved on since your checkout; ag sync brings it in\n", head)
			}
			if len(st.Edits) == 0 {
				fmt.Fprintln(w, "no local edits")
			} else {
				fmt.Fprintln(w, "local edits:")
				for _, e := range st.Edits {
					note := checkout.EditNote(e, st.Targets[e.Path])
					if st.Conflicted[e.Path] {
						note += " (conflict: resolve the <<<<<<< markers, or ag sync --ours/--theirs " + e.Path + ")"
					}
					termPrintf(w, "  %-9s %s%s\n", e.Kind, e.Path, note)
				}
			}
			if len(st.Submodules) > 0 {
				fmt.Fprintln(w, "submodules (ag neither fetches them nor reads their directories):")
				for _, m := range st.Submodules {
					termPrintf(w, "  %s: submodule at %s\n", m.Path, m.Commit)
				}
			}
			return printHeld(g, st.Leases)
		},
	}
}

// printHeld prints the leases a checkout or a git working tree holds, for ag status.
func printHeld(g *globals, leases []*agwpv1.Lease) error {
	if len(leases) == 0 {
		_, err := fmt.Fprintln(g.stdout, "no leases held")
		return err
	}
	fmt.Fprintln(g.stdout, "leases:")
	printLeases(g, leases)
	return nil
}
