package storetest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

// attestation answers a stand-in DSSE envelope and its digest; the store keeps it as bytes.
func attestation(jobID, text string) *store.Attestation {
	env := []byte(`{"payloadType":"application/vnd.in-toto+json","payload":"` + text + `","signatures":[]}`)
	sum := sha256.Sum256(env)
	return &store.Attestation{Digest: "sha256:" + hex.EncodeToString(sum[:]), Envelope: env, JobID: jobID}
}

func testHeartbeat(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{})
	claimed := b.mustClaim(t, "p|w1", 30*time.Second)

	// No lease given: the claim's own lease, from now.
	b.clk.Advance(20 * time.Second)
	now := b.clk.Now()
	hb, err := b.st.HeartbeatJob(b.ctx, store.HeartbeatJobParams{JobID: job.ID, Holder: "p|w1", ClaimNumber: 1, Progress: "compiling"})
	if err != nil {
		t.Fatalf("HeartbeatJob: %v", err)
	}
	want := claimed
	want.LeaseExpiresAt = now.Add(30 * time.Second)
	want.Progress = "compiling"
	want.UpdatedAt = now
	assertJob(t, "HeartbeatJob with the default lease", hb, want)
	assertJob(t, "GetJob after HeartbeatJob", b.get(t, job.ID), want)

	// The old expiry has passed, the extended one has not: nobody else may claim it.
	b.clk.Advance(20 * time.Second)
	b.noClaim(t, "p|w2")

	// A lease given: from now; no progress given: the last one stays.
	now = b.clk.Now()
	hb, err = b.st.HeartbeatJob(b.ctx, store.HeartbeatJobParams{JobID: job.ID, Holder: "p|w1", Lease: 5 * time.Minute})
	if err != nil {
		t.Fatalf("HeartbeatJob with a lease: %v", err)
	}
	if !hb.LeaseExpiresAt.Equal(now.Add(5*time.Minute)) || hb.Progress != "compiling" || hb.CancelRequested ||
		hb.State != store.JobClaimed || hb.ClaimNumber != 1 || hb.Holder != "p|w1" || !hb.UpdatedAt.Equal(now) {
		t.Fatalf("HeartbeatJob with a 5m lease = expires %s, progress %q, cancel_requested %v, %s, attempts %d, by %s, updated %s;"+
			" want expires %s, progress compiling, false, claimed, 1, p|w1, updated %s",
			hb.LeaseExpiresAt, hb.Progress, hb.CancelRequested, hb.State, hb.ClaimNumber, hb.Holder, hb.UpdatedAt,
			now.Add(5*time.Minute), now)
	}
	b.clk.Advance(5*time.Minute - time.Microsecond)
	b.noClaim(t, "p|w2")
	b.clk.Advance(time.Microsecond)
	if got := b.mustClaim(t, "p|w2", time.Minute); got.ID != job.ID || got.ClaimNumber != 2 || got.Progress != "" {
		t.Fatalf("claim after the extended lease: %s attempts %d progress %q, want %s attempts 2 and no progress",
			got.ID, got.ClaimNumber, got.Progress, job.ID)
	}
}

func testHeartbeatExpiredUnclaimed(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 3})
	claimed := b.mustClaim(t, "p|w1", 30*time.Second)
	b.clk.Advance(10 * time.Minute)
	now := b.clk.Now()
	hb, err := b.st.HeartbeatJob(b.ctx, store.HeartbeatJobParams{JobID: job.ID, Holder: "p|w1", ClaimNumber: 1})
	if err != nil {
		t.Fatalf("HeartbeatJob of an expired lease nobody claimed: %v", err)
	}
	want := claimed
	want.LeaseExpiresAt = now.Add(30 * time.Second)
	want.UpdatedAt = now
	assertJob(t, "HeartbeatJob of an expired lease", hb, want)
	b.noClaim(t, "p|w2")
}

