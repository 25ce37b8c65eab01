//go:build unix

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// The parallel gate as its users see it (docs/validation.md): several candidates of one queue
// validate at once on real ag-worker processes, each on the one ahead of it; only the first
// lands or is rejected, the ones built on a failure are superseded, their workers told to stop,
// and their changes validated again without it.

// gatedCheck is checkScript once the test lets the tree go on: it waits until the file
// $GATE_DIR/go exists (every tree), or $GATE_DIR/go-N, N the number of edited files in the
// tree, which is the place of a candidate built on the import (at most about 30s, so that a
// command whose worker was killed does not linger). Its progress line is "waiting for go or
// go-N". The sandbox shows GATE_DIR only to a worker started with --sandbox-ro GATE_DIR.
const gatedCheck = `n=$(($(grep -l -e better -e broken *.txt | wc -l)))
echo "waiting for go or go-$n"
i=0
while [ ! -e "$GATE_DIR/go" ] && [ ! -e "$GATE_DIR/go-$n" ]; do
	i=$((i+1))
	if [ "$i" -gt 600 ]; then echo "gave up waiting"; exit 3; fi
	sleep 0.05
done
` + checkScript

// speculationFiles is the tree the speculation tests start from: check.sh, and f1.txt to fN.txt
// that it checks, one for each change.
func speculationFiles(n int, check string) map[string]string {
	files := map[string]string{"check.sh": check}
	for k := 1; k <= n; k++ {
		files[fileOf(k)] = fmt.Sprintf("f%d is fine\n", k)
	}
	return files
}

func fileOf(k int) string { return fmt.Sprintf("f%d.txt", k) }

// better and broken are what change k writes to its file: checkScript passes the one and fails
// the other.
func better(k int) string { return fmt.Sprintf("f%d is better\n", k) }
func broken(k int) string { return fmt.Sprintf("f%d is broken\n", k) }

// gateDir is the directory whose files let the gatedCheck commands go on.
type gateDir string

// startGated starts a gate of backend on speculationFiles(n, gatedCheck) whose policy runs it
// with GATE_DIR, and answers it and the directory that lets its commands go on.
func startGated(t *testing.T, backend string, n int, policy ...string) (*gateEnv, gateDir) {
	t.Helper()
	dir := gateDir(t.TempDir())
	// Also ends the commands of killed workers, whom nobody stops any more.
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(string(dir), "go"), nil, 0o644) })
	policy = append([]string{"--env", "GATE_DIR=" + string(dir)}, policy...)
	return startGate(t, backend, speculationFiles(n, gatedCheck), append(policy, "--", "sh", "check.sh")...), dir
}

