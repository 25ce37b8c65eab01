//go:build linux

package worker

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/size"
	"github.com/ag-coord/ag/internal/testutil/syncbuf"
)

// The attacks on a worker's machine rather than its secrets: a validation that allocates
// until the kernel kills something, forks until nothing can start, or writes until the disk is
// full. Each runs as a validation does, through Handle, in the sandbox, held to small limits;
// each fails with the reason "worker limit: ...", and the next run on the same worker passes
// as if nothing had happened.

// limitsFiles is the candidate the limits tests validate: what an honest run checks.
var limitsFiles = map[string]string{"a.txt": "a is fine\n"}

// honestScript is an honest validation of limitsFiles.
const honestScript = `grep -q fine a.txt && echo fine`

// limitsEnv is a validator held to limits, with the server it fetches its candidate from.
type limitsEnv struct {
	v          *Validator
	pub        ed25519.PublicKey
	treeDigest string
}

// limitedValidator answers a validator that runs its commands in the sandbox, held to max. The
// tests fail, not skip, where this machine does not let it keep one of them: CI runs as root,
// where it does.
func limitedValidator(t testing.TB, max Limits) *limitsEnv {
	t.Helper()
	sb := testSandbox(t, SandboxConfig{})
	workDir := t.TempDir()
	lim := NewLimiter(max, workDir)
	for _, st := range lim.Status() {
		if !st.Kept && !st.Off {
			t.Fatalf("this machine does not let a worker keep the %s limit: %s "+
				"(the limits tests need root or a delegated cgroup v2, and mkfs.ext4 and loop devices for the disk)", st.Name, st.Why)
		}
	}
	c, treeDigest, signer, pub := serveCandidate(t, limitsFiles)
	return &limitsEnv{
		v: &Validator{
			Client: c, Signer: signer, CacheDir: t.TempDir(), WorkDir: workDir,
			Sandbox: sb, Limits: lim, KillGrace: 200 * time.Millisecond,
		},
		pub: pub, treeDigest: treeDigest,
	}
}

// validate runs script as a validate job's command, with the policy's limits when asked is not
// nil, and answers what the signed attestation says and the output. It also checks that the run
// left nothing in the work directory: its file system was unmounted with it.
func (e *limitsEnv) validate(t testing.TB, script string, asked map[string]any) (attest.Validation, string) {
	t.Helper()
	payload := map[string]any{
		"repository": "app", "change": "chg_1", "candidate_revision": "rev_1", "tree_digest": e.treeDigest,
		"command": []any{"sh", "-c", script}, "timeout": "2m",
	}
	if asked != nil {
		payload["limits"] = asked
	}
	s, err := structpb.NewStruct(payload)
	if err != nil {
		t.Fatal(err)
	}
	job := &Job{Job: &agwpv1.Job{Id: "job_1", Kind: client.KindValidate, Payload: s, Attempts: 1, ClaimedBy: "ci|w1"}}
	out, err := e.v.Handle(context.Background(), job)
	if err != nil {
		t.Fatalf("Handle: %v", err)
	}
	got, _, err := attest.VerifyValidation(context.Background(), attest.FromProto(out.Attestation), [][]byte{e.pub})
	if err != nil {
		t.Fatalf("verify the attestation: %v", err)
	}
	if left, _ := os.ReadDir(e.v.WorkDir); len(left) > 0 {
		t.Errorf("the run left %s in the work directory", left[0].Name())
	}
	return got, out.Output
}

// overLimit checks that a run failed for the limit want, and not otherwise.
func overLimit(t *testing.T, what string, got attest.Validation, output, want string) {
	t.Helper()
	if got.Result != attest.ResultFailed || got.Reason != want {
		t.Errorf("%s: result %s, reason %q; want FAILED, %q\n%s", what, got.Result, got.Reason, want, output)
	}
}

