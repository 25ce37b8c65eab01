//go:build linux

package worker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ag-coord/ag/internal/size"
)

// The cgroups here are written by hand rather than through github.com/containerd/cgroups/v3:
// a run needs three values written, two counters read and a directory removed, and the
// library reads neither counter (pids.events at all, memory.oom_control only within a Stat
// that reads a dozen other files), does not move a worker out of a delegated cgroup v2 that
// holds it, leaves directories behind when a limit cannot be written, and brings eBPF,
// D-Bus and systemd modules with it.

// limiterSys is what a Linux worker holds its runs with.
type limiterSys struct {
	controllers []cgroupController // those it can make cgroups with: memory, pids, cpu
	disk        *diskMaker         // nil when it cannot give a run a file system of its own
}

// cgroupController is a cgroup controller the runs' cgroups are made with.
type cgroupController struct {
	name   string // memory, pids or cpu
	parent string // the directory in which the runs' cgroups are made
	v2     bool
}

// keeps reports whether the controller name holds the runs.
func (s limiterSys) keeps(name string) bool {
	return slices.ContainsFunc(s.controllers, func(c cgroupController) bool { return c.name == name })
}

// runSys is one run's cgroups and file system.
type runSys struct {
	controllers []cgroupController // what join makes the run's cgroups with
	name        string             // the run's cgroups' name
	cgroups     []*runCgroup
	disk        string // the mount point of the run's file system, "" when it has none
	// root is the run's file system's root, open while the run lives: the worker sees the file
	// system through it once it is detached.
	root *os.File
	// mu orders detach, which the sandbox's start calls, with exceeded and release.
	mu                 sync.Mutex
	detached, released bool
}

// runCgroup is one of a run's cgroup directories: one per cgroup v1 hierarchy, one for v2.
type runCgroup struct {
	dir         string
	v2          bool
	controllers []string
}

// NewLimiter answers a limiter that holds runs to limits where this machine lets it: cgroup v2
// where this worker's cgroup has the controllers (after moving the worker into a cgroup of
// its own below it when it must), cgroup v1 where it has not, and a loop-mounted ext4 file
// system for each run when it runs as root with mkfs.ext4. It tries each means once, with a
// cgroup and a file system it then removes, in workDir. Status says what it keeps.
func NewLimiter(limits Limits, workDir string) *Limiter {
	l := &Limiter{max: limits}
	found, why := findControllers()
	for _, c := range []struct {
		name, limit string
		value       int64
	}{{"memory", limitMemory, limits.Memory}, {"pids", limitProcesses, limits.Pids}, {"cpu", limitCPU, 0}} {
		st := LimitStatus{Name: c.limit}
		switch c.limit {
		case limitMemory:
			st.Value = size.Format(c.value)
		case limitProcesses:
			st.Value = strconv.FormatInt(c.value, 10)
		}
		ctl, ok := found[c.name]
		if !ok {
			st.Why = why[c.name]
		} else if err := ctl.probe(limits); err != nil {
			st.Why = err.Error()
		} else {
			reapCgroups(ctl)
			l.sys.controllers = append(l.sys.controllers, ctl)
			st.Kept = true
			st.How = fmt.Sprintf("cgroup v%d %s", map[bool]int{false: 1, true: 2}[ctl.v2], filepath.Join(ctl.parent, runDirPattern+"*"))
		}
		if c.limit != limitCPU && c.value == 0 {
			st.Value, st.Kept, st.Off, st.Why = "none", false, true, ""
		}
		l.status = append(l.status, st)
	}
	st := LimitStatus{Name: limitDisk, Value: size.Format(limits.Disk)}
	if d, err := newDiskMaker(workDir); err != nil {
		st.Why = err.Error()
	} else {
		l.sys.disk = d
		st.Kept = true
		st.How = "an ext4 file system of that size for each run, loop-mounted by " + d.mount
	}
	if limits.Disk == 0 {
		st.Value, st.Kept, st.Off, st.Why = "none", false, true, ""
	}
	l.status = append(l.status, st)
	return l
}

