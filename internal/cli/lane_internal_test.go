package cli

import (
	"bytes"
	"strings"
	"testing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/repoview"
)

// TestCandidateLaneShown ensures a candidate of a policy lane says so wherever the command line
// shows candidates: a LANE column in the queue (only for a queue with lanes), "lane web" in
// `ag change show` and in the line `ag integrate` prints for a candidate (the MCP view of a
// change is internal/mcp's TestCandidateLaneShown).
func TestCandidateLaneShown(t *testing.T) {
	t.Parallel()
	web := &agwpv1.Candidate{Id: "cnd_w", State: agwpv1.CandidateState_CANDIDATE_STATE_VALIDATING, Lane: "web",
		Changes: []string{"chg_1"}, ParentRevision: "rev_m", Position: 1, Workers: []string{"ci|w1"}, Progress: "npm test"}
	root := &agwpv1.Candidate{Id: "cnd_r", State: agwpv1.CandidateState_CANDIDATE_STATE_PASSED,
		Changes: []string{"chg_2", "chg_3"}, ParentRevision: "rev_m", Position: 2}

	var out bytes.Buffer
	repoview.WriteQueue(&out, &agwpv1.GetQueueResponse{Candidates: []*agwpv1.Candidate{web, root}, Depth: 2, Batch: 2})
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 4 || strings.Fields(lines[1])[3] != "LANE" ||
		strings.Join(strings.Fields(lines[2])[:5], " ") != "1 cnd_w validating web chg_1" ||
		strings.Join(strings.Fields(lines[3])[:5], " ") != "2 cnd_r passed - chg_2,chg_3" {
		t.Errorf("queue with a lane's candidate:\n%s\nwant a LANE column, web for cnd_w and - for cnd_r", out.String())
	}
	out.Reset()
	repoview.WriteQueue(&out, &agwpv1.GetQueueResponse{Candidates: []*agwpv1.Candidate{root}, Depth: 2, Batch: 2})
	if strings.Contains(out.String(), "LANE") || !strings.Contains(out.String(), "  #  CANDIDATE  STATE   CHANGES      ON") {
		t.Errorf("queue without lanes:\n%s\nwant the columns as before lanes", out.String())
	}

	want := "cnd_w validating, lane web, position 1 in the queue, on rev_m, run by ci|w1"
	if got := checkout.DescribeCandidate(web); got != want {
		t.Errorf("ag integrate's candidate line says %q, want %q", got, want)
	}
	if got := checkout.DescribeCandidate(root); strings.Contains(got, "lane") {
		t.Errorf("a candidate of the whole tree is described as %q, naming a lane", got)
	}

	landed := &agwpv1.Candidate{Id: "cnd_w2", State: agwpv1.CandidateState_CANDIDATE_STATE_LANDED, Lane: "web", Changes: []string{"chg_1", "chg_4"}}
	out.Reset()
	printChange(&out, &agwpv1.Change{Id: "chg_1", State: agwpv1.ChangeState_CHANGE_STATE_VALIDATING, Candidate: web,
		History: []*agwpv1.Candidate{landed, web}})
	for _, w := range []string{"in candidate  cnd_w validating, lane web, position 1", "  cnd_w2  landed (lane web, a batch of 2)\n", "  cnd_w  validating (lane web)\n"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("ag change show:\n%s\nwant %q", out.String(), w)
		}
	}

	out.Reset()
	printChange(&out, &agwpv1.Change{Id: "chg_1", State: agwpv1.ChangeState_CHANGE_STATE_INTEGRATED, History: []*agwpv1.Candidate{landed}})
	if !strings.Contains(out.String(), "\nlane          web\n") {
		t.Errorf("ag change show of a change a lane landed:\n%s\nwant its lane", out.String())
	}
	out.Reset()
	printChange(&out, &agwpv1.Change{Id: "chg_1", State: agwpv1.ChangeState_CHANGE_STATE_INTEGRATED, History: []*agwpv1.Candidate{root}})
	if strings.Contains(out.String(), "\nlane ") {
		t.Errorf("ag change show of a change validated on the whole tree:\n%s\nwant no lane", out.String())
	}
}