// open lets the commands waiting for name ("go", or "go-N") go on.
func (d gateDir) open(t *testing.T, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(string(d), name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// workers starts n validate workers w1..wN of lease, with more flags when given.
func (g *gateEnv) workers(t *testing.T, n int, lease time.Duration, args ...string) []*gateWorker {
	t.Helper()
	var ws []*gateWorker
	for k := 1; k <= n; k++ {
		ws = append(ws, g.worker(t, fmt.Sprintf("w%d", k), lease, args...))
	}
	return ws
}

// byHolder answers the worker whose holder is holder.
func byHolder(t *testing.T, ws []*gateWorker, holder string) *gateWorker {
	t.Helper()
	for _, w := range ws {
		if w.holder == holder {
			return w
		}
	}
	t.Fatalf("no worker is %q", holder)
	return nil
}

// submitted is a change an agent sent with `ag integrate`, followed in the background.
type submitted struct {
	agent *agentShell
	path  string
	run   *agRun
	id    string
}

// prepare creates the agent aK and has it lease fK.txt and write content to it, for change k.
func (g *gateEnv) prepare(t *testing.T, k int, content string) *submitted {
	t.Helper()
	s := &submitted{agent: g.agent(t, fmt.Sprintf("a%d", k)), path: fileOf(k)}
	edit(t, s.agent, s.path, content)
	return s
}

var firstState = regexp.MustCompile(`(?m)^change (\S+): `)

// submit starts `ag integrate` in the agent's checkout and waits until it has printed its
// change's first state: changes submitted one after the other are queued in that order.
func (s *submitted) submit(t *testing.T) {
	t.Helper()
	s.run = startAG(t, s.agent.args([]string{"integrate", "-m", s.agent.holder + ": " + s.path})...)
	eventually(t, "ag integrate ("+s.agent.holder+") to queue its change", func() (bool, string) {
		m := firstState.FindStringSubmatch(s.run.stderr.String())
		if m == nil {
			if s.run.exited() {
				t.Fatalf("ag integrate (%s) ended before it queued a change\nstdout:\n%s\nstderr:\n%s", s.agent.holder, s.run.stdout, s.run.stderr)
			}
			return false, "its stderr:\n" + s.run.stderr.String()
		}
		s.id = m[1]
		return true, ""
	})
}

// integrated waits for the change to be integrated, as `ag integrate` prints it, and answers the
// mainline it moved to and the attestation.
func (s *submitted) integrated(t *testing.T) (rev, digest string) {
	t.Helper()
	stdout, stderr, code := s.run.wait(t)
	id, rev, digest := integrated(t, s.agent.holder, stdout, stderr, code)
	if id != s.id {
		t.Fatalf("ag integrate (%s) queued change %s, then printed change %s", s.agent.holder, s.id, id)
	}
	return rev, digest
}

// submitAll prepares the changes of contents (change k writes contents[k-1] to fk.txt) and
// submits them in that order.
func (g *gateEnv) submitAll(t *testing.T, contents ...string) []*submitted {
	t.Helper()
	var subs []*submitted
	for k, c := range contents {
		subs = append(subs, g.prepare(t, k+1, c))
	}
	for _, s := range subs {
		s.submit(t)
	}
	return subs
}

func ids(subs []*submitted) []string {
	var out []string
	for _, s := range subs {
		out = append(out, s.id)
	}
	return out
}

// queue answers app's integration queue, through the SDK.
func (g *gateEnv) queue(t *testing.T) *agwpv1.GetQueueResponse {
	t.Helper()
	q, err := g.Admin.Repos.GetQueue(context.Background(), &agwpv1.GetQueueRequest{Repository: "app"})
	if err != nil {
		t.Fatalf("get the queue of app: %v", err)
	}
	return q
}

func describeQueue(q *agwpv1.GetQueueResponse) string {
	var b strings.Builder
	fmt.Fprintf(&b, "depth %d, batch %d, mainline %s", q.GetDepth(), q.GetBatch(), q.GetMainline())
	for _, c := range q.GetCandidates() {
		fmt.Fprintf(&b, "\n  %d %s %s %v on %s by %v: %q", c.GetPosition(), c.GetId(), c.GetState(), c.GetChanges(),
			c.GetParentRevision(), c.GetWorkers(), c.GetProgress())
	}
	for _, c := range q.GetWaiting() {
		fmt.Fprintf(&b, "\n  waiting %s", c.GetId())
	}
	return b.String()
}

// waitRunning waits until the queue's first candidates are one change each of subs, in order,
// each claimed by a worker whose command waits to go on, and answers the queue.
func (g *gateEnv) waitRunning(t *testing.T, subs []*submitted) *agwpv1.GetQueueResponse {
	t.Helper()
	var q *agwpv1.GetQueueResponse
	eventually(t, fmt.Sprintf("the candidates of the first %d changes to run at once", len(subs)), func() (bool, string) {
		q = g.queue(t)
		cs := q.GetCandidates()
		if len(cs) < len(subs) {
			return false, describeQueue(q)
		}
		for k, s := range subs {
			c := cs[k]
			if c.GetState() != agwpv1.CandidateState_CANDIDATE_STATE_VALIDATING || !slices.Equal(c.GetChanges(), []string{s.id}) ||
				len(c.GetWorkers()) != 1 || c.GetProgress() != fmt.Sprintf("waiting for go or go-%d", k+1) {
				return false, describeQueue(q)
			}
		}
		return true, ""
	})
	return q
}

// mainlineTrees answers the mainline's revisions after the import, oldest first, as GetTree
// answers them.
func (g *gateEnv) mainlineTrees(t *testing.T) []*agwpv1.GetTreeResponse {
	t.Helper()
	var out []*agwpv1.GetTreeResponse
	for rev := g.mainline(t); rev != g.imported; {
		if rev == "" || len(out) > 1000 {
			t.Fatalf("the mainline's history does not reach the import %s within %d revisions", g.imported, len(out))
		}
		res, err := g.Admin.Repos.GetTree(context.Background(), &agwpv1.GetTreeRequest{Repository: "app", Revision: rev})
		if err != nil {
			t.Fatalf("get the tree of app@%s: %v", rev, err)
		}
		out = append(out, res)
		rev = res.GetParent()
	}
	slices.Reverse(out)
	return out
}

// mainlineChanges answers the changes of the mainline's revisions after the import, oldest first.
func (g *gateEnv) mainlineChanges(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, tree := range g.mainlineTrees(t) {
		out = append(out, tree.GetChangeId())
	}
	return out
}

// validateJobs answers every validate job of the server.
func (g *gateEnv) validateJobs(t *testing.T) []*agwpv1.Job {
	t.Helper()
	res, err := g.Admin.Jobs.ListJobs(context.Background(), &agwpv1.ListJobsRequest{Kinds: []string{"validate"}, PageSize: 1000})
	if err != nil {
		t.Fatalf("list the validate jobs: %v", err)
	}
	return res.GetJobs()
}

// auditEvent is one line of `ag audit tail --json`.
type auditEvent struct {
	Seq     uint64         `json:"seq"`
	Action  string         `json:"action"`
	Subject string         `json:"subject"`
	Details map[string]any `json:"details"`
}

// audit answers the sealed audit events, oldest first, as `ag audit tail --json` prints them.
func (g *gateEnv) audit(t *testing.T) []auditEvent {
	t.Helper()
	out := mustAG(t, g.admin("audit", "tail", "--json")...)
	var events []auditEvent
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e auditEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("ag audit tail --json: %v in the line %q", err, line)
		}
		events = append(events, e)
	}
	return events
}

// countEvents answers how many events of action are about subject.
func countEvents(events []auditEvent, action, subject string) int {
	n := 0
	for _, e := range events {
		if e.Action == action && e.Subject == subject {
			n++
		}
	}
	return n
}

// assertHistories checks that each change's candidates, oldest first, were superseded with a
// reason, except the last, which landed as its integrated revision (rejected for rejected).
func (g *gateEnv) assertHistories(t *testing.T, subs []*submitted, rejected ...string) {
	t.Helper()
	for _, s := range subs {
		ch := g.change(t, s.id)
		h := ch.GetHistory()
		if len(h) == 0 {
			t.Errorf("change %s has no candidates in its history", s.id)
			continue
		}
		for _, c := range h[:len(h)-1] {
			if c.GetState() != agwpv1.CandidateState_CANDIDATE_STATE_SUPERSEDED || c.GetReason() == "" {
				t.Errorf("change %s: earlier candidate %s is %s, reason %q; want superseded, saying why", s.id, c.GetId(), c.GetState(), c.GetReason())
			}
		}
		last := h[len(h)-1]
		want := agwpv1.CandidateState_CANDIDATE_STATE_LANDED
		if slices.Contains(rejected, s.id) {
			want = agwpv1.CandidateState_CANDIDATE_STATE_REJECTED
		} else if last.GetRevision() != ch.GetIntegratedRevision() {
			t.Errorf("change %s: its last candidate %s is revision %s, but it was integrated as %s", s.id, last.GetId(), last.GetRevision(), ch.GetIntegratedRevision())
		}
		if last.GetState() != want || !slices.Contains(last.GetChanges(), s.id) || ch.GetCandidate().GetId() != last.GetId() {
			t.Errorf("change %s: last candidate %s is %s with %v (the change names %s); want %s, holding it",
				s.id, last.GetId(), last.GetState(), last.GetChanges(), ch.GetCandidate().GetId(), want)
		}
	}
}

