package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// QueueWindow bounds how many pending changes one advance reads (more when depth × batch needs
// it): the live candidates' changes and the next ones to build are at the front of the queue,
// and the rest waits for the advances that follow.
const QueueWindow = 1024

// BuildBudget bounds the changes one advance builds into candidates: the advance holds the
// repository (on SQLite, every write), and a deep queue of large batches is built over several.
// An advance that changed something is followed by another (the gate's), which builds on.
const BuildBudget = 256

// Verdict is what Rules.Decide makes of a candidate's validation.
type Verdict struct {
	Outcome VerdictOutcome
	Reason  string // for VerdictReject and VerdictCancel
	// Attestation is, for a VerdictReject, the digest of the signed FAILED attestation of
	// exactly this candidate that the rejection rests on; empty when there is none.
	Attestation string
}

// VerdictOutcome is the kind of a Verdict.
type VerdictOutcome int

// The outcomes of a Verdict.
const (
	VerdictPending VerdictOutcome = iota // the validation is still running
	VerdictPass                          // a passing, verified attestation for exactly the candidate's tree
	VerdictReject                        // the validation failed, or could not run
	VerdictCancel                        // the validation job was cancelled
)

// Rules are what one advance decides by. The gate reads them from the repository's policy, once
// per advance (Gate.Advance); a test gives its own.
type Rules struct {
	// Decide settles a candidate from its job, c being its last change. att is nil when the job
	// holds no attestation.
	Decide func(c store.Change, candidate store.Revision, job store.Job, att *store.Attestation) Verdict
	// Job answers the validate job to enqueue for a candidate: c is its last change, lane the
	// policy lane it validates, mainline the mainline it is built for (whose copy of the
	// protected paths it is validated with).
	Job func(c store.Change, candidate store.Revision, lane string, mainline store.Revision) store.EnqueueJobParams
	// Protected answers the protected paths c touches: c lands only once approved (ADR-0031).
	// nil: nothing is protected.
	Protected func(c store.Change) []string
	// Lanes are the policy's lanes (ADR-0024); only their names and prefixes count here.
	Lanes []Lane
	// Depth bounds the candidates validating at once (0 or 1: one at a time).
	Depth int
	// Batch bounds the changes one candidate validates together (0 or 1: one).
	Batch int
}

// AdvanceWith runs one advance of repository's queue in the store's queue transaction, with the
// rules rules answers for the policy stored (validation, nil for none), and answers the changes
// whose state changed, in the order they changed. Unknown repository: store.ErrNotFound.
func AdvanceWith(ctx context.Context, st store.RepoStore, repository string, rules func(validation []byte) Rules) ([]store.Change, error) {
	var changed []store.Change
	err := st.InQueue(ctx, repository, func(tx store.QueueTx) error {
		var err error
		changed, err = RunQueue(tx, rules(tx.Validation()))
		return err
	})
	if err != nil {
		return nil, err
	}
	return changed, nil
}

// RunQueue moves a repository's integration queue on through tx by rules r, and answers the
// changes whose state changed, in order.
//
// It walks the pending changes in queue order from the mainline, keeping the tip: the revision
// the next candidate is built on. A live candidate must sit on the tip; one that does not was
// built on something no longer ahead of it and is superseded (its job cancelled, its changes
// queued again, to be rebuilt at once). A candidate whose validation settled passes or fails;
// only the first pending one, whose parent is the mainline itself, lands or is rejected, since
// only then is its outcome its own. A passed one behind it waits and lands with it, in order; a
// failed one behind it waits too, and the candidates after it are rebuilt without it. Queued
// changes are built into new candidates on the tip while fewer than r.Depth live candidates are
// on it, r.Batch changes to a candidate. A change that does not apply to the mainline is
// rejected; one that does not apply on a change ahead waits, and so does everything after it.
// Without a policy (it was removed), the queued changes are integrated directly once no
// candidate is ahead of them.
//
// With lanes (ADR-0024) the queue is walked in sections: the changes of the root lane at its
// front on the whole tree, as above; then the changes of the lanes up to the next root lane
// change, each lane on its own from its view of the tip, so that the changes of one lane do not
// wait for another's; the rest waits for those to land.
func RunQueue(tx store.QueueTx, r Rules) ([]store.Change, error) {
	if r.Decide == nil || r.Job == nil {
		return nil, errors.New("advance queue: Decide and Job are required")
	}
	// A candidate must fit well inside the window the walk reads (policies allow 64).
	batch := min(r.Batch, QueueWindow/4)
	q := &queueRun{tx: tx, p: r, depth: max(r.Depth, 1), batch: max(batch, 1), lanes: r.Lanes, counts: map[string]laneCount{}}
	if err := q.run(); err != nil {
		return nil, err
	}
	return q.changed, nil
}

type queueRun struct {
	tx           store.QueueTx
	p            Rules
	depth, batch int
	changed      []store.Change

	window     []store.Change // the part of the queue this advance reads, oldest first
	windowFull bool           // the queue may go on past it
	mainline   store.Revision
	lanes      []Lane
	built      int                  // changes built into candidates by this advance
	counts     map[string]laneCount // each lane's live candidates, as its walk left them or before it
	// candidates are the live candidates the walks have not ended, by id.
	candidates map[string]*store.Candidate
}

// laneCount is what a lane's live candidates hold: workers (validating) and what a failure
// ahead of them costs (live).
type laneCount struct{ validating, live int }

