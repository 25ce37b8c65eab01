// Command auditcost measures what the audit log costs claim+complete over the API
// (docs/benchmarks.md). It builds the server benchmark twice, with the log and without it
// (-tags agbench_noaudit), starts one of each, and once both have enqueued their jobs runs them
// in turns of -turn, the other one stopped (SIGSTOP) meanwhile: on PostgreSQL, its private
// cluster too, whose background work would otherwise run in the other build's turn. A turn's throughput is read
// from the progress the benchmark reports (AG_BENCH_CONTROL, internal/server), leaving out the
// first -warm of the turn; a round is a turn of each build, and its cost is 1 - with/without.
//
// Whole runs of each build, alternated, drifted apart by as much as the cost they measured on
// this project's machines: the machine's speed moves over minutes. Turns of a few seconds see
// the same machine.
//
// With -against DIR, the other build is not this tree without the log but the tree in DIR (a
// checkout of another commit, git worktree add DIR COMMIT) with its log: what a change to the
// log costs or saves, measured as side by side as the log itself. Two series of the same code
// measured minutes apart have differed by several points, more than the change being judged.
//
//	go run ./internal/tools/auditcost [-backend sqlite] [-rounds 30] [-turn 2s] [-warm 300ms] [-jobs 800000] [-cpu 3] [-against DIR]
//
// It needs a quiet machine: anything else running is charged to whichever build has its turn.
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
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.backend, "backend", "sqlite", "the store: sqlite or postgres")
	flag.IntVar(&o.rounds, "rounds", 30, "rounds: a turn of each build")
	flag.DurationVar(&o.turn, "turn", 2*time.Second, "how long a build runs in its turn")
	flag.DurationVar(&o.warm, "warm", 300*time.Millisecond, "the start of a turn that is not measured")
	flag.IntVar(&o.jobs, "jobs", 800_000, "jobs each build enqueues before the turns begin; the rounds end early when a build runs short")
	flag.IntVar(&o.cpu, "cpu", 3, "Go processors of each build (-test.cpu)")
	flag.StringVar(&o.against, "against", "", "a checkout of another commit, whose build with the log takes the place of the build without it")
	flag.Parse()
	if o.backend != "sqlite" && o.backend != "postgres" {
		fail(fmt.Errorf("-backend: sqlite or postgres, not %q", o.backend))
	}
	if o.rounds < 1 || o.jobs < 1 || o.cpu < 1 {
		fail(fmt.Errorf("-rounds, -jobs and -cpu must be positive, not %d, %d and %d", o.rounds, o.jobs, o.cpu))
	}
	if o.against != "" {
		if _, err := os.Stat(filepath.Join(o.against, "internal", "server")); err != nil {
			fail(fmt.Errorf("-against %s: not a checkout of this project: %w", o.against, err))
		}
	}
	if o.warm < 0 || o.turn <= o.warm+2*progressEvery {
		fail(fmt.Errorf("-turn %v leaves nothing to measure after -warm %v: it must be longer by %v at least (two progress reports)",
			o.turn, o.warm, 2*progressEvery))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "auditcost:", err)
	os.Exit(1)
}

type options struct {
	backend      string
	rounds, jobs int
	cpu          int
	turn, warm   time.Duration
	against      string // a checkout whose build with the log is the one compared with
}

// otherName names the build compared with.
func (o options) otherName() string {
	if o.against != "" {
		return o.against
	}
	return "without (noaudit)"
}

// progressEvery is how often the benchmark reports its progress (internal/server).
const progressEvery = 50 * time.Millisecond

