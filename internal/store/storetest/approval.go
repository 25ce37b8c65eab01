package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

// testProtectedLandsOnlyApproved: a change that touches a protected path and passes waits out
// of the queue, unapproved, while the changes behind it land; approved, it is validated again
// in its place and lands with its approver in the commit. One approved before its pass lands
// on that pass.
func testProtectedLandsOnlyApproved(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	g := newGate()
	g.protected = []string{"ci/", "test.sh"}
	r := b.createPolicyRepo(t, "web")
	la := b.acquire(t, "web", alice, time.Hour, "test.sh")
	lb := b.acquire(t, "web", bob, time.Hour, "src/b.go")
	script := b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{la.FencingToken}, put("test.sh", "exit 0")))
	code := b.queue(t, integrateParams("web", r.Mainline, bob, []uint64{lb.FencingToken}, put("src/b.go", "b1")))
	v1 := b.advance(t, g, "web", step{script.ID, store.ChangeValidating})[0]
	b.passJob(t, v1.JobID)
	g.setVerdict(passWhenAttested)

	b.clk.Advance(time.Minute)
	got := b.advance(t, g, "web", step{script.ID, store.ChangeQueued}, step{script.ID, store.ChangeAwaitingApproval},
		step{code.ID, store.ChangeValidating})
	if m := b.repository(t, "web").Mainline; m != r.Mainline {
		t.Fatalf("the mainline moved to %s for a change to a protected path nobody approved", m)
	}
	if want := "it changes the protected path test.sh, so it lands once a reviewer approves it: ag change approve " + script.ID; !strings.Contains(got[1].Reason, want) {
		t.Fatalf("the waiting change's reason is %q, want it to say %q", got[1].Reason, want)
	}
	// The change behind it was built without it, on the mainline.
	b.wantCandidate(t, got[2], got[2].CandidateRevision, r.Mainline, map[string]string{"src/b.go": "b1"})
	waiting, _, err := b.rs.ListChanges(b.ctx, store.ListChangesParams{Repository: "web", AwaitingApproval: true})
	if err != nil || len(waiting) != 1 || waiting[0].ID != script.ID || waiting[0].State != store.ChangeAwaitingApproval {
		t.Fatalf("ListChanges(awaiting approval) = %v, %v; want the one waiting change %s", waiting, err, script.ID)
	}
	// An advance leaves it where it is until someone approves it.
	b.passJob(t, got[2].JobID)
	b.advance(t, g, "web", step{code.ID, store.ChangeIntegrated})
	b.advance(t, g, "web")

	b.clk.Advance(time.Minute)
	approved, err := b.rs.ApproveChange(b.ctx, script.ID, "carol")
	if err != nil {
		t.Fatalf("ApproveChange(%s): %v", script.ID, err)
	}
	if approved.State != store.ChangeQueued || approved.ApprovedBy != "carol" || !approved.ApprovedAt.Equal(b.clk.Now()) {
		t.Fatalf("ApproveChange = %s, approved by %q at %v; want queued, by carol at %v", approved.State, approved.ApprovedBy, approved.ApprovedAt, b.clk.Now())
	}
	assertFields(t, "GetChange after ApproveChange", b.change(t, script.ID), approved)
	v2 := b.advance(t, g, "web", step{script.ID, store.ChangeValidating})[0]
	b.passJob(t, v2.JobID)
	landed := b.advance(t, g, "web", step{script.ID, store.ChangeIntegrated})[0]
	rev := b.revision(t, "web", landed.IntegratedRevision)
	b.wantCommit(t, rev, script.Message, "Ag-Approved-By: carol", "Ag-Attestation: "+landed.AttestationDigest)

	// Approved before its pass: it lands on that pass.
	lc := b.acquire(t, "web", alice, time.Hour, "ci/")
	early := b.queue(t, integrateParams("web", landed.IntegratedRevision, alice, []uint64{lc.FencingToken}, put("ci/lint.sh", "lint")))
	if _, err := b.rs.ApproveChange(b.ctx, early.ID, "ops"); err != nil {
		t.Fatalf("ApproveChange(%s) while queued: %v", early.ID, err)
	}
	v3 := b.advance(t, g, "web", step{early.ID, store.ChangeValidating})[0]
	b.passJob(t, v3.JobID)
	b.advance(t, g, "web", step{early.ID, store.ChangeIntegrated})

	if _, err := b.rs.ApproveChange(b.ctx, early.ID, "carol"); !errors.Is(err, store.ErrFailedPrecondition) {
		t.Fatalf("ApproveChange of an integrated change: %v, want ErrFailedPrecondition", err)
	}
	if _, err := b.rs.ApproveChange(b.ctx, store.NewID("chg"), "carol"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ApproveChange of an unknown change: %v, want ErrNotFound", err)
	}
}
