package storetest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// testQueueModel drives one queue through random integrates (some failing in every tree that
// holds them, some sharing a file), random depths and batches on each advance, passes, failures,
// cancellations of queued and claimed jobs, and the policy removed and set again; after every
// advance, and after draining, it checks the queue's promises: a change is integrated exactly
// when its file is on the mainline, in queue order along the mainline's history; a failing
// change never lands validated; a change is rejected for a failed validation only when it is
// the one that fails; a validating change is in a live candidate; nothing is left pending.
//
// With lanes (the seeds from 8), changes write their own file in one of two lanes, sometimes a
// shared file of their lane, and some a shared file of no lane; the order promise holds within
// a lane and around changes of no lane, and every lane candidate that landed is exactly the
// lane's view of the revision it landed as.
func testQueueModel(t *testing.T, newStore Factory) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { queueModelRun(t, newStore, seed, seed >= 8) })
	}
}

var modelLanes = []gate.Lane{{Name: "a", Prefixes: []string{"src/a/"}}, {Name: "b", Prefixes: []string{"src/b/"}}}

func queueModelRun(t *testing.T, newStore Factory, seed uint64, lanes bool) {
	t.Parallel()
	q := newQueueModel(t, newStore, seed, lanes)
	for round := range 80 {
		q.randomRound(round)
	}
	q.drain()
	q.checkDrained()
}

// queueModel is one run of testQueueModel: the queue it drives and the changes it sent.
type queueModel struct {
	t     *testing.T
	rng   *rand.Rand
	seed  uint64
	lanes bool
	b     *rbundle
	r     store.Repository
	l     store.Lease
	g     *testGate
	// From seed 10 the lanes come and go: the order promise is then checked only by the
	// lanes' rules of the moment, which the model does not replay, but every other one holds.
	toggles     bool
	lanesOn     bool
	all         []modelChange
	claimed     map[string]store.Job
	viewChecked map[string]bool // integrated changes whose landing was checked already
	n           int             // the changes sent so far, failed ones included
	removed     bool            // the policy is removed
}

// modelChange is a change the model sent, with what it expects of it.
type modelChange struct {
	c      store.Change
	poison bool
	own    string
	lane   string
}

func newQueueModel(t *testing.T, newStore Factory, seed uint64, lanes bool) *queueModel {
	q := &queueModel{t: t, rng: rand.New(rand.NewPCG(seed, 7)), seed: seed, lanes: lanes}
	q.b = setupRepos(t, newStore)
	q.r = q.b.createPolicyRepo(t, "web")
	q.l = q.b.acquire(t, q.r.Name, alice, 100*time.Hour, "src/", "shared/", "poison/")
	q.g = newGate()
	q.g.setVerdict(passUnlessFailed)
	q.toggles = lanes && seed >= 10
	q.lanesOn = lanes
	if lanes {
		q.g.lanes = func([]byte) []gate.Lane {
			if q.lanesOn {
				return modelLanes
			}
			return nil
		}
	}
	q.claimed = map[string]store.Job{}
	q.viewChecked = map[string]bool{}
	return q
}

// randomRound does a random round of work on the queue, advances it and checks it.
func (q *queueModel) randomRound(round int) {
	t, b, rng := q.t, q.b, q.rng
	if q.toggles && rng.IntN(12) == 0 {
		q.lanesOn = !q.lanesOn
	}
	if rng.IntN(25) == 0 {
		var v []byte
		if q.removed {
			v = policy
		}
		if _, err := b.rs.SetValidation(b.ctx, "web", v); err != nil {
			t.Fatal(err)
		}
		q.removed = !q.removed
	}
	for range rng.IntN(3) {
		if q.removed {
			break
		}
		q.integrateRandom()
	}
	if rng.IntN(10) < 7 {
		for _, j := range b.claimJobs(t, "runner|w1", 100*time.Hour, 100, "validate") {
			q.claimed[j.ID] = j
		}
	}
	for id := range q.claimed {
		if rng.IntN(2) == 0 {
			q.finish(id)
		}
	}
	if rng.IntN(15) == 0 {
		for id := range q.claimed {
			_, _ = b.st.CancelJob(b.ctx, id)
			_, _ = b.st.FailJob(b.ctx, store.FailJobParams{JobID: id, Holder: "runner|w1", ClaimNumber: q.claimed[id].ClaimNumber, Error: "stopped", Final: true})
			delete(q.claimed, id)
			break
		}
	}
	if rng.IntN(20) == 0 {
		jobs, _, err := b.st.ListJobs(b.ctx, store.ListJobsParams{States: []store.JobState{store.JobQueued}, Kinds: []string{"validate"}, Limit: 100})
		if err == nil && len(jobs) > 0 {
			_, _ = b.st.CancelJob(b.ctx, jobs[rng.IntN(len(jobs))].ID)
		}
	}
	q.advance()
	q.check(round)
}

