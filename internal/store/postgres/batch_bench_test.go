package postgres

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// BenchmarkBatchClaimComplete measures claims and completions made a batch at a time: each
// worker claims up to 32 jobs with ClaimJobs and completes them with one CompleteJobs, as a
// worker of the batch API does. An iteration is one job; it reports jobs/s, to compare with
// BenchmarkClaimCompleteConcurrently, where each job costs a ClaimJob and a CompleteJob, and
// the WAL written per job: by the claims and completions, and by sealing their audit events
// afterwards (the cluster's WAL, which nothing else writes during a benchmark).
func BenchmarkBatchClaimComplete(b *testing.B) {
	for _, workers := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("workers=%d/max=32", workers), func(b *testing.B) {
			benchmarkBatchClaimComplete(b, workers, 32)
		})
	}
}

func benchmarkBatchClaimComplete(b *testing.B, workers, most int) {
	db, err := Open(context.Background(), pgtest.NewDatabase(b), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	enqueueBenchJobs(b, db, b.N)
	var claimed atomic.Int64
	var wg sync.WaitGroup
	seal := benchSealer(b, db)
	seal() // the enqueues' events: the WAL measured below is the claims' and completions'
	walBefore := walPosition(b, db)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			worker := fmt.Sprintf("bench|w%d", w)
			ps := make([]store.CompleteJobParams, 0, most)
			for {
				jobs, err := db.ClaimJobs(ctx, store.ClaimJobParams{Holder: worker, Kinds: []string{"build"}, Lease: time.Minute, Max: most})
				if err != nil {
					b.Errorf("ClaimJobs: %v", err)
					return
				}
				if len(jobs) == 0 {
					return // every job is claimed: the others complete theirs
				}
				claimed.Add(int64(len(jobs)))
				ps = ps[:0]
				for _, j := range jobs {
					ps = append(ps, store.CompleteJobParams{JobID: j.ID, Holder: worker, ClaimNumber: j.ClaimNumber,
						Result: []byte(`{"passed":true}`), Output: "ok"})
				}
				outcomes, err := db.CompleteJobs(ctx, ps)
				if err != nil {
					b.Errorf("CompleteJobs: %v", err)
					return
				}
				for _, o := range outcomes {
					if o.Err != nil {
						b.Errorf("CompleteJobs: a completion: %v", o.Err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
	if got := claimed.Load(); got != int64(b.N) {
		b.Errorf("claimed %d jobs, want %d", got, b.N)
	}
	// Bytes of WAL are what a commit costs the database beyond its statements, and unlike time
	// they hardly move from run to run.
	walWork := walPosition(b, db)
	b.ReportMetric(float64(walWork-walBefore)/float64(b.N), "wal-B/job")
	seal()
	b.ReportMetric(float64(walPosition(b, db)-walWork)/float64(b.N), "seal-wal-B/job")
}

// benchSealer answers a function that seals every pending audit event of db as the server would,
// in batches of 1,000.
func benchSealer(b *testing.B, db *DB) func() {
	signer, err := audit.LoadOrCreateKey(filepath.Join(b.TempDir(), "audit.key"), "ag-bench")
	if err != nil {
		b.Fatal(err)
	}
	seal := signer.SealFunc(time.Now)
	return func() {
		for {
			n, err := db.SealAudit(context.Background(), store.SealAuditParams{Limit: 1000, Seal: seal})
			if err != nil {
				b.Fatalf("SealAudit: %v", err)
			}
			if n == 0 {
				return
			}
		}
	}
}

// walPosition answers the database cluster's WAL insert position, in bytes.
func walPosition(b *testing.B, db *DB) int64 {
	b.Helper()
	var at int64
	if err := db.pool.QueryRow(context.Background(), `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint`).Scan(&at); err != nil {
		b.Fatalf("read the WAL position: %v", err)
	}
	return at
}

// enqueueBenchJobs enqueues n jobs of kind build, several at a time so that large runs do not
// spend most of their time there.
func enqueueBenchJobs(b *testing.B, db *DB, n int) {
	b.Helper()
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if _, _, err := db.EnqueueJob(context.Background(), store.EnqueueJobParams{Kind: "build", Payload: []byte(`{"tree":"t"}`), MaxAttempts: 5}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}
