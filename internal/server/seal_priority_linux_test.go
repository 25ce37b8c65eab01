package server

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// The test binary's main goroutine keeps the process's main thread, which it only waits on:
// Go never ends that thread (a goroutine that exits locked to it leaves it parked), so the
// goroutine of TestSealerPriorityIsItsThreadsAlone must run on another, which then ends.
func init() { runtime.LockOSThread() }

// TestSealerPriorityIsItsThreadsAlone ensures that lowerSealerPriority lowers the priority of
// the thread of the goroutine that calls it, and of no other: the writers keep theirs, and the
// thread ends with the goroutine rather than going back to run others at the lower priority.
func TestSealerPriorityIsItsThreadsAlone(t *testing.T) {
	niceOf := func(tid int) int {
		t.Helper()
		// The raw system call answers 20 - nice, as Go's syscall.Getpriority passes it on.
		p, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
		if err != nil {
			t.Fatal(err)
		}
		return 20 - p
	}
	// The test's own thread stands for the writers'.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	own := syscall.Gettid()
	before := niceOf(own)
	type result struct {
		tid, nice int
		err       error
	}
	done := make(chan result)
	go func() {
		err := lowerSealerPriority()
		tid := syscall.Gettid()
		done <- result{tid: tid, nice: niceOf(tid), err: err}
		// Returning ends the locked thread with its priority.
	}()
	r := <-done
	if r.err != nil {
		t.Fatalf("lowerSealerPriority: %v", r.err)
	}
	if r.nice != sealerNice {
		t.Fatalf("the sealer's thread runs at nice %d, want %d", r.nice, sealerNice)
	}
	if r.tid == own || r.tid == syscall.Getpid() {
		t.Fatalf("the goroutine ran on thread %d, which another goroutine holds", r.tid)
	}
	if after := niceOf(own); after != before {
		t.Fatalf("another thread went from nice %d to %d", before, after)
	}
	task := fmt.Sprintf("/proc/self/task/%d", r.tid)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; <-tick.C {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d, at nice %d, outlived the goroutine that lowered it", r.tid, sealerNice)
		}
	}
}
