package chaos

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/store"
)

// The checks are only worth their silence if they speak up: these tests feed them histories
// with one broken invariant each and expect it named, and a clean history and expect nothing.

var t0 = time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC)

// log builds audit events in seq order.
type log struct{ events []event }

func (l *log) add(t *testing.T, at time.Duration, holder, action, subject string, det map[string]any) {
	t.Helper()
	raw, err := json.Marshal(det)
	if err != nil {
		t.Fatal(err)
	}
	e := event{AuditEvent: store.AuditEvent{Seq: uint64(len(l.events) + 1), Time: t0.Add(at), Holder: holder,
		Principal: strings.Split(holder, "|")[0], Action: action, Subject: subject, Details: raw}}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&e.det); err != nil {
		t.Fatal(err)
	}
	l.events = append(l.events, e)
}

func ts(d time.Duration) string { return t0.Add(d).Format("2006-01-02T15:04:05.000000Z") }

func job(id string, st agwpv1.JobState, attempts uint32) *agwpv1.Job {
	return &agwpv1.Job{Id: id, State: st, Attempts: attempts}
}

func violated(c *checker, inv string) []string {
	var out []string
	for _, v := range c.violations {
		if v.Invariant == inv {
			out = append(out, v.What)
		}
	}
	return out
}

func runJobs(l *log, jobs []*agwpv1.Job, ops []Op) *checker {
	fs := &finalState{jobs: map[string]*agwpv1.Job{}, events: l.events}
	for _, j := range jobs {
		fs.jobs[j.GetId()] = j
	}
	c := &checker{checked: map[string]string{}}
	(&run{}).checkJobs(c, fs, ops)
	return c
}

// TestCheckJobsCleanHistory ensures a history that keeps every job invariant passes: a claim
// handed back by a failure, claimed again at once, completed by the latest claim.
func TestCheckJobsCleanHistory(t *testing.T) {
	var l log
	l.add(t, 0, "admin", "job.enqueued", "job/j1", map[string]any{"kind": "ag.noop"})
	l.add(t, time.Second, "fleet|w1", "job.claimed", "job/j1", map[string]any{"claim": 1, "lease_expires_at": ts(3 * time.Second)})
	l.add(t, 1500*time.Millisecond, "fleet|w1", "job.failed", "job/j1", map[string]any{"claim": 1, "state": "queued"})
	l.add(t, 1600*time.Millisecond, "fleet|w2", "job.claimed", "job/j1", map[string]any{"claim": 2, "lease_expires_at": ts(3600 * time.Millisecond)})
	l.add(t, 2*time.Second, "fleet|w2", "job.completed", "job/j1", map[string]any{"claim": 2})
	c := runJobs(&l, []*agwpv1.Job{job("j1", agwpv1.JobState_JOB_STATE_COMPLETED, 2)}, nil)
	if len(c.violations) != 0 {
		t.Errorf("violations in a clean history: %v", c.violations)
	}
}

// TestCheckJobsStaleCompletion ensures a completion accepted from a claim that was superseded
// is named.
func TestCheckJobsStaleCompletion(t *testing.T) {
	var l log
	l.add(t, 0, "admin", "job.enqueued", "job/j1", nil)
	l.add(t, time.Second, "fleet|w1", "job.claimed", "job/j1", map[string]any{"claim": 1, "lease_expires_at": ts(3 * time.Second)})
	l.add(t, 4*time.Second, "fleet|w2", "job.claimed", "job/j1", map[string]any{"claim": 2, "lease_expires_at": ts(6 * time.Second)})
	l.add(t, 5*time.Second, "fleet|w1", "job.completed", "job/j1", map[string]any{"claim": 1})
	c := runJobs(&l, []*agwpv1.Job{job("j1", agwpv1.JobState_JOB_STATE_COMPLETED, 2)}, nil)
	got := violated(c, invCompletion)
	if len(got) != 1 || !strings.Contains(got[0], "claim 1") || !strings.Contains(got[0], "latest claim was 2") {
		t.Errorf("violations of %q: %q, want one naming claim 1 and latest claim 2 (all: %v)", invCompletion, got, c.violations)
	}
}

