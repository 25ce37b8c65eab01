package worker

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The worker process of TestCommandDiesWithTheWorker: the test binary again, told by these.
const (
	helperWorkDirEnv = "AG_WORKER_TEST_HELPER_WORK_DIR"
	helperScriptEnv  = "AG_WORKER_TEST_HELPER_SCRIPT"
)

// TestHelperRunsACommand is no test of its own: TestCommandDiesWithTheWorker and
// TestSandboxDiesWithTheWorker run the test binary again, as a worker that runs a command the
// way Handle does (in the sandbox when helperSandboxEnv says "bwrap"), in a run directory under
// the work directory it is given, and that gets killed meanwhile. It prints "ready" once the
// command printed "started".
func TestHelperRunsACommand(t *testing.T) {
	workDir := os.Getenv(helperWorkDirEnv)
	if workDir == "" {
		t.Skip("the worker process of TestCommandDiesWithTheWorker")
	}
	run, err := newRunDir(workDir)
	if err != nil {
		t.Fatal(err)
	}
	checkout := filepath.Join(run.path, "tree")
	if err := os.Mkdir(checkout, 0o755); err != nil {
		t.Fatal(err)
	}
	env := os.Environ()
	var sb *Sandbox
	var box boxDirs
	if os.Getenv(helperSandboxEnv) == "bwrap" {
		sb = testSandbox(t, SandboxConfig{})
		if box, err = makeBoxDirs(run.path, checkout); err != nil {
			t.Fatal(err)
		}
		if env, err = sb.Env(nil); err != nil {
			t.Fatal(err)
		}
	}
	res, err := runCommand(context.Background(), runSpec{
		Argv: []string{"sh", "-c", os.Getenv(helperScriptEnv)}, Dir: checkout, Env: env,
		Timeout: time.Minute, LogPath: filepath.Join(run.path, "output.log"), Grace: time.Second,
		GroupFile: run.groupFile(), Sandbox: sb, Box: box,
		Progress: func(line string) {
			if line == "started" {
				os.Stdout.WriteString("ready\n")
			}
		},
	})
	t.Fatalf("the command ended while its worker lived: %+v, %v", res, err)
}

// endThreads ends threads of this process, as any code that returns from a goroutine locked
// to its thread does, and waits until the kernel is done with them: had one of them started
// a command with a parent-death signal, that signal is sent by then.
func endThreads() error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		tids []int
	)
	for range 8 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Never unlocked: the thread ends with the goroutine, unless it is the main
			// thread, which the runtime parks instead.
			runtime.LockOSThread()
			if tid := syscall.Gettid(); tid != os.Getpid() {
				mu.Lock()
				tids = append(tids, tid)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	gone := eventually(5*time.Second, func() bool {
		for _, tid := range tids {
			if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid)); err == nil {
				return false
			}
		}
		return true
	})
	if !gone {
		return errors.New("threads locked by goroutines that returned did not end")
	}
	return nil
}

// running reports whether pid is a process that is neither a zombie nor about to die of a
// SIGKILL it was sent.
func running(pid int) bool {
	if !processAlive(pid) {
		return false
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(status), "\n") {
		name, mask, ok := strings.Cut(line, ":")
		if !ok || (name != "SigPnd" && name != "ShdPnd") {
			continue
		}
		if bits, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64); err == nil && bits&(1<<(syscall.SIGKILL-1)) != 0 {
			return false
		}
	}
	return true
}

// processAlive reports whether pid is a process that is not a zombie.
func processAlive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	state, _, ok := parseStat(string(stat))
	return !ok || (state != "Z" && state != "X")
}

// eventually polls cond until it holds or the deadline passes, and answers whether it held.
func eventually(deadline time.Duration, cond func() bool) bool {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			return false
		}
		<-tick.C
	}
	return true
}

// TestCommandDiesWithTheWorker ensures a worker killed with SIGKILL takes its command's leader
// with it at once, and that what the leader started is killed by the next worker's
// ReapOrphans, which removes the run's directory.
func TestCommandDiesWithTheWorker(t *testing.T) {
	t.Parallel()
	for name, script := range map[string]string{
		"leader alone":  `echo started; exec sleep 60`,
		"with children": `sleep 60 & sleep 60 & echo started; wait`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := testValidator(t)
			var stderr strings.Builder
			helper := exec.Command(os.Args[0], "-test.run=^TestHelperRunsACommand$", "-test.count=1")
			helper.Env = append(os.Environ(), helperWorkDirEnv+"="+v.WorkDir, helperScriptEnv+"="+script)
			helper.Stderr = &stderr
			out, err := helper.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := helper.Start(); err != nil {
				t.Fatal(err)
			}
			killed := false
			t.Cleanup(func() {
				if !killed {
					_ = helper.Process.Kill()
					_ = helper.Wait()
				}
			})
			var said strings.Builder
			lines := bufio.NewScanner(out)
			for lines.Scan() && lines.Text() != "ready" {
				said.WriteString(lines.Text() + "\n")
			}
			if lines.Text() != "ready" {
				killed = true
				_ = helper.Wait() // before stderr is read
				t.Fatalf("the worker process ended before it was ready:\n%s%s", said.String(), stderr.String())
			}
			runs, err := filepath.Glob(filepath.Join(v.WorkDir, runDirPattern+"*"))
			if err != nil || len(runs) != 1 {
				t.Fatalf("run directories %v, %v; want one", runs, err)
			}
			b, err := os.ReadFile(filepath.Join(runs[0], groupFileName))
			if err != nil {
				t.Fatal(err)
			}
			pgid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			if !running(pgid) {
				t.Fatal("the command's leader died while its worker lived")
			}

			_ = helper.Process.Kill()
			killed = true
			_ = helper.Wait()
			if !eventually(5*time.Second, func() bool { return !processAlive(pgid) }) {
				t.Fatalf("the command's leader %d outlived its worker", pgid)
			}
			if name == "leader alone" && !eventually(5*time.Second, func() bool { return !groupAlive(pgid) }) {
				t.Errorf("the command's group %d outlived its worker", pgid)
			}

			if err := v.ReapOrphans(context.Background()); err != nil {
				t.Fatal(err)
			}
			if groupAlive(pgid) {
				t.Errorf("processes of group %d outlived the reaper", pgid)
			}
			if exists(runs[0]) {
				t.Errorf("the run's directory %s outlived the reaper", runs[0])
			}
		})
	}
}

// TestCommandOutlivesEndedThreads ensures the command's parent-death signal is tied to a
// thread that lives as long as the command: threads of the worker that end meanwhile do not
// kill it.
func TestCommandOutlivesEndedThreads(t *testing.T) {
	t.Parallel()
	for range 5 {
		cmd := exec.Command("sleep", "60")
		inOwnGroup(cmd)
		exited, err := startCommand(cmd)
		if err != nil {
			t.Fatal(err)
		}
		endErr := endThreads()
		alive := running(cmd.Process.Pid)
		killGroup(cmd.Process.Pid, 5*time.Second)
		<-exited
		if endErr != nil {
			t.Fatal(endErr)
		}
		if !alive {
			t.Fatal("the command died with a thread of the worker")
		}
	}
}
