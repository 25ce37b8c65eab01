package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// policy and policy2 are validation policies as the server stores them; the store keeps them as
// bytes and hands them to the gate's Job rule.
var (
	policy  = []byte(`{"command": ["make", "test"], "timeout": "600s"}`)
	policy2 = []byte(`{"command": ["go", "test", "./..."], "timeout": "300s", "env": {"CGO_ENABLED": "0"}}`)
)

// testGate is the rules (gate.Rules) a test's advances run the gate's queue engine by, and a
// record of what the engine called them with. Job answers validateJob; Decide answers verdict,
// VerdictPending while it is nil.
type testGate struct {
	mu      sync.Mutex
	verdict func(job store.Job, att *store.Attestation) gate.Verdict
	decided []decision
	jobs    []jobCall
	// depth and batch are the rules' Depth and Batch.
	depth, batch int
	// lanes answers the rules' Lanes from the policy stored.
	lanes func(validation []byte) []gate.Lane
	// protected are the protected paths whose changes land only approved.
	protected []string
}

type decision struct {
	change    store.Change
	candidate store.Revision
	job       store.Job
	att       *store.Attestation
}

type jobCall struct {
	change     store.Change
	candidate  store.Revision
	validation []byte
}

func newGate() *testGate { return &testGate{} }

// rules answers the rules of one advance under the policy stored, validation.
func (g *testGate) rules(validation []byte) gate.Rules {
	r := gate.Rules{
		Decide: func(c store.Change, candidate store.Revision, job store.Job, att *store.Attestation) gate.Verdict {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.decided = append(g.decided, decision{c, candidate, job, att})
			if g.verdict == nil {
				return gate.Verdict{Outcome: gate.VerdictPending}
			}
			return g.verdict(job, att)
		},
		Job: func(c store.Change, candidate store.Revision, lane string, _ store.Revision) store.EnqueueJobParams {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.jobs = append(g.jobs, jobCall{c, candidate, validation})
			return validateJob(c, candidate, validation, lane)
		},
		Depth: g.depth,
		Batch: g.batch,
	}
	if g.lanes != nil {
		r.Lanes = g.lanes(validation)
	}
	if g.protected != nil {
		r.Protected = func(c store.Change) []string { return gate.ProtectedTouched(g.protected, c.Paths) }
	}
	return r
}

// run runs one advance of repository's queue by the gate's engine under g's rules.
func (g *testGate) run(ctx context.Context, rs store.RepoStore, repository string) ([]store.Change, error) {
	return gate.AdvanceWith(ctx, rs, repository, g.rules)
}

func (g *testGate) setVerdict(v func(job store.Job, att *store.Attestation) gate.Verdict) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.verdict = v
}

// passWhenAttested is the gate's rule as a worker's outcome shows it: a completed job with an
// attestation passes, a job that ended otherwise rejects, a running one is pending.
func passWhenAttested(job store.Job, att *store.Attestation) gate.Verdict {
	switch {
	case job.State == store.JobCompleted && att != nil:
		return gate.Verdict{Outcome: gate.VerdictPass}
	case job.State.Terminal():
		return gate.Verdict{Outcome: gate.VerdictReject, Reason: "validate job " + string(job.State)}
	default:
		return gate.Verdict{Outcome: gate.VerdictPending}
	}
}

func verdictOf(outcome gate.VerdictOutcome, reason string) func(store.Job, *store.Attestation) gate.Verdict {
	return func(store.Job, *store.Attestation) gate.Verdict {
		return gate.Verdict{Outcome: outcome, Reason: reason}
	}
}

// validateJob is the job a test's gate enqueues for a candidate.
func validateJob(c store.Change, candidate store.Revision, validation []byte, lane string) store.EnqueueJobParams {
	payload, err := json.Marshal(struct {
		Repository string          `json:"repository"`
		Change     string          `json:"change_id"`
		Revision   string          `json:"revision"`
		GitTree    string          `json:"git_tree"`
		Validation json.RawMessage `json:"validation"`
		Lane       string          `json:"lane,omitempty"`
	}{c.Repository, c.ID, candidate.ID, candidate.GitTree, validation, lane})
	if err != nil {
		panic(err) // a struct of strings and a stored JSON document
	}
	return store.EnqueueJobParams{Kind: "validate", Payload: payload, Priority: 10, MaxAttempts: 2,
		UniqueKey: "validate:" + candidate.ID, EnqueuedBy: "gate"}
}

func (b *rbundle) createPolicyRepo(t *testing.T, name string) store.Repository {
	t.Helper()
	r, err := b.rs.CreateRepository(b.ctx, store.CreateRepositoryParams{Name: name, Validation: policy, CreatedBy: "admin"})
	if err != nil {
		t.Fatalf("CreateRepository(%q, with a policy): %v", name, err)
	}
	return r
}

func (b *rbundle) setValidation(t *testing.T, repository string, validation []byte) store.Repository {
	t.Helper()
	r, err := b.rs.SetValidation(b.ctx, repository, validation)
	if err != nil {
		t.Fatalf("SetValidation(%q, %s): %v", repository, validation, err)
	}
	return r
}

// queue integrates into a repository with a policy and fails the test unless the change is
// queued.
func (b *rbundle) queue(t *testing.T, p store.IntegrateParams) store.Change {
	t.Helper()
	c := b.mustIntegrate(t, p)
	if c.State != store.ChangeQueued || c.CandidateRevision != "" || c.IntegratedRevision != "" {
		t.Fatalf("Integrate(%v) into %s = %s, candidate %q, integrated %q; want a queued change without revisions",
			p.Paths, p.Repository, c.State, c.CandidateRevision, c.IntegratedRevision)
	}
	return c
}

