package storetest

import (
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

func testEnqueueAndGet(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	b.clk.Advance(3 * time.Second)
	now := b.clk.Now()

	p := store.EnqueueJobParams{
		Kind:        "validate",
		Payload:     []byte(`{"tree":"sha256:ab12","command":["go","test","./..."],"n":3}`),
		Priority:    7,
		MaxAttempts: 4,
		Delay:       90 * time.Second,
		EnqueuedBy:  "alice",
	}
	job, existing, err := b.st.EnqueueJob(b.ctx, p)
	if err != nil {
		t.Fatalf("EnqueueJob: %v", err)
	}
	if existing {
		t.Fatalf("EnqueueJob: existing = true for the first job")
	}
	if job.ID == "" {
		t.Fatalf("EnqueueJob: empty job id")
	}
	want := store.Job{
		ID:          job.ID,
		Kind:        "validate",
		State:       store.JobQueued,
		Payload:     p.Payload,
		Priority:    7,
		MaxAttempts: 4,
		RunAfter:    now.Add(90 * time.Second),
		CreatedAt:   now,
		UpdatedAt:   now,
		EnqueuedBy:  "alice",
	}
	assertJob(t, "EnqueueJob", job, want)
	assertJob(t, "GetJob after EnqueueJob", b.get(t, job.ID), want)

	other := b.enqueue(t, store.EnqueueJobParams{Kind: "build"})
	if other.ID == job.ID {
		t.Fatalf("two jobs got the same id %s", job.ID)
	}
}

func testEnqueueWithoutPayload(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	now := b.clk.Now()
	job := b.enqueue(t, store.EnqueueJobParams{Kind: "build", Priority: -3, MaxAttempts: 1})
	want := store.Job{
		ID: job.ID, Kind: "build", State: store.JobQueued, Priority: -3, MaxAttempts: 1,
		RunAfter: now, CreatedAt: now, UpdatedAt: now,
	}
	assertJob(t, "EnqueueJob without payload", job, want)
	assertJob(t, "GetJob", b.get(t, job.ID), want)
	// Without a delay the job is claimable at once.
	if got := b.mustClaim(t, "p|w1", time.Minute); got.ID != job.ID {
		t.Fatalf("claimed %s, want %s", got.ID, job.ID)
	}
}

func testGetJobUnknown(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	b.enqueue(t, store.EnqueueJobParams{})
	_, err := b.st.GetJob(b.ctx, store.NewID("job"))
	wantErr(t, "GetJob(unknown)", err, store.ErrNotFound)
	_, err = b.st.GetJob(b.ctx, "")
	wantErr(t, "GetJob(\"\")", err, store.ErrNotFound)
}

func testUniqueKey(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	p := store.EnqueueJobParams{Kind: "build", MaxAttempts: 3, UniqueKey: "change-1"}
	first := b.enqueue(t, p)
	if first.UniqueKey != "change-1" {
		t.Fatalf("UniqueKey = %q, want change-1", first.UniqueKey)
	}

	again := func(what string, wantID string, wantExisting bool) store.Job {
		t.Helper()
		b.clk.Advance(time.Second)
		job, existing, err := b.st.EnqueueJob(b.ctx, p)
		if err != nil {
			t.Fatalf("%s: EnqueueJob: %v", what, err)
		}
		if existing != wantExisting {
			t.Fatalf("%s: existing = %v, want %v", what, existing, wantExisting)
		}
		if wantID != "" && job.ID != wantID {
			t.Fatalf("%s: job %s, want %s", what, job.ID, wantID)
		}
		return job
	}

	// Queued: the first job is the answer, unchanged.
	got := again("while queued", first.ID, true)
	assertJob(t, "the existing job", got, first)

	// Another key is another job.
	other, existing, err := b.st.EnqueueJob(b.ctx, store.EnqueueJobParams{Kind: "build", MaxAttempts: 3, UniqueKey: "change-2"})
	if err != nil || existing || other.ID == first.ID {
		t.Fatalf("EnqueueJob(other key) = %s, existing %v, %v; want a new job", other.ID, existing, err)
	}

	// Claimed: still the first job, as it is now.
	claimed := b.mustClaim(t, "p|w1", time.Minute, "build")
	if claimed.ID != first.ID {
		t.Fatalf("claimed %s, want %s", claimed.ID, first.ID)
	}
	got = again("while claimed", first.ID, true)
	assertJob(t, "the existing claimed job", got, claimed)

	// Finished: the key is free again.
	if _, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: first.ID, Holder: "p|w1", ClaimNumber: claimed.ClaimNumber}); err != nil {
		t.Fatalf("CompleteJob: %v", err)
	}
	second := again("after completion", "", false)
	if second.ID == first.ID || second.State != store.JobQueued || second.UniqueKey != "change-1" {
		t.Fatalf("after completion: job %s (%s, key %q), want a new queued job with key change-1", second.ID, second.State, second.UniqueKey)
	}
	again("while the new job is queued", second.ID, true)

	// Cancelled also frees it.
	if _, err := b.st.CancelJob(b.ctx, second.ID); err != nil {
		t.Fatalf("CancelJob: %v", err)
	}
	third := again("after cancellation", "", false)
	if third.ID == first.ID || third.ID == second.ID {
		t.Fatalf("after cancellation: job %s, want a new job", third.ID)
	}
	if first := b.get(t, first.ID); first.State != store.JobCompleted {
		t.Fatalf("the first job is %s, want completed", first.State)
	}
}