// walk is the walk of one section of the queue in one lane.
type walk struct {
	*queueRun
	lane    string
	hidden  []string       // the paths the lane's view leaves out
	pending []store.Change // the section's changes of the lane, in queue order
	at      []int          // where each of pending is in the window
	tip     store.Revision // for a lane, a revision of its view
	// virtual is set while tip is the lane's view of a revision (tip.ID), not a stored revision
	// of its own: the first candidate built on it stores it.
	virtual bool
	ahead   int // pending changes ahead of the walk that are not on the mainline
	chain   int // candidates on the tip's chain still validating: the workers the queue holds
	live    int // live candidates ahead of the walk, whatever their state
	// elsewhere is what the other lanes' live candidates hold.
	elsewhere laneCount
	blocked   bool   // a queued change was left waiting: nothing after it is built
	why       string // what last moved the tip away from what later candidates were built on
	// laneHead is the walk's ahead when no change of its own lane is ahead: a lane's first
	// candidate is built whatever the others hold, so that no lane waits for another's.
	laneHead int
	stopped  bool // the walk stopped before the end of its changes
	// share, when not 0, is the lane's part of the depth: the lanes with changes waiting share
	// the workers, so that one lane's candidates do not fill them while another's wait.
	share int
}

func (r *queueRun) run() error {
	var err error
	if r.mainline, err = r.tx.Revision(r.tx.Mainline()); err != nil {
		return fmt.Errorf("the mainline: %w", err)
	}
	size := max(QueueWindow, 2*r.depth*r.batch+64)
	pending, err := r.tx.Pending(size)
	if err != nil {
		return err
	}
	r.window, r.windowFull = pending, len(pending) == size
	liveList, err := r.tx.Live()
	if err != nil {
		return err
	}
	lanes := make([]string, len(pending))
	members := make(map[string][]int)
	for i, c := range pending {
		lanes[i] = LaneOf(r.lanes, c.Paths)
		if c.State == store.ChangeValidating && c.CandidateID != "" {
			members[c.CandidateID] = append(members[c.CandidateID], i)
		}
	}
	// Each change's place: the section of the walk it falls in (the root lane changes at the
	// front, the lanes' changes up to the next root lane change, the rest) and its lane.
	front := 0
	for front < len(pending) && lanes[front] == RootLane {
		front++
	}
	end := front
	for end < len(pending) && lanes[end] != RootLane {
		end++
	}
	walkOf := func(i int) string {
		switch {
		case i < front:
			return "front"
		case i < end:
			return "lane " + lanes[i]
		}
		return "rest"
	}
	if err := r.keepLive(liveList, lanes, members, walkOf); err != nil {
		return err
	}

	// The root lane's changes at the front of the queue, on the whole tree.
	root := r.newWalk(RootLane, nil, r.mainline, 0, 0, positions(0, front))
	if err := root.run(); err != nil {
		return err
	}
	r.counts[RootLane] = laneCount{root.chain, root.live}
	if root.stopped {
		// It left changes for an advance that reads more of the queue: the lanes behind them
		// wait too.
		root.blocked, root.ahead = true, max(root.ahead, 1)
	}
	// Then each lane's changes up to the next root lane change, on the lane's view of the tip.
	var order []string
	for i := front; i < end; i++ {
		if !slices.Contains(order, lanes[i]) {
			order = append(order, lanes[i])
		}
	}
	for _, name := range order {
		hidden := LaneHidden(r.lanes, name)
		tree, err := store.ParseGitID(root.tip.GitTree)
		if err != nil {
			return fmt.Errorf("revision %s: git tree: %w", root.tip.ID, err)
		}
		view, err := r.tx.Project(tree, hidden)
		if err != nil {
			return fmt.Errorf("revision %s: the view of lane %s: %w", root.tip.ID, name, err)
		}
		tip := root.tip
		tip.GitTree, tip.TreeDigest = view.String(), ""
		var at []int
		for i := front; i < end; i++ {
			if lanes[i] == name {
				at = append(at, i)
			}
		}
		w := r.newWalk(name, hidden, tip, root.ahead, root.ahead, at)
		w.blocked, w.why, w.virtual = root.blocked, root.why, true
		w.share = (r.depth + len(order) - 1) / len(order)
		if err := w.run(); err != nil {
			return err
		}
		r.counts[name] = laneCount{w.chain, w.live}
	}
	if end == len(pending) {
		return nil
	}
	// A root lane change behind the lanes' changes is built once they landed, on the whole tree
	// then; it and everything behind it waits.
	rest := r.newWalk(RootLane, nil, r.mainline, 1, 0, positions(end, len(pending)))
	rest.blocked = true
	return rest.run()
}

