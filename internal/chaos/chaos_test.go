package chaos_test

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/chaos"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
	"github.com/ag-coord/ag/internal/testutil/syncbuf"
)

// TestChaosShort ensures that a short run of the fault harness, with a fixed seed, injects a
// fault of every kind and finds no invariant violated: three replicas on one PostgreSQL,
// ag-worker processes killed and paused, replicas killed and paused, the database restarted,
// claims and leases expired, and every history check of docs/chaos.md over it.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the fault harness runs for about a minute")
	}
	if err := pgtest.Available(); err != nil {
		if os.Getenv(pgtest.EnvRequire) == "1" {
			t.Fatalf("PostgreSQL is required (%s=1) but unavailable: %v", pgtest.EnvRequire, err)
		}
		t.Skipf("no PostgreSQL: %v (install the PostgreSQL server binaries)", err)
	}
	var out syncbuf.Buffer
	// The children are built without -race (Run builds them with a plain go build), so the
	// run's timing is the product's, not the race detector's.
	rep, err := chaos.Run(t.Context(), chaos.Config{Seed: 7, Duration: 30 * time.Second, Out: &out, Verbose: true, KeepOnViolation: true})
	if err != nil {
		t.Fatalf("the harness could not run: %v\nits output:\n%s", err, out.String())
	}
	summary := rep.String()
	t.Logf("progress:\n%s\nsummary:\n%s", out.String(), summary)
	for _, v := range rep.Violations {
		t.Errorf("violation: %s", v)
	}
	for _, k := range chaos.FaultKinds {
		if rep.Faults[k] == 0 {
			t.Errorf("no %s fault was injected", k)
		}
	}
	for _, e := range rep.FaultErrors {
		t.Errorf("fault not injected: %s", e)
	}
	// The run did what it is for: stale requests were made and refused, and the gate both
	// integrated and rejected changes.
	if rep.StaleRefused == 0 {
		t.Errorf("no request with a superseded claim number or lease token was refused")
	}
	// The batch worker claimed and completed through ClaimJobs and CompleteJobs, whose items
	// the checks above covered as they cover single calls.
	for _, m := range []string{"ClaimJobs", "CompleteJobs"} {
		if !slices.ContainsFunc(rep.Ops, func(c chaos.OpCount) bool { return c.Method == m && c.Calls > 0 && c.Jobs > 0 }) {
			t.Errorf("no %s call with a job was recorded", m)
		}
	}
	if rep.GatedIntegrated == 0 || rep.ValidationFailures == 0 {
		t.Errorf("gated repository: %d changes integrated, %d rejected by a failing validation; want some of each", rep.GatedIntegrated, rep.ValidationFailures)
	}
	if t.Failed() && rep.Kept {
		t.Logf("the run's logs and history are kept in %s", rep.Dir)
	}
}