func testComplete(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{Kind: "build", Payload: []byte(`{"tree":"t1"}`)})
	claimed := b.mustClaim(t, "p|w1", time.Minute)
	b.clk.Advance(40 * time.Second)
	now := b.clk.Now()

	att := attestation(job.ID, "passed")
	p := store.CompleteJobParams{
		JobID: job.ID, Holder: "p|w1", ClaimNumber: 1,
		Result:       []byte(`{"passed":true,"exit_code":0}`),
		Output:       "ok  \tgithub.com/x/y\t0.1s\n",
		OutputDigest: "sha256:" + hex.EncodeToString(make([]byte, 32)),
		Attestation:  att,
	}
	done, err := b.st.CompleteJob(b.ctx, p)
	if err != nil {
		t.Fatalf("CompleteJob: %v", err)
	}
	want := claimed
	want.State = store.JobCompleted
	want.Result = p.Result
	want.Output = p.Output
	want.OutputDigest = p.OutputDigest
	want.AttestationDigest = att.Digest
	want.LeaseExpiresAt = time.Time{}
	want.FinishedAt = now
	want.UpdatedAt = now
	assertJob(t, "CompleteJob", done, want)
	assertJob(t, "GetJob after CompleteJob", b.get(t, job.ID), want)

	got, err := b.st.GetAttestation(b.ctx, att.Digest)
	if err != nil {
		t.Fatalf("GetAttestation: %v", err)
	}
	if got.Digest != att.Digest || string(got.Envelope) != string(att.Envelope) || got.JobID != job.ID || !got.CreatedAt.Equal(now) {
		t.Fatalf("GetAttestation = %+v, want digest %s, envelope %s, job %s, created %s", got, att.Digest, att.Envelope, job.ID, now)
	}
	_, err = b.st.GetAttestation(b.ctx, attestation(job.ID, "other").Digest)
	wantErr(t, "GetAttestation(unknown)", err, store.ErrNotFound)

	b.noClaim(t, "p|w2")
}

func testCompleteWithoutAttestation(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{Kind: "build"})
	claimed := b.mustClaim(t, "p|w1", time.Minute)
	done, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: job.ID, Holder: "p|w1"})
	if err != nil {
		t.Fatalf("CompleteJob without token, result or attestation: %v", err)
	}
	want := claimed
	want.State = store.JobCompleted
	want.LeaseExpiresAt = time.Time{}
	want.FinishedAt = b.clk.Now()
	assertJob(t, "CompleteJob", done, want)
}

func testSecondCompletion(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{Kind: "build"})
	b.mustClaim(t, "p|w1", time.Minute)
	first := attestation(job.ID, "first")
	if _, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: job.ID, Holder: "p|w1", ClaimNumber: 1,
		Result: []byte(`{"passed":true}`), Attestation: first}); err != nil {
		t.Fatalf("CompleteJob: %v", err)
	}
	before := b.get(t, job.ID)
	b.clk.Advance(time.Second)

	for _, token := range []uint32{1, 0} {
		second := attestation(job.ID, "second")
		_, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: job.ID, Holder: "p|w1", ClaimNumber: token,
			Result: []byte(`{"passed":false}`), Output: "again", Attestation: second})
		wantLostClaim(t, "a second CompleteJob", err, "p|w1", token, before)
		b.unchanged(t, before, "a second CompleteJob")
		_, err = b.st.GetAttestation(b.ctx, second.Digest)
		wantErr(t, "GetAttestation of the refused completion's envelope", err, store.ErrNotFound)
	}
	if _, err := b.st.GetAttestation(b.ctx, first.Digest); err != nil {
		t.Fatalf("GetAttestation of the accepted completion's envelope: %v", err)
	}
}