// TestGateSpeculationLandsInRounds: with four validate workers, eight passing changes validate
// four at once, each candidate on the one ahead of it, and land in the order they were queued:
// eight validations in two rounds, no more.
func TestGateSpeculationLandsInRounds(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g, dir := startGated(t, backend, 8)
		ws := g.workers(t, 4, 10*time.Second, "--sandbox-ro", string(dir))
		var contents []string
		for k := 1; k <= 8; k++ {
			contents = append(contents, better(k))
		}
		subs := g.submitAll(t, contents...)

		// The first round: as many candidates as workers, each on the one ahead, and the others
		// waiting, as `ag repo queue` shows.
		q := g.waitRunning(t, subs[:4])
		if len(q.GetCandidates()) != 4 || q.GetDepth() != 4 || len(q.GetWaiting()) != 4 {
			t.Fatalf("the queue while the first candidates run: %s\nwant depth 4 (the workers), 4 candidates and 4 changes waiting", describeQueue(q))
		}
		out := mustAG(t, g.admin("repo", "queue", "app")...)
		if !strings.Contains(out, "\nqueue: 4 candidates in flight, 4 changes waiting (depth 4, batch 1)\n") {
			t.Errorf("ag repo queue app printed:\n%s\nwant 4 candidates in flight and 4 changes waiting, depth 4", out)
		}
		parent := g.imported
		for k, c := range q.GetCandidates() {
			if c.GetParentRevision() != parent {
				t.Errorf("candidate %d (%s) is built on %s, want %s, the one ahead of it", k+1, c.GetId(), c.GetParentRevision(), parent)
			}
			parent = c.GetRevision()
			if !containsLine(out, " "+strconv.Itoa(k+1)+" ", c.GetId(), "validating", subs[k].id, c.GetParentRevision(), c.GetWorkers()[0]) {
				t.Errorf("ag repo queue app does not show candidate %d %s of change %s run by %s:\n%s", k+1, c.GetId(), subs[k].id, c.GetWorkers()[0], out)
			}
		}
		for _, s := range subs[4:] {
			if !containsLine(out, s.id, s.agent.holder) {
				t.Errorf("ag repo queue app does not list change %s of %s waiting:\n%s", s.id, s.agent.holder, out)
			}
		}

		dir.open(t, "go")
		for _, s := range subs {
			s.integrated(t)
		}
		// Each `ag integrate` said where its change was validated: the first four in the
		// candidates of the first round, at their places.
		for k, s := range subs {
			want := "change " + s.id + ": in candidate cnd_"
			if k < 4 {
				c := q.GetCandidates()[k]
				want = fmt.Sprintf("change %s: in candidate %s validating, position %d in the queue, on %s", s.id, c.GetId(), k+1, c.GetParentRevision())
			}
			if !strings.Contains(s.run.stderr.String(), want) {
				t.Errorf("ag integrate (%s) did not say %q; its stderr:\n%s", s.agent.holder, want, s.run.stderr)
			}
		}

		if got := g.mainlineChanges(t); !slices.Equal(got, ids(subs)) {
			t.Errorf("the mainline's changes after the import: %v, want %v, in the order they were queued", got, ids(subs))
		}
		final := g.files
		for k := 1; k <= 8; k++ {
			final = with(final, map[string]string{fileOf(k): better(k)})
		}
		g.assertMainline(t, g.mainline(t), final)
		g.assertHistories(t, subs)

		// Eight validations, one for each change: none was validated again.
		jobs := g.validateJobs(t)
		byID := map[string]*agwpv1.Job{}
		for _, j := range jobs {
			byID[j.GetId()] = j
		}
		var round [2][]*agwpv1.Job
		for k, s := range subs {
			j := byID[g.change(t, s.id).GetJobId()]
			if j == nil || j.GetState() != stateCompleted || j.GetAttempts() != 1 {
				t.Fatalf("the validate job of change %s: %v; want it listed, completed under claim 1", s.id, j)
			}
			round[k/4] = append(round[k/4], j)
		}
		if len(jobs) != 8 {
			t.Errorf("%d validate jobs, want 8: one for each change", len(jobs))
		}
		// Two rounds: the first four jobs were all created before any of them finished, and the
		// next four only after one of them had.
		firstDone := round[0][0].GetFinishedAt().AsTime()
		workers := map[string]bool{}
		for _, j := range round[0] {
			firstDone = minTime(firstDone, j.GetFinishedAt().AsTime())
			workers[j.GetClaimedBy()] = true
		}
		for _, j := range round[0] {
			if !j.GetCreatedAt().AsTime().Before(firstDone) {
				t.Errorf("job %s of the first round was created at %v, after a job of that round finished at %v",
					j.GetId(), j.GetCreatedAt().AsTime(), firstDone)
			}
		}
		for _, j := range round[1] {
			if j.GetCreatedAt().AsTime().Before(firstDone) {
				t.Errorf("job %s of the second round was created at %v, before any job of the first finished (%v): deeper than the 4 workers",
					j.GetId(), j.GetCreatedAt().AsTime(), firstDone)
			}
		}
		if len(workers) != len(ws) {
			t.Errorf("the first round ran on %d workers (%v), want all %d", len(workers), workers, len(ws))
		}
	})
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// TestGateSpeculationRejectsTheCulpritOnly: of six changes validating four at once, the third
// breaks the check while the two ahead of it still run. Its candidate waits, failed; the one
// built on it is superseded and validated again without it; once the two ahead pass, the third
// is rejected with its failing output and the five others land, in order.
func TestGateSpeculationRejectsTheCulpritOnly(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g, dir := startGated(t, backend, 6)
		g.workers(t, 4, 2*time.Second, "--sandbox-ro", string(dir))
		subs := g.submitAll(t, better(1), better(2), broken(3), better(4), better(5), better(6))
		q := g.waitRunning(t, subs[:4])
		cand3, cand4 := q.GetCandidates()[2], q.GetCandidates()[3]

		// Only the third candidate's command goes on, and fails; the fourth, built on it, runs on.
		dir.open(t, "go-3")
		eventually(t, "the third candidate to wait, failed, and the fourth to be superseded", func() (bool, string) {
			q = g.queue(t)
			h := g.change(t, subs[3].id).GetHistory()
			cs := q.GetCandidates()
			ok := len(cs) >= 3 && cs[2].GetId() == cand3.GetId() && cs[2].GetState() == agwpv1.CandidateState_CANDIDATE_STATE_FAILED &&
				len(h) == 2 && h[0].GetId() == cand4.GetId() && h[0].GetState() == agwpv1.CandidateState_CANDIDATE_STATE_SUPERSEDED
			return ok, fmt.Sprintf("the queue: %s\nthe history of change %s: %v", describeQueue(q), subs[3].id, h)
		})
		for _, c := range q.GetCandidates()[:2] {
			if c.GetState() != agwpv1.CandidateState_CANDIDATE_STATE_VALIDATING {
				t.Errorf("candidate %s ahead of the failed one is %s, want still validating", c.GetId(), c.GetState())
			}
		}
		if ch := g.change(t, subs[2].id); ch.GetState() != agwpv1.ChangeState_CHANGE_STATE_VALIDATING {
			t.Errorf("change %s, failed behind candidates still validating, is %s; want it to wait, validating", subs[2].id, ch.GetState())
		}

		dir.open(t, "go")
		job3 := g.job(t, cand3.GetJobId())
		for k, s := range subs {
			if k == 2 {
				stdout, stderr, code := s.run.wait(t)
				rejected(t, s.agent.holder, stdout, stderr, code,
					"\nreason: validation failed: `sh check.sh` exited with status 1 (worker "+job3.GetClaimedBy()+")",
					"\n1:f3 is broken\nFAIL: f3.txt is broken\n")
				continue
			}
			s.integrated(t)
		}

		passed := slices.Delete(slices.Clone(subs), 2, 3)
		if got := g.mainlineChanges(t); !slices.Equal(got, ids(passed)) {
			t.Errorf("the mainline's changes after the import: %v, want %v: all but the third, in order", got, ids(passed))
		}
		final := g.files
		for _, k := range []int{1, 2, 4, 5, 6} {
			final = with(final, map[string]string{fileOf(k): better(k)})
		}
		g.assertMainline(t, g.mainline(t), final)
		g.assertHistories(t, subs, subs[2].id)

		// The fourth change says why it was validated twice.
		out := mustAG(t, g.admin("change", "show", subs[3].id)...)
		h := g.change(t, subs[3].id).GetHistory()
		if !containsLine(out, "state", "integrated") || !strings.Contains(out, "\nvalidated 2 times:\n") ||
			!containsLine(out, cand4.GetId(), "superseded: the candidate "+cand3.GetId()+" of change "+subs[2].id+" ahead of it failed") ||
			len(h) != 2 || !containsLine(out, h[1].GetId(), "landed") {
			t.Errorf("ag change show %s printed:\n%s\nwant it integrated, validated 2 times: %s superseded because %s of change %s failed, then landed",
				subs[3].id, out, cand4.GetId(), cand3.GetId(), subs[2].id)
		}
		out = mustAG(t, g.admin("change", "show", subs[2].id)...)
		if !containsLine(out, "state", "rejected") || strings.Contains(out, "validated ") || !strings.Contains(out, "FAIL: f3.txt is broken") {
			t.Errorf("ag change show %s printed:\n%s\nwant it rejected once, with the failing output", subs[2].id, out)
		}
	})
}

