package storetest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/store"
)

// Lanes (ADR-0024): the changes within one lane of the policy are validated on the lane's view
// of the tree and do not wait for other lanes' changes; a change outside every lane waits for
// them all, and they for it.

var testLanes = []gate.Lane{{Name: "web", Prefixes: []string{"web/"}}, {Name: "api", Prefixes: []string{"api/", "cmd/api.go"}}}

// laneFiles is the mainline the lane tests start from: each lane's files and one of no lane's.
var laneFiles = map[string]string{"web/index.html": "<p>hi</p>", "api/main.go": "package api", "cmd/api.go": "package main",
	"go.mod": "module shop"}

// laneRepo creates repository name holding laneFiles, with a policy, and answers it and a lease
// of alice's on every path.
func (b *rbundle) laneRepo(t *testing.T, name string) (store.Repository, store.Lease) {
	t.Helper()
	r := b.createRepo(t, name)
	l := b.acquire(t, name, alice, time.Hour, "web/", "api/", "cmd/", "go.mod")
	var edits []fileEdit
	for p, c := range laneFiles {
		edits = append(edits, put(p, c))
	}
	b.mustIntegrate(t, integrateParams(name, r.Mainline, alice, []uint64{l.FencingToken}, edits...))
	return b.setValidation(t, name, policy), l
}

func laneGate(depth int) *testGate {
	g := newGate()
	g.depth = depth
	g.lanes = func([]byte) []gate.Lane { return testLanes }
	g.setVerdict(passUnlessFailed)
	return g
}

// without answers files without the paths under the prefixes, and with the writes added.
func without(files map[string]string, prefixes []string, writes ...string) map[string]string {
	out := map[string]string{}
	for p, c := range files {
		if !slices.ContainsFunc(prefixes, func(pre string) bool { return p == pre || strings.HasSuffix(pre, "/") && strings.HasPrefix(p, pre) }) {
			out[p] = c
		}
	}
	for i := 0; i+1 < len(writes); i += 2 {
		out[writes[i]] = writes[i+1]
	}
	return out
}

func (b *rbundle) laneChange(t *testing.T, r store.Repository, l store.Lease, path, content string) store.Change {
	t.Helper()
	p := integrateParams(r.Name, r.Mainline, alice, []uint64{l.FencingToken}, put(path, content))
	p.Message = "write " + path
	return b.queue(t, p)
}

// wantView fails the test unless the candidate revision cand of a lane's first candidate is
// built on a revision of its own holding the lane's view files of the revision on, and answers
// that revision's id: a lane candidate's parent is never a revision the mainline is.
func (b *rbundle) wantView(t *testing.T, repository, cand, on string, files map[string]string) string {
	t.Helper()
	view := b.revision(t, repository, b.revision(t, repository, cand).Parent)
	if view.Parent != on || view.TreeDigest != treeOf(files).Digest() || view.ID == on {
		t.Fatalf("lane candidate %s is built on %s (on %s, holding %v); want a view of %s holding %v", cand, view.ID, view.Parent, view.Tree, on, files)
	}
	return view.ID
}

// laneOfJob answers the lane a validate job was enqueued for, as its payload (validateJob)
// names it.
func (b *rbundle) laneOfJob(t *testing.T, jobID string) string {
	t.Helper()
	job, err := b.st.GetJob(b.ctx, jobID)
	if err != nil {
		t.Fatalf("GetJob(%s): %v", jobID, err)
	}
	var p struct {
		Lane string `json:"lane"`
	}
	if err := json.Unmarshal(job.Payload, &p); err != nil {
		t.Fatalf("the payload of %s: %v", jobID, err)
	}
	return p.Lane
}