// TestCheckJobsTwoLiveClaims ensures a claim taken while the previous one's lease (as a
// recorded heartbeat extended it) still ran is named, and a lost job too.
func TestCheckJobsTwoLiveClaims(t *testing.T) {
	var l log
	l.add(t, 0, "admin", "job.enqueued", "job/j1", nil)
	l.add(t, time.Second, "recorder|rw1", "job.claimed", "job/j1", map[string]any{"claim": 1, "lease_expires_at": ts(3 * time.Second)})
	l.add(t, 3500*time.Millisecond, "fleet|w2", "job.claimed", "job/j1", map[string]any{"claim": 2, "lease_expires_at": ts(5500 * time.Millisecond)})
	l.add(t, 0, "admin", "job.enqueued", "job/j2", nil)
	hb := Op{Method: "HeartbeatJob", Job: "j1", Claim: 1, Worker: "rw1", Outcome: outcomeOK, ExpiresAt: t0.Add(4 * time.Second), End: t0.Add(2 * time.Second)}
	c := runJobs(&l, []*agwpv1.Job{job("j1", agwpv1.JobState_JOB_STATE_CLAIMED, 2)}, []Op{hb})
	if got := violated(c, invTwoClaims); len(got) != 1 || !strings.Contains(got[0], "heartbeat") {
		t.Errorf("violations of %q: %q, want one naming the heartbeat", invTwoClaims, got)
	}
	if got := violated(c, invLost); len(got) != 1 || !strings.Contains(got[0], "j2") {
		t.Errorf("violations of %q: %q, want one naming job j2", invLost, got)
	}
}

// TestCheckJobsRefusedReportChangedNothing ensures a completion that was refused but is in
// the log anyway is named.
func TestCheckJobsRefusedReportChangedNothing(t *testing.T) {
	var l log
	l.add(t, 0, "admin", "job.enqueued", "job/j1", nil)
	l.add(t, time.Second, "recorder|rw1", "job.claimed", "job/j1", map[string]any{"claim": 1, "lease_expires_at": ts(3 * time.Second)})
	l.add(t, 2*time.Second, "recorder|rw1", "job.completed", "job/j1", map[string]any{"claim": 1})
	op := Op{Method: "CompleteJob", Job: "j1", Claim: 1, Worker: "rw1", Outcome: outcomeRefused, Code: "failed_precondition"}
	c := runJobs(&l, []*agwpv1.Job{job("j1", agwpv1.JobState_JOB_STATE_COMPLETED, 1)}, []Op{op})
	if got := violated(c, invStaleClaim); len(got) != 1 || !strings.Contains(got[0], "refused") {
		t.Errorf("violations of %q: %q, want one saying a refused request changed the job", invStaleClaim, got)
	}
}

// TestCheckExpectations ensures a stale request that was accepted, or refused with another
// code than the contract's, and a current one refused, are named.
func TestCheckExpectations(t *testing.T) {
	ops := []Op{
		{Call: 1, Method: "CompleteJob", Job: "j1", Claim: 1, Outcome: outcomeOK, Code: "ok", Expect: ExpectRefused, WantCode: "failed_precondition"},
		{Call: 2, Method: "HeartbeatJob", Job: "j1", Claim: 1, Outcome: outcomeRefused, Code: "failed_precondition", Expect: ExpectRefused, WantCode: "not_found"},
		{Call: 3, Method: "Integrate", Paths: []string{"a"}, Outcome: outcomeRefused, Code: "failed_precondition", Expect: ExpectRefused, WantCode: "failed_precondition"},
		{Call: 4, Method: "ReleaseLease", Outcome: outcomeRefused, Code: "failed_precondition", Expect: ExpectAccepted},
		{Call: 5, Method: "CompleteJob", Outcome: outcomeUnknown, Code: "unavailable", Expect: ExpectAccepted},
		{Call: 5, Method: "CompleteJob", Outcome: outcomeRefused, Code: "failed_precondition", Expect: ExpectAccepted},
	}
	c := &checker{checked: map[string]string{}}
	(&run{}).checkExpectations(c, ops)
	if got := violated(c, invStaleClaim); len(got) != 2 {
		t.Errorf("violations of %q: %q, want the accepted completion and the heartbeat's wrong code", invStaleClaim, got)
	}
	if got := violated(c, invStaleLease); len(got) != 0 {
		t.Errorf("violations of %q: %q, want none", invStaleLease, got)
	}
	// Call 5 was refused after an attempt whose outcome is unknown: it may have been applied.
	if got := violated(c, invCurrent); len(got) != 1 || !strings.Contains(got[0], "ReleaseLease") {
		t.Errorf("violations of %q: %q, want one naming the release", invCurrent, got)
	}
}