// TestGateSpeculationKilledWorker: the worker running the second of four candidates is killed
// (SIGKILL); when its claim's lease runs out another worker validates that candidate again,
// and every change is integrated once, in order, none validated in a new candidate.
func TestGateSpeculationKilledWorker(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g, dir := startGated(t, backend, 4)
		ws := g.workers(t, 4, 2*time.Second, "--sandbox-ro", string(dir))
		subs := g.submitAll(t, better(1), better(2), better(3), better(4))
		q := g.waitRunning(t, subs)

		second := q.GetCandidates()[1]
		jobID := second.GetJobId()
		victim := byHolder(t, ws, second.GetWorkers()[0])
		g.waitJob(t, jobID, "claimed by "+victim.holder+" (claim 1)", isClaim(victim.holder, 1))
		victim.signal(t, syscall.SIGKILL)
		if st := victim.wait(t, 10*time.Second); st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("worker %s ended with %v, want killed by SIGKILL", victim.holder, st)
		}
		e := g.worker(t, "e", 2*time.Second, "--sandbox-ro", string(dir))
		g.waitJob(t, jobID, "claimed by ci|e (claim 2)", isClaim(e.holder, 2))

		dir.open(t, "go")
		revs := map[string]string{}
		for _, s := range subs {
			rev, _ := s.integrated(t)
			revs[s.id] = rev
		}
		if got := g.mainlineChanges(t); !slices.Equal(got, ids(subs)) {
			t.Errorf("the mainline's changes after the import: %v, want %v, in the order they were queued", got, ids(subs))
		}
		head := g.mainline(t)
		for _, s := range subs {
			if n := g.historyCount(t, head, s.id); n != 1 {
				t.Errorf("the mainline's history holds change %s %d times, want once", s.id, n)
			}
			h := g.change(t, s.id).GetHistory()
			if len(h) != 1 || h[0].GetState() != agwpv1.CandidateState_CANDIDATE_STATE_LANDED || h[0].GetRevision() != revs[s.id] {
				t.Errorf("change %s: history %v; want the one candidate it was first built in, landed as %s", s.id, h, revs[s.id])
			}
		}
		g.assertHistories(t, subs)
		j := g.job(t, jobID)
		if j.GetState() != stateCompleted || j.GetAttempts() != 2 || j.GetClaimedBy() != e.holder {
			t.Errorf("validate job %s of the second candidate: %s; want completed by %s under claim 2", jobID, describeJob(j), e.holder)
		}
		if n := len(g.validateJobs(t)); n != len(subs) {
			t.Errorf("%d validate jobs, want %d: the lost claim is taken again, not rebuilt", n, len(subs))
		}
		if lines := victim.stderr.Lines("msg=completed "); len(lines) > 0 {
			t.Errorf("the killed worker %s logged a completion: %q", victim.holder, lines)
		}
		eventually(t, "one change.integrated event for each change", func() (bool, string) {
			events := g.audit(t)
			var counts []int
			for _, s := range subs {
				counts = append(counts, countEvents(events, "change.integrated", "change/"+s.id))
			}
			return slices.Equal(counts, []int{1, 1, 1, 1}), fmt.Sprintf("change.integrated events per change: %v", counts)
		})
	})
}

