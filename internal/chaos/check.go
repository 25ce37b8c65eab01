package chaos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/store"
)

// The invariants, as the summary names them (docs/chaos.md explains each).
const (
	invAudit       = "audit chain verifies"
	invLost        = "no job lost"
	invClaimsGrow  = "claim numbers grow"
	invCompletion  = "one completion, from the latest claim"
	invStaleClaim  = "no stale claim number accepted"
	invTwoClaims   = "no job held by two live claims"
	invStaleLease  = "no stale lease token accepted"
	invExclusive   = "leases exclusive, tokens grow"
	invGate        = "gated mainline holds only attested trees"
	invMainline    = "mainlines move only by integrations"
	invCurrent     = "current claims and tokens accepted"
	invReplicasRun = "replicas recover"
)

var invariantOrder = []string{invAudit, invLost, invClaimsGrow, invCompletion, invStaleClaim, invTwoClaims,
	invStaleLease, invExclusive, invGate, invMainline, invCurrent, invReplicasRun}

// checker gathers what each invariant checked and what broke it.
type checker struct {
	checked    map[string]string
	violations []Violation
}

func (c *checker) fail(inv, format string, args ...any) {
	c.violations = append(c.violations, Violation{Invariant: inv, What: fmt.Sprintf(format, args...)})
}

func (c *checker) done(inv, format string, args ...any) {
	c.checked[inv] = fmt.Sprintf(format, args...)
}

// check runs every check over the history and the final state and answers the report.
func (r *run) check(fs *finalState) *Report {
	ops := r.hist.Ops()
	c := &checker{checked: map[string]string{}}
	r.checkAudit(c, fs)
	r.checkJobs(c, fs, ops)
	r.checkExpectations(c, ops)
	r.checkLeases(c, fs)
	r.checkGate(c, fs)
	r.checkMainlines(c, fs)
	starts := 0
	for _, p := range r.replicas {
		starts += p.starts
	}
	c.done(invReplicasRun, "%d replicas up at the end, after %d starts", len(r.replicas), starts)

	rep := &Report{Faults: map[FaultKind]int{}}
	r.mu.Lock()
	for _, f := range r.faults {
		if f.Err != nil {
			rep.FaultErrors = append(rep.FaultErrors, fmt.Sprintf("%s: %v", f.Fault, f.Err))
			continue
		}
		rep.Faults[f.Kind]++
	}
	rep.Violations = append(append([]Violation(nil), r.violations...), c.violations...)
	rep.Notes = append([]string(nil), r.notes...)
	r.mu.Unlock()
	for _, inv := range invariantOrder {
		ch := Check{Name: inv, Checked: c.checked[inv]}
		for _, v := range rep.Violations {
			if v.Invariant == inv {
				ch.Violations++
			}
		}
		rep.Checks = append(rep.Checks, ch)
	}
	rep.Ops = countOps(ops)
	for _, op := range ops {
		if op.Expect == ExpectRefused && op.Outcome == outcomeRefused {
			rep.StaleRefused++
		}
	}
	for _, ch := range fs.changes {
		switch {
		case ch.GetRepository() == gatedRepo && ch.GetState() == agwpv1.ChangeState_CHANGE_STATE_INTEGRATED:
			rep.GatedIntegrated++
		case ch.GetRepository() == gatedRepo && ch.GetState() == agwpv1.ChangeState_CHANGE_STATE_REJECTED:
			rep.GatedRejected++
			if strings.Contains(ch.GetReason(), "validation failed") {
				rep.ValidationFailures++
			}
		case ch.GetRepository() == freeRepo && ch.GetState() == agwpv1.ChangeState_CHANGE_STATE_INTEGRATED:
			rep.FreeIntegrated++
		}
	}
	rep.Jobs = len(fs.jobs)
	rep.AuditEvents = len(fs.events)
	rep.WorkerRefusals = r.workerLogCount("refused: the claim was lost") + r.workerLogCount("claim lost; stopped the job")
	return rep
}

