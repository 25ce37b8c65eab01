// Command gate measures the integration queue of a repository under a validation policy: how
// long changes submitted at once take to reach the mainline when each validation takes a fixed
// time and several workers validate. Each round starts a fresh `ag serve` (SQLite), imports a
// repository of one file per change, sets the policy `sh -c "sleep SECONDS"`, starts the
// `ag-worker` processes, has the agents lease their files, submits every change at once through
// the Go SDK, and times until the last one is integrated. It prints each round, the median, and
// the ideal: changes × validation ÷ workers.
//
//	go build -o /tmp/ag ./cmd/ag && go build -o /tmp/ag-worker ./cmd/ag-worker
//	go run ./bench/gate --ag /tmp/ag --worker /tmp/ag-worker --workers 4 --changes 12 --validate 2s
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/bench/internal/agserve"
	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

type options struct {
	ag, worker       string
	workers, changes int
	agents, rounds   int
	validate         time.Duration
	port             int
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gate bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var o options
	flag.StringVar(&o.ag, "ag", "", "the ag binary (required)")
	flag.StringVar(&o.worker, "worker", "", "the ag-worker binary (required)")
	flag.IntVar(&o.workers, "workers", 4, "ag-worker processes, one validation at a time each")
	flag.IntVar(&o.changes, "changes", 12, "changes submitted at once, one file each")
	flag.IntVar(&o.agents, "agents", 4, "agents the changes come from, in turn")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds, each on a fresh server (the median is printed)")
	flag.DurationVar(&o.validate, "validate", 2*time.Second, "how long each validation takes (sleep)")
	flag.IntVar(&o.port, "port", 7795, "the port ag serve listens on")
	flag.Parse()
	if o.ag == "" || o.worker == "" {
		return errors.New("--ag and --worker: name the binaries to measure")
	}
	if o.workers < 1 || o.changes < 1 || o.agents < 1 || o.rounds < 1 {
		return errors.New("--workers, --changes, --agents, --rounds: at least 1")
	}
	ideal := time.Duration(o.changes) * o.validate / time.Duration(o.workers)
	fmt.Printf("ag: %s\n", agserve.Version(o.ag))
	fmt.Printf("%d changes from %d agents submitted at once, validation `sleep %s`, %d workers; ideal %s\n\n",
		o.changes, o.agents, o.validate, o.workers, ideal)
	fmt.Println("| round | all integrated after | changes/min | against the ideal |")
	fmt.Println("| --- | --- | --- | --- |")
	var took []time.Duration
	for r := range o.rounds {
		d, err := round(o)
		if err != nil {
			return fmt.Errorf("round %d: %w", r+1, err)
		}
		took = append(took, d)
		fmt.Printf("| %d | %s | %.1f | %.2f× |\n", r+1, agserve.Seconds(d), float64(o.changes)/d.Minutes(), d.Seconds()/ideal.Seconds())
	}
	slices.Sort(took)
	m := took[len(took)/2]
	fmt.Printf("| median | %s | %.1f | %.2f× |\n", agserve.Seconds(m), float64(o.changes)/m.Minutes(), m.Seconds()/ideal.Seconds())
	return nil
}

// round runs one round on a fresh server and answers how long the changes took to land.
func round(o options) (time.Duration, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "ag-gate-bench-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	srv, err := agserve.Start(ctx, o.ag, "sqlite:"+filepath.Join(dir, "ag.db"), dir, o.port)
	if err != nil {
		return 0, err
	}
	defer srv.Stop()

	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return 0, err
	}
	for i := range o.changes {
		if err := os.WriteFile(filepath.Join(src, fileName(i)), fmt.Appendf(nil, "file %d\n", i), 0o644); err != nil {
			return 0, err
		}
	}
	if _, err := srv.AG("repo", "import", "app", src); err != nil {
		return 0, err
	}
	// Not through srv.AG, which puts --server and --token last: here they would be the command.
	policy := exec.Command(o.ag, "repo", "set-validation", "app", "--server", srv.URL, "--token", srv.Token,
		"--", "sh", "-c", fmt.Sprintf("sleep %g", o.validate.Seconds()))
	if out, err := policy.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("ag repo set-validation: %w\n%s", err, out)
	}
	admin := client.New(srv.URL, srv.Token)
	ci, err := admin.Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: "ci", Role: agwpv1.Role_ROLE_WORKER})
	if err != nil {
		return 0, err
	}
	var workers []*exec.Cmd
	defer func() {
		for _, w := range workers {
			_ = w.Process.Signal(os.Interrupt)
			_ = w.Wait()
		}
	}()
	for i := range o.workers {
		w, err := startWorker(ctx, o, dir, srv.URL, ci.GetToken(), fmt.Sprintf("w%d", i))
		if err != nil {
			return 0, err
		}
		workers = append(workers, w)
	}

	agents := make([]*client.Client, o.agents)
	for i := range agents {
		p, err := admin.Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: fmt.Sprintf("agent%d", i), Role: agwpv1.Role_ROLE_AGENT})
		if err != nil {
			return 0, err
		}
		agents[i] = client.New(srv.URL, p.GetToken())
	}
	repo, err := admin.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: "app"})
	if err != nil {
		return 0, err
	}
	base := repo.GetRepository().GetMainline()
	tokens := make([]uint64, o.changes)
	for i := range o.changes {
		l, err := agents[i%o.agents].AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{fileName(i)}, Holder: "bench", TTL: time.Hour})
		if err != nil {
			return 0, err
		}
		tokens[i] = l.GetFencingToken()
	}

	start := time.Now()
	ids := make([]string, o.changes)
	errs := make([]error, o.changes)
	var wg sync.WaitGroup
	for i := range o.changes {
		wg.Go(func() {
			ch, err := agents[i%o.agents].IntegrateFiles(ctx, client.IntegrateOptions{
				Repository: "app", BaseRevision: base, Holder: "bench", FencingTokens: []uint64{tokens[i]},
				Message: fmt.Sprintf("change %d", i), Changes: []client.FileChange{{Path: fileName(i), Content: fmt.Appendf(nil, "file %d, edited\n", i)}},
			})
			if err != nil {
				errs[i] = err
				return
			}
			ids[i] = ch.GetId()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	for i, id := range ids {
		for {
			res, err := admin.Repos.GetChange(ctx, &agwpv1.GetChangeRequest{ChangeId: id, Wait: durationpb.New(30 * time.Second)})
			if err != nil {
				return 0, err
			}
			st := res.GetChange().GetState()
			if st == agwpv1.ChangeState_CHANGE_STATE_INTEGRATED {
				break
			}
			if st != agwpv1.ChangeState_CHANGE_STATE_QUEUED && st != agwpv1.ChangeState_CHANGE_STATE_VALIDATING {
				return 0, fmt.Errorf("change %d (%s) ended %s: %s", i, id, st, res.GetChange().GetReason())
			}
		}
	}
	return time.Since(start), nil
}

func fileName(i int) string { return fmt.Sprintf("f%03d.txt", i) }

// startWorker starts an ag-worker that runs validate jobs, and answers once it has started.
func startWorker(ctx context.Context, o options, dir, url, token, label string) (*exec.Cmd, error) {
	wdir := filepath.Join(dir, label)
	if err := os.MkdirAll(wdir, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, o.worker, "--server", url, "--token", token, "--label", label,
		"--key", filepath.Join(wdir, "worker.key"), "--kinds", "validate", "--work-dir", wdir,
		"--cache-dir", filepath.Join(wdir, "cache"), "--lease", "10s", "--wait", "5s")
	cmd.Dir = wdir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	started := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		said := false
		for sc.Scan() {
			if !said && strings.Contains(sc.Text(), `msg="ag-worker started"`) {
				said = true
				started <- true
			}
		}
		if !said {
			started <- false
		}
	}()
	select {
	case ok := <-started:
		if !ok {
			_ = cmd.Wait()
			return nil, fmt.Errorf("ag-worker %s exited at start", label)
		}
		return cmd, nil
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("ag-worker %s did not start within a minute", label)
	}
}