// keepLive keeps the live candidates whose changes are still where they were built, counting
// them by lane, and supersedes the others: those with no change pending any more, and those
// whose changes the policy's lanes now put in another lane or another section of the walk.
// lanes and members are each pending change's lane and each candidate's changes in the window.
func (r *queueRun) keepLive(liveList []store.Candidate, lanes []string, members map[string][]int, walkOf func(int) string) error {
	r.candidates = make(map[string]*store.Candidate, len(liveList))
	for i := range liveList {
		c := &liveList[i]
		idx := members[c.ID]
		switch {
		case len(idx) == 0 && !r.windowFull:
			// None of its changes is pending any more (written off by hand, or by a replica
			// from before candidates): it has nothing left to decide.
			if err := r.supersede(*c, nil, "none of its changes is waiting any more"); err != nil {
				return err
			}
			continue
		case slices.ContainsFunc(idx, func(j int) bool { return lanes[j] != c.Lane }),
			slices.ContainsFunc(idx, func(j int) bool { return walkOf(j) != walkOf(idx[0]) }):
			// Its changes are in another lane now, or, the lanes having changed, a change of
			// another lane came to stand between them.
			changes := make([]*store.Change, len(idx))
			for k, j := range idx {
				changes[k] = &r.window[j]
			}
			if err := r.supersede(*c, changes, "the policy's lanes changed: its changes are validated in another lane now"); err != nil {
				return err
			}
			continue
		}
		r.candidates[c.ID] = c
		n := r.counts[c.Lane]
		n.live++
		if c.State == store.CandidateValidating {
			n.validating++
		}
		r.counts[c.Lane] = n
	}
	return nil
}

// newWalk answers the walk of the window's changes at positions in a lane, from tip, with ahead
// changes ahead of it already; laneHead is ahead's part that is not the lane's own.
func (r *queueRun) newWalk(lane string, hidden []string, tip store.Revision, ahead, laneHead int, at []int) *walk {
	w := &walk{queueRun: r, lane: lane, hidden: hidden, tip: tip, ahead: ahead, laneHead: laneHead, at: at}
	w.pending = make([]store.Change, len(at))
	for k, i := range at {
		w.pending[k] = r.window[i]
	}
	for name, n := range r.counts {
		if name != lane {
			w.elsewhere.validating += n.validating
			w.elsewhere.live += n.live
		}
	}
	return w
}

// run walks the section: it settles, lands, rejects or supersedes its live candidates, and
// builds its queued changes into new ones.
func (r *walk) run() error {
	pending := r.pending
	members := make(map[string][]int)
	for i, c := range pending {
		if c.State == store.ChangeValidating && c.CandidateID != "" {
			members[c.CandidateID] = append(members[c.CandidateID], i)
		}
	}
	defer func() {
		for k, i := range r.at {
			r.window[i] = pending[k]
		}
	}()
	for i := 0; i < len(pending); {
		c := pending[i]
		if c.State.Terminal() || c.State == store.ChangeAwaitingApproval {
			i++ // settled earlier in this walk, or out of the queue until approved
			continue
		}
		if c.State == store.ChangeValidating {
			cand := r.candidates[c.CandidateID]
			idx := members[c.CandidateID]
			n := len(idx)
			if n > 0 && r.windowFull && (r.at[idx[n-1]] == len(r.window)-1 || cand != nil && cand.Size > n) {
				// Its changes may go on past what was read: it is left for an advance that
				// sees all of them.
				r.stopped = true
				break
			}
			if r.lane == RootLane && cand != nil && n > 0 && idx[0] == i && cand.Revision == r.tip.ID && r.ahead == 0 {
				// The mainline is this candidate already: a replica of the version before
				// candidates landed it for its first change only. The others landed with it.
				if err := r.landed(cand, pending, idx); err != nil {
					return err
				}
				i = idx[n-1] + 1
				continue
			}
			whole := cand != nil && idx[0] == i && idx[n-1] == i+n-1 && (cand.Size == 0 || cand.Size == n)
			if !whole || !r.onTip(cand) || r.blocked {
				if err := r.requeue(pending, i, cand, idx); err != nil {
					return err
				}
				continue // pending[i] is QUEUED now
			}
			next, err := r.settle(pending[i:i+n], i, cand)
			if err != nil {
				return err
			}
			i = next
			continue
		}
		next, err := r.build(pending, i)
		if err != nil {
			return err
		}
		i = next
	}
	return nil
}

func positions(from, to int) []int {
	at := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		at = append(at, i)
	}
	return at
}

// onTip reports whether a live candidate was built on the walk's tip: on the revision itself,
// or, in a lane, on the same view of the tree.
func (r *walk) onTip(cand *store.Candidate) bool {
	if cand.Lane != r.lane {
		return false
	}
	if r.lane == RootLane {
		return cand.ParentRevision == r.tip.ID
	}
	return cand.ParentTree == r.tip.GitTree
}

// requeue supersedes the stale candidate of pending[i] and queues its changes again in place.
func (r *walk) requeue(pending []store.Change, i int, cand *store.Candidate, idx []int) error {
	if cand == nil || !slices.Contains(idx, i) {
		// A VALIDATING change without a live candidate of its own: a queue from before
		// candidates, or an inconsistency; either way it is built again.
		return r.requeueChange(&pending[i], "it had no live candidate")
	}
	why := r.why
	switch {
	case r.blocked:
		why = "a change ahead of it waits to be built"
	case why == "":
		why = "it was built on revision " + cand.ParentRevision + ", which is no longer what is ahead of it"
	}
	changes := make([]*store.Change, len(idx))
	for k, j := range idx {
		changes[k] = &pending[j]
	}
	return r.supersede(*cand, changes, why)
}

