package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"time"
)

// Main is ag-chaos: it parses args, runs the harness, prints the summary to stdout and
// answers the exit code: 0 when no invariant was violated, 1 when one was, 2 when the harness
// could not run.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ag-chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: ag-chaos [flags]

Runs three ag serve replicas on a private PostgreSQL, ag-worker processes and recorded clients,
drives jobs, leases and integrations while it kills and pauses processes, expires leases and
restarts the database, then checks the invariants over the whole history (docs/chaos.md).
Exits 0 when none is violated, 1 when one is, 2 when it could not run.

Flags:
`)
		fs.PrintDefaults()
	}
	var cfg Config
	seed := fs.Uint64("seed", 0, "seed of the fault schedule and the workload (0: pick one and print it)")
	fs.DurationVar(&cfg.Duration, "duration", 60*time.Second, "how long the workload runs under faults")
	fs.StringVar(&cfg.AgBin, "ag", "", "the ag binary (default: go build ./cmd/ag into the run's directory)")
	fs.StringVar(&cfg.WorkerBin, "ag-worker", "", "the ag-worker binary (default: go build ./cmd/ag-worker)")
	fs.IntVar(&cfg.Replicas, "replicas", 3, "ag serve replicas")
	fs.IntVar(&cfg.Workers, "workers", 3, "ag-worker processes")
	fs.IntVar(&cfg.Agents, "agents", 4, "agents (at least 2)")
	fs.IntVar(&cfg.RecordedWorkers, "recorded-workers", 2, "in-process workers whose every request is recorded")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the run's directory (logs, history.jsonl, keys) for inspection")
	fs.BoolVar(&cfg.Verbose, "v", false, "print a line per fault and phase")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ag-chaos: unexpected arguments: %v\n", fs.Args())
		return 2
	}
	cfg.Seed = *seed
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()%1_000_000 + 1
	}
	cfg.Out = stdout
	cfg.KeepOnViolation = true // the logs and the history are what a violation is explained by
	fmt.Fprintf(stdout, "ag-chaos: seed %d, workload %v; schedule:\n", cfg.Seed, cfg.Duration)
	for _, f := range Schedule(cfg.Seed, cfg.Duration, max(cfg.Replicas, 1), max(cfg.Workers, 1), max(cfg.Agents, 2)) {
		fmt.Fprintf(stdout, "  %s\n", f)
	}
	rep, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "ag-chaos: %v\n", err)
		return 2
	}
	fmt.Fprintln(stdout)
	rep.Print(stdout)
	if !rep.OK() {
		return 1
	}
	return 0
}
