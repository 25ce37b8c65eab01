package checkout

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// ReleaseJSON is what `ag lease release --json` prints.
type ReleaseJSON struct {
	Released []json.RawMessage `json:"released"` // the leases released, as the server answered them
	Dropped  []ReleaseDropped  `json:"dropped"`  // leases that were no longer the checkout's
}

// ReleaseDropped is a lease release found broken, or expired and granted to someone else.
type ReleaseDropped struct {
	ID     string   `json:"id"`
	Paths  []string `json:"paths"`
	Reason string   `json:"reason"`
}

func Selected(id string, ids []string) bool {
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

// HeldBy answers the holder filter of this checkout's leases: its principal's, any label (the
// server knows the principal; the checkout knows the label).
func HeldBy(ctx context.Context, ws *Workspace) string {
	who, err := ws.Client.Admin.WhoAmI(ctx, &agwpv1.WhoAmIRequest{})
	if err != nil {
		return ""
	}
	return who.GetPrincipal().GetName() + "|" + ws.Checkout.Holder
}

func JobStateName(s agwpv1.JobState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "JOB_STATE_"))
}

// ParseJobState reads a job state as JobStateName writes it (queued, claimed, ...), so that
// people filter jobs by the words they are shown; false for anything else, the unspecified
// state among them.
func ParseJobState(s string) (agwpv1.JobState, bool) {
	v, ok := agwpv1.JobState_value["JOB_STATE_"+strings.ToUpper(s)]
	if !ok || v == 0 {
		return 0, false
	}
	return agwpv1.JobState(v), true
}

// ListJobs answers up to limit of the jobs req selects, newest first, reading as many pages as
// that takes (each at most the server's 1000), and the token of the page after them, "" when
// there is none: a caller says so rather than show a list cut short as if it were whole.
func ListJobs(ctx context.Context, c *client.Client, req *agwpv1.ListJobsRequest, limit int) (*agwpv1.ListJobsResponse, error) {
	out := &agwpv1.ListJobsResponse{}
	for len(out.Jobs) < limit {
		req.PageSize = int32(min(limit-len(out.Jobs), 1000))
		res, err := c.Jobs.ListJobs(ctx, req)
		if err != nil {
			return nil, err
		}
		out.Jobs = append(out.Jobs, res.GetJobs()...)
		out.NextPageToken = res.GetNextPageToken()
		if res.GetNextPageToken() == "" {
			break
		}
		req.PageToken = res.GetNextPageToken()
	}
	return out, nil
}

// AllPages follows a list method's page tokens to the end and answers every item.
func AllPages[T any](page func(token string) ([]T, string, error)) ([]T, error) {
	var all []T
	token := ""
	for {
		items, next, err := page(token)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next == "" {
			return all, nil
		}
		token = next
	}
}
