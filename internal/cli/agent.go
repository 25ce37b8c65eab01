package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/termsafe"
)

// workspace is a command's checkout and client.
type workspace struct {
	co *checkout
	c  *client.Client
}

func (g *globals) workspace(ctx context.Context) (*workspace, error) {
	co, err := findCheckout(g.dir)
	if err != nil {
		return nil, err
	}
	if !g.serverSet && co.Server != "" {
		g.server = co.Server
	}
	c, err := g.client()
	if err != nil {
		return nil, err
	}
	ws := &workspace{co: co, c: c}
	if err := ws.rebuildOldIndex(ctx); err != nil {
		return nil, err
	}
	return ws, nil
}

func newLeaseCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "lease", Short: "acquire, renew, release and list file leases of a checkout"}
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
			paths, err := ws.co.repoPaths(g.dir, args)
			if err != nil {
				return err
			}
			// A submodule is one entry of the tree, leased as such, though its directory is one on
			// disk: repoPaths names that as a directory.
			base, err := ws.co.baseFiles()
			if err != nil {
				return err
			}
			for i, p := range paths {
				if f, ok := base[strings.TrimSuffix(p, "/")]; ok && f.gitlink() {
					paths[i] = strings.TrimSuffix(p, "/")
				}
			}
			start := time.Now()
			l, err := ws.c.AcquireLease(cmd.Context(), client.AcquireLeaseOptions{
				Repository: ws.co.Repository, Paths: paths, Holder: ws.co.Holder, TTL: ttl, Wait: wait,
			})
			waited := time.Since(start)
			if err != nil {
				return leaseRefusal(cmd.Context(), ws, paths, wait, waited, err)
			}
			ws.co.Leases = append(ws.co.Leases, heldLease{ID: l.GetId(), Token: l.GetFencingToken(), Paths: l.GetPaths(), ExpiresAt: l.GetExpiresAt().AsTime()})
			if err := ws.co.save(); err != nil {
				return err
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

	var renewTTL time.Duration
	renew := &cobra.Command{
		Use:   "renew [LEASE_ID...]",
		Short: "extend the checkout's leases (all, or the ones named)",
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := g.workspace(cmd.Context())
			if err != nil {
				return err
			}
			out := &agwpv1.ListLeasesResponse{Leases: []*agwpv1.Lease{}}
			var firstErr error
			for i, l := range ws.co.Leases {
				if !selected(l.ID, args) {
					continue
				}
				req := &agwpv1.RenewLeaseRequest{LeaseId: l.ID, FencingToken: l.Token}
				if renewTTL > 0 {
					req.Ttl = durationpb.New(renewTTL)
				}
				res, err := ws.c.Leases.RenewLease(cmd.Context(), req)
				if err != nil {
					firstErr = fmt.Errorf("renew lease %s: %w", l.ID, err)
					break
				}
				ws.co.Leases[i].ExpiresAt = res.GetLease().GetExpiresAt().AsTime()
				out.Leases = append(out.Leases, res.GetLease())
				if !g.json {
					termPrintf(g.stdout, "renewed %s (%s) until %s\n", l.ID, strings.Join(l.Paths, " "), formatTime(res.GetLease().GetExpiresAt()))
				}
			}
			if err := ws.co.save(); err != nil {
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

	release := &cobra.Command{
		Use:   "release [LEASE_ID...]",
		Short: "release the checkout's leases (all, or the ones named)",
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := g.workspace(cmd.Context())
			if err != nil {
				return err
			}
			results, firstErr := ws.releaseLeases(cmd.Context(), func(l heldLease) bool { return selected(l.ID, args) })
			out := releaseJSON{Released: []json.RawMessage{}, Dropped: []releaseDropped{}}
			for _, r := range results {
				if r.lost != nil {
					out.Dropped = append(out.Dropped, releaseDropped{ID: r.held.ID, Paths: r.held.Paths, Reason: Explain(r.lost)})
					if !g.json {
						termPrintf(g.stdout, "dropped %s (%s): %s\n", r.held.ID, strings.Join(r.held.Paths, " "), Explain(r.lost))
					}
					continue
				}
				out.Released = append(out.Released, protoRaw(r.lease))
				if !g.json {
					termPrintf(g.stdout, "released %s (%s)\n", r.held.ID, strings.Join(r.held.Paths, " "))
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
			res, err := ws.c.Leases.ListLeases(cmd.Context(), &agwpv1.ListLeasesRequest{Repository: ws.co.Repository, IncludeEnded: all, PageSize: 1000})
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
	cmd.AddCommand(acquire, renew, release, list)
	return cmd
}

// releaseJSON is what `ag lease release --json` prints.
type releaseJSON struct {
	Released []json.RawMessage `json:"released"` // the leases released, as the server answered them
	Dropped  []releaseDropped  `json:"dropped"`  // leases that were no longer the checkout's
}

// releaseDropped is a lease release found broken, or expired and granted to someone else.
type releaseDropped struct {
	ID     string   `json:"id"`
	Paths  []string `json:"paths"`
	Reason string   `json:"reason"`
}

// leaseRefusal explains an AcquireLease refused for a conflict by what is actually leased: the
// active leases of others that overlap the paths asked for, each by the path it holds, its
// holder and its expiry, and how long the command waited. Other errors pass unchanged.
func leaseRefusal(ctx context.Context, ws *workspace, paths []string, wait, waited time.Duration, err error) error {
	if !client.IsCode(err, connect.CodeAborted) {
		return err
	}
	var held []string
	res, lerr := ws.c.Leases.ListLeases(ctx, &agwpv1.ListLeasesRequest{Repository: ws.co.Repository, PageSize: 1000})
	if lerr == nil {
		mine := heldBy(ctx, ws)
		for _, l := range res.GetLeases() {
			if l.GetState() != agwpv1.LeaseState_LEASE_STATE_ACTIVE || l.GetHolder() == mine {
				continue
			}
			for _, lp := range l.GetPaths() {
				for _, p := range paths {
					if !repo.Overlap(lp, p) {
						continue
					}
					// The error is printed whole, newlines kept: the server's fields are escaped here.
					line := fmt.Sprintf("%s is leased to %s (lease %s, token %d) until %s", termsafe.Line(lp), termsafe.Line(l.GetHolder()),
						termsafe.Line(l.GetId()), l.GetFencingToken(), l.GetExpiresAt().AsTime().UTC().Format(time.RFC3339))
					switch {
					case lp == p:
					case strings.HasSuffix(p, "/") && strings.HasPrefix(lp, p):
						line += ", under " + termsafe.Line(p) + " which you asked for"
					default:
						line += ", which covers " + termsafe.Line(p)
					}
					held = append(held, line)
				}
			}
		}
	}
	msg := strings.Join(held, "; ")
	if msg == "" {
		// Gone since the refusal: the server's own words.
		msg = Explain(err)
	}
	if wait > 0 {
		msg += fmt.Sprintf("; waited %s", waited.Round(100*time.Millisecond))
	} else {
		msg += "; retry later, or wait for it with --wait 60s"
	}
	return withExit(ExitLease, errors.New("lease refused: "+msg))
}

// integrate sends edits to the mainline under the checkout's leases, as one change with
// message. ag integrate and the MCP tool integrate both send this way, after their checks.
// Each path is sent as what the scan found: a file's bytes with its mode, or a link as a link
// (its target, mode 120000), never the content of what it points to. The files are read
// following no symbolic link (checkoutReader), and must hold what the scan found: one swapped
// for a link after the scan (by anyone who can write the checkout) is refused, whether the link
// leads out of the checkout or to another file in it, .git's among them.
// moves are submodules moved to other commits, path → commit, in the same change.
func (ws *workspace) integrate(ctx context.Context, edits []localEdit, moves map[string]string, message string) (*agwpv1.Change, error) {
	root, err := os.OpenRoot(ws.co.root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	reader, err := newCheckoutReader(root)
	if err != nil {
		return nil, err
	}
	defer reader.close()
	changes := make([]client.FileChange, 0, len(edits))
	for _, e := range edits {
		fc := client.FileChange{Path: e.path, Delete: e.kind == "deleted"}
		if !fc.Delete {
			if fc.Content, err = reader.readEntry(e.path, e.mode); err != nil {
				return nil, fmt.Errorf("%w: integrate again", err)
			}
			if repo.Digest(fc.Content) != e.digest {
				return nil, fmt.Errorf("read %s: it changed since it was scanned; integrate again", e.path)
			}
			// Only a change of mode says one: "" keeps the mainline's, as an edit of content
			// alone must.
			if e.mode != e.baseMode && (e.kind == "modified" || e.mode != repo.ModeFile) {
				fc.Mode = e.mode
			}
		}
		changes = append(changes, fc)
	}
	for _, p := range slices.Sorted(maps.Keys(moves)) {
		changes = append(changes, client.FileChange{Path: p, GitlinkCommit: moves[p]})
	}
	return ws.c.IntegrateFiles(ctx, client.IntegrateOptions{
		Repository: ws.co.Repository, BaseRevision: ws.co.BaseRevision, Holder: ws.co.Holder,
		FencingTokens: ws.co.tokens(), Message: message, Changes: changes,
	})
}

// leaseRelease is what became of one lease the checkout released.
type leaseRelease struct {
	held  heldLease
	lease *agwpv1.Lease // the server's answer, when it was released
	lost  error         // when it was no longer the checkout's (broken, or expired and granted to another)
}

// releaseLeases releases the checkout's leases that chosen picks, keeps the others, and saves
// the checkout. A lease the server says is no longer the checkout's is dropped from it all the
// same; on any other error the lease stays, and the first such error is answered once the
// others were tried. ag lease release and the MCP tool lease_release both release this way.
func (ws *workspace) releaseLeases(ctx context.Context, chosen func(heldLease) bool) ([]leaseRelease, error) {
	var results []leaseRelease
	var firstErr error
	kept := ws.co.Leases[:0]
	for _, l := range ws.co.Leases {
		if !chosen(l) {
			kept = append(kept, l)
			continue
		}
		res, err := ws.c.Leases.ReleaseLease(ctx, &agwpv1.ReleaseLeaseRequest{LeaseId: l.ID, FencingToken: l.Token})
		switch {
		case err == nil:
			results = append(results, leaseRelease{held: l, lease: res.GetLease()})
		case client.IsLostClaim(err):
			// Broken, or expired and given to someone else: it is not ours to keep either way.
			results = append(results, leaseRelease{held: l, lost: err})
		default:
			kept = append(kept, l)
			if firstErr == nil {
				firstErr = fmt.Errorf("release lease %s: %w", l.ID, err)
			}
		}
	}
	ws.co.Leases = kept
	if err := ws.co.save(); err != nil {
		return results, err
	}
	return results, firstErr
}

func selected(id string, ids []string) bool {
	if len(ids) == 0 {
		return true
	}
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func printLeases(g *globals, leases []*agwpv1.Lease) {
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATHS\tHOLDER\tTOKEN\tSTATE\tEXPIRES\tLEASE")
	for _, l := range leases {
		left := ""
		if l.GetState() == agwpv1.LeaseState_LEASE_STATE_ACTIVE {
			left = "in " + humanDuration(time.Until(l.GetExpiresAt().AsTime()))
		}
		termPrintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", strings.Join(l.GetPaths(), " "), l.GetHolder(), l.GetFencingToken(),
			strings.ToLower(strings.TrimPrefix(l.GetState().String(), "LEASE_STATE_")), left, l.GetId())
	}
	_ = tw.Flush()
}

func newIntegrateCmd(g *globals) *cobra.Command {
	var message string
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
			edits, err := ws.co.localEdits()
			if err != nil {
				return err
			}
			if len(args) > 0 {
				sel, err := ws.co.repoPaths(g.dir, args)
				if err != nil {
					return err
				}
				edits = editsUnder(edits, sel)
			}
			moves, err := submoduleMoves(ws.co, g.dir, submodules)
			if err != nil {
				return err
			}
			if len(edits) == 0 && len(moves) == 0 {
				if g.json {
					return g.printValue(struct{}{})
				}
				if len(args) > 0 {
					termPrintf(g.stdout, "nothing to integrate: no local edits under %s\n", strings.Join(args, " "))
				} else {
					fmt.Fprintln(g.stdout, "nothing to integrate: no local edits")
				}
				return nil
			}
			if err := ws.co.unresolved(edits); err != nil {
				return err
			}
			if len(ws.co.Leases) == 0 {
				paths := slices.Sorted(maps.Keys(moves))
				if len(edits) > 0 {
					paths = append([]string{editPaths(edits)}, paths...)
				}
				return withExit(ExitLease, fmt.Errorf("no leases held in this checkout: `ag lease acquire PATH...` the files you edited (%s)", strings.Join(paths, ", ")))
			}
			change, err := ws.integrate(cmd.Context(), edits, moves, message)
			if client.IsCode(err, connect.CodeAborted) {
				return withExit(ExitConflict, fmt.Errorf("%w (ag sync brings the mainline in, merging it with your edits)", err))
			}
			if err != nil {
				return err
			}
			if !noWait {
				change, err = followChange(cmd.Context(), g, ws.c, change)
				if err != nil {
					return err
				}
			}
			if change.GetState() == agwpv1.ChangeState_CHANGE_STATE_INTEGRATED {
				// The checkout now matches the new mainline on the edited paths; bring in the rest.
				if _, err := syncCheckout(cmd.Context(), ws, change.GetIntegratedRevision()); err != nil {
					return withExit(ExitCode(err), fmt.Errorf("integrated as %s, but updating the checkout failed: %w (run ag sync)", change.GetIntegratedRevision(), err))
				}
			}
			if g.json {
				if err := g.printJSON(change); err != nil {
					return err
				}
				if s := change.GetState(); s == agwpv1.ChangeState_CHANGE_STATE_REJECTED || s == agwpv1.ChangeState_CHANGE_STATE_CANCELLED {
					return withExit(ExitRejected, fmt.Errorf("change %s was %s", change.GetId(), changeStateName(s)))
				}
				return nil
			}
			switch change.GetState() {
			case agwpv1.ChangeState_CHANGE_STATE_INTEGRATED:
				termPrintf(g.stdout, "change %s integrated: %d paths, mainline %s\n", change.GetId(), len(change.GetPaths()), change.GetIntegratedRevision())
				if d := change.GetAttestationDigest(); d != "" {
					termPrintf(g.stdout, "validated: attestation %s\n", d)
				}
			case agwpv1.ChangeState_CHANGE_STATE_REJECTED, agwpv1.ChangeState_CHANGE_STATE_CANCELLED:
				termPrintf(g.stdout, "change %s %s: %d paths; the mainline did not move\n", change.GetId(), changeStateName(change.GetState()), len(change.GetPaths()))
				if change.GetReason() != "" {
					fmt.Fprintf(g.stdout, "reason: %s\n", termsafe.Text(change.GetReason()))
				}
				return withExit(ExitRejected, fmt.Errorf("change %s was %s; your edits are still in the checkout", change.GetId(), changeStateName(change.GetState())))
			default:
				termPrintf(g.stdout, "change %s %s%s: %d paths (follow it: ag change show --wait %s)\n", change.GetId(), changeStateName(change.GetState()),
					queuePlace(change), len(change.GetPaths()), change.GetId())
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&message, "message", "m", "", "what the change does (required)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "print the change and return without waiting for its outcome")
	cmd.Flags().StringArrayVar(&submodules, "submodule", nil, "PATH=COMMIT: move the submodule at PATH to COMMIT (40 hex digits) in this change; repeat for more")
	return cmd
}

// submoduleMoves reads --submodule PATH=COMMIT flags (PATH as the other arguments, from dir):
// each PATH must be a submodule of the checkout's base revision, each COMMIT a full git id.
func submoduleMoves(co *checkout, dir string, flags []string) (map[string]string, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	base, err := co.baseFiles()
	if err != nil {
		return nil, err
	}
	moves := map[string]string{}
	for _, f := range flags {
		path, commit, ok := strings.Cut(f, "=")
		if !ok {
			return nil, withExit(ExitUsage, fmt.Errorf("--submodule %s: want PATH=COMMIT", termsafe.Line(f)))
		}
		if !repo.IsGitID(strings.ToLower(commit)) {
			return nil, withExit(ExitUsage, fmt.Errorf("--submodule %s: %s is not a commit id: give its 40 hex digits", termsafe.Line(f), termsafe.Line(commit)))
		}
		ps, err := co.repoPaths(dir, []string{path})
		if err != nil {
			return nil, err
		}
		commit = strings.ToLower(commit)
		// A submodule's directory is a directory on disk, which repoPaths names as such.
		p := strings.TrimSuffix(ps[0], "/")
		if f, ok := base[p]; !ok || !f.gitlink() {
			return nil, withExit(ExitUsage, fmt.Errorf("--submodule: %s is not a submodule of the checkout's revision: --submodule moves an existing submodule to another commit, the one change of a submodule ag makes (add or remove one with git, and import)", termsafe.Line(p)))
		}
		if _, twice := moves[p]; twice {
			return nil, withExit(ExitUsage, fmt.Errorf("--submodule: %s is named twice", termsafe.Line(p)))
		}
		moves[p] = commit
	}
	return moves, nil
}

// queuePlace describes where a queued change stands in its repository's integration queue.
func queuePlace(ch *agwpv1.Change) string {
	if ch.GetState() != agwpv1.ChangeState_CHANGE_STATE_QUEUED {
		return ""
	}
	if n := ch.GetQueuePosition(); n > 0 {
		return fmt.Sprintf(" (%d ahead)", n)
	}
	return " (next in line)"
}

// editsUnder answers the edits at or under the repository paths sel ("a/" for a directory).
func editsUnder(edits []localEdit, sel []string) []localEdit {
	var out []localEdit
	for _, e := range edits {
		if underAny(e.path, sel) {
			out = append(out, e)
		}
	}
	return out
}

// underAny reports whether the file p is one of sel or under a directory ("a/") of sel.
func underAny(p string, sel []string) bool {
	for _, s := range sel {
		if p == s || strings.HasSuffix(s, "/") && strings.HasPrefix(p, s) {
			return true
		}
	}
	return false
}

func finalChange(s agwpv1.ChangeState) bool {
	return s == agwpv1.ChangeState_CHANGE_STATE_INTEGRATED || s == agwpv1.ChangeState_CHANGE_STATE_REJECTED || s == agwpv1.ChangeState_CHANGE_STATE_CANCELLED
}

func changeStateName(s agwpv1.ChangeState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "CHANGE_STATE_"))
}

func editPaths(edits []localEdit) string {
	ps := make([]string, 0, len(edits))
	for _, e := range edits {
		ps = append(ps, e.path)
	}
	if len(ps) > 5 {
		return strings.Join(ps[:5], ", ") + fmt.Sprintf(" and %d more", len(ps)-5)
	}
	return strings.Join(ps, ", ")
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
			}
			edits, err := ws.co.localEdits()
			if err != nil {
				return err
			}
			conflicted, err := ws.co.conflicted(edits)
			if err != nil {
				return err
			}
			targets, err := ws.co.linkTargets(edits)
			if err != nil {
				return err
			}
			submodules, err := ws.co.submodules()
			if err != nil {
				return err
			}
			r, err := ws.c.Repos.GetRepository(cmd.Context(), &agwpv1.GetRepositoryRequest{Name: ws.co.Repository})
			if err != nil {
				return err
			}
			leases, err := ws.c.Leases.ListLeases(cmd.Context(), &agwpv1.ListLeasesRequest{
				Repository: ws.co.Repository, Holder: heldBy(cmd.Context(), ws), IncludeEnded: true, PageSize: 1000,
			})
			if err != nil {
				return err
			}
			held := map[string]bool{}
			for _, l := range ws.co.Leases {
				held[l.ID] = true
			}
			var mine []*agwpv1.Lease
			for _, l := range leases.GetLeases() {
				if held[l.GetId()] {
					mine = append(mine, l)
				}
			}
			head := r.GetRepository().GetMainline()
			if g.json {
				out := statusJSON{
					Repository: ws.co.Repository, Holder: ws.co.Holder, BaseRevision: ws.co.BaseRevision,
					Mainline: head, UpToDate: head == ws.co.BaseRevision, Edits: editsJSON(edits, conflicted, targets),
					Submodules: submodules, Leases: []json.RawMessage{},
				}
				for _, l := range mine {
					out.Leases = append(out.Leases, protoRaw(l))
				}
				return g.printValue(out)
			}
			w := g.stdout
			termPrintf(w, "repository %s, checkout of %s as %s\n", ws.co.Repository, ws.co.BaseRevision, ws.co.Holder)
			if head == ws.co.BaseRevision {
				termPrintf(w, "mainline %s: up to date\n", head)
			} else {
				termPrintf(w, "mainline %s: it moved on since your checkout; ag sync brings it in\n", head)
			}
			if len(edits) == 0 {
				fmt.Fprintln(w, "no local edits")
			} else {
				fmt.Fprintln(w, "local edits:")
				for _, e := range edits {
					note := editNote(e, targets[e.path])
					if conflicted[e.path] {
						note += " (conflict: resolve the <<<<<<< markers, or ag sync --ours/--theirs " + e.path + ")"
					}
					termPrintf(w, "  %-9s %s%s\n", e.kind, e.path, note)
				}
			}
			if len(submodules) > 0 {
				fmt.Fprintln(w, "submodules (ag neither fetches them nor reads their directories):")
				for _, m := range submodules {
					termPrintf(w, "  %s: submodule at %s\n", m.Path, m.Commit)
				}
			}
			if len(mine) == 0 {
				fmt.Fprintln(w, "no leases held")
				return nil
			}
			fmt.Fprintln(w, "leases:")
			printLeases(g, mine)
			return nil
		},
	}
}

// statusJSON is what `ag status --json` prints.
type statusJSON struct {
	Repository   string            `json:"repository"`
	Holder       string            `json:"holder"`       // the checkout's holder label
	BaseRevision string            `json:"baseRevision"` // the revision the local edits are based on
	Mainline     string            `json:"mainline"`     // the mainline head now
	UpToDate     bool              `json:"upToDate"`     // baseRevision is the mainline
	Edits        []editJSON        `json:"edits"`
	Submodules   []submodule       `json:"submodules"` // the base revision's, which ag does not fetch
	Leases       []json.RawMessage `json:"leases"`     // the checkout's leases as the server knows them, any state
}

// editJSON is a local edit in JSON.
type editJSON struct {
	Path     string `json:"path"`
	Status   string `json:"status"`             // added, modified or deleted
	Conflict bool   `json:"conflict,omitempty"` // holds conflict markers a sync --merge wrote
	Mode     string `json:"mode,omitempty"`     // the local mode: 100644, 100755 or 120000; not for a deletion
	BaseMode string `json:"baseMode,omitempty"` // the base revision's mode; not for an addition
	Target   string `json:"target,omitempty"`   // a link's target, when the edit leaves a link
}

func editsJSON(edits []localEdit, conflicted map[string]bool, targets map[string]string) []editJSON {
	out := make([]editJSON, 0, len(edits))
	for _, e := range edits {
		out = append(out, editJSON{Path: e.path, Status: e.kind, Conflict: conflicted[e.path], Mode: e.mode, BaseMode: e.baseMode, Target: targets[e.path]})
	}
	return out
}

// heldBy answers the holder filter of this checkout's leases: its principal's, any label (the
// server knows the principal; the checkout knows the label).
func heldBy(ctx context.Context, ws *workspace) string {
	who, err := ws.c.Admin.WhoAmI(ctx, &agwpv1.WhoAmIRequest{})
	if err != nil {
		return ""
	}
	return who.GetPrincipal().GetName() + "|" + ws.co.Holder
}