func (b *rbundle) change(t *testing.T, id string) store.Change {
	t.Helper()
	c, err := b.rs.GetChange(b.ctx, id)
	if err != nil {
		t.Fatalf("GetChange(%s): %v", id, err)
	}
	return c
}

// advance runs AdvanceQueue and fails the test unless it answers the changes want names, in
// order, in their states; each answer that is its change's last must be what GetChange answers.
func (b *rbundle) advance(t *testing.T, g *testGate, repository string, want ...step) []store.Change {
	t.Helper()
	got, err := g.run(b.ctx, b.rs, repository)
	if err != nil {
		t.Fatalf("AdvanceQueue(%s): %v", repository, err)
	}
	var gotSteps []step
	for _, c := range got {
		gotSteps = append(gotSteps, step{c.ID, c.State})
	}
	if !slices.Equal(gotSteps, want) {
		t.Fatalf("AdvanceQueue(%s) answered %v, want %v", repository, gotSteps, want)
	}
	for i, c := range got {
		if slices.ContainsFunc(got[i+1:], func(later store.Change) bool { return later.ID == c.ID }) {
			continue
		}
		assertFields(t, fmt.Sprintf("GetChange(%s) after AdvanceQueue answered it", c.ID), b.change(t, c.ID), c)
	}
	return got
}

// step is a change and the state AdvanceQueue moved it to.
type step struct {
	id    string
	state store.ChangeState
}

func (s step) String() string { return s.id + ":" + string(s.state) }

// passJob claims the validate job jobID as a worker would and completes it with an attestation.
func (b *rbundle) passJob(t *testing.T, jobID string) *store.Attestation {
	t.Helper()
	job := b.mustClaim(t, "runner|w1", time.Minute, "validate")
	if job.ID != jobID {
		t.Fatalf("ClaimJob(validate) claimed %s, want the candidate's job %s", job.ID, jobID)
	}
	att := attestation(job.ID, "passed "+job.ID)
	if _, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: job.ID, Holder: "runner|w1",
		ClaimNumber: job.ClaimNumber, Result: []byte(`{"exit_code": 0}`), Attestation: att}); err != nil {
		t.Fatalf("CompleteJob(%s): %v", job.ID, err)
	}
	return att
}

// wantPositions fails the test unless GetChange answers each change at its queue position.
func (b *rbundle) wantPositions(t *testing.T, changes []store.Change, positions ...int) {
	t.Helper()
	for i, c := range changes {
		if got := b.change(t, c.ID); got.QueuePosition != positions[i] {
			t.Fatalf("GetChange(%s) (%s) has queue position %d, want %d", c.ID, got.State, got.QueuePosition, positions[i])
		}
	}
}

// wantCandidate fails the test unless revision id is a candidate of c on parent with files.
func (b *rbundle) wantCandidate(t *testing.T, c store.Change, id, parent string, files map[string]string) store.Revision {
	t.Helper()
	if id == "" {
		t.Fatalf("change %s (%s) has no candidate revision", c.ID, c.State)
	}
	rev := b.revision(t, c.Repository, id)
	want := treeOf(files)
	assertFields(t, "the candidate revision of "+c.ID, rev, store.Revision{ID: id, Repository: c.Repository,
		Parent: parent, ChangeID: c.ID, Holder: c.Holder, Tree: want, TreeDigest: want.Digest(),
		GitTree: gitTreeOf(t, files), GitCommit: rev.GitCommit, CreatedAt: b.clk.Now()})
	if rev.GitCommit != "" {
		var trailers []string
		if c.AttestationDigest != "" {
			trailers = append(trailers, "Ag-Attestation: "+c.AttestationDigest)
		}
		b.wantCommit(t, rev, c.Message, trailers...)
	}
	return rev
}

func testGateIntegrateQueues(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	seed := b.acquire(t, "web", "seed|w", time.Minute, "src/a.go")
	m1 := b.mustIntegrate(t, integrateParams("web", r.Mainline, "seed|w", []uint64{seed.FencingToken}, put("src/a.go", "a0")))
	if got := b.setValidation(t, "web", policy); !jsonEqual(got.Validation, policy) {
		t.Fatalf("SetValidation answered the policy %s, want %s", got.Validation, policy)
	}
	if _, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: seed.ID, Principal: "seed"}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	l := b.acquire(t, "web", alice, time.Hour, "src/b.go", "src/c.go", "docs/")
	b.clk.Advance(time.Second)

	p := integrateParams("web", m1.IntegratedRevision, alice, []uint64{l.FencingToken}, put("src/b.go", "b1"), put("docs/x.md", "x1"))
	p.Message = "first queued"
	c1 := b.queue(t, p)
	now := b.clk.Now()
	want := store.Change{ID: c1.ID, Repository: "web", State: store.ChangeQueued, BaseRevision: m1.IntegratedRevision,
		Holder: alice, Message: "first queued", Paths: []string{"docs/x.md", "src/b.go"}, CreatedAt: now, UpdatedAt: now}
	assertFields(t, "Integrate with a policy", c1, want)
	assertFields(t, "GetChange of the queued change", b.change(t, c1.ID), want)
	if m := b.repository(t, "web").Mainline; m != m1.IntegratedRevision {
		t.Fatalf("the mainline moved to %s on a queued change, want %s", m, m1.IntegratedRevision)
	}
	for _, bl := range p.Blobs {
		if got, err := b.rs.GetBlob(b.ctx, bl.Digest); err != nil || string(got.Content) != string(bl.Content) {
			t.Fatalf("GetBlob(%s) of a queued change = %q, %v; want %q", bl.Digest, got.Content, err, bl.Content)
		}
	}

	// Edits on an old base that another change moved are still a conflict at once, while the
	// agent holds its leases: nothing is queued.
	stale := b.acquire(t, "web", bob, time.Hour, "src/a.go")
	err := b.refusedIntegrate(t, "of a path that moved on, into a repository with a policy",
		integrateParams("web", r.Mainline, bob, []uint64{stale.FencingToken}, put("src/a.go", "bob's")))
	var ce *repo.ConflictError
	if !errors.As(err, &ce) || ce.Path != "src/a.go" {
		t.Fatalf("Integrate of a moved path with a policy: err = %v (%T), want the Rebase's *repo.ConflictError", err, err)
	}
	err = b.refusedIntegrate(t, "of an unleased path, into a repository with a policy",
		integrateParams("web", m1.IntegratedRevision, alice, []uint64{l.FencingToken}, put("lib/c.go", "c")))
	wantRefusal(t, "Integrate of an unleased path with a policy", err, "lib/c.go", "not leased")

	// Queue order is commit order.
	c2 := b.queue(t, integrateParams("web", m1.IntegratedRevision, alice, []uint64{l.FencingToken}, put("src/c.go", "c1")))
	c3 := b.queue(t, integrateParams("web", m1.IntegratedRevision, bob, []uint64{stale.FencingToken}, put("src/a.go", "a1")))
	b.wantPositions(t, []store.Change{c1, c2, c3, m1}, 0, 1, 2, 0)
	if m := b.repository(t, "web").Mainline; m != m1.IntegratedRevision {
		t.Fatalf("the mainline moved to %s on queued changes, want %s", m, m1.IntegratedRevision)
	}
	changes, _, err := b.rs.ListChanges(b.ctx, store.ListChangesParams{Repository: "web"})
	if err != nil || len(changes) != 4 || changes[0].ID != c3.ID || changes[3].ID != m1.ID {
		t.Fatalf("ListChanges = %d changes, %v; want the 3 queued ones, newest first, then the integrated one", len(changes), err)
	}
}