// supersede ends a live candidate whose tree is no longer the one its changes would land as,
// cancels its job, and queues its changes again.
func (r *queueRun) supersede(c store.Candidate, changes []*store.Change, why string) error {
	from := c.State
	c.State, c.Reason = store.CandidateSuperseded, why
	if err := r.tx.SetCandidate(c, from); err != nil {
		return err
	}
	delete(r.candidates, c.ID)
	r.tx.Record("candidate.superseded", "candidate/"+c.ID, map[string]any{"job": c.JobID, "reason": why})
	if err := r.tx.CancelJob(c.JobID); err != nil {
		return err
	}
	for _, ch := range changes {
		if err := r.requeueChange(ch, why); err != nil {
			return err
		}
	}
	return nil
}

func (r *queueRun) requeueChange(c *store.Change, why string) error {
	c.State, c.CandidateRevision, c.JobID, c.CandidateID = store.ChangeQueued, "", "", ""
	return r.set(c, store.ChangeValidating, "change.requeued", map[string]any{"reason": why})
}

// set stores a change's move from state from and records its event.
func (r *queueRun) set(c *store.Change, from store.ChangeState, action string, det map[string]any) error {
	stored, err := r.tx.SetChange(*c, from)
	if err != nil {
		return err
	}
	*c = stored
	r.tx.Record(action, "change/"+c.ID, det)
	r.changed = append(r.changed, stored)
	return nil
}

// settle decides the live candidate of group, its changes, the pending ones from index i, when
// its validation settled, and lands, rejects, splits or keeps it; it answers where the walk goes
// on.
func (r *walk) settle(group []store.Change, i int, cand *store.Candidate) (int, error) {
	n := len(group)
	cand.Changes = make([]string, n)
	for j, c := range group {
		cand.Changes[j] = c.ID
	}
	last := group[n-1]
	rev, err := r.tx.Revision(cand.Revision)
	if err != nil {
		return 0, fmt.Errorf("candidate %s: %w", cand.ID, err)
	}
	if cand.State == store.CandidateValidating {
		job, att, err := r.tx.Job(cand.JobID)
		if err != nil {
			return 0, fmt.Errorf("candidate %s: %w", cand.ID, err)
		}
		v := r.p.Decide(last, rev, job, att)
		switch v.Outcome {
		case VerdictPending:
			if r.grows(group, i, cand, rev, job) {
				changes := make([]*store.Change, n)
				for j := range group {
					changes[j] = &group[j]
				}
				return i, r.supersede(*cand, changes, "more changes came before a worker took it: it is built again as a larger batch")
			}
		case VerdictPass:
			cand.State, cand.AttestationDigest = store.CandidatePassed, job.AttestationDigest
			if err := r.tx.SetCandidate(*cand, store.CandidateValidating); err != nil {
				return 0, err
			}
			r.tx.Record("candidate.passed", "candidate/"+cand.ID,
				map[string]any{"attestation_digest": job.AttestationDigest, "job": job.ID})
		case VerdictReject:
			cand.State, cand.AttestationDigest, cand.Reason = store.CandidateFailed, v.Attestation, v.Reason
			if err := r.tx.SetCandidate(*cand, store.CandidateValidating); err != nil {
				return 0, err
			}
			det := map[string]any{"job": job.ID, "reason": v.Reason}
			if v.Attestation != "" {
				det["attestation_digest"] = v.Attestation
			}
			r.tx.Record("candidate.failed", "candidate/"+cand.ID, det)
		case VerdictCancel:
			// The job was enqueued for the candidate's last change, and its author (or an
			// admin) cancelled it: that change is cancelled. The others of a batch are
			// someone else's, and are validated again.
			cand.State, cand.Reason = store.CandidateCancelled, v.Reason
			if err := r.tx.SetCandidate(*cand, store.CandidateValidating); err != nil {
				return 0, err
			}
			for j := range group[:n-1] {
				if err := r.requeueChange(&group[j], "the validate job of its batch was cancelled for "+last.ID); err != nil {
					return 0, err
				}
			}
			c := &group[n-1]
			c.State, c.Reason = store.ChangeCancelled, v.Reason
			if err := r.set(c, store.ChangeValidating, "change.cancelled", map[string]any{"reason": v.Reason}); err != nil {
				return 0, err
			}
			r.why = "the change " + last.ID + " ahead of it was cancelled"
			if n > 1 {
				return i, nil // the rest of the batch is built again here
			}
			return i + n, nil
		default:
			return 0, fmt.Errorf("candidate %s: Decide answered the unknown outcome %d", cand.ID, v.Outcome)
		}
	}
	switch cand.State {
	case store.CandidatePassed:
		if r.ahead == 0 {
			landed, err := r.land(cand, rev, group)
			if err != nil || landed {
				return i + n, err
			}
			return i, nil // its changes are queued again, and built again here
		}
		r.tip, r.ahead, r.live, r.virtual = rev, r.ahead+n, r.live+1, false // it holds no worker: it does not count against the depth
	case store.CandidateValidating:
		r.tip, r.chain, r.ahead, r.live, r.virtual = rev, r.chain+1, r.ahead+n, r.live+1, false
	case store.CandidateFailed:
		if n > 1 && r.ahead == 0 {
			// A batch that failed on the mainline itself: its parts are validated apart, each
			// on the one before, until the changes that broke it are alone. Behind a pending
			// candidate, the failure may be that one's, and it waits as a single does.
			return i, r.split(cand, group)
		}
		if r.ahead == 0 {
			// On the mainline itself: the change broke it.
			cand.State = store.CandidateRejected
			if err := r.tx.SetCandidate(*cand, store.CandidateFailed); err != nil {
				return 0, err
			}
			c := &group[0]
			c.State, c.Reason, c.AttestationDigest = store.ChangeRejected, cand.Reason, cand.AttestationDigest
			det := map[string]any{"reason": c.Reason}
			if c.AttestationDigest != "" {
				det["attestation_digest"] = c.AttestationDigest
			}
			if err := r.set(c, store.ChangeValidating, "change.rejected", det); err != nil {
				return 0, err
			}
			r.why = "the change " + c.ID + " ahead of it was rejected"
			return i + 1, nil
		}
		// Whether it broke the candidate itself is known only once the ones ahead pass; those
		// after it are built without it meanwhile.
		r.ahead, r.live = r.ahead+n, r.live+1
		r.why = "the candidate " + cand.ID + " of change " + last.ID + " ahead of it failed"
	default:
		return 0, fmt.Errorf("candidate %s: live in state %s", cand.ID, cand.State)
	}
	return i + n, nil
}

