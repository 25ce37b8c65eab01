// Command gate measures the integration queue of a repository under a validation policy: how
// long changes submitted at once take to be final (integrated, or rejected when they fail
// validation) when each validation takes a fixed time and several workers validate. Each round
// starts a fresh `ag serve` (SQLite, or a new PostgreSQL database with --db), imports a
// repository of one file per change, sets the policy `sh -c "sleep SECONDS; test ! -e fail"`
// (with --depth and --batch when given), starts the `ag-worker` processes, has the agents lease
// their files, submits every change at once through the Go SDK, and times until the last one
// is final. It prints each round and the median.
//
// With --fail N, N changes spread over the submission (the middle one for N=1) also write a
// marker file of their own, fail/fNNN.txt: the validation fails in every tree that holds one,
// so a candidate fails exactly when it includes a failing change, wherever in the queue it
// sits. Each round checks that exactly the failing changes were rejected, by a failed
// validation, and the others integrated, and fails otherwise.
//
// The ideal of a round is what a queue without overhead needs: the rounds of validation the
// queue's own rules (gate.RunQueue) take, played with every validation taking --validate and
// nothing else taking any time, times --validate (ideal.go). It follows the depth (the
// policy's, else the workers, at most --gate-max-depth or the server's default), the batch,
// the workers, and, with --fail, where the failing changes landed in the queue, which the
// server decides (the changes arrive at once): it is worked out per round from the queue order
// the server kept. The queue's overhead per change is the time to all final minus that ideal,
// divided by the changes: what the server (queue advances, claims), the workers (fetching the
// tree, the checkout, the attestation) and the polling of this program add to the sleeps.
// Validate jobs are those the server created in the round (each candidate's, including the
// ones cancelled when their candidate was rebuilt), beside the ideal queue's. Server CPU is the
// user and system time of the ag serve process from the first submission to the last change
// final (/proc/PID/stat), divided by the changes; PostgreSQL's own processes are not in it.
//
//	go build -o /tmp/ag ./cmd/ag && go build -o /tmp/ag-worker ./cmd/ag-worker
//	go run ./bench/gate --ag /tmp/ag --worker /tmp/ag-worker --workers 4 --changes 12 --validate 2s
//	go run ./bench/gate --ag /tmp/ag --worker /tmp/ag-worker --fail 1 --db postgres://...
//
// With --lanes N, change i writes laneK/fNNN.txt, K = i mod N, and the policy declares each
// laneK/ a lane (ADR-0024) whose command, laneK/check.sh, sleeps that lane's --lane-validate and
// fails when laneK/fail/ exists; the policy's own command, check.sh, runs every lane's check at
// once. With --lanes-undeclared the files and scripts are the same but the policy declares no
// lane, so every candidate runs check.sh on the whole tree: the same run without lanes. Each
// round then prints, instead of the ideal, when each lane's last change was final.
//
//	go run ./bench/gate --ag /tmp/ag --worker /tmp/ag-worker --lanes 2 --lane-validate 1s,6s
//
// With --db, every round gets a new database on that URL's server (CREATE DATABASE, dropped
// after the round), so the role of the URL must be allowed to create databases.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/bench/internal/agserve"
	"github.com/ag-coord/ag/bench/internal/pgdb"
	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/gate"
)

type options struct {
	ag, worker       string
	workers, changes int
	agents, rounds   int
	validate         time.Duration
	port             int
	fail             int
	depth, batch     int
	gateMaxDepth     int
	db               string // "" = a new SQLite file per round; else a PostgreSQL URL whose server gets a new database per round
	logs             string // a directory for each round's ag serve (level info) and ag-worker logs, or ""
	lanes            layout
	undeclared       bool            // --lanes-undeclared: the lanes' files and scripts, but no lane in the policy
	laneValidate     []time.Duration // each lane's validation
}

// layout is where the changes' files are: f000.txt, ... at the top, or, with lanes,
// lane0/f000.txt, lane1/f001.txt, ...
type layout struct{ lanes int }

func (l layout) dir(i int) string {
	if l.lanes == 0 {
		return ""
	}
	return fmt.Sprintf("lane%d/", i%l.lanes)
}

func (l layout) file(i int) string { return l.dir(i) + fmt.Sprintf("f%03d.txt", i) }

// marker is the file a failing change adds: the validation fails in a tree that has fail/ (in
// its lane's directory, with lanes).
func (l layout) marker(i int) string { return l.dir(i) + "fail/" + fmt.Sprintf("f%03d.txt", i) }

