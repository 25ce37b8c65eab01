package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is a child process the harness starts, kills, pauses and starts again with the same
// arguments. Its stdout and stderr go to one log file, appended to by every start.
type process struct {
	name    string
	bin     string
	args    []string
	env     []string
	dir     string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current run has exited
	paused  bool
	starts  int
	logFile *os.File
}

// start starts the process (again). It must not be running.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("%s is already running", p.name)
	}
	if p.logFile == nil {
		f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		p.logFile = f
	}
	p.starts++
	fmt.Fprintf(p.logFile, "\n=== ag-chaos: start %d of %s at %s\n", p.starts, p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir = p.dir
	cmd.Env = p.env
	cmd.Stdout = p.logFile
	cmd.Stderr = p.logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.cmd, p.done, p.paused = cmd, done, false
	return nil
}

// running reports whether the process runs (or is paused).
func (p *process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !isClosed(p.done)
}

// signal sends sig to the running process.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return fmt.Errorf("%s is not running", p.name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("send %v to %s: %w", sig, p.name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return nil
}

// kill ends the process with SIGKILL (which also ends a paused one) and waits for it.
func (p *process) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// terminate asks the process to stop with SIGTERM (continuing it first when paused), and kills
// it when it has not exited after grace.
func (p *process) terminate(grace time.Duration) {
	p.mu.Lock()
	cmd, done, paused := p.cmd, p.done, p.paused
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return
	}
	if paused {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// close kills the process and closes its log.
func (p *process) close() {
	p.kill()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.logFile != nil {
		p.logFile.Close()
		p.logFile = nil
	}
}

// logTail answers the last lines of the process's log.
func (p *process) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logContains reports whether the process's log holds s (after its last start).
func (p *process) logContains(s string) bool {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return false
	}
	if i := bytes.LastIndex(b, []byte("=== ag-chaos: start ")); i >= 0 {
		b = b[i:]
	}
	return bytes.Contains(b, []byte(s))
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// cleanEnv answers this process's environment without the AG_ variables, so that a
// developer's AG_TOKEN or AG_SERVER does not leak into the processes under test.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AG_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// freeAddr answers a loopback address with a port that was free when asked.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitReady polls url+"/readyz" until it answers 200, p exits, or d passes.
func waitReady(ctx context.Context, p *process, url string, d time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(d)
	last := "no answer yet"
	for {
		if !p.running() {
			return fmt.Errorf("%s exited before it was ready; its log ends:\n%s", p.name, p.logTail(15))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
		res, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", res.Status, bytes.TrimSpace(body))
		} else {
			last = err.Error()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: GET /readyz not 200 after %v; last: %s; its log ends:\n%s", p.name, d, last, p.logTail(15))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// buildBinaries builds ag and ag-worker (without -race, which would only slow them down) into
// dir and answers their paths.
func buildBinaries(ctx context.Context, dir string) (agBin, workerBin string, err error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", "", errors.New("the go command is not on PATH: pass --ag and --ag-worker")
	}
	cmd := exec.CommandContext(ctx, gobin, "build", "-o", dir+string(filepath.Separator),
		"github.com/ag-coord/ag/cmd/ag", "github.com/ag-coord/ag/cmd/ag-worker")
	// A -race in GOFLAGS would make the children several times slower than what is tested.
	var flags []string
	for _, f := range strings.Fields(os.Getenv("GOFLAGS")) {
		if f != "-race" && f != "--race" && !strings.HasPrefix(f, "-race=") {
			flags = append(flags, f)
		}
	}
	cmd.Env = append(cleanEnv(), "GOFLAGS="+strings.Join(flags, " "))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build ./cmd/ag ./cmd/ag-worker (run ag-chaos inside the ag module, or pass --ag and --ag-worker): %v\n%s", err, out)
	}
	agBin, workerBin = filepath.Join(dir, "ag"), filepath.Join(dir, "ag-worker")
	for _, b := range []string{agBin, workerBin} {
		if _, err := os.Stat(b); err != nil {
			return "", "", fmt.Errorf("go build did not produce %s: %v", b, err)
		}
	}
	return agBin, workerBin, nil
}