func testFailRetryDelay(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 3})
	claimed := b.mustClaim(t, "p|w1", time.Minute)
	if _, err := b.st.HeartbeatJob(b.ctx, store.HeartbeatJobParams{JobID: job.ID, Holder: "p|w1", Progress: "step 2"}); err != nil {
		t.Fatalf("HeartbeatJob: %v", err)
	}
	b.clk.Advance(5 * time.Second)
	now := b.clk.Now()

	failed, err := b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: "p|w1", ClaimNumber: 1,
		Error: "exit status 2", Output: "FAIL x_test.go:12", RetryDelay: durationPtr(time.Minute)})
	if err != nil {
		t.Fatalf("FailJob: %v", err)
	}
	want := claimed
	want.State = store.JobQueued
	want.Holder = ""
	want.LeaseExpiresAt = time.Time{}
	want.RunAfter = now.Add(time.Minute)
	want.LastError = "exit status 2"
	want.Output = "FAIL x_test.go:12"
	want.UpdatedAt = now
	want.Progress = failed.Progress // a queued job's progress is the backend's to keep or clear
	// The lease length belongs to a claim; a queued job has none to report.
	want.Lease = failed.Lease
	assertJob(t, "FailJob with a retry delay", failed, want)
	assertJob(t, "GetJob after FailJob", b.get(t, job.ID), want)

	b.clk.Advance(time.Minute - time.Microsecond)
	b.noClaim(t, "p|w2")
	b.clk.Advance(time.Microsecond)
	now = b.clk.Now()
	again := b.mustClaim(t, "p|w2", 2*time.Minute)
	if again.ID != job.ID || again.ClaimNumber != 2 || again.Holder != "p|w2" || again.Progress != "" ||
		!again.LeaseExpiresAt.Equal(now.Add(2*time.Minute)) || again.LastError != "exit status 2" {
		t.Fatalf("claim after the retry delay: %s attempts %d by %s progress %q expires %s last_error %q;"+
			" want %s attempts 2 by p|w2, no progress, expires %s, last_error kept",
			again.ID, again.ClaimNumber, again.Holder, again.Progress, again.LeaseExpiresAt, again.LastError, job.ID, now.Add(2*time.Minute))
	}

	// A retry delay of zero is a retry at once.
	failed, err = b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: "p|w2", ClaimNumber: 2,
		Error: "flaky", RetryDelay: durationPtr(0)})
	if err != nil || failed.State != store.JobQueued || !failed.RunAfter.Equal(now) {
		t.Fatalf("FailJob with retry delay 0 = %s run_after %s, %v; want queued, run_after %s", failed.State, failed.RunAfter, err, now)
	}
	if got := b.mustClaim(t, "p|w1", time.Minute); got.ID != job.ID || got.ClaimNumber != 3 {
		t.Fatalf("claim after a zero retry delay: %s attempts %d, want %s attempts 3", got.ID, got.ClaimNumber, job.ID)
	}
}

func testFailBackoff(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 5})
	for attempt := uint32(1); attempt <= 3; attempt++ {
		claimed := b.mustClaim(t, "p|w1", time.Minute)
		if claimed.ClaimNumber != attempt {
			t.Fatalf("claim %d: attempts %d", attempt, claimed.ClaimNumber)
		}
		now := b.clk.Now()
		// Without a token: the claim is checked by the worker's name alone.
		failed, err := b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: "p|w1", Error: "boom"})
		if err != nil {
			t.Fatalf("FailJob %d: %v", attempt, err)
		}
		wantRunAfter := now.Add(store.Backoff(attempt))
		if failed.State != store.JobQueued || !failed.RunAfter.Equal(wantRunAfter) || failed.Holder != "" || failed.LastError != "boom" {
			t.Fatalf("FailJob %d = %s run_after %s by %q last_error %q; want queued, run_after now+%s = %s, unclaimed, boom",
				attempt, failed.State, failed.RunAfter, failed.Holder, failed.LastError, store.Backoff(attempt), wantRunAfter)
		}
		b.clk.Advance(store.Backoff(attempt) - time.Microsecond)
		b.noClaim(t, "p|w1")
		b.clk.Advance(time.Microsecond)
	}
}

func testFailFinal(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 5})
	claimed := b.mustClaim(t, "p|w1", time.Minute)
	b.clk.Advance(time.Second)
	now := b.clk.Now()
	failed, err := b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: "p|w1", ClaimNumber: 1,
		Error: "invalid tree", Output: "no such blob", Final: true, RetryDelay: durationPtr(time.Second)})
	if err != nil {
		t.Fatalf("FailJob(final): %v", err)
	}
	want := claimed
	want.State = store.JobFailed
	want.LeaseExpiresAt = time.Time{}
	want.FinishedAt = now
	want.UpdatedAt = now
	want.LastError = "invalid tree"
	want.Output = "no such blob"
	assertJob(t, "FailJob(final)", failed, want)
	assertJob(t, "GetJob after FailJob(final)", b.get(t, job.ID), want)
	b.clk.Advance(time.Hour)
	b.noClaim(t, "p|w1")
}

func testFailLastAttempt(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 2})
	b.mustClaim(t, "p|w1", time.Minute)
	if j, err := b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: "p|w1", ClaimNumber: 1, Error: "one",
		RetryDelay: durationPtr(0)}); err != nil || j.State != store.JobQueued {
		t.Fatalf("FailJob of attempt 1 of 2 = %s, %v; want queued", j.State, err)
	}
	claimed := b.mustClaim(t, "p|w2", time.Minute)
	b.clk.Advance(time.Second)
	now := b.clk.Now()
	failed, err := b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: "p|w2", ClaimNumber: 2, Error: "two",
		RetryDelay: durationPtr(0)})
	if err != nil {
		t.Fatalf("FailJob of attempt 2 of 2: %v", err)
	}
	want := claimed
	want.State = store.JobFailed
	want.LeaseExpiresAt = time.Time{}
	want.FinishedAt = now
	want.UpdatedAt = now
	want.LastError = "two"
	assertJob(t, "FailJob of the last attempt", failed, want)
	b.noClaim(t, "p|w1")
}