// paths answers what change i leases and writes: its file, and its marker when it fails.
func (l layout) paths(i int, fails []bool) []string {
	if fails[i] {
		return []string{l.file(i), l.marker(i)}
	}
	return []string{l.file(i)}
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
	flag.IntVar(&o.fail, "fail", 0, "changes, spread over the submission, that fail validation (each adds a marker file the validation fails on)")
	flag.IntVar(&o.depth, "depth", 0, "the policy's depth (ag repo set-validation --depth); 0: none, the server follows the workers")
	flag.IntVar(&o.batch, "batch", 0, "the policy's batch (ag repo set-validation --batch); 0: none, one change a candidate")
	flag.IntVar(&o.gateMaxDepth, "gate-max-depth", 0, "ag serve --gate-max-depth; 0: the server's default")
	flag.StringVar(&o.db, "db", "", "a PostgreSQL URL: each round gets a new database on its server (CREATE DATABASE); default a new SQLite file per round")
	flag.IntVar(&o.lanes.lanes, "lanes", 0, "spread the changes over this many directories, each a lane of the policy (0: none)")
	flag.BoolVar(&o.undeclared, "lanes-undeclared", false, "with --lanes: the same files and scripts, but the policy declares no lane")
	laneValidate := flag.String("lane-validate", "", "with --lanes: each lane's validation, comma-separated (default --validate for each)")
	flag.StringVar(&o.logs, "logs", "", "write each round's ag serve log, at level info, to DIR/round-N.log and each ag-worker's to DIR/round-N-wK.log (default: the server's warnings to standard error)")
	flag.Parse()
	if o.ag == "" || o.worker == "" {
		return errors.New("--ag and --worker: name the binaries to measure")
	}
	if o.workers < 1 || o.changes < 1 || o.agents < 1 || o.rounds < 1 {
		return errors.New("--workers, --changes, --agents, --rounds: at least 1")
	}
	if o.fail < 0 || o.fail > o.changes {
		return fmt.Errorf("--fail: 0 to --changes (%d)", o.changes)
	}
	if o.depth < 0 || o.batch < 0 || o.gateMaxDepth < 0 {
		return errors.New("--depth, --batch, --gate-max-depth: 0 (the default) or more")
	}
	if o.lanes.lanes < 0 || o.lanes.lanes > gate.MaxLanes {
		return fmt.Errorf("--lanes: 0 to %d", gate.MaxLanes)
	}
	if o.lanes.lanes == 0 && (o.undeclared || *laneValidate != "") {
		return errors.New("--lanes-undeclared and --lane-validate need --lanes")
	}
	for k := range o.lanes.lanes {
		o.laneValidate = append(o.laneValidate, o.validate)
		if *laneValidate != "" {
			parts := strings.Split(*laneValidate, ",")
			if len(parts) != o.lanes.lanes {
				return fmt.Errorf("--lane-validate: %d durations for %d lanes", len(parts), o.lanes.lanes)
			}
			d, err := time.ParseDuration(parts[k])
			if err != nil || d < 0 {
				return fmt.Errorf("--lane-validate: %q is not a duration", parts[k])
			}
			o.laneValidate[k] = d
		}
	}
	if o.db != "" && !strings.HasPrefix(o.db, "postgres://") && !strings.HasPrefix(o.db, "postgresql://") {
		return fmt.Errorf("--db: %q is not a postgres:// URL (SQLite is the default, a new file per round)", o.db)
	}
	store := "SQLite"
	if o.db != "" {
		store = "PostgreSQL"
	}
	fails := failing(o.changes, o.fail)
	var names []string
	for i, f := range fails {
		if f {
			names = append(names, o.lanes.file(i))
		}
	}
	depth := o.depth
	shape := fmt.Sprintf("depth %d", depth)
	if depth == 0 {
		limit := o.gateMaxDepth
		if limit == 0 {
			limit = gate.DefaultMaxDepth
		}
		depth = min(o.workers, limit)
		shape = fmt.Sprintf("depth automatic: %d (the %d workers, at most %d)", depth, o.workers, limit)
	}
	batch := max(o.batch, 1)
	shape += fmt.Sprintf(", batch %d", batch)
	workersBound := time.Duration(o.changes) * o.validate / time.Duration(o.workers*batch)
	fmt.Printf("ag: %s\n", agserve.Version(o.ag))
	if o.lanes.lanes > 0 {
		return runLanes(o, fails, names, shape, store)
	}
	fmt.Printf("%d changes from %d agents submitted at once, validation `%s` (%s), %d workers, %s, %s",
		o.changes, o.agents, validation(o.validate), o.validate, o.workers, shape, store)
	if len(names) > 0 {
		fmt.Printf("; %d failing (%s)", len(names), strings.Join(names, ", "))
	}
	fmt.Printf("; the workers' bound (changes × validation ÷ workers ÷ batch) %s\n\n", agserve.Seconds(workersBound))
	final := "all integrated after"
	if o.fail > 0 {
		final = "all final after"
	}
	fmt.Printf("| round | %s | changes/min | against the ideal | ideal | depth | validate jobs | queue overhead per change | server CPU per change |\n", final)
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	var all []result
	for r := range o.rounds {
		res, err := round(o, r+1, fails, depth, batch)
		if res != nil {
			all = append(all, *res)
			fmt.Println(res.row(fmt.Sprint(r + 1)))
		}
		if err != nil {
			return fmt.Errorf("round %d: %w", r+1, err)
		}
	}
	fmt.Println(median(all).row("median"))
	return nil
}

// failing answers which of n changes fail when k do: k spread evenly, each in the middle of its
// share (the middle one for k=1).
func failing(n, k int) []bool {
	f := make([]bool, n)
	for j := range k {
		f[(2*j+1)*n/(2*k)] = true
	}
	return f
}

// result is one round's measurements.
type result struct {
	took      time.Duration   // from the first submission to the last change final
	ideal     time.Duration   // the ideal queue's rounds × the validation
	rounds    int             // the ideal queue's rounds
	failingAt []int           // the failing changes' places in the queue, from 1
	idealJobs int             // the validate jobs of the ideal queue
	jobs      int             // the validate jobs the server created
	cancelled int             // of those, cancelled (their candidate rebuilt)
	depth     int             // the depth GetQueue answered after the submissions
	changes   int             // submitted
	overhead  time.Duration   // (took − ideal) ÷ changes
	cpu       time.Duration   // the server's CPU over took, ÷ changes
	laneFinal []time.Duration // with --lanes: from the first submission to each lane's last change final
}

func (r result) row(name string) string {
	jobs := fmt.Sprintf("%d (ideal %d)", r.jobs, r.idealJobs)
	if r.cancelled > 0 {
		jobs = fmt.Sprintf("%d (ideal %d; %d cancelled)", r.jobs, r.idealJobs, r.cancelled)
	}
	ideal := fmt.Sprintf("%s (%d rounds)", agserve.Seconds(r.ideal), r.rounds)
	if len(r.failingAt) > 0 {
		at := make([]string, len(r.failingAt))
		for i, k := range r.failingAt {
			at[i] = fmt.Sprint(k)
		}
		ideal = fmt.Sprintf("%s (%d rounds; failing %s in the queue)", agserve.Seconds(r.ideal), r.rounds, strings.Join(at, ", "))
	}
	return fmt.Sprintf("| %s | %s | %.1f | %.2f× | %s | %d | %s | %s | %s |", name, agserve.Seconds(r.took),
		float64(r.changes)/r.took.Minutes(), r.took.Seconds()/r.ideal.Seconds(), ideal, r.depth, jobs,
		millis(r.overhead), millis(r.cpu))
}

func millis(d time.Duration) string {
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

// median answers every column's own median over rounds.
func median(rs []result) result {
	mid := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	d := func(f func(result) time.Duration) time.Duration {
		return time.Duration(mid(func(r result) float64 { return float64(f(r)) }))
	}
	n := func(f func(result) int) int { return int(mid(func(r result) float64 { return float64(f(r)) })) }
	return result{
		took:      d(func(r result) time.Duration { return r.took }),
		ideal:     d(func(r result) time.Duration { return r.ideal }),
		rounds:    n(func(r result) int { return r.rounds }),
		idealJobs: n(func(r result) int { return r.idealJobs }),
		jobs:      n(func(r result) int { return r.jobs }),
		cancelled: n(func(r result) int { return r.cancelled }),
		depth:     n(func(r result) int { return r.depth }),
		changes:   rs[0].changes,
		overhead:  d(func(r result) time.Duration { return r.overhead }),
		cpu:       d(func(r result) time.Duration { return r.cpu }),
	}
}

// round runs round n on a fresh server and answers what it measured; with an error after the
// measurement (a change that ended otherwise than it should), both.
func round(o options, n int, fails []bool, depth, batch int) (*result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "ag-gate-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	db := "sqlite:" + filepath.Join(dir, "ag.db")
	if o.db != "" {
		u, drop, err := pgdb.Create(ctx, o.db, fmt.Sprintf("ag_gate_%d_%d", os.Getpid(), n))
		if err != nil {
			return nil, err
		}
		defer drop() // after the server stopped, deferred below
		db = u
	}
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}()
	logFile := func(name string) (io.Writer, error) {
		if o.logs == "" {
			return nil, nil
		}
		if err := os.MkdirAll(o.logs, 0o755); err != nil {
			return nil, err
		}
		f, err := os.Create(filepath.Join(o.logs, fmt.Sprintf("round-%d%s.log", n, name)))
		if err != nil {
			return nil, err
		}
		closers = append(closers, f)
		return f, nil
	}
	log, err := logFile("")
	if err != nil {
		return nil, err
	}
	srv, err := startServer(ctx, o.ag, db, dir, o.port, o.gateMaxDepth, log)
	if err != nil {
		return nil, err
	}
	defer srv.stop()

	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, err
	}
	for i := range o.changes {
		if err := os.MkdirAll(filepath.Join(src, o.lanes.dir(i)), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(src, o.lanes.file(i)), fmt.Appendf(nil, "file %d\n", i), 0o644); err != nil {
			return nil, err
		}
	}
	for name, script := range laneScripts(o) {
		if err := os.WriteFile(filepath.Join(src, name), []byte(script), 0o644); err != nil {
			return nil, err
		}
	}
	if err := srv.run("repo", "import", "app", src); err != nil {
		return nil, err
	}
	policy := []string{"repo", "set-validation", "app"}
	if o.depth > 0 {
		policy = append(policy, "--depth", fmt.Sprint(o.depth))
	}
	if o.batch > 0 {
		policy = append(policy, "--batch", fmt.Sprint(o.batch))
	}
	if o.lanes.lanes == 0 {
		policy = append(policy, "--", "sh", "-c", validation(o.validate))
	} else {
		if !o.undeclared {
			for k := range o.lanes.lanes {
				policy = append(policy, "--lane", fmt.Sprintf("lane%d=lane%d/:sh lane%d/check.sh", k, k, k))
			}
		}
		policy = append(policy, "--", "sh", "check.sh")
	}
	if err := srv.run(policy...); err != nil {
		return nil, err
	}
	admin := client.New(srv.url, srv.token)
	ci, err := admin.Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: "ci", Role: agwpv1.Role_ROLE_WORKER})
	if err != nil {
		return nil, err
	}
	var workers []*exec.Cmd
	defer func() {
		for _, w := range workers {
			_ = w.Process.Signal(os.Interrupt)
			_ = w.Wait()
		}
	}()
	for i := range o.workers {
		label := fmt.Sprintf("w%d", i)
		log, err := logFile("-" + label)
		if err != nil {
			return nil, err
		}
		w, err := startWorker(ctx, o, dir, srv.url, ci.GetToken(), label, log)
		if err != nil {
			return nil, err
		}
		workers = append(workers, w)
	}

	agents := make([]*client.Client, o.agents)
	for i := range agents {
		p, err := admin.Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: fmt.Sprintf("agent%d", i), Role: agwpv1.Role_ROLE_AGENT})
		if err != nil {
			return nil, err
		}
		agents[i] = client.New(srv.url, p.GetToken())
	}
	repo, err := admin.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: "app"})
	if err != nil {
		return nil, err
	}
	base := repo.GetRepository().GetMainline()
	tokens := make([]uint64, o.changes)
	for i := range o.changes {
		l, err := agents[i%o.agents].AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: o.lanes.paths(i, fails), Holder: "bench", TTL: time.Hour})
		if err != nil {
			return nil, err
		}
		tokens[i] = l.GetFencingToken()
	}

	cpu0, err := srv.cpu()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ids := make([]string, o.changes)
	errs := make([]error, o.changes)
	var wg sync.WaitGroup
	for i := range o.changes {
		wg.Go(func() {
			edits := []client.FileChange{{Path: o.lanes.file(i), Content: fmt.Appendf(nil, "file %d, edited\n", i)}}
			if fails[i] {
				edits = append(edits, client.FileChange{Path: o.lanes.marker(i), Content: []byte("this change fails validation\n")})
			}
			ch, err := agents[i%o.agents].IntegrateFiles(ctx, client.IntegrateOptions{
				Repository: "app", BaseRevision: base, Holder: "bench", FencingTokens: []uint64{tokens[i]},
				Message: fmt.Sprintf("change %d", i), Changes: edits,
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
		return nil, err
	}
	q, err := admin.Repos.GetQueue(ctx, &agwpv1.GetQueueRequest{Repository: "app"})
	if err != nil {
		return nil, err
	}
	ended := make([]*agwpv1.Change, o.changes)
	for i, id := range ids {
		for {
			res, err := admin.Repos.GetChange(ctx, &agwpv1.GetChangeRequest{ChangeId: id, Wait: durationpb.New(30 * time.Second)})
			if err != nil {
				return nil, err
			}
			st := res.GetChange().GetState()
			if st != agwpv1.ChangeState_CHANGE_STATE_QUEUED && st != agwpv1.ChangeState_CHANGE_STATE_VALIDATING {
				ended[i] = res.GetChange()
				break
			}
		}
	}
	took := time.Since(start)
	cpu1, err := srv.cpu()
	if err != nil {
		return nil, err
	}

	jobs, cancelled, err := validateJobs(ctx, admin)
	if err != nil {
		return nil, err
	}
	if o.lanes.lanes > 0 {
		res := &result{took: took, jobs: jobs, cancelled: cancelled, depth: int(q.GetDepth()), changes: o.changes,
			cpu: (cpu1 - cpu0) / time.Duration(o.changes), laneFinal: make([]time.Duration, o.lanes.lanes)}
		for i, c := range ended {
			k := i % o.lanes.lanes
			res.laneFinal[k] = max(res.laneFinal[k], c.GetUpdatedAt().AsTime().Sub(start))
		}
		return res, check(ended, fails)
	}
	order, err := queueOrder(ctx, admin, ids)
	if err != nil {
		return nil, err
	}
	inQueue := make([]bool, len(order))
	var failingAt []int
	for k, i := range order {
		inQueue[k] = fails[i]
		if fails[i] {
			failingAt = append(failingAt, k+1)
		}
	}
	p, err := ideal(schedule{fails: inQueue, depth: depth, batch: batch, workers: o.workers})
	if err != nil {
		return nil, err
	}
	res := &result{
		took: took, ideal: time.Duration(p.rounds) * o.validate, rounds: p.rounds, failingAt: failingAt, idealJobs: p.jobs,
		jobs: jobs, cancelled: cancelled, depth: int(q.GetDepth()), changes: o.changes,
		overhead: (took - time.Duration(p.rounds)*o.validate) / time.Duration(o.changes),
		cpu:      (cpu1 - cpu0) / time.Duration(o.changes),
	}
	return res, check(ended, fails)
}

// check answers an error naming every change that did not end as it should: rejected by a
// failed validation when it fails, integrated otherwise.
func check(ended []*agwpv1.Change, fails []bool) error {
	var errs []error
	for i, c := range ended {
		st := c.GetState()
		switch {
		case fails[i] && st != agwpv1.ChangeState_CHANGE_STATE_REJECTED:
			errs = append(errs, fmt.Errorf("change %d (%s), which fails validation, ended %s", i, c.GetId(), st))
		case fails[i] && !strings.HasPrefix(c.GetReason(), "validation failed"):
			errs = append(errs, fmt.Errorf("change %d (%s) was rejected, but not by its validation: %s", i, c.GetId(), c.GetReason()))
		case !fails[i] && st != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED:
			errs = append(errs, fmt.Errorf("change %d (%s) ended %s: %s", i, c.GetId(), st, c.GetReason()))
		}
	}
	return errors.Join(errs...)
}

// queueOrder answers the submission indexes of ids in the order of the repository's queue
// (ListChanges answers newest first).
func queueOrder(ctx context.Context, admin *client.Client, ids []string) ([]int, error) {
	index := make(map[string]int, len(ids))
	for i, id := range ids {
		index[id] = i
	}
	var order []int
	token := ""
	for {
		res, err := admin.Repos.ListChanges(ctx, &agwpv1.ListChangesRequest{Repository: "app", PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, err
		}
		for _, c := range res.GetChanges() {
			if i, ok := index[c.GetId()]; ok {
				order = append(order, i)
			}
		}
		if token = res.GetNextPageToken(); token == "" {
			break
		}
	}
	if len(order) != len(ids) {
		return nil, fmt.Errorf("ListChanges answered %d of the %d changes", len(order), len(ids))
	}
	slices.Reverse(order)
	return order, nil
}

// validateJobs answers how many validate jobs the server holds, and how many of them were
// cancelled.
func validateJobs(ctx context.Context, admin *client.Client) (all, cancelled int, err error) {
	token := ""
	for {
		res, err := admin.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{PageSize: 1000, PageToken: token, Kinds: []string{"validate"}})
		if err != nil {
			return 0, 0, err
		}
		for _, j := range res.GetJobs() {
			all++
			if j.GetState() == agwpv1.JobState_JOB_STATE_CANCELLED {
				cancelled++
			}
		}
		if token = res.GetNextPageToken(); token == "" {
			return all, cancelled, nil
		}
	}
}

// validation is the script the policy runs: it takes d, and fails when the tree holds the
// marker of a failing change.
func validation(d time.Duration) string {
	return fmt.Sprintf("sleep %g; test ! -e fail", d.Seconds())
}

// startWorker starts an ag-worker that runs validate jobs, and answers once it has started;
// with log, its log goes there.
func startWorker(ctx context.Context, o options, dir, url, token, label string, log io.Writer) (*exec.Cmd, error) {
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
			if log != nil {
				fmt.Fprintln(log, sc.Text())
			}
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

// laneScripts answers the validation scripts of a --lanes repository: laneK/check.sh, which
// takes that lane's time and fails when laneK/fail/ exists, and check.sh, the policy's own,
// which runs them all at once and fails when one does, as a whole-tree CI running the suites
// side by side would.
func laneScripts(o options) map[string]string {
	if o.lanes.lanes == 0 {
		return nil
	}
	scripts := map[string]string{}
	var all strings.Builder
	all.WriteString("pids=\n")
	for k := range o.lanes.lanes {
		scripts[fmt.Sprintf("lane%d/check.sh", k)] = fmt.Sprintf("sleep %g\ntest ! -e lane%d/fail\n", o.laneValidate[k].Seconds(), k)
		fmt.Fprintf(&all, "sh lane%d/check.sh & pids=\"$pids $!\"\n", k)
	}
	all.WriteString("status=0\nfor p in $pids; do wait $p || status=1; done\nexit $status\n")
	scripts["check.sh"] = all.String()
	return scripts
}

// runLanes runs the rounds of a --lanes measurement and prints when each lane was final.
func runLanes(o options, fails []bool, names []string, shape, store string) error {
	declared := "declared"
	if o.undeclared {
		declared = "not declared: every candidate runs check.sh, all lanes at once, on the whole tree"
	}
	var times []string
	for k, d := range o.laneValidate {
		times = append(times, fmt.Sprintf("lane%d %s", k, d))
	}
	fmt.Printf("%d changes from %d agents submitted at once over %d lanes (%s), %s; validation %s; %d workers, %s, %s",
		o.changes, o.agents, o.lanes.lanes, strings.Join(times, ", "), declared, "`sh laneK/check.sh`", o.workers, shape, store)
	if len(names) > 0 {
		fmt.Printf("; %d failing (%s)", len(names), strings.Join(names, ", "))
	}
	fmt.Print("\n\n| round | all final after |")
	for k := range o.lanes.lanes {
		fmt.Printf(" lane%d final after |", k)
	}
	fmt.Println(" validate jobs | server CPU per change |")
	fmt.Print("| --- | --- |")
	for range o.lanes.lanes {
		fmt.Print(" --- |")
	}
	fmt.Println(" --- | --- |")
	var all []result
	row := func(name string, r result) {
		fmt.Printf("| %s | %s |", name, agserve.Seconds(r.took))
		for _, d := range r.laneFinal {
			fmt.Printf(" %s |", agserve.Seconds(d))
		}
		jobs := fmt.Sprint(r.jobs)
		if r.cancelled > 0 {
			jobs = fmt.Sprintf("%d (%d cancelled)", r.jobs, r.cancelled)
		}
		fmt.Printf(" %s | %s |\n", jobs, millis(r.cpu))
	}
	for r := range o.rounds {
		res, err := round(o, r+1, fails, 0, 0)
		if res != nil {
			all = append(all, *res)
			row(fmt.Sprint(r+1), *res)
		}
		if err != nil {
			return fmt.Errorf("round %d: %w", r+1, err)
		}
	}
	m := median(all)
	m.laneFinal = make([]time.Duration, o.lanes.lanes)
	for k := range m.laneFinal {
		v := make([]time.Duration, len(all))
		for i, r := range all {
			v[i] = r.laneFinal[k]
		}
		slices.Sort(v)
		m.laneFinal[k] = v[len(v)/2]
	}
	row("median", m)
	return nil
}