// TestCheckLeases ensures overlapping live leases of two holders, a renewal of a superseded
// lease, and an integration under it are named, and a clean hand-over is not.
func TestCheckLeases(t *testing.T) {
	grant := func(l *log, at time.Duration, holder, id string, token int, ttl time.Duration, paths ...string) {
		l.add(t, at, holder, "lease.granted", "lease/"+id, map[string]any{"repository": "free", "paths": paths, "token": token, "expires_at": ts(at + ttl)})
	}
	checkLog := func(l *log) *checker {
		c := &checker{checked: map[string]string{}}
		(&run{}).checkLeases(c, &finalState{events: l.events})
		return c
	}

	var clean log
	grant(&clean, 0, "agent-1|a", "l1", 1, time.Second, "src/")
	clean.add(t, 500*time.Millisecond, "agent-1|a", "change.integrated", "change/c1", map[string]any{"repository": "free", "paths": []string{"src/a.txt"}})
	grant(&clean, 2*time.Second, "agent-2|a", "l2", 2, time.Second, "src/a.txt")
	clean.add(t, 2500*time.Millisecond, "agent-2|a", "change.integrated", "change/c2", map[string]any{"repository": "free", "paths": []string{"src/a.txt"}})
	if c := checkLog(&clean); len(c.violations) != 0 {
		t.Errorf("violations in a clean hand-over: %v", c.violations)
	}

	var bad log
	grant(&bad, 0, "agent-1|a", "l1", 1, 5*time.Second, "src/")
	grant(&bad, time.Second, "agent-2|a", "l2", 2, time.Second, "src/a.txt") // while l1 is live
	bad.add(t, 1500*time.Millisecond, "agent-1|a", "lease.renewed", "lease/l1", map[string]any{"token": 1, "expires_at": ts(10 * time.Second)})
	bad.add(t, 1600*time.Millisecond, "agent-1|a", "change.integrated", "change/c1", map[string]any{"repository": "free", "paths": []string{"src/a.txt", "src/b.txt"}})
	grant(&bad, 2*time.Second, "agent-3|a", "l3", 2, time.Second, "lib/")  // no overlap: fine
	grant(&bad, 3*time.Second, "agent-3|a", "l4", 3, time.Second, "lib/x") // same holder, larger token: fine
	c := checkLog(&bad)
	if got := violated(c, invExclusive); len(got) != 1 || !strings.Contains(got[0], "while lease l1") {
		t.Errorf("violations of %q: %q, want one naming l1", invExclusive, got)
	}
	got := violated(c, invStaleLease)
	if len(got) != 2 || !strings.Contains(got[0], "renewed") || !strings.Contains(got[1], "src/a.txt") || strings.Contains(got[1], "src/b.txt") {
		t.Errorf("violations of %q: %q, want the renewal and the integration of src/a.txt (src/b.txt was still covered)", invStaleLease, got)
	}
}

// TestSchedule ensures the schedule is the seed's alone, brings every kind of fault into a
// 30 s run, and keeps each stream's faults apart.
func TestSchedule(t *testing.T) {
	a := Schedule(7, 30*time.Second, 3, 3, 4)
	if b := Schedule(7, 30*time.Second, 3, 3, 4); !slices.Equal(a, b) {
		t.Errorf("two schedules of seed 7 differ:\n%v\n%v", a, b)
	}
	if c := Schedule(8, 30*time.Second, 3, 3, 4); slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 gave the same schedule")
	}
	for seed := uint64(1); seed <= 50; seed++ {
		fs := Schedule(seed, 30*time.Second, 3, 3, 4)
		kinds := map[FaultKind]int{}
		end := map[int]time.Duration{}
		for _, f := range fs {
			kinds[f.Kind]++
			s := streamOf(f.Kind)
			if f.At < end[s] {
				t.Errorf("seed %d: %s starts before the stream's previous fault is over", seed, f)
			}
			end[s] = f.At + f.Hold
			if f.At+f.Hold > 26*time.Second {
				t.Errorf("seed %d: %s ends after the run's last 4 s began", seed, f)
			}
		}
		for _, k := range FaultKinds {
			if kinds[k] == 0 {
				t.Errorf("seed %d: no %s in a 30 s schedule: %v", seed, k, fs)
			}
		}
		if kinds[FaultRestartPostgres] != 1 {
			t.Errorf("seed %d: PostgreSQL restarted %d times, want once", seed, kinds[FaultRestartPostgres])
		}
	}
	if fs := Schedule(7, 15*time.Second, 3, 3, 4); slices.ContainsFunc(fs, func(f Fault) bool { return f.Kind == FaultRestartPostgres }) {
		t.Errorf("a 15 s run restarts PostgreSQL: %v", fs)
	}
}

// completeJobsOps records one CompleteJobs call of worker rw2, all with claim 1, as the
// recorder does, with the answer's results in the order of jobs and exp attached to the call.
func completeJobsOps(t *testing.T, jobs []string, results []*agwpv1.CompleteJobsResult, callErr error, exp expectation) []Op {
	t.Helper()
	req := &agwpv1.CompleteJobsRequest{}
	for _, id := range jobs {
		req.Completions = append(req.Completions, &agwpv1.CompleteJobRequest{JobId: id, Worker: "rw2", FencingToken: 1})
	}
	var answer any
	if callErr == nil {
		answer = &agwpv1.CompleteJobsResponse{Results: results}
	}
	base := Op{Call: exp.call, Actor: "rw2", Method: "CompleteJobs", Start: t0.Add(5 * time.Second), End: t0.Add(5100 * time.Millisecond)}
	requestFields(&base, req)
	ops := recordOps(base, req, answer, callErr, func(int64) int64 { return 1 })
	for i := range ops {
		exp.apply(&ops[i])
	}
	return ops
}

// TestRecordBatchOps ensures a batch call is recorded as one op per item shaped as the single
// call's: a ClaimJobs answer as ClaimJob ops, each with its claim number, an empty one as one
// op; a CompleteJobs answer as CompleteJob ops with each item's own outcome and the call's
// times, every item unknown when the call got no answer, and an expectation only on the items
// it names.
func TestRecordBatchOps(t *testing.T) {
	exp := timeAfter(3 * time.Second)
	claim := &agwpv1.ClaimJobsRequest{Worker: "rw2", Kinds: []string{"ag.noop"}, MaxJobs: 4}
	base := Op{Method: "ClaimJobs"}
	requestFields(&base, claim)
	got := recordOps(base, claim, &agwpv1.ClaimJobsResponse{Jobs: []*agwpv1.Job{
		{Id: "j1", State: agwpv1.JobState_JOB_STATE_CLAIMED, Attempts: 1, LeaseExpiresAt: exp},
		{Id: "j2", State: agwpv1.JobState_JOB_STATE_CLAIMED, Attempts: 3, LeaseExpiresAt: exp},
	}}, nil, func(int64) int64 { return 9 })
	if len(got) != 2 {
		t.Fatalf("ClaimJobs with two jobs: %d ops, want 2: %+v", len(got), got)
	}
	for i, want := range []struct {
		job   string
		claim uint64
	}{{"j1", 1}, {"j2", 3}} {
		op := got[i]
		if op.Method != "ClaimJob" || op.Batch != "ClaimJobs" || op.BatchReq != 9 || op.BatchItem != i+1 || op.Job != want.job ||
			op.Claim != want.claim || op.Worker != "rw2" || op.Outcome != outcomeOK || !op.ExpiresAt.Equal(t0.Add(3*time.Second)) {
			t.Errorf("ClaimJobs item %d: %+v, want a ClaimJob op of job %s with claim %d", i+1, op, want.job, want.claim)
		}
	}
	if got := recordOps(base, claim, &agwpv1.ClaimJobsResponse{}, nil, func(int64) int64 { return 10 }); len(got) != 1 || got[0].Job != "" || got[0].Outcome != outcomeOK {
		t.Errorf("empty ClaimJobs answer: %+v, want one ok op without a job", got)
	}

	results := []*agwpv1.CompleteJobsResult{
		{Job: &agwpv1.Job{Id: "j1", State: agwpv1.JobState_JOB_STATE_COMPLETED, Attempts: 1}},
		{ErrorCode: "failed_precondition", ErrorMessage: "claim 1 is not current"},
		{ErrorCode: "unavailable", ErrorMessage: "try again"},
	}
	x := expectation{call: 5, method: "CompleteJob", expect: ExpectRefused, wantCode: connect.CodeFailedPrecondition, items: map[string]string{"j2": "claim 2 took over"}}
	got = completeJobsOps(t, []string{"j1", "j2", "j3"}, results, nil, x)
	want := []struct{ outcome, code string }{{outcomeOK, "ok"}, {outcomeRefused, "failed_precondition"}, {outcomeUnknown, "unavailable"}}
	if len(got) != len(want) {
		t.Fatalf("CompleteJobs of three: %d ops, want 3: %+v", len(got), got)
	}
	for i, w := range want {
		op := got[i]
		if op.Method != "CompleteJob" || op.Batch != "CompleteJobs" || op.BatchItem != i+1 || op.Claim != 1 || op.Worker != "rw2" ||
			op.Outcome != w.outcome || op.Code != w.code || op.Call != 5 || !op.End.Equal(t0.Add(5100*time.Millisecond)) {
			t.Errorf("CompleteJobs item %d: %+v, want a CompleteJob op %s with %s", i+1, op, w.outcome, w.code)
		}
		if wantExpect := i == 1; (op.Expect == ExpectRefused) != wantExpect {
			t.Errorf("CompleteJobs item %d (job %s): expectation %q; only j2's item is expected refused", i+1, op.Job, op.ExpectS)
		}
	}
	if got[1].WantCode != "failed_precondition" || got[1].Why != "claim 2 took over" {
		t.Errorf("j2's expectation: code %q, why %q", got[1].WantCode, got[1].Why)
	}

	for _, callErr := range []error{connect.NewError(connect.CodeUnavailable, errors.New("replica down")), errors.New("connection reset")} {
		got = completeJobsOps(t, []string{"j1", "j2"}, nil, callErr, expectation{})
		if len(got) != 2 || got[0].Outcome != outcomeUnknown || got[1].Outcome != outcomeUnknown || got[1].Job != "j2" {
			t.Errorf("CompleteJobs without an answer (%v): %+v, want both items unknown", callErr, got)
		}
	}
	got = completeJobsOps(t, []string{"j1", "j2"}, nil, connect.NewError(connect.CodeInvalidArgument, errors.New("completions[1].job_id: twice")), expectation{})
	if len(got) != 2 || got[0].Outcome != outcomeRefused || got[1].Code != "invalid_argument" {
		t.Errorf("CompleteJobs refused as a whole: %+v, want both items refused with invalid_argument", got)
	}
	got = completeJobsOps(t, []string{"j1", "j2"}, results[:1], nil, expectation{})
	if len(got) != 2 || got[0].Outcome != outcomeUnknown || got[1].Outcome != outcomeUnknown {
		t.Errorf("CompleteJobs answered with one result for two: %+v, want both items unknown", got)
	}
}

