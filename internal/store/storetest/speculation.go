package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/store"
)

// The parallel gate: several candidates validate at once, each on the one ahead of it, and
// batches of changes validate together (store.RunQueue through AdvanceQueue).

// passUnlessFailed is the gate's rule as a worker's outcome shows it: a job completed with exit
// code 0 and an attestation passes, one completed otherwise fails, a running one is pending.
func passUnlessFailed(job store.Job, att *store.Attestation) gate.Verdict {
	switch {
	case job.State == store.JobCompleted && att != nil && string(job.Result) == `{"exit_code": 0}`:
		return gate.Verdict{Outcome: gate.VerdictPass}
	case job.State == store.JobCompleted:
		return gate.Verdict{Outcome: gate.VerdictReject, Reason: "the tests failed in " + job.ID, Attestation: job.AttestationDigest}
	case job.State.Terminal():
		return gate.Verdict{Outcome: gate.VerdictReject, Reason: "validate job " + string(job.State)}
	default:
		return gate.Verdict{Outcome: gate.VerdictPending}
	}
}

// runner claims validate jobs as a worker would and completes them when told.
type runner struct {
	b       *rbundle
	claimed map[string]store.Job
}

func (b *rbundle) runner() *runner { return &runner{b: b, claimed: map[string]store.Job{}} }

// claimAll claims every claimable validate job.
func (r *runner) claimAll(t *testing.T) {
	t.Helper()
	for _, j := range r.b.claimJobs(t, "runner|w1", time.Hour, 100, "validate") {
		r.claimed[j.ID] = j
	}
}

// finish completes a claimed job, passing or failing, with an attestation.
func (r *runner) finish(t *testing.T, jobID string, passed bool) {
	t.Helper()
	job, ok := r.claimed[jobID]
	if !ok {
		r.claimAll(t)
		if job, ok = r.claimed[jobID]; !ok {
			t.Fatalf("the validate job %s could not be claimed", jobID)
		}
	}
	result := `{"exit_code": 0}`
	if !passed {
		result = `{"exit_code": 1}`
	}
	if _, err := r.b.st.CompleteJob(r.b.ctx, store.CompleteJobParams{JobID: jobID, Holder: "runner|w1",
		ClaimNumber: job.ClaimNumber, Result: []byte(result), Attestation: attestation(jobID, result+" "+jobID)}); err != nil {
		t.Fatalf("CompleteJob(%s): %v", jobID, err)
	}
	delete(r.claimed, jobID)
}

// queueDisjoint queues n changes of alice's, each writing its own file f<i>.go on the mainline
// r, and answers them in queue order.
func (b *rbundle) queueDisjoint(t *testing.T, r store.Repository, n int) []store.Change {
	t.Helper()
	l := b.acquire(t, r.Name, alice, time.Hour, "src/")
	var changes []store.Change
	for i := range n {
		p := integrateParams(r.Name, r.Mainline, alice, []uint64{l.FencingToken}, put(fmt.Sprintf("src/f%d.go", i), fmt.Sprint(i)))
		p.Message = fmt.Sprintf("change %d", i)
		changes = append(changes, b.queue(t, p))
	}
	return changes
}

func (b *rbundle) liveCandidates(t *testing.T, repository string) []store.Candidate {
	t.Helper()
	cands, err := b.rs.ListCandidates(b.ctx, store.ListCandidatesParams{Repository: repository})
	if err != nil {
		t.Fatalf("ListCandidates(%s): %v", repository, err)
	}
	return cands
}

func (b *rbundle) history(t *testing.T, changeID string) []store.Candidate {
	t.Helper()
	cands, err := b.rs.ListCandidates(b.ctx, store.ListCandidatesParams{ChangeID: changeID})
	if err != nil {
		t.Fatalf("ListCandidates(change %s): %v", changeID, err)
	}
	return cands
}

