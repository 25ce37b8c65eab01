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
	job := store.Job{ID: "job_7", State: store.JobCompleted, ClaimNumber: 2}

	for name, att := range map[string]*store.Attestation{
		"signed now":    {Digest: "sha256:" + strings.Repeat("1", 64), Envelope: current},
		"stored before": stored(t, "legacy-passed.att.json"),
	} {
		if got := gate.Decide(change, candidate, job, att); got.Outcome != gate.VerdictPass {
			t.Errorf("%s: verdict %+v, want a pass", name, got)
		}
		stale := job
		stale.ClaimNumber = 3
		if got := gate.Decide(change, candidate, stale, att); got.Outcome != gate.VerdictReject || !strings.Contains(got.Reason, "claim 2") {
			t.Errorf("%s, a later claim: verdict %+v, want a rejection naming claim 2", name, got)
		}
	}

	failed := store.Job{ID: "job_8", State: store.JobCompleted, ClaimNumber: 1}
	got := gate.Decide(change, store.Revision{ID: "rev_43", TreeDigest: "sha256:" + strings.Repeat("fedcba9876543210", 4)}, failed, stored(t, "legacy-failed-no-isolation.att.json"))
	if got.Outcome != gate.VerdictReject || !strings.Contains(got.Reason, "`make check` timed out after 1m0s (worker ci|w2)") {
		t.Errorf("a failed validation stored before: verdict %+v", got)
	}
}

// signedStored answers the stored form of v signed by a new key.
func signedStored(t *testing.T, v attest.Validation) *store.Attestation {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	env, err := attest.NewSigner(priv).SignValidation(context.Background(), v)
	if err != nil {
		t.Fatal(err)
	}
	data, digest, err := attest.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	return &store.Attestation{Digest: digest, Envelope: data}
}

// TestDecideBindsTheGitTree ensures a candidate with a git tree id passes only on an
// attestation of that git tree (and of its tree digest, when both name one), and that a
// candidate built before git tree ids is still judged by its tree digest.
func TestDecideBindsTheGitTree(t *testing.T) {
	t.Parallel()
	const (
		gitTree      = "89abcdef0123456789abcdef0123456789abcdef"
		otherGitTree = "0000000000000000000000000000000000000001"
	)
	tree := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	otherTree := "sha256:" + strings.Repeat("fedcba9876543210", 4)
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	attestation := func(treeDigest, gitTree string) *store.Attestation {
		return signedStored(t, attest.Validation{
			Repository: "shop", Revision: "rev_42", TreeDigest: treeDigest, GitTree: gitTree, Result: attest.ResultPassed,
			Command: []string{"go", "test", "./..."}, JobID: "job_7", ClaimNumber: 1, Worker: "ci|w1",
			StartedAt: start, FinishedAt: start.Add(time.Second), LogDigest: "sha256:" + strings.Repeat("cd", 32),
			Isolation: attest.IsolationBubblewrap,
		})
	}
	change := store.Change{ID: "chg_1", Repository: "shop"}
	job := store.Job{ID: "job_7", State: store.JobCompleted, ClaimNumber: 1}
	gitCandidate := store.Revision{ID: "rev_42", GitTree: gitTree} // its tree digest is not known in the queue's transaction
	bothCandidate := store.Revision{ID: "rev_42", GitTree: gitTree, TreeDigest: tree}
	oldCandidate := store.Revision{ID: "rev_42", TreeDigest: tree}

	for _, c := range []struct {
		name       string
		candidate  store.Revision
		att        *store.Attestation
		wantReason string // "" for a pass
	}{
		{"git tree and digest", gitCandidate, attestation(tree, gitTree), ""},
		{"the git tree alone", gitCandidate, attestation("", gitTree), ""},
		{"another git tree", gitCandidate, attestation(tree, otherGitTree), "the attestation is about git tree " + otherGitTree + ", not the candidate's " + gitTree},
		{"no git tree", gitCandidate, attestation(tree, ""), "the attestation names no git tree, and the candidate's is " + gitTree},
		{"both named, both the same", bothCandidate, attestation(tree, gitTree), ""},
		{"both named, another digest", bothCandidate, attestation(otherTree, gitTree), "the attestation is about tree " + otherTree + ", not the candidate's " + tree},
		{"both named, the git tree alone", bothCandidate, attestation("", gitTree), ""},
		{"an earlier candidate, its digest", oldCandidate, attestation(tree, gitTree), ""},
		{"an earlier candidate, another digest", oldCandidate, attestation(otherTree, gitTree), "the attestation is about tree " + otherTree + ", not the candidate's " + tree},
		{"an earlier candidate, the git tree alone", oldCandidate, attestation("", gitTree), "the attestation names no tree digest, and the candidate's is " + tree},
		{"a candidate naming no tree", store.Revision{ID: "rev_42"}, attestation("", gitTree), "the candidate rev_42 names neither a git tree nor a tree digest"},
	} {
		got := gate.Decide(change, c.candidate, job, c.att)
		switch {
		case c.wantReason == "" && got.Outcome != gate.VerdictPass:
			t.Errorf("%s: verdict %+v, want a pass", c.name, got)
		case c.wantReason != "" && (got.Outcome != gate.VerdictReject || got.Reason != c.wantReason):
			t.Errorf("%s: verdict %+v, want a rejection: %s", c.name, got, c.wantReason)
		}
	}
}