// TestCheckBatchCompletion ensures a completion in a CompleteJobs call accepted from a stale
// claim number is named, both by the audit log (a completion from other than the latest claim)
// and by the harness's expectation, while its refused items, and an item accepted from a claim
// nobody took over, are not.
func TestCheckBatchCompletion(t *testing.T) {
	var l log
	for _, id := range []string{"j1", "j2", "j3"} {
		l.add(t, 0, "admin", "job.enqueued", "job/"+id, nil)
		l.add(t, time.Second, "recorder|rw2", "job.claimed", "job/"+id, map[string]any{"claim": 1, "lease_expires_at": ts(3 * time.Second)})
	}
	// rw2 pauses; j1 and j2 are claimed by another worker, j3 is not.
	l.add(t, 4*time.Second, "fleet|w1", "job.claimed", "job/j1", map[string]any{"claim": 2, "lease_expires_at": ts(6 * time.Second)})
	l.add(t, 4*time.Second, "fleet|w1", "job.claimed", "job/j2", map[string]any{"claim": 2, "lease_expires_at": ts(6 * time.Second)})
	l.add(t, 4500*time.Millisecond, "fleet|w1", "job.completed", "job/j2", map[string]any{"claim": 2})
	// The broken server accepts j1's stale item; j3's is current.
	l.add(t, 5*time.Second, "recorder|rw2", "job.completed", "job/j1", map[string]any{"claim": 1})
	l.add(t, 5*time.Second, "recorder|rw2", "job.completed", "job/j3", map[string]any{"claim": 1})
	final := []*agwpv1.Job{job("j1", agwpv1.JobState_JOB_STATE_COMPLETED, 2), job("j2", agwpv1.JobState_JOB_STATE_COMPLETED, 2),
		job("j3", agwpv1.JobState_JOB_STATE_COMPLETED, 1)}

	stale := map[string]string{"j1": "claimed again with claim 2", "j2": "completed with claim 2"}
	x := expectation{call: 1, method: "CompleteJob", expect: ExpectRefused, wantCode: connect.CodeFailedPrecondition, items: stale}
	ops := completeJobsOps(t, []string{"j1", "j2", "j3"}, []*agwpv1.CompleteJobsResult{
		{Job: job("j1", agwpv1.JobState_JOB_STATE_COMPLETED, 2)},
		{ErrorCode: "failed_precondition", ErrorMessage: "the job is completed"},
		{Job: job("j3", agwpv1.JobState_JOB_STATE_COMPLETED, 1)},
	}, nil, x)

	c := runJobs(&l, final, ops)
	(&run{}).checkExpectations(c, ops)
	got := violated(c, invCompletion)
	if len(got) == 0 || !slices.ContainsFunc(got, func(v string) bool {
		return strings.Contains(v, "claim 1") && strings.Contains(v, "latest claim was 2")
	}) {
		t.Errorf("violations of %q: %q, want one naming j1's claim 1 accepted while claim 2 was the latest", invCompletion, got)
	}
	got = violated(c, invStaleClaim)
	if len(got) != 1 || !strings.Contains(got[0], "job j1") || !strings.Contains(got[0], "item 1 of a CompleteJobs call") || !strings.Contains(got[0], "was accepted") {
		t.Errorf("violations of %q: %q, want one naming j1's accepted batch item", invStaleClaim, got)
	}
	for _, v := range c.violations {
		if !strings.Contains(v.What, "j1") {
			t.Errorf("violation about another job than j1: %s", v)
		}
	}

	// The same batch answered right: j1's item refused too. Nothing is wrong.
	var good log
	good.events = slices.DeleteFunc(slices.Clone(l.events), func(e event) bool {
		return e.Action == "job.completed" && e.Subject == "job/j1"
	})
	ops = completeJobsOps(t, []string{"j1", "j2", "j3"}, []*agwpv1.CompleteJobsResult{
		{ErrorCode: "failed_precondition", ErrorMessage: "claim 1 is not current"},
		{ErrorCode: "failed_precondition", ErrorMessage: "the job is completed"},
		{Job: job("j3", agwpv1.JobState_JOB_STATE_COMPLETED, 1)},
	}, nil, x)
	final[0] = job("j1", agwpv1.JobState_JOB_STATE_CLAIMED, 2)
	c = runJobs(&good, final, ops)
	(&run{}).checkExpectations(c, ops)
	if len(c.violations) != 0 {
		t.Errorf("violations when the stale items were refused: %v", c.violations)
	}
}

// TestCheckExpectationsBatchCurrent ensures an expectation that current claims are accepted is
// checked per item of a batch call: one item accepted does not excuse another refused.
func TestCheckExpectationsBatchCurrent(t *testing.T) {
	x := expectation{call: 1, method: "CompleteJob", expect: ExpectAccepted, why: "current"}
	ops := completeJobsOps(t, []string{"j1", "j2"}, []*agwpv1.CompleteJobsResult{
		{Job: job("j1", agwpv1.JobState_JOB_STATE_COMPLETED, 1)},
		{ErrorCode: "failed_precondition", ErrorMessage: "lost"},
	}, nil, x)
	c := &checker{checked: map[string]string{}}
	(&run{}).checkExpectations(c, ops)
	if got := violated(c, invCurrent); len(got) != 1 || !strings.Contains(got[0], "job j2") {
		t.Errorf("violations of %q: %q, want one naming j2", invCurrent, got)
	}
}

func timeAfter(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }
