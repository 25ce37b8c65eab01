package server

import (
	"runtime"
	"syscall"
)

// sealerNice is the nice value of the sealer's thread: below every writer's, so that on a
// machine whose processors are busy the hashing of a seal runs in the time the writers leave.
// Side by side with the sealer at the writers' priority, SQLite served about 3% more
// claim+complete jobs per second (docs/benchmarks.md). At nice 10 a thread still gets about a
// tenth of a busy processor's share, which seals tens of thousands of events a second.
const sealerNice = 10

// lowerSealerPriority keeps the calling goroutine on its thread for good and lowers that
// thread's priority to sealerNice. On Linux a thread's priority is its own (setpriority with a
// thread id); the thread ends with the goroutine, so no other goroutine ever runs on it.
func lowerSealerPriority() error {
	runtime.LockOSThread()
	return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), sealerNice)
}