func (r *run) workerLogCount(s string) int {
	n := 0
	for _, w := range r.workers {
		b, _ := os.ReadFile(w.logPath)
		n += bytes.Count(b, []byte(s))
	}
	return n
}

// ---- the audit log ----

func (r *run) checkAudit(c *checker, fs *finalState) {
	cp, err := audit.OpenCheckpoint([]byte(fs.checkpoint.GetNote()), fs.verifierKey)
	if err != nil {
		c.fail(invAudit, "the newest checkpoint (size %d) does not verify with the audit key's .pub file: %v", fs.checkpoint.GetSize(), err)
		return
	}
	res, err := audit.Verify(fs.rawEvents, cp)
	if err != nil {
		c.fail(invAudit, "%v", err)
		return
	}
	if res.Uncovered() > 0 {
		c.fail(invAudit, "%d events after the newest checkpoint (size %d) were never covered by a signed checkpoint", res.Uncovered(), cp.Size)
	}
	c.done(invAudit, "%d events, checkpoint of %d signed by %s", res.Events, cp.Size, fs.checkpoint.GetKeyId())
}

// ---- jobs ----

// claimRec is a claim as the audit log shows it.
type claimRec struct {
	n      uint64
	holder string
	at     time.Time
	exp    time.Time
	seq    uint64
}

type jobHistory struct {
	events []event
}

func (r *run) checkJobs(c *checker, fs *finalState, ops []Op) {
	byJob := jobEvents(fs)
	heartbeats := acceptedHeartbeats(ops)
	checkNoJobLost(c, fs, ops, byJob)

	// Per job, in the audit log's order.
	var t jobTally
	ids := make([]string, 0, len(byJob))
	for id := range byJob {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		rp := replayJob(c, id, byJob[id], &t)
		checkJobEnd(c, fs, id, rp)
		checkTwoClaims(c, id, rp, heartbeats, &t)
	}
	c.done(invClaimsGrow, "%d claims of %d jobs", t.claims, len(byJob))
	c.done(invTwoClaims, "%d successive claims (%d leases extended by recorded heartbeats)", t.pairs, t.extended)

	reported, inBatch := checkReports(c, fs, ops, byJob)
	c.done(invCompletion, "%d completions of %d jobs; %d recorded reports matched with the log (%d sent in batches)", t.completions, len(byJob), reported, inBatch)
}

// jobEvents answers the audit log's events of each job, by job id, in the log's order.
func jobEvents(fs *finalState) map[string]*jobHistory {
	byJob := map[string]*jobHistory{}
	for _, e := range fs.events {
		if !strings.HasPrefix(e.Subject, "job/") {
			continue
		}
		id := e.subjectID()
		if byJob[id] == nil {
			byJob[id] = &jobHistory{}
		}
		byJob[id].events = append(byJob[id].events, e)
	}
	return byJob
}

// claimKey is one claim of one job.
type claimKey struct {
	job string
	n   uint64
}

// acceptedHeartbeats answers the heartbeats of the recorded workers that were accepted, by
// claim: they extend a claim's lease beyond what the audit log (which does not record
// heartbeats) shows.
func acceptedHeartbeats(ops []Op) map[claimKey][]Op {
	heartbeats := map[claimKey][]Op{}
	for _, op := range ops {
		if op.Method == "HeartbeatJob" && op.Outcome == outcomeOK {
			k := claimKey{op.Job, op.Claim}
			heartbeats[k] = append(heartbeats[k], op)
		}
	}
	return heartbeats
}

