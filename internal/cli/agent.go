package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/repo"
)

// workspace is a command's checkout and client.
type workspace struct {
	co *checkout
	c  *client.Client
}

func (g *globals) workspace() (*workspace, error) {
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
	return &workspace{co: co, c: c}, nil
}

func newLeaseCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "lease", Short: "acquire, renew, release and list file leases of a checkout"}
	var ttl, wait time.Duration
	acquire := &cobra.Command{
		Use:   "acquire PATH...",
		Short: "lease files (a/b.go) or directories (a/) of the checkout's repository",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := g.workspace()
			if err != nil {
				return err
			}
			paths := make([]string, 0, len(args))
			for _, a := range args {
				p, err := ws.co.repoPath(g.dir, a)
				if err != nil {
					return err
				}
				paths = append(paths, p)
			}
			l, err := ws.c.AcquireLease(cmd.Context(), client.AcquireLeaseOptions{
				Repository: ws.co.Repository, Paths: paths, Holder: ws.co.Holder, TTL: ttl, Wait: wait,
			})
			if err != nil {
				return err
			}
			ws.co.Leases = append(ws.co.Leases, heldLease{ID: l.GetId(), Token: l.GetFencingToken(), Paths: l.GetPaths(), ExpiresAt: l.GetExpiresAt().AsTime()})
			if err := ws.co.save(); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(l)
			}
			fmt.Fprintf(g.stdout, "leased %s to %s: lease %s, token %d, until %s\n", strings.Join(l.GetPaths(), " "), l.GetHolder(),
				l.GetId(), l.GetFencingToken(), formatTime(l.GetExpiresAt()))
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
			ws, err := g.workspace()
			if err != nil {
				return err
			}
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
					return fmt.Errorf("renew lease %s: %w", l.ID, err)
				}
				ws.co.Leases[i].ExpiresAt = res.GetLease().GetExpiresAt().AsTime()
				fmt.Fprintf(g.stdout, "renewed %s (%s) until %s\n", l.ID, strings.Join(l.Paths, " "), formatTime(res.GetLease().GetExpiresAt()))
			}
			return ws.co.save()
		},
	}
	renew.Flags().DurationVar(&renewTTL, "ttl", 0, "new lease time from now (default 5m)")

	release := &cobra.Command{
		Use:   "release [LEASE_ID...]",
		Short: "release the checkout's leases (all, or the ones named)",
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := g.workspace()
			if err != nil {
				return err
			}
			kept := ws.co.Leases[:0]
			var firstErr error
			for _, l := range ws.co.Leases {
				if !selected(l.ID, args) {
					kept = append(kept, l)
					continue
				}
				_, err := ws.c.Leases.ReleaseLease(cmd.Context(), &agwpv1.ReleaseLeaseRequest{LeaseId: l.ID, FencingToken: l.Token})
				switch {
				case err == nil:
					fmt.Fprintf(g.stdout, "released %s (%s)\n", l.ID, strings.Join(l.Paths, " "))
				case client.IsLostClaim(err):
					// Broken, or expired and given to someone else: it is not ours to keep either way.
					fmt.Fprintf(g.stdout, "dropped %s (%s): %s\n", l.ID, strings.Join(l.Paths, " "), Explain(err))
				default:
					kept = append(kept, l)
					if firstErr == nil {
						firstErr = fmt.Errorf("release lease %s: %w", l.ID, err)
					}
				}
			}
			ws.co.Leases = kept
			if err := ws.co.save(); err != nil {
				return err
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
			ws, err := g.workspace()
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
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", strings.Join(l.GetPaths(), " "), l.GetHolder(), l.GetFencingToken(),
			strings.ToLower(strings.TrimPrefix(l.GetState().String(), "LEASE_STATE_")), left, l.GetId())
	}
	_ = tw.Flush()
}

func newIntegrateCmd(g *globals) *cobra.Command {
	var message string
	var noWait bool
	cmd := &cobra.Command{
		Use:   "integrate -m MESSAGE",
		Short: "send the checkout's edits to the mainline under the leases it holds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if message == "" {
				return fmt.Errorf("-m: say what the change does")
			}
			ws, err := g.workspace()
			if err != nil {
				return err
			}
			edits, err := ws.co.localEdits()
			if err != nil {
				return err
			}
			if len(edits) == 0 {
				fmt.Fprintln(g.stdout, "nothing to integrate: no local edits")
				return nil
			}
			if len(ws.co.Leases) == 0 {
				return fmt.Errorf("no leases held in this checkout: `ag lease acquire PATH...` the files you edited (%s)", editPaths(edits))
			}
			changes := make([]client.FileChange, 0, len(edits))
			for _, e := range edits {
				fc := client.FileChange{Path: e.path, Delete: e.kind == "deleted"}
				if !fc.Delete {
					fc.LocalPath = filepath.Join(ws.co.root, filepath.FromSlash(e.path))
				}
				changes = append(changes, fc)
			}
			change, err := ws.c.IntegrateFiles(cmd.Context(), client.IntegrateOptions{
				Repository: ws.co.Repository, BaseRevision: ws.co.BaseRevision, Holder: ws.co.Holder,
				FencingTokens: ws.co.tokens(), Message: message, Changes: changes,
			})
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
					return fmt.Errorf("integrated as %s, but updating the checkout failed: %w (run ag sync)", change.GetIntegratedRevision(), err)
				}
			}
			if g.json {
				if err := g.printJSON(change); err != nil {
					return err
				}
				if s := change.GetState(); s == agwpv1.ChangeState_CHANGE_STATE_REJECTED || s == agwpv1.ChangeState_CHANGE_STATE_CANCELLED {
					return fmt.Errorf("change %s was %s", change.GetId(), changeStateName(s))
				}
				return nil
			}
			switch change.GetState() {
			case agwpv1.ChangeState_CHANGE_STATE_INTEGRATED:
				fmt.Fprintf(g.stdout, "change %s integrated: %d paths, mainline %s\n", change.GetId(), len(change.GetPaths()), change.GetIntegratedRevision())
				if d := change.GetAttestationDigest(); d != "" {
					fmt.Fprintf(g.stdout, "validated: attestation %s\n", d)
				}
			case agwpv1.ChangeState_CHANGE_STATE_REJECTED, agwpv1.ChangeState_CHANGE_STATE_CANCELLED:
				fmt.Fprintf(g.stdout, "change %s %s: %d paths; the mainline did not move\n", change.GetId(), changeStateName(change.GetState()), len(change.GetPaths()))
				if change.GetReason() != "" {
					fmt.Fprintf(g.stdout, "reason: %s\n", change.GetReason())
				}
				return fmt.Errorf("change %s was %s; your edits are still in the checkout", change.GetId(), changeStateName(change.GetState()))
			default:
				fmt.Fprintf(g.stdout, "change %s %s: %d paths (follow it: ag change show --wait %s)\n", change.GetId(), changeStateName(change.GetState()), len(change.GetPaths()), change.GetId())
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&message, "message", "m", "", "what the change does (required)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "print the change and return without waiting for its outcome")
	return cmd
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

// syncCheckout brings the checkout to revision (the mainline when empty) without touching local
// edits: it refuses, naming the files, when the revision changed a file edited locally, or when
// something of the user's stands where the revision has a file or a directory. Refused, it has
// changed nothing.
func syncCheckout(ctx context.Context, ws *workspace, revision string) (int, error) {
	tree, err := ws.c.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: ws.co.Repository, Revision: revision})
	if err != nil {
		return 0, err
	}
	target, err := treeFiles(tree.GetEntries())
	if err != nil {
		return 0, err
	}
	edits, err := ws.co.localEdits()
	if err != nil {
		return 0, err
	}
	local := map[string]localEdit{}
	for _, e := range edits {
		local[e.path] = e
	}
	var writes, deletes []string
	var clobbered []string
	consider := func(p string) {
		want, inTarget := target[p]
		base, inBase := ws.co.Files[p]
		if inTarget == inBase && want == base {
			return // unchanged upstream
		}
		if e, edited := local[p]; edited {
			// A local edit equal to the new content is not clobbered by taking it.
			if !(inTarget && e.kind != "deleted" && e.digest == want) && !(!inTarget && e.kind == "deleted") {
				clobbered = append(clobbered, p)
				return
			}
		}
		if inTarget {
			writes = append(writes, p)
		} else {
			deletes = append(deletes, p)
		}
	}
	for p := range target {
		consider(p)
	}
	for p := range ws.co.Files {
		if _, ok := target[p]; !ok {
			consider(p)
		}
	}
	if len(clobbered) > 0 {
		sort.Strings(clobbered)
		return 0, fmt.Errorf("the mainline changed files you edited locally; nothing was changed. Integrate, move aside or revert these first: %s", strings.Join(clobbered, ", "))
	}
	sort.Strings(writes)
	sort.Strings(deletes)
	root, err := os.OpenRoot(ws.co.root)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	deleting := make(map[string]bool, len(deletes))
	for _, p := range deletes {
		deleting[p] = true
	}
	blocked, err := inTheWay(root, writes, deleting)
	if err != nil {
		return 0, err
	}
	if len(blocked) > 0 {
		return 0, fmt.Errorf("the mainline has files or directories where your checkout has something ag did not write; nothing was changed. Move these aside first: %s", strings.Join(blocked, ", "))
	}
	// Every blob before the first change on disk, so a failing server leaves the checkout as it was.
	contents := make(map[string][]byte, len(writes))
	for _, p := range writes {
		if contents[p], err = ws.c.Blob(ctx, target[p]); err != nil {
			return 0, err
		}
	}
	// Deletes first: a file the mainline turned into a directory must go before what is written
	// under it, and the files of a directory it turned into a file before that file.
	for _, p := range deletes {
		if err := removeFile(root, p); err != nil {
			return 0, err
		}
	}
	for _, p := range writes {
		if info, err := lstatThroughDirs(root, p); err != nil {
			return 0, err
		} else if info != nil && info.IsDir() {
			// Emptied by the deletes above (inTheWay made sure), but for directories that never
			// held a file.
			if err := removeEmptyDirs(root, p); err != nil {
				return 0, err
			}
		}
		if err := writeFile(root, p, contents[p]); err != nil {
			return 0, err
		}
	}
	ws.co.BaseRevision = tree.GetRevision()
	ws.co.Files = target
	return len(writes) + len(deletes), ws.co.saveIn(root)
}

