//go:build unix && !linux

package worker

import (
	"errors"
	"os/exec"
	"syscall"
)

// Without Linux's parent-death signal, a worker that dies leaves its command running until it
// ends by itself; the next worker to start on the same work directory removes the directory.
// Without /proc, neither zombies nor working directories can be told apart: zombies count as
// alive, and the group recorded for an orphaned directory is never killed, since its id may
// have been reused.

func dieWithWorker(*syscall.SysProcAttr) {}

// startCommand starts cmd and answers a channel that receives cmd.Wait's answer.
func startCommand(cmd *exec.Cmd) (<-chan error, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return exited, nil
}

func liveMembers(int) ([]int, error) { return nil, errors.ErrUnsupported }

func groupRunsIn(int, string) (bool, error) { return false, errors.ErrUnsupported }