// prepare makes the file system of the run whose directory is runDir, and holds it to asked
// within the worker's limits. join makes its cgroups. What they made is released by release,
// also when they answer an error.
func (l *Limiter) prepare(runDir string, asked Limits) (*runLimit, error) {
	lim := asked.within(l.max)
	if !l.sys.keeps("memory") {
		lim.Memory = 0
	}
	if !l.sys.keeps("pids") {
		lim.Pids = 0
	}
	if l.sys.disk == nil {
		lim.Disk = 0 // a limit this machine does not let the worker keep, whoever asks
	}
	r := &runLimit{limits: lim, root: runDir}
	r.sys.controllers = l.sys.controllers
	// ag-validate-*: the reaper of a dead worker's runs finds its cgroups by that name.
	r.sys.name = filepath.Base(runDir)
	if lim.Disk > 0 {
		mnt := filepath.Join(runDir, "disk")
		if err := l.sys.disk.make(filepath.Join(runDir, "disk.img"), mnt, lim.Disk); err != nil {
			return r, err
		}
		r.sys.disk, r.root = mnt, mnt
		root, err := os.Open(mnt)
		if err != nil {
			return r, fmt.Errorf("a run's file system: %w", err)
		}
		r.sys.root = root
	}
	return r, nil
}

// detach takes the run's file system out of the worker's mount namespace once the sandbox has
// made its own mounts of it. It lives on in the sandbox's, and in the worker through its open
// root, and goes when the last of them does: with the run, and with a worker that is killed,
// where a mount would stay until another worker started on the work directory to reap it.
func (r *runLimit) detach() {
	r.sys.mu.Lock()
	defer r.sys.mu.Unlock()
	if r.sys.disk == "" || r.sys.detached || r.sys.released {
		return
	}
	if unix.Unmount(r.sys.disk, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW) == nil {
		r.sys.detached = true
	}
}

// join makes the run's cgroups and puts the process pid in them. Its children are born there.
// The cgroups are made only now, so that a live run's cgroups are empty only for a moment
// (before this, and once its processes have ended until release): reapCgroups takes an empty
// cgroup that is older for a dead worker's.
func (r *runLimit) join(pid int) error {
	r.sys.mu.Lock()
	defer r.sys.mu.Unlock()
	if len(r.sys.cgroups) > 0 {
		// A second sandbox of the run (the command after the prepare phase) joins the
		// cgroups the first made, and is held to the same limits.
		return r.sys.joinCgroups(pid)
	}
	byDir := map[string]*runCgroup{}
	for _, c := range r.sys.controllers {
		dir := filepath.Join(c.parent, r.sys.name)
		cg := byDir[dir]
		if cg == nil {
			// Mkdir, not MkdirAll: a cgroup of that name is another run's.
			if err := os.Mkdir(dir, 0o755); err != nil {
				return fmt.Errorf("make the run's cgroup: %w", err)
			}
			cg = &runCgroup{dir: dir, v2: c.v2}
			byDir[dir] = cg
			r.sys.cgroups = append(r.sys.cgroups, cg)
		}
		if err := c.set(dir, r.limits); err != nil {
			return err
		}
		cg.controllers = append(cg.controllers, c.name)
	}
	return r.sys.joinCgroups(pid)
}

// joinCgroups puts the process pid in the run's cgroups.
func (s *runSys) joinCgroups(pid int) error {
	for _, cg := range s.cgroups {
		if err := writeCgroupFile(cg.dir, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("join the run's cgroup: %w", err)
		}
	}
	return nil
}

// exceeded answers the limit the run has reached, as describe names it, or "". The kernel
// counts what it refused: a fork it refused (pids.events, max), a process it killed for memory
// (memory.oom_control or memory.events, oom_kill). A file system has no such count: it is
// reached when what is left of it is less than the little a full one keeps (or no inode is
// left). Where a run reached both the process and the memory limit, the process limit is its
// reason: a fork flood fills the memory with the kernel's own records of its processes (most
// when a busy machine is slow to free those of the processes that ended), so that the flood
// reaches the memory limit too, while a run that only hogs memory does not fork to the limit.
func (r *runLimit) exceeded() string {
	r.sys.mu.Lock()
	defer r.sys.mu.Unlock()
	if r.sys.released {
		return ""
	}
	if r.limits.Pids > 0 && r.sys.refused("pids", "pids.events", "pids.events", "max") {
		return r.limits.describe(limitProcesses)
	}
	if r.limits.Memory > 0 && r.sys.refused("memory", "memory.oom_control", "memory.events", "oom_kill") {
		return r.limits.describe(limitMemory)
	}
	if r.sys.root != nil && diskFull(r.sys.root) {
		return r.limits.describe(limitDisk)
	}
	return ""
}