// passes checks that an honest run right after passed, its limits as fresh as the first's.
func (e *limitsEnv) passes(t *testing.T, after string) {
	t.Helper()
	got, output := e.validate(t, honestScript, nil)
	if !got.Passed() || got.Reason != "" || !strings.Contains(output, "fine") {
		t.Errorf("the honest run after %s: result %s, reason %q; want PASSED\n%s", after, got.Result, got.Reason, output)
	}
}

// TestLimitsStopAMemoryHog ensures a run that allocates more than its memory limit fails with
// "worker limit: memory", as much as the worker's limit says or the policy asks for less (never
// more), and that the next run passes.
func TestLimitsStopAMemoryHog(t *testing.T) {
	t.Parallel()
	e := limitedValidator(t, Limits{Memory: 64 << 20})
	// tail keeps the last lines, and a stream of zeros is one line: it holds all it reads.
	const hog = `head -c 3G /dev/zero | tail; echo "tail exited with $?"`
	for _, c := range []struct {
		name  string
		asked map[string]any
		want  string
	}{
		{"the worker's limit", nil, "worker limit: memory 64 MiB"},
		{"the policy asks for less", map[string]any{"memory_bytes": 48 << 20}, "worker limit: memory 48 MiB"},
		{"the policy asks for more", map[string]any{"memory_bytes": 1 << 30}, "worker limit: memory 64 MiB"},
	} {
		got, output := e.validate(t, hog, c.asked)
		overLimit(t, c.name, got, output, c.want)
		e.passes(t, "a memory hog")
	}
}

// TestLimitsStopAForkFlood ensures a run that forks without end is held to its process limit,
// from its first process on, stopped, and fails with "worker limit: processes", and that the
// next run passes. limitedValidator has made sure the limit is kept here before anything
// forks.
func TestLimitsStopAForkFlood(t *testing.T) {
	t.Parallel()
	e := limitedValidator(t, Limits{Memory: 256 << 20, Pids: 64})
	// The shell's fork bomb; dash does not take ":" as a function's name.
	const flood = `bomb() { bomb | bomb & }; bomb; wait; sleep 600`
	got, output := e.validate(t, flood, nil)
	overLimit(t, "a fork flood", got, output, "worker limit: processes 64")
	if !got.FinishedAt.Before(got.StartedAt.Add(time.Minute)) {
		t.Errorf("the fork flood ran from %s to %s: it was not stopped when it reached its limit", got.StartedAt, got.FinishedAt)
	}
	e.passes(t, "a fork flood")
}

