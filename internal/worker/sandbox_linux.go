//go:build linux

package worker

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func sandboxSupported() error { return nil }

// oNoFollow opens a file without following a symbolic link in its last element.
const oNoFollow = unix.O_NOFOLLOW

// closeInheritedOnExec marks every file descriptor from 3 up close-on-exec, so that no child
// inherits what this process did not open itself. Go opens its own files close-on-exec
// already; ExtraFiles are passed to a child whatever their flag.
func closeInheritedOnExec() error {
	err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil || !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return err
	}
	// A kernel before 5.11: one descriptor at a time.
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range fds {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= 3 {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
	return nil
}

// pidNamespace answers the inode number of the PID namespace of the process pid ("self" for
// this one), as /proc/PID/ns/pid shows it: "pid:[4026531836]".
func pidNamespace(pid string) (uint64, error) {
	link, err := os.Readlink("/proc/" + pid + "/ns/pid")
	if err != nil {
		return 0, err
	}
	inode, ok := strings.CutPrefix(link, "pid:[")
	if inode, ok = strings.CutSuffix(inode, "]"); !ok {
		return 0, fmt.Errorf("/proc/%s/ns/pid is %q, not pid:[N]", pid, link)
	}
	return strconv.ParseUint(inode, 10, 64)
}

// endNamespace kills init, the first process of the PID namespace ns, and waits until no
// process of ns is alive, at most for wait. It answers whether ns is empty.
//
// The kernel kills every process of a PID namespace when its init dies. bwrap's init dies
// with bwrap already (--die-with-parent); this makes sure of it, and waits for it. init is
// held by a pidfd (os.FindProcess) before its namespace is checked, so that a pid used again
// by another process is never signalled.
func endNamespace(init int, ns uint64, wait time.Duration) bool {
	if p, err := os.FindProcess(init); err == nil {
		if got, err := pidNamespace(strconv.Itoa(init)); err == nil && got == ns {
			_ = p.Signal(syscall.SIGKILL)
		}
		_ = p.Release()
	}
	deadline := time.Now().Add(wait)
	for delay := time.Millisecond; namespaceAlive(ns); delay = min(2*delay, 20*time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
	}
	return true
}

// namespaceAlive reports whether a process of the PID namespace ns is alive. A zombie runs
// nothing, so it does not count: the sandbox's init, whose parent bwrap exits first, waits
// as one until the host's init reaps it, which may take seconds in a container.
func namespaceAlive(ns uint64) bool {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		if got, err := pidNamespace(p.Name()); err != nil || got != ns {
			continue
		}
		stat, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		if state, _, ok := parseStat(string(stat)); !ok || (state != "Z" && state != "X") {
			return true
		}
	}
	return false
}