func testClaimFields(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{Kind: "build", Payload: []byte(`{"a":1}`), Priority: 2, MaxAttempts: 3, EnqueuedBy: "alice"})
	b.clk.Advance(5 * time.Second)
	now := b.clk.Now()

	claimed := b.mustClaim(t, "bob|w1", 45*time.Second)
	want := job
	want.State = store.JobClaimed
	want.ClaimNumber = 1
	want.Holder = "bob|w1"
	want.Lease = 45 * time.Second
	want.LeaseExpiresAt = now.Add(45 * time.Second)
	want.UpdatedAt = now
	assertJob(t, "ClaimJob", claimed, want)
	assertJob(t, "GetJob after ClaimJob", b.get(t, job.ID), want)
	b.noClaim(t, "bob|w2")
}

func testClaimOrder(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	// late: run_after T+5s, created first.
	late := b.enqueue(t, store.EnqueueJobParams{Priority: 1, Delay: 5 * time.Second})
	b.clk.Advance(time.Second)
	// early1 and early2: run_after T+1s, created in this order.
	early1 := b.enqueue(t, store.EnqueueJobParams{Priority: 1})
	early2 := b.enqueue(t, store.EnqueueJobParams{Priority: 1})
	low := b.enqueue(t, store.EnqueueJobParams{Priority: -1})
	high := b.enqueue(t, store.EnqueueJobParams{Priority: 9})
	mid := b.enqueue(t, store.EnqueueJobParams{Priority: 0})
	b.clk.Advance(10 * time.Second)

	want := []store.Job{high, early1, early2, late, mid, low}
	for i, w := range want {
		got := b.mustClaim(t, "p|w1", time.Minute)
		if got.ID != w.ID {
			t.Fatalf("claim %d: job %s (priority %d, run_after %s), want %s (priority %d, run_after %s)",
				i+1, got.ID, got.Priority, got.RunAfter, w.ID, w.Priority, w.RunAfter)
		}
	}
	b.noClaim(t, "p|w1")
}

func testClaimOrderWithExpiredClaims(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	// Created in this order; at the start only hi, g, mid and c may run, and g is of another kind.
	a := b.enqueue(t, store.EnqueueJobParams{Priority: 0, Delay: 10 * time.Second})
	c := b.enqueue(t, store.EnqueueJobParams{Priority: 0})
	hi := b.enqueue(t, store.EnqueueJobParams{Priority: 5})
	g := b.enqueue(t, store.EnqueueJobParams{Kind: "other", Priority: 4})
	mid := b.enqueue(t, store.EnqueueJobParams{Priority: 4})
	for _, want := range []store.Job{hi, mid, c} {
		if got := b.mustClaim(t, "p|w1", 5*time.Second, "test"); got.ID != want.ID {
			t.Fatalf("first claims: took %s, want %s", got.ID, want.ID)
		}
	}
	e := b.enqueue(t, store.EnqueueJobParams{Priority: 4})
	b.clk.Advance(20 * time.Second)

	// Expired claims (hi, mid, c) and queued jobs (g, e, a) share one order: priority, then
	// run_after, then creation.
	for i, want := range []store.Job{hi, g, mid, e, c, a} {
		got := b.mustClaim(t, "p|w2", time.Minute)
		if got.ID != want.ID {
			t.Fatalf("claim %d: took %s (priority %d, run_after %s, attempts %d), want %s (priority %d, run_after %s)",
				i+1, got.ID, got.Priority, got.RunAfter, got.ClaimNumber, want.ID, want.Priority, want.RunAfter)
		}
	}
	b.noClaim(t, "p|w2")
}