// checkNoJobLost: every job enqueued (by the audit log, or by an accepted request) is there,
// finished or still claimable.
func checkNoJobLost(c *checker, fs *finalState, ops []Op, byJob map[string]*jobHistory) {
	enqueued := map[string]bool{}
	for id, h := range byJob {
		for _, e := range h.events {
			if e.Action == "job.enqueued" {
				enqueued[id] = true
			}
		}
	}
	for _, op := range ops {
		if op.Method == "EnqueueJob" && op.Outcome == outcomeOK && op.Job != "" {
			if !enqueued[op.Job] {
				c.fail(invAudit, "job %s: EnqueueJob was accepted (%s on %s at %s) but the audit log has no job.enqueued event for it", op.Job, op.Actor, replicaName(op.Replica), clock(op.End))
			}
			enqueued[op.Job] = true
		}
	}
	states := map[string]int{}
	for id := range enqueued {
		j, ok := fs.jobs[id]
		if !ok {
			c.fail(invLost, "job %s was enqueued but is not in the final job list", id)
			continue
		}
		switch st := j.GetState(); st {
		case agwpv1.JobState_JOB_STATE_COMPLETED, agwpv1.JobState_JOB_STATE_FAILED, agwpv1.JobState_JOB_STATE_CANCELLED,
			agwpv1.JobState_JOB_STATE_QUEUED, agwpv1.JobState_JOB_STATE_CLAIMED:
			states[strings.ToLower(strings.TrimPrefix(st.String(), "JOB_STATE_"))]++
		default:
			c.fail(invLost, "job %s ends in state %s: neither finished nor claimable", id, st)
		}
	}
	for id := range fs.jobs {
		if !enqueued[id] {
			c.fail(invAudit, "job %s is in the final job list but the audit log never enqueued it", id)
		}
	}
	c.done(invLost, "%d jobs: %s", len(enqueued), formatCounts(states, "completed", "failed", "cancelled", "queued", "claimed"))
}

// jobTally counts what the per-job checks looked at, for their summaries.
type jobTally struct {
	claims, pairs, extended, completions int
}

// jobReplay is one job's history as its audit events tell it.
type jobReplay struct {
	latest   uint64 // the latest claim number
	terminal string // how the job finished; "" while it has not
	claims   []claimRec
	ended    map[uint64]uint64 // claim number → seq of the failure that handed the job back
}

// replayJob goes through one job's events in the log's order, checking that claim numbers
// grow one by one and that nothing happens to the job once it finished, and answers what
// they tell.
func replayJob(c *checker, id string, h *jobHistory, t *jobTally) jobReplay {
	var completed *event
	rp := jobReplay{ended: map[uint64]uint64{}}
	for i := range h.events {
		e := h.events[i]
		n, _ := e.num("claim")
		after := func(what string) {
			if rp.terminal != "" {
				c.fail(invCompletion, "job %s: %s (seq %d) after the job was %s", id, what, e.Seq, rp.terminal)
			}
		}
		switch e.Action {
		case "job.claimed":
			t.claims++
			after(fmt.Sprintf("claim %d by %s", n, e.Holder))
			if n != rp.latest+1 {
				c.fail(invClaimsGrow, "job %s: claim %d by %s (seq %d) follows claim %d", id, n, e.Holder, e.Seq, rp.latest)
			}
			if n > rp.latest {
				rp.latest = n
			}
			exp, _ := e.time("lease_expires_at")
			rp.claims = append(rp.claims, claimRec{n: n, holder: e.Holder, at: e.Time, exp: exp, seq: e.Seq})
		case "job.completed":
			t.completions++
			after(fmt.Sprintf("a completion by %s with claim %d", e.Holder, n))
			if completed != nil {
				c.fail(invCompletion, "job %s: completed twice: by %s with claim %d (seq %d) and by %s with claim %d (seq %d)",
					id, completed.Holder, mustNum(*completed, "claim"), completed.Seq, e.Holder, n, e.Seq)
			}
			if n != rp.latest {
				c.fail(invCompletion, "job %s: completion by %s with claim %d (seq %d) accepted while its latest claim was %d", id, e.Holder, n, e.Seq, rp.latest)
			}
			completed = &h.events[i]
			rp.terminal = "completed"
		case "job.failed":
			after(fmt.Sprintf("a failure by %s with claim %d", e.Holder, n))
			if n != rp.latest {
				c.fail(invStaleClaim, "job %s: failure by %s with claim %d (seq %d) accepted while its latest claim was %d", id, e.Holder, n, e.Seq, rp.latest)
			}
			switch st := e.str("state"); st {
			case "failed", "cancelled":
				rp.terminal = st
			default:
				rp.ended[n] = e.Seq
			}
		case "job.expired":
			after("an expiry")
			if st := e.str("state"); st == "failed" || st == "cancelled" {
				rp.terminal = st + " (lease expired)"
			}
		case "job.cancelled":
			after("a cancellation")
			rp.terminal = "cancelled"
		}
	}
	return rp
}