// TestLimitsStopADiskFlood ensures a run that writes more than its disk limit, in any of the
// places it may write (its checkout, /tmp, its home, /dev/shm, its output) or in many empty
// files, fails with "worker limit: disk", having filled its own file system and not the
// worker's, and that the next run passes.
func TestLimitsStopADiskFlood(t *testing.T) {
	t.Parallel()
	e := limitedValidator(t, Limits{Disk: 32 << 20})
	free := func() int64 {
		n, err := FreeBytes(e.v.WorkDir)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct{ name, script string }{
		{"the checkout", `head -c 200M /dev/zero > big`},
		{"/tmp", `head -c 200M /dev/zero > /tmp/big`},
		{"the home", `head -c 200M /dev/zero > "$HOME/big"`},
		{"/dev/shm", `head -c 200M /dev/zero > /dev/shm/big`},
		{"the output", `head -c 200M /dev/zero`},
		{"empty files", `i=0; while : > "/tmp/f$i"; do i=$((i+1)); done; echo "$i files"; exit 1`},
	} {
		before := free()
		got, output := e.validate(t, c.script, nil)
		overLimit(t, c.name, got, output, "worker limit: disk 32 MiB")
		e.passes(t, "a disk flood of "+c.name)
		// What the run wrote went with its file system: the worker's disk has what it had, give
		// or take what the machine's other work (other tests, in CI) wrote meanwhile, which
		// is why the margin is wide; a flood that escaped would have taken 200 MiB.
		if after := free(); after < before-(150<<20) {
			t.Errorf("the work directory's file system had %s free before the flood of %s, %s after",
				size.Format(before), c.name, size.Format(after))
		}
	}
}

// TestLimitsDoNotFailAnHonestRun ensures an honest run held to the worker's default limits,
// which writes, forks and allocates a little, passes, with its checkout, its writable
// directories and /dev/shm where it expects them, and /dev read-only.
func TestLimitsDoNotFailAnHonestRun(t *testing.T) {
	t.Parallel()
	e := limitedValidator(t, DefaultLimits)
	got, output := e.validate(t, `set -e
grep -q fine a.txt
head -c 10M /dev/zero > big && rm big
echo x > /tmp/x && echo x > "$HOME/x" && echo x > /dev/shm/x
for i in 1 2 3 4 5 6 7 8; do sleep 0 & done; wait
if echo x > /dev/x 2>/dev/null; then echo "/dev is writable"; exit 1; fi
echo fine`, nil)
	if !got.Passed() || got.Reason != "" {
		t.Errorf("an honest run under the default limits: result %s, reason %q; want PASSED\n%s", got.Result, got.Reason, output)
	}
}

// TestLimitsReleaseKillsAndRemoves ensures a run's cgroups and file system go when it is
// released, a process left in its cgroup killed first; and that a worker that finds them left
// by a dead worker's run removes them too.
func TestLimitsReleaseKillsAndRemoves(t *testing.T) {
	t.Parallel()
	workDir := t.TempDir()
	lim := NewLimiter(Limits{Memory: 64 << 20, Pids: 64, Disk: 32 << 20}, workDir)
	for _, st := range lim.Status() {
		if !st.Kept {
			t.Fatalf("this machine does not let a worker keep the %s limit: %s", st.Name, st.Why)
		}
	}
	prepared := func() (*runDir, *runLimit, *exec.Cmd) {
		rd, err := newRunDir(workDir)
		if err != nil {
			t.Fatal(err)
		}
		r, err := lim.prepare(rd.path, Limits{})
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		if r.root != filepath.Join(rd.path, "disk") || !diskMounted(t, r.root) {
			t.Fatalf("the run's file system is not mounted at %s/disk", rd.path)
		}
		// What ag-worker weighs its work directory's free space by, at its start, against its
		// runs' disks: here a file system of 32 MiB, less ext4's own records.
		if free, err := FreeBytes(r.root); err != nil || free < 24<<20 || free > 32<<20 {
			t.Errorf("FreeBytes of a run's new file system of 32 MiB: %d, %v; want 24 to 32 MiB", free, err)
		}
		left := exec.Command("sleep", "600")
		if err := left.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = left.Process.Kill(); _ = left.Wait() })
		if err := r.join(left.Process.Pid); err != nil {
			t.Fatalf("join: %v", err)
		}
		for _, cg := range r.sys.cgroups {
			if pids := cgroupPids(cg.dir); len(pids) != 1 || pids[0] != left.Process.Pid {
				t.Fatalf("cgroup %s holds %v, want the process that joined it, %d", cg.dir, pids, left.Process.Pid)
			}
		}
		return rd, r, left
	}
	gone := func(what string, rd *runDir, r *runLimit, left *exec.Cmd) {
		t.Helper()
		if err := left.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
			t.Errorf("%s: the process left in the run's cgroup ended with %v, want killed", what, err)
		}
		for _, cg := range r.sys.cgroups {
			if _, err := os.Stat(cg.dir); err == nil {
				t.Errorf("%s: the run's cgroup %s is still there", what, cg.dir)
			}
		}
		if diskMounted(t, r.sys.disk) {
			t.Errorf("%s: the run's file system is still mounted at %s", what, r.sys.disk)
		}
	}

	rd, r, left := prepared()
	if err := r.release(); err != nil {
		t.Errorf("release: %v", err)
	}
	gone("released", rd, r, left)
	if err := rd.remove(); err != nil {
		t.Error(err)
	}

	// Detached once its sandbox has made its mounts, the run's file system is out of the
	// worker's mount namespace (a killed worker leaves no mount), and lives on through the
	// worker's open root until released.
	rd, r, left = prepared()
	r.detach()
	if diskMounted(t, r.root) {
		t.Errorf("detached: the run's file system is still mounted at %s in the worker's namespace", r.root)
	}
	through := fmt.Sprintf("/proc/self/fd/%d/written-after-detach", r.sys.root.Fd())
	if err := os.WriteFile(through, []byte("x"), 0o644); err != nil {
		t.Errorf("detached: the run's file system cannot be written through the worker's root: %v", err)
	}
	if err := r.release(); err != nil {
		t.Errorf("release of a detached run: %v", err)
	}
	gone("detached and released", rd, r, left)
	if err := rd.remove(); err != nil {
		t.Error(err)
	}

	rd, r, left = prepared()
	rd.lock.Close() // its worker died
	v := &Validator{WorkDir: workDir, Limits: lim}
	if err := v.ReapOrphans(context.Background()); err != nil {
		t.Fatal(err)
	}
	gone("reaped", rd, r, left)
	if _, err := os.Stat(rd.path); err == nil {
		t.Errorf("the dead worker's run directory %s is still there", rd.path)
	}
	if err := r.release(); err != nil { // what the dead worker held open in this process
		t.Errorf("release after the reaper: %v", err)
	}
}

