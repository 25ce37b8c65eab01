package gate

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/agwp"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/store"
)

// TestEntryFilesAreTheScriptsACommandRuns ensures the file a policy's command runs is
// protected without being listed: a change could otherwise rewrite the check that judges it.
func TestEntryFilesAreTheScriptsACommandRuns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		command []string
		want    []string
	}{
		{[]string{"./test.sh"}, []string{"test.sh"}},
		{[]string{"scripts/ci", "--fast"}, []string{"scripts/ci"}},
		{[]string{"sh", "-e", "ci/test.sh", "unit"}, []string{"ci/test.sh"}},
		{[]string{"/usr/bin/python3", "-u", "./check.py"}, []string{"check.py"}},
		{[]string{"bash", "-c", "go test ./..."}, nil},
		{[]string{"python3", "-m", "pytest"}, nil},
		{[]string{"make", "check"}, []string{"GNUmakefile", "makefile", "Makefile"}},
		{[]string{"make", "-f", "build/ci.mk", "check"}, []string{"build/ci.mk"}},
		{[]string{"go", "test", "./..."}, nil},
		{[]string{"/bin/true"}, nil},
		{[]string{"sh", "../outside.sh"}, nil},
	} {
		if got := EntryFiles(tc.command); !slices.Equal(got, tc.want) {
			t.Errorf("EntryFiles(%q) = %q, want %q", tc.command, got, tc.want)
		}
	}
	p, err := NewPolicy([]string{"sh", "ci/test.sh"}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = p.WithProtect([]string{"./go.sum", "ci/", "go.sum"}); err != nil {
		t.Fatal(err)
	}
	if got, want := p.Protected(), []string{"ci/", "ci/test.sh", "go.sum"}; !slices.Equal(got, want) {
		t.Errorf("Protected() = %q, want %q", got, want)
	}
	if _, err := p.WithProtect([]string{"../etc/passwd"}); err == nil || !strings.HasPrefix(err.Error(), "protect[0]") {
		t.Errorf("WithProtect(../etc/passwd) = %v, want a refusal naming protect[0]", err)
	}
}

// TestProtectedTouchedSeesEveryWayToReplaceAPath ensures a change that writes a protected file,
// a file under a protected directory, or a file (or link) where a protected path's directory is
// counts as touching it, and one beside them does not.
func TestProtectedTouchedSeesEveryWayToReplaceAPath(t *testing.T) {
	t.Parallel()
	protected := []string{"ci/", "test.sh", "tools/lint/run.sh"}
	for _, tc := range []struct {
		changed []string
		want    []string
	}{
		{[]string{"src/a.go"}, nil},
		{[]string{"test.sh"}, []string{"test.sh"}},
		{[]string{"ci/deep/x.yml", "src/a.go"}, []string{"ci/"}},
		{[]string{"ci"}, []string{"ci/"}},
		{[]string{"tools"}, []string{"tools/lint/run.sh"}},
		{[]string{"tools/lint"}, []string{"tools/lint/run.sh"}},
		{[]string{"test.sh.bak", "cix/a"}, nil},
	} {
		if got := ProtectedTouched(protected, tc.changed); !slices.Equal(got, tc.want) {
			t.Errorf("ProtectedTouched(%q) = %q, want %q", tc.changed, got, tc.want)
		}
	}
}

