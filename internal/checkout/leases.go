package checkout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/termsafe"
)

// LeaseRefusedError is an AcquireLease refused because other holders lease overlapping paths.
// It carries what was found leased after the refusal, so that the caller names who holds what
// instead of repeating the server's words; Overlaps is empty when those leases went meanwhile.
type LeaseRefusedError struct {
	Overlaps []LeaseOverlap
	Wait     time.Duration // how long the caller was willing to wait
	Waited   time.Duration // how long the server was asked for
	Err      error         // the server's refusal
}

func (e *LeaseRefusedError) Error() string { return "lease refused: " + e.Err.Error() }
func (e *LeaseRefusedError) Unwrap() error { return e.Err }

// Explain words the refusal by what is actually leased: the active leases of others that
// overlap the paths asked for, each by the path it holds, its holder and its expiry, and how
// long the caller waited. When those leases went meanwhile, it says the server's own words,
// as serverWords puts them. Text the server sent is escaped for a terminal (termsafe.Line):
// the error is printed whole, newlines kept.
func (e *LeaseRefusedError) Explain(serverWords func(error) string) string {
	var held []string
	for _, o := range e.Overlaps {
		l := o.Lease
		line := fmt.Sprintf("%s is leased to %s (lease %s, token %d) until %s", termsafe.Line(o.Path), termsafe.Line(l.GetHolder()),
			termsafe.Line(l.GetId()), l.GetFencingToken(), l.GetExpiresAt().AsTime().UTC().Format(time.RFC3339))
		switch {
		case o.Path == o.Asked:
		case strings.HasSuffix(o.Asked, "/") && strings.HasPrefix(o.Path, o.Asked):
			line += ", under " + termsafe.Line(o.Asked) + " which you asked for"
		default:
			line += ", which covers " + termsafe.Line(o.Asked)
		}
		held = append(held, line)
	}
	msg := strings.Join(held, "; ")
	if msg == "" {
		msg = serverWords(e.Err)
	}
	if e.Wait > 0 {
		return msg + fmt.Sprintf("; waited %s", e.Waited.Round(100*time.Millisecond))
	}
	return msg + "; retry later, or wait for it with --wait 60s"
}

// LeaseOverlap is another holder's active lease on a path that overlaps one asked for.
type LeaseOverlap struct {
	Lease *agwpv1.Lease
	Path  string // the path the lease holds
	Asked string // the path asked for, which Path equals, lies under, or covers
}

// AcquireLease leases paths (repository paths, directories as a/) for the checkout's holder,
// waiting up to wait for conflicting leases to go, and records the lease in the checkout. It
// answers how long the server was asked for, which a refusal after a wait must say. A refusal
// for a conflict is a *LeaseRefusedError. ag lease acquire acquires this way.
func (ws *Workspace) AcquireLease(ctx context.Context, paths []string, ttl, wait time.Duration) (*agwpv1.Lease, time.Duration, error) {
	// A submodule is one entry of the tree, leased as such, though its directory is one on
	// disk: RepoPaths names that as a directory.
	base, err := ws.Checkout.BaseFiles()
	if err != nil {
		return nil, 0, err
	}
	paths = slices.Clone(paths)
	for i, p := range paths {
		if f, ok := base[strings.TrimSuffix(p, "/")]; ok && f.Gitlink() {
			paths[i] = strings.TrimSuffix(p, "/")
		}
	}
	start := time.Now()
	l, err := ws.Client.AcquireLease(ctx, client.AcquireLeaseOptions{
		Repository: ws.Checkout.Repository, Paths: paths, Holder: ws.Checkout.Holder, TTL: ttl, Wait: wait,
	})
	waited := time.Since(start)
	if client.IsCode(err, connect.CodeAborted) {
		return nil, waited, &LeaseRefusedError{Overlaps: ws.LeaseOverlaps(ctx, paths), Wait: wait, Waited: waited, Err: err}
	}
	if err != nil {
		return nil, waited, err
	}
	ws.Checkout.Leases = append(ws.Checkout.Leases, HeldLease{ID: l.GetId(), Token: l.GetFencingToken(), Paths: l.GetPaths(), ExpiresAt: l.GetExpiresAt().AsTime()})
	if err := ws.Checkout.Save(); err != nil {
		return nil, waited, err
	}
	return l, waited, nil
}

