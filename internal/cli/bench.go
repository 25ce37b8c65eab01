package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/loadbench"
)

func newBenchCmd(g *globals) *cobra.Command {
	o := &loadbench.Options{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "measure a running server: claim+complete throughput and latencies with concurrent workers",
		Long: `Drives the server at --server with the token's principal (it must be allowed to enqueue and
to claim: an admin token does both). Two phases:

  throughput  --jobs jobs are enqueued first; --workers workers then claim and complete them,
              up to --batch jobs per call (ClaimJobs, CompleteJobs; 1: ClaimJob, CompleteJob),
              each completion carrying its own claim number; prints jobs/s and claim→complete
              latency.
  latency     the workers wait (long-poll); --latency-jobs jobs are enqueued one at a time;
              prints enqueue→claim latency with waiting workers.

Jobs are of kind --kind (default ag.bench), so running ag-workers do not take them.

With --workers 0 the jobs are for workers outside, such as ag-worker --kinds ag.noop with
--kind ag.noop: it enqueues them, says "ready", and times the drain from the first claim to
the last job finished, watching the first and the last job enqueued every 5 ms. Start the
workers once it is ready; nothing else should run jobs on the server meanwhile. There is no
latency phase then.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Jobs < 1 || o.Workers < 0 || o.LatencyJobs < 0 || o.Enqueuers < 1 {
				return errors.New("--jobs and --enqueuers must be positive, --workers and --latency-jobs not negative")
			}
			if o.Batch < 1 || o.Batch > client.MaxBatch {
				return fmt.Errorf("--batch must be 1 to %d, got %d", client.MaxBatch, o.Batch)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			return runBench(cmd.Context(), g, c, *o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Jobs, "jobs", 10000, "jobs of the throughput phase")
	f.IntVar(&o.Workers, "workers", 16, "concurrent workers (0: workers outside drain the jobs)")
	f.IntVar(&o.Enqueuers, "enqueuers", 8, "concurrent enqueuers of the throughput phase")
	f.IntVar(&o.LatencyJobs, "latency-jobs", 200, "jobs of the latency phase (0: skip it)")
	f.IntVar(&o.Batch, "batch", 32, "jobs claimed and completed per call (1: one call per claim and per completion)")
	f.StringVar(&o.Kind, "kind", "ag.bench", "job kind used")
	f.DurationVar(&o.Lease, "lease", 30*time.Second, "claim lease")
	return cmd
}

// percentiles formats p50, p90 and p99 of ds.
func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	r := func(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  (n=%d)", r(at(0.5)), r(at(0.9)), r(at(0.99)), len(ds))
}

func runBench(ctx context.Context, g *globals, c *client.Client, o loadbench.Options) error {
	o.Worker = "bench-" + time.Now().UTC().Format("150405")
	fmt.Fprintf(g.stdout, "ag bench against %s: %d workers, batch %d, kind %s\n", c.BaseURL(), o.Workers, o.Batch, o.Kind)

	// Throughput: enqueue everything first, then measure claim+complete alone. The first job
	// and the last are enqueued on their own, before and after the others, so that they are
	// the first and the last in claim order: workers outside are timed by them.
	var before map[agwpv1.JobState]uint64
	if o.Workers == 0 {
		var err error
		if before, err = loadbench.JobCounts(ctx, c); err != nil {
			return fmt.Errorf("count jobs: %w", err)
		}
	}
	e, err := loadbench.Enqueue(ctx, c, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "enqueue:          %d jobs in %s (%.0f jobs/s)\n", o.Jobs, time.Since(e.Start).Round(time.Millisecond),
		float64(o.Jobs)/time.Since(e.Start).Seconds())
	// The drain starts on a server at rest, as a queue's benchmark starts its workers on jobs
	// inserted before: the enqueues' audit events are sealed first, or the drain would pay
	// for them.
	if size, _, err := loadbench.Settled(ctx, c); err != nil {
		fmt.Fprintf(g.stdout, "sealed:           not known (%v); the drain may pay for sealing the enqueues\n", err)
	} else {
		fmt.Fprintf(g.stdout, "sealed:           %d audit events before the drain\n", size)
	}

	if o.Workers == 0 {
		return benchOutside(ctx, g, c, o.Jobs, e, before)
	}
	if err := benchDrain(ctx, g, c, o); err != nil {
		return err
	}
	if o.LatencyJobs == 0 {
		return nil
	}
	lat, err := loadbench.Latency(ctx, c, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "enqueue→claim:    %s (workers waiting)\n", percentiles(lat))
	return nil
}

// benchOutside says the jobs are ready, then reports how long workers outside took to drain them.
func benchOutside(ctx context.Context, g *globals, c *client.Client, jobs int, e loadbench.Enqueued, before map[agwpv1.JobState]uint64) error {
	fmt.Fprintf(g.stdout, "ready:            %d jobs queued for the workers outside\n", jobs)
	d, err := loadbench.TimeOutsideDrain(ctx, c, jobs, e.First, e.Last, before)
	if err != nil {
		return err
	}
	elapsed := d.DoneAt.Sub(d.Start)
	fmt.Fprintf(g.stdout, "claim+complete:   %d jobs in %s: %.0f jobs/s (workers outside; %d failed, %d cancelled in all)\n",
		jobs, elapsed.Round(time.Millisecond), float64(jobs)/elapsed.Seconds(),
		d.Counts[agwpv1.JobState_JOB_STATE_FAILED], d.Counts[agwpv1.JobState_JOB_STATE_CANCELLED])
	if _, sealedAt, err := loadbench.Settled(ctx, c); err == nil {
		fmt.Fprintf(g.stdout, "sealed:           every event %s after the last job was seen finished\n", max(0, sealedAt.Sub(d.DoneAt)).Round(time.Millisecond))
	}
	return nil
}

// benchDrain drains the jobs with o.Workers workers and reports the throughput and latencies.
func benchDrain(ctx context.Context, g *globals, c *client.Client, o loadbench.Options) error {
	d, err := loadbench.Drain(ctx, c, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "claim+complete:   %d jobs in %s: %.0f jobs/s\n", d.Done, d.Elapsed.Round(time.Millisecond), float64(d.Done)/d.Elapsed.Seconds())
	fmt.Fprintf(g.stdout, "claim→complete:   %s\n", percentiles(d.Latency))
	if _, last, err := loadbench.Settled(ctx, c); err == nil {
		// What the drain left to the sealer: its jobs are audited once this is sealed too.
		fmt.Fprintf(g.stdout, "sealed:           every event %s after the last completion\n",
			max(0, last.Sub(d.Start.Add(d.Elapsed))).Round(time.Millisecond))
	}
	return nil
}
