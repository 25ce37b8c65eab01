//go:build !unix

package worker

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Without process groups only the command itself can be stopped; what it started may live on.

func inOwnGroup(*exec.Cmd) {}

func signalGroup(pid int, _ syscall.Signal) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}

func killGroup(pid int, _ time.Duration) bool {
	signalGroup(pid, syscall.SIGKILL)
	return true
}

func groupAlive(int) bool { return false }
