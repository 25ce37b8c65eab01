package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

// The tests of ClaimJobs and CompleteJobs, the batch forms of ClaimJob and CompleteJob: each
// asserts that a batch answers, and leaves in the store, what the single calls would.

// claimJobs calls ClaimJobs and fails the test on an error, or on a nil answer: the contract
// answers an empty slice when nothing is claimable (where ClaimJob answers nil).
func (b *bundle) claimJobs(t *testing.T, worker string, lease time.Duration, n int, kinds ...string) []store.Job {
	t.Helper()
	jobs, err := b.st.ClaimJobs(b.ctx, store.ClaimJobParams{Holder: worker, Kinds: kinds, Lease: lease, Max: n})
	if err != nil {
		t.Fatalf("ClaimJobs(%s, max %d, kinds %v): %v", worker, n, kinds, err)
	}
	if jobs == nil {
		t.Fatalf("ClaimJobs(%s, max %d, kinds %v) = nil, want a slice (an empty one when nothing is claimable)", worker, n, kinds)
	}
	return jobs
}

// completeJobs calls CompleteJobs and fails the test on an error for the batch, or unless it
// answers one outcome per completion.
func (b *bundle) completeJobs(t *testing.T, ps []store.CompleteJobParams) []store.CompleteJobOutcome {
	t.Helper()
	outs, err := b.st.CompleteJobs(b.ctx, ps)
	if err != nil {
		t.Fatalf("CompleteJobs(%d completions): %v", len(ps), err)
	}
	if len(outs) != len(ps) {
		t.Fatalf("CompleteJobs(%d completions) answered %d outcomes, want one per completion", len(ps), len(outs))
	}
	return outs
}

// claimedBy answers job as a claim by worker at now leaves it: CLAIMED, the next claim number,
// the worker, the lease from now, and no progress (a new claim starts without one).
func claimedBy(job store.Job, worker string, lease time.Duration, now time.Time) store.Job {
	job.State = store.JobClaimed
	job.ClaimNumber++
	job.Holder = worker
	job.Lease = lease
	job.LeaseExpiresAt = now.Add(lease)
	job.UpdatedAt = now
	job.Progress = ""
	return job
}

// describeJobs names jobs with what orders claims, for failure messages.
func describeJobs(jobs []store.Job) string {
	if len(jobs) == 0 {
		return "no job"
	}
	parts := make([]string, len(jobs))
	for i, j := range jobs {
		parts[i] = fmt.Sprintf("%s (%s, priority %d, run_after %s, attempts %d)", j.ID, j.Kind, j.Priority,
			j.RunAfter.UTC().Format(time.RFC3339Nano), j.ClaimNumber)
	}
	return strings.Join(parts, ", ")
}

// wantJobIDs fails the test unless got are the jobs of want, in this order.
func wantJobIDs(t *testing.T, what string, got []store.Job, want ...store.Job) {
	t.Helper()
	gi, wi := ids(got), ids(want)
	if len(gi) != len(wi) {
		t.Fatalf("%s answered %d jobs: %s;\nwant %d: %s", what, len(got), describeJobs(got), len(want), describeJobs(want))
	}
	for i := range gi {
		if gi[i] != wi[i] {
			t.Fatalf("%s answered, in this order: %s;\nwant: %s", what, describeJobs(got), describeJobs(want))
		}
	}
}

// testClaimJobsOrder: ClaimJobs takes the Max best jobs in claim order, each with its own first
// claim, answers them best first, and leaves the others queued.
func testClaimJobsOrder(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	// late: run_after T+5s, created first.
	late := b.enqueue(t, store.EnqueueJobParams{Priority: 1, Delay: 5 * time.Second, Payload: []byte(`{"n":1}`), EnqueuedBy: "alice"})
	b.clk.Advance(time.Second)
	// early1 and early2: run_after T+1s, created in this order.
	early1 := b.enqueue(t, store.EnqueueJobParams{Kind: "build", Priority: 1, MaxAttempts: 2})
	early2 := b.enqueue(t, store.EnqueueJobParams{Priority: 1, UniqueKey: "early2"})
	low := b.enqueue(t, store.EnqueueJobParams{Priority: -1})
	high := b.enqueue(t, store.EnqueueJobParams{Kind: "validate", Priority: 9, MaxAttempts: 3})
	mid := b.enqueue(t, store.EnqueueJobParams{Priority: 0})
	b.clk.Advance(10 * time.Second)
	now := b.clk.Now()

	got := b.claimJobs(t, "bob|w1", 45*time.Second, 4)
	wantJobIDs(t, "ClaimJobs(max 4)", got, high, early1, early2, late)
	for i, before := range []store.Job{high, early1, early2, late} {
		want := claimedBy(before, "bob|w1", 45*time.Second, now)
		assertJob(t, fmt.Sprintf("job %d of ClaimJobs(max 4)", i+1), got[i], want)
		assertJob(t, fmt.Sprintf("GetJob of job %d of ClaimJobs(max 4)", i+1), b.get(t, before.ID), want)
	}
	b.unchanged(t, mid, "ClaimJobs(max 4), which did not take it")
	b.unchanged(t, low, "ClaimJobs(max 4), which did not take it")

	// The claims are live: the next claimers get the rest, in the same order, one by one or
	// together.
	b.clk.Advance(time.Second)
	if got := b.mustClaim(t, "bob|w2", time.Minute); got.ID != mid.ID {
		t.Fatalf("ClaimJob after ClaimJobs(max 4) took %s, want %s", describeJobs([]store.Job{got}), describeJobs([]store.Job{mid}))
	}
	now = b.clk.Now()
	got = b.claimJobs(t, "bob|w3", 20*time.Second, 3)
	wantJobIDs(t, "ClaimJobs(max 3) of what is left", got, low)
	assertJob(t, "ClaimJobs(max 3) of what is left", got[0], claimedBy(low, "bob|w3", 20*time.Second, now))
	wantJobIDs(t, "ClaimJobs(max 3) once every job is claimed", b.claimJobs(t, "bob|w3", time.Minute, 3))
	b.noClaim(t, "bob|w4")
}

// testClaimJobsLimits: Max 0 claims one; a Max larger than what is claimable answers what is;
// nothing claimable answers an empty slice; kinds and delays hold as for ClaimJob.
func testClaimJobsLimits(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	wantJobIDs(t, "ClaimJobs(max 5) of an empty store", b.claimJobs(t, "p|w1", time.Minute, 5))

	a := b.enqueue(t, store.EnqueueJobParams{Priority: 2})
	c := b.enqueue(t, store.EnqueueJobParams{Priority: 1})
	d := b.enqueue(t, store.EnqueueJobParams{Priority: 0})
	delayed := b.enqueue(t, store.EnqueueJobParams{Priority: 5, Delay: time.Minute})
	now := b.clk.Now()

	got := b.claimJobs(t, "p|w1", time.Hour, 0)
	wantJobIDs(t, "ClaimJobs(max 0)", got, a)
	assertJob(t, "ClaimJobs(max 0)", got[0], claimedBy(a, "p|w1", time.Hour, now))
	got = b.claimJobs(t, "p|w1", time.Hour, 1)
	wantJobIDs(t, "ClaimJobs(max 1)", got, c)
	assertJob(t, "ClaimJobs(max 1)", got[0], claimedBy(c, "p|w1", time.Hour, now))

	// The delayed job is the best by priority, but not claimable yet.
	got = b.claimJobs(t, "p|w2", time.Hour, 10)
	wantJobIDs(t, "ClaimJobs(max 10) with one job claimable", got, d)
	assertJob(t, "ClaimJobs(max 10) with one job claimable", got[0], claimedBy(d, "p|w2", time.Hour, now))
	wantJobIDs(t, "ClaimJobs(max 10) with nothing claimable", b.claimJobs(t, "p|w2", time.Hour, 10))
	b.unchanged(t, delayed, "ClaimJobs before its run_after")

	b.clk.Advance(time.Minute - time.Microsecond)
	wantJobIDs(t, "ClaimJobs(max 10) a microsecond before run_after", b.claimJobs(t, "p|w2", time.Hour, 10))
	b.unchanged(t, delayed, "ClaimJobs a microsecond before its run_after")
	b.clk.Advance(time.Microsecond) // run_after <= now
	now = b.clk.Now()
	got = b.claimJobs(t, "p|w2", time.Minute, 10)
	wantJobIDs(t, "ClaimJobs(max 10) at run_after", got, delayed)
	assertJob(t, "ClaimJobs(max 10) at run_after", got[0], claimedBy(delayed, "p|w2", time.Minute, now))

	// Kinds.
	build := b.enqueue(t, store.EnqueueJobParams{Kind: "build", Priority: 1})
	validate := b.enqueue(t, store.EnqueueJobParams{Kind: store.KindValidate, Priority: 3})
	deploy := b.enqueue(t, store.EnqueueJobParams{Kind: "deploy", Priority: 2})
	build2 := b.enqueue(t, store.EnqueueJobParams{Kind: "build", Priority: 0})
	wantJobIDs(t, "ClaimJobs of kind nothing", b.claimJobs(t, "p|w3", time.Hour, 5, "nothing"))
	wantJobIDs(t, "ClaimJobs(max 5) of kind build", b.claimJobs(t, "p|w3", time.Hour, 5, "build"), build, build2)
	wantJobIDs(t, "ClaimJobs(max 5) of kind build again", b.claimJobs(t, "p|w3", time.Hour, 5, "build"))
	b.unchanged(t, validate, "ClaimJobs of another kind")
	b.unchanged(t, deploy, "ClaimJobs of another kind")
	wantJobIDs(t, "ClaimJobs(max 5) of kinds deploy, validate", b.claimJobs(t, "p|w3", time.Hour, 5, "deploy", store.KindValidate),
		validate, deploy)
	wantJobIDs(t, "ClaimJobs(max 5) of any kind with everything claimed", b.claimJobs(t, "p|w3", time.Hour, 5))
}

// testClaimJobsExpiredClaims: expired claims and queued jobs share one claim order and an
// expired claim is claimed again with the next number; an expired claim that used its last
// attempt is settled FAILED, and a cancel-requested one CANCELLED, instead of being claimed.
func testClaimJobsExpiredClaims(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	// Created in this order; at the start only hi, g, mid and c may run, and g is of another kind.
	a := b.enqueue(t, store.EnqueueJobParams{Priority: 0, Delay: 10 * time.Second})
	c := b.enqueue(t, store.EnqueueJobParams{Priority: 0})
	hi := b.enqueue(t, store.EnqueueJobParams{Priority: 5})
	g := b.enqueue(t, store.EnqueueJobParams{Kind: "other", Priority: 4})
	mid := b.enqueue(t, store.EnqueueJobParams{Priority: 4})
	first := b.claimJobs(t, "p|w1", 5*time.Second, 3, "test")
	wantJobIDs(t, "the first ClaimJobs(max 3, kind test)", first, hi, mid, c)
	e := b.enqueue(t, store.EnqueueJobParams{Priority: 4})
	b.clk.Advance(20 * time.Second)
	now := b.clk.Now()
	before := map[string]store.Job{}
	for _, j := range []store.Job{hi, g, mid, e, c, a} {
		before[j.ID] = b.get(t, j.ID)
	}

	got := b.claimJobs(t, "p|w2", time.Minute, 10)
	wantJobIDs(t, "ClaimJobs(max 10) of expired claims and queued jobs", got, hi, g, mid, e, c, a)
	for i, j := range got {
		want := claimedBy(before[j.ID], "p|w2", time.Minute, now)
		assertJob(t, fmt.Sprintf("job %d of ClaimJobs(max 10)", i+1), j, want)
		assertJob(t, fmt.Sprintf("GetJob of job %d of ClaimJobs(max 10)", i+1), b.get(t, j.ID), want)
	}
	for _, j := range []store.Job{hi, mid, c} {
		if got := b.get(t, j.ID); got.ClaimNumber != 2 {
			t.Fatalf("expired claim %s claimed again: attempts %d, want 2", j.ID, got.ClaimNumber)
		}
	}
	wantJobIDs(t, "ClaimJobs(max 10) with every claim live", b.claimJobs(t, "p|w2", time.Minute, 10))
}

