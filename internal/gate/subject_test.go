package gate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/store"
)

// TestDecideBindsTheSubjectName ensures a pass of the candidate's tree lands only when its
// statement names the candidate's repository and revision too: the signed statement is the
// record of what landed, as the server required when it stored it.
func TestDecideBindsTheSubjectName(t *testing.T) {
	t.Parallel()
	const gitTree = "89abcdef0123456789abcdef0123456789abcdef"
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	attestation := func(repository, revision string) *store.Attestation {
		return signedStored(t, attest.Validation{
			Repository: repository, Revision: revision, GitTree: gitTree, Result: attest.ResultPassed,
			Command: []string{"go", "test", "./..."}, JobID: "job_7", ClaimNumber: 1, Worker: "ci|w1",
			StartedAt: start, FinishedAt: start.Add(time.Second), LogDigest: "sha256:" + strings.Repeat("cd", 32),
			Isolation: attest.IsolationBubblewrap,
		})
	}
	change := store.Change{ID: "chg_1", Repository: "shop"}
	candidate := store.Revision{ID: "rev_42", GitTree: gitTree}
	job := store.Job{ID: "job_7", State: store.JobCompleted, ClaimNumber: 1}

	for _, c := range []struct {
		name       string
		att        *store.Attestation
		wantReason string // "" for a pass
	}{
		{"the candidate", attestation("shop", "rev_42"), ""},
		{"another revision of the same tree", attestation("shop", "rev_41"), "the attestation is about shop@rev_41, not the candidate shop@rev_42"},
		{"another repository", attestation("mall", "rev_42"), "the attestation is about mall@rev_42, not the candidate shop@rev_42"},
	} {
		got := gate.Decide(change, candidate, job, c.att)
		switch {
		case c.wantReason == "" && got.Outcome != gate.VerdictPass:
			t.Errorf("%s: verdict %+v, want a pass", c.name, got)
		case c.wantReason != "" && (got.Outcome != gate.VerdictReject || got.Reason != c.wantReason):
			t.Errorf("%s: verdict %+v, want a rejection: %s", c.name, got, c.wantReason)
		}
	}
}