// refused reports whether one of the run's cgroups of the controller (a cgroup of its own on
// cgroup v1, the one cgroup of every controller on v2) counts key above 0 in its file, v1File
// or v2File.
func (s *runSys) refused(controller, v1File, v2File, key string) bool {
	for _, cg := range s.cgroups {
		file := v1File
		if cg.v2 {
			file = v2File
		}
		if slices.Contains(cg.controllers, controller) && cgroupCount(cg.dir, file, key) > 0 {
			return true
		}
	}
	return false
}

// fullDiskSlack is what a file system a run filled has left, at most: ext4 keeps a little
// for its own metadata.
const fullDiskSlack = 64 << 10

// diskFull reports whether the file system of root has no room left for a run.
func diskFull(root *os.File) bool {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(root.Fd()), &st); err != nil {
		return false
	}
	return st.Bavail*uint64(st.Bsize) < fullDiskSlack || st.Ffree == 0
}

// release removes the run's cgroups, killing what is left in them (nothing, once its sandbox
// has ended), then lets go of its file system, which unmounts it.
func (r *runLimit) release() error {
	if r == nil {
		return nil
	}
	r.sys.mu.Lock()
	defer r.sys.mu.Unlock()
	if r.sys.released {
		return nil
	}
	r.sys.released = true
	var errs []error
	for _, cg := range r.sys.cgroups {
		errs = append(errs, removeCgroup(cg.dir, cg.v2))
	}
	if r.sys.root != nil {
		errs = append(errs, r.sys.root.Close())
	}
	if r.sys.disk != "" && !r.sys.detached {
		errs = append(errs, unmountDisk(r.sys.disk))
	}
	return errors.Join(errs...)
}

// reapOrphan releases what a dead worker's run left at dir: its file system's mount, and its
// cgroups, when they are among this worker's (workers on one machine usually share them).
func (l *Limiter) reapOrphan(dir string) {
	_ = unmountDisk(filepath.Join(dir, "disk"))
	if l == nil {
		return
	}
	for _, c := range l.sys.controllers {
		cg := filepath.Join(c.parent, filepath.Base(dir))
		if _, err := os.Lstat(cg); err == nil {
			_ = removeCgroup(cg, c.v2)
		}
	}
}

// orphanCgroupAge is how old an empty run cgroup must be to be taken for a dead worker's: a
// live run's is empty only for a moment, while it is made and once its processes have ended.
const orphanCgroupAge = time.Minute

// reapCgroups removes the run cgroups of c that dead workers left, empty once their sandboxes
// died with them: those of a worker killed before it could remove them, which no worker starts
// on its work directory again to reap with its run directory. The kernel refuses to remove one
// that holds a process, so a live run's stays.
func reapCgroups(c cgroupController) {
	entries, err := os.ReadDir(c.parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), runDirPattern) {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > orphanCgroupAge {
			_ = unix.Rmdir(filepath.Join(c.parent, e.Name()))
		}
	}
}

// set writes the limits of controller c in the run's cgroup dir. Swap is held to nothing
// beyond the memory limit, so that a run cannot go on swapping past it.
func (c cgroupController) set(dir string, lim Limits) error {
	var files [][2]string
	switch {
	case c.name == "memory" && lim.Memory > 0 && c.v2:
		files = append(files, [2]string{"memory.max", strconv.FormatInt(lim.Memory, 10)})
		if hasFile(filepath.Join(dir, "memory.swap.max")) {
			files = append(files, [2]string{"memory.swap.max", "0"})
		}
	case c.name == "memory" && lim.Memory > 0:
		files = append(files, [2]string{"memory.limit_in_bytes", strconv.FormatInt(lim.Memory, 10)})
		if hasFile(filepath.Join(dir, "memory.memsw.limit_in_bytes")) {
			files = append(files, [2]string{"memory.memsw.limit_in_bytes", strconv.FormatInt(lim.Memory, 10)})
		}
	case c.name == "pids" && lim.Pids > 0:
		files = append(files, [2]string{"pids.max", strconv.FormatInt(lim.Pids, 10)})
	case c.name == "cpu" && c.v2:
		// Every run weighs the same, whatever number of processes it runs, and as much as
		// one process of the worker's own cgroup: a run that forks a hundred busy processes
		// does not get a hundred times the CPU of another.
		files = append(files, [2]string{"cpu.weight", "100"})
	case c.name == "cpu":
		files = append(files, [2]string{"cpu.shares", "1024"})
	}
	for _, f := range files {
		if err := writeCgroupFile(dir, f[0], f[1]); err != nil {
			return fmt.Errorf("limit the run's cgroup: %w", err)
		}
	}
	return nil
}

