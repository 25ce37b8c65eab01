package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// server is an `ag serve` process with a bootstrap admin token. bench/internal/agserve starts
// one with fixed flags; this one also takes --gate-max-depth and a log file.
type server struct {
	url, token string
	cmd        *exec.Cmd
	ag         string
}

// startServer starts `ag serve` (the binary ag) on db, listening on 127.0.0.1:port, its audit
// key and working directory in dir, and waits until it answers. With log, the server logs at
// level info into it; without, warnings go to this program's standard error.
func startServer(ctx context.Context, ag, db, dir string, port, gateMaxDepth int, log io.Writer) (*server, error) {
	s := &server{
		url:   fmt.Sprintf("http://127.0.0.1:%d", port),
		token: fmt.Sprintf("agt_bench%d", time.Now().UnixNano()),
		ag:    ag,
	}
	args := []string{"serve", "--db", db, "--addr", fmt.Sprintf("127.0.0.1:%d", port),
		"--audit-key", filepath.Join(dir, "audit.key"), "--log-level", "warn"}
	if log != nil {
		args[len(args)-1] = "info"
	}
	if gateMaxDepth > 0 {
		args = append(args, "--gate-max-depth", strconv.Itoa(gateMaxDepth))
	}
	s.cmd = exec.CommandContext(ctx, ag, args...)
	s.cmd.Env = append(os.Environ(), "AG_BOOTSTRAP_TOKEN="+s.token)
	s.cmd.Dir = dir
	s.cmd.Stderr = os.Stderr
	if log != nil {
		s.cmd.Stderr = log
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	var up error
	for range 100 {
		if up = s.run("whoami"); up == nil {
			return s, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.stop()
	return nil, up
}

// run runs the ag command line against the server as its admin: args, then --server and
// --token, then after (a command that follows --).
func (s *server) run(args ...string) error {
	var after []string
	for i, a := range args {
		if a == "--" {
			args, after = args[:i], args[i:]
			break
		}
	}
	cmd := exec.Command(s.ag, slices.Concat(args, []string{"--server", s.url, "--token", s.token}, after)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ag %s: %w\n%s", strings.Join(args[:min(len(args), 3)], " "), err, out.String())
	}
	return nil
}

// stop interrupts the server and waits for it to exit.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	_ = s.cmd.Wait()
}

// cpu answers the processor time (user and system) the server has used, from /proc/PID/stat.
func (s *server) cpu() (time.Duration, error) {
	pid := s.cmd.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields start after its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	// utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the name; in clock
	// ticks, 100 per second on Linux.
	var ticks int64
	for _, f := range fields[11:13] {
		t, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += t
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
