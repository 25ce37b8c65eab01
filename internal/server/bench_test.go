package server_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// BenchmarkHTTPClaimComplete measures claim+complete over the API on loopback with 16
// concurrent workers, each report carrying its claim number; it reports jobs/s.
func BenchmarkHTTPClaimComplete(b *testing.B) {
	for _, backend := range agtest.Backends {
		b.Run(backend, func(b *testing.B) {
			ctx := context.Background()
			srv := agtest.Start(b, agtest.Options{Backend: backend})
			w := srv.Principal(b, "bench", agwpv1.Role_ROLE_WORKER)
			for i := 0; i < b.N; i++ {
				if _, err := srv.Admin.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "ag.noop"}); err != nil {
					b.Fatal(err)
				}
			}
			const workers = 16
			var done atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < workers; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for done.Load() < int64(b.N) {
						claim, err := w.Claim(ctx, client.ClaimOptions{Worker: "bench"})
						if err != nil {
							b.Error(err)
							return
						}
						if claim == nil {
							return
						}
						if _, err := claim.Complete(ctx, client.CompleteOptions{}); err != nil && connect.CodeOf(err) != connect.CodeFailedPrecondition {
							b.Error(err)
							return
						}
						done.Add(1)
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(done.Load())/time.Since(start).Seconds(), "jobs/s")
		})
	}
}

// BenchmarkHTTPClaimCompleteBatch measures claim+complete over the API on loopback with 8
// concurrent workers, each claiming up to 32 jobs per ClaimJobs call and completing them with
// one CompleteJobs call, every completion carrying its own claim number; it reports jobs/s.
func BenchmarkHTTPClaimCompleteBatch(b *testing.B) {
	for _, backend := range agtest.Backends {
		b.Run(backend, func(b *testing.B) {
			ctx := context.Background()
			srv := agtest.Start(b, agtest.Options{Backend: backend})
			w := srv.Principal(b, "bench", agwpv1.Role_ROLE_WORKER)
			for i := 0; i < b.N; i++ {
				if _, err := srv.Admin.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: "ag.noop"}); err != nil {
					b.Fatal(err)
				}
			}
			const workers, batch = 8, 32
			var done atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < workers; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for done.Load() < int64(b.N) {
						claims, err := w.ClaimMany(ctx, client.ClaimOptions{Worker: fmt.Sprintf("bench-%d", i)}, batch)
						if err != nil {
							b.Error(err)
							return
						}
						if len(claims) == 0 {
							return
						}
						cs := make([]client.Completion, len(claims))
						for k, c := range claims {
							cs[k].Claim = c
						}
						_, refusals, err := w.CompleteMany(ctx, cs)
						if err != nil {
							b.Error(err)
							return
						}
						for _, r := range refusals {
							if r != nil {
								b.Error(r)
								return
							}
						}
						done.Add(int64(len(claims)))
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(done.Load())/time.Since(start).Seconds(), "jobs/s")
		})
	}
}

// BenchmarkHTTPIntegrate measures integrations over the API on loopback from 16 agents, each
// editing its own file under its own lease (disjoint leases); it reports integrations/s.
func BenchmarkHTTPIntegrate(b *testing.B) {
	for _, backend := range agtest.Backends {
		b.Run(backend, func(b *testing.B) {
			ctx := context.Background()
			srv := agtest.Start(b, agtest.Options{Backend: backend})
			res, err := srv.Admin.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			base := res.GetRepository().GetMainline()
			agent := srv.Principal(b, "agent", agwpv1.Role_ROLE_AGENT)
			const agents = 16
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < agents; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					holder := fmt.Sprintf("a%d", i)
					path := fmt.Sprintf("src/%s.go", holder)
					lease, err := agent.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "bench", Paths: []string{path}, Holder: holder, TTL: time.Hour})
					if err != nil {
						b.Error(err)
						return
					}
					mine := base
					for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
						res, err := agent.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{
							Repository: "bench", BaseRevision: mine, Holder: holder, FencingTokens: []uint64{lease.GetFencingToken()},
							Edits: []*agwpv1.Edit{{Path: path, Action: &agwpv1.Edit_Content{Content: []byte(fmt.Sprintf("package src // %d\n", n))}}},
						})
						if err != nil {
							b.Error(err)
							return
						}
						// The agent's next edit is based on the revision its last one made.
						mine = res.GetChange().GetIntegratedRevision()
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "integrations/s")
		})
	}
}