func testFailCancelRequested(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	// Cancellation wins over a final failure and over the last attempt: the job was cancelled.
	job := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 1})
	b.mustClaim(t, "p|w1", time.Minute)
	requested, err := b.st.CancelJob(b.ctx, job.ID)
	if err != nil {
		t.Fatalf("CancelJob: %v", err)
	}
	b.clk.Advance(time.Second)
	now := b.clk.Now()
	failed, err := b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: "p|w1", ClaimNumber: 1, Error: "stopped: cancelled", Final: true})
	if err != nil {
		t.Fatalf("FailJob of a cancel-requested job: %v", err)
	}
	want := requested
	want.State = store.JobCancelled
	want.LeaseExpiresAt = time.Time{}
	want.FinishedAt = now
	want.UpdatedAt = now
	want.LastError = "stopped: cancelled"
	assertJob(t, "FailJob of a cancel-requested job", failed, want)
	b.clk.Advance(time.Hour)
	b.noClaim(t, "p|w1")
}

// testFencing is ADR-0012's storage test: the same worker name claims a job twice, and the
// number of its first claim can no longer change anything.
func testFencing(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	const worker = "p|w1"
	job := b.enqueue(t, store.EnqueueJobParams{Kind: "build", MaxAttempts: 5})
	first := b.mustClaim(t, worker, 30*time.Second)
	if first.ClaimNumber != 1 {
		t.Fatalf("first claim: attempts %d, want 1", first.ClaimNumber)
	}
	b.clk.Advance(31 * time.Second)
	second := b.mustClaim(t, worker, 30*time.Second)
	if second.ID != job.ID || second.ClaimNumber != 2 || second.Holder != worker {
		t.Fatalf("second claim: %s attempts %d by %s, want %s attempts 2 by %s", second.ID, second.ClaimNumber, second.Holder, job.ID, worker)
	}
	b.clk.Advance(time.Second)
	current := b.get(t, job.ID)

	// The stale claim number is refused on heartbeat, fail and complete, and changes nothing.
	_, err := b.st.HeartbeatJob(b.ctx, store.HeartbeatJobParams{JobID: job.ID, Holder: worker, ClaimNumber: 1,
		Lease: time.Hour, Progress: "stale"})
	wantLostClaim(t, "HeartbeatJob with claim 1", err, worker, 1, current)
	b.unchanged(t, current, "HeartbeatJob with claim 1")

	_, err = b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: worker, ClaimNumber: 1,
		Error: "stale", Output: "stale", Final: true})
	wantLostClaim(t, "FailJob with claim 1", err, worker, 1, current)
	b.unchanged(t, current, "FailJob with claim 1")

	_, err = b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: worker, ClaimNumber: 1,
		Error: "stale", RetryDelay: durationPtr(0)})
	wantLostClaim(t, "FailJob (retry) with claim 1", err, worker, 1, current)
	b.unchanged(t, current, "FailJob (retry) with claim 1")

	stale := attestation(job.ID, "stale")
	_, err = b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: job.ID, Holder: worker, ClaimNumber: 1,
		Result: []byte(`{"passed":true}`), Output: "stale", Attestation: stale})
	wantLostClaim(t, "CompleteJob with claim 1", err, worker, 1, current)
	b.unchanged(t, current, "CompleteJob with claim 1")
	_, err = b.st.GetAttestation(b.ctx, stale.Digest)
	wantErr(t, "GetAttestation of the stale completion's envelope", err, store.ErrNotFound)

	// A number the job has not reached is refused as well.
	_, err = b.st.HeartbeatJob(b.ctx, store.HeartbeatJobParams{JobID: job.ID, Holder: worker, ClaimNumber: 3})
	wantLostClaim(t, "HeartbeatJob with claim 3", err, worker, 3, current)
	b.unchanged(t, current, "HeartbeatJob with claim 3")

	// The current number and no number are accepted.
	now := b.clk.Now()
	hb, err := b.st.HeartbeatJob(b.ctx, store.HeartbeatJobParams{JobID: job.ID, Holder: worker, ClaimNumber: 2, Progress: "current"})
	if err != nil {
		t.Fatalf("HeartbeatJob with claim 2: %v", err)
	}
	if hb.Progress != "current" || !hb.LeaseExpiresAt.Equal(now.Add(30*time.Second)) || hb.ClaimNumber != 2 {
		t.Fatalf("HeartbeatJob with claim 2 = progress %q, expires %s, attempts %d; want current, %s, 2",
			hb.Progress, hb.LeaseExpiresAt, hb.ClaimNumber, now.Add(30*time.Second))
	}
	b.clk.Advance(time.Second)
	now = b.clk.Now()
	hb, err = b.st.HeartbeatJob(b.ctx, store.HeartbeatJobParams{JobID: job.ID, Holder: worker, ClaimNumber: 0, Progress: "unnumbered"})
	if err != nil {
		t.Fatalf("HeartbeatJob without a claim number: %v", err)
	}
	if hb.Progress != "unnumbered" || !hb.LeaseExpiresAt.Equal(now.Add(30*time.Second)) {
		t.Fatalf("HeartbeatJob without a claim number = progress %q, expires %s; want unnumbered, %s",
			hb.Progress, hb.LeaseExpiresAt, now.Add(30*time.Second))
	}

	// A claim number of another worker's claim is not this worker's.
	otherJob := b.enqueue(t, store.EnqueueJobParams{Kind: "build"})
	other := b.mustClaim(t, "p|w2", time.Minute, "build")
	if other.ID != otherJob.ID || other.ClaimNumber != 1 {
		t.Fatalf("claim by p|w2: %s attempts %d, want %s attempts 1", other.ID, other.ClaimNumber, otherJob.ID)
	}
	_, err = b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: other.ID, Holder: worker, ClaimNumber: 1,
		Attestation: attestation(other.ID, "not mine")})
	wantLostClaim(t, "CompleteJob of p|w2's claim by "+worker, err, worker, 1, other)
	b.unchanged(t, other, "CompleteJob of another worker's claim")
	_, err = b.st.HeartbeatJob(b.ctx, store.HeartbeatJobParams{JobID: job.ID, Holder: "p|w2", ClaimNumber: 2})
	wantLostClaim(t, "HeartbeatJob of "+worker+"'s claim by p|w2", err, "p|w2", 2, b.get(t, job.ID))

	// Unknown jobs are not found, whatever the number.
	unknown := store.NewID("job")
	_, err = b.st.HeartbeatJob(b.ctx, store.HeartbeatJobParams{JobID: unknown, Holder: worker, ClaimNumber: 1})
	wantErr(t, "HeartbeatJob of an unknown job", err, store.ErrNotFound)
	_, err = b.st.FailJob(b.ctx, store.FailJobParams{JobID: unknown, Holder: worker, ClaimNumber: 1, Error: "x"})
	wantErr(t, "FailJob of an unknown job", err, store.ErrNotFound)
	unknownAtt := attestation(unknown, "unknown")
	_, err = b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: unknown, Holder: worker, ClaimNumber: 1, Attestation: unknownAtt})
	wantErr(t, "CompleteJob of an unknown job", err, store.ErrNotFound)
	_, err = b.st.GetAttestation(b.ctx, unknownAtt.Digest)
	wantErr(t, "GetAttestation of the unknown job's envelope", err, store.ErrNotFound)

	// The current claim completes, with its attestation.
	b.clk.Advance(time.Second)
	now = b.clk.Now()
	beforeComplete := b.get(t, job.ID)
	att := attestation(job.ID, "current")
	done, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: job.ID, Holder: worker, ClaimNumber: 2,
		Result: []byte(`{"passed":true}`), Output: "ok", Attestation: att})
	if err != nil {
		t.Fatalf("CompleteJob with claim 2: %v", err)
	}
	want := beforeComplete
	want.State = store.JobCompleted
	want.Result = []byte(`{"passed":true}`)
	want.Output = "ok"
	want.AttestationDigest = att.Digest
	want.LeaseExpiresAt = time.Time{}
	want.FinishedAt = now
	want.UpdatedAt = now
	assertJob(t, "CompleteJob with claim 2", done, want)
	if got, err := b.st.GetAttestation(b.ctx, att.Digest); err != nil || got.JobID != job.ID {
		t.Fatalf("GetAttestation after CompleteJob with claim 2 = job %q, %v; want %s", got.JobID, err, job.ID)
	}

	// Once completed, even the number that completed it is refused.
	_, err = b.st.HeartbeatJob(b.ctx, store.HeartbeatJobParams{JobID: job.ID, Holder: worker, ClaimNumber: 2})
	wantLostClaim(t, "HeartbeatJob with claim 2 after completion", err, worker, 2, done)
	b.unchanged(t, done, "HeartbeatJob after completion")
}

