package checkout

import (
	"context"
	"strings"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

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