// testGateLandsTheTokens: a change that lands through the gate has the lease tokens it was
// integrated under in its mainline commit, as one that lands at once has.
func testGateLandsTheTokens(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	g := newGate()
	r := b.createPolicyRepo(t, "web")
	la := b.acquire(t, "web", alice, time.Hour, "src/")
	lb := b.acquire(t, "web", alice, time.Hour, "docs/")
	c := b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{lb.FencingToken, la.FencingToken}, put("src/a.go", "a1"), put("docs/x.md", "x1")))
	v := b.advance(t, g, "web", step{c.ID, store.ChangeValidating})[0]
	b.passJob(t, v.JobID)
	g.setVerdict(passWhenAttested)
	landed := b.advance(t, g, "web", step{c.ID, store.ChangeIntegrated})[0]
	b.wantCommit(t, b.revision(t, "web", landed.IntegratedRevision), c.Message,
		"Ag-Attestation: "+landed.AttestationDigest, tokensTrailer(la.FencingToken, lb.FencingToken))
}

func testGateAdvanceBuilds(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	g := newGate()
	r := b.createPolicyRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	p1 := integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "a1"), put("src/x.go", "x1"))
	c1 := b.queue(t, p1)
	c2 := b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/b.go", "b1")))

	b.clk.Advance(time.Minute)
	signal := b.st.JobSignal()
	got := b.advance(t, g, "web", step{c1.ID, store.ChangeValidating})
	want := c1
	want.State, want.CandidateRevision, want.JobID, want.UpdatedAt = store.ChangeValidating, got[0].CandidateRevision, got[0].JobID, b.clk.Now()
	want.CandidateID = got[0].CandidateID
	if !strings.HasPrefix(want.CandidateID, "cnd_") {
		t.Fatalf("the validating change is in candidate %q, want a candidate id", want.CandidateID)
	}
	assertFields(t, "AdvanceQueue's validating change", got[0], want)
	cand := b.wantCandidate(t, want, want.CandidateRevision, r.Mainline, map[string]string{"src/a.go": "a1", "src/x.go": "x1"})
	if m := b.repository(t, "web").Mainline; m != r.Mainline {
		t.Fatalf("the mainline moved to %s when the candidate was built, want %s", m, r.Mainline)
	}
	if len(g.jobs) != 1 || g.jobs[0].candidate.ID != cand.ID || !jsonEqual(g.jobs[0].validation, policy) {
		t.Fatalf("Job was called with %+v, want once with the candidate %s and the policy", g.jobs, cand.ID)
	}
	// The gate's rules see the candidate without its file list, which the store does not read
	// to build a candidate: they have its git tree.
	meta := cand
	meta.Tree, meta.TreeDigest = nil, ""
	assertFields(t, "the candidate passed to Job", g.jobs[0].candidate, meta)

	// The job Job answered, enqueued as EnqueueJob would, and claimers woken.
	jp := validateJob(c1, cand, policy, "")
	now := b.clk.Now()
	job := b.get(t, want.JobID)
	assertJob(t, "the validate job", job, store.Job{ID: want.JobID, Kind: "validate", State: store.JobQueued, Payload: jp.Payload,
		Priority: jp.Priority, MaxAttempts: jp.MaxAttempts, RunAfter: now, CreatedAt: now, UpdatedAt: now,
		EnqueuedBy: jp.EnqueuedBy, UniqueKey: jp.UniqueKey})
	select {
	case <-signal:
	case <-time.After(signalDeadline):
		t.Fatalf("the job signal taken before AdvanceQueue enqueued a job did not fire")
	}
	b.wantPositions(t, []store.Change{c1, c2}, 0, 1)

	// While the verdict is pending, nothing moves.
	b.clk.Advance(time.Minute)
	b.advance(t, g, "web")
	if len(g.decided) != 1 || g.decided[0].att != nil {
		t.Fatalf("Decide was called %d times (%+v), want once, without an attestation", len(g.decided), g.decided)
	}
	assertFields(t, "the change passed to Decide", g.decided[0].change, want)
	assertFields(t, "the candidate passed to Decide", g.decided[0].candidate, meta)
	assertJob(t, "the job passed to Decide", g.decided[0].job, job)
	assertFields(t, "the validating change after a pending verdict", b.change(t, c1.ID), want)
	b.wantPositions(t, []store.Change{c2}, 1)
	if len(g.jobs) != 1 {
		t.Fatalf("a pending verdict asked for %d jobs, want 1", len(g.jobs))
	}
	jobs, _, err := b.st.ListJobs(b.ctx, store.ListJobsParams{})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("ListJobs after a pending verdict = %d jobs, %v; want the one validate job", len(jobs), err)
	}

	// The job is a worker's to claim, and a claim is still pending.
	if claimed := b.mustClaim(t, "runner|w1", time.Minute, "validate"); claimed.ID != job.ID {
		t.Fatalf("ClaimJob(validate) = %s, want %s", claimed.ID, job.ID)
	}
	b.advance(t, g, "web")
	if last := g.decided[len(g.decided)-1]; last.job.State != store.JobClaimed {
		t.Fatalf("Decide saw the job %s, want claimed", last.job.State)
	}
	if m := b.repository(t, "web").Mainline; m != r.Mainline {
		t.Fatalf("the mainline moved to %s on pending verdicts", m)
	}
}