// TestValidateJobAsksForTheMainlinesProtectedPaths ensures a candidate's job names the mainline
// revision whose copy of the protected paths the worker must run, and that a lane's job leaves
// out what its view hides (another lane's files), which the mainline's copy would bring back.
func TestValidateJobAsksForTheMainlinesProtectedPaths(t *testing.T) {
	t.Parallel()
	p, err := NewPolicy([]string{"./test.sh"}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	web, err := NewLane("web", []string{"web/"}, []string{"npm", "test"}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	api, err := NewLane("api", []string{"api/"}, []string{"go", "test", "./api/..."}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = p.WithLanes([]Lane{web, api}); err != nil {
		t.Fatal(err)
	}
	if p, err = p.WithProtect([]string{"web/package-lock.json", "api/go.sum", "go.sum"}); err != nil {
		t.Fatal(err)
	}
	change := store.Change{ID: "chg_1", Repository: "shop", Holder: "alice|w1"}
	candidate := store.Revision{ID: "rev_9", GitTree: strings.Repeat("a", 40)}
	mainline := store.Revision{ID: "rev_7", GitTree: strings.Repeat("b", 40)}
	for lane, want := range map[string][]string{
		"":    {"api/go.sum", "go.sum", "test.sh", "web/package-lock.json"},
		"web": {"go.sum", "test.sh", "web/package-lock.json"},
		"api": {"api/go.sum", "go.sum", "test.sh"},
	} {
		job := validateJob(p, p.Protected(), change, candidate, lane, mainline)
		got, err := agwp.ParseValidatePayloadJSON(job.Payload)
		if err != nil {
			t.Fatalf("lane %q: %v", lane, err)
		}
		if got.Protected == nil || got.Protected.Revision != "rev_7" || !slices.Equal(got.Protected.Paths, want) {
			t.Errorf("lane %q: protected = %+v, want %q from rev_7", lane, got.Protected, want)
		}
	}
	plain, err := NewPolicy([]string{"go", "test", "./..."}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if job := validateJob(plain, plain.Protected(), change, candidate, "", mainline); strings.Contains(string(job.Payload), "protected") {
		t.Errorf("a policy that protects nothing asks for protected paths: %s", job.Payload)
	}
}

// TestDecideRefusesAPassOnTheCandidatesOwnScript ensures a pass counts only when the worker
// says it ran exactly the protected paths the job asked for, from exactly that revision: a
// worker that ignored them (too old, or lying by omission) ran the candidate's own copy.
func TestDecideRefusesAPassOnTheCandidatesOwnScript(t *testing.T) {
	t.Parallel()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	gitTree := strings.Repeat("c", 40)
	asked := &agwp.ProtectedFrom{Revision: "rev_7", Paths: []string{"test.sh"}}
	payload, err := json.Marshal(agwp.ValidatePayload{Repository: "shop", CandidateRevision: "rev_9", GitTree: gitTree,
		Command: []string{"./test.sh"}, Timeout: "1m0s", Network: NetworkNone, Isolation: IsolationSandbox, Protected: asked})
	if err != nil {
		t.Fatal(err)
	}
	job := store.Job{ID: "job_1", State: store.JobCompleted, ClaimNumber: 1, Payload: payload}
	start := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		protected *attest.Protected
		want      string // "" for a pass
	}{
		{"as asked", &attest.Protected{Revision: "rev_7", Paths: []string{"test.sh"}}, ""},
		{"none", nil, "ran the candidate's own copy of the protected paths test.sh"},
		{"another revision", &attest.Protected{Revision: "rev_9", Paths: []string{"test.sh"}}, "not test.sh from revision rev_7"},
		{"fewer paths", &attest.Protected{Revision: "rev_7", Paths: []string{"other"}}, "not test.sh from revision rev_7"},
	} {
		env, err := attest.NewSigner(priv).SignValidation(context.Background(), attest.Validation{
			Repository: "shop", Revision: "rev_9", GitTree: gitTree, Result: attest.ResultPassed,
			Command: []string{"./test.sh"}, JobID: "job_1", ClaimNumber: 1, Worker: "ci|w1",
			StartedAt: start, FinishedAt: start.Add(time.Second), LogDigest: "sha256:" + strings.Repeat("cd", 32),
			Isolation: attest.IsolationBubblewrap, Network: attest.NetworkNone, Protected: tc.protected,
		})
		if err != nil {
			t.Fatal(err)
		}
		envelope, _, err := attest.Encode(env)
		if err != nil {
			t.Fatal(err)
		}
		got := Decide(store.Change{ID: "chg_1", Repository: "shop"}, store.Revision{ID: "rev_9", GitTree: gitTree}, job,
			&store.Attestation{Digest: "sha256:" + strings.Repeat("1", 64), Envelope: envelope})
		switch {
		case tc.want == "" && got.Outcome != VerdictPass:
			t.Errorf("%s: %+v, want a pass", tc.name, got)
		case tc.want != "" && (got.Outcome != VerdictReject || !strings.Contains(got.Reason, tc.want)):
			t.Errorf("%s: %+v, want a rejection saying %q", tc.name, got, tc.want)
		}
	}
}