// testClaimJobsSettlesExpiredClaims: ClaimJobs settles, as ClaimJob does, the expired claims
// that cannot be claimed again, and claims the others.
func testClaimJobsSettlesExpiredClaims(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	spent := b.enqueue(t, store.EnqueueJobParams{Priority: 9, MaxAttempts: 1})
	last := b.enqueue(t, store.EnqueueJobParams{Priority: 8, MaxAttempts: 2})
	stopped := b.enqueue(t, store.EnqueueJobParams{Priority: 7, MaxAttempts: 5})
	wantJobIDs(t, "the first ClaimJobs(max 3)", b.claimJobs(t, "p|w1", 30*time.Second, 3), spent, last, stopped)
	if j, err := b.st.CancelJob(b.ctx, stopped.ID); err != nil || !j.CancelRequested {
		t.Fatalf("CancelJob(%s) = cancel_requested %v, %v; want true", stopped.ID, j.CancelRequested, err)
	}
	queued := b.enqueue(t, store.EnqueueJobParams{Priority: 0, MaxAttempts: 5})
	b.clk.Advance(time.Minute)
	now := b.clk.Now()
	beforeSpent, beforeLast, beforeStopped := b.get(t, spent.ID), b.get(t, last.ID), b.get(t, stopped.ID)

	got := b.claimJobs(t, "p|w2", time.Minute, 10)
	wantJobIDs(t, "ClaimJobs(max 10) after the claims expired", got, last, queued)
	assertJob(t, "the expired claim with an attempt left", got[0], claimedBy(beforeLast, "p|w2", time.Minute, now))
	assertJob(t, "the queued job", got[1], claimedBy(queued, "p|w2", time.Minute, now))

	want := beforeSpent
	want.State = store.JobFailed
	want.LastError = store.LeaseExpiredError
	want.LeaseExpiresAt = time.Time{}
	want.FinishedAt = now
	want.UpdatedAt = now
	assertJob(t, "an expired claim that used its last attempt, after ClaimJobs", b.get(t, spent.ID), want)

	want = beforeStopped
	want.State = store.JobCancelled
	want.LeaseExpiresAt = time.Time{}
	want.FinishedAt = now
	want.UpdatedAt = now
	gotStopped := b.get(t, stopped.ID)
	want.LastError = gotStopped.LastError // what a cancelled job's last_error says is the backend's to choose
	assertJob(t, "an expired cancel-requested claim, after ClaimJobs", gotStopped, want)

	// The second claim of last is its last attempt: when it expires, the next ClaimJobs fails
	// the job and claims the queued job's expired claim again.
	beforeLast, beforeQueued := b.get(t, last.ID), b.get(t, queued.ID)
	b.clk.Advance(2 * time.Minute)
	now = b.clk.Now()
	got = b.claimJobs(t, "p|w3", time.Minute, 10)
	wantJobIDs(t, "ClaimJobs(max 10) after the last attempt expired", got, queued)
	assertJob(t, "the queued job's expired claim", got[0], claimedBy(beforeQueued, "p|w3", time.Minute, now))
	want = beforeLast
	want.State = store.JobFailed
	want.LastError = store.LeaseExpiredError
	want.LeaseExpiresAt = time.Time{}
	want.FinishedAt = now
	want.UpdatedAt = now
	assertJob(t, "a job whose last attempt expired, after ClaimJobs", b.get(t, last.ID), want)
	if n, err := b.st.ExpireJobs(b.ctx); err != nil || n != 0 {
		t.Fatalf("ExpireJobs after ClaimJobs settled every expired claim = %d, %v; want 0", n, err)
	}
}

// testClaimJobsAsClaimJobCalls drives two stores through the same story, with expiring claims,
// cancellations, delays and kinds: one claims with ClaimJobs(max n), the other with n calls of
// ClaimJob in a row (until one answers nil). Both must answer the same jobs, in the same order,
// with the same fields, and leave every job the same.
func testClaimJobsAsClaimJobCalls(t *testing.T, newStore Factory) {
	batch, single := setup(t, newStore), setup(t, newStore)
	both := [2]*bundle{batch, single}
	var (
		jobs  [2][]store.Job
		index = [2]map[string]int{{}, {}}
	)
	enqueue := func(p store.EnqueueJobParams) {
		for s, b := range both {
			j := b.enqueue(t, p)
			index[s][j.ID] = len(jobs[s])
			jobs[s] = append(jobs[s], j)
		}
	}
	advance := func(d time.Duration) {
		for _, b := range both {
			b.clk.Advance(d)
		}
	}
	// same fails the test unless a job of the batch store is the same as a job of the other, but
	// for its id: the same enqueue made them.
	same := func(what string, got, want store.Job) {
		t.Helper()
		if index[0][got.ID] != index[1][want.ID] {
			t.Fatalf("%s: ClaimJobs took job #%d (%s), ClaimJob took job #%d (%s)", what,
				index[0][got.ID], describeJobs([]store.Job{got}), index[1][want.ID], describeJobs([]store.Job{want}))
		}
		want.ID = got.ID
		assertJob(t, what+" (ClaimJobs, against ClaimJob)", got, want)
	}

	rng := rand.New(rand.NewPCG(2026, 10))
	kinds := []string{"build", "test", "deploy"}
	addJobs := func(n int) {
		for range n {
			p := store.EnqueueJobParams{
				Kind:        kinds[rng.IntN(len(kinds))],
				Priority:    int32(rng.IntN(4)),
				MaxAttempts: uint32(1 + rng.IntN(3)),
			}
			if rng.IntN(3) == 0 {
				p.Delay = time.Duration(1+rng.IntN(30)) * time.Second
			}
			enqueue(p)
		}
	}
	addJobs(40)

	var claimed, reclaimed, multi int
	for r := range 40 {
		worker := fmt.Sprintf("p|w%d", r%3)
		lease := time.Duration(5+rng.IntN(20)) * time.Second
		n := rng.IntN(7) // 0 claims one
		var ks []string
		switch rng.IntN(3) {
		case 1:
			ks = []string{kinds[rng.IntN(len(kinds))]}
		case 2:
			ks = []string{kinds[0], kinds[rng.IntN(len(kinds)-1)+1]}
		}
		what := fmt.Sprintf("round %d: %s, max %d, kinds %v", r, worker, n, ks)

		got := batch.claimJobs(t, worker, lease, n, ks...)
		var want []store.Job
		for range max(n, 1) {
			j := single.claim(t, worker, lease, ks...)
			if j == nil {
				break
			}
			want = append(want, *j)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: ClaimJobs answered %d jobs (%s), %d calls of ClaimJob %d (%s)", what, len(got), describeJobs(got),
				max(n, 1), len(want), describeJobs(want))
		}
		for i := range got {
			same(fmt.Sprintf("%s: job %d", what, i+1), got[i], want[i])
			if got[i].ClaimNumber > 1 {
				reclaimed++
			}
		}
		claimed += len(got)
		if len(got) > 1 {
			multi++
		}
		for i := range jobs[0] {
			same(fmt.Sprintf("%s: GetJob of job #%d", what, i), batch.get(t, jobs[0][i].ID), single.get(t, jobs[1][i].ID))
		}

		// Between rounds: time passes, a job is sometimes cancelled, new jobs come.
		if rng.IntN(4) == 0 {
			k := rng.IntN(len(jobs[0]))
			_, errBatch := batch.st.CancelJob(batch.ctx, jobs[0][k].ID)
			_, errSingle := single.st.CancelJob(single.ctx, jobs[1][k].ID)
			if (errBatch == nil) != (errSingle == nil) || (errBatch != nil && !errors.Is(errBatch, store.ErrFailedPrecondition)) {
				t.Fatalf("%s: CancelJob of job #%d = %v on the ClaimJobs store, %v on the ClaimJob store", what, k, errBatch, errSingle)
			}
		}
		if rng.IntN(5) == 0 {
			addJobs(1 + rng.IntN(5))
		}
		advance(time.Duration(rng.IntN(9)) * time.Second)
	}
	counts, err := batch.st.CountJobs(batch.ctx)
	if err != nil {
		t.Fatalf("CountJobs: %v", err)
	}
	t.Logf("%d jobs claimed, %d of them expired claims claimed again, %d answers of more than one job; jobs by state: %v",
		claimed, reclaimed, multi, counts)
}