func testGatePass(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	g := newGate()
	r := b.createPolicyRepo(t, "web")
	la := b.acquire(t, "web", alice, time.Hour, "src/a.go")
	lb := b.acquire(t, "web", bob, time.Hour, "src/b.go")
	c1 := b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{la.FencingToken}, put("src/a.go", "a1")))
	c2 := b.queue(t, integrateParams("web", r.Mainline, bob, []uint64{lb.FencingToken}, put("src/b.go", "b1")))
	v1 := b.advance(t, g, "web", step{c1.ID, store.ChangeValidating})[0]
	att := b.passJob(t, v1.JobID)

	b.clk.Advance(time.Minute)
	g.setVerdict(passWhenAttested)
	got := b.advance(t, g, "web", step{c1.ID, store.ChangeIntegrated}, step{c2.ID, store.ChangeValidating})
	want := v1
	want.State, want.IntegratedRevision, want.AttestationDigest, want.UpdatedAt = store.ChangeIntegrated, v1.CandidateRevision, att.Digest, b.clk.Now()
	assertFields(t, "the change that passed", got[0], want)
	if m := b.repository(t, "web").Mainline; m != v1.CandidateRevision {
		t.Fatalf("the mainline is %s after a pass, want the candidate %s", m, v1.CandidateRevision)
	}

	d := g.decided[len(g.decided)-1]
	if d.change.ID != c1.ID || d.candidate.ID != v1.CandidateRevision || d.job.ID != v1.JobID ||
		d.job.State != store.JobCompleted || d.job.AttestationDigest != att.Digest {
		t.Fatalf("Decide got change %s, candidate %s, job %s (%s, attestation %q); want %s, %s, %s completed with %s",
			d.change.ID, d.candidate.ID, d.job.ID, d.job.State, d.job.AttestationDigest, c1.ID, v1.CandidateRevision, v1.JobID, att.Digest)
	}
	if d.att == nil {
		t.Fatalf("Decide got no attestation for a job completed with one")
	}
	assertFields(t, "the attestation passed to Decide", *d.att, store.Attestation{Digest: att.Digest, Envelope: att.Envelope,
		JobID: v1.JobID, CreatedAt: d.att.CreatedAt})

	// The next change is built on the new mainline in the same call.
	v2 := got[1]
	b.wantCandidate(t, v2, v2.CandidateRevision, v1.CandidateRevision, map[string]string{"src/a.go": "a1", "src/b.go": "b1"})
	if v2.JobID == "" || v2.JobID == v1.JobID {
		t.Fatalf("the second change's job is %q, want a new job (the first was %s)", v2.JobID, v1.JobID)
	}

	att2 := b.passJob(t, v2.JobID)
	b.clk.Advance(time.Minute)
	b.advance(t, g, "web", step{c2.ID, store.ChangeIntegrated})
	if m, c := b.repository(t, "web").Mainline, b.change(t, c2.ID); m != v2.CandidateRevision || c.AttestationDigest != att2.Digest {
		t.Fatalf("after the second pass: mainline %s, attestation %s; want %s, %s", m, c.AttestationDigest, v2.CandidateRevision, att2.Digest)
	}
	b.advance(t, g, "web")
}

func testGateRejectAndCancel(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	g := newGate()
	r := b.createPolicyRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	c1 := b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "a1")))
	c2 := b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/b.go", "b1")))
	c3 := b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/c.go", "c1")))
	v1 := b.advance(t, g, "web", step{c1.ID, store.ChangeValidating})[0]

	b.clk.Advance(time.Minute)
	g.setVerdict(verdictOf(gate.VerdictReject, "make test: exit status 2"))
	got := b.advance(t, g, "web", step{c1.ID, store.ChangeRejected}, step{c2.ID, store.ChangeValidating})
	want := v1
	want.State, want.Reason, want.UpdatedAt = store.ChangeRejected, "make test: exit status 2", b.clk.Now()
	assertFields(t, "the rejected change", got[0], want)
	if m := b.repository(t, "web").Mainline; m != r.Mainline {
		t.Fatalf("the mainline moved to %s on a reject", m)
	}
	v2 := got[1]
	b.wantCandidate(t, v2, v2.CandidateRevision, r.Mainline, map[string]string{"src/b.go": "b1"})
	b.wantPositions(t, []store.Change{c3}, 1)

	// The validate job was cancelled: the change is.
	if _, err := b.st.CancelJob(b.ctx, v2.JobID); err != nil {
		t.Fatalf("CancelJob: %v", err)
	}
	b.clk.Advance(time.Minute)
	g.setVerdict(verdictOf(gate.VerdictCancel, "the validate job was cancelled"))
	got = b.advance(t, g, "web", step{c2.ID, store.ChangeCancelled}, step{c3.ID, store.ChangeValidating})
	want = v2
	want.State, want.Reason, want.UpdatedAt = store.ChangeCancelled, "the validate job was cancelled", b.clk.Now()
	assertFields(t, "the cancelled change", got[0], want)
	b.wantCandidate(t, got[1], got[1].CandidateRevision, r.Mainline, map[string]string{"src/c.go": "c1"})
	if m := b.repository(t, "web").Mainline; m != r.Mainline {
		t.Fatalf("the mainline moved to %s on a cancel", m)
	}
}