// LeaseOverlaps answers the active leases of other holders that overlap paths, one entry per
// path of a lease and path asked for, in the server's order. A refusal is explained by what is
// actually leased; when the leases cannot be listed it answers none, and the caller falls back
// on the server's own words.
func (ws *Workspace) LeaseOverlaps(ctx context.Context, paths []string) []LeaseOverlap {
	res, err := ws.Client.Leases.ListLeases(ctx, &agwpv1.ListLeasesRequest{Repository: ws.Checkout.Repository, PageSize: 1000})
	if err != nil {
		return nil
	}
	var out []LeaseOverlap
	mine := HeldBy(ctx, ws)
	for _, l := range res.GetLeases() {
		if l.GetState() != agwpv1.LeaseState_LEASE_STATE_ACTIVE || l.GetHolder() == mine {
			continue
		}
		for _, lp := range l.GetPaths() {
			for _, p := range paths {
				if repo.Overlap(lp, p) {
					out = append(out, LeaseOverlap{Lease: l, Path: lp, Asked: p})
				}
			}
		}
	}
	return out
}

// RenewedLease is one lease RenewLeases renewed: as the checkout holds it, and as the server
// answered it.
type RenewedLease struct {
	Held  HeldLease
	Lease *agwpv1.Lease
}

// RenewLeases renews the checkout's leases that ids name (all when none), for ttl from now (0:
// the server's default), in the checkout's order, and stops at the first the server refuses.
// It updates their expiry in the checkout but does not save it: ag lease renew reports each
// renewal whether or not the state can then be written.
func (ws *Workspace) RenewLeases(ctx context.Context, ids []string, ttl time.Duration) ([]RenewedLease, error) {
	var out []RenewedLease
	for i, l := range ws.Checkout.Leases {
		if !Selected(l.ID, ids) {
			continue
		}
		req := &agwpv1.RenewLeaseRequest{LeaseId: l.ID, FencingToken: l.Token}
		if ttl > 0 {
			req.Ttl = durationpb.New(ttl)
		}
		res, err := ws.Client.Leases.RenewLease(ctx, req)
		if err != nil {
			return out, fmt.Errorf("renew lease %s: %w", l.ID, err)
		}
		ws.Checkout.Leases[i].ExpiresAt = res.GetLease().GetExpiresAt().AsTime()
		out = append(out, RenewedLease{Held: l, Lease: res.GetLease()})
	}
	return out, nil
}

// HeldLeases answers the checkout's leases as the server has them now, in any state: the
// server lists its principal's leases, and only the checkout knows which of them it acquired.
func (ws *Workspace) HeldLeases(ctx context.Context) ([]*agwpv1.Lease, error) {
	res, err := ws.Client.Leases.ListLeases(ctx, &agwpv1.ListLeasesRequest{
		Repository: ws.Checkout.Repository, Holder: HeldBy(ctx, ws), IncludeEnded: true, PageSize: 1000,
	})
	if err != nil {
		return nil, err
	}
	held := map[string]bool{}
	for _, l := range ws.Checkout.Leases {
		held[l.ID] = true
	}
	var mine []*agwpv1.Lease
	for _, l := range res.GetLeases() {
		if held[l.GetId()] {
			mine = append(mine, l)
		}
	}
	return mine, nil
}

// SubmoduleMoves reads --submodule PATH=COMMIT values (PATH as other paths, from dir) into the
// moves Integrate sends: a submodule is moved, never added or removed, so each PATH must be one
// of the base revision's, and each COMMIT a full git id, which ag cannot look up in another
// repository. A bad value is a *UsageError.
func (c *Checkout) SubmoduleMoves(dir string, specs []string) (map[string]string, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	base, err := c.BaseFiles()
	if err != nil {
		return nil, err
	}
	usage := func(format string, args ...any) error { return &UsageError{Err: fmt.Errorf(format, args...)} }
	moves := map[string]string{}
	for _, f := range specs {
		path, commit, ok := strings.Cut(f, "=")
		if !ok {
			return nil, usage("--submodule %s: want PATH=COMMIT", termsafe.Line(f))
		}
		if !repo.IsGitID(strings.ToLower(commit)) {
			return nil, usage("--submodule %s: %s is not a commit id: give its 40 hex digits", termsafe.Line(f), termsafe.Line(commit))
		}
		ps, err := c.RepoPaths(dir, []string{path})
		if err != nil {
			return nil, err
		}
		commit = strings.ToLower(commit)
		// A submodule's directory is a directory on disk, which RepoPaths names as such.
		p := strings.TrimSuffix(ps[0], "/")
		if f, ok := base[p]; !ok || !f.Gitlink() {
			return nil, usage("--submodule: %s is not a submodule of the checkout's revision: --submodule moves an existing submodule to another commit, the one change of a submodule ag makes (add or remove one with git, and import)", termsafe.Line(p))
		}
		if _, twice := moves[p]; twice {
			return nil, usage("--submodule: %s is named twice", termsafe.Line(p))
		}
		moves[p] = commit
	}
	return moves, nil
}