func run(ctx context.Context, o options) error {
	work, err := os.MkdirTemp("", "auditcost")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	fmt.Fprintln(os.Stderr, "building both builds of the server benchmark")
	builds := []*build{
		{name: "with the log", binary: filepath.Join(work, "audit.test")},
		{name: o.otherName(), binary: filepath.Join(work, "other.test"), tags: "agbench_noaudit"},
	}
	if o.against != "" {
		builds[1].tags, builds[1].dir = "", o.against
	}
	for _, b := range builds {
		args := []string{"test", "-c", "-o", b.binary}
		if b.tags != "" {
			args = append(args, "-tags", b.tags)
		}
		cmd := exec.CommandContext(ctx, "go", append(args, "./internal/server/")...)
		cmd.Dir = b.dir
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build %s: %w", b.name, err)
		}
	}

	fmt.Fprintf(os.Stderr, "enqueueing %d jobs in each build\n", o.jobs)
	for _, b := range builds {
		if err := b.start(o); err != nil {
			return err
		}
		// However the rounds end, each build is let go and told to stop, so that it removes
		// what it made (a PostgreSQL cluster among them).
		defer b.finish()
	}
	for _, b := range builds {
		select {
		case <-b.ready:
		case <-b.exited:
			return fmt.Errorf("%s ended before it was ready: %v", b.name, b.err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, b := range builds {
		if err := b.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		if _, err := io.WriteString(b.input, "go\n"); err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
	}

	var rounds [][2]float64
	for r := 0; r < o.rounds && ctx.Err() == nil; r++ {
		// Each build goes first in every other round, so that neither always follows the same one.
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		var rates [2]float64
		short := false
		for _, i := range order {
			b := builds[i]
			rate, left, err := b.runTurn(ctx, o)
			if err != nil {
				return err
			}
			rates[i] = rate
			short = short || left < int64(2*rate*o.turn.Seconds())
		}
		rounds = append(rounds, rates)
		fmt.Fprintf(os.Stderr, "round %d/%d  this tree %.0f  %s %.0f jobs/s  cost %.1f%%\n",
			r+1, o.rounds, rates[0], o.otherName(), rates[1], 100*(1-rates[0]/rates[1]))
		if short {
			fmt.Fprintln(os.Stderr, "a build is running out of jobs: the rounds end here (raise -jobs)")
			break
		}
	}
	if len(rounds) == 0 {
		return ctx.Err()
	}
	report(o, rounds)
	return nil
}

// report prints the medians of each build's turns and of the rounds' costs.
func report(o options, rounds [][2]float64) {
	var with, without, cost []float64
	for _, r := range rounds {
		with, without = append(with, r[0]), append(without, r[1])
		cost = append(cost, 100*(1-r[0]/r[1]))
	}
	fmt.Printf("HTTPClaimCompleteBatch on %s, %d rounds of a %v turn of each build (the first %v of a turn not measured), %d Go processors\n",
		o.backend, len(rounds), o.turn, o.warm, o.cpu)
	fmt.Printf("  this tree, with the audit log:  median %.0f jobs/s\n", median(with))
	if o.against != "" {
		fmt.Printf("  %s, with its log:  median %.0f jobs/s\n", o.against, median(without))
		fmt.Printf("  cost against it:   %.1f%% of its throughput (medians; negative: this tree is faster)\n", 100*(1-median(with)/median(without)))
	} else {
		fmt.Printf("  without (noaudit):              median %.0f jobs/s\n", median(without))
		fmt.Printf("  cost of the log:                %.1f%% of the throughput without it (medians)\n", 100*(1-median(with)/median(without)))
	}
	slices.Sort(cost)
	fmt.Printf("  by round:              %.1f%% (the median of the rounds' costs; half of the rounds between %.1f%% and %.1f%%)\n",
		median(cost), cost[len(cost)/4], cost[(3*len(cost)-1)/4])
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// build is one build of the benchmark and, once started, its process.
type build struct {
	name, tags, binary string
	dir                string // the tree it is built from; "" for this one

	cmd        *exec.Cmd
	postmaster int // of the build's private PostgreSQL cluster, 0 for none
	input      io.WriteCloser
	ready      chan struct{}
	exited     chan struct{} // closed once the process ended, with err
	err        error

	mu       sync.Mutex
	progress []sample
}

// sample is a progress report: jobs done by a time.
type sample struct {
	at   time.Time
	done int64
}

func (b *build) start(o options) error {
	b.cmd = exec.Command(b.binary, "-test.run", "XXX", "-test.bench", "^BenchmarkHTTPClaimCompleteBatch$/^"+o.backend+"$",
		"-test.benchtime", strconv.Itoa(o.jobs)+"x", "-test.cpu", strconv.Itoa(o.cpu))
	b.cmd.Env = append(os.Environ(), "AG_BENCH_CONTROL=1", "AG_REQUIRE_POSTGRES=1")
	b.cmd.Stderr = os.Stderr
	var err error
	if b.input, err = b.cmd.StdinPipe(); err != nil {
		return err
	}
	out, err := b.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := b.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", b.name, err)
	}
	b.ready, b.exited = make(chan struct{}), make(chan struct{})
	go b.read(out)
	return nil
}

// read follows the benchmark's output: "ready", then its progress reports.
func (b *build) read(out io.Reader) {
	lines := bufio.NewScanner(out)
	ready := false
	for lines.Scan() {
		line := lines.Text()
		switch f := strings.Fields(line); {
		case len(f) == 2 && f[0] == "postmaster" && !ready:
			b.postmaster, _ = strconv.Atoi(f[1])
		case line == "ready" && !ready:
			ready = true
			close(b.ready)
		case len(f) == 3 && f[0] == "progress":
			ns, err1 := strconv.ParseInt(f[1], 10, 64)
			done, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 == nil && err2 == nil {
				b.mu.Lock()
				b.progress = append(b.progress, sample{time.Unix(0, ns), done})
				b.mu.Unlock()
			}
		default:
			fmt.Fprintf(os.Stderr, "%s: %s\n", b.name, line)
		}
	}
	b.err = b.cmd.Wait()
	close(b.exited)
}

// signal stops or continues the build and its cluster: the cluster continues first and stops
// last, so that the build never waits on a stopped database.
func (b *build) signal(sig syscall.Signal) error {
	cluster := func() error {
		if b.postmaster == 0 {
			return nil
		}
		for _, pid := range append(childrenOf(b.postmaster), b.postmaster) {
			if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("%s: %v to its cluster's process %d: %w", b.name, sig, pid, err)
			}
		}
		return nil
	}
	if sig == syscall.SIGCONT {
		if err := cluster(); err != nil {
			return err
		}
	}
	if err := b.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: %v: %w", b.name, sig, err)
	}
	if sig != syscall.SIGCONT {
		return cluster()
	}
	return nil
}

