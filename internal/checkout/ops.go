package checkout

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/repo"
)

// Workspace is a command's checkout and client.
type Workspace struct {
	Checkout *Checkout
	Client   *client.Client
}

// Open reads the checkout at dir (or a directory above it) as a workspace with the client c.
func Open(ctx context.Context, dir string, c *client.Client) (*Workspace, error) {
	co, err := Find(dir)
	if err != nil {
		return nil, err
	}
	return NewWorkspace(ctx, co, c)
}

// NewWorkspace answers co with the client c, its index first rebuilt if an older ag wrote it.
func NewWorkspace(ctx context.Context, co *Checkout, c *client.Client) (*Workspace, error) {
	ws := &Workspace{Checkout: co, Client: c}
	if err := ws.RebuildOldIndex(ctx); err != nil {
		return nil, err
	}
	return ws, nil
}

// send sends edits to the mainline under the checkout's leases, as one change with
// message. ag integrate and the MCP tool integrate both send this way, after their checks.
// Each path is sent as what the scan found: a file's bytes with its mode, or a link as a link
// (its target, mode 120000), never the content of what it points to. The files are read
// following no symbolic link (checkoutReader), and must hold what the scan found: one swapped
// for a link after the scan (by anyone who can write the checkout) is refused, whether the link
// leads out of the checkout or to another file in it, .git's among them.
// moves are submodules moved to other commits, path → commit, in the same change; claim, when
// set, is the task claim the change carries.
func (ws *Workspace) send(ctx context.Context, edits []Edit, moves map[string]string, message string, claim TaskClaim) (*agwpv1.Change, error) {
	reader, err := openCheckoutReader(ws.Checkout.root)
	if err != nil {
		return nil, err
	}
	defer reader.close()
	changes := make([]client.FileChange, 0, len(edits))
	for _, e := range edits {
		fc := client.FileChange{Path: e.Path, Delete: e.Kind == "deleted"}
		if !fc.Delete {
			if fc.Content, err = reader.readEntry(e.Path, e.Mode); err != nil {
				return nil, fmt.Errorf("%w: integrate again", err)
			}
			if repo.Digest(fc.Content) != e.digest {
				return nil, fmt.Errorf("read %s: it changed since it was scanned; integrate again", e.Path)
			}
			// Only a change of mode says one: "" keeps the mainline's, as an edit of content
			// alone must.
			if e.Mode != e.BaseMode && (e.Kind == "modified" || e.Mode != repo.ModeFile) {
				fc.Mode = e.Mode
			}
		}
		changes = append(changes, fc)
	}
	for _, p := range slices.Sorted(maps.Keys(moves)) {
		changes = append(changes, client.FileChange{Path: p, GitlinkCommit: moves[p]})
	}
	return ws.Client.IntegrateFiles(ctx, client.IntegrateOptions{
		Repository: ws.Checkout.Repository, BaseRevision: ws.Checkout.BaseRevision, Holder: ws.Checkout.Holder,
		FencingTokens: ws.Checkout.tokens(), Message: message, Changes: changes,
		TaskID: claim.TaskID, TaskClaimNumber: claim.Number,
	})
}

// leaseRelease is what became of one lease the checkout released.
type leaseRelease struct {
	Held  HeldLease
	Lease *agwpv1.Lease // the server's answer, when it was released
	Lost  error         // when it was no longer the checkout's (broken, or expired and granted to another)
}

// ReleaseLeases releases the checkout's leases that chosen picks, keeps the others, and saves
// the checkout. A lease the server says is no longer the checkout's is dropped from it all the
// same; on any other error the lease stays, and the first such error is answered once the
// others were tried. ag lease release and the MCP tool lease_release both release this way.
func (ws *Workspace) ReleaseLeases(ctx context.Context, chosen func(HeldLease) bool) ([]leaseRelease, error) {
	var results []leaseRelease
	var firstErr error
	kept := ws.Checkout.Leases[:0]
	for _, l := range ws.Checkout.Leases {
		if !chosen(l) {
			kept = append(kept, l)
			continue
		}
		res, err := ws.Client.Leases.ReleaseLease(ctx, &agwpv1.ReleaseLeaseRequest{LeaseId: l.ID, FencingToken: l.Token})
		switch {
		case err == nil:
			results = append(results, leaseRelease{Held: l, Lease: res.GetLease()})
		case client.IsLostClaim(err):
			// Broken, or expired and given to someone else: it is not ours to keep either way.
			results = append(results, leaseRelease{Held: l, Lost: err})
		default:
			kept = append(kept, l)
			if firstErr == nil {
				firstErr = fmt.Errorf("release lease %s: %w", l.ID, err)
			}
		}
	}
	ws.Checkout.Leases = kept
	if err := ws.Checkout.Save(); err != nil {
		return results, err
	}
	return results, firstErr
}

// EditsUnder answers the edits at or under the repository paths sel ("a/" for a directory).
func EditsUnder(edits []Edit, sel []string) []Edit {
	var out []Edit
	for _, e := range edits {
		if UnderAny(e.Path, sel) {
			out = append(out, e)
		}
	}
	return out
}

// UnderAny reports whether the file p is one of sel or under a directory ("a/") of sel.
func UnderAny(p string, sel []string) bool {
	for _, s := range sel {
		if p == s || strings.HasSuffix(s, "/") && strings.HasPrefix(p, s) {
			return true
		}
	}
	return false
}

func EditPaths(edits []Edit) string {
	ps := make([]string, 0, len(edits))
	for _, e := range edits {
		ps = append(ps, e.Path)
	}
	if len(ps) > 5 {
		return strings.Join(ps[:5], ", ") + fmt.Sprintf(" and %d more", len(ps)-5)
	}
	return strings.Join(ps, ", ")
}

// EditJSON is a local edit in JSON.
type EditJSON struct {
	Path     string `json:"path"`
	Status   string `json:"status"`             // added, modified or deleted
	Conflict bool   `json:"conflict,omitempty"` // holds conflict markers a sync --merge wrote
	Mode     string `json:"mode,omitempty"`     // the local mode: 100644, 100755 or 120000; not for a deletion
	BaseMode string `json:"baseMode,omitempty"` // the base revision's mode; not for an addition
	Target   string `json:"target,omitempty"`   // a link's target, when the edit leaves a link
}

func EditsJSON(edits []Edit, conflicted map[string]bool, targets map[string]string) []EditJSON {
	out := make([]EditJSON, 0, len(edits))
	for _, e := range edits {
		out = append(out, EditJSON{Path: e.Path, Status: e.Kind, Conflict: conflicted[e.Path], Mode: e.Mode, BaseMode: e.BaseMode, Target: targets[e.Path]})
	}
	return out
}
