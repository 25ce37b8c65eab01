package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/store"
)

// signalDeadline bounds the wait for a signal that a backend may deliver from another
// goroutine (PostgreSQL's LISTEN); it is a failure deadline, not a duration the test measures.
const signalDeadline = 10 * time.Second

func testJobSignal(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	waitClosed := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(signalDeadline):
			t.Fatalf("the channel taken before %s was not closed after it", what)
		}
	}

	// A backend may also wake claimers when nothing happened (PostgreSQL after reconnecting its
	// listener), so the suite checks only that the wake-ups the contract promises come.
	ch := b.st.JobSignal()
	job := b.enqueue(t, store.EnqueueJobParams{})
	waitClosed("an enqueue", ch)

	b.mustClaim(t, "p|w1", time.Minute)
	ch = b.st.JobSignal()
	if _, err := b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: "p|w1", Error: "x", RetryDelay: durationPtr(time.Second)}); err != nil {
		t.Fatalf("FailJob: %v", err)
	}
	waitClosed("a retry", ch)
}

// testConcurrentClaimers checks invariants 1 and 5 of design.md under real concurrency: with a
// clock that does not move no lease expires, so every job must be claimed exactly once and
// completed by that claim.
func testConcurrentClaimers(t *testing.T, newStore Factory) {
	const (
		jobs    = 2000
		workers = 16
	)
	b := setup(t, newStore)
	enqueued := make(map[string]bool, jobs)
	for range jobs {
		enqueued[b.enqueue(t, store.EnqueueJobParams{Kind: "build"}).ID] = true
	}

	var (
		mu        sync.Mutex
		claims    = map[string][]string{} // job -> the workers that claimed it
		completed = map[string]int{}
		wg        sync.WaitGroup
	)
	for w := range workers {
		worker := fmt.Sprintf("p|w%d", w)
		wg.Go(func() {
			for {
				job, err := b.st.ClaimJob(b.ctx, store.ClaimJobParams{Holder: worker, Lease: time.Minute})
				if err != nil {
					t.Errorf("ClaimJob(%s): %v", worker, err)
					return
				}
				if job == nil {
					// The clock stands still: what is not queued now is held by a live claim.
					return
				}
				mu.Lock()
				claims[job.ID] = append(claims[job.ID], fmt.Sprintf("%s#%d", worker, job.ClaimNumber))
				mu.Unlock()
				if job.ClaimNumber != 1 || job.Holder != worker || job.State != store.JobClaimed {
					t.Errorf("ClaimJob(%s) = %s attempts %d by %s, want a first claim by %s", worker, job.State, job.ClaimNumber, job.Holder, worker)
				}
				if _, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: job.ID, Holder: worker, ClaimNumber: job.ClaimNumber,
					Result: []byte(`{"passed":true}`)}); err != nil {
					t.Errorf("CompleteJob(%s, %s): %v", job.ID, worker, err)
					return
				}
				mu.Lock()
				completed[job.ID]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	wantEachJobClaimedAndCompletedOnce(t, b, func(id string) bool { return enqueued[id] }, claims, completed, jobs)
}

// wantEachJobClaimedAndCompletedOnce checks what concurrent claimers of jobs enqueued jobs leave:
// claims (job -> the claims it was handed out to) and completed (job -> completions) hold each
// enqueued job once, and the store has every job completed and nothing else.
func wantEachJobClaimedAndCompletedOnce(t *testing.T, b *bundle, enqueued func(id string) bool, claims map[string][]string, completed map[string]int, jobs int) {
	t.Helper()
	for id, by := range claims {
		if !enqueued(id) {
			t.Fatalf("claimed job %s was never enqueued", id)
		}
		if len(by) != 1 {
			t.Fatalf("job %s was handed out %d times while its lease lived: %v", id, len(by), by)
		}
		if completed[id] != 1 {
			t.Fatalf("job %s completed %d times", id, completed[id])
		}
	}
	if len(claims) != jobs {
		t.Fatalf("%d of %d jobs were claimed", len(claims), jobs)
	}
	counts, err := b.st.CountJobs(b.ctx)
	if err != nil {
		t.Fatalf("CountJobs: %v", err)
	}
	if counts[store.JobCompleted] != int64(jobs) || counts[store.JobQueued]+counts[store.JobClaimed] != 0 {
		t.Fatalf("CountJobs = %v, want %d completed and nothing else", counts, jobs)
	}
}

// testConcurrentExpiry checks invariants 1 to 3 of design.md while leases expire under the
// claimers: a clock goroutine moves time whenever a worker asks it to, so claims expire and go
// to other goroutines, some of them under the same worker name. Some workers hold a claim back
// and complete it late, as a paused process would. Every completion carries its claim number.
func testConcurrentExpiry(t *testing.T, newStore Factory) {
	const (
		jobs    = 300
		workers = 8
		names   = 3 // goroutines share worker names, so only the claim number tells claims apart
		lease   = 10 * time.Second
		step    = 4 * time.Second
	)
	b := setup(t, newStore)
	for range jobs {
		b.enqueue(t, store.EnqueueJobParams{Kind: "build", MaxAttempts: 1 << 20})
	}

	type claim struct {
		id    string
		token uint32
	}
	var (
		mu        sync.Mutex
		claimed   = map[claim]string{} // claim -> the goroutine that got it
		latest    = map[string]uint32{}
		accepted  = map[string]uint32{} // job -> the number of the completion accepted
		refused   atomic.Int64
		remaining atomic.Int64
	)
	remaining.Store(jobs)

	// The clock moves in its own goroutine, when a worker nudges it: time passes while claims
	// are in flight, and the test does not depend on how fast anything runs.
	ctx, stop := context.WithCancel(b.ctx)
	defer stop()
	tick, clockDone := nudgedClock(ctx, b.clk, step)

	complete := func(worker string, c claim) {
		_, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: c.id, Holder: worker, ClaimNumber: c.token})
		switch {
		case err == nil:
			mu.Lock()
			if prev, ok := accepted[c.id]; ok {
				t.Errorf("job %s completed twice: by claim %d and by claim %d", c.id, prev, c.token)
			}
			accepted[c.id] = c.token
			mu.Unlock()
			remaining.Add(-1)
		case errors.Is(err, store.ErrLostClaim):
			refused.Add(1)
		default:
			t.Errorf("CompleteJob(%s, claim %d): %v", c.id, c.token, err)
		}
	}

	var wg sync.WaitGroup
	for g := range workers {
		worker := fmt.Sprintf("p|w%d", g%names)
		rng := rand.New(rand.NewPCG(uint64(g), 42))
		wg.Go(func() {
			var held *claim // a claim this goroutine sits on, as a paused worker would
			for remaining.Load() > 0 && !t.Failed() {
				job, err := b.st.ClaimJob(b.ctx, store.ClaimJobParams{Holder: worker, Lease: lease})
				tick()
				if err != nil {
					t.Errorf("ClaimJob: %v", err)
					return
				}
				if job == nil {
					if held != nil {
						complete(worker, *held)
						held = nil
					}
					runtime.Gosched()
					continue
				}
				c := claim{job.ID, job.ClaimNumber}
				mu.Lock()
				if other, ok := claimed[c]; ok {
					t.Errorf("job %s: claim number %d handed out twice (goroutines %s and %d)", c.id, c.token, other, g)
				}
				claimed[c] = fmt.Sprint(g)
				latest[c.id] = max(latest[c.id], c.token)
				mu.Unlock()

				if held != nil {
					complete(worker, *held)
					held = nil
				}
				if rng.IntN(3) == 0 {
					held = &c
					continue
				}
				complete(worker, c)
			}
			if held != nil {
				complete(worker, *held)
			}
		})
	}
	wg.Wait()
	stop()
	clockDone()
	if t.Failed() {
		return
	}

	checkLatestClaimsCompleted(t, b, accepted, latest, jobs)
	t.Logf("%d claims, %d stale completions refused", len(claimed), refused.Load())
}

