//go:build !unix

package worker

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Without process groups only the command itself can be stopped; what it started may live on.
// Without file locks, a directory cannot be told orphaned: ReapOrphans does nothing.

const fileLocks = false

func inOwnGroup(*exec.Cmd) {}

// startCommand starts cmd and answers a channel that receives cmd.Wait's answer.
func startCommand(cmd *exec.Cmd) (<-chan error, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return exited, nil
}

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

func lockFile(*os.File) error { return nil }

func groupRunsIn(int, string) (bool, error) { return false, errors.ErrUnsupported }

func ownedByUs(fs.FileInfo) bool { return false }
