package store

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// CheckIntegrateLeases is Integrate's lease check (see IntegrateParams), written once so that
// every backend refuses the same changes and in the same words; each backend reads what it
// needs in its own SQL, and this decides. It answers the *IntegrateRefusal of the first path of
// p.Paths, in their order, whose check fails, or nil.
//
// covering[i] holds the leases among p.FencingTokens that cover p.Paths[i] (repo.FoldCovers), in
// any order; their ID, Holder, FencingToken, State as stored (expiry alone does not refuse)
// and EndedAt are read. A lease may be listed more than once, once for each of its paths that
// covers p.Paths[i], so that a backend that reads lease paths rather than leases need not
// group them: the refusal names each lease once.
//
// laterGrant(i, token) answers the grant with the largest token larger than token, of anyone
// and in any state, whose lease path overlaps p.Paths[i] (repo.FoldOverlap), with that path as
// the lease writes it. It is asked only once the path's lease passed the rest of the check,
// in path order, with that lease's token: a backend can then search an index above the token,
// for one path at a time and only as far as the check goes. An error it answers is answered
// as it is.
func CheckIntegrateLeases(p IntegrateParams, covering [][]Lease, laterGrant func(i int, token uint64) (Grant, bool, error)) error {
	for i, path := range p.Paths {
		var (
			chosen *Lease
			others []string
		)
		for j := range covering[i] {
			l := &covering[i][j]
			if l.Holder != p.Holder {
				others = append(others, fmt.Sprintf("token %d is %s's", l.FencingToken, l.Holder))
				continue
			}
			if chosen == nil || l.FencingToken > chosen.FencingToken {
				chosen = l
			}
		}
		if chosen == nil {
			reason := fmt.Sprintf("not leased by %s among the given tokens %v", p.Holder, p.FencingTokens)
			if len(others) > 0 {
				slices.Sort(others)
				reason += " (" + strings.Join(slices.Compact(others), ", ") + ")"
			}
			return &IntegrateRefusal{Path: path, Reason: reason + ": acquire a lease that covers it"}
		}
		if chosen.State != LeaseActive {
			return &IntegrateRefusal{Path: path, Reason: fmt.Sprintf("lease %s (token %d) was %s at %s",
				chosen.ID, chosen.FencingToken, chosen.State, chosen.EndedAt.UTC().Format(time.RFC3339))}
		}
		g, found, err := laterGrant(i, chosen.FencingToken)
		if err != nil {
			return err
		}
		if found {
			return &IntegrateRefusal{Path: path, Reason: fmt.Sprintf("token %d is stale: superseded by token %d granted to %s on %s",
				chosen.FencingToken, g.Token, g.Holder, g.Path)}
		}
	}
	return nil
}
