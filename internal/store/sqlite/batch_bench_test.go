package sqlite_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/store"
)

// BenchmarkClaimCompleteBatch measures claim+complete throughput in jobs/s from 8 workers, each
// taking up to batch jobs per call and completing them together: batch 1 is ClaimJob and
// CompleteJob, the others ClaimJobs and CompleteJobs. b.N is the number of jobs, enqueued before
// the timer starts; the same harness for both makes their figures comparable.
func BenchmarkClaimCompleteBatch(b *testing.B) {
	for _, batch := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			benchmarkClaimCompleteBatch(b, batch)
		})
	}
}

func benchmarkClaimCompleteBatch(b *testing.B, batch int) {
	const workers = 8
	st := newStore(b, clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))) // leases never expire
	ctx := b.Context()
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	// Enqueued from several goroutines so that the writer commits them in groups.
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if _, _, err := st.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "build", Payload: []byte(`{"tree":"t"}`), MaxAttempts: 5}); err != nil {
					b.Errorf("EnqueueJob: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	var done atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	for w := range workers {
		worker := fmt.Sprintf("bench|w%d", w)
		wg.Go(func() {
			for {
				jobs, err := benchClaim(b, st, worker, batch)
				if err != nil {
					b.Errorf("claim: %v", err)
					return
				}
				if len(jobs) == 0 {
					return // every job is taken
				}
				if err := benchComplete(b, st, worker, jobs); err != nil {
					b.Errorf("complete: %v", err)
					return
				}
				done.Add(int64(len(jobs)))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if n := done.Load(); n != int64(b.N) && !b.Failed() {
		b.Fatalf("completed %d jobs, want %d", n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// benchClaim takes up to batch jobs the way a worker of that batch size would.
func benchClaim(b *testing.B, st store.Store, worker string, batch int) ([]store.Job, error) {
	p := store.ClaimJobParams{Holder: worker, Kinds: []string{"build"}, Lease: time.Minute, Max: batch}
	if batch > 1 {
		return st.ClaimJobs(b.Context(), p)
	}
	job, err := st.ClaimJob(b.Context(), p)
	if err != nil || job == nil {
		return nil, err
	}
	return []store.Job{*job}, nil
}

// benchComplete completes jobs, each with its own claim number, and fails on any refusal.
func benchComplete(b *testing.B, st store.Store, worker string, jobs []store.Job) error {
	ps := make([]store.CompleteJobParams, len(jobs))
	for i, j := range jobs {
		ps[i] = store.CompleteJobParams{JobID: j.ID, Holder: worker, ClaimNumber: j.ClaimNumber,
			Result: []byte(`{"passed":true}`), Output: "ok"}
	}
	if len(ps) == 1 {
		_, err := st.CompleteJob(b.Context(), ps[0])
		return err
	}
	outs, err := st.CompleteJobs(b.Context(), ps)
	if err != nil {
		return err
	}
	for _, o := range outs {
		if o.Err != nil {
			return o.Err
		}
	}
	return nil
}