// inTheWay answers, described for a message, what stands where writes must go and is not ag's to
// remove: a symbolic link or special file on the way to a write, a file of the user's where the
// mainline now has a directory, and, under a directory where the mainline now has a file,
// anything but the files this sync deletes (a file the user added, a nested .git).
func inTheWay(root *os.Root, writes []string, deleting map[string]bool) ([]string, error) {
	var blocked []string
	seen := map[string]bool{}
	block := func(p, why string) {
		if !seen[p] {
			seen[p] = true
			blocked = append(blocked, p+" ("+why+")")
		}
	}
	for _, p := range writes {
		if err := checkWayTo(root, p, deleting, block); err != nil {
			return nil, err
		}
	}
	return blocked, nil
}

// checkWayTo reports to block what stands on the way to writing the file p, from the top.
func checkWayTo(root *os.Root, p string, deleting map[string]bool, block func(p, why string)) error {
	segs := strings.Split(p, "/")
	for i := 1; i <= len(segs); i++ {
		at := strings.Join(segs[:i], "/")
		info, err := root.Lstat(filepath.FromSlash(at))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		last := i == len(segs)
		switch {
		case info.IsDir() && !last:
			continue
		case info.IsDir():
			return leftoversUnder(root, at, at, deleting, block)
		case info.Mode().IsRegular() && (last || deleting[at]):
			// Overwritten under the conflict rules, or deleted before the write.
		case info.Mode().IsRegular():
			block(at, "a file of yours where the mainline now has a directory")
		default:
			block(at, describeMode(info.Mode())+", which ag neither writes through nor replaces")
		}
		return nil
	}
	return nil
}

// leftoversUnder reports to block what under dir, in the directory where the mainline now has
// the file file, would remain once the files in deleting are gone.
func leftoversUnder(root *os.Root, file, dir string, deleting map[string]bool, block func(p, why string)) error {
	entries, err := readDir(root, dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := dir + "/" + e.Name()
		switch {
		case e.IsDir():
			if _, reserved := repo.ReservedSegment(e.Name()); reserved {
				block(p, "a directory no repository may hold, where the mainline now has the file "+file)
				continue
			}
			if err := leftoversUnder(root, file, p, deleting, block); err != nil {
				return err
			}
		case e.Type().IsRegular() && deleting[p]:
		case e.Type().IsRegular():
			block(p, "a file of yours, where the mainline now has the file "+file)
		default:
			block(p, describeMode(e.Type())+", where the mainline now has the file "+file)
		}
	}
	return nil
}

func newSyncCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "sync",
		Short: "bring the checkout to the mainline, keeping local edits (refuses when it would overwrite one)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, err := g.workspace()
			if err != nil {
				return err
			}
			before := ws.co.BaseRevision
			n, err := syncCheckout(cmd.Context(), ws, "")
			if err != nil {
				return err
			}
			if ws.co.BaseRevision == before {
				fmt.Fprintf(g.stdout, "already at the mainline %s\n", before)
				return nil
			}
			fmt.Fprintf(g.stdout, "synced to %s: %d files updated\n", ws.co.BaseRevision, n)
			return nil
		},
	}
}

func newStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "local edits, leases held with time left, and the mainline head",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, err := g.workspace()
			if err != nil {
				return err
			}
			edits, err := ws.co.localEdits()
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
			w := g.stdout
			fmt.Fprintf(w, "repository %s, checkout of %s as %s\n", ws.co.Repository, ws.co.BaseRevision, ws.co.Holder)
			if head := r.GetRepository().GetMainline(); head == ws.co.BaseRevision {
				fmt.Fprintf(w, "mainline %s: up to date\n", head)
			} else {
				fmt.Fprintf(w, "mainline %s: it moved on since your checkout; ag sync brings it in\n", head)
			}
			if len(edits) == 0 {
				fmt.Fprintln(w, "no local edits")
			} else {
				fmt.Fprintln(w, "local edits:")
				for _, e := range edits {
					fmt.Fprintf(w, "  %-9s %s\n", e.kind, e.path)
				}
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

// heldBy answers the holder filter of this checkout's leases: its principal's, any label (the
// server knows the principal; the checkout knows the label).
func heldBy(ctx context.Context, ws *workspace) string {
	who, err := ws.c.Admin.WhoAmI(ctx, &agwpv1.WhoAmIRequest{})
	if err != nil {
		return ""
	}
	return who.GetPrincipal().GetName() + "|" + ws.co.Holder
}