// nudgedClock moves clk by step, in a goroutine of its own, each time tick is called (a tick
// while a move is pending adds none), until ctx ends; wait waits for the goroutine to end.
func nudgedClock(ctx context.Context, clk *clock.Fake, step time.Duration) (tick, wait func()) {
	nudge := make(chan struct{}, 1)
	var done sync.WaitGroup
	done.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-nudge:
				clk.Advance(step)
			}
		}
	})
	tick = func() {
		select {
		case nudge <- struct{}{}:
		default:
		}
	}
	return tick, done.Wait
}

// checkLatestClaimsCompleted checks, once the claimers stopped, that every one of the jobs
// ends COMPLETED by its latest claim: accepted holds the claim number of each completion
// accepted, latest the newest claim number handed out for each job.
func checkLatestClaimsCompleted(t *testing.T, b *bundle, accepted, latest map[string]uint32, jobs int) {
	for id, token := range accepted {
		job := b.get(t, id)
		if job.State != store.JobCompleted {
			t.Fatalf("job %s is %s after its completion was accepted", id, job.State)
		}
		if token != latest[id] || job.ClaimNumber != token {
			t.Fatalf("job %s: completion by claim %d accepted, but its latest claim is %d (attempts %d)", id, token, latest[id], job.ClaimNumber)
		}
	}
	if len(accepted) != jobs {
		t.Fatalf("%d of %d jobs completed", len(accepted), jobs)
	}
	counts, err := b.st.CountJobs(b.ctx)
	if err != nil {
		t.Fatalf("CountJobs: %v", err)
	}
	if counts[store.JobCompleted] != int64(jobs) {
		t.Fatalf("CountJobs = %v, want %d completed", counts, jobs)
	}
}

// BenchmarkClaimComplete measures a claim and its completion per iteration, from parallel
// claimers, on jobs enqueued before the timer starts.
func BenchmarkClaimComplete(b *testing.B, newStore Factory) {
	clk := clock.NewFake(epoch) // leases never expire: every claim is a first claim
	st := newStore(b, clk)
	ctx := b.Context()
	for range b.N {
		if _, _, err := st.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "build", Payload: []byte(`{"tree":"t"}`), MaxAttempts: 5}); err != nil {
			b.Fatalf("EnqueueJob: %v", err)
		}
	}
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		worker := fmt.Sprintf("bench|w%d", n.Add(1))
		for pb.Next() {
			job, err := st.ClaimJob(ctx, store.ClaimJobParams{Holder: worker, Kinds: []string{"build"}, Lease: time.Minute})
			if err != nil || job == nil {
				b.Errorf("ClaimJob = %v, %v; want a job", job, err)
				return
			}
			if _, err := st.CompleteJob(ctx, store.CompleteJobParams{JobID: job.ID, Holder: worker, ClaimNumber: job.ClaimNumber,
				Result: []byte(`{"passed":true}`), Output: "ok"}); err != nil {
				b.Errorf("CompleteJob: %v", err)
				return
			}
		}
	})
}