// diskMounted reports whether a file system is mounted at dir.
func diskMounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && unescapeMount(f[4]) == dir {
			return true
		}
	}
	return false
}

// TestParseCgroups ensures the worker finds its cgroups as /proc/self/mountinfo and
// /proc/self/cgroup tell them: v1 hierarchies alone or together (cpu,cpuacct), mounted whole or
// from a cgroup namespace's root, v2, and paths with escaped spaces.
func TestParseCgroups(t *testing.T) {
	t.Parallel()
	mountinfo := `22 1 0:20 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
30 22 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
31 22 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
32 22 0:28 /docker/abc /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
33 22 0:29 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
34 22 0:30 / /mnt/with\040space rw - ext4 /dev/vda rw
35 22 0:31 / /cut/short rw - cgroup
36 22 / /too/few - cgroup2 cgroup2 rw
37 22 0:32 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
`
	mounts := parseMountinfo(strings.NewReader(mountinfo))
	// The lines cut short are passed over, and the mount after them is read.
	if len(mounts) != 5 || mounts[4].point != "/sys/fs/cgroup/freezer" {
		t.Fatalf("parseMountinfo found the cgroup mounts %+v, want 5, the freezer's last", mounts)
	}
	own := parseProcCgroup(strings.NewReader("9:pids:/docker/abc/sub\n4:memory:/process_api/x\n2:cpu,cpuacct:/\n0::/user.slice/w.service\n"))
	if own.v2 != "/user.slice/w.service" || own.v1["memory"] != "/process_api/x" || own.v1["cpu"] != "/" || own.v1["cpuacct"] != "/" {
		t.Errorf("parseProcCgroup = %+v", own)
	}
	// Read whatever the order of the lines, and past one that is not ID:CONTROLLERS:PATH.
	if got := parseProcCgroup(strings.NewReader("garbage\n0::/w.service\n4:memory:/x\n")); got.v2 != "/w.service" || got.v1["memory"] != "/x" {
		t.Errorf("parseProcCgroup with the v2 line first = %+v", got)
	}
	for _, c := range []struct {
		mount int
		path  string
		want  string
	}{
		{0, own.v1["memory"], "/sys/fs/cgroup/memory/process_api/x"},
		{1, own.v1["cpu"], "/sys/fs/cgroup/cpu,cpuacct"},
		{2, own.v1["pids"], "/sys/fs/cgroup/pids/sub"},
		{2, "/elsewhere", ""},
		{2, "/docker/abcdef", ""},
		{3, own.v2, "/sys/fs/cgroup/unified/user.slice/w.service"},
	} {
		got, ok := cgroupDir(mounts[c.mount], c.path)
		if !ok {
			got = ""
		}
		if got != c.want {
			t.Errorf("cgroupDir(%+v, %q) = %q, want %q", mounts[c.mount], c.path, got, c.want)
		}
	}
	if !mounts[1].v2 && (len(mounts[1].controllers) != 1 || mounts[1].controllers[0] != "cpu") {
		t.Errorf("the cpu,cpuacct mount has controllers %v, want cpu", mounts[1].controllers)
	}
	for in, want := range map[string]string{
		`/mnt/with\040space\134x`: `/mnt/with space\x`,
		`/ends/with\134`:          `/ends/with\`,
		`/cut\04`:                 `/cut\04`,
		`/a\1`:                    `/a\1`,
		`/digits/a123`:            `/digits/a123`,
		`/not\999octal`:           `/not\999octal`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCgroupV2Files ensures what a worker writes and reads of a cgroup v2, which this machine
// may not have delegated to test it for real: the controllers it gives its runs' cgroups (from
// the cgroup it moved into too), the limits it writes, and the counts it reads a reached limit
// from.
func TestCgroupV2Files(t *testing.T) {
	t.Parallel()
	own := t.TempDir()
	write := func(dir, name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(own, "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
	write(own, "cgroup.subtree_control", "")
	for _, dir := range []string{own, filepath.Join(own, v2WorkerLeaf)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		parent, names, err := enableV2(dir)
		if err != nil || parent != own || strings.Join(names, " ") != "memory pids cpu" {
			t.Errorf("enableV2(%s) = %s, %v, %v; want %s, memory pids cpu", dir, parent, names, err, own)
		}
		if b, _ := os.ReadFile(filepath.Join(own, "cgroup.subtree_control")); string(b) != "+memory +pids +cpu" {
			t.Errorf("enableV2 wrote %q to cgroup.subtree_control", b)
		}
	}

	run := filepath.Join(own, "ag-validate-1")
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"memory.max", "memory.swap.max", "pids.max", "cpu.weight", "memory.events", "pids.events"} {
		write(run, f, "")
	}
	lim := Limits{Memory: 64 << 20, Pids: 64}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if err := (cgroupController{name: c, parent: own, v2: true}).set(run, lim); err != nil {
			t.Fatalf("set %s: %v", c, err)
		}
	}
	for f, want := range map[string]string{"memory.max": "67108864", "memory.swap.max": "0", "pids.max": "64", "cpu.weight": "100"} {
		if b, _ := os.ReadFile(filepath.Join(run, f)); string(b) != want {
			t.Errorf("%s = %q, want %q", f, b, want)
		}
	}
	r := &runLimit{limits: lim, sys: runSys{cgroups: []*runCgroup{{dir: run, v2: true, controllers: []string{"memory", "pids", "cpu"}}}}}
	for _, c := range []struct{ file, content, want string }{
		{"memory.events", "low 0\nhigh 0\nmax 12\noom 1\noom_kill 0\n", ""},
		{"memory.events", "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n", "memory 64 MiB"},
		// A fork flood that also filled the memory is told as the flood it is.
		{"pids.events", "max 3\n", "processes 64"},
		{"memory.events", "low 0\nhigh 0\nmax 12\noom 1\noom_kill 0\n", "processes 64"},
	} {
		write(run, c.file, c.content)
		if got := r.exceeded(); got != c.want {
			t.Errorf("with %s %q: exceeded = %q, want %q", c.file, c.content, got, c.want)
		}
	}
}

// BenchmarkHandleTrue measures what a validate job of `true` costs the worker, from the
// checkout to the signed attestation, in the sandbox with no network: held to the default
// limits (a cgroup and a file system of its own) and without them.
//
//	go test -run '^$' -bench HandleTrue -benchtime 50x -count 5 ./internal/worker/
func BenchmarkHandleTrue(b *testing.B) {
	for _, mode := range []string{"limits", "no-limits"} {
		b.Run(mode, func(b *testing.B) {
			e := limitedValidator(b, DefaultLimits)
			if mode == "no-limits" {
				e.v.Limits = nil
			}
			for b.Loop() {
				if got, out := e.validate(b, "true", nil); !got.Passed() {
					b.Fatalf("true: %s\n%s", got.Result, out)
				}
			}
		})
	}
}

// TestARunIsHeldOnlyToTheLimitsThisMachineKeeps holds that a run is said to be held only to the
// limits the worker has the means for: without a cgroup controller of memory (or of processes),
// or a file system of its own, the run's limit of it is none, and the worker's log of the run
// says so, not the limit asked.
func TestARunIsHeldOnlyToTheLimitsThisMachineKeeps(t *testing.T) {
	t.Parallel()
	asked := Limits{Memory: 64 << 20, Pids: 64, Disk: 32 << 20}
	for _, c := range []struct {
		controllers []string
		want        string
	}{
		{[]string{"pids", "cpu"}, "memory none, processes 64, disk none"},
		{[]string{"memory", "cpu"}, "memory 64 MiB, processes none, disk none"},
		{[]string{"cpu"}, "memory none, processes none, disk none"},
	} {
		l := &Limiter{max: asked}
		for _, name := range c.controllers {
			l.sys.controllers = append(l.sys.controllers, cgroupController{name: name, parent: t.TempDir()})
		}
		r, err := l.prepare(t.TempDir(), asked)
		if err != nil {
			t.Fatalf("prepare with the controllers %v: %v", c.controllers, err)
		}
		if got := r.String(); got != c.want {
			t.Errorf("a run with the controllers %v: held to %q, want %q", c.controllers, got, c.want)
		}
	}
}

// TestALimitReachedIsTheRunsOwnAndTheFloodComesFirst holds the reason a run is stopped for on
// cgroup v1, where each controller is a cgroup of its own (the memory one listed first): a
// run that reached its process and its memory limit reached the process limit, whichever
// cgroup is read first; and a run is never said to have reached a limit it is not held to,
// whatever its cgroup counts (a fork refused for an ancestor's limit, a process killed for the
// machine's memory).
func TestALimitReachedIsTheRunsOwnAndTheFloodComesFirst(t *testing.T) {
	t.Parallel()
	write := func(dir, name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	memory, pids := t.TempDir(), t.TempDir()
	write(memory, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
	write(pids, "pids.events", "max 3\n")
	run := func(lim Limits) *runLimit {
		return &runLimit{limits: lim, sys: runSys{cgroups: []*runCgroup{
			{dir: memory, controllers: []string{"memory"}},
			{dir: pids, controllers: []string{"pids"}},
		}}}
	}
	for _, c := range []struct {
		limits Limits
		want   string
	}{
		{Limits{Memory: 64 << 20, Pids: 64}, "processes 64"},
		{Limits{Memory: 64 << 20}, "memory 64 MiB"},
		{Limits{Pids: 64}, "processes 64"},
		{Limits{}, ""},
	} {
		if got := run(c.limits).exceeded(); got != c.want {
			t.Errorf("held to %+v, with a fork refused and a process killed for memory: exceeded = %q, want %q", c.limits, got, c.want)
		}
	}
	write(pids, "pids.events", "max 0\n")
	if got := run(Limits{Memory: 64 << 20, Pids: 64}).exceeded(); got != "memory 64 MiB" {
		t.Errorf("with a process killed for memory only: exceeded = %q, want %q", got, "memory 64 MiB")
	}
}

// TestALimitNotHeldIsNotWritten holds that a run's cgroup is given only the limits the run is
// held to: a memory limit of none must not be written as 0 bytes (every process of the run
// would be killed at once), nor a process limit of none as 0 processes. The CPU weight is
// always written.
func TestALimitNotHeldIsNotWritten(t *testing.T) {
	t.Parallel()
	for _, v2 := range []bool{false, true} {
		dir := t.TempDir()
		files := []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.max", "memory.swap.max", "pids.max", "cpu.weight", "cpu.shares"}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []string{"memory", "pids", "cpu"} {
			if err := (cgroupController{name: c, parent: filepath.Dir(dir), v2: v2}).set(dir, Limits{}); err != nil {
				t.Fatalf("v2 %v: set %s: %v", v2, c, err)
			}
		}
		want := map[string]string{"cpu.shares": "1024"}
		if v2 {
			want = map[string]string{"cpu.weight": "100"}
		}
		for _, f := range files {
			if b, _ := os.ReadFile(filepath.Join(dir, f)); string(b) != want[f] {
				t.Errorf("v2 %v: with no limit held, %s = %q, want %q", v2, f, b, want[f])
			}
		}
	}
}

// TestAWorkerReapsOnlyRunCgroupsLongEmpty holds which cgroups a worker takes for those of a
// dead worker's runs and removes: a run's (ag-validate-*) last changed over a minute ago, and
// no other, nor a file of that name. (A run's cgroup that holds a process the kernel refuses to
// remove, whatever its age.)
func TestAWorkerReapsOnlyRunCgroupsLongEmpty(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	old := time.Now().Add(-2 * orphanCgroupAge)
	for _, d := range []struct {
		name string
		dir  bool
		old  bool
	}{
		{runDirPattern + "dead", true, true},
		{runDirPattern + "zdead", true, true}, // after the file and the live one
		{runDirPattern + "live", true, false},
		{"not-a-run", true, true},
		{runDirPattern + "file", false, true},
	} {
		p := filepath.Join(parent, d.name)
		var err error
		if d.dir {
			err = os.Mkdir(p, 0o755)
		} else {
			err = os.WriteFile(p, nil, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
		if d.old {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	reapCgroups(cgroupController{name: "pids", parent: parent})
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{runDirPattern + "file", runDirPattern + "live", "not-a-run"}; !slices.Equal(left, want) {
		t.Errorf("after the reaping: %q, want %q", left, want)
	}
}

// TestWhatIsLeftInARunsCgroupIsKilled: what a run left in its cgroup is killed through
// cgroup.kill on cgroup v2 where the kernel has it (5.14 on), and one process at a time
// otherwise: on v1, whatever files its directory holds, and on a v2 without cgroup.kill.
// (This machine may have no cgroup v2 to delegate: the cgroup here is a directory of the
// files the kernel shows, and its process a real one.)
func TestWhatIsLeftInARunsCgroupIsKilled(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name           string
		v2, cgroupKill bool
		wantKilled     bool
	}{
		{"v1, with a file named cgroup.kill", false, true, true},
		{"v2 without cgroup.kill", true, false, true},
		{"v2 with cgroup.kill", true, true, false}, // the kernel kills them: the worker wrote 1
	} {
		dir := t.TempDir()
		left := exec.Command("sleep", "600")
		if err := left.Start(); err != nil {
			t.Fatal(err)
		}
		ended := make(chan error, 1)
		go func() { ended <- left.Wait() }()
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprintf("%d\n", left.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
		if c.cgroupKill {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		killCgroup(dir, c.v2)
		if !c.wantKilled {
			if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.kill")); string(b) != "1" {
				t.Errorf("%s: cgroup.kill holds %q, want 1", c.name, b)
			}
			_ = left.Process.Kill()
			<-ended
			continue
		}
		select {
		case err := <-ended:
			if err == nil || !strings.Contains(err.Error(), "killed") {
				t.Errorf("%s: the process left ended with %v, want killed", c.name, err)
			}
		case <-time.After(time.Minute): // a bound on a failure, not a wait for success
			t.Errorf("%s: the process left was not killed", c.name)
			_ = left.Process.Kill()
			<-ended
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.kill")); len(b) != 0 {
			t.Errorf("%s: cgroup.kill was written %q", c.name, b)
		}
	}
}

// TestAWorkerFindsWhereItCanMakeCgroupsAndSaysWhyNot: of a machine's cgroup mounts and the
// worker's own cgroups, where the worker makes its runs' cgroups for each controller (a v1
// hierarchy that holds it), and why not where it cannot: a v1 hierarchy mounted that does
// not hold it, none mounted, and a cgroup v2 that cannot give it the controller, with the
// reason v2 gave.
func TestAWorkerFindsWhereItCanMakeCgroupsAndSaysWhyNot(t *testing.T) {
	t.Parallel()
	memory, pids, unified := t.TempDir(), t.TempDir(), t.TempDir()
	mountinfo := fmt.Sprintf(`30 22 0:26 / %s rw,relatime shared:9 - cgroup cgroup rw,memory
32 22 0:28 / %s rw,relatime - cgroup cgroup rw,pids
33 22 0:29 / %s rw,relatime - cgroup2 cgroup2 rw
`, memory, pids, unified)
	// In the memory hierarchy and in v2 (whose directory has no cgroup.controllers here), not
	// in the pids one, though it is mounted; no cpu hierarchy is mounted.
	found, why := controllersOf([]byte(mountinfo), []byte("4:memory:/ag\n0::/\n"))
	if c, ok := found["memory"]; !ok || c.parent != filepath.Join(memory, "ag") || c.v2 {
		t.Errorf("memory: %+v, %v; want a v1 controller making cgroups in %s/ag", c, ok, memory)
	}
	for _, name := range []string{"pids", "cpu"} {
		if c, ok := found[name]; ok {
			t.Errorf("%s: found %+v; want none", name, c)
		}
		for _, want := range []string{"no cgroup v1 " + name + " hierarchy holds this worker", "cgroup.controllers"} {
			if !strings.Contains(why[name], want) {
				t.Errorf("%s: why %q; want it to say %q", name, why[name], want)
			}
		}
	}
}

// TestAPreparePhaseThatFailsIsNotTakenForDone: a Go preset's prepare phase that fails (here,
// for a module its go.sum does not hold) leaves the repository's caches unmarked, so that the
// next run prepares them again, rather than taken as prepared for modules it did not fetch.
func TestAPreparePhaseThatFailsIsNotTakenForDone(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	sb := testSandbox(t, SandboxConfig{})
	c, treeDigest, signer, _ := serveCandidate(t, map[string]string{
		"go.mod": "module example.com/a\n\ngo 1.22\n\nrequire example.invalid/nothing v1.0.0\n",
		"a.go":   "package a\n\nimport _ \"example.invalid/nothing\"\n",
	})
	var log syncbuf.Buffer
	v := &Validator{Client: c, Signer: signer, CacheDir: t.TempDir(), WorkDir: t.TempDir(), Sandbox: sb, KillGrace: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&log, nil))}
	// Not warmed after the run (a repository being warmed is not warmed again): this is of the
	// phase before the command, and a warm would outlive the test.
	v.warming.Store("app", true)
	if _, err := handleValidate(t, v, map[string]any{
		"repository": "app", "candidate_revision": "rev_1", "tree_digest": treeDigest,
		"command": []any{"true"}, "timeout": "2m", "preset": client.PresetGo,
	}); err != nil {
		t.Fatal(err)
	}
	// The phase ran, and failed as it was made to: else nothing below is of a failed phase.
	if said := log.Lines(`msg="the prepare phase did not finish"`, "exit_code=1", "missing go.sum entry"); len(said) != 1 {
		t.Fatalf("the worker's log does not say the prepare phase failed for the missing go.sum entry:\n%s", log.String())
	}
	caches, err := v.preparedCaches("app")
	if err != nil {
		t.Fatal(err)
	}
	if marks, err := os.ReadDir(filepath.Join(caches.dir, "modules")); err != nil || len(marks) != 0 {
		t.Errorf("after a prepare phase that could not fetch a module: marks %v, %v; want none", marks, err)
	}
}