// probe makes a cgroup of c, writes its limit there and removes it: what a run will do.
func (c cgroupController) probe(limits Limits) error {
	dir := filepath.Join(c.parent, fmt.Sprintf("ag-probe-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("cannot make a cgroup in %s: %w (run the worker as root, or in a cgroup v2 subtree delegated to it)", c.parent, err)
	}
	err := c.set(dir, limits)
	if rerr := removeCgroup(dir, c.v2); err == nil && rerr != nil {
		err = rerr
	}
	return err
}

// writeCgroupFile writes value to the cgroup file name in dir, which must exist.
func writeCgroupFile(dir, name, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s to %s: %w", value, filepath.Join(dir, name), err)
	}
	return nil
}

// cgroupCount answers the count key of a flat keyed cgroup file ("oom_kill 3"), 0 when it
// has none.
func cgroupCount(dir, file, key string) uint64 {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && k == key {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// cgroupPids answers the processes in the cgroup dir.
func cgroupPids(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// removeCgroup removes the cgroup dir, killing what is left in it, and waits for it to go, at
// most a few seconds.
func removeCgroup(dir string, v2 bool) error {
	deadline := time.Now().Add(5 * time.Second)
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove the run's cgroup %s: %w", dir, err)
		}
		killCgroup(dir, v2)
		time.Sleep(delay)
	}
}

// killCgroup kills every process in the cgroup dir: at once where cgroup v2 has cgroup.kill;
// otherwise one by one, each held by a pidfd (os.FindProcess) and killed only if it is still
// in the cgroup, so that a pid used again by another process is never signalled.
func killCgroup(dir string, v2 bool) {
	if v2 && writeCgroupFile(dir, "cgroup.kill", "1") == nil {
		return
	}
	for _, pid := range cgroupPids(dir) {
		p, err := os.FindProcess(pid)
		if err != nil {
			continue
		}
		if slices.Contains(cgroupPids(dir), pid) {
			_ = p.Signal(syscall.SIGKILL)
		}
		_ = p.Release()
	}
}

// cgroupMount is a cgroup file system of /proc/self/mountinfo.
type cgroupMount struct {
	root, point string // the cgroup shown at the mount point, and where it is mounted
	v2          bool
	controllers []string // v1: the hierarchy's controllers
}

// parseMountinfo answers the cgroup mounts of a /proc/PID/mountinfo.
func parseMountinfo(r io.Reader) []cgroupMount {
	var mounts []cgroupMount
	s := bufio.NewScanner(r)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		// ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER-OPTIONS
		f := strings.Fields(s.Text())
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			continue
		}
		m := cgroupMount{root: unescapeMount(f[3]), point: unescapeMount(f[4])}
		switch f[sep+1] {
		case "cgroup2":
			m.v2 = true
		case "cgroup":
			for _, o := range strings.Split(f[sep+3], ",") {
				if o == "memory" || o == "pids" || o == "cpu" {
					m.controllers = append(m.controllers, o)
				}
			}
		default:
			continue
		}
		mounts = append(mounts, m)
	}
	return mounts
}

// unescapeMount undoes mountinfo's octal escapes of space, tab, newline and backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// procCgroups is what /proc/PID/cgroup says of a process's cgroups.
type procCgroups struct {
	v1 map[string]string // controller: its cgroup's path in its hierarchy
	v2 string            // its cgroup's path in the v2 hierarchy, "" when it has none
}

// parseProcCgroup reads a /proc/PID/cgroup: ID:CONTROLLERS:PATH lines, 0::PATH for v2.
func parseProcCgroup(r io.Reader) procCgroups {
	pc := procCgroups{v1: map[string]string{}}
	s := bufio.NewScanner(r)
	for s.Scan() {
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			pc.v2 = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			pc.v1[c] = parts[2]
		}
	}
	return pc
}

// cgroupDir answers where the cgroup path of a hierarchy is, under its mount m.
func cgroupDir(m cgroupMount, path string) (string, bool) {
	rel, ok := strings.CutPrefix(path, m.root)
	if m.root == "/" {
		rel, ok = path, true
	}
	if !ok || rel != "" && !strings.HasPrefix(rel, "/") {
		return "", false
	}
	return filepath.Join(m.point, rel), true
}