// grows reports whether a batch candidate (group, its changes, of revision rev) no worker has
// taken yet would take the queued change behind it, which came after it was built: changes that
// pile up before the workers come are validated in one batch rather than behind one that holds
// the first alone. A change that was there when it was built was left out for a reason (the
// batch was full, or it waits), so only a newer one counts, which also bounds the rebuilds by
// the changes that arrive.
func (r *walk) grows(group []store.Change, i int, cand *store.Candidate, rev store.Revision, job store.Job) bool {
	n := len(group)
	if r.batch <= 1 || job.State != store.JobQueued || job.ClaimNumber > 0 || i+n >= len(r.pending) {
		return false
	}
	next := r.pending[i+n]
	if next.State != store.ChangeQueued || !next.CreatedAt.After(cand.CreatedAt) {
		return false
	}
	limit := r.batch
	for _, c := range r.pending[i : i+n+1] {
		if c.BatchLimit > 0 {
			limit = min(limit, c.BatchLimit)
		}
	}
	if n >= limit || r.full() || r.built >= BuildBudget {
		return false // it would not be built again here
	}
	// Only a batch that would take the change grows: one that does not apply on it waits behind
	// it, and building the batch again without it would gain nothing, every advance.
	tree, err := store.ParseGitID(rev.GitTree)
	if err != nil {
		return false
	}
	_, _, err = r.rebase(&next, tree)
	return err == nil
}

// land moves the mainline to a passed candidate whose parent is the mainline, gives it its
// mainline commit and integrates its changes.
func (r *walk) land(cand *store.Candidate, rev store.Revision, group []store.Change) (bool, error) {
	// The pass was recorded by this advance or an earlier one: the mainline moves only on a
	// verdict read again now, from the stored job and attestation.
	job, att, err := r.tx.Job(cand.JobID)
	if err != nil {
		return false, fmt.Errorf("candidate %s: %w", cand.ID, err)
	}
	if v := r.p.Decide(group[len(group)-1], rev, job, att); v.Outcome != VerdictPass || job.AttestationDigest != cand.AttestationDigest {
		return false, fmt.Errorf("candidate %s: passed, but its job %s no longer reads as a pass of it", cand.ID, job.ID)
	}
	if rejected, err := r.rejectStaleClaims(cand, group); err != nil || rejected {
		return false, err
	}
	if parked, err := r.parkUnapproved(cand, group); err != nil || parked {
		return false, err
	}
	info, err := r.commitInfo(group)
	if err != nil {
		return false, err
	}
	info.Attestation = cand.AttestationDigest
	// moved is the revision the mainline moves to: the candidate itself, or, in a lane, its
	// changes applied to the mainline of the moment.
	var moved store.Revision
	if r.lane == RootLane {
		if err := r.tx.MoveMainline(cand.ParentRevision, rev.ID); err != nil {
			return false, err
		}
		if rev.GitCommit, err = r.tx.WriteCommit(rev, r.mainline, info); err != nil {
			return false, fmt.Errorf("candidate %s: %w", cand.ID, err)
		}
		moved = rev
	} else if moved, err = r.landLane(cand, rev, group, info); err != nil || moved.ID == "" {
		return false, err
	}
	cand.State = store.CandidateLanded
	if err := r.tx.SetCandidate(*cand, store.CandidatePassed); err != nil {
		return false, err
	}
	for j := range group {
		c := &group[j]
		c.State, c.IntegratedRevision, c.AttestationDigest = store.ChangeIntegrated, moved.ID, cand.AttestationDigest
		c.CandidateRevision, c.JobID = rev.ID, cand.JobID
		if err := r.set(c, store.ChangeValidating, "change.integrated", integratedDetails(*c)); err != nil {
			return false, err
		}
	}
	if err := r.finishTasks(group); err != nil {
		return false, err
	}
	// A lane's tip stays its view, which the candidate is; the root's is the mainline.
	r.mainline, r.tip, r.virtual = moved, rev, false
	if r.lane == RootLane {
		r.tip = moved
	}
	r.why = ""
	return true, nil
}

// parkUnapproved takes the changes of a passed candidate that touch a protected path without
// an approval out of the queue, into ChangeAwaitingApproval, before the mainline moves: the
// candidate is superseded, and the others of its batch are built again without them. It
// reports whether it parked any.
func (r *walk) parkUnapproved(cand *store.Candidate, group []store.Change) (bool, error) {
	if r.p.Protected == nil {
		return false, nil
	}
	waiting := map[string][]string{}
	for _, c := range group {
		if touched := r.p.Protected(c); len(touched) > 0 && c.ApprovedBy == "" {
			waiting[c.ID] = touched
		}
	}
	if len(waiting) == 0 {
		return false, nil
	}
	changes := make([]*store.Change, len(group))
	for j := range group {
		changes[j] = &group[j]
	}
	var ids []string
	for _, c := range group {
		if waiting[c.ID] != nil {
			ids = append(ids, c.ID)
		}
	}
	why := "it passed, but " + strings.Join(ids, ", ") + " touches protected paths and waits for an approval"
	if err := r.supersede(*cand, changes, why); err != nil {
		return false, err
	}
	for j := range group {
		c := &group[j]
		touched := waiting[c.ID]
		if touched == nil {
			continue
		}
		c.State = store.ChangeAwaitingApproval
		c.Reason = fmt.Sprintf("validated; it changes the protected %s %s, so it lands once a reviewer approves it: ag change approve %s",
			plural(len(touched), "path", "paths"), strings.Join(touched, ", "), c.ID)
		if err := r.set(c, store.ChangeQueued, "change.awaiting_approval", map[string]any{
			"attestation_digest": cand.AttestationDigest, "candidate": cand.ID, "protected_paths": touched,
		}); err != nil {
			return false, err
		}
	}
	r.why = "a change ahead of it waits for an approval"
	return true, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// landLane moves the mainline on by a passed lane candidate rev (of its changes group): the
// mainline may hold other lanes' changes the candidate was not built on, so its changes are
// applied to the mainline now, and the mainline moves to the result only if the lane's view of
// it is exactly the tree the attestation is about and nothing outside the lane changed. It
// answers the new mainline revision, or, when that does not hold (the lanes changed under it),
// supersedes the candidate and answers no revision.
func (r *walk) landLane(cand *store.Candidate, rev store.Revision, group []store.Change, info store.CommitInfo) (store.Revision, error) {
	before, err := store.ParseGitID(r.mainline.GitTree)
	if err != nil {
		return store.Revision{}, fmt.Errorf("revision %s: git tree: %w", r.mainline.ID, err)
	}
	tree := before
	for j := range group {
		if tree, _, err = r.rebase(&group[j], tree); err != nil {
			if !repo.DoesNotApply(err) {
				return store.Revision{}, fmt.Errorf("change %s: %w", group[j].ID, err)
			}
			// It does not apply to the mainline itself, as a change built on it would not: it
			// is rejected, and the others of its batch are built again.
			return store.Revision{}, r.rejectUnapplied(cand, group, j, err)
		}
	}
	var why string
	if why == "" {
		view, err := r.tx.Project(tree, r.hidden)
		if err != nil {
			return store.Revision{}, fmt.Errorf("candidate %s: the lane's view: %w", cand.ID, err)
		}
		own := LanePaths(r.lanes, r.lane)
		outside, err := r.tx.Project(tree, own)
		if err != nil {
			return store.Revision{}, err
		}
		outsideBefore, err := r.tx.Project(before, own)
		if err != nil {
			return store.Revision{}, err
		}
		switch {
		case view.String() != rev.GitTree:
			why = fmt.Sprintf("the lane's view of the mainline with it is %s, not the tree %s validated", view, rev.GitTree)
		case outside != outsideBefore:
			why = "it changes files outside its lane " + r.lane
		}
	}
	if why != "" {
		changes := make([]*store.Change, len(group))
		for j := range group {
			changes[j] = &group[j]
		}
		r.why = "the candidate " + cand.ID + " ahead of it could not land"
		return store.Revision{}, r.supersede(*cand, changes, why)
	}
	last := group[len(group)-1]
	info.Lane, info.LaneExcluded = r.lane, r.hidden
	landed, err := r.tx.StoreRevision(r.mainline, tree, last.ID, last.Holder, &info)
	if err != nil {
		return store.Revision{}, fmt.Errorf("candidate %s: %w", cand.ID, err)
	}
	if err := r.tx.MoveMainline(r.mainline.ID, landed.ID); err != nil {
		return store.Revision{}, err
	}
	return landed, nil
}

// rejectUnapplied ends a passed lane candidate whose change group[j] does not apply to the
// mainline (err says why): that change is rejected, the others are queued again.
func (r *walk) rejectUnapplied(cand *store.Candidate, group []store.Change, j int, err error) error {
	var others []*store.Change
	for k := range group {
		if k != j {
			others = append(others, &group[k])
		}
	}
	c := &group[j]
	if err := r.supersede(*cand, others, "the change "+c.ID+" of its candidate does not apply to the mainline"); err != nil {
		return err
	}
	c.State, c.Reason, c.CandidateID = store.ChangeRejected, err.Error(), ""
	r.why = "the change " + c.ID + " ahead of it was rejected"
	return r.set(c, store.ChangeValidating, "change.rejected", map[string]any{"reason": c.Reason})
}

// commitInfo answers the mainline commit of a candidate of changes: the change's own message
// and tokens, or, for a batch, one message naming every change and the union of their tokens.
func (r *walk) commitInfo(group []store.Change) (store.CommitInfo, error) {
	var info store.CommitInfo
	for j, c := range group {
		_, tokens, err := r.tx.Edits(c.ID)
		if err != nil {
			return store.CommitInfo{}, err
		}
		info.FencingTokens = append(info.FencingTokens, tokens...)
		if j == 0 || c.CreatedAt.After(info.AuthoredAt) {
			info.AuthoredAt = c.CreatedAt
		}
	}
	info.ApprovedBy = approvers(group)
	info.Tasks = taskClaims(group)
	if len(group) == 1 {
		info.Message = group[0].Message
		return info, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Integrate %d changes\n", len(group))
	for _, c := range group {
		subject, _, _ := strings.Cut(strings.TrimSpace(c.Message), "\n")
		if subject == "" {
			subject = "(no message)"
		}
		fmt.Fprintf(&b, "\n%s %s: %s", c.ID, c.Holder, subject)
	}
	info.Message = b.String()
	for _, c := range group {
		info.Batch = append(info.Batch, store.BatchedChange{ID: c.ID, Holder: c.Holder})
	}
	return info, nil
}

// approvers answers the principals who approved the changes of group, each once, in order.
func approvers(group []store.Change) []string {
	var out []string
	for _, c := range group {
		if c.ApprovedBy != "" && !slices.Contains(out, c.ApprovedBy) {
			out = append(out, c.ApprovedBy)
		}
	}
	return out
}

// split ends a failed batch and queues its changes again, each half to be validated apart.
func (r *walk) split(cand *store.Candidate, group []store.Change) error {
	half := (len(group) + 1) / 2
	cand.State = store.CandidateSplit
	if err := r.tx.SetCandidate(*cand, store.CandidateFailed); err != nil {
		return err
	}
	r.tx.Record("candidate.split", "candidate/"+cand.ID, map[string]any{"changes": cand.Changes, "into": int64(half)})
	why := fmt.Sprintf("its batch %s of %d changes failed: validating parts of at most %d", cand.ID, len(group), half)
	for j := range group {
		c := &group[j]
		c.State, c.CandidateRevision, c.JobID, c.CandidateID = store.ChangeQueued, "", "", ""
		if c.BatchLimit == 0 || c.BatchLimit > half {
			c.BatchLimit = half
		}
		if err := r.set(c, store.ChangeValidating, "change.requeued", map[string]any{"reason": why}); err != nil {
			return err
		}
	}
	r.why = "the batch " + cand.ID + " ahead of it was split"
	return nil
}

// build gives the queued changes from pending[i] their turn: a candidate on the tip, or, when
// the repository has no policy any more, the mainline itself. It answers where the walk goes on.
func (r *walk) build(pending []store.Change, i int) (int, error) {
	if r.blocked {
		return i + 1, nil
	}
	validation := r.tx.Validation()
	if validation == nil {
		if r.ahead > 0 {
			r.blocked = true // candidates built under the policy land first
			return i + 1, nil
		}
		return i + 1, r.integrateDirectly(&pending[i])
	}
	if r.full() && r.ahead > r.laneHead || r.built >= BuildBudget {
		// Passed and failed candidates waiting behind a slow one hold no worker, but all of
		// them are validated again if it fails: they are bounded too. A lane's first candidate
		// is built anyway: a lane does not wait for the others' workers.
		r.blocked = true
		return i + 1, nil
	}
	tree, err := store.ParseGitID(r.tip.GitTree)
	if err != nil {
		return 0, fmt.Errorf("revision %s: git tree: %w", r.tip.ID, err)
	}
	limit := r.batch
	var built []*store.Change
	j := i
	for ; j < len(pending) && pending[j].State == store.ChangeQueued; j++ {
		c := &pending[j]
		if c.BatchLimit > 0 {
			limit = min(limit, c.BatchLimit)
		}
		if len(built) >= limit {
			break
		}
		t, _, err := r.rebase(c, tree)
		switch {
		case err == nil:
			tree = t
			built = append(built, c)
			continue
		case !repo.DoesNotApply(err):
			return 0, fmt.Errorf("change %s: %w", c.ID, err)
		case len(built) == 0 && r.ahead == 0:
			// It does not apply to the mainline itself.
			c.State, c.Reason = store.ChangeRejected, err.Error()
			if err := r.set(c, store.ChangeQueued, "change.rejected", map[string]any{"reason": c.Reason}); err != nil {
				return 0, err
			}
			return j + 1, nil
		}
		// It does not apply on a change ahead of it, which may yet be rejected: it waits for
		// its turn on the mainline, and so does everything after it.
		r.blocked = true
		break
	}
	if len(built) == 0 {
		return j, nil
	}
	if r.virtual {
		// The view is a revision of its own, the candidate's parent: never a revision the
		// mainline is, so that no replica could mistake the candidate for one on the mainline.
		view, err := store.ParseGitID(r.tip.GitTree)
		if err != nil {
			return 0, err
		}
		if r.tip, err = r.tx.StoreRevision(r.tip, view, "", "", nil); err != nil {
			return 0, fmt.Errorf("the view of lane %s: %w", r.lane, err)
		}
		r.virtual = false
	}
	last := built[len(built)-1]
	rev, err := r.tx.StoreRevision(r.tip, tree, last.ID, last.Holder, nil)
	if err != nil {
		return 0, fmt.Errorf("change %s: %w", last.ID, err)
	}
	job, err := r.tx.Enqueue(r.p.Job(*last, rev, r.lane, r.mainline))
	if err != nil {
		return 0, fmt.Errorf("change %s: enqueue its validation: %w", last.ID, err)
	}
	cand := store.Candidate{ID: store.NewID("cnd"), Repository: last.Repository, State: store.CandidateValidating, Revision: rev.ID,
		ParentRevision: r.tip.ID, JobID: job.ID, Lane: r.lane, ParentTree: r.tip.GitTree}
	for _, c := range built {
		cand.Changes = append(cand.Changes, c.ID)
	}
	if err := r.tx.InsertCandidate(cand); err != nil {
		return 0, err
	}
	det := map[string]any{"changes": cand.Changes, "job": job.ID, "parent_revision": cand.ParentRevision, "revision": rev.ID}
	if r.lane != RootLane {
		det["lane"] = r.lane
	}
	r.tx.Record("candidate.built", "candidate/"+cand.ID, det)
	for _, c := range built {
		c.State, c.CandidateRevision, c.JobID, c.CandidateID = store.ChangeValidating, rev.ID, job.ID, cand.ID
		if err := r.set(c, store.ChangeQueued, "change.validating",
			map[string]any{"candidate_revision": rev.ID, "job": job.ID}); err != nil {
			return 0, err
		}
	}
	r.tip, r.chain, r.ahead, r.live = rev, r.chain+1, r.ahead+len(built), r.live+1
	r.built += len(built)
	return i + len(built), nil
}

// maxLive bounds the live candidates of a queue: what one failure ahead of them can cost.
func maxLive(depth int) int { return 2 * depth }

// full reports whether the queue holds as many candidates as its depth allows, in every lane,
// or the walk's lane its share of them.
func (r *walk) full() bool {
	return r.chain+r.elsewhere.validating >= r.depth || r.live+r.elsewhere.live >= maxLive(r.depth) ||
		r.share > 0 && r.chain >= r.share
}

// landed integrates the changes still VALIDATING in a candidate the mainline already is.
func (r *walk) landed(cand *store.Candidate, pending []store.Change, idx []int) error {
	job, _, err := r.tx.Job(cand.JobID)
	if err != nil {
		return fmt.Errorf("candidate %s: %w", cand.ID, err)
	}
	from := cand.State
	cand.State, cand.AttestationDigest = store.CandidateLanded, job.AttestationDigest
	if err := r.tx.SetCandidate(*cand, from); err != nil {
		return err
	}
	for _, j := range idx {
		c := &pending[j]
		c.State, c.IntegratedRevision, c.AttestationDigest = store.ChangeIntegrated, cand.Revision, job.AttestationDigest
		if err := r.set(c, store.ChangeValidating, "change.integrated", integratedDetails(*c)); err != nil {
			return err
		}
	}
	return nil
}

// rebase applies c's edits to the tree onto, and answers the tree and c's lease tokens.
func (r *walk) rebase(c *store.Change, onto plumbing.Hash) (plumbing.Hash, []uint64, error) {
	base, err := r.tx.Revision(c.BaseRevision)
	if err != nil {
		return plumbing.ZeroHash, nil, fmt.Errorf("base %w", err)
	}
	edits, tokens, err := r.tx.Edits(c.ID)
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	tree, err := r.tx.Rebase(base, onto, edits)
	return tree, tokens, err
}

// integrateDirectly integrates a queued change of a repository whose policy was removed while
// it waited, as Integrate would have without one.
func (r *walk) integrateDirectly(c *store.Change) error {
	if why, err := r.taskRefusal(*c); err != nil || why != "" {
		if err != nil {
			return err
		}
		return r.rejectForTask(c, store.ChangeQueued, why)
	}
	tree, err := store.ParseGitID(r.mainline.GitTree)
	if err != nil {
		return fmt.Errorf("revision %s: git tree: %w", r.mainline.ID, err)
	}
	t, tokens, err := r.rebase(c, tree)
	if err != nil {
		if !repo.DoesNotApply(err) {
			return fmt.Errorf("change %s: %w", c.ID, err)
		}
		c.State, c.Reason = store.ChangeRejected, err.Error()
		return r.set(c, store.ChangeQueued, "change.rejected", map[string]any{"reason": c.Reason})
	}
	rev, err := r.tx.StoreRevision(r.mainline, t, c.ID, c.Holder,
		&store.CommitInfo{Message: c.Message, FencingTokens: tokens, AuthoredAt: c.CreatedAt, Tasks: taskClaims([]store.Change{*c})})
	if err != nil {
		return fmt.Errorf("change %s: %w", c.ID, err)
	}
	if err := r.tx.MoveMainline(r.mainline.ID, rev.ID); err != nil {
		return err
	}
	r.mainline, r.tip = rev, rev
	c.State, c.CandidateRevision, c.IntegratedRevision = store.ChangeIntegrated, rev.ID, rev.ID
	if err := r.set(c, store.ChangeQueued, "change.integrated", integratedDetails(*c)); err != nil {
		return err
	}
	return r.finishTasks([]store.Change{*c})
}

// integratedDetails are the details of the change.integrated event of c.
func integratedDetails(c store.Change) map[string]any {
	paths := c.Paths
	if paths == nil {
		paths = []string{}
	}
	d := map[string]any{"repository": c.Repository, "revision": c.IntegratedRevision, "paths": paths}
	if c.AttestationDigest != "" {
		d["attestation_digest"] = c.AttestationDigest
	}
	return d
}