func testLanesDoNotWaitForEachOther(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r, l := b.laneRepo(t, "shop")
	g := laneGate(4)
	w1 := b.laneChange(t, r, l, "web/index.html", "<p>one</p>")
	a1 := b.laneChange(t, r, l, "api/main.go", "package api // one")
	w2 := b.laneChange(t, r, l, "web/two.html", "two")
	// Each lane is walked on its own: the web changes first (the web lane's first change is the
	// queue's first), then the api change.
	got := b.advance(t, g, "shop", steps([]store.Change{w1, w2, a1}, store.ChangeValidating)...)
	got[1], got[2] = got[2], got[1] // in queue order

	// Each candidate holds its lane's view: the files of no lane, its own lane's, and no other
	// lane's; the second web change is on the first.
	webView := without(laneFiles, []string{"api/", "cmd/api.go"})
	apiView := without(laneFiles, []string{"web/"})
	b.wantCandidate(t, got[0], got[0].CandidateRevision, b.wantView(t, "shop", got[0].CandidateRevision, r.Mainline, webView),
		without(webView, nil, "web/index.html", "<p>one</p>"))
	b.wantCandidate(t, got[1], got[1].CandidateRevision, b.wantView(t, "shop", got[1].CandidateRevision, r.Mainline, apiView),
		without(apiView, nil, "api/main.go", "package api // one"))
	b.wantCandidate(t, got[2], got[2].CandidateRevision, got[0].CandidateRevision,
		without(webView, nil, "web/index.html", "<p>one</p>", "web/two.html", "two"))
	for i, want := range []string{"web", "api", "web"} {
		if lane := b.laneOfJob(t, got[i].JobID); lane != want {
			t.Fatalf("the validate job of %s was enqueued for lane %q, want %q", got[i].ID, lane, want)
		}
	}
	live := b.liveCandidates(t, "shop")
	if len(live) != 3 || live[0].Lane != "web" || live[1].Lane != "web" || live[2].Lane != "api" ||
		live[1].ParentTree != b.revision(t, "shop", got[0].CandidateRevision).GitTree {
		t.Fatalf("live candidates %+v; want web, web, api as built, the second web one on the first's tree", live)
	}

	// The api change passes while the web ones still validate: it lands at once, before the
	// web change queued ahead of it, and the web candidates go on untouched.
	run := b.runner()
	run.finish(t, got[1].JobID, true)
	landed := b.advance(t, g, "shop", step{a1.ID, store.ChangeIntegrated})[0]
	if landed.CandidateRevision != got[1].CandidateRevision || landed.AttestationDigest == "" {
		t.Fatalf("the api change landed from %s with attestation %q; want from its candidate %s with its attestation",
			landed.CandidateRevision, landed.AttestationDigest, got[1].CandidateRevision)
	}
	after := without(laneFiles, nil, "api/main.go", "package api // one")
	b.wantFiles(t, "shop", after)
	m := b.revision(t, "shop", b.repository(t, "shop").Mainline)
	if m.ID != landed.IntegratedRevision || m.Parent != r.Mainline {
		t.Fatalf("the mainline is %s on %s, want the api change's %s on %s", m.ID, m.Parent, landed.IntegratedRevision, r.Mainline)
	}
	b.wantCommit(t, m, "write api/main.go", "Ag-Attestation: "+landed.AttestationDigest, "Ag-Lane: api", "Ag-Lane-Excluded: web/")
	for _, c := range []store.Change{w1, w2} {
		if c := b.change(t, c.ID); c.State != store.ChangeValidating || len(b.history(t, c.ID)) != 1 {
			t.Fatalf("web change %s is %s with %d candidates after the api change landed; want still its first", c.ID, c.State, len(b.history(t, c.ID)))
		}
	}

	// The first web change fails on the lane's view of the mainline itself: it is rejected, and
	// the second web change, built on it, is rebuilt without it, on the view that now holds
	// the api change's files too (which it does not see).
	run.finish(t, got[0].JobID, false)
	moved := b.advance(t, g, "shop", step{w1.ID, store.ChangeRejected}, step{w2.ID, store.ChangeQueued}, step{w2.ID, store.ChangeValidating})
	b.wantCandidate(t, moved[2], moved[2].CandidateRevision, b.wantView(t, "shop", moved[2].CandidateRevision, m.ID, webView),
		without(webView, nil, "web/two.html", "two"))
	run.claimAll(t)
	run.finish(t, moved[2].JobID, true)
	b.advance(t, g, "shop", step{w2.ID, store.ChangeIntegrated})
	b.wantFiles(t, "shop", without(after, nil, "web/two.html", "two"))
}