// checkJobEnd checks the job's final state (when it is in the final job list) against what
// the log told of it.
func checkJobEnd(c *checker, fs *finalState, id string, rp jobReplay) {
	j, ok := fs.jobs[id]
	if !ok {
		return
	}
	if j.GetAttempts() != uint32(rp.latest) {
		c.fail(invClaimsGrow, "job %s: ends with attempts %d, but the audit log has %d claims", id, j.GetAttempts(), rp.latest)
	}
	want := map[string]agwpv1.JobState{"completed": agwpv1.JobState_JOB_STATE_COMPLETED, "failed": agwpv1.JobState_JOB_STATE_FAILED,
		"failed (lease expired)": agwpv1.JobState_JOB_STATE_FAILED, "cancelled": agwpv1.JobState_JOB_STATE_CANCELLED,
		"cancelled (lease expired)": agwpv1.JobState_JOB_STATE_CANCELLED}
	if st, ok := want[rp.terminal]; ok && j.GetState() != st {
		c.fail(invCompletion, "job %s: the audit log says it was %s, but it ends %s", id, rp.terminal, j.GetState())
	}
	if rp.terminal == "" && j.GetState() != agwpv1.JobState_JOB_STATE_QUEUED && j.GetState() != agwpv1.JobState_JOB_STATE_CLAIMED {
		c.fail(invCompletion, "job %s: ends %s, but the audit log never finished it", id, j.GetState())
	}
}

// checkTwoClaims: a claim is taken again only after its lease ran out (as extended by every
// heartbeat accepted), or after a failure handed the job back.
func checkTwoClaims(c *checker, id string, rp jobReplay, heartbeats map[claimKey][]Op, t *jobTally) {
	for i := 1; i < len(rp.claims); i++ {
		prev, next := rp.claims[i-1], rp.claims[i]
		t.pairs++
		if s, ok := rp.ended[prev.n]; ok && s < next.seq {
			continue
		}
		end, by := prev.exp, "its claim"
		for _, hb := range heartbeats[claimKey{id, prev.n}] {
			if hb.ExpiresAt.After(end) {
				end, by = hb.ExpiresAt, fmt.Sprintf("a heartbeat accepted on %s at %s", replicaName(hb.Replica), clock(hb.End))
				t.extended++
			}
		}
		if next.at.Before(end) {
			c.fail(invTwoClaims, "job %s: claim %d by %s at %s while claim %d by %s held a lease until %s (set by %s)",
				id, next.n, next.holder, clock(next.at), prev.n, prev.holder, clock(end), by)
		}
	}
}