func testGatePassOnMovedMainline(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	g := newGate()
	r := b.createPolicyRepo(t, "web")
	la := b.acquire(t, "web", alice, time.Hour, "src/a.go")
	lb := b.acquire(t, "web", bob, time.Hour, "src/b.go")
	c1 := b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{la.FencingToken}, put("src/a.go", "a1")))
	v1 := b.advance(t, g, "web", step{c1.ID, store.ChangeValidating})[0]

	// The mainline moves under the candidate: without a policy, bob integrates at once.
	b.setValidation(t, "web", nil)
	direct := b.mustIntegrate(t, integrateParams("web", r.Mainline, bob, []uint64{lb.FencingToken}, put("src/b.go", "b1")))
	if direct.State != store.ChangeIntegrated {
		t.Fatalf("Integrate without a policy = %s, want integrated", direct.State)
	}
	b.setValidation(t, "web", policy)
	b.passJob(t, v1.JobID)

	b.clk.Advance(time.Minute)
	g.setVerdict(passWhenAttested)
	got := b.advance(t, g, "web", step{c1.ID, store.ChangeQueued}, step{c1.ID, store.ChangeValidating})
	requeued := v1
	requeued.State, requeued.CandidateRevision, requeued.JobID, requeued.UpdatedAt = store.ChangeQueued, "", "", b.clk.Now()
	requeued.CandidateID = ""
	assertFields(t, "the change that passed on an old mainline", got[0], requeued)
	if m := b.repository(t, "web").Mainline; m != direct.IntegratedRevision {
		t.Fatalf("the mainline is %s after a pass on an old mainline, want it left at %s", m, direct.IntegratedRevision)
	}
	v2 := got[1]
	if v2.CandidateRevision == v1.CandidateRevision || v2.JobID == v1.JobID || v2.JobID == "" {
		t.Fatalf("the rebuilt change has candidate %s and job %q; want new ones (were %s, %s)", v2.CandidateRevision, v2.JobID, v1.CandidateRevision, v1.JobID)
	}
	b.wantCandidate(t, v2, v2.CandidateRevision, direct.IntegratedRevision, map[string]string{"src/a.go": "a1", "src/b.go": "b1"})

	b.passJob(t, v2.JobID)
	b.advance(t, g, "web", step{c1.ID, store.ChangeIntegrated})
	if m := b.repository(t, "web").Mainline; m != v2.CandidateRevision {
		t.Fatalf("the mainline is %s, want the rebuilt candidate %s", m, v2.CandidateRevision)
	}
}

func testGateBuildError(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	g := newGate()
	r := b.createPolicyRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	tokens := []uint64{l.FencingToken}
	// Each is queued on the empty mainline; once the first lands, the second's edit of
	// src/0.go conflicts with it and the third's file under src/0.go/ collides with it.
	cs := []store.Change{
		b.queue(t, integrateParams("web", r.Mainline, alice, tokens, put("src/0.go", "x"))),
		b.queue(t, integrateParams("web", r.Mainline, alice, tokens, put("src/0.go", "y"))),
		b.queue(t, integrateParams("web", r.Mainline, alice, tokens, put("src/0.go/z.go", "z"))),
		b.queue(t, integrateParams("web", r.Mainline, alice, tokens, put("src/3.go", "3"))),
	}
	v0 := b.advance(t, g, "web", step{cs[0].ID, store.ChangeValidating})[0]
	b.passJob(t, v0.JobID)
	g.setVerdict(passWhenAttested)
	b.clk.Advance(time.Minute)
	got := b.advance(t, g, "web", step{cs[0].ID, store.ChangeIntegrated},
		step{cs[1].ID, store.ChangeRejected}, step{cs[2].ID, store.ChangeRejected}, step{cs[3].ID, store.ChangeValidating})
	conflict := &repo.ConflictError{Path: "src/0.go"}
	collision := &repo.CollisionError{File: "src/0.go", Under: "src/0.go/"}
	for i, reason := range []string{conflict.Error(), collision.Error()} {
		want := cs[i+1]
		want.State, want.Reason, want.UpdatedAt = store.ChangeRejected, reason, b.clk.Now()
		assertFields(t, fmt.Sprintf("change %d, which does not apply to the mainline", i+1), got[i+1], want)
	}
	if len(g.jobs) != 2 {
		t.Fatalf("Job was called %d times, want twice: for the changes that built", len(g.jobs))
	}
	b.wantCandidate(t, got[3], got[3].CandidateRevision, got[0].IntegratedRevision, map[string]string{"src/0.go": "x", "src/3.go": "3"})
}

func testGatePolicyRemoved(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	g := newGate()
	r := b.createPolicyRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	var cs []store.Change
	for i := range 4 {
		cs = append(cs, b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put(fmt.Sprintf("src/%d.go", i), fmt.Sprint(i)))))
	}
	v0 := b.advance(t, g, "web", step{cs[0].ID, store.ChangeValidating})[0]
	b.setValidation(t, "web", nil)

	// The change being validated still waits for its verdict.
	b.advance(t, g, "web")
	b.wantPositions(t, cs[1:], 1, 2, 3)
	b.passJob(t, v0.JobID)
	b.clk.Advance(time.Minute)
	g.setVerdict(passWhenAttested)
	got := b.advance(t, g, "web", step{cs[0].ID, store.ChangeIntegrated}, step{cs[1].ID, store.ChangeIntegrated},
		step{cs[2].ID, store.ChangeIntegrated}, step{cs[3].ID, store.ChangeIntegrated})

	files := map[string]string{"src/0.go": "0"}
	parent := v0.CandidateRevision
	for i, c := range got[1:] {
		files[fmt.Sprintf("src/%d.go", i+1)] = fmt.Sprint(i + 1)
		want := cs[i+1]
		want.State, want.CandidateRevision, want.IntegratedRevision, want.UpdatedAt = store.ChangeIntegrated, c.IntegratedRevision, c.IntegratedRevision, b.clk.Now()
		assertFields(t, fmt.Sprintf("change %d, integrated without a policy", i+1), c, want)
		b.wantCandidate(t, c, c.IntegratedRevision, parent, files)
		parent = c.IntegratedRevision
	}
	if m := b.repository(t, "web").Mainline; m != parent {
		t.Fatalf("the mainline is %s, want the last change's revision %s", m, parent)
	}
	if len(g.jobs) != 1 {
		t.Fatalf("Job was called %d times, want once: for the change validated before the policy was removed", len(g.jobs))
	}
	jobs, _, err := b.st.ListJobs(b.ctx, store.ListJobsParams{Kinds: []string{"validate"}})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("ListJobs(validate) = %d jobs, %v; want 1", len(jobs), err)
	}
	if pending, err := b.rs.PendingQueues(b.ctx); err != nil || len(pending) != 0 {
		t.Fatalf("PendingQueues = %v, %v; want none", pending, err)
	}
}

func testGatePendingQueues(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	g := newGate()
	if pending, err := b.rs.PendingQueues(b.ctx); err != nil || len(pending) != 0 {
		t.Fatalf("PendingQueues of an empty store = %v, %v; want none", pending, err)
	}
	queueOne := func(name string) store.Change {
		t.Helper()
		r := b.repository(t, name)
		l := b.acquire(t, name, alice, time.Hour, "f")
		return b.mustIntegrate(t, integrateParams(name, r.Mainline, alice, []uint64{l.FencingToken}, put("f", name)))
	}
	for _, name := range []string{"web", "api", "idle", "done"} {
		b.createPolicyRepo(t, name)
	}
	b.createRepo(t, "docs")
	queueOne("web")
	b.advance(t, g, "api", step{queueOne("api").ID, store.ChangeValidating})
	queueOne("api")
	queueOne("docs")
	done := queueOne("done")
	g.setVerdict(verdictOf(gate.VerdictReject, "no"))
	b.advance(t, g, "done", step{done.ID, store.ChangeValidating})
	b.advance(t, g, "done", step{done.ID, store.ChangeRejected})
	b.advance(t, g, "idle")

	pending, err := b.rs.PendingQueues(b.ctx)
	slices.Sort(pending)
	if err != nil || !slices.Equal(pending, []string{"api", "web"}) {
		t.Fatalf("PendingQueues = %v, %v; want [api web]", pending, err)
	}
	_, err = g.run(b.ctx, b.rs, "nope")
	wantErr(t, "AdvanceQueue of an unknown repository", err, store.ErrNotFound)
}

func testGateSetValidation(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	g := newGate()
	r := b.createRepo(t, "web")
	_, err := b.rs.SetValidation(b.ctx, "nope", policy)
	wantErr(t, "SetValidation of an unknown repository", err, store.ErrNotFound)

	b.clk.Advance(time.Hour)
	set := b.setValidation(t, "web", policy)
	want := store.Repository{Name: "web", Mainline: r.Mainline, MainlineCommit: r.MainlineCommit, Validation: policy, CreatedAt: r.CreatedAt}
	assertFields(t, "SetValidation", set, want)
	assertFields(t, "GetRepository after SetValidation", b.repository(t, "web"), want)
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	c1 := b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "a1")))

	// A queued change is validated under the policy in force when its turn comes.
	want.Validation = policy2
	assertFields(t, "SetValidation of another policy", b.setValidation(t, "web", policy2), want)
	assertFields(t, "GetRepository after another policy", b.repository(t, "web"), want)
	b.advance(t, g, "web", step{c1.ID, store.ChangeValidating})
	if len(g.jobs) != 1 || !jsonEqual(g.jobs[0].validation, policy2) {
		t.Fatalf("Job got the policy %s, want the one in force %s", g.jobs[0].validation, policy2)
	}

	// Without a policy, Integrate integrates at once again.
	want.Validation = nil
	assertFields(t, "SetValidation(nil)", b.setValidation(t, "web", nil), want)
	assertFields(t, "GetRepository after removing the policy", b.repository(t, "web"), want)
	c2 := b.mustIntegrate(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/b.go", "b1")))
	if c2.State != store.ChangeIntegrated || b.repository(t, "web").Mainline != c2.IntegratedRevision {
		t.Fatalf("Integrate after the policy was removed = %s, want integrated and the mainline moved", c2.State)
	}
}

