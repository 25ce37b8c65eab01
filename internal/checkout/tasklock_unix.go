//go:build unix

package checkout

import (
	"os"
	"syscall"
)

// lockTasks takes an exclusive flock on f, waiting for it: ag task, ag inbox and ag mcp in one
// checkout read and write its task state one at a time. The lock goes with the file's close or
// the process.
func lockTasks(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }
