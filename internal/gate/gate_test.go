package gate_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/store"
)

// stored answers the stored form of an envelope file of internal/attest/testdata.
func stored(t *testing.T, name string) *store.Attestation {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "attest", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return &store.Attestation{Digest: "sha256:" + strings.Repeat("0", 64), Envelope: data}
}

// TestDecideReadsBothStatementForms ensures Decide finds the tree, the job and the claim
// number in attestations signed now (ag's fields in the "run" configuration entry) and in
// those stored before (ag's fields in the predicate itself), and refuses another claim.
func TestDecideReadsBothStatementForms(t *testing.T) {
	t.Parallel()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tree := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	env, err := attest.NewSigner(priv).SignValidation(context.Background(), attest.Validation{
		Repository: "shop", Revision: "rev_42", TreeDigest: tree, Result: attest.ResultPassed,
		Command: []string{"go", "test", "./..."}, JobID: "job_7", ClaimNumber: 2, Worker: "ci|w1",
		StartedAt: start, FinishedAt: start.Add(time.Second), LogDigest: "sha256:" + strings.Repeat("cd", 32),
		Isolation: attest.IsolationBubblewrap,
	})
	if err != nil {
		t.Fatal(err)
	}
	current, _, err := attest.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	change := store.Change{ID: "chg_1", Repository: "shop"}
	candidate := store.Revision{ID: "rev_42", TreeDigest: tree}
	job := store.Job{ID: "job_7", State: store.JobCompleted, Attempts: 2}

	for name, att := range map[string]*store.Attestation{
		"signed now":    {Digest: "sha256:" + strings.Repeat("1", 64), Envelope: current},
		"stored before": stored(t, "legacy-passed.att.json"),
	} {
		if got := gate.Decide(change, candidate, job, att); got.Outcome != store.VerdictPass {
			t.Errorf("%s: verdict %+v, want a pass", name, got)
		}
		stale := job
		stale.Attempts = 3
		if got := gate.Decide(change, candidate, stale, att); got.Outcome != store.VerdictReject || !strings.Contains(got.Reason, "claim 2") {
			t.Errorf("%s, a later claim: verdict %+v, want a rejection naming claim 2", name, got)
		}
	}

	failed := store.Job{ID: "job_8", State: store.JobCompleted, Attempts: 1}
	got := gate.Decide(change, store.Revision{ID: "rev_43", TreeDigest: "sha256:" + strings.Repeat("fedcba9876543210", 4)}, failed, stored(t, "legacy-failed-no-isolation.att.json"))
	if got.Outcome != store.VerdictReject || !strings.Contains(got.Reason, "`make check` timed out after 1m0s (worker ci|w2)") {
		t.Errorf("a failed validation stored before: verdict %+v", got)
	}
}
