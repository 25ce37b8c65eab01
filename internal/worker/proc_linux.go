//go:build linux

package worker

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// dieWithWorker has the kernel kill the command's leader with SIGKILL when its parent dies, so
// that a worker killed with SIGKILL, or crashing, does not leave its command running. It is
// not inherited across fork: what the leader started lives on in the group until a worker
// reaps the run's directory (ReapOrphans). It survives exec, so it holds for `exec cmd` too.
// In the sandbox the leader is bwrap, whose --die-with-parent passes the signal on: its PID
// namespace, and every process in it, dies with it.
func dieWithWorker(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}

// startCommand starts cmd and answers a channel that receives cmd.Wait's answer.
//
// Pdeathsig fires when the *thread* that started the child exits, not the process
// (prctl(2); golang/go#27505). The Go runtime ends a thread when a goroutine locked to it
// (runtime.LockOSThread) returns without unlocking, which any code in the process may do,
// so a child started from an arbitrary thread could be killed while the worker lives on.
// Hence the child is started and waited for by one goroutine that stays locked to its thread
// until the child has exited: no other goroutine runs on that thread meanwhile, so nothing
// can end it early. It costs one thread per running command, blocked in wait. The thread is
// unlocked once the child is reaped, when its death signal no longer matters.
func startCommand(cmd *exec.Cmd) (<-chan error, error) {
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

// liveMembers answers the pids of the processes of group pgid that are not zombies.
func liveMembers(pgid int) ([]int, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		state, group, ok := parseStat(string(stat))
		if ok && group == pgid && state != "Z" && state != "X" {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// groupRunsIn reports whether a live process of the group pgid has its working directory in
// dir or below. The kernel does not hand out a group's id again while a process is left in
// the group, so one such process shows that the group is still the one whose id was recorded
// in dir, not a later group that got the same id.
func groupRunsIn(pgid int, dir string) (bool, error) {
	if pgid == syscall.Getpgrp() {
		return false, nil // never our own group
	}
	real, err := filepath.EvalSymlinks(dir) // /proc shows the resolved path
	if err != nil {
		return false, err
	}
	members, err := liveMembers(pgid)
	if err != nil {
		return false, err
	}
	for _, pid := range members {
		cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
		if err != nil {
			continue // gone meanwhile, or not ours to look at
		}
		if cwd == real || strings.HasPrefix(cwd, real+string(filepath.Separator)) {
			return true, nil
		}
	}
	return false, nil
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