// childrenOf answers the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses, so read after the last ')'.
		i := strings.LastIndexByte(string(stat), ')')
		if f := strings.Fields(string(stat[i+1:])); i > 0 && len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// runTurn lets the build run for one turn and answers its throughput over the turn after the
// warm-up, and the jobs it has left.
func (b *build) runTurn(ctx context.Context, o options) (rate float64, left int64, err error) {
	if err := b.signal(syscall.SIGCONT); err != nil {
		return 0, 0, err
	}
	from := time.Now().Add(o.warm)
	select {
	case <-time.After(o.turn):
	case <-ctx.Done():
	case <-b.exited:
		return 0, 0, fmt.Errorf("%s ended during its turn: %v", b.name, b.err)
	}
	to := time.Now()
	if err := b.signal(syscall.SIGSTOP); err != nil {
		return 0, 0, err
	}
	// The last report of the turn may still be on its way through the pipe.
	time.Sleep(2 * progressEvery)
	b.mu.Lock()
	defer b.mu.Unlock()
	rate, ok := rateBetween(b.progress, from, to)
	if !ok {
		return 0, 0, fmt.Errorf("%s reported no progress during its turn", b.name)
	}
	return rate, int64(o.jobs) - b.progress[len(b.progress)-1].done, nil
}

// rateBetween answers the jobs per second between the first and the last of the progress
// reports made from from to to; false without two such reports.
func rateBetween(progress []sample, from, to time.Time) (float64, bool) {
	var first, last *sample
	for i := range progress {
		s := &progress[i]
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		if first == nil {
			first = s
		}
		last = s
	}
	if first == nil || !last.at.After(first.at) {
		return 0, false
	}
	return float64(last.done-first.done) / last.at.Sub(first.at).Seconds(), true
}

// finish tells the build to stop, lets it run to its end and waits for it.
func (b *build) finish() {
	if b.cmd == nil || b.cmd.Process == nil {
		return
	}
	io.WriteString(b.input, "stop\n") //nolint:errcheck // it may have ended already
	b.input.Close()
	b.signal(syscall.SIGCONT) //nolint:errcheck // likewise
	select {
	case <-b.exited:
	case <-time.After(2 * time.Minute):
		fmt.Fprintf(os.Stderr, "%s did not end in 2 minutes; killing it\n", b.name)
		b.cmd.Process.Kill() //nolint:errcheck // it is being abandoned
	}
}