// TestGateSpeculationCancelReachesWorkers: four candidates run at once and the first fails: it
// is rejected, and the three built on it are superseded while their commands run. Their
// workers are told at their next heartbeat and stop, their jobs end cancelled, the audit log
// says so, and the three changes land when validated again without the first.
func TestGateSpeculationCancelReachesWorkers(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g, dir := startGated(t, backend, 4)
		ws := g.workers(t, 4, 2*time.Second, "--sandbox-ro", string(dir))
		subs := g.submitAll(t, broken(1), better(2), better(3), better(4))
		q := g.waitRunning(t, subs)
		superseded := q.GetCandidates()[1:]

		dir.open(t, "go-1")
		stdout, stderr, code := subs[0].run.wait(t)
		rejected(t, subs[0].agent.holder, stdout, stderr, code,
			"\nreason: validation failed: `sh check.sh` exited with status 1 (worker "+q.GetCandidates()[0].GetWorkers()[0]+")",
			"\n1:f1 is broken\nFAIL: f1.txt is broken\n")
		for _, c := range superseded {
			w := byHolder(t, ws, c.GetWorkers()[0])
			j := g.waitJob(t, c.GetJobId(), "cancelled", isState(agwpv1.JobState_JOB_STATE_CANCELLED))
			if j.GetClaimedBy() != w.holder || j.GetAttempts() != 1 || j.GetAttestationDigest() != "" {
				t.Errorf("validate job %s of superseded candidate %s: %s attestation=%q; want cancelled under %s's claim 1, without attestation",
					j.GetId(), c.GetId(), describeJob(j), j.GetAttestationDigest(), w.holder)
			}
			waitLog(t, w.proc, "msg=cancelled", "job="+c.GetJobId(), "claim=1")
			if lines := w.stderr.Lines("msg=completed ", "job="+c.GetJobId()); len(lines) > 0 {
				t.Errorf("worker %s completed the cancelled job %s: %q", w.holder, c.GetJobId(), lines)
			}
		}
		eventually(t, "the audit log to show the superseded candidates and their jobs' cancellation", func() (bool, string) {
			events := g.audit(t)
			var missing []string
			for _, c := range superseded {
				if countEvents(events, "job.cancel_requested", "job/"+c.GetJobId()) != 1 {
					missing = append(missing, "job.cancel_requested job/"+c.GetJobId())
				}
				found := false
				for _, e := range events {
					found = found || e.Action == "candidate.superseded" && e.Subject == "candidate/"+c.GetId() && e.Details["job"] == c.GetJobId() &&
						e.Details["reason"] == "the change "+subs[0].id+" ahead of it was rejected"
				}
				if !found {
					missing = append(missing, "candidate.superseded candidate/"+c.GetId())
				}
			}
			return len(missing) == 0, fmt.Sprintf("missing %v", missing)
		})

		dir.open(t, "go")
		for _, s := range subs[1:] {
			s.integrated(t)
		}
		if got := g.mainlineChanges(t); !slices.Equal(got, ids(subs[1:])) {
			t.Errorf("the mainline's changes after the import: %v, want %v", got, ids(subs[1:]))
		}
		g.assertHistories(t, subs, subs[0].id)
		for k, s := range subs[1:] {
			h := g.change(t, s.id).GetHistory()
			if len(h) != 2 || h[0].GetId() != superseded[k].GetId() || h[0].GetReason() != "the change "+subs[0].id+" ahead of it was rejected" {
				t.Errorf("change %s: history %v; want %s superseded because change %s was rejected, then landed", s.id, h, superseded[k].GetId(), subs[0].id)
			}
		}
	})
}

// TestGateBatchFindsTheCulprit: eight changes queued while no worker runs are validated in one
// batch once workers come (the batch no worker took yet grows as they arrive); it fails, and is
// split in halves until the one change that broke it is alone: that one is rejected, the seven
// others land, in order.
func TestGateBatchFindsTheCulprit(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g := startGate(t, backend, speculationFiles(8, checkScript), "--batch", "8", "--", "sh", "check.sh")
		const culprit = 6
		var contents []string
		for k := 1; k <= 8; k++ {
			contents = append(contents, better(k))
		}
		contents[culprit-1] = broken(culprit)
		subs := g.submitAll(t, contents...)
		eventually(t, "the eight changes to be one batch", func() (bool, string) {
			q := g.queue(t)
			cs := q.GetCandidates()
			return len(cs) == 1 && slices.Equal(cs[0].GetChanges(), ids(subs)) && len(q.GetWaiting()) == 0, describeQueue(q)
		})
		g.workers(t, 2, 10*time.Second)

		for k, s := range subs {
			if k == culprit-1 {
				stdout, stderr, code := s.run.wait(t)
				rejected(t, s.agent.holder, stdout, stderr, code,
					"\nreason: validation failed: `sh check.sh` exited with status 1 (worker ci|w",
					"\n1:f6 is broken\nFAIL: f6.txt is broken\n")
				continue
			}
			s.integrated(t)
		}

		out := mustAG(t, g.admin("change", "show", subs[culprit-1].id, "--json")...)
		var ch agwpv1.Change
		if err := protojson.Unmarshal([]byte(out), &ch); err != nil {
			t.Fatalf("ag change show --json: %v\n%s", err, out)
		}
		h := ch.GetHistory()
		// While no worker had taken it, the batch was built again as each change came: those
		// candidates never ran.
		for len(h) > 0 && h[0].GetState() == agwpv1.CandidateState_CANDIDATE_STATE_SUPERSEDED {
			if !strings.Contains(h[0].GetReason(), "built again as a larger batch") {
				t.Errorf("the culprit's candidate %s was superseded because %q, want because more changes came", h[0].GetId(), h[0].GetReason())
			}
			h = h[1:]
		}
		if len(h) < 2 {
			t.Fatalf("ag change show %s --json: history %v; want the batch of 8, then smaller parts", ch.GetId(), h)
		}
		if first := h[0]; !slices.Equal(first.GetChanges(), ids(subs)) || first.GetState() != agwpv1.CandidateState_CANDIDATE_STATE_SPLIT {
			t.Errorf("the culprit's first candidate %s: %s with %v; want split, the batch of all 8 changes %v", first.GetId(), first.GetState(), first.GetChanges(), ids(subs))
		}
		if last := h[len(h)-1]; !slices.Equal(last.GetChanges(), []string{ch.GetId()}) || last.GetState() != agwpv1.CandidateState_CANDIDATE_STATE_REJECTED {
			t.Errorf("the culprit's last candidate %s: %s with %v; want rejected, holding the culprit %s alone", last.GetId(), last.GetState(), last.GetChanges(), ch.GetId())
		}
		// In between, the halves that held it: 5-8, then 5-6, each split in turn.
		var got []string
		for _, c := range h {
			got = append(got, fmt.Sprintf("%d %s", len(c.GetChanges()), candidateStateName(c.GetState())))
		}
		if want := []string{"8 split", "4 split", "2 split", "1 rejected"}; !slices.Equal(got, want) {
			t.Errorf("the culprit's candidates (changes, state): %q, want %q", got, want)
		}

		final := g.files
		for k := 1; k <= 8; k++ {
			if k != culprit {
				final = with(final, map[string]string{fileOf(k): better(k)})
			}
		}
		g.assertMainline(t, g.mainline(t), final)
		// The changes land in order: each one's revision is at or after the one ahead of it.
		var chain []string
		for _, tree := range g.mainlineTrees(t) {
			chain = append(chain, tree.GetRevision())
		}
		last := -1
		for _, s := range subs {
			c := g.change(t, s.id)
			if c.GetId() == subs[culprit-1].id {
				continue
			}
			at := slices.Index(chain, c.GetIntegratedRevision())
			if c.GetState() != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED || at < 0 || at < last {
				t.Errorf("change %s: %s as %s, at %d of the mainline %v; want integrated at or after %d", s.id, c.GetState(), c.GetIntegratedRevision(), at, chain, last)
			}
			last = at
		}
	})
}

