package mcp

import (
	"encoding/json"
	"strings"
	"testing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// TestCandidateLaneShown ensures a candidate of a policy lane says so in the MCP view of a
// change, as the command line does wherever it shows candidates (internal/cli's
// TestCandidateLaneShown).
func TestCandidateLaneShown(t *testing.T) {
	t.Parallel()
	web := &agwpv1.Candidate{Id: "cnd_w", State: agwpv1.CandidateState_CANDIDATE_STATE_VALIDATING, Lane: "web",
		Changes: []string{"chg_1"}, ParentRevision: "rev_m", Position: 1, Workers: []string{"ci|w1"}, Progress: "npm test"}
	root := &agwpv1.Candidate{Id: "cnd_r", State: agwpv1.CandidateState_CANDIDATE_STATE_PASSED,
		Changes: []string{"chg_2", "chg_3"}, ParentRevision: "rev_m", Position: 2}

	b, err := json.Marshal(newChangeView(&agwpv1.Change{Id: "chg_1", Candidate: web, History: []*agwpv1.Candidate{root, web}}))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"candidate":{"id":"cnd_w","state":"validating","lane":"web"`) ||
		strings.Count(string(b), `"lane"`) != 2 {
		t.Errorf("MCP change view %s: want lane web on cnd_w, and none on cnd_r", b)
	}
}