// findControllers answers where this worker can make its runs' cgroups for memory, pids and
// cpu, and why not where it cannot: below its own cgroup, in cgroup v2 where its cgroup has the
// controller, in v1 where the controller's hierarchy is mounted.
func findControllers() (map[string]cgroupController, map[string]string) {
	found, why := map[string]cgroupController{}, map[string]string{}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		for _, c := range []string{"memory", "pids", "cpu"} {
			why[c] = fmt.Sprintf("cannot read /proc/self/mountinfo: %v", err)
		}
		return found, why
	}
	pcb, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		for _, c := range []string{"memory", "pids", "cpu"} {
			why[c] = fmt.Sprintf("cannot read /proc/self/cgroup: %v", err)
		}
		return found, why
	}
	return controllersOf(mi, pcb)
}

// controllersOf is findControllers of the mountinfo mi and the /proc/PID/cgroup pcb of this
// worker.
func controllersOf(mi, pcb []byte) (map[string]cgroupController, map[string]string) {
	found, why := map[string]cgroupController{}, map[string]string{}
	mounts, own := parseMountinfo(bytes.NewReader(mi)), parseProcCgroup(bytes.NewReader(pcb))

	v2Why := "no cgroup v2 file system is mounted"
	if i := slices.IndexFunc(mounts, func(m cgroupMount) bool { return m.v2 }); i >= 0 && own.v2 != "" {
		if dir, ok := cgroupDir(mounts[i], own.v2); !ok {
			v2Why = fmt.Sprintf("this worker's cgroup v2 %s is not below the mount at %s", own.v2, mounts[i].point)
		} else if parent, names, err := enableV2(dir); err != nil {
			v2Why = err.Error()
		} else {
			for _, n := range names {
				found[n] = cgroupController{name: n, parent: parent, v2: true}
			}
			v2Why = fmt.Sprintf("this worker's cgroup v2 %s does not have it", dir)
		}
	}
	for _, n := range []string{"memory", "pids", "cpu"} {
		if _, ok := found[n]; ok {
			continue
		}
		i := slices.IndexFunc(mounts, func(m cgroupMount) bool { return slices.Contains(m.controllers, n) })
		path, inV1 := own.v1[n]
		if i < 0 || !inV1 {
			why[n] = fmt.Sprintf("no cgroup v1 %s hierarchy holds this worker, and in cgroup v2: %s", n, v2Why)
			continue
		}
		dir, ok := cgroupDir(mounts[i], path)
		if !ok {
			why[n] = fmt.Sprintf("this worker's cgroup v1 %s %s is not below the mount at %s", n, path, mounts[i].point)
			continue
		}
		found[n] = cgroupController{name: n, parent: dir}
	}
	return found, why
}

// v2WorkerLeaf is the cgroup v2 a worker moves into, below its own, to give its runs' cgroups
// the controllers of its own.
const v2WorkerLeaf = "ag-worker"

// enableV2 lets the children of the cgroup v2 dir use memory, pids and cpu, as far as dir has
// them, and answers where the runs' cgroups go and the controllers they have. A cgroup v2 with processes of its own cannot give its
// children a controller: a worker alone in its cgroup (systemd's Delegate=yes) moves into a
// cgroup of its own below it, ag-worker, beside its runs' cgroups.
func enableV2(dir string) (string, []string, error) {
	if filepath.Base(dir) == v2WorkerLeaf {
		dir = filepath.Dir(dir) // moved there by an earlier NewLimiter of this process
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return "", nil, err
	}
	var names []string
	for _, n := range []string{"memory", "pids", "cpu"} {
		if slices.Contains(strings.Fields(string(b)), n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "", nil, fmt.Errorf("this worker's cgroup v2 %s has none of the memory, pids and cpu controllers", dir)
	}
	enable := "+" + strings.Join(names, " +")
	err = writeCgroupFile(dir, "cgroup.subtree_control", enable)
	if errors.Is(err, unix.EBUSY) {
		leaf := filepath.Join(dir, v2WorkerLeaf)
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", nil, fmt.Errorf("cgroup v2 %s holds this worker, which cannot move into a cgroup below it: %w", dir, err)
		}
		if err := writeCgroupFile(leaf, "cgroup.procs", strconv.Itoa(os.Getpid())); err != nil {
			return "", nil, fmt.Errorf("cgroup v2 %s holds this worker, which cannot move into a cgroup below it: %w", dir, err)
		}
		err = writeCgroupFile(dir, "cgroup.subtree_control", enable)
		if errors.Is(err, unix.EBUSY) {
			return "", nil, fmt.Errorf("cgroup v2 %s holds other processes than this worker: give the worker a cgroup of its own (systemd: Delegate=yes)", dir)
		}
	}
	if err != nil {
		return "", nil, err
	}
	return dir, names, nil
}

