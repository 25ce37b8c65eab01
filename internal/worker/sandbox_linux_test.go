//go:build linux

package worker

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/attest"
)

// The attacks below are what a validated tree did to a worker before the sandbox: read its
// token from /proc/$PPID/environ, copy its key, write outside its checkout, kill it, and leave
// a setsid child behind. Each runs as a validation command would, sandboxed, and, where that
// is cheap and harmless, also without the sandbox, to show that the attack is real and that
// the test would see it succeed.

// The helper worker process of these tests: the test binary again, told by these.
const (
	helperSandboxEnv = "AG_WORKER_TEST_SANDBOX"   // "bwrap" or "none"; set: this process is the helper
	helperSecretEnv  = "AG_TOKEN"                 // the secret the helper holds, as a worker holds its token
	helperOutputMark = "--- the command's output" // the helper prints the output after this line
)

// testSandbox answers a sandbox with cfg, as a worker with the test's PATH would make it. The
// sandbox tests fail, not skip, without bubblewrap: CI installs it.
func testSandbox(t testing.TB, cfg SandboxConfig) *Sandbox {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("bwrap is not on PATH: install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap) to run the sandbox tests: %v", err)
	}
	if cfg.PATH == "" {
		cfg.PATH = os.Getenv("PATH")
	}
	sb, err := NewSandbox(cfg)
	if err != nil {
		t.Fatalf("NewSandbox: %v", err)
	}
	return sb
}

func secret(t testing.TB) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "secret-" + hex.EncodeToString(b)
}