// checkReports checks the recorded workers' completions and failures against the log: an
// accepted one is there with its claim number; a refused one (never also tried with an unknown
// outcome) is not. The items of CompleteJobs calls are recorded as CompleteJob ops and count
// here alike. It answers how many reports it matched, and how many of them were sent in
// batches.
func checkReports(c *checker, fs *finalState, ops []Op, byJob map[string]*jobHistory) (reports, inBatches int) {
	reported := map[string]map[string]bool{} // method|job|claim|holder → outcomes
	inBatch := map[string]bool{}
	for _, op := range ops {
		if op.Method != "CompleteJob" && op.Method != "FailJob" {
			continue
		}
		k := fmt.Sprintf("%s|%s|%d|recorder|%s", op.Method, op.Job, op.Claim, op.Worker)
		if reported[k] == nil {
			reported[k] = map[string]bool{}
		}
		reported[k][op.Outcome] = true
		if op.Batch != "" {
			inBatch[k] = true
		}
	}
	inLog := map[string]uint64{}
	for id, h := range byJob {
		for _, e := range h.events {
			n, _ := e.num("claim")
			switch e.Action {
			case "job.completed":
				inLog[fmt.Sprintf("CompleteJob|%s|%d|%s", id, n, e.Holder)] = e.Seq
			case "job.failed":
				inLog[fmt.Sprintf("FailJob|%s|%d|%s", id, n, e.Holder)] = e.Seq
			}
		}
	}
	for k, outcomes := range reported {
		seq, logged := inLog[k]
		parts := strings.SplitN(k, "|", 4)
		switch {
		case outcomes[outcomeOK] && !logged:
			c.fail(invCompletion, "job %s: %s with claim %s by %s was accepted, but the audit log has no such event", parts[1], parts[0], parts[2], parts[3])
		case outcomes[outcomeRefused] && !outcomes[outcomeOK] && !outcomes[outcomeUnknown] && logged:
			c.fail(invStaleClaim, "job %s: %s with claim %s by %s was refused, yet the audit log records it (seq %d): a refused request changed the job", parts[1], parts[0], parts[2], parts[3], seq)
		}
		if outcomes[outcomeOK] && parts[0] == "CompleteJob" {
			if j := fs.jobs[parts[1]]; j != nil && (j.GetState() != agwpv1.JobState_JOB_STATE_COMPLETED || fmt.Sprint(j.GetAttempts()) != parts[2]) {
				c.fail(invCompletion, "job %s: completion with claim %s by %s was accepted, but the job ends %s with attempts %d", parts[1], parts[2], parts[3], j.GetState(), j.GetAttempts())
			}
		}
	}
	return len(reported), len(inBatch)
}

func mustNum(e event, key string) uint64 {
	n, _ := e.num(key)
	return n
}

// ---- recorded expectations ----

func (r *run) checkExpectations(c *checker, ops []Op) {
	// The tries of one call, per job: the items of a batch call are about several jobs, each
	// with its own outcome, and each is one request of its own for this check.
	type callKey struct {
		call int64
		job  string
	}
	calls := map[callKey][]Op{}
	var order []callKey
	var staleClaims, staleInBatches, staleLeases, current int
	for _, op := range ops {
		inv := invStaleLease
		if strings.HasSuffix(op.Method, "Job") {
			inv = invStaleClaim
		}
		switch op.Expect {
		case ExpectRefused:
			if inv == invStaleClaim {
				staleClaims++
				if op.Batch != "" {
					staleInBatches++
				}
			} else {
				staleLeases++
			}
			switch op.Outcome {
			case outcomeOK:
				c.fail(inv, "%s was accepted: %s on %s at %s, %s; it had to be refused: %s", describeOp(op), op.Actor, replicaName(op.Replica), clock(op.Start), op.Code, op.Why)
			case outcomeRefused:
				if op.Code != op.WantCode {
					c.fail(inv, "%s was refused with %s, the contract says %s (%s on %s at %s: %s)", describeOp(op), op.Code, op.WantCode, op.Actor, replicaName(op.Replica), clock(op.Start), op.Message)
				}
			}
		case ExpectAccepted:
			k := callKey{op.Call, op.Job}
			if calls[k] == nil {
				order = append(order, k)
			}
			calls[k] = append(calls[k], op)
		}
	}
	for _, k := range order {
		tries := calls[k]
		current++
		unknownBefore := false
		for _, op := range tries {
			if op.Outcome == outcomeOK {
				break
			}
			if op.Outcome == outcomeRefused && !unknownBefore {
				c.fail(invCurrent, "%s was refused with %s: %s (%s on %s at %s; %s)", describeOp(op), op.Code, op.Message, op.Actor, replicaName(op.Replica), clock(op.Start), op.Why)
				break
			}
			if op.Outcome == outcomeUnknown {
				unknownBefore = true
			}
		}
	}
	c.done(invStaleClaim, "%d requests with a superseded claim number (%d of them items of batch calls)", staleClaims, staleInBatches)
	c.done(invStaleLease, "%d requests with a superseded lease token", staleLeases)
	c.done(invCurrent, "%d calls with the current claim or token", current)
}