// wantFiles fails the test unless the mainline of repository holds exactly files.
func (b *rbundle) wantFiles(t *testing.T, repository string, files map[string]string) {
	t.Helper()
	m := b.revision(t, repository, b.repository(t, repository).Mainline)
	want := treeOf(files)
	if m.TreeDigest != want.Digest() {
		t.Fatalf("the mainline %s holds %v, want %v", m.ID, m.Tree, want)
	}
}

func steps(changes []store.Change, state store.ChangeState) []step {
	var s []step
	for _, c := range changes {
		s = append(s, step{c.ID, state})
	}
	return s
}

func testSpeculationLandsInOrder(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createPolicyRepo(t, "web")
	g := newGate()
	g.depth = 4
	g.setVerdict(passUnlessFailed)
	cs := b.queueDisjoint(t, r, 6)

	// Four candidates at once, each on the one ahead of it.
	got := b.advance(t, g, "web", steps(cs[:4], store.ChangeValidating)...)
	live := b.liveCandidates(t, "web")
	if len(live) != 4 {
		t.Fatalf("ListCandidates(web) answered %d live candidates, want 4", len(live))
	}
	parent := r.Mainline
	files := map[string]string{}
	for i, c := range got {
		files[fmt.Sprintf("src/f%d.go", i)] = fmt.Sprint(i)
		b.wantCandidate(t, c, c.CandidateRevision, parent, files)
		cand := live[i]
		if cand.ID != c.CandidateID || cand.State != store.CandidateValidating || cand.ParentRevision != parent ||
			cand.Revision != c.CandidateRevision || cand.JobID != c.JobID || !slices.Equal(cand.Changes, []string{c.ID}) {
			t.Fatalf("live candidate %d = %+v; want %s validating change %s on %s", i, cand, c.CandidateID, c.ID, parent)
		}
		parent = c.CandidateRevision
	}
	if pos := b.change(t, cs[4].ID).QueuePosition; pos != 4 {
		t.Fatalf("the fifth change has queue position %d, want 4", pos)
	}

	// The second passes first: it waits for the first, which then lands with it, in order.
	// Waiting, it holds no worker: the fifth change takes its place in the window.
	run := b.runner()
	run.claimAll(t)
	run.finish(t, got[1].JobID, true)
	fifth := b.advance(t, g, "web", step{cs[4].ID, store.ChangeValidating})[0]
	if m := b.repository(t, "web").Mainline; m != r.Mainline {
		t.Fatalf("the mainline moved to %s on a pass behind a pending candidate", m)
	}
	run.finish(t, got[0].JobID, true)
	b.clk.Advance(time.Second)
	landed := b.advance(t, g, "web", step{cs[0].ID, store.ChangeIntegrated}, step{cs[1].ID, store.ChangeIntegrated},
		step{cs[5].ID, store.ChangeValidating})
	landed = append(landed[:2], fifth, landed[2])
	if m := b.repository(t, "web").Mainline; m != got[1].CandidateRevision {
		t.Fatalf("the mainline is %s, want the second candidate %s", m, got[1].CandidateRevision)
	}
	for i := range 2 {
		// Each landed candidate is a commit of its own, naming its own attestation.
		rev := b.revision(t, "web", landed[i].IntegratedRevision)
		b.wantCommit(t, rev, landed[i].Message, "Ag-Attestation: "+landed[i].AttestationDigest)
		if landed[i].AttestationDigest == "" || landed[i].JobID != got[i].JobID {
			t.Fatalf("change %d landed with attestation %q and job %s; want its candidate's job %s and its attestation",
				i, landed[i].AttestationDigest, landed[i].JobID, got[i].JobID)
		}
	}
	if landed[2].CandidateRevision == "" || b.revision(t, "web", landed[2].CandidateRevision).Parent != got[3].CandidateRevision {
		t.Fatalf("the fifth change's candidate is not built on the fourth's %s", got[3].CandidateRevision)
	}
	for _, c := range []store.Change{got[2], got[3], landed[2], landed[3]} {
		run.finish(t, c.JobID, true)
	}
	b.advance(t, g, "web", steps(cs[2:], store.ChangeIntegrated)...)
	all := map[string]string{}
	for i := range cs {
		all[fmt.Sprintf("src/f%d.go", i)] = fmt.Sprint(i)
	}
	b.wantFiles(t, "web", all)
	if live := b.liveCandidates(t, "web"); len(live) != 0 {
		t.Fatalf("%d candidates are still live after every change landed", len(live))
	}
	for _, c := range cs {
		h := b.history(t, c.ID)
		if len(h) != 1 || h[0].State != store.CandidateLanded {
			t.Fatalf("the history of %s is %+v, want one landed candidate", c.ID, h)
		}
	}
}

