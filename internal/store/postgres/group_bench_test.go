package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// BenchmarkClaimCompleteConcurrently measures a claim and its completion per iteration, from
// 16 claimers at once (as many as BenchmarkHTTPClaimComplete's workers), whose calls the
// store groups; it reports jobs/s.
func BenchmarkClaimCompleteConcurrently(b *testing.B) {
	const claimers = 16
	db, err := Open(context.Background(), pgtest.NewDatabase(b), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	for range b.N {
		if _, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "build", Payload: []byte(`{"tree":"t"}`), MaxAttempts: 5}); err != nil {
			b.Fatal(err)
		}
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for w := range claimers {
		wg.Go(func() {
			worker := fmt.Sprintf("bench|w%d", w)
			for left.Add(-1) >= 0 {
				job, err := db.ClaimJob(ctx, store.ClaimJobParams{Holder: worker, Kinds: []string{"build"}, Lease: time.Minute})
				if err != nil || job == nil {
					b.Errorf("ClaimJob = %v, %v; want a job", job, err)
					return
				}
				if _, err := db.CompleteJob(ctx, store.CompleteJobParams{JobID: job.ID, Holder: worker, ClaimNumber: job.ClaimNumber,
					Result: []byte(`{"passed":true}`), Output: "ok"}); err != nil {
					b.Errorf("CompleteJob: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
}