// diskMaker makes each run a file system of its own: an ext4 file system in a sparse file of
// the run's disk limit, loop-mounted in its run directory. It is a file system rather than a
// quota because a quota needs the work directory's file system mounted with them, and ext4
// rather than tmpfs because a tmpfs is memory: what a run wrote would count against its
// memory limit (the kernel charges a tmpfs page to whoever wrote it), so a build that writes
// a large cache would run out of memory, not disk. Page cache of a file system is memory the
// kernel can take back. A full file system refuses writes with ENOSPC, whatever wrote them.
type diskMaker struct {
	mkfs, mount string // mkfs.ext4 and mount(8)
}

// newDiskMaker finds what makes and mounts the runs' file systems, and tries them once with a
// small one in workDir.
func newDiskMaker(workDir string) (*diskMaker, error) {
	if uid := os.Geteuid(); uid != 0 {
		return nil, fmt.Errorf("mounting a file system for each run needs root, and this worker runs as uid %d", uid)
	}
	d := &diskMaker{}
	var err error
	if d.mkfs, err = lookSystemTool("mkfs.ext4"); err != nil {
		return nil, fmt.Errorf("%w (Debian, Ubuntu: apt-get install e2fsprogs)", err)
	}
	if d.mount, err = lookSystemTool("mount"); err != nil {
		return nil, err
	}
	rd, err := newRunDir(workDir)
	if err != nil {
		return nil, err
	}
	defer rd.remove()
	mnt := filepath.Join(rd.path, "disk")
	if err := d.make(filepath.Join(rd.path, "disk.img"), mnt, MinLimits.Disk); err != nil {
		return nil, err
	}
	err = os.WriteFile(filepath.Join(mnt, "probe"), []byte("probe\n"), 0o600)
	if uerr := unmountDisk(mnt); err == nil {
		err = uerr
	}
	if err != nil {
		return nil, fmt.Errorf("a run's file system: %w", err)
	}
	return d, nil
}

// lookSystemTool finds a system program on PATH or in the sbin directories, which a worker's
// PATH may not have.
func lookSystemTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return filepath.Abs(p)
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		if p, err := exec.LookPath(filepath.Join(dir, name)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH nor in /usr/sbin, /sbin", name)
}

// make creates img, a sparse file of size bytes, with an ext4 file system, and mounts it at
// mnt, which it creates. No journal: the file system lives as long as its run, and a crash
// throws it away. Nothing reserved for root, who may be the sandbox's user.
func (d *diskMaker) make(img, mnt string, size int64) error {
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("a run's file system: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("a run's file system: %w", err)
	}
	env := []string{"LC_ALL=C", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	mkfs := exec.Command(d.mkfs, "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", "lazy_itable_init=1,nodiscard", img)
	mkfs.Env = env
	if out, err := mkfs.CombinedOutput(); err != nil {
		return fmt.Errorf("a run's file system: %s: %w: %s", d.mkfs, err, strings.TrimSpace(string(out)))
	}
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return fmt.Errorf("a run's file system: %w", err)
	}
	// -o loop: mount(8) takes a free loop device and frees it when the file system is
	// unmounted (autoclear). nosuid, nodev: nothing the run writes there gains it rights.
	mount := exec.Command(d.mount, "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", img, mnt)
	mount.Env = env
	if out, err := mount.CombinedOutput(); err != nil {
		return fmt.Errorf("a run's file system: %s %s: %w: %s", d.mount, img, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// unmountDisk unmounts the run's file system at mnt, if one is mounted there, and so frees its
// loop device. Its processes are gone: if it is still busy for a moment (the kernel ending
// them), it is detached, to go once nothing holds it.
func unmountDisk(mnt string) error {
	deadline := time.Now().Add(time.Second)
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		err := unix.Unmount(mnt, unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil, errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // EINVAL: nothing is mounted there
		case !errors.Is(err, unix.EBUSY):
			return fmt.Errorf("unmount the run's file system %s: %w", mnt, err)
		case time.Now().After(deadline):
			if err := unix.Unmount(mnt, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("unmount the run's file system %s: %w", mnt, err)
			}
			return nil
		}
		time.Sleep(delay)
	}
}

// FreeBytes answers the bytes free for an unprivileged user on the file system of dir.
func FreeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// hasFile reports whether path exists.
func hasFile(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