// candidateStateName is a candidate's state as `ag change show` prints it.
func candidateStateName(s agwpv1.CandidateState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "CANDIDATE_STATE_"))
}

// startReplicas starts n `ag serve` processes on one new PostgreSQL database with one audit key,
// and answers them and the audit key's file; the first creates the admin and the key.
func startReplicas(t *testing.T, n int) ([]*server, string) {
	t.Helper()
	db := pgtest.NewDatabase(t)
	token := "e2e-admin-" + randomHex(16)
	auditKey := filepath.Join(t.TempDir(), "audit.key")
	var out []*server
	for i := 1; i <= n; i++ {
		for try := 1; ; try++ {
			addr := freeAddr(t)
			p := startProc(t, fmt.Sprintf("ag serve (replica %d)", i), agBin, t.TempDir(), cleanEnv("AG_BOOTSTRAP_TOKEN="+token),
				"serve", "--addr", addr, "--db", db, "--audit-key", auditKey, "--poll-interval", "100ms")
			s := &server{URL: "http://" + addr, AdminToken: token, proc: p}
			err := waitReady(s)
			if err == nil {
				s.Admin = client.New(s.URL, token, client.WithRetries(0, 0))
				out = append(out, s)
				break
			}
			if p.exited() && strings.Contains(p.stderr.String(), "address already in use") && try < 3 {
				continue
			}
			t.Fatalf("replica %d did not become ready: %v\nits stderr:\n%s", i, err, p.stderr.String())
		}
	}
	return out, auditKey
}