func testListJobsClaimedBy(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	// LIKE would read '_' and '%' as wildcards: "al_ce|" and "a%|" must match only themselves.
	workers := []string{"alice|w1", "alice|w2", "alice|w1", "al|w1", "alicex|w1", "al_ce|w1", "a%|w1", "alice|w2"}
	for range len(workers) + 1 { // one stays unclaimed
		b.enqueue(t, store.EnqueueJobParams{})
	}
	var order []string // job ids in claim order, which is creation order: the clock stands still
	claimant := map[string]string{}
	for _, w := range workers {
		j := b.mustClaim(t, w, time.Minute)
		order = append(order, j.ID)
		claimant[j.ID] = w
	}
	// A completed job keeps its claimant; a job queued again has none.
	done, retried := order[2], order[7]
	if _, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: done, Holder: "alice|w1"}); err != nil {
		t.Fatalf("CompleteJob: %v", err)
	}
	if _, err := b.st.FailJob(b.ctx, store.FailJobParams{JobID: retried, Holder: "alice|w2", Error: "x"}); err != nil {
		t.Fatalf("FailJob: %v", err)
	}
	claimant[retried] = ""

	for _, tc := range []struct {
		claimedBy string
		match     func(worker string) bool
	}{
		{"alice|w1", func(w string) bool { return w == "alice|w1" }},
		{"alice|w2", func(w string) bool { return w == "alice|w2" }},
		{"alice|", func(w string) bool { return strings.HasPrefix(w, "alice|") }},
		{"al|", func(w string) bool { return w == "al|w1" }},
		{"al_ce|", func(w string) bool { return w == "al_ce|w1" }},
		{"a%|", func(w string) bool { return w == "a%|w1" }},
		{"alice|w", func(string) bool { return false }},
		{"bob|", func(string) bool { return false }},
	} {
		var want []string
		for _, id := range reversed(order) {
			if w := claimant[id]; w != "" && tc.match(w) {
				want = append(want, id)
			}
		}
		got, _ := b.listAll(t, store.ListJobsParams{Holder: tc.claimedBy, Limit: 1})
		if !slices.Equal(ids(got), want) {
			t.Fatalf("ListJobs(ClaimedBy %q) = %v, want %v", tc.claimedBy, ids(got), want)
		}
	}
	got, _, err := b.st.ListJobs(b.ctx, store.ListJobsParams{Holder: "alice|", States: []store.JobState{store.JobCompleted}})
	if err != nil || !slices.Equal(ids(got), []string{done}) {
		t.Fatalf("ListJobs(ClaimedBy alice|, completed) = %v, %v; want [%s]", ids(got), err, done)
	}
}

// testGateConcurrentOrder: 8 agents integrate into one repository with a policy at once, on
// disjoint leases, while 4 drivers claim and pass the validate jobs and advance the queue at
// once. Every change is integrated exactly once, the mainline's history holds the changes in
// queue order, and no one ever sees two changes validating.
func testGateConcurrentOrder(t *testing.T, newStore Factory) {
	const (
		agents  = 8
		rounds  = 3
		drivers = 4
		total   = agents * rounds
	)
	b := setupRepos(t, newStore)
	r := b.createPolicyRepo(t, "web")
	g := newGate()
	g.setVerdict(passWhenAttested)
	var (
		mu         sync.Mutex
		integrated = map[string]int{} // change id → times answered INTEGRATED
		count      atomic.Int64
		stop       = make(chan struct{})
		stopOnce   sync.Once
		wg         sync.WaitGroup
	)
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		halt()
	}

	for a := range agents {
		holder := fmt.Sprintf("agent%02d|w", a)
		dir := fmt.Sprintf("agents/%02d/", a)
		wg.Go(func() { integrateAsAgent(b, r, holder, dir, rounds, fail) })
	}
	for d := range drivers {
		worker := fmt.Sprintf("runner|w%d", d)
		wg.Go(func() {
			for !stopped() {
				signal := b.st.JobSignal()
				got, err := g.run(b.ctx, b.rs, "web")
				if err != nil {
					fail("AdvanceQueue: %v", err)
					return
				}
				validating := 0
				for _, c := range got {
					switch c.State {
					case store.ChangeValidating:
						validating++
					case store.ChangeIntegrated:
						mu.Lock()
						integrated[c.ID]++
						mu.Unlock()
						if count.Add(1) == total {
							halt()
						}
					case store.ChangeQueued:
					default:
						fail("change %s became %s (%s)", c.ID, c.State, c.Reason)
					}
				}
				if validating > 1 {
					fail("AdvanceQueue set %d changes validating", validating)
				}
				job, err := b.st.ClaimJob(b.ctx, store.ClaimJobParams{Holder: worker, Kinds: []string{"validate"}, Lease: time.Hour})
				if err != nil {
					fail("ClaimJob: %v", err)
					return
				}
				if job != nil {
					if _, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: job.ID, Holder: worker,
						ClaimNumber: job.ClaimNumber, Attestation: attestation(job.ID, "passed "+job.ID)}); err != nil {
						fail("CompleteJob(%s): %v", job.ID, err)
						return
					}
					continue
				}
				if len(got) > 0 {
					continue
				}
				// Nothing to do until an agent queues a change or a job is enqueued.
				select {
				case <-signal:
				case <-time.After(pollFallback):
				case <-stop:
				case <-b.ctx.Done():
					return
				}
			}
		})
	}
	wg.Go(func() { watchOneValidating(b, stopped, fail) })
	wg.Wait()
	if t.Failed() {
		return
	}

	checkIntegratedInQueueOrder(t, b, r, integrated, total)
}

// integrateAsAgent acquires a lease on dir and integrates a file in it each round, every change
// queued; fail reports what went otherwise.
func integrateAsAgent(b *rbundle, r store.Repository, holder, dir string, rounds int, fail func(format string, args ...any)) {
	l, err := b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: "web", Paths: []string{dir}, Holder: holder, TTL: time.Hour})
	if err != nil {
		fail("AcquireLease(%s): %v", dir, err)
		return
	}
	for round := range rounds {
		c, err := b.rs.Integrate(b.ctx, integrateParams("web", r.Mainline, holder, []uint64{l.FencingToken},
			put(fmt.Sprintf("%s%d.txt", dir, round), holder)))
		if err != nil || c.State != store.ChangeQueued {
			fail("Integrate(%s round %d) = %s, %v; want queued", holder, round, c.State, err)
			return
		}
	}
}

