package gate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/store"
)

// TestDecideRefusesWeakerEvidenceThanThePolicyAsks ensures a pass lands only when its run was
// as closed as the job's policy asks: in the sandbox, with no more network than asked. A pass
// of a run without a sandbox, with the worker's own network, or of a worker too old to say,
// is a rejection naming the worker and the flag; a policy that takes any run takes them all,
// and jobs enqueued before policies asked keep their rule.
func TestDecideRefusesWeakerEvidenceThanThePolicyAsks(t *testing.T) {
	t.Parallel()
	const gitTree = "89abcdef0123456789abcdef0123456789abcdef"
	start := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	attestation := func(result, isolation, network string) *store.Attestation {
		return signedStored(t, attest.Validation{
			Repository: "shop", Revision: "rev_42", GitTree: gitTree, Result: result,
			Command: []string{"go", "test", "./..."}, JobID: "job_7", ClaimNumber: 1, Worker: "ci|w1",
			StartedAt: start, FinishedAt: start.Add(time.Second), LogDigest: "sha256:" + strings.Repeat("cd", 32),
			Isolation: isolation, Network: network, ExitCode: map[string]int{attest.ResultPassed: 0, attest.ResultFailed: 1}[result],
		})
	}
	job := func(payload string) store.Job {
		return store.Job{ID: "job_7", State: store.JobCompleted, ClaimNumber: 1, Payload: []byte(payload)}
	}
	closed := job(`{"network":"none","isolation":"sandbox"}`)
	egress := job(`{"network":"egress","isolation":"sandbox"}`)
	anyRun := job(`{"network":"none","isolation":"none"}`)
	legacy := job(`{}`)
	const bw, unsandboxed = attest.IsolationBubblewrap, attest.IsolationNone
	pass := attest.ResultPassed
	change := store.Change{ID: "chg_1", Repository: "shop"}
	candidate := store.Revision{ID: "rev_42", GitTree: gitTree}

	for _, c := range []struct {
		name string
		job  store.Job
		att  *store.Attestation
		want []string // nil: a pass
	}{
		{"sandboxed, no network", closed, attestation(pass, bw, attest.NetworkNone), nil},
		{"the worker's own network", closed, attestation(pass, bw, attest.NetworkShared),
			[]string{"the pass of worker ci|w1 is weaker evidence than the policy of shop asks", "ag-worker --sandbox-network shared", "the policy gives no network", "restart that worker without --sandbox-network shared", "ag repo set-validation shop --isolation none"}},
		{"no sandbox", closed, attestation(pass, unsandboxed, attest.NetworkShared),
			[]string{"worker ci|w1", "its run had no sandbox (ag-worker --unsafe-no-sandbox)"}},
		{"egress where none was asked", closed, attestation(pass, bw, attest.NetworkEgress),
			[]string{"its run had network egress, and the policy gives no network"}},
		{"a worker that does not say its network", closed, attestation(pass, bw, ""),
			[]string{"it does not say which network its run had; upgrade that ag-worker"}},
		{"a worker that does not say its isolation", closed, attestation(pass, "", ""),
			[]string{"it does not say how its run was isolated; upgrade that ag-worker"}},
		{"egress asked, egress given", egress, attestation(pass, bw, attest.NetworkEgress), nil},
		{"egress asked, none given", egress, attestation(pass, bw, attest.NetworkNone), nil},
		{"egress asked, the worker's network given", egress, attestation(pass, bw, attest.NetworkShared),
			[]string{"--sandbox-network shared", "the policy gives no network but its egress proxy"}},
		{"any run taken", anyRun, attestation(pass, unsandboxed, attest.NetworkShared), nil},
		{"a job enqueued before policies asked", legacy, attestation(pass, "", ""), nil},
		{"a failure of an open run is a failure", closed, attestation(attest.ResultFailed, bw, attest.NetworkShared),
			[]string{"validation failed: `go test ./...` exited with status 1 (worker ci|w1)"}},
	} {
		got := gate.Decide(change, candidate, c.job, c.att)
		switch {
		case c.want == nil && got.Outcome != gate.VerdictPass:
			t.Errorf("%s: verdict %+v, want a pass", c.name, got)
		case c.want != nil && got.Outcome != gate.VerdictReject:
			t.Errorf("%s: verdict %+v, want a rejection", c.name, got)
		case c.want != nil:
			for _, w := range c.want {
				if !strings.Contains(got.Reason, w) {
					t.Errorf("%s: reason %q lacks %q", c.name, got.Reason, w)
				}
			}
		}
	}
}

// TestPolicyTakesIsolationAndNetwork ensures the policy's network and isolation take the two
// values each has, and refuse the rest naming the field.
func TestPolicyTakesIsolationAndNetwork(t *testing.T) {
	t.Parallel()
	p, err := gate.NewPolicy([]string{"true"}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"", "none", "egress"} {
		if _, err := p.WithNetwork(ok); err != nil {
			t.Errorf("WithNetwork(%q): %v", ok, err)
		}
	}
	for _, ok := range []string{"", "sandbox", "none"} {
		if _, err := p.WithIsolation(ok); err != nil {
			t.Errorf("WithIsolation(%q): %v", ok, err)
		}
	}
	if _, err := p.WithNetwork("shared"); err == nil || !strings.HasPrefix(err.Error(), "network: ") {
		t.Errorf("WithNetwork(shared) = %v, want a refusal of network", err)
	}
	if _, err := p.WithIsolation("bubblewrap"); err == nil || !strings.HasPrefix(err.Error(), "isolation: ") {
		t.Errorf("WithIsolation(bubblewrap) = %v, want a refusal of isolation", err)
	}
}
