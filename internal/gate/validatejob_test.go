package gate

import (
	"strings"
	"testing"

	"github.com/ag-coord/ag/agwp"
	"github.com/ag-coord/ag/internal/store"
)

// TestValidateJobNamesTheCandidateTree ensures the validate job's payload names the
// candidate's git tree id, and its tree digest only when the candidate has one, and that a
// worker reads it back.
func TestValidateJobNamesTheCandidateTree(t *testing.T) {
	t.Parallel()
	const gitTree = "89abcdef0123456789abcdef0123456789abcdef"
	tree := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	policy, _, err := ParsePolicy([]byte(`{"command":["make","check"],"timeout":"1m0s"}`))
	if err != nil {
		t.Fatal(err)
	}
	change := store.Change{ID: "chg_1", Repository: "shop", Holder: "alice|w1"}
	for _, candidate := range []store.Revision{
		{ID: "rev_42", GitTree: gitTree},
		{ID: "rev_42", GitTree: gitTree, TreeDigest: tree},
		{ID: "rev_42", TreeDigest: tree}, // a store that does not know git trees
	} {
		job := validateJob(policy, nil, change, candidate, "", store.Revision{ID: "rev_41"})
		if job.Kind != agwp.KindValidate || job.UniqueKey != "validate:chg_1:rev_42" {
			t.Errorf("job = %+v", job)
		}
		p, err := agwp.ParseValidatePayloadJSON(job.Payload)
		if err != nil {
			t.Fatalf("candidate %+v: payload %s: %v", candidate, job.Payload, err)
		}
		if p.GitTree != candidate.GitTree || p.TreeDigest != candidate.TreeDigest || p.CandidateRevision != "rev_42" ||
			p.Repository != "shop" || p.Change != "chg_1" || strings.Join(p.Command, " ") != "make check" || p.Timeout != "1m0s" {
			t.Errorf("candidate %+v: payload %+v", candidate, p)
		}
		if candidate.TreeDigest == "" && strings.Contains(string(job.Payload), "tree_digest") {
			t.Errorf("a payload without a tree digest names one: %s", job.Payload)
		}
	}
}