func testLanesWaitForAChangeOfNoLane(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r, l := b.laneRepo(t, "shop")
	g := laneGate(4)
	w1 := b.laneChange(t, r, l, "web/index.html", "<p>one</p>")
	root := b.laneChange(t, r, l, "go.mod", "module shop // two")
	a1 := b.laneChange(t, r, l, "api/main.go", "package api // three")

	// The change of no lane waits for the web change ahead of it; the api change waits behind it.
	got := b.advance(t, g, "shop", step{w1.ID, store.ChangeValidating})
	run := b.runner()
	run.finish(t, got[0].JobID, true)
	b.advance(t, g, "shop", step{w1.ID, store.ChangeIntegrated})
	// Then it is built on the whole tree, with the policy's own command, and the api change on
	// the api view of its candidate.
	got = b.advance(t, g, "shop", step{root.ID, store.ChangeValidating}, step{a1.ID, store.ChangeValidating})
	whole := without(laneFiles, nil, "web/index.html", "<p>one</p>", "go.mod", "module shop // two")
	b.wantCandidate(t, got[0], got[0].CandidateRevision, b.change(t, w1.ID).IntegratedRevision, whole)
	if lane := b.laneOfJob(t, got[0].JobID); lane != gate.RootLane {
		t.Fatalf("the change of no lane was validated in lane %q, want the whole tree's", lane)
	}
	b.wantCandidate(t, got[1], got[1].CandidateRevision,
		b.wantView(t, "shop", got[1].CandidateRevision, got[0].CandidateRevision, without(whole, []string{"web/"})),
		without(whole, []string{"web/"}, "api/main.go", "package api // three"))

	// The api change passes first but waits for the change of no lane ahead of it; both land
	// once it passes, in order.
	run.finish(t, got[1].JobID, true)
	b.advance(t, g, "shop")
	run.finish(t, got[0].JobID, true)
	b.advance(t, g, "shop", step{root.ID, store.ChangeIntegrated}, step{a1.ID, store.ChangeIntegrated})
	b.wantFiles(t, "shop", without(whole, nil, "api/main.go", "package api // three"))
	m := b.revision(t, "shop", b.repository(t, "shop").Mainline)
	if m.Parent != b.change(t, root.ID).IntegratedRevision {
		t.Fatalf("the api change landed on %s, want on the change of no lane's %s", m.Parent, b.change(t, root.ID).IntegratedRevision)
	}
}

func testLanesChangedSupersedeTheirCandidates(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r, l := b.laneRepo(t, "shop")
	g := laneGate(4)
	w1 := b.laneChange(t, r, l, "web/index.html", "<p>one</p>")
	b.advance(t, g, "shop", step{w1.ID, store.ChangeValidating})
	// The web lane goes: its change is validated on the whole tree now.
	g.lanes = func([]byte) []gate.Lane { return testLanes[1:] }
	got := b.advance(t, g, "shop", step{w1.ID, store.ChangeQueued}, step{w1.ID, store.ChangeValidating})
	h := b.history(t, w1.ID)
	if len(h) != 2 || h[0].State != store.CandidateSuperseded || !strings.Contains(h[0].Reason, "lanes changed") ||
		h[0].Lane != "web" || h[1].Lane != gate.RootLane {
		t.Fatalf("history after the lanes changed: %+v; want the web candidate superseded for it, then one on the whole tree", h)
	}
	b.wantCandidate(t, got[1], got[1].CandidateRevision, r.Mainline, without(laneFiles, nil, "web/index.html", "<p>one</p>"))
}