// integrateRandom sends a change of its own file, sometimes with a shared file or a poisoned
// one; a change the mainline conflicts with at once is not kept.
func (q *queueModel) integrateRandom() {
	t, b, rng, n := q.t, q.b, q.rng, q.n
	m := b.repository(t, "web").Mainline
	dir := "src/"
	if q.lanes {
		dir = []string{"src/a/", "src/b/"}[rng.IntN(2)]
	}
	own := fmt.Sprintf("%so%d.go", dir, n)
	edits := []fileEdit{put(own, fmt.Sprint(n))}
	x := modelChange{own: own}
	if rng.IntN(10) < 3 {
		edits = append(edits, put(fmt.Sprintf("shared/s%d.go", rng.IntN(3)), fmt.Sprint(n)))
	} else if q.lanes && rng.IntN(10) < 3 {
		edits = append(edits, put(fmt.Sprintf("%sshared/s%d.go", dir, rng.IntN(2)), fmt.Sprint(n)))
	}
	if rng.IntN(10) < 2 {
		edits = append(edits, put(fmt.Sprintf("%spoison/p%d", dir, n), "x"))
		x.poison = true
	}
	if q.lanes {
		var paths []string
		for _, e := range edits {
			paths = append(paths, e.path)
		}
		x.lane = gate.LaneOf(modelLanes, paths)
	}
	p := integrateParams(q.r.Name, m, alice, []uint64{q.l.FencingToken}, edits...)
	c, err := b.rs.Integrate(b.ctx, p)
	if err != nil {
		return // a conflict with the mainline at once
	}
	x.c = c
	q.all = append(q.all, x)
	q.n++
}

// treeHasPoison tells whether the job's tree holds a poisoned file the mainline does not.
func (q *queueModel) treeHasPoison(job store.Job) bool {
	t, b := q.t, q.b
	var p struct {
		Revision string `json:"revision"`
	}
	if err := json.Unmarshal(job.Payload, &p); err != nil {
		t.Fatal(err)
	}
	rev := b.revision(t, "web", p.Revision)
	mt := b.revision(t, "web", b.repository(t, "web").Mainline)
	return slices.ContainsFunc(rev.Tree, func(e repo.Entry) bool {
		return strings.Contains(e.Path, "poison/") && !slices.ContainsFunc(mt.Tree, func(f repo.Entry) bool { return f.Path == e.Path })
	})
}

// finish completes a claimed job: it fails when its tree holds poison.
func (q *queueModel) finish(id string) {
	b := q.b
	job := q.claimed[id]
	delete(q.claimed, id)
	result := `{"exit_code": 0}`
	if q.treeHasPoison(job) {
		result = `{"exit_code": 1}`
	}
	_, _ = b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: id, Holder: "runner|w1",
		ClaimNumber: job.ClaimNumber, Result: []byte(result), Attestation: attestation(id, result+" "+id)})
}

func (q *queueModel) advance() {
	q.g.depth, q.g.batch = 1+q.rng.IntN(4), 1+q.rng.IntN(4)
	if _, err := q.g.run(q.b.ctx, q.b.rs, "web"); err != nil {
		q.t.Fatalf("seed %d: AdvanceQueue: %v", q.seed, err)
	}
}

// check checks the queue's promises after an advance; round names it in failures.
func (q *queueModel) check(round int) {
	t, b, seed := q.t, q.b, q.seed
	m := b.repository(t, "web").Mainline
	mt := b.revision(t, "web", m)
	has := func(path string) bool {
		return slices.ContainsFunc(mt.Tree, func(e repo.Entry) bool { return e.Path == path })
	}
	// The chain of mainline revisions and the changes integrated at each, in order.
	var chain []string
	for id := m; id != q.r.Mainline; {
		chain = append(chain, id)
		id = b.revision(t, "web", id).Parent
	}
	slices.Reverse(chain)
	pos := map[string]int{}
	for i, id := range chain {
		pos[id] = i
	}
	lastIdx := -1
	lastPos := -1
	now := make([]store.Change, len(q.all))
	for i, x := range q.all {
		now[i] = b.change(t, x.c.ID)
	}
	for i, x := range q.all {
		c := now[i]
		if (c.State == store.ChangeIntegrated) != has(x.own) {
			t.Fatalf("seed %d round %d: change %d is %s (%s) but its own file in the mainline: %v", seed, round, i, c.State, c.Reason, has(x.own))
		}
		if c.State == store.ChangeIntegrated {
			p, ok := pos[c.IntegratedRevision]
			if !ok {
				t.Fatalf("seed %d round %d: change %d integrated at %s, not on the mainline chain", seed, round, i, c.IntegratedRevision)
			}
			if !q.lanes && (p < lastPos || i < lastIdx) {
				t.Fatalf("seed %d round %d: change %d landed out of order", seed, round, i)
			}
			lastPos, lastIdx = p, i
			q.checkNoneAheadPending(round, i, now, pos, p)
			if c.AttestationDigest != "" && !q.viewChecked[c.ID] {
				q.checkLandedAsValidated(round, i, c)
			}
		}
		if c.State == store.ChangeIntegrated && x.poison && c.AttestationDigest != "" {
			t.Fatalf("seed %d round %d: poisoned change %d landed with attestation %s", seed, round, i, c.AttestationDigest)
		}
		if c.State == store.ChangeRejected && strings.HasPrefix(c.Reason, "the tests failed") && !x.poison {
			t.Fatalf("seed %d round %d: change %d rejected for a failure not its own: %s", seed, round, i, c.Reason)
		}
		if c.State == store.ChangeValidating {
			found := false
			for _, cand := range b.liveCandidates(t, "web") {
				if cand.ID == c.CandidateID && slices.Contains(cand.Changes, c.ID) {
					found = true
				}
			}
			if !found {
				t.Fatalf("seed %d round %d: change %d validating without a live candidate", seed, round, i)
			}
		}
	}
}

