//go:build unix

package worker

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// inOwnGroup makes cmd the leader of a new process group, so that it and every process it
// starts (unless one leaves the group on purpose) can be signalled at once.
func inOwnGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
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
// zombies until their parent (or init) reaps them; a zombie runs nothing, so it does not count.
func groupAlive(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return false
	}
	if runtime.GOOS != "linux" {
		return err == nil || errors.Is(err, syscall.EPERM)
	}
	procs, rerr := os.ReadDir("/proc")
	if rerr != nil {
		return true
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		state, group, ok := parseStat(string(stat))
		if ok && group == pgid && state != "Z" && state != "X" {
			return true
		}
	}
	return false
}

// parseStat reads the state and the process group of a /proc/PID/stat line:
// "pid (comm) state ppid pgrp ...", where comm may hold spaces and parentheses.
func parseStat(stat string) (state string, pgrp int, ok bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 3 {
		return "", 0, false
	}
	pgrp, err := strconv.Atoi(f[2])
	return f[0], pgrp, err == nil
}