func testLanesRemovedBetweenABatch(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r, l := b.laneRepo(t, "shop")
	g := laneGate(4)
	g.batch = 4
	w1 := b.laneChange(t, r, l, "web/one.html", "1")
	a1 := b.laneChange(t, r, l, "api/main.go", "package api // one")
	w2 := b.laneChange(t, r, l, "web/two.html", "2")
	got := b.advance(t, g, "shop", step{w1.ID, store.ChangeValidating}, step{w2.ID, store.ChangeValidating},
		step{a1.ID, store.ChangeValidating})
	if got[0].CandidateID != got[1].CandidateID {
		t.Fatalf("the web changes are in candidates %s and %s, want one batch", got[0].CandidateID, got[1].CandidateID)
	}
	// The api lane goes: its change is one of no lane now, between the web batch's two changes.
	// The batch is built again, its first change alone in front of the api change.
	g.lanes = func([]byte) []gate.Lane { return testLanes[:1] }
	moved, err := g.run(b.ctx, b.rs, "shop")
	if err != nil {
		t.Fatalf("AdvanceQueue after the lanes changed: %v", err)
	}
	var gotSteps []step
	for _, c := range moved {
		gotSteps = append(gotSteps, step{c.ID, c.State})
	}
	want := []step{{w1.ID, store.ChangeQueued}, {w2.ID, store.ChangeQueued}, {a1.ID, store.ChangeQueued}, {w1.ID, store.ChangeValidating}}
	if !slices.Equal(gotSteps, want) {
		t.Fatalf("AdvanceQueue after the lanes changed answered %v, want %v", gotSteps, want)
	}
	run := b.runner()
	for range 3 {
		run.claimAll(t)
		for id := range run.claimed {
			run.finish(t, id, true)
		}
		if _, err := g.run(b.ctx, b.rs, "shop"); err != nil {
			t.Fatalf("AdvanceQueue after the lanes changed: %v", err)
		}
	}
	for _, c := range []store.Change{w1, a1, w2} {
		if c := b.change(t, c.ID); c.State != store.ChangeIntegrated {
			t.Fatalf("change %s is %s (%s) after the lanes changed, want integrated", c.ID, c.State, c.Reason)
		}
	}
	b.wantFiles(t, "shop", without(laneFiles, nil, "web/one.html", "1", "web/two.html", "2", "api/main.go", "package api // one"))
}

func testLaneChangeThatNoLongerAppliesIsRejected(t *testing.T, newStore Factory) {
	// Lanes whose paths meet (a file of one, the directory of that name of the other) are
	// refused by the policy's check; the queue still ends such a change rather than rebuilding
	// it forever.
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "shop")
	l := b.acquire(t, "shop", alice, time.Hour, "a", "a/", "go.mod")
	b.mustIntegrate(t, integrateParams("shop", r.Mainline, alice, []uint64{l.FencingToken}, put("go.mod", "m")))
	r = b.setValidation(t, "shop", policy)
	g := newGate()
	g.depth = 4
	g.lanes = func([]byte) []gate.Lane {
		return []gate.Lane{{Name: "x", Prefixes: []string{"a"}}, {Name: "y", Prefixes: []string{"a/"}}}
	}
	g.setVerdict(passUnlessFailed)
	x := b.laneChange(t, r, l, "a", "file a")
	y := b.laneChange(t, r, l, "a/f", "file a/f")
	got := b.advance(t, g, "shop", step{x.ID, store.ChangeValidating}, step{y.ID, store.ChangeValidating})
	run := b.runner()
	run.finish(t, got[1].JobID, true)
	b.advance(t, g, "shop", step{y.ID, store.ChangeIntegrated})
	run.finish(t, got[0].JobID, true)
	rejected := b.advance(t, g, "shop", step{x.ID, store.ChangeRejected})[0]
	if !strings.Contains(rejected.Reason, "a") {
		t.Fatalf("x was rejected with %q, want why it does not apply", rejected.Reason)
	}
	b.wantFiles(t, "shop", map[string]string{"go.mod": "m", "a/f": "file a/f"})
}

func testLaneCandidatesStackOnLiveOnesAcrossAdvances(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r, l := b.laneRepo(t, "shop")
	g := laneGate(4)
	w1 := b.laneChange(t, r, l, "web/one.html", "1")
	first := b.advance(t, g, "shop", step{w1.ID, store.ChangeValidating})[0]
	w2 := b.laneChange(t, r, l, "web/two.html", "2")
	second := b.advance(t, g, "shop", step{w2.ID, store.ChangeValidating})[0]
	if p := b.revision(t, "shop", second.CandidateRevision).Parent; p != first.CandidateRevision {
		t.Fatalf("a web change queued later is built on %s, want on the web candidate ahead of it, %s", p, first.CandidateRevision)
	}
}
