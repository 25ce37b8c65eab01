//go:build unix

package worker

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// fileLocks tells whether lockFile really locks: run directories can then be told orphaned.
const fileLocks = true

// inOwnGroup makes cmd the leader of a new process group, so that it and every process it
// starts (unless one leaves the group on purpose) can be signalled at once. Where the system
// allows it, the leader is also killed as soon as the worker dies (see dieWithWorker).
func inOwnGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithWorker(cmd.SysProcAttr)
}

// signalGroup sends sig to every process of the group pgid.
func signalGroup(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
}

// killGroup kills the group pgid and waits until none of its processes is alive any more, or
// until the wait runs out. It answers whether the group is gone.
func killGroup(pgid int, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		signalGroup(pgid, syscall.SIGKILL)
		if !groupAlive(pgid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
	}
}

// groupAlive reports whether a process of the group pgid is still alive. Killed processes stay
// zombies until their parent (or init) reaps them; a zombie runs nothing, so it does not count
// where the system lets us tell (liveMembers).
func groupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	members, err := liveMembers(pgid)
	return err != nil || len(members) > 0
}

// lockFile takes an exclusive flock on f without waiting: errLocked when another open file
// description holds it, in this process or another. The lock lasts until f is closed, and
// dies with the process, however it dies.
func lockFile(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLocked
	}
	return err
}

// ownedByUs reports whether fi is owned by this process's effective user.
func ownedByUs(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