func describeOp(op Op) string {
	switch op.Method {
	case "HeartbeatJob", "CompleteJob", "FailJob":
		d := fmt.Sprintf("%s of job %s with claim %d by worker %s", op.Method, op.Job, op.Claim, op.Worker)
		if op.Batch != "" {
			d += fmt.Sprintf(" (item %d of a %s call)", op.BatchItem, op.Batch)
		}
		return d
	case "Integrate":
		return fmt.Sprintf("Integrate of %s %v with tokens %v by holder %s", op.Repo, op.Paths, op.Tokens, op.Holder)
	case "RenewLease", "ReleaseLease":
		return fmt.Sprintf("%s of lease %s with token %d", op.Method, op.Lease, op.Token)
	}
	return op.Method
}

// ---- leases and integrations ----

// leaseRec is a lease as the audit log shows it.
type leaseRec struct {
	id, repo, holder string
	paths            []string
	token            uint64
	seq              uint64
	expires          time.Time // as of the events read so far
	endedSeq         uint64    // released or broken
	supersededSeq    uint64    // the first grant to another holder of an overlapping path
	supersededAt     time.Time // its time
	supersededBy     string
	flagged          bool // a renewal after the supersession was reported already
}

func overlapAny(a, b []string) bool {
	for _, p := range a {
		for _, q := range b {
			if overlap(p, q) {
				return true
			}
		}
	}
	return false
}

func (r *run) checkLeases(c *checker, fs *finalState) {
	leases := map[string]*leaseRec{}
	var order []*leaseRec
	var grants, integrations int
	for _, e := range fs.events {
		switch e.Action {
		case "lease.granted":
			grants++
			tok, _ := e.num("token")
			exp, _ := e.time("expires_at")
			l := &leaseRec{id: e.subjectID(), repo: e.str("repository"), holder: e.Holder, paths: e.strs("paths"), token: tok, seq: e.Seq, expires: exp}
			for _, o := range order {
				if o.repo != l.repo || !overlapAny(o.paths, l.paths) {
					continue
				}
				if o.token >= l.token {
					c.fail(invExclusive, "%s %v: granted to %s with token %d (seq %d) after token %d of %s on %v", l.repo, l.paths, l.holder, l.token, l.seq, o.token, o.holder, o.paths)
				}
				if o.holder == l.holder {
					continue
				}
				if o.endedSeq == 0 && o.expires.After(e.Time) {
					c.fail(invExclusive, "%s: lease %s %v granted to %s at %s (seq %d) while lease %s %v of %s was live until %s",
						l.repo, l.id, l.paths, l.holder, clock(e.Time), l.seq, o.id, o.paths, o.holder, clock(o.expires))
				}
				if o.supersededSeq == 0 {
					o.supersededSeq, o.supersededAt = e.Seq, e.Time
					o.supersededBy = fmt.Sprintf("token %d of %s (lease %s, granted at %s, seq %d)", l.token, l.holder, l.id, clock(e.Time), e.Seq)
				}
			}
			leases[l.id] = l
			order = append(order, l)
		case "lease.renewed", "lease.released":
			l := leases[e.subjectID()]
			if l == nil {
				c.fail(invExclusive, "%s of lease %s (seq %d), which the audit log never granted", e.Action, e.subjectID(), e.Seq)
				continue
			}
			switch {
			case l.supersededSeq == 0 || l.endedSeq != 0:
			case e.Action == "lease.renewed":
				// The lease had expired and its path was granted to another holder: renewing it
				// now makes two live leases of one path.
				exp, _ := e.time("expires_at")
				c.fail(invStaleLease, "lease %s %v of %s (token %d, expired at %s) renewed at %s until %s (seq %d), after %s superseded it: two holders' leases of one path live at once",
					l.id, l.paths, l.holder, l.token, clock(l.expires), clock(e.Time), clock(exp), e.Seq, l.supersededBy)
				l.flagged = true
			case !l.flagged && !e.Time.Before(l.supersededAt):
				// A release whose own time comes before the grant's merely ended the lease
				// first, as far as anyone can tell.
				c.fail(invStaleLease, "lease %s %v of %s (token %d, expired at %s) released at %s (seq %d), after %s superseded it",
					l.id, l.paths, l.holder, l.token, clock(l.expires), clock(e.Time), e.Seq, l.supersededBy)
			}
			if e.Action == "lease.renewed" {
				l.expires, _ = e.time("expires_at")
			} else if l.endedSeq == 0 {
				l.endedSeq = e.Seq
			}
		case "lease.broken":
			if l := leases[e.subjectID()]; l != nil && l.endedSeq == 0 {
				l.endedSeq = e.Seq
			}
		case "change.queued", "change.integrated":
			if e.Principal == store.SystemPrincipal || e.Holder == "" {
				continue // the integration queue's own events
			}
			integrations++
			rp := e.str("repository")
			for _, p := range e.strs("paths") {
				ok := false
				for _, l := range order {
					if l.repo != rp || l.holder != e.Holder || !covers(l.paths, p) {
						continue
					}
					if l.endedSeq != 0 && l.endedSeq < e.Seq {
						continue
					}
					if supersededFor(order, l, p, e.Seq) {
						continue
					}
					ok = true
					break
				}
				if !ok {
					c.fail(invStaleLease, "change %s of %s (seq %d) by %s edits %s, which no current lease of %s covered at that point",
						e.subjectID(), rp, e.Seq, e.Holder, p, e.Holder)
				}
			}
		}
	}
	c.done(invExclusive, "%d grants", grants)
	prev := c.checked[invStaleLease]
	c.checked[invStaleLease] = fmt.Sprintf("%s; %d accepted integrations covered by current leases", prev, integrations)
}