// watchOneValidating lists the changes of "web" until stopped, and fails when it sees more
// than one validating at once.
func watchOneValidating(b *rbundle, stopped func() bool, fail func(format string, args ...any)) {
	for !stopped() {
		changes, _, err := b.rs.ListChanges(b.ctx, store.ListChangesParams{Repository: "web", Limit: 1000})
		if err != nil {
			fail("ListChanges: %v", err)
			return
		}
		validating := 0
		for _, c := range changes {
			if c.State == store.ChangeValidating {
				validating++
			}
		}
		if validating > 1 {
			fail("ListChanges shows %d changes validating at once", validating)
		}
		runtime.Gosched()
	}
}

// checkIntegratedInQueueOrder checks, once the queue of "web" is drained, that each of its
// total changes was answered INTEGRATED once (integrated counts the answers), and that the
// mainline's history holds them in queue order, their files and nothing pending.
func checkIntegratedInQueueOrder(t *testing.T, b *rbundle, r store.Repository, integrated map[string]int, total int) {
	changes, _, err := b.rs.ListChanges(b.ctx, store.ListChangesParams{Repository: "web", Limit: 1000})
	if err != nil || len(changes) != total {
		t.Fatalf("ListChanges = %d changes, %v; want %d", len(changes), err, total)
	}
	slices.Reverse(changes) // queue order
	var queueOrder []string
	files := map[string]string{}
	for _, c := range changes {
		if c.State != store.ChangeIntegrated || integrated[c.ID] != 1 {
			t.Fatalf("change %s is %s and was answered integrated %d times, want integrated once", c.ID, c.State, integrated[c.ID])
		}
		queueOrder = append(queueOrder, c.ID)
		files[c.Paths[0]] = c.Holder
	}
	var history []string
	for id := b.repository(t, "web").Mainline; id != r.Mainline; {
		rev := b.revision(t, "web", id)
		history = append(history, rev.ChangeID)
		id = rev.Parent
	}
	slices.Reverse(history)
	if !slices.Equal(history, queueOrder) {
		t.Fatalf("the mainline's history holds the changes\n %v\nwant them in queue order\n %v", history, queueOrder)
	}
	assertTree(t, "the final mainline", b.mainlineTree(t, "web"), treeOf(files))
	if pending, err := b.rs.PendingQueues(b.ctx); err != nil || len(pending) != 0 {
		t.Fatalf("PendingQueues = %v, %v; want none", pending, err)
	}
}

// testInQueue drives the queue transaction's data operations directly, as no engine would: what
// fn did is kept only when it answers nil, the job signal fires after a commit that enqueued a
// job, and an unknown repository is not found before fn runs. (A signal is a hint that may also
// fire for nothing, as PostgreSQL's listener does when it connects: that it does not fire for a
// rolled-back job is not a promise.)
func testInQueue(t *testing.T, newStore Factory) {
	b := setupAudit(t, newStore)
	r := b.createPolicyRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	c := b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "a")))
	b.markLog(t)
	signal := b.st.JobSignal()

	refusal := errors.New("the engine gave up")
	var seen []store.Change
	err := b.rs.InQueue(b.ctx, "web", func(tx store.QueueTx) error {
		if tx.Mainline() != r.Mainline || !jsonEqual(tx.Validation(), policy) {
			return fmt.Errorf("InQueue's transaction starts from %s and %s, want %s and the policy", tx.Mainline(), tx.Validation(), r.Mainline)
		}
		var err error
		if seen, err = tx.Pending(10); err != nil {
			return err
		}
		job, err := tx.Enqueue(store.EnqueueJobParams{Kind: "validate", Payload: []byte(`{}`), MaxAttempts: 1, EnqueuedBy: "gate"})
		if err != nil {
			return err
		}
		moved := seen[0]
		moved.State, moved.JobID = store.ChangeValidating, job.ID
		if _, err := tx.SetChange(moved, store.ChangeQueued); err != nil {
			return err
		}
		tx.Record("change.validating", "change/"+c.ID, map[string]any{"job": job.ID})
		return refusal
	})
	if !errors.Is(err, refusal) {
		t.Fatalf("InQueue whose fn failed = %v, want fn's error", err)
	}
	if len(seen) != 1 || seen[0].ID != c.ID || seen[0].State != store.ChangeQueued {
		t.Fatalf("Pending in InQueue answered %+v, want the queued change %s", seen, c.ID)
	}
	if got := b.change(t, c.ID); got.State != store.ChangeQueued || got.JobID != "" {
		t.Fatalf("after an InQueue whose fn failed the change is %s with job %q, want it queued as it was", got.State, got.JobID)
	}
	if jobs, _ := b.listAll(t, store.ListJobsParams{Limit: 10}); len(jobs) != 0 {
		t.Fatalf("after an InQueue whose fn failed ListJobs answers %d jobs, want none", len(jobs))
	}
	b.sealAll(t)
	if size := b.size(t); size != b.mark {
		t.Fatalf("an InQueue whose fn failed left %d audit events, want none", size-b.mark)
	}

	err = b.rs.InQueue(b.ctx, "web", func(tx store.QueueTx) error {
		_, err := tx.Enqueue(store.EnqueueJobParams{Kind: "validate", Payload: []byte(`{}`), MaxAttempts: 1, EnqueuedBy: "gate"})
		return err
	})
	if err != nil {
		t.Fatalf("InQueue: %v", err)
	}
	select {
	case <-signal:
	case <-time.After(signalDeadline):
		t.Fatal("the job signal did not fire after an InQueue that enqueued a job committed")
	}

	called := false
	err = b.rs.InQueue(b.ctx, "nowhere", func(store.QueueTx) error { called = true; return nil })
	wantErr(t, "InQueue of an unknown repository", err, store.ErrNotFound)
	if called {
		t.Fatal("InQueue of an unknown repository ran fn")
	}
}