func testOnlyClaimant(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	queued := b.enqueue(t, store.EnqueueJobParams{Delay: time.Hour})
	job := b.enqueue(t, store.EnqueueJobParams{})
	claimed := b.mustClaim(t, "p|w1", time.Minute)
	if claimed.ID != job.ID {
		t.Fatalf("claimed %s, want %s", claimed.ID, job.ID)
	}

	// Another worker name, with or without the right number, and another principal with the
	// same label.
	for _, worker := range []string{"p|w2", "q|w1", "p"} {
		for _, token := range []uint32{0, 1} {
			_, err := b.st.HeartbeatJob(b.ctx, store.HeartbeatJobParams{JobID: job.ID, Holder: worker, ClaimNumber: token})
			wantLostClaim(t, "HeartbeatJob by "+worker, err, worker, token, claimed)
			_, err = b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: worker, ClaimNumber: token, Error: "x", Final: true})
			wantLostClaim(t, "FailJob by "+worker, err, worker, token, claimed)
			_, err = b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: job.ID, Holder: worker, ClaimNumber: token})
			wantLostClaim(t, "CompleteJob by "+worker, err, worker, token, claimed)
			b.unchanged(t, claimed, "requests by "+worker)
		}
	}

	// A queued job has no claimant.
	_, err := b.st.HeartbeatJob(b.ctx, store.HeartbeatJobParams{JobID: queued.ID, Holder: "p|w1"})
	wantLostClaim(t, "HeartbeatJob of a queued job", err, "p|w1", 0, queued)
	_, err = b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: queued.ID, Holder: "p|w1"})
	wantLostClaim(t, "CompleteJob of a queued job", err, "p|w1", 0, queued)
	b.unchanged(t, queued, "requests on a queued job")

	// After a retry the old claimant no longer holds the job, with or without a number.
	if _, err := b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: "p|w1", Error: "x", RetryDelay: durationPtr(0)}); err != nil {
		t.Fatalf("FailJob: %v", err)
	}
	retried := b.get(t, job.ID)
	_, err = b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: "p|w1", Error: "again"})
	wantLostClaim(t, "a second FailJob", err, "p|w1", 0, retried)
	b.unchanged(t, retried, "a second FailJob")
	if errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a lost claim must not read as a missing job: %v", err)
	}
}