// checkNoneAheadPending checks that change i, integrated at position p of the mainline chain,
// landed after every change ahead of it that it waits for (now holds the changes' states).
func (q *queueModel) checkNoneAheadPending(round, i int, now []store.Change, pos map[string]int, p int) {
	x := q.all[i]
	for j, y := range q.all[:i] {
		if q.toggles || y.lane != x.lane && y.lane != gate.RootLane && x.lane != gate.RootLane {
			continue // lanes do not wait for each other
		}
		if d := now[j]; d.State == store.ChangeIntegrated && pos[d.IntegratedRevision] > p ||
			!d.State.Terminal() {
			q.t.Fatalf("seed %d round %d: change %d (lane %q) landed before change %d (lane %q, %s) ahead of it",
				q.seed, round, i, x.lane, j, y.lane, d.State)
		}
	}
}

// checkLandedAsValidated checks that what was validated of change i, c now, is exactly what
// landed, as its lane sees it.
func (q *queueModel) checkLandedAsValidated(round, i int, c store.Change) {
	t, b, seed, x := q.t, q.b, q.seed, q.all[i]
	q.viewChecked[c.ID] = true
	landed := b.revision(t, "web", c.IntegratedRevision)
	h := b.history(t, c.ID)
	lane := h[len(h)-1].Lane
	if h[len(h)-1].State != store.CandidateLanded || !q.toggles && lane != x.lane {
		t.Fatalf("seed %d round %d: change %d (lane %q) integrated, its last candidate %+v", seed, round, i, x.lane, h[len(h)-1])
	}
	hidden := gate.LaneHidden(modelLanes, lane)
	if lane == gate.RootLane {
		hidden = nil
	}
	view := slices.DeleteFunc(slices.Clone(landed.Tree), func(e repo.Entry) bool {
		return slices.ContainsFunc(hidden, func(h string) bool { return repo.Covers(h, e.Path) })
	})
	if got := b.revision(t, "web", c.CandidateRevision).Tree; !slices.Equal(got, view) {
		t.Fatalf("seed %d round %d: change %d (lane %q) landed as %v, validated as %v", seed, round, i, lane, view, got)
	}
}

// drain sets the policy again if it was removed, then validates every job and advances,
// checking after each advance, until whatever the queue holds had its turns.
func (q *queueModel) drain() {
	t, b := q.t, q.b
	if q.removed {
		if _, err := b.rs.SetValidation(b.ctx, "web", policy); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 200 {
		for _, j := range b.claimJobs(t, "runner|w1", 100*time.Hour, 100, "validate") {
			q.claimed[j.ID] = j
		}
		for id := range q.claimed {
			q.finish(id)
		}
		q.advance()
		q.check(1000 + round)
	}
}

// checkDrained checks that nothing is left pending, and, with lanes, that some change landed
// validated in a lane.
func (q *queueModel) checkDrained() {
	t, b, seed, all := q.t, q.b, q.seed, q.all
	height := map[string]int{}
	for id, h := b.repository(t, "web").Mainline, 0; id != q.r.Mainline; h-- {
		height[id] = h
		id = b.revision(t, "web", id).Parent
	}
	overtakes, laneLandings := 0, 0
	for i, x := range all {
		c := b.change(t, x.c.ID)
		if !c.State.Terminal() {
			t.Fatalf("seed %d: change %d still %s after draining", seed, i, c.State)
		}
		if c.State != store.ChangeIntegrated || c.AttestationDigest == "" || x.lane == gate.RootLane {
			continue
		}
		laneLandings++
		for _, y := range all[:i] {
			if d := b.change(t, y.c.ID); y.lane != x.lane && d.State == store.ChangeIntegrated &&
				height[d.IntegratedRevision] > height[c.IntegratedRevision] {
				overtakes++
				break
			}
		}
	}
	if q.lanes {
		t.Logf("seed %d: %d changes, %d landed validated in a lane, %d of them before a change of another lane ahead of them",
			seed, len(all), laneLandings, overtakes)
		if laneLandings == 0 {
			t.Fatalf("seed %d: no change landed validated in a lane", seed)
		}
	}
}
