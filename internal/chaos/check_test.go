package chaos

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

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