// overlap reports whether two lease paths overlap: equal, or one a directory ("a/") holding
// the other. The harness keeps its own copy of the rule rather than trust the one it checks.
func overlap(p, q string) bool {
	return p == q || (strings.HasSuffix(p, "/") && strings.HasPrefix(q, p)) || (strings.HasSuffix(q, "/") && strings.HasPrefix(p, q))
}

// covers reports whether one of paths covers path p: equal, or a directory above it.
func covers(paths []string, p string) bool {
	for _, q := range paths {
		if q == p || (strings.HasSuffix(q, "/") && strings.HasPrefix(p, q)) {
			return true
		}
	}
	return false
}

// supersededFor reports whether a grant to another holder of a path overlapping p, with a
// larger token than l's, came before seq.
func supersededFor(order []*leaseRec, l *leaseRec, p string, seq uint64) bool {
	for _, o := range order {
		if o.seq >= seq {
			break
		}
		if o.repo == l.repo && o.holder != l.holder && o.token > l.token && overlapAny(o.paths, []string{p}) {
			return true
		}
	}
	return false
}

// ---- the gate ----

func (r *run) checkGate(c *checker, fs *finalState) {
	var checked int
	for _, rv := range fs.gated {
		if rv.parent == "" && rv.change == "" {
			if rv.entries != 0 {
				c.fail(invGate, "%s@%s: the root revision holds %d files, want none", gatedRepo, rv.id, rv.entries)
			}
			continue
		}
		checked++
		where := fmt.Sprintf("%s@%s", gatedRepo, rv.id)
		ch, ok := fs.changes[rv.change]
		if !ok {
			c.fail(invGate, "%s: its change %q is not among the repository's changes", where, rv.change)
			continue
		}
		if ch.GetState() != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED || ch.GetIntegratedRevision() != rv.id {
			c.fail(invGate, "%s: its change %s is %s with integrated revision %q", where, ch.GetId(), ch.GetState(), ch.GetIntegratedRevision())
		}
		d := ch.GetAttestationDigest()
		if d == "" {
			c.fail(invGate, "%s: its change %s (by %s) has no attestation", where, ch.GetId(), ch.GetAuthor())
			continue
		}
		att := fs.attestations[d]
		if att == nil {
			c.fail(invGate, "%s: attestation %s of change %s is not stored", where, d, ch.GetId())
			continue
		}
		sum := sha256.Sum256(att.GetEnvelopeJson())
		if got := "sha256:" + hex.EncodeToString(sum[:]); got != d {
			c.fail(invGate, "%s: attestation %s: the stored envelope's digest is %s", where, d, got)
			continue
		}
		env, err := attest.Decode(att.GetEnvelopeJson())
		if err != nil {
			c.fail(invGate, "%s: attestation %s: %v", where, d, err)
			continue
		}
		v, _, err := attest.VerifyValidation(context.Background(), env, fs.workerKeys)
		switch {
		case err != nil:
			c.fail(invGate, "%s: attestation %s does not verify with the workers' keys: %v", where, d, err)
		case !v.Passed():
			c.fail(invGate, "%s: attestation %s says %s (exit %d)", where, d, v.Result, v.ExitCode)
		case v.TreeDigest != rv.treeDigest:
			c.fail(invGate, "%s: attestation %s is for tree %s, the revision's tree is %s", where, d, v.TreeDigest, rv.treeDigest)
		case v.Repository != gatedRepo || v.Revision != rv.id:
			c.fail(invGate, "%s: attestation %s is for %s", where, d, v.Subject())
		case v.JobID != ch.GetJobId():
			c.fail(invGate, "%s: attestation %s is of job %s, the change's validation job is %s", where, d, v.JobID, ch.GetJobId())
		case !slices.Equal(v.Command, validationCommand):
			c.fail(invGate, "%s: attestation %s ran %q, the policy is %q", where, d, v.Command, validationCommand)
		}
	}
	for path, b := range fs.gatedFiles {
		if bytes.Contains(b, []byte(failMarker)) {
			c.fail(invGate, "%s: the mainline's %s holds %s, which fails validation", gatedRepo, path, failMarker)
		}
	}
	c.done(invGate, "%d revisions and their attestations", checked)
}

// checkMainlines checks that each mainline is exactly the chain of its change.integrated events.
func (r *run) checkMainlines(c *checker, fs *finalState) {
	total := 0
	for _, m := range []struct {
		repo  string
		chain []revision
	}{{gatedRepo, fs.gated}, {freeRepo, fs.free}} {
		var logged []string
		for _, e := range fs.events {
			if e.Action == "change.integrated" && e.str("repository") == m.repo {
				logged = append(logged, e.str("revision"))
				if m.repo == gatedRepo && e.str("attestation_digest") == "" {
					c.fail(invGate, "change %s of %s was integrated (seq %d) without an attestation", e.subjectID(), m.repo, e.Seq)
				}
			}
		}
		var chain []string
		for i := len(m.chain) - 1; i >= 0; i-- {
			if m.chain[i].parent != "" || m.chain[i].change != "" {
				chain = append(chain, m.chain[i].id)
			}
		}
		total += len(chain)
		if !slices.Equal(chain, logged) {
			i := 0
			for i < len(chain) && i < len(logged) && chain[i] == logged[i] {
				i++
			}
			c.fail(invMainline, "%s: the mainline's history (%d revisions) and the audit log's integrations (%d) part at revision %d: %s vs %s",
				m.repo, len(chain), len(logged), i+1, at(chain, i), at(logged, i))
		}
	}
	c.done(invMainline, "%d revisions in 2 repositories", total)
}

func at(l []string, i int) string {
	if i < len(l) {
		return l[i]
	}
	return "(none)"
}

// ---- helpers ----

func replicaName(i int) string { return fmt.Sprintf("r%d", i+1) }

func clock(t time.Time) string { return t.UTC().Format("15:04:05.000000") }

func formatCounts(m map[string]int, order ...string) string {
	var parts []string
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}