// runIn runs script as Handle runs a validation command: in a run directory of its own under
// workDir, sandboxed in sb (or directly when sb is nil, with the environment of this process
// but its token), with the policy's env. It answers the outcome and the whole output.
func runIn(t testing.TB, workDir string, sb *Sandbox, script string, env map[string]string, timeout time.Duration) (runResult, string, error) {
	t.Helper()
	rd, err := newRunDir(workDir)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.remove()
	tree := filepath.Join(rd.path, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	s := runSpec{
		Argv: []string{"sh", "-c", script}, Dir: tree, Timeout: timeout, Grace: 200 * time.Millisecond,
		LogPath: filepath.Join(rd.path, "output.log"), GroupFile: rd.groupFile(), Sandbox: sb,
	}
	if sb != nil {
		if s.Box, err = makeBoxDirs(rd.path, tree); err != nil {
			t.Fatal(err)
		}
		if sb.shared {
			s.Box.Network = attest.NetworkShared // as Handle does
		}
		if _, err := sb.seedGoCache(s.Box); err != nil { // as Handle does
			t.Fatal(err)
		}
		s.Env, err = sb.Env(env)
	} else {
		s.Env, err = commandEnv(os.Environ(), env)
	}
	if err != nil {
		t.Fatal(err)
	}
	res, err := runCommand(context.Background(), s)
	log, _ := os.ReadFile(s.LogPath)
	return res, string(log), err
}

// TestHelperRunsSandboxed is no test of its own: the tests of the worker's secrets run the test
// binary again as a worker that holds a secret in its environment and on its command line, and
// that runs the script they give it as a validation command, in the sandbox or not. It prints
// the command's exit code and output.
func TestHelperRunsSandboxed(t *testing.T) {
	mode := os.Getenv(helperSandboxEnv)
	if mode == "" {
		t.Skip("the worker process of the sandbox tests")
	}
	var sb *Sandbox
	if mode == "bwrap" {
		sb = testSandbox(t, SandboxConfig{})
	}
	res, log, err := runIn(t, t.TempDir(), sb, os.Getenv(helperScriptEnv),
		map[string]string{"WORKER_PID": strconv.Itoa(os.Getpid())}, time.Minute)
	if err != nil {
		t.Fatalf("the command did not run: %v", err)
	}
	fmt.Printf("exit=%d own_pid_namespace=%v\n%s\n%s", res.ExitCode, res.OwnPIDNamespace, helperOutputMark, log)
}

// helperRun is what a helper worker did.
type helperRun struct {
	killed bool   // the helper died of SIGKILL
	out    string // its stdout: the command's exit and output
	stderr string
}

// runHelper runs a helper worker that holds secret as its AG_TOKEN, in its environment and on
// its command line, and runs script sandboxed (mode "bwrap") or not ("none").
func runHelper(t *testing.T, mode, secret, script string) helperRun {
	t.Helper()
	var stdout, stderr strings.Builder
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRunsSandboxed$", "-test.count=1", "-test.v", secret)
	cmd.Env = append(os.Environ(), helperSandboxEnv+"="+mode, helperScriptEnv+"="+script, helperSecretEnv+"="+secret)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	h := helperRun{out: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		ws, ok := exit.Sys().(syscall.WaitStatus)
		h.killed = ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
	}
	if err != nil && !h.killed {
		t.Fatalf("the helper worker (%s) failed: %v\nstdout:\n%s\nstderr:\n%s", mode, err, h.out, h.stderr)
	}
	return h
}

// output answers what the command printed, or fails t when the helper did not say.
func (h helperRun) output(t *testing.T) string {
	t.Helper()
	_, out, ok := strings.Cut(h.out, helperOutputMark+"\n")
	if !ok {
		t.Fatalf("the helper worker printed no command output:\n%s\nstderr:\n%s", h.out, h.stderr)
	}
	return out
}

// readEnvironments reads the environment and command line of the parent and of every process
// it can see, as a validation that wants the worker's token does.
const readEnvironments = `
echo "parent $PPID: $(tr '\0' ' ' < /proc/$PPID/environ 2>&1) $(tr '\0' ' ' < /proc/$PPID/cmdline 2>&1)"
for p in /proc/[0-9]*; do
	echo "$p: $(tr '\0' ' ' < $p/environ 2>&1) $(tr '\0' ' ' < $p/cmdline 2>&1)"
done
env
echo "looked at every process"
`

// TestSandboxHidesTheWorkersEnvironment ensures a sandboxed command reads the worker's token
// from no process's environment or command line, its parent's included; without the sandbox,
// the same command reads it from its parent's.
func TestSandboxHidesTheWorkersEnvironment(t *testing.T) {
	t.Parallel()
	testSandbox(t, SandboxConfig{})
	token := secret(t)

	out := runHelper(t, "bwrap", token, readEnvironments).output(t)
	if strings.Contains(out, token) {
		t.Errorf("the sandboxed command read the worker's token:\n%s", out)
	}
	if !strings.Contains(out, "looked at every process") || !strings.Contains(out, "/proc/1:") {
		t.Errorf("the sandboxed command did not get to look:\n%s", out)
	}

	if out := runHelper(t, "none", token, readEnvironments).output(t); !strings.Contains(out, token) {
		t.Errorf("without the sandbox the command did not find the token in its parent's environment, so this test shows nothing:\n%s", out)
	}
}

// TestSandboxCannotSignalTheWorker ensures a sandboxed command cannot kill its worker, by its
// parent's pid or by the worker's own; without the sandbox it can.
func TestSandboxCannotSignalTheWorker(t *testing.T) {
	t.Parallel()
	testSandbox(t, SandboxConfig{})
	const script = `kill -9 "$PPID"; kill -9 "$WORKER_PID"; sleep 0.2; echo "the worker lives"`

	h := runHelper(t, "bwrap", secret(t), script)
	if h.killed || !strings.Contains(h.output(t), "the worker lives") {
		t.Errorf("the sandboxed command killed its worker (killed %v):\n%s", h.killed, h.out)
	}
	if h := runHelper(t, "none", secret(t), script); !h.killed {
		t.Errorf("without the sandbox the command did not kill its worker, so this test shows nothing:\n%s", h.out)
	}
}

// TestSandboxHidesFilesOutsideTheRun ensures a sandboxed command reads neither the worker's key
// file nor its blob cache nor another run's directory, nor host secrets in /etc; without the
// sandbox, it reads the key and the cache.
func TestSandboxHidesFilesOutsideTheRun(t *testing.T) {
	t.Parallel()
	sb := testSandbox(t, SandboxConfig{})
	key := secret(t)
	keyFile := filepath.Join(t.TempDir(), "worker.key")
	cache := t.TempDir()
	cached := secret(t)
	workDir := t.TempDir()
	other, err := newRunDir(workDir) // a run of another worker sharing the work directory
	if err != nil {
		t.Fatal(err)
	}
	defer other.remove()
	otherTree := secret(t)
	for file, content := range map[string]string{
		keyFile:                              key,
		filepath.Join(cache, "blob"):         cached,
		filepath.Join(other.path, "secrets"): otherTree,
	} {
		if err := os.WriteFile(file, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	script := fmt.Sprintf(`cat %q %q/* %q/*/* /etc/shadow 2>&1; ls -la /etc /ag 2>&1; echo "tried every file"`,
		keyFile, cache, workDir)

	res, out, err := runIn(t, workDir, sb, script, nil, 10*time.Second)
	if err != nil || !strings.Contains(out, "tried every file") {
		t.Fatalf("the sandboxed command did not run: %+v, %v\n%s", res, err, out)
	}
	for what, s := range map[string]string{"the worker's key": key, "the blob cache": cached, "another run's directory": otherTree} {
		if strings.Contains(out, s) {
			t.Errorf("the sandboxed command read %s:\n%s", what, out)
		}
	}
	if strings.Contains(out, "root:") || strings.Contains(out, "ssh") {
		t.Errorf("the sandboxed command sees host secrets of /etc:\n%s", out)
	}

	_, out, err = runIn(t, workDir, nil, script, nil, 10*time.Second)
	if err != nil || !strings.Contains(out, key) || !strings.Contains(out, cached) {
		t.Errorf("without the sandbox the command did not read the key and the cache, so this test shows nothing: %v\n%s", err, out)
	}
}

// TestSandboxGetsNoInheritedFile ensures a file the worker inherited open (from whoever started
// it: a shell's redirection of a key file, a supervisor's socket) does not reach the sandboxed
// command through bwrap, while without the sandbox a child does get it. Not parallel: the
// sandbox marks the process's inherited descriptors close-on-exec, which would hide the file
// from the control run too.
func TestSandboxGetsNoInheritedFile(t *testing.T) {
	key := secret(t)
	keyFile := filepath.Join(t.TempDir(), "worker.key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(keyFile, syscall.O_RDONLY, 0) // no O_CLOEXEC: as if inherited
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	script := fmt.Sprintf(`cat /proc/self/fd/%d 2>&1; echo "tried fd %d"`, fd, fd)

	_, out, err := runIn(t, t.TempDir(), nil, script, nil, 10*time.Second)
	if err != nil || !strings.Contains(out, key) {
		t.Fatalf("without the sandbox the command did not read the inherited file, so this test shows nothing: %v\n%s", err, out)
	}
	sb := testSandbox(t, SandboxConfig{})
	res, out, err := runIn(t, t.TempDir(), sb, script, nil, 10*time.Second)
	if err != nil || !strings.Contains(out, fmt.Sprintf("tried fd %d", fd)) {
		t.Fatalf("the sandboxed command did not run: %+v, %v\n%s", res, err, out)
	}
	if strings.Contains(out, key) {
		t.Fatalf("the sandboxed command read the file the worker inherited:\n%s", out)
	}
}

// TestASandboxThatCannotStartIsNotAValidation ensures that when bwrap cannot set the sandbox
// up (here a --sandbox-ro directory removed after the worker started), the run is an error of
// the worker, retried elsewhere, not a command that ran and failed: that would sign a FAILED
// attestation, isolated, for a command that never ran, and reject an honest change.
func TestASandboxThatCannotStartIsNotAValidation(t *testing.T) {
	t.Parallel()
	tools := t.TempDir()
	sb := testSandbox(t, SandboxConfig{ReadOnly: []string{tools}})
	if err := os.Remove(tools); err != nil {
		t.Fatal(err)
	}
	res, out, err := runIn(t, t.TempDir(), sb, "echo RAN", nil, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "the sandbox did not start the command") || strings.Contains(out, "RAN") {
		t.Fatalf("a sandbox that could not be set up: %+v, %v\n%s; want the error that it did not start the command", res, err, out)
	}
}

// TestSandboxKeepsWritesInTheRun ensures a sandboxed command writes its checkout, its home and
// its /tmp, and nothing else: not a directory of the host, not the blob cache, not the work
// directory, not the system's directories. Without the sandbox, it writes them.
func TestSandboxKeepsWritesInTheRun(t *testing.T) {
	t.Parallel()
	sb := testSandbox(t, SandboxConfig{})
	outside, cache, workDir := t.TempDir(), t.TempDir(), t.TempDir()
	targets := []string{filepath.Join(outside, "pwned"), filepath.Join(cache, "pwned"), filepath.Join(workDir, "pwned")}
	const writeOwn = `echo mine > ./built && echo mine > "$HOME/cached" && echo mine > "$TMPDIR/scratch" && echo "wrote my own"`
	write := func(files ...string) string {
		return fmt.Sprintf(`for f in %s; do echo x > "$f" 2>/dev/null && echo "wrote $f"; done; `, strings.Join(files, " ")) + writeOwn
	}
	// The system's directories only in the sandbox: this test runs as root, and the control
	// run would write them.
	res, out, err := runIn(t, workDir, sb, write(append(targets, "/usr/pwned", "/etc/pwned", "/pwned", "/ag/pwned")...), nil, 10*time.Second)
	if err != nil || res.ExitCode != 0 || !strings.Contains(out, "wrote my own") {
		t.Fatalf("the sandboxed command could not write its own directories: %+v, %v\n%s", res, err, out)
	}
	if strings.Contains(out, "wrote /") {
		t.Errorf("the sandboxed command wrote outside its run:\n%s", out)
	}
	for _, f := range append(targets, "/usr/pwned", "/etc/pwned", "/pwned") {
		if exists(f) {
			t.Errorf("the sandboxed command wrote %s", f)
		}
	}
	if runs, _ := filepath.Glob(filepath.Join(workDir, runDirPattern+"*")); len(runs) != 0 {
		t.Errorf("run directories left behind: %v", runs)
	}

	if _, out, err := runIn(t, workDir, nil, write(targets...), nil, 10*time.Second); err != nil || !exists(targets[0]) || !exists(targets[1]) {
		t.Errorf("without the sandbox the command did not write outside, so this test shows nothing: %v\n%s", err, out)
	}
}

// processesWith answers the live processes of the host whose environment holds kv.
func processesWith(kv string) []int {
	var pids []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || !processAlive(pid) {
			continue
		}
		env, err := os.ReadFile("/proc/" + p.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, v := range strings.Split(string(env), "\x00") {
			if v == kv {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// killAll kills the processes a failed test left behind.
func killAll(kv string) {
	for _, pid := range processesWith(kv) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// TestSandboxLeavesNoProcessBehind ensures nothing a sandboxed command started outlives its
// run, however it ends (it exits, times out, or its claim is lost), a setsid escape from the
// process group included; without the sandbox, the setsid escape survives.
func TestSandboxLeavesNoProcessBehind(t *testing.T) {
	t.Parallel()
	sb := testSandbox(t, SandboxConfig{})
	const escape = `setsid sh -c 'sleep 300' & sleep 300 & setsid sh -c 'trap "" TERM HUP; sleep 300' & sleep 0.2; echo started; `
	for name, c := range map[string]struct {
		script  string
		timeout time.Duration
	}{
		"exits":     {escape + "exit 0", 10 * time.Second},
		"times out": {escape + "sleep 300", 500 * time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			marker := "AG_TEST_MARKER=" + secret(t)
			t.Cleanup(func() { killAll(marker) })
			k, v, _ := strings.Cut(marker, "=")
			res, out, err := runIn(t, t.TempDir(), sb, c.script, map[string]string{k: v}, c.timeout)
			if err != nil || !strings.Contains(out, "started") {
				t.Fatalf("the sandboxed command did not run: %+v, %v\n%s", res, err, out)
			}
			if left := processesWith(marker); len(left) > 0 || res.Survivors {
				t.Errorf("processes of the sandboxed command outlived its run: %v (survivors %v)", left, res.Survivors)
			}
			if !res.OwnPIDNamespace {
				t.Error("the command ran in the worker's PID namespace")
			}
		})
	}
	t.Run("claim lost", func(t *testing.T) {
		t.Parallel()
		marker := "AG_TEST_MARKER=" + secret(t)
		t.Cleanup(func() { killAll(marker) })
		k, v, _ := strings.Cut(marker, "=")
		dir := t.TempDir()
		tree := filepath.Join(dir, "tree")
		if err := os.Mkdir(tree, 0o755); err != nil {
			t.Fatal(err)
		}
		box, err := makeBoxDirs(dir, tree)
		if err != nil {
			t.Fatal(err)
		}
		env, err := sb.Env(map[string]string{k: v})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		lost := errors.New("claim lost")
		lines := newPidLines()
		go func() {
			<-lines.started
			cancel(lost)
		}()
		_, err = runCommand(ctx, runSpec{
			Argv: []string{"sh", "-c", escape + "sleep 300"}, Dir: tree, Env: env, Timeout: time.Minute,
			LogPath: filepath.Join(dir, "output.log"), Grace: time.Second, Progress: lines.progress,
			Sandbox: sb, Box: box,
		})
		if !errors.Is(err, lost) {
			t.Fatalf("runCommand = %v, want the context's cause", err)
		}
		if left := processesWith(marker); len(left) > 0 {
			t.Errorf("processes of the sandboxed command outlived the lost claim: %v", left)
		}
	})
	t.Run("control: no sandbox", func(t *testing.T) {
		t.Parallel()
		marker := "AG_TEST_MARKER=" + secret(t)
		t.Cleanup(func() { killAll(marker) })
		k, v, _ := strings.Cut(marker, "=")
		if _, out, err := runIn(t, t.TempDir(), nil, escape+"exit 0", map[string]string{k: v}, 10*time.Second); err != nil {
			t.Fatalf("runCommand: %v\n%s", err, out)
		}
		if left := processesWith(marker); len(left) == 0 {
			t.Error("without the sandbox no setsid escape survived, so this test shows nothing")
		}
	})
}

// TestSandboxDiesWithTheWorker ensures a worker killed with SIGKILL takes its whole sandbox
// with it, setsid escapes included, and that the next worker's ReapOrphans removes the run's
// directory.
func TestSandboxDiesWithTheWorker(t *testing.T) {
	t.Parallel()
	testSandbox(t, SandboxConfig{})
	v := testValidator(t)
	marker := "AG_TEST_MARKER=" + secret(t)
	t.Cleanup(func() { killAll(marker) })
	var stderr strings.Builder
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperRunsACommand$", "-test.count=1")
	helper.Env = append(os.Environ(), helperWorkDirEnv+"="+v.WorkDir, helperSandboxEnv+"=bwrap", marker,
		helperScriptEnv+"="+`export `+marker+`; setsid sh -c 'sleep 300' & sleep 300 & echo started; wait`)
	helper.Stderr = &stderr
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	for lines.Scan() && lines.Text() != "ready" {
	}
	if lines.Text() != "ready" {
		_ = helper.Process.Kill()
		_ = helper.Wait()
		t.Fatalf("the worker process ended before it was ready:\n%s", stderr.String())
	}
	// The helper itself holds the marker: only the sandbox's processes count.
	inSandbox := func() []int {
		var pids []int
		for _, pid := range processesWith(marker) {
			if pid != helper.Process.Pid {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	// sh shows in /proc only the environment it was started with, not what it exported: the
	// processes it starts show the marker once they exec.
	if !eventually(5*time.Second, func() bool { return len(inSandbox()) >= 2 }) {
		t.Fatalf("the sandbox's sleeps are not running: %v", inSandbox())
	}
	_ = helper.Process.Kill()
	_ = helper.Wait()
	if !eventually(5*time.Second, func() bool { return len(inSandbox()) == 0 }) {
		t.Errorf("processes of the sandbox outlived their worker: %v", inSandbox())
	}
	if err := v.ReapOrphans(context.Background()); err != nil {
		t.Fatal(err)
	}
	if runs, _ := filepath.Glob(filepath.Join(v.WorkDir, runDirPattern+"*")); len(runs) != 0 {
		t.Errorf("run directories outlived the reaper: %v", runs)
	}
}

// TestSandboxRunsGoTest ensures an honest `go test ./...` of a module passes in the sandbox:
// the toolchain under /usr is visible and the build cache is the run's own.
func TestSandboxRunsGoTest(t *testing.T) {
	t.Parallel()
	sb := testSandbox(t, SandboxConfig{})
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	_, box := runHonestGoTest(t, sb)
	if !exists(filepath.Join(box.Home, ".cache", "go-build")) {
		t.Errorf("the build cache is not in the run's home %s", box.Home)
	}
}

// runHonestGoTest runs `go test ./...` of writeHonestModule's module in sb, in a run directory
// of its own, with the sandbox's Go build cache seed when it has one (as Handle does), fails
// the test unless it passes, and answers the run and its directories.
func runHonestGoTest(t *testing.T, sb *Sandbox) (runResult, boxDirs) {
	t.Helper()
	rd, err := newRunDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rd.remove() })
	tree := filepath.Join(rd.path, "tree")
	writeHonestModule(t, tree)
	box, err := makeBoxDirs(rd.path, tree)
	if err != nil {
		t.Fatal(err)
	}
	copied, err := sb.seedGoCache(box)
	if err != nil {
		t.Fatal(err)
	}
	env, err := sb.Env(map[string]string{"GOFLAGS": "-count=1", "GOTOOLCHAIN": "local", "GOPROXY": "off"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := runCommand(context.Background(), runSpec{
		Argv: []string{"go", "test", "./..."}, Dir: tree, Env: env, Timeout: 5 * time.Minute,
		LogPath: filepath.Join(rd.path, "output.log"), Grace: time.Second, Sandbox: sb, Box: box,
	})
	if err != nil || res.ExitCode != 0 || !strings.Contains(res.Tail, "ok  \texample.com/honest/sum") {
		t.Fatalf("go test ./... in the sandbox: exit %d, %v; output:\n%s", res.ExitCode, err, res.Tail)
	}
	t.Logf("seed copied in %v; go test ./... took %v", copied.Round(time.Millisecond), res.FinishedAt.Sub(res.StartedAt).Round(time.Millisecond))
	return res, box
}

// writeHonestModule writes, under tree, a module of the standard library only whose tests pass.
func writeHonestModule(t testing.TB, tree string) {
	t.Helper()
	for path, content := range map[string]string{
		"go.mod":           "module example.com/honest\n\ngo 1.22\n",
		"sum/sum.go":       "package sum\n\n// Of answers the sum of xs.\nfunc Of(xs ...int) int {\n\tn := 0\n\tfor _, x := range xs {\n\t\tn += x\n\t}\n\treturn n\n}\n",
		"sum/sum_test.go":  "package sum\n\nimport \"testing\"\n\nfunc TestOf(t *testing.T) {\n\tif got := Of(1, 2, 3); got != 6 {\n\t\tt.Fatalf(\"Of(1, 2, 3) = %d, want 6\", got)\n\t}\n}\n",
		"sum/doc_test.go":  "package sum_test\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/honest/sum\"\n)\n\nfunc ExampleOf() {\n\tfmt.Println(sum.Of(2, 2))\n\t// Output: 4\n}\n",
		"README.md":        "an honest module\n",
		"cmd/app/main.go":  "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/honest/sum\"\n)\n\nfunc main() { fmt.Println(sum.Of(1)) }\n",
		"cmd/app/empty.go": "package main\n",
	} {
		p := filepath.Join(tree, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSandboxEnv ensures the sandboxed command gets none of the worker's environment: only
// what builds need, in its private directories, the PATH directories it can see, and the
// policy's variables over them.
func TestSandboxEnv(t *testing.T) {
	t.Parallel()
	sb := testSandbox(t, SandboxConfig{PATH: "/root/go/bin:/usr/local/go/bin:bin:/bin:/usr/bin/../sbin"})
	env, err := sb.Env(map[string]string{"GOFLAGS": "-count=1", "HOME": "/ag/tree"})
	if err != nil {
		t.Fatal(err)
	}
	want := "PATH=/usr/local/go/bin:/bin:/usr/sbin HOME=/ag/home TMPDIR=/tmp LANG=C.UTF-8 " +
		"GOCACHE=/ag/home/.cache/go-build GOPATH=/ag/home/go GOMODCACHE=/ag/home/go/pkg/mod GOFLAGS=-count=1 HOME=/ag/tree"
	if got := strings.Join(env, " "); got != want {
		t.Errorf("env =\n%s\nwant\n%s", got, want)
	}
	if got := sandboxPATH("/root/bin:relative", sb.visible); got != defaultSandboxPATH {
		t.Errorf("PATH without a visible directory = %s, want %s", got, defaultSandboxPATH)
	}

	res, out, err := runIn(t, t.TempDir(), sb, `env | sort; echo "pwd=$(pwd)"`, map[string]string{"CI": "1"}, 10*time.Second)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("runIn: %+v, %v\n%s", res, err, out)
	}
	for _, kv := range strings.Split(strings.TrimSpace(out), "\n") {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PATH", "HOME", "TMPDIR", "LANG", "GOCACHE", "GOPATH", "GOMODCACHE", "CI", "pwd",
			"PWD", "OLDPWD", "SHLVL", "_": // the shell's own
		default:
			t.Errorf("the sandboxed command sees %s", kv)
		}
	}
	if !strings.Contains(out, "pwd=/ag/tree\n") || !strings.Contains(out, "CI=1\n") {
		t.Errorf("the command's working directory or the policy's variable is wrong:\n%s", out)
	}
}

// TestNewSandboxRefusesWhatWouldShowSecrets ensures an operator cannot show a validation the
// worker's key, cache or work directory through --sandbox-ro, nor hide the sandbox's own.
func TestNewSandboxRefusesWhatWouldShowSecrets(t *testing.T) {
	t.Parallel()
	testSandbox(t, SandboxConfig{})
	home := t.TempDir()
	key := filepath.Join(home, "keys", "worker.key")
	if err := os.MkdirAll(filepath.Dir(key), 0o755); err != nil {
		t.Fatal(err)
	}
	toolchain := filepath.Join(home, "toolchain")
	if err := os.Mkdir(toolchain, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"/", home, filepath.Dir(key), "/tmp", "/proc", filepath.Join(home, "missing")} {
		if _, err := NewSandbox(SandboxConfig{ReadOnly: []string{dir}, Hidden: []string{key}}); err == nil {
			t.Errorf("NewSandbox accepted --sandbox-ro %s", dir)
		}
	}
	sb, err := NewSandbox(SandboxConfig{ReadOnly: []string{toolchain}, Hidden: []string{key}})
	if err != nil {
		t.Fatalf("NewSandbox refused a toolchain directory: %v", err)
	}
	if got, want := strings.Join(sb.readOnly, " "), "--ro-bind "+toolchain+" "+toolchain; got != want {
		t.Errorf("the operator's directories are %q, want %q", got, want)
	}
	if _, err := NewSandbox(SandboxConfig{Hidden: []string{"/usr/local/ag-data/worker.key"}}); err == nil {
		t.Error("NewSandbox accepted a key under /usr, which every validation sees")
	}
	if _, err := NewSandbox(SandboxConfig{Bwrap: "ag-no-such-bwrap"}); err == nil {
		t.Error("NewSandbox accepted a bwrap that does not exist")
	}
}

// TestSandboxSelfCheck ensures the worker's start-up check passes where bubblewrap works, and
// leaves nothing in the work directory.
func TestSandboxSelfCheck(t *testing.T) {
	t.Parallel()
	sb := testSandbox(t, SandboxConfig{})
	workDir := t.TempDir()
	if err := sb.SelfCheck(context.Background(), workDir); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(workDir); len(entries) != 0 {
		t.Errorf("the self-check left %v", entries)
	}
	broken := *sb
	broken.bwrap = "/bin/false"
	if err := broken.SelfCheck(context.Background(), workDir); err == nil {
		t.Error("the self-check passed with a bwrap that runs nothing")
	}
}

// TestHandleRefusesToRunUnsandboxed ensures a validator without a sandbox runs no command
// unless told to, and fails the attempt (not for good: another worker may have one).
func TestHandleRefusesToRunUnsandboxed(t *testing.T) {
	t.Parallel()
	v := &Validator{Client: client.New("http://127.0.0.1:1", "unused"), Signer: attest.NewSigner(nil), CacheDir: t.TempDir()}
	s, err := structpb.NewStruct(map[string]any{
		"repository": "r", "candidate_revision": "rev", "tree_digest": digestOf(nil), "command": []any{"true"}, "timeout": "1m",
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Handle(context.Background(), &Job{Job: &agwpv1.Job{Id: "job1", Kind: client.KindValidate, Payload: s}})
	var perm permanentError
	if !errors.Is(err, errNoSandbox) || errors.As(err, &perm) {
		t.Errorf("Handle without a sandbox = %v, want errNoSandbox, to be retried", err)
	}
}

// BenchmarkRunTrue measures what the sandbox costs a run: `true`, run as a validation command
// is (run directory, log, process group), directly and in the sandbox.
//
//	go test -run '^$' -bench RunTrue -benchtime 200x -count 6 ./internal/worker/
func BenchmarkRunTrue(b *testing.B) {
	for _, mode := range []string{"direct", "bwrap", "bwrap-shared-network"} {
		b.Run(mode, func(b *testing.B) {
			var sb *Sandbox
			switch mode {
			case "bwrap":
				sb = testSandbox(b, SandboxConfig{})
			case "bwrap-shared-network":
				sb = testSandbox(b, SandboxConfig{SharedNetwork: true})
			}
			workDir := b.TempDir()
			for b.Loop() {
				res, out, err := runIn(b, workDir, sb, "true", nil, time.Minute)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("true: %+v, %v\n%s", res, err, out)
				}
			}
		})
	}
}
