package server_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/store"
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
			enqueueNoops(b, srv, b.N)
			const workers = 16
			var done atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			busy := machineBusy()
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
			reportMachineCPU(b, busy, done.Load())
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
			enqueueNoops(b, srv, b.N)
			const workers, batch = 8, 32
			var done atomic.Int64
			var wg sync.WaitGroup
			ctl := controlled(b, backend, &done)
			b.ResetTimer()
			busy := machineBusy()
			start := time.Now()
			for i := 0; i < workers; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for done.Load() < int64(b.N) && ctl.running() {
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
			ctl.finish()
			b.StopTimer()
			b.ReportMetric(float64(done.Load())/time.Since(start).Seconds(), "jobs/s")
			reportMachineCPU(b, busy, done.Load())
			if benchAudits {
				// How far the sealer is behind when the work ends: it keeps up when this is
				// about one seal's gap and time, and the throughput leaves out a backlog. The
				// log's few events from before the jobs (the principal's) are not counted.
				behind := time.Now()
				waitSealed(b, srv, uint64(b.N)+2*uint64(done.Load()))
				b.ReportMetric(float64(time.Since(behind).Milliseconds()), "ms-to-seal-the-rest")
			}
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

// machineBusy answers how long the machine's processors have been busy, all processes
// together (the server, its clients and PostgreSQL's), from /proc/stat; 0 where there is none.
func machineBusy() time.Duration {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	fields := bytes.Fields(line)
	if len(fields) < 5 || string(fields[0]) != "cpu" {
		return 0
	}
	var ticks int64
	for i, f := range fields[1:] {
		// user nice system idle iowait irq softirq steal ...; guest time is counted in user.
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		n, err := strconv.ParseInt(string(f), 10, 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	// /proc/stat counts in USER_HZ, which Linux fixes at 100 for user space.
	return time.Duration(ticks) * 10 * time.Millisecond
}

// reportMachineCPU reports the processor time the whole machine spent per job since busy,
// which moves less from run to run than throughput does: it counts work, not waiting.
func reportMachineCPU(b *testing.B, busy time.Duration, jobs int64) {
	if busy == 0 || jobs == 0 {
		return
	}
	b.ReportMetric(float64((machineBusy()-busy).Microseconds())/float64(jobs), "cpu-µs/job")
}

// enqueueNoops enqueues n jobs of kind ag.noop, as an admin's EnqueueJob would, straight into
// the store from 8 goroutines: over the API, one by one, a long run spent most of its time
// getting ready. It then waits until the audit log has sealed as many events as it enqueued
// jobs, so that the timed part seals little besides its own claims and completions.
func enqueueNoops(b *testing.B, srv *agtest.Server, n int) {
	b.Helper()
	ctx := context.Background()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, _, err := srv.Store.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "ag.noop", MaxAttempts: 5, EnqueuedBy: "admin"}); err != nil {
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
	if benchAudits {
		waitSealed(b, srv, uint64(n))
	}
}

// waitSealed waits until the audit log has sealed event seq.
func waitSealed(b *testing.B, srv *agtest.Server, seq uint64) {
	b.Helper()
	// The API's long poll answers once event seq is sealed.
	res, err := srv.Admin.Audit.ListAuditEvents(context.Background(), &agwpv1.ListAuditEventsRequest{
		AfterSeq: seq - 1, PageSize: 1, Wait: durationpb.New(time.Minute)})
	if err != nil {
		b.Fatal(err)
	}
	if len(res.GetEvents()) == 0 {
		b.Fatalf("the audit log did not seal event %d in a minute", seq)
	}
}