func testClaimDelay(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{Delay: time.Minute})
	b.noClaim(t, "p|w1")
	b.clk.Advance(time.Minute - time.Microsecond)
	b.noClaim(t, "p|w1")
	b.clk.Advance(time.Microsecond) // run_after <= now
	if got := b.mustClaim(t, "p|w1", time.Minute); got.ID != job.ID {
		t.Fatalf("claimed %s, want %s", got.ID, job.ID)
	}
}

func testClaimKinds(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	build := b.enqueue(t, store.EnqueueJobParams{Kind: "build", Priority: 5})
	validate := b.enqueue(t, store.EnqueueJobParams{Kind: "validate"})

	b.noClaim(t, "p|w1", "deploy")
	if got := b.mustClaim(t, "p|w1", time.Minute, "validate"); got.ID != validate.ID {
		t.Fatalf("claim of kind validate took %s (%s), want %s", got.ID, got.Kind, validate.ID)
	}
	b.noClaim(t, "p|w1", "validate")
	if got := b.mustClaim(t, "p|w1", time.Minute, "deploy", "build"); got.ID != build.ID {
		t.Fatalf("claim of kinds deploy, build took %s (%s), want %s", got.ID, got.Kind, build.ID)
	}

	// An expired claim is offered only to claimers of its kind too.
	b.clk.Advance(2 * time.Minute)
	b.noClaim(t, "p|w2", "deploy")
	if got := b.mustClaim(t, "p|w2", time.Minute, "build"); got.ID != build.ID || got.ClaimNumber != 2 {
		t.Fatalf("claim of expired build job: %s attempts %d, want %s attempts 2", got.ID, got.ClaimNumber, build.ID)
	}
	if got := b.mustClaim(t, "p|w2", time.Minute); got.ID != validate.ID || got.ClaimNumber != 2 {
		t.Fatalf("claim of any kind: %s attempts %d, want %s attempts 2", got.ID, got.ClaimNumber, validate.ID)
	}
}

func testClaimNothing(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	b.noClaim(t, "p|w1")
	job := b.enqueue(t, store.EnqueueJobParams{})
	b.mustClaim(t, "p|w1", time.Minute)
	before := b.get(t, job.ID)
	b.clk.Advance(time.Minute - time.Microsecond) // the lease is still live
	b.noClaim(t, "p|w2")
	b.unchanged(t, before, "a claim while nothing was claimable")
}

func testExpiredClaimReclaimed(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 3})
	first := b.mustClaim(t, "p|w1", 30*time.Second)
	if first.ClaimNumber != 1 {
		t.Fatalf("first claim: attempts %d, want 1", first.ClaimNumber)
	}
	b.clk.Advance(30*time.Second - time.Microsecond)
	b.noClaim(t, "p|w2")

	b.clk.Advance(time.Microsecond) // lease_expires_at <= now
	now := b.clk.Now()
	second := b.mustClaim(t, "p|w2", 20*time.Second)
	want := first
	want.ClaimNumber = 2
	want.Holder = "p|w2"
	want.Lease = 20 * time.Second
	want.LeaseExpiresAt = now.Add(20 * time.Second)
	want.UpdatedAt = now
	assertJob(t, "claim of an expired claim", second, want)
	assertJob(t, "GetJob", b.get(t, job.ID), want)
}

func testExpiredLastAttemptClaim(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 2})
	b.mustClaim(t, "p|w1", 30*time.Second)
	b.clk.Advance(time.Minute)
	last := b.mustClaim(t, "p|w2", 30*time.Second)
	if last.ClaimNumber != 2 {
		t.Fatalf("second claim: attempts %d, want 2", last.ClaimNumber)
	}
	b.clk.Advance(time.Minute)
	now := b.clk.Now()
	b.noClaim(t, "p|w3")

	want := last
	want.State = store.JobFailed
	want.LastError = store.LeaseExpiredError
	want.LeaseExpiresAt = time.Time{}
	want.FinishedAt = now
	want.UpdatedAt = now
	assertJob(t, "a job whose last claim expired, after a claim", b.get(t, job.ID), want)
}

