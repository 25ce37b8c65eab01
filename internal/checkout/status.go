package checkout

import (
	"context"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// Status is where a checkout stands: its local edits against the base revision, the mainline
// now, and the leases it holds as the server has them.
type Status struct {
	Edits      []Edit
	Conflicted map[string]bool   // the edits that still hold the conflict markers a sync wrote
	Targets    map[string]string // the targets of the links the edits leave, by path
	Submodules []Submodule       // the base revision's, which ag does not fetch
	Mainline   string            // the mainline's revision now
	Leases     []*agwpv1.Lease   // the checkout's leases, in any state (HeldLeases)
}

// Status answers where the checkout stands, all of it read before anything is shown, so that
// ag status prints all of it or, on a failure, nothing.
func (ws *Workspace) Status(ctx context.Context) (*Status, error) {
	var st Status
	var err error
	if st.Edits, err = ws.Checkout.LocalEdits(); err != nil {
		return nil, err
	}
	if st.Conflicted, err = ws.Checkout.Conflicted(st.Edits); err != nil {
		return nil, err
	}
	if st.Targets, err = ws.Checkout.LinkTargets(st.Edits); err != nil {
		return nil, err
	}
	if st.Submodules, err = ws.Checkout.Submodules(); err != nil {
		return nil, err
	}
	r, err := ws.Client.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: ws.Checkout.Repository})
	if err != nil {
		return nil, err
	}
	st.Mainline = r.GetRepository().GetMainline()
	if st.Leases, err = ws.HeldLeases(ctx); err != nil {
		return nil, err
	}
	return &st, nil
}