func testCancelQueued(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{Delay: time.Minute})
	b.clk.Advance(time.Second)
	now := b.clk.Now()
	cancelled, err := b.st.CancelJob(b.ctx, job.ID)
	if err != nil {
		t.Fatalf("CancelJob: %v", err)
	}
	want := job
	want.State = store.JobCancelled
	want.FinishedAt = now
	want.UpdatedAt = now
	assertJob(t, "CancelJob of a queued job", cancelled, want)
	assertJob(t, "GetJob after CancelJob", b.get(t, job.ID), want)
	b.clk.Advance(time.Hour)
	b.noClaim(t, "p|w1")

	_, err = b.st.CancelJob(b.ctx, store.NewID("job"))
	wantErr(t, "CancelJob(unknown)", err, store.ErrNotFound)
}

func testCancelClaimed(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	job := b.enqueue(t, store.EnqueueJobParams{})
	claimed := b.mustClaim(t, "p|w1", time.Minute)
	b.clk.Advance(time.Second)
	now := b.clk.Now()
	requested, err := b.st.CancelJob(b.ctx, job.ID)
	if err != nil {
		t.Fatalf("CancelJob: %v", err)
	}
	want := claimed
	want.CancelRequested = true
	want.UpdatedAt = now
	assertJob(t, "CancelJob of a claimed job", requested, want)

	// Asking again changes nothing.
	b.clk.Advance(time.Second)
	again, err := b.st.CancelJob(b.ctx, job.ID)
	if err != nil {
		t.Fatalf("CancelJob again: %v", err)
	}
	assertJob(t, "CancelJob again", again, want)
	b.unchanged(t, want, "CancelJob again")

	hb, err := b.st.HeartbeatJob(b.ctx, store.HeartbeatJobParams{JobID: job.ID, Holder: "p|w1", ClaimNumber: 1})
	if err != nil {
		t.Fatalf("HeartbeatJob: %v", err)
	}
	if !hb.CancelRequested || hb.State != store.JobClaimed {
		t.Fatalf("HeartbeatJob after CancelJob = %s, cancel_requested %v; want claimed, true", hb.State, hb.CancelRequested)
	}
	// A cancel-requested claim is not offered to anyone while it lives.
	b.noClaim(t, "p|w2")
}