func testSpeculationRejectsOnlyTheCulprit(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createPolicyRepo(t, "web")
	g := newGate()
	g.depth = 4
	g.setVerdict(passUnlessFailed)
	cs := b.queueDisjoint(t, r, 5)
	got := b.advance(t, g, "web", steps(cs[:4], store.ChangeValidating)...)
	run := b.runner()
	run.claimAll(t) // the fourth candidate's worker is running it when the third fails

	// The third fails while the first two still validate: it is not rejected yet (what broke
	// it may be ahead of it), but the fourth, built on it, is superseded and rebuilt without it.
	run.finish(t, got[2].JobID, false)
	b.clk.Advance(time.Second)
	moved := b.advance(t, g, "web", step{cs[3].ID, store.ChangeQueued}, step{cs[3].ID, store.ChangeValidating},
		step{cs[4].ID, store.ChangeValidating})
	if c := b.change(t, cs[2].ID); c.State != store.ChangeValidating {
		t.Fatalf("the failed third change is %s before the candidates ahead of it passed, want still validating", c.State)
	}
	if j, err := b.st.GetJob(b.ctx, got[3].JobID); err != nil || j.State != store.JobClaimed || !j.CancelRequested {
		t.Fatalf("the superseded candidate's job is %s, cancel requested %v (%v); want its worker asked to stop", j.State, j.CancelRequested, err)
	}
	rebuilt := moved[1]
	if p := b.revision(t, "web", rebuilt.CandidateRevision).Parent; p != got[1].CandidateRevision {
		t.Fatalf("the fourth change was rebuilt on %s, want on the second's candidate %s, without the third", p, got[1].CandidateRevision)
	}
	h := b.history(t, cs[3].ID)
	if len(h) != 2 || h[0].State != store.CandidateSuperseded || h[0].Reason == "" || h[1].State != store.CandidateValidating {
		t.Fatalf("the history of the fourth change is %+v, want a superseded candidate with its reason, then a validating one", h)
	}

	// Once the two ahead pass, the third is known to have broken its candidate.
	run.finish(t, got[0].JobID, true)
	run.finish(t, got[1].JobID, true)
	rejected := b.advance(t, g, "web", step{cs[0].ID, store.ChangeIntegrated}, step{cs[1].ID, store.ChangeIntegrated},
		step{cs[2].ID, store.ChangeRejected})[2]
	if rejected.Reason != "the tests failed in "+got[2].JobID || rejected.AttestationDigest == "" {
		t.Fatalf("the third change was rejected with %q, attestation %q; want the failure and its signed run", rejected.Reason, rejected.AttestationDigest)
	}
	run.claimAll(t)
	run.finish(t, rebuilt.JobID, true)
	run.finish(t, moved[2].JobID, true)
	b.advance(t, g, "web", step{cs[3].ID, store.ChangeIntegrated}, step{cs[4].ID, store.ChangeIntegrated})
	b.wantFiles(t, "web", map[string]string{"src/f0.go": "0", "src/f1.go": "1", "src/f3.go": "3", "src/f4.go": "4"})
}

