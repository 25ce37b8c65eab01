package server_test

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// The audit log's cost is measured by running the build with it and the build without it side
// by side in short slices, one stopped while the other runs (internal/tools/auditcost): runs a
// minute apart differed by as much as the cost itself, slices a few seconds apart much less.
// With AG_BENCH_CONTROL set, a benchmark run of more than one job (not testing's first run of
// one) takes part: once ready it prints "postmaster PID" when it runs on the tests' private
// PostgreSQL cluster, which the driver stops and continues with it, then "ready", and waits for
// "go" on its input; it then prints "progress UNIX-NANOS JOBS" every progressEvery, and ends,
// as if its jobs were done, once its input says "stop".

// progressEvery is how often a controlled benchmark reports its progress.
const progressEvery = 50 * time.Millisecond

// benchControl is a controlled run's view of its driver; the zero value controls nothing.
type benchControl struct {
	stopped atomic.Bool
	quit    chan struct{}
}

// controlled waits for the driver's "go" when AG_BENCH_CONTROL asks for control, and then
// reports done every progressEvery until finish.
func controlled(b *testing.B, backend string, done *atomic.Int64) *benchControl {
	c := &benchControl{}
	if os.Getenv("AG_BENCH_CONTROL") == "" || b.N <= 1 {
		return c
	}
	// Testing has printed the benchmark's name without ending its line.
	fmt.Println()
	if backend == "postgres" && os.Getenv(pgtest.EnvURL) == "" {
		fmt.Printf("postmaster %d\n", postmasterPID(b))
	}
	fmt.Println("ready")
	lines := bufio.NewScanner(os.Stdin)
	if !lines.Scan() || strings.TrimSpace(lines.Text()) != "go" {
		b.Fatalf("AG_BENCH_CONTROL: want go on the input, got %q (%v)", lines.Text(), lines.Err())
	}
	go func() {
		for lines.Scan() {
			if strings.TrimSpace(lines.Text()) == "stop" {
				break
			}
		}
		// A closed input stops the run too: the driver is gone.
		c.stopped.Store(true)
	}()
	c.quit = make(chan struct{})
	go func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-c.quit:
				return
			case now := <-t.C:
				fmt.Printf("progress %d %d\n", now.UnixNano(), done.Load())
			}
		}
	}()
	return c
}

// postmasterPID answers the process id of the private cluster's postmaster, from the first line
// of its postmaster.pid; its socket directory, the URL's host, holds the data directory.
func postmasterPID(b *testing.B) int {
	u, err := url.Parse(pgtest.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	pidFile, err := os.ReadFile(filepath.Join(u.Query().Get("host"), "data", "postmaster.pid"))
	if err != nil {
		b.Fatalf("AG_BENCH_CONTROL: the cluster's postmaster: %v", err)
	}
	line, _, _ := strings.Cut(string(pidFile), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		b.Fatalf("AG_BENCH_CONTROL: postmaster.pid: %v", err)
	}
	return pid
}

// running says whether the run goes on: the driver has not said stop.
func (c *benchControl) running() bool { return !c.stopped.Load() }

// finish stops the progress reports.
func (c *benchControl) finish() {
	if c.quit != nil {
		close(c.quit)
	}
}
