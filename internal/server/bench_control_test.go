package server_test

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The audit log's cost is measured by running the build with it and the build without it side
// by side in short slices, one stopped while the other runs (internal/tools/auditcost): runs a
// minute apart differed by as much as the cost itself, slices a few seconds apart much less.
// With AG_BENCH_CONTROL set, a benchmark run of more than one job (not testing's first run of
// one) takes part: once ready it prints "ready" and waits for "go" on its input; it then prints
// "progress UNIX-NANOS JOBS" every progressEvery, and ends, as if its jobs were done, once its
// input says "stop".

// progressEvery is how often a controlled benchmark reports its progress.
const progressEvery = 50 * time.Millisecond

// benchControl is a controlled run's view of its driver; the zero value controls nothing.
type benchControl struct {
	stopped atomic.Bool
	quit    chan struct{}
}

// controlled waits for the driver's "go" when AG_BENCH_CONTROL asks for control, and then
// reports done every progressEvery until finish.
func controlled(b *testing.B, done *atomic.Int64) *benchControl {
	c := &benchControl{}
	if os.Getenv("AG_BENCH_CONTROL") == "" || b.N <= 1 {
		return c
	}
	// On a line of its own: testing has printed the benchmark's name without ending the line.
	fmt.Println("\nready")
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

// running says whether the run goes on: the driver has not said stop.
func (c *benchControl) running() bool { return !c.stopped.Load() }

// finish stops the progress reports.
func (c *benchControl) finish() {
	if c.quit != nil {
		close(c.quit)
	}
}
