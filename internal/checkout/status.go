package checkout

import (
	"context"
	"encoding/json"

	"google.golang.org/protobuf/encoding/protojson"

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

// StatusJSON is what `ag status --json` prints.
type StatusJSON struct {
	Repository   string            `json:"repository"`
	Holder       string            `json:"holder"`       // the checkout's holder label
	BaseRevision string            `json:"baseRevision"` // the revision the local edits are based on
	Mainline     string            `json:"mainline"`     // the mainline head now
	UpToDate     bool              `json:"upToDate"`     // baseRevision is the mainline
	Edits        []EditJSON        `json:"edits"`
	Submodules   []Submodule       `json:"submodules"` // the base revision's, which ag does not fetch
	Leases       []json.RawMessage `json:"leases"`     // the checkout's leases as the server knows them, any state
}

// JSON answers the status of the checkout c as `ag status --json` prints it.
func (st *Status) JSON(c *Checkout) StatusJSON {
	return StatusJSON{
		Repository: c.Repository, Holder: c.Holder, BaseRevision: c.BaseRevision, Mainline: st.Mainline, UpToDate: st.Mainline == c.BaseRevision,
		Edits: EditsJSON(st.Edits, st.Conflicted, st.Targets), Submodules: st.Submodules, Leases: LeasesJSON(st.Leases),
	}
}

// LeasesJSON answers leases as the command line prints the API's messages in its JSON
// shapes: each in protobuf's canonical JSON, an empty list as [].
func LeasesJSON(leases []*agwpv1.Lease) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(leases))
	for _, l := range leases {
		b, err := protojson.Marshal(l)
		if err != nil {
			b = json.RawMessage("null")
		}
		out = append(out, b)
	}
	return out
}
