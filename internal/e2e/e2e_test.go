//go:build unix

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

const (
	stateQueued    = agwpv1.JobState_JOB_STATE_QUEUED
	stateCompleted = agwpv1.JobState_JOB_STATE_COMPLETED
	roleWorker     = agwpv1.Role_ROLE_WORKER
)

// TestQuickstart follows a newcomer through the command line: create a worker principal, start
// a worker with its token, enqueue a job, and watch it complete.
func TestQuickstart(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		s := startServer(t, backend)
		as := func(args ...string) []string { return append(args, "--server", s.URL, "--token", s.AdminToken) }

		out := mustAG(t, as("principal", "create", "builder", "--role", "worker")...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "created principal builder (role worker)") {
			t.Fatalf("ag principal create printed:\n%s\nwant a line naming the principal, then its token", out)
		}
		token := strings.TrimSpace(lines[1])
		if token == "" || strings.ContainsAny(token, " \t") {
			t.Fatalf("ag principal create: the token line is %q", lines[1])
		}

		w := s.startWorker(t, workerOpts{Label: "builder-1", Token: token})

		out = mustAG(t, as("job", "enqueue", "ag.noop", "--payload", `{"ms": 50}`)...)
		m := regexp.MustCompile(`^enqueued (\S+) \(ag\.noop, queued\)\n$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("ag job enqueue printed %q, want \"enqueued ID (ag.noop, queued)\"", out)
		}
		id := m[1]

		var row []string
		eventually(t, "ag job list to show "+id+" completed", func() (bool, string) {
			out := mustAG(t, as("job", "list")...)
			row = tableRow(t, out, id)
			return len(row) > 2 && row[2] == "completed", out
		})
		// ID KIND STATE ATTEMPTS CLAIMED-BY UPDATED(date time) [NOTE]
		if len(row) < 7 || row[1] != "ag.noop" || row[3] != "1/5" || row[4] != "builder|builder-1" {
			t.Errorf("ag job list row %q: want kind ag.noop, attempts 1/5, claimed by builder|builder-1", row)
		}

		out = mustAG(t, as("job", "show", id, "--json")...)
		var shown struct {
			Job struct {
				ID        string         `json:"id"`
				Kind      string         `json:"kind"`
				State     string         `json:"state"`
				Attempts  int            `json:"attempts"`
				ClaimedBy string         `json:"claimedBy"`
				Result    map[string]any `json:"result"`
			} `json:"job"`
		}
		if err := json.Unmarshal([]byte(out), &shown); err != nil {
			t.Fatalf("ag job show --json: %v\n%s", err, out)
		}
		if j := shown.Job; j.ID != id || j.State != "JOB_STATE_COMPLETED" || j.Attempts != 1 || j.Kind != "ag.noop" ||
			j.ClaimedBy != "builder|builder-1" || j.Result["slept_ms"] != 50.0 {
			t.Errorf("ag job show --json: got %+v\nwant id %s, JOB_STATE_COMPLETED, attempts 1, result slept_ms 50", j, id)
		}
		waitLog(t, w, "msg=completed", "job="+id, "claim=1")

		// Without a token the command refuses at once, and says what to do.
		out, errOut, code := runAG(t, "job", "list", "--server", s.URL)
		if code == 0 || !strings.Contains(errOut, "no token") || !strings.Contains(errOut, "--token") || out != "" {
			t.Errorf("ag job list without a token: exit %d, stdout %q, stderr %q; want a non-zero exit and a message naming --token",
				code, out, errOut)
		}
	})
}

// tableRow answers the fields of the row of `ag job list` output whose first column is id, or
// nil. It fails t when the output is not the table.
func tableRow(t *testing.T, out, id string) []string {
	t.Helper()
	lines := strings.Split(out, "\n")
	if h := strings.Fields(lines[0]); len(h) < 3 || h[0] != "ID" || h[1] != "KIND" || h[2] != "STATE" {
		t.Fatalf("ag job list: no table header in:\n%s", out)
	}
	for _, line := range lines[1:] {
		if f := strings.Fields(line); len(f) > 0 && f[0] == id {
			return f
		}
	}
	return nil
}

// TestWorkerCompletesNoopJobs: one worker running four jobs at a time completes fifty, each in
// one claim.
func TestWorkerCompletesNoopJobs(t *testing.T) {
	const n, ms = 50, 150
	forEachBackend(t, func(t *testing.T, backend string) {
		s := startServer(t, backend)
		token := s.principal(t, "fleet", roleWorker)
		ids := map[string]bool{}
		for range n {
			ids[s.enqueueNoop(t, ms).GetId()] = true
		}
		w := s.startWorker(t, workerOpts{Label: "w4", Token: token, Concurrency: 4})

		var jobs []*agwpv1.Job
		eventually(t, "all jobs to complete", func() (bool, string) {
			res, err := s.Admin.Jobs.ListJobs(context.Background(), &agwpv1.ListJobsRequest{PageSize: 1000})
			if err != nil {
				t.Fatalf("list jobs: %v", err)
			}
			jobs = res.GetJobs()
			done := 0
			for _, j := range jobs {
				if j.GetState() == stateCompleted {
					done++
				}
			}
			return done == n, fmt.Sprintf("%d of %d jobs completed", done, len(jobs))
		})
		if len(jobs) != n {
			t.Fatalf("%d jobs listed, want %d", len(jobs), n)
		}
		for _, j := range jobs {
			if !ids[j.GetId()] || j.GetAttempts() != 1 || j.GetClaimedBy() != "fleet|w4" || j.GetOutput() != "slept 150ms\n" {
				t.Errorf("job %s: %s; want one of those enqueued, attempts 1, claimed by fleet|w4", j.GetId(), describeJob(j))
			}
		}
		// The worker logs a completion once the server has taken it: the last lines may come
		// just after the server shows every job completed.
		eventually(t, "the worker to log every completion", func() (bool, string) {
			got := len(w.stderr.Lines("msg=completed "))
			return got == n, fmt.Sprintf("the worker logged %d completions, want %d", got, n)
		})
		// Four at a time, never more: count the claims not yet completed, in log order.
		running, most := 0, 0
		for _, line := range strings.Split(w.stderr.String(), "\n") {
			switch {
			case strings.Contains(line, "msg=claimed "):
				running++
				most = max(most, running)
			case strings.Contains(line, "msg=completed "):
				running--
			}
		}
		if most != 4 {
			t.Errorf("at most %d jobs ran at once, want 4 (--concurrency 4)", most)
		}
	})
}

// TestKilledWorkerJobIsClaimedAgain: a worker killed in the middle of a job loses it when its
// lease runs out, and another worker completes it under the next claim number.
func TestKilledWorkerJobIsClaimedAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		s := startServer(t, backend)
		token := s.principal(t, "fleet", roleWorker)
		// Long enough that A is killed while running it, short enough for B to finish it.
		id := s.enqueueNoop(t, 3000).GetId()

		a := s.startWorker(t, workerOpts{Label: "a", Token: token, Lease: 2 * time.Second})
		waitLog(t, a, "msg=claimed", "job="+id, "claim=1")
		s.waitJob(t, id, "claimed by fleet|a (claim 1)", isClaim("fleet|a", 1))
		a.signal(t, syscall.SIGKILL)
		if st := a.wait(t, 10*time.Second); st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("worker a ended with %v, want killed by SIGKILL", st)
		}

		b := s.startWorker(t, workerOpts{Label: "b", Token: token, Lease: 2 * time.Second})
		j := s.waitJob(t, id, "completed", isState(stateCompleted))
		if j.GetAttempts() != 2 || j.GetClaimedBy() != "fleet|b" || j.GetOutput() != "slept 3000ms\n" {
			t.Errorf("job %s: %s; want completed by fleet|b under claim 2", id, describeJob(j))
		}
		waitLog(t, b, "msg=completed", "job="+id, "claim=2")
		if lines := a.stderr.Lines("msg=completed "); len(lines) > 0 {
			t.Errorf("the killed worker a logged a completion: %q", lines)
		}
	})
}

// TestPausedWorkerIsFencedOff is ADR-0012's case: a worker is paused (SIGSTOP) until its lease
// runs out, a restart of itself (same principal, same label) claims the job again, and the
// paused one wakes up. Its claim number is stale, so its heartbeat or completion is refused,
// and the job stays with the new claim until that completes it.
func TestPausedWorkerIsFencedOff(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		s := startServer(t, backend)
		token := s.principal(t, "fleet", roleWorker)
		key := filepath.Join(t.TempDir(), "w1.key")
		id := s.enqueueNoop(t, 6000).GetId()

		a := s.startWorker(t, workerOpts{Label: "w1", Token: token, Key: key, Lease: 2 * time.Second})
		waitLog(t, a, "msg=claimed", "job="+id, "claim=1")
		s.waitJob(t, id, "claimed by fleet|w1 (claim 1)", isClaim("fleet|w1", 1))
		a.signal(t, syscall.SIGSTOP)
		s.waitJob(t, id, "to have its lease expired", func(j *agwpv1.Job) bool {
			return j.GetLeaseExpiresAt() != nil && j.GetLeaseExpiresAt().AsTime().Before(time.Now())
		})

		b := s.startWorker(t, workerOpts{Label: "w1", Token: token, Key: key, Lease: 2 * time.Second})
		s.waitJob(t, id, "claimed again by fleet|w1 (claim 2)", isClaim("fleet|w1", 2))
		waitLog(t, b, "msg=claimed", "job="+id, "claim=2")

		a.signal(t, syscall.SIGCONT)
		const (
			heartbeatRefused  = `msg="claim lost; stopped the job"`
			completionRefused = `msg="completed refused: the claim was lost"`
		)
		var refused string
		eventually(t, "the woken worker to be refused", func() (bool, string) {
			if lines := a.stderr.Lines("msg=completed ", "job="+id); len(lines) > 0 {
				t.Fatalf("the woken worker completed the job it no longer holds: %q; the job: %s", lines, describeJob(s.job(t, id)))
			}
			for _, msg := range []string{heartbeatRefused, completionRefused} {
				if len(a.stderr.Lines(msg, "job="+id, "claim=1")) > 0 {
					refused = msg
					return true, ""
				}
			}
			return false, "its stderr:\n" + a.stderr.String()
		})
		j := s.job(t, id)
		if !isClaim("fleet|w1", 2)(j) || j.GetOutput() != "" || j.GetResult() != nil {
			t.Fatalf("after the stale claim woke up: job %s: %s; want still CLAIMED by claim 2, without output or result", id, describeJob(j))
		}
		if a.exited() {
			t.Errorf("the woken worker exited (%v); it should go on claiming", a.err)
		}

		method := "HeartbeatJob"
		if refused == completionRefused {
			method = "CompleteJob"
		}
		if v, ok := s.metric(t, "ag_refusals_total", "method="+method, "reason=stale_claim"); !ok || v <= 0 {
			t.Errorf("/metrics: ag_refusals_total{method=%q,reason=\"stale_claim\"} = %v (present: %v), want > 0", method, v, ok)
		}

		j = s.waitJob(t, id, "completed", isState(stateCompleted))
		if j.GetAttempts() != 2 || j.GetClaimedBy() != "fleet|w1" || j.GetOutput() != "slept 6000ms\n" {
			t.Errorf("job %s: %s; want completed under claim 2", id, describeJob(j))
		}
		waitLog(t, b, "msg=completed", "job="+id, "claim=2")
		if lines := a.stderr.Lines("msg=completed "); len(lines) > 0 {
			t.Errorf("the paused worker completed a job: %q", lines)
		}
	})
}

// TestWorkerShutdownHandsBackItsJob: on SIGTERM a worker lets its job run for the shutdown
// grace; a job that does not finish in time is handed back for another worker at once, and one
// that does is completed before the worker exits.
func TestWorkerShutdownHandsBackItsJob(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		t.Run("long job is handed back", func(t *testing.T) {
			s := startServer(t, backend)
			token := s.principal(t, "fleet", roleWorker)
			id := s.enqueueNoop(t, 60000).GetId()

			w := s.startWorker(t, workerOpts{Label: "s1", Token: token, Grace: 500 * time.Millisecond})
			waitLog(t, w, "msg=claimed", "job="+id, "claim=1")
			s.waitJob(t, id, "claimed by fleet|s1", isClaim("fleet|s1", 1))
			w.signal(t, syscall.SIGTERM)
			if st := w.wait(t, 10*time.Second); !st.Success() {
				t.Errorf("the worker exited with %v after SIGTERM, want 0; its stderr:\n%s", st, w.stderr.String())
			}

			j := s.job(t, id)
			if j.GetState() != stateQueued || j.GetAttempts() != 1 || j.GetClaimedBy() != "" ||
				!strings.Contains(j.GetLastError(), "shut down") {
				t.Fatalf("after the worker's shutdown: job %s: %s; want QUEUED again, attempts 1, last_error about the shutdown", id, describeJob(j))
			}
			if ra := j.GetRunAfter().AsTime(); ra.After(time.Now()) {
				t.Errorf("the handed-back job runs after %v, want at once", ra)
			}
			waitLog(t, w, "msg=failed", "job="+id)
			waitLog(t, w, `msg="ag-worker stopped"`)

			s.startWorker(t, workerOpts{Label: "s2", Token: token})
			s.waitJob(t, id, "claimed by the next worker fleet|s2 (claim 2)", isClaim("fleet|s2", 2))
		})

		t.Run("job within the grace completes", func(t *testing.T) {
			s := startServer(t, backend)
			token := s.principal(t, "fleet", roleWorker)
			id := s.enqueueNoop(t, 1500).GetId()

			w := s.startWorker(t, workerOpts{Label: "s3", Token: token, Grace: 10 * time.Second})
			waitLog(t, w, "msg=claimed", "job="+id, "claim=1")
			s.waitJob(t, id, "claimed by fleet|s3", isClaim("fleet|s3", 1))
			sent := time.Now()
			w.signal(t, syscall.SIGTERM)
			if st := w.wait(t, 10*time.Second); !st.Success() {
				t.Errorf("the worker exited with %v after SIGTERM, want 0; its stderr:\n%s", st, w.stderr.String())
			}

			j := s.job(t, id)
			if j.GetState() != stateCompleted || j.GetAttempts() != 1 || j.GetClaimedBy() != "fleet|s3" || j.GetOutput() != "slept 1500ms\n" {
				t.Fatalf("after the worker's shutdown: job %s: %s; want COMPLETED by fleet|s3 under claim 1", id, describeJob(j))
			}
			if fin := j.GetFinishedAt().AsTime(); fin.Before(sent) {
				t.Errorf("the job finished at %v, before SIGTERM was sent at %v: the test did not stop a running job", fin, sent)
			}
			log := w.stderr.String()
			done, stopped := strings.Index(log, "msg=completed "), strings.Index(log, `msg="ag-worker stopped"`)
			if done < 0 || stopped < 0 || done > stopped {
				t.Errorf("want the completion logged before the worker stopped; its stderr:\n%s", log)
			}
		})
	})
}