func testSpeculationBatchFindsTheCulprit(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createPolicyRepo(t, "web")
	g := newGate()
	g.depth, g.batch = 4, 8
	g.setVerdict(passUnlessFailed)
	cs := b.queueDisjoint(t, r, 8)
	culprit := cs[5]
	run := b.runner()
	validations := 0
	for round := 0; ; round++ {
		if round > 20 {
			t.Fatal("the queue did not settle in 20 rounds")
		}
		if _, err := g.run(b.ctx, b.rs, "web"); err != nil {
			t.Fatalf("AdvanceQueue: %v", err)
		}
		run.claimAll(t)
		if len(run.claimed) == 0 {
			break
		}
		// A candidate fails when it holds the culprit.
		bad := map[string]bool{}
		for _, c := range b.history(t, culprit.ID) {
			bad[c.JobID] = true
		}
		for id := range run.claimed {
			validations++
			run.finish(t, id, !bad[id])
		}
	}
	for _, c := range cs {
		want := store.ChangeIntegrated
		if c.ID == culprit.ID {
			want = store.ChangeRejected
		}
		if got := b.change(t, c.ID); got.State != want {
			t.Fatalf("change %s (%s) is %s, want %s", c.ID, c.Message, got.State, want)
		}
	}
	files := map[string]string{}
	for i := range cs {
		if cs[i].ID != culprit.ID {
			files[fmt.Sprintf("src/f%d.go", i)] = fmt.Sprint(i)
		}
	}
	b.wantFiles(t, "web", files)
	h := b.history(t, culprit.ID)
	if len(h) < 3 || h[0].State != store.CandidateSplit || len(h[0].Changes) != 8 || h[len(h)-1].State != store.CandidateRejected ||
		len(h[len(h)-1].Changes) != 1 {
		t.Fatalf("the culprit's history is %+v; want the batch of 8 split, down to itself alone, rejected", h)
	}
	// Every landed tree is one a worker validated: the batch commits name their changes.
	m := b.revision(t, "web", b.repository(t, "web").Mainline)
	for m.Parent != r.Mainline {
		integrated := 0
		for _, c := range cs {
			if got := b.change(t, c.ID); got.IntegratedRevision == m.ID {
				integrated++
				if got.AttestationDigest == "" {
					t.Fatalf("change %s landed without an attestation", c.ID)
				}
			}
		}
		if integrated == 0 {
			t.Fatalf("the mainline revision %s integrated no change", m.ID)
		}
		m = b.revision(t, "web", m.Parent)
	}
	t.Logf("%d validations found the culprit among 8", validations)
}

func testSpeculationCancelledBatchJob(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createPolicyRepo(t, "web")
	g := newGate()
	g.depth, g.batch = 2, 3
	cs := b.queueDisjoint(t, r, 3)
	batch := b.advance(t, g, "web", steps(cs, store.ChangeValidating)...)

	// The batch's job was enqueued for its last change; whoever cancels it cancels that change
	// only: the others are someone else's, and are validated again, without it.
	g.setVerdict(verdictOf(gate.VerdictCancel, "the validate job was cancelled"))
	got := b.advance(t, g, "web", step{cs[0].ID, store.ChangeQueued}, step{cs[1].ID, store.ChangeQueued},
		step{cs[2].ID, store.ChangeCancelled}, step{cs[0].ID, store.ChangeValidating}, step{cs[1].ID, store.ChangeValidating})
	if got[3].CandidateID != got[4].CandidateID || got[3].CandidateID == batch[0].CandidateID {
		t.Fatalf("the two changes left were rebuilt in candidates %s and %s, want one new batch", got[3].CandidateID, got[4].CandidateID)
	}
	h := b.history(t, cs[0].ID)
	if len(h) != 2 || h[0].State != store.CandidateCancelled || h[1].State != store.CandidateValidating || len(h[1].Changes) != 2 {
		t.Fatalf("the first change's history is %+v, want the cancelled batch, then a batch of the two left", h)
	}
}

func testSpeculationBatchGrowsUntilAWorkerTakesIt(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createPolicyRepo(t, "web")
	g := newGate()
	g.depth, g.batch = 2, 4
	l := b.acquire(t, r.Name, alice, time.Hour, "src/")
	queue := func(i int) store.Change {
		p := integrateParams(r.Name, r.Mainline, alice, []uint64{l.FencingToken}, put(fmt.Sprintf("src/f%d.go", i), fmt.Sprint(i)))
		return b.queue(t, p)
	}
	first := queue(0)
	alone := b.advance(t, g, "web", step{first.ID, store.ChangeValidating})[0]

	// Three more come before any worker took the first's job: one batch of the four is
	// validated instead, and the job no one took is cancelled.
	b.clk.Advance(time.Second)
	more := []store.Change{queue(1), queue(2), queue(3)}
	got := b.advance(t, g, "web", step{first.ID, store.ChangeQueued}, step{first.ID, store.ChangeValidating},
		step{more[0].ID, store.ChangeValidating}, step{more[1].ID, store.ChangeValidating}, step{more[2].ID, store.ChangeValidating})
	if got[1].CandidateID == alone.CandidateID || got[4].CandidateID != got[1].CandidateID {
		t.Fatalf("the four changes are in candidates %s and %s, want one new batch", got[1].CandidateID, got[4].CandidateID)
	}
	if j, err := b.st.GetJob(b.ctx, alone.JobID); err != nil || j.State != store.JobCancelled {
		t.Fatalf("the first candidate's job is %s (%v), want cancelled", j.State, err)
	}
	if h := b.history(t, first.ID); len(h) != 2 || h[0].State != store.CandidateSuperseded || len(h[1].Changes) != 4 {
		t.Fatalf("the first change's history is %+v, want a superseded candidate, then the batch of 4", h)
	}

	// Once a worker took the batch, a change that comes later is built on it, not into it.
	run := b.runner()
	run.claimAll(t)
	b.clk.Advance(time.Second)
	late := queue(4)
	next := b.advance(t, g, "web", step{late.ID, store.ChangeValidating})[0]
	if p := b.revision(t, "web", next.CandidateRevision).Parent; p != got[4].CandidateRevision {
		t.Fatalf("the late change was built on %s, want on the running batch %s", p, got[4].CandidateRevision)
	}
}

func testSpeculationLiveCandidatesAreBounded(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createPolicyRepo(t, "web")
	g := newGate()
	g.depth = 2
	g.setVerdict(passUnlessFailed)
	cs := b.queueDisjoint(t, r, 30)
	b.advance(t, g, "web", steps(cs[:2], store.ChangeValidating)...)
	run := b.runner()
	front := b.change(t, cs[0].ID).JobID

	// Behind a slow first candidate, the ones after it pass and wait: they hold no worker, but a
	// failure of the first would cost all of them again, so they are bounded too.
	for range 10 {
		run.claimAll(t)
		for id := range run.claimed {
			if id != front {
				run.finish(t, id, true)
			}
		}
		if _, err := g.run(b.ctx, b.rs, "web"); err != nil {
			t.Fatalf("AdvanceQueue: %v", err)
		}
	}
	if live := b.liveCandidates(t, "web"); len(live) != 4 {
		t.Fatalf("%d live candidates behind a slow one at depth 2, want 4 (twice the depth)", len(live))
	}
	run.finish(t, front, false)
	if _, err := g.run(b.ctx, b.rs, "web"); err != nil {
		t.Fatalf("AdvanceQueue: %v", err)
	}
	superseded := 0
	for _, c := range cs[1:] {
		for _, h := range b.history(t, c.ID) {
			if h.State == store.CandidateSuperseded {
				superseded++
			}
		}
	}
	if superseded != 3 {
		t.Fatalf("the first candidate's failure superseded %d candidates, want the 3 behind it", superseded)
	}
}

func testSpeculationAFailedBatchBehindAPendingOneWaits(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createPolicyRepo(t, "web")
	g := newGate()
	g.depth, g.batch = 2, 8
	g.setVerdict(passUnlessFailed)
	cs := b.queueDisjoint(t, r, 16)
	got := b.advance(t, g, "web", steps(cs, store.ChangeValidating)...)
	run := b.runner()
	run.claimAll(t)

	// The second batch fails while the first still validates: the failure may be the first's,
	// so it is not split yet.
	run.finish(t, got[8].JobID, false)
	b.advance(t, g, "web")
	for _, c := range cs[8:] {
		if got := b.change(t, c.ID); got.BatchLimit != 0 || got.State != store.ChangeValidating {
			t.Fatalf("change %s behind a pending batch is %s with batch limit %d, want validating, unsplit", c.ID, got.State, got.BatchLimit)
		}
	}
	// The first fails too: it is split, its halves validating one on the other; the second,
	// built on it, is superseded, whole, to be built again behind them.
	run.finish(t, got[0].JobID, false)
	moved, err := g.run(b.ctx, b.rs, "web")
	if err != nil {
		t.Fatalf("AdvanceQueue: %v", err)
	}
	var gotSteps []step
	for _, c := range moved {
		gotSteps = append(gotSteps, step{c.ID, c.State})
	}
	if want := append(append(steps(cs[:8], store.ChangeQueued), steps(cs[:8], store.ChangeValidating)...),
		steps(cs[8:], store.ChangeQueued)...); !slices.Equal(gotSteps, want) {
		t.Fatalf("AdvanceQueue answered %v, want %v", gotSteps, want)
	}
	if moved[8].CandidateID == moved[15].CandidateID || moved[8].BatchLimit != 4 {
		t.Fatalf("the first batch was rebuilt as %s and %s with limit %d, want two halves of 4", moved[8].CandidateID, moved[15].CandidateID, moved[8].BatchLimit)
	}
	for _, c := range cs[8:] {
		if got := b.change(t, c.ID); got.BatchLimit != 0 {
			t.Fatalf("change %s has batch limit %d after the batch ahead of it was split, want none", c.ID, got.BatchLimit)
		}
	}
}

func testSpeculationAWindowNeverCutsACandidate(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createPolicyRepo(t, "web")
	g := newGate()
	g.setVerdict(passUnlessFailed)
	g.depth, g.batch = 20, 60 // 19 batches of 60, reaching past the window of depth 1
	const n = gate.QueueWindow + 76
	cs := b.queueDisjoint(t, r, n)
	for range n/gate.BuildBudget + 1 { // each advance builds a part
		if _, err := g.run(b.ctx, b.rs, "web"); err != nil {
			t.Fatalf("AdvanceQueue: %v", err)
		}
	}
	if c := b.change(t, cs[n-1].ID); c.State != store.ChangeValidating {
		t.Fatalf("the last change is %s after the advances that build the queue, want validating", c.State)
	}
	run := b.runner()
	run.claimAll(t)
	for id := range run.claimed {
		run.finish(t, id, true)
	}
	// The workers went away: the depth falls to 1, and with it what one advance reads, which
	// now ends inside a batch. That batch is left whole for a later advance.
	g.depth, g.batch = 1, 1
	for range 3 {
		if _, err := g.run(b.ctx, b.rs, "web"); err != nil {
			t.Fatalf("AdvanceQueue: %v", err)
		}
	}
	for i, c := range cs {
		if got := b.change(t, c.ID); got.State != store.ChangeIntegrated {
			t.Fatalf("change %d is %s (%s), want every change of the passed batches integrated", i, got.State, got.Reason)
		}
	}
	files := map[string]string{}
	for i := range cs {
		files[fmt.Sprintf("src/f%d.go", i)] = fmt.Sprint(i)
	}
	b.wantFiles(t, "web", files)
}

func testSpeculationAnAdvanceBuildsABoundedPart(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createPolicyRepo(t, "web")
	g := newGate()
	g.depth, g.batch = 64, 8
	cs := b.queueDisjoint(t, r, gate.BuildBudget+40)
	// The advance holds the repository: it builds at most BuildBudget changes, and the next
	// one builds on.
	first, err := g.run(b.ctx, b.rs, "web")
	if err != nil || len(first) != gate.BuildBudget {
		t.Fatalf("the first advance moved %d changes (%v), want %d", len(first), err, gate.BuildBudget)
	}
	second, err := g.run(b.ctx, b.rs, "web")
	if err != nil || len(second) != 40 {
		t.Fatalf("the second advance moved %d changes (%v), want the 40 left", len(second), err)
	}
	if p := b.revision(t, "web", second[0].CandidateRevision).Parent; p != first[len(first)-1].CandidateRevision {
		t.Fatalf("the second advance built on %s, want on the last candidate of the first, %s", p, first[len(first)-1].CandidateRevision)
	}
	if c := b.change(t, cs[len(cs)-1].ID); c.State != store.ChangeValidating {
		t.Fatalf("the last change is %s, want validating", c.State)
	}
}

func testSpeculationABatchGrowsOnlyWithWhatAppliesOnIt(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createPolicyRepo(t, "web")
	l := b.acquire(t, r.Name, alice, time.Hour, "src/")
	tokens := []uint64{l.FencingToken}
	g := newGate()
	g.depth, g.batch = 1, 4
	first := b.queue(t, integrateParams("web", r.Mainline, alice, tokens, put("src/0.go", "x")))
	b.clk.Advance(time.Second)
	b.advance(t, g, "web", step{first.ID, store.ChangeValidating})
	b.clk.Advance(2 * time.Second)
	// A newer change that does not apply on the batch waits for it to land; the batch, which no
	// worker took yet, is not built again without it, even while the clock reads earlier (a
	// wall clock stepped back): the queue settles.
	b.queue(t, integrateParams("web", r.Mainline, alice, tokens, put("src/0.go", "y")))
	b.clk.Set(b.clk.Now().Add(-time.Second))
	for range 3 {
		if changed, err := g.run(b.ctx, b.rs, "web"); err != nil || len(changed) != 0 {
			t.Fatalf("AdvanceQueue = %d changes (%v), want none: the batch cannot grow", len(changed), err)
		}
	}
}

func testSpeculationABatchBeyondTheDepthDoesNotGrow(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createPolicyRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	tokens := []uint64{l.FencingToken}
	g := newGate()
	g.depth, g.batch = 2, 2
	b.queue(t, integrateParams("web", r.Mainline, alice, tokens, put("src/a.go", "a")))
	b.queue(t, integrateParams("web", r.Mainline, alice, tokens, put("src/a2.go", "a")))
	second := b.queue(t, integrateParams("web", r.Mainline, alice, tokens, put("src/b.go", "b")))
	b.clk.Advance(time.Second)
	if _, err := g.run(b.ctx, b.rs, "web"); err != nil { // [a a2], then [b] on it
		t.Fatalf("AdvanceQueue: %v", err)
	}
	b.clk.Advance(time.Second)
	b.queue(t, integrateParams("web", r.Mainline, alice, tokens, put("src/c.go", "c")))
	b.clk.Advance(time.Second)
	// This replica sees one worker: [b] is beyond its depth, and is not taken apart to grow,
	// since it could not be built again here.
	g.depth = 1
	if _, err := g.run(b.ctx, b.rs, "web"); err != nil {
		t.Fatalf("AdvanceQueue: %v", err)
	}
	if got := b.change(t, second.ID); got.State != store.ChangeValidating {
		t.Fatalf("the second batch's change is %s: its candidate was taken apart to grow and not built again", got.State)
	}
}