// testConcurrentClaimJobs: 8 claimers take up to 7 jobs at a time and complete what they got
// with CompleteJobs. The clock stands still, so no lease expires: every job must be handed out
// once, to one claimer, and completed once.
func testConcurrentClaimJobs(t *testing.T, newStore Factory) {
	const (
		jobs    = 300
		workers = 8
		batch   = 7
	)
	b := setup(t, newStore)
	order := make(map[string]int, jobs) // job -> its place in the enqueue order
	priority := make(map[string]int32, jobs)
	for i := range jobs {
		j := b.enqueue(t, store.EnqueueJobParams{Kind: "build", Priority: int32(i % 4)})
		order[j.ID], priority[j.ID] = i, j.Priority
	}
	// better reports whether x comes before y in claim order: every job has the same run_after.
	better := func(x, y string) bool {
		if priority[x] != priority[y] {
			return priority[x] > priority[y]
		}
		return order[x] < order[y]
	}

	var (
		mu        sync.Mutex
		claims    = map[string][]string{} // job -> the workers it was answered to, with the claim number
		completed = map[string]int{}
		wg        sync.WaitGroup
	)
	for w := range workers {
		worker := fmt.Sprintf("p|w%d", w)
		wg.Go(func() {
			for !t.Failed() {
				got, err := b.st.ClaimJobs(b.ctx, store.ClaimJobParams{Holder: worker, Kinds: []string{"build"}, Lease: time.Minute, Max: batch})
				if err != nil {
					t.Errorf("ClaimJobs(%s): %v", worker, err)
					return
				}
				if len(got) == 0 {
					// The clock stands still: what is not queued now is held by a live claim.
					return
				}
				if len(got) > batch {
					t.Errorf("ClaimJobs(%s, max %d) answered %d jobs", worker, batch, len(got))
					return
				}
				ps := make([]store.CompleteJobParams, len(got))
				mu.Lock()
				for i, j := range got {
					claims[j.ID] = append(claims[j.ID], fmt.Sprintf("%s#%d", worker, j.ClaimNumber))
					if j.State != store.JobClaimed || j.ClaimNumber != 1 || j.Holder != worker {
						t.Errorf("ClaimJobs(%s) answered %s: %s, attempts %d, by %s; want a first claim by %s",
							worker, j.ID, j.State, j.ClaimNumber, j.Holder, worker)
					}
					if i > 0 && !better(got[i-1].ID, j.ID) {
						t.Errorf("ClaimJobs(%s) answered %s before %s, not best first", worker,
							describeJobs(got[i-1:i]), describeJobs(got[i:i+1]))
					}
					ps[i] = store.CompleteJobParams{JobID: j.ID, Holder: worker, ClaimNumber: j.ClaimNumber,
						Result: fmt.Appendf(nil, `{"by":%q}`, worker), Output: "ok"}
				}
				mu.Unlock()

				outs, err := b.st.CompleteJobs(b.ctx, ps)
				if err != nil {
					t.Errorf("CompleteJobs(%s, %d jobs): %v", worker, len(ps), err)
					return
				}
				if len(outs) != len(ps) {
					t.Errorf("CompleteJobs(%s, %d jobs) answered %d outcomes", worker, len(ps), len(outs))
					return
				}
				mu.Lock()
				for i, o := range outs {
					switch {
					case o.Err != nil:
						t.Errorf("CompleteJobs(%s): completion %d (%s): %v", worker, i, ps[i].JobID, o.Err)
					case o.Job.ID != ps[i].JobID || o.Job.State != store.JobCompleted || o.Job.ClaimNumber != 1 ||
						!jsonEqual(o.Job.Result, ps[i].Result):
						t.Errorf("CompleteJobs(%s): outcome %d is job %s, %s, attempts %d, result %s; want %s completed by claim 1 with %s",
							worker, i, o.Job.ID, o.Job.State, o.Job.ClaimNumber, o.Job.Result, ps[i].JobID, ps[i].Result)
					default:
						completed[o.Job.ID]++
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	wantEachJobClaimedAndCompletedOnce(t, b, func(id string) bool { _, ok := order[id]; return ok }, claims, completed, jobs)
	for id := range order {
		if j := b.get(t, id); j.State != store.JobCompleted || fmt.Sprintf("%s#%d", j.Holder, j.ClaimNumber) != claims[id][0] {
			t.Fatalf("job %s is %s by %s#%d; want completed by its one claim %s", id, j.State, j.Holder, j.ClaimNumber, claims[id][0])
		}
	}
}

// testCompleteJobsMixed: one CompleteJobs of completions that CompleteJob would accept and
// refuse answers each one's outcome in the order given, applies the accepted ones and changes
// nothing for the others; the same batch again is refused throughout.
func testCompleteJobsMixed(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	const worker = "p|w1"
	// stale: claimed twice by the same worker name, so its claim 1 is stale.
	stale := b.enqueue(t, store.EnqueueJobParams{Kind: "build", Priority: 9, MaxAttempts: 5})
	b.mustClaim(t, worker, 30*time.Second)
	b.clk.Advance(time.Minute)
	if got := b.mustClaim(t, worker, time.Hour); got.ID != stale.ID || got.ClaimNumber != 2 {
		t.Fatalf("second claim: %s attempts %d, want %s attempts 2", got.ID, got.ClaimNumber, stale.ID)
	}
	current := b.enqueue(t, store.EnqueueJobParams{Kind: "build", Priority: 4, Payload: []byte(`{"tree":"t1"}`)})
	unattested := b.enqueue(t, store.EnqueueJobParams{Kind: store.KindValidate, Priority: 3})
	attested := b.enqueue(t, store.EnqueueJobParams{Kind: store.KindValidate, Priority: 2})
	others := b.enqueue(t, store.EnqueueJobParams{Kind: "build", Priority: 1})
	queued := b.enqueue(t, store.EnqueueJobParams{Kind: "build", Delay: time.Hour})
	for _, want := range []store.Job{current, unattested, attested} {
		if got := b.mustClaim(t, worker, time.Hour); got.ID != want.ID {
			t.Fatalf("claim by %s took %s, want %s", worker, got.ID, want.ID)
		}
	}
	if got := b.mustClaim(t, "p|w2", time.Hour); got.ID != others.ID {
		t.Fatalf("claim by p|w2 took %s, want %s", got.ID, others.ID)
	}
	b.clk.Advance(time.Second)
	now := b.clk.Now()
	before := map[string]store.Job{}
	for _, j := range []store.Job{stale, current, unattested, attested, others, queued} {
		before[j.ID] = b.get(t, j.ID)
	}

	unknown := store.NewID("job")
	staleAtt := attestation(stale.ID, "stale")
	unknownAtt := attestation(unknown, "unknown")
	othersAtt := attestation(others.ID, "not mine")
	att := attestation(attested.ID, "passed")
	ps := []store.CompleteJobParams{
		{JobID: stale.ID, Holder: worker, ClaimNumber: 1, Result: []byte(`{"passed":true}`), Output: "stale", Attestation: staleAtt},
		{JobID: current.ID, Holder: worker, ClaimNumber: 1, Result: []byte(`{"passed":true,"exit_code":0}`),
			Output: "ok  \tgithub.com/x/y\t0.1s\n", OutputDigest: "sha256:" + strings.Repeat("ab", 32)},
		{JobID: unknown, Holder: worker, ClaimNumber: 1, Attestation: unknownAtt},
		{JobID: unattested.ID, Holder: worker, ClaimNumber: 1, Result: []byte(`{"passed":true}`), Output: "unattested"},
		{JobID: attested.ID, Holder: worker, ClaimNumber: 1, Result: []byte(`{"passed":true}`), Output: "attested",
			OutputDigest: "sha256:" + strings.Repeat("cd", 32), Attestation: att},
		{JobID: others.ID, Holder: worker, ClaimNumber: 1, Output: "not mine", Attestation: othersAtt},
		{JobID: queued.ID, Holder: worker, Output: "not claimed"},
	}
	outs := b.completeJobs(t, ps)

	// In the order of ps.
	wantLostClaim(t, "outcome 0 (a stale claim number)", outs[0].Err, worker, 1, before[stale.ID])
	wantDone := func(i int, what string) store.Job {
		t.Helper()
		p := ps[i]
		if outs[i].Err != nil {
			t.Fatalf("outcome %d (%s): %v", i, what, outs[i].Err)
		}
		want := before[p.JobID]
		want.State = store.JobCompleted
		want.Result = p.Result
		want.Output = p.Output
		want.OutputDigest = p.OutputDigest
		if p.Attestation != nil {
			want.AttestationDigest = p.Attestation.Digest
		}
		want.LeaseExpiresAt = time.Time{}
		want.FinishedAt = now
		want.UpdatedAt = now
		assertJob(t, fmt.Sprintf("outcome %d (%s)", i, what), outs[i].Job, want)
		assertJob(t, fmt.Sprintf("GetJob after outcome %d (%s)", i, what), b.get(t, p.JobID), want)
		return want
	}
	doneCurrent := wantDone(1, "the current claim")
	wantErr(t, "outcome 2 (an unknown job)", outs[2].Err, store.ErrNotFound)
	wantErr(t, "outcome 3 (a validate job without an attestation)", outs[3].Err, store.ErrAttestationRequired)
	doneAttested := wantDone(4, "a validate job with an attestation")
	wantLostClaim(t, "outcome 5 (another worker's claim)", outs[5].Err, worker, 1, before[others.ID])
	wantLostClaim(t, "outcome 6 (a queued job)", outs[6].Err, worker, 0, before[queued.ID])
	for _, i := range []int{0, 3, 5, 6} {
		b.unchanged(t, before[ps[i].JobID], fmt.Sprintf("completion %d of CompleteJobs, which was refused", i))
	}
	if _, err := b.st.GetJob(b.ctx, unknown); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetJob of the unknown job after CompleteJobs: err = %v, want %v", err, store.ErrNotFound)
	}

	got, err := b.st.GetAttestation(b.ctx, att.Digest)
	if err != nil {
		t.Fatalf("GetAttestation of the accepted completion's envelope: %v", err)
	}
	if got.Digest != att.Digest || string(got.Envelope) != string(att.Envelope) || got.JobID != attested.ID || !got.CreatedAt.Equal(now) {
		t.Fatalf("GetAttestation = %+v, want digest %s, envelope %s, job %s, created %s", got, att.Digest, att.Envelope, attested.ID, now)
	}
	for _, refused := range []*store.Attestation{staleAtt, unknownAtt, othersAtt} {
		_, err := b.st.GetAttestation(b.ctx, refused.Digest)
		wantErr(t, "GetAttestation of a refused completion's envelope (job "+refused.JobID+")", err, store.ErrNotFound)
	}

	// The same batch again: the completed jobs are no longer claimed, and the rest are refused
	// as before; nothing changes.
	b.clk.Advance(time.Second)
	after := map[string]store.Job{}
	for _, j := range []store.Job{stale, current, unattested, attested, others, queued} {
		after[j.ID] = b.get(t, j.ID)
	}
	outs = b.completeJobs(t, ps)
	wantLostClaim(t, "again: outcome 0 (a stale claim number)", outs[0].Err, worker, 1, after[stale.ID])
	wantLostClaim(t, "again: outcome 1 (a completed job)", outs[1].Err, worker, 1, doneCurrent)
	wantErr(t, "again: outcome 2 (an unknown job)", outs[2].Err, store.ErrNotFound)
	wantErr(t, "again: outcome 3 (a validate job without an attestation)", outs[3].Err, store.ErrAttestationRequired)
	wantLostClaim(t, "again: outcome 4 (a completed validate job)", outs[4].Err, worker, 1, doneAttested)
	wantLostClaim(t, "again: outcome 5 (another worker's claim)", outs[5].Err, worker, 1, after[others.ID])
	wantLostClaim(t, "again: outcome 6 (a queued job)", outs[6].Err, worker, 0, after[queued.ID])
	for _, j := range after {
		b.unchanged(t, j, "a second CompleteJobs of the same completions")
	}
	if got, err := b.st.GetAttestation(b.ctx, att.Digest); err != nil || !got.CreatedAt.Equal(now) {
		t.Fatalf("GetAttestation after the second CompleteJobs = created %s, %v; want the first one's, %s", got.CreatedAt, err, now)
	}
}

// testCompleteJobsEmpty: CompleteJobs of no completion answers no outcome.
func testCompleteJobsEmpty(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{})
	claimed := b.mustClaim(t, "p|w1", time.Minute)
	for _, ps := range [][]store.CompleteJobParams{{}, nil} {
		outs, err := b.st.CompleteJobs(b.ctx, ps)
		if err != nil || len(outs) != 0 {
			t.Fatalf("CompleteJobs(%#v) = %d outcomes, %v; want none", ps, len(outs), err)
		}
	}
	b.unchanged(t, claimed, "CompleteJobs of no completion")
	if claimed.ID != job.ID {
		t.Fatalf("claimed %s, want %s", claimed.ID, job.ID)
	}
}

// testConcurrentCompleteJobsWithStaleItems: CompleteJobs calls made at the same time, each
// with a completion for a job another worker holds, complete each worker's own jobs and refuse
// each foreign one as a lost claim, whichever calls the store runs together; every completed
// job has one job.completed event and a refused completion none.
func testConcurrentCompleteJobsWithStaleItems(t *testing.T, newStore Factory) {
	const (
		workers = 8
		each    = 12
	)
	b := setupAudit(t, newStore)
	for range workers * each {
		b.enqueue(t, store.EnqueueJobParams{Kind: "build"})
	}
	held := make([][]store.Job, workers)
	for w := range workers {
		held[w] = b.claimJobs(t, fmt.Sprintf("p|w%d", w), time.Hour, each, "build")
		if len(held[w]) != each {
			t.Fatalf("worker %d claimed %d jobs, want %d", w, len(held[w]), each)
		}
	}
	b.markLog(t)

	// Worker w completes its own jobs and, in the middle of them, the first job of worker
	// w+1 under its own name.
	batches := make([][]store.CompleteJobParams, workers)
	for w := range workers {
		worker := fmt.Sprintf("p|w%d", w)
		for i, j := range held[w] {
			if i == each/2 {
				foreign := held[(w+1)%workers][0]
				batches[w] = append(batches[w], store.CompleteJobParams{JobID: foreign.ID, Holder: worker, ClaimNumber: foreign.ClaimNumber, Output: "not mine"})
			}
			batches[w] = append(batches[w], store.CompleteJobParams{JobID: j.ID, Holder: worker, ClaimNumber: j.ClaimNumber, Output: worker})
		}
	}
	outs := make([][]store.CompleteJobOutcome, workers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			<-start
			var err error
			if outs[w], err = b.st.CompleteJobs(b.ctx, batches[w]); err != nil {
				t.Errorf("CompleteJobs of worker %d: %v", w, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}

	for w := range workers {
		if len(outs[w]) != len(batches[w]) {
			t.Fatalf("worker %d: %d outcomes for %d completions", w, len(outs[w]), len(batches[w]))
		}
		for i, p := range batches[w] {
			o := outs[w][i]
			if p.Output == "not mine" {
				var lost *store.LostClaimError
				if !errors.As(o.Err, &lost) {
					t.Errorf("worker %d, completion %d (job %s, held by another worker): err = %v, want a lost claim", w, i, p.JobID, o.Err)
				}
				continue
			}
			if o.Err != nil || o.Job.ID != p.JobID || o.Job.State != store.JobCompleted || o.Job.Output != p.Output {
				t.Errorf("worker %d, completion %d (job %s): %s %s output %q, %v; want it completed with output %q",
					w, i, p.JobID, o.Job.ID, o.Job.State, o.Job.Output, o.Err, p.Output)
			}
		}
	}
	for w := range workers {
		for _, j := range held[w] {
			if got := b.get(t, j.ID); got.State != store.JobCompleted || got.Output != j.Holder {
				t.Errorf("job %s of %s is %s with output %q, want completed by its claimer", j.ID, j.Holder, got.State, got.Output)
			}
		}
	}

	b.sealAll(t)
	events := map[string]int{}
	for _, e := range b.auditEvents(t, b.mark) {
		if e.Action != "job.completed" {
			t.Errorf("event %d is %s %s, want only job.completed events", e.Seq, e.Action, e.Subject)
		}
		events[e.Subject]++
	}
	if len(events) != workers*each {
		t.Errorf("job.completed events for %d jobs, want %d", len(events), workers*each)
	}
	for subject, n := range events {
		if n != 1 {
			t.Errorf("%s has %d job.completed events, want 1", subject, n)
		}
	}
	b.verifyLog(t)
}