// TestGateSpeculationTwoReplicas: two `ag serve` replicas on one PostgreSQL database, validate
// workers on each and agents integrating through each, one of them breaking the check. Every
// mainline revision's attestation verifies, with the key of the worker that ran its job, for
// exactly that revision's tree; each change is integrated once, the breaking one rejected; and
// the audit log the replicas wrote together verifies.
func TestGateSpeculationTwoReplicas(t *testing.T) {
	t.Parallel()
	replicas, auditKey := startReplicas(t, 2)
	files := speculationFiles(6, checkScript)
	g := &gateEnv{server: replicas[0], files: files}
	dir := t.TempDir()
	writeTree(t, dir, files)
	out := mustAG(t, g.admin("repo", "import", "app", dir)...)
	m := regexp.MustCompile(`^imported \d+ files into app: change \S+, mainline (\S+)\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ag repo import printed %q, want \"imported N files into app: change ID, mainline REV\"", out)
	}
	g.imported = m[1]
	// Each replica sees only its own workers: the policy names the depth.
	out = mustAG(t, append(g.admin("repo", "set-validation", "app"), "--depth", "4", "--", "sh", "check.sh")...)
	if !strings.HasPrefix(out, "repository app: validation `sh check.sh`") || !strings.Contains(out, ", 4 at once") {
		t.Fatalf("ag repo set-validation printed %q, want \"repository app: validation `sh check.sh` ..., 4 at once\"", out)
	}
	g.workerToken = g.principal(t, "ci", roleWorker)
	g2 := &gateEnv{server: replicas[1], files: files, imported: g.imported, workerToken: g.workerToken}

	ws := []*gateWorker{g.worker(t, "r1-w1", 10*time.Second), g.worker(t, "r1-w2", 10*time.Second),
		g2.worker(t, "r2-w1", 10*time.Second), g2.worker(t, "r2-w2", 10*time.Second)}
	const culprit = 5
	var subs []*submitted
	for k := 1; k <= 6; k++ {
		on := g
		if k%2 == 0 {
			on = g2
		}
		content := better(k)
		if k == culprit {
			content = broken(k)
		}
		subs = append(subs, on.prepare(t, k, content))
	}
	for _, s := range subs { // all at once
		s.run = startAG(t, s.agent.args([]string{"integrate", "-m", s.agent.holder + ": " + s.path})...)
	}
	integratedIDs := map[string]bool{}
	for k, s := range subs {
		stdout, stderr, code := s.run.wait(t)
		if k+1 == culprit {
			s.id = rejected(t, s.agent.holder, stdout, stderr, code,
				"\nreason: validation failed: `sh check.sh` exited with status 1 (worker ci|r", "FAIL: f5.txt is broken\n")
			continue
		}
		s.id, _, _ = integrated(t, s.agent.holder, stdout, stderr, code)
		integratedIDs[s.id] = true
	}

	if a, b := g.mainline(t), g2.mainline(t); a != b {
		t.Fatalf("the replicas answer two mainlines: %s and %s", a, b)
	}
	keys := map[string]string{}
	for _, w := range ws {
		keys[w.holder] = w.pub
	}
	// Every revision after the import: a change integrated once, whose attestation verifies
	// with the key of the worker that completed its job, for exactly the revision's tree.
	chain := g.mainlineTrees(t)
	seen := map[string]int{}
	for _, tree := range chain {
		rev := tree.GetRevision()
		ch := g2.change(t, tree.GetChangeId())
		seen[ch.GetId()]++
		if ch.GetState() != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED || ch.GetIntegratedRevision() != rev || ch.GetAttestationDigest() == "" {
			t.Errorf("the mainline's revision %s: change %s is %s as %s, attestation %q; want integrated as it, attested",
				rev, ch.GetId(), ch.GetState(), ch.GetIntegratedRevision(), ch.GetAttestationDigest())
			continue
		}
		job := g.job(t, ch.GetJobId())
		key, ok := keys[job.GetClaimedBy()]
		if !ok {
			t.Errorf("the validate job %s of change %s was completed by %q, no worker of the test", job.GetId(), ch.GetId(), job.GetClaimedBy())
			continue
		}
		v, out, errOut, code := verify(t, g.attestationFile(t, ch.GetAttestationDigest()), key, tree.GetTreeDigest())
		if code != 0 || v.result != "PASSED" || v.subject != "app@"+rev || v.job != job.GetId() || v.worker != job.GetClaimedBy() {
			t.Errorf("ag attestation verify of change %s's attestation for the tree of %s: exit %d\nstdout:\n%s\nstderr:\n%s\nwant PASSED by %s, subject app@%s, job %s",
				ch.GetId(), rev, code, out, errOut, job.GetClaimedBy(), rev, job.GetId())
		}
	}
	for id := range integratedIDs {
		if seen[id] != 1 {
			t.Errorf("the mainline holds change %s %d times, want once", id, seen[id])
		}
	}
	if len(chain) != len(integratedIDs) {
		t.Errorf("the mainline has %d revisions after the import, want %d: one for each integrated change", len(chain), len(integratedIDs))
	}

	var events []auditEvent
	eventually(t, "the audit log to hold the outcome of every change", func() (bool, string) {
		events = g2.audit(t)
		var got []string
		done := true
		for _, s := range subs {
			n, r := countEvents(events, "change.integrated", "change/"+s.id), countEvents(events, "change.rejected", "change/"+s.id)
			got = append(got, fmt.Sprintf("%s: %d integrated, %d rejected", s.id, n, r))
			done = done && n+r > 0
		}
		return done, strings.Join(got, "; ")
	})
	for _, s := range subs {
		want := [2]int{1, 0}
		if !integratedIDs[s.id] {
			want = [2]int{0, 1}
		}
		if got := [2]int{countEvents(events, "change.integrated", "change/"+s.id), countEvents(events, "change.rejected", "change/"+s.id)}; got != want {
			t.Errorf("change %s: %d change.integrated and %d change.rejected events, want %d and %d", s.id, got[0], got[1], want[0], want[1])
		}
	}
	out, errOut, code := runAG(t, g2.admin("audit", "verify", "--key", auditKey+".pub", "--state", filepath.Join(t.TempDir(), "audit-state.json"), "--json")...)
	var verified struct {
		Verified bool   `json:"verified"`
		Events   uint64 `json:"events"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &verified) != nil || !verified.Verified || verified.Events < uint64(len(events)) {
		t.Errorf("ag audit verify: exit %d\nstdout:\n%s\nstderr:\n%s\nwant verified, with at least the %d events read", code, out, errOut, len(events))
	}
}