func testCancelFinished(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	completed := b.enqueue(t, store.EnqueueJobParams{Priority: 2})
	failed := b.enqueue(t, store.EnqueueJobParams{Priority: 1})
	cancelled := b.enqueue(t, store.EnqueueJobParams{Delay: time.Hour})
	b.mustClaim(t, "p|w1", time.Minute)
	b.mustClaim(t, "p|w1", time.Minute)
	if _, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: completed.ID, Holder: "p|w1", ClaimNumber: 1}); err != nil {
		t.Fatalf("CompleteJob: %v", err)
	}
	if _, err := b.st.FailJob(b.ctx, store.FailJobParams{JobID: failed.ID, Holder: "p|w1", ClaimNumber: 1, Error: "x", Final: true}); err != nil {
		t.Fatalf("FailJob: %v", err)
	}
	if _, err := b.st.CancelJob(b.ctx, cancelled.ID); err != nil {
		t.Fatalf("CancelJob: %v", err)
	}
	b.clk.Advance(time.Second)

	for _, id := range []string{completed.ID, failed.ID, cancelled.ID} {
		before := b.get(t, id)
		_, err := b.st.CancelJob(b.ctx, id)
		wantErr(t, "CancelJob of a "+string(before.State)+" job", err, store.ErrFailedPrecondition)
		var se *store.StateError
		if !errors.As(err, &se) {
			t.Fatalf("CancelJob of a %s job: err = %v (%T), want a *store.StateError", before.State, err, err)
		}
		b.unchanged(t, before, "CancelJob of a "+string(before.State)+" job")
	}
}

// testValidateNeedsAttestation: a validate job completed without an attestation is refused and
// nothing changes, also when other completions go in the same group commit; with one it
// completes.
func testValidateNeedsAttestation(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	const n = 8
	kinds := map[string]string{}
	for i := range n {
		kind := "build"
		if i%2 == 0 {
			kind = store.KindValidate
		}
		j := b.enqueue(t, store.EnqueueJobParams{Kind: kind})
		kinds[j.ID] = kind
	}
	claimed := map[string]store.Job{}
	for range n {
		j := b.mustClaim(t, "p|w1", time.Minute)
		claimed[j.ID] = j
	}
	// Every completion at once, none attested: the build jobs complete, the validate jobs are
	// refused whatever group they land in.
	type answer struct {
		id  string
		err error
	}
	answers := make(chan answer, n)
	for id := range claimed {
		go func() {
			_, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: id, Holder: "p|w1", ClaimNumber: 1, Output: "done"})
			answers <- answer{id, err}
		}()
	}
	for range n {
		a := <-answers
		id, err := a.id, a.err
		switch kinds[id] {
		case store.KindValidate:
			if !errors.Is(err, store.ErrAttestationRequired) {
				t.Fatalf("validate job %s completed without an attestation: err = %v, want ErrAttestationRequired", id, err)
			}
			assertJob(t, "a validate job after a refused completion", b.get(t, id), claimed[id])
		default:
			if err != nil {
				t.Fatalf("build job %s: CompleteJob: %v", id, err)
			}
			if got := b.get(t, id); got.State != store.JobCompleted {
				t.Fatalf("build job %s is %s after its completion", id, got.State)
			}
		}
	}
	for id, kind := range kinds {
		if kind != store.KindValidate {
			continue
		}
		att := attestation(id, "passed")
		done, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: id, Holder: "p|w1", ClaimNumber: 1, Attestation: att})
		if err != nil || done.State != store.JobCompleted || done.AttestationDigest != att.Digest {
			t.Fatalf("validate job %s with an attestation: %s %q, %v", id, done.State, done.AttestationDigest, err)
		}
	}
}