func testExpireJobs(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	spent := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 1})
	b.mustClaim(t, "p|w1", 10*time.Second)
	retryable := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 2})
	b.mustClaim(t, "p|w1", 10*time.Second)
	live := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 1})
	b.mustClaim(t, "p|w1", time.Hour)
	queued := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 1, Delay: time.Hour})

	n, err := b.st.ExpireJobs(b.ctx)
	if err != nil || n != 0 {
		t.Fatalf("ExpireJobs before any lease expired = %d, %v; want 0", n, err)
	}

	b.clk.Advance(time.Minute)
	now := b.clk.Now()
	before := map[string]store.Job{}
	for _, j := range []store.Job{spent, retryable, live, queued} {
		before[j.ID] = b.get(t, j.ID)
	}
	n, err = b.st.ExpireJobs(b.ctx)
	if err != nil || n != 1 {
		t.Fatalf("ExpireJobs = %d, %v; want 1", n, err)
	}

	want := before[spent.ID]
	want.State = store.JobFailed
	want.LastError = store.LeaseExpiredError
	want.LeaseExpiresAt = time.Time{}
	want.FinishedAt = now
	want.UpdatedAt = now
	assertJob(t, "the expired job that used its last attempt", b.get(t, spent.ID), want)
	// An expired claim with attempts left waits for the next claimer, and stays its worker's
	// until then; live claims and queued jobs are not touched.
	b.unchanged(t, before[retryable.ID], "ExpireJobs (expired claim with attempts left)")
	b.unchanged(t, before[live.ID], "ExpireJobs (live claim)")
	b.unchanged(t, before[queued.ID], "ExpireJobs (queued job)")

	if n, err := b.st.ExpireJobs(b.ctx); err != nil || n != 0 {
		t.Fatalf("ExpireJobs again = %d, %v; want 0", n, err)
	}
}

func testExpiredCancelRequested(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	viaClaim := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 5})
	b.mustClaim(t, "p|w1", 10*time.Second)
	// On its last attempt too: cancellation wins over "lease expired".
	viaExpire := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 1})
	b.mustClaim(t, "p|w1", 10*time.Second)
	for _, id := range []string{viaClaim.ID, viaExpire.ID} {
		if j, err := b.st.CancelJob(b.ctx, id); err != nil || !j.CancelRequested {
			t.Fatalf("CancelJob(%s) = cancel_requested %v, %v; want true", id, j.CancelRequested, err)
		}
	}
	b.clk.Advance(time.Minute)
	now := b.clk.Now()

	check := func(what string, before store.Job) {
		t.Helper()
		want := before
		want.State = store.JobCancelled
		want.LeaseExpiresAt = time.Time{}
		want.FinishedAt = now
		want.UpdatedAt = now
		got := b.get(t, before.ID)
		// What a cancelled job's last_error says is the backend's to choose.
		want.LastError = got.LastError
		assertJob(t, what, got, want)
	}

	beforeClaim := b.get(t, viaClaim.ID)
	beforeExpire := b.get(t, viaExpire.ID)
	n, err := b.st.ExpireJobs(b.ctx)
	if err != nil || n != 2 {
		t.Fatalf("ExpireJobs = %d, %v; want 2", n, err)
	}
	check("an expired cancel-requested claim after ExpireJobs", beforeExpire)
	check("an expired cancel-requested claim after ExpireJobs", beforeClaim)

	// And through ClaimJob, on a fresh pair.
	other := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 5})
	b.mustClaim(t, "p|w1", 10*time.Second)
	if _, err := b.st.CancelJob(b.ctx, other.ID); err != nil {
		t.Fatalf("CancelJob: %v", err)
	}
	b.clk.Advance(time.Minute)
	now = b.clk.Now()
	beforeOther := b.get(t, other.ID)
	b.noClaim(t, "p|w2")
	check("an expired cancel-requested claim after ClaimJob", beforeOther)
}
