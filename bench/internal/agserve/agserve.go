// Package agserve runs a real `ag serve` for the benchmark programs (bench/checkout,
// bench/integrate) and the ag command line against it, and describes the binary measured.
package agserve

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Server is an `ag serve` process with a bootstrap admin token.
type Server struct {
	URL   string
	Token string
	Cmd   *exec.Cmd
	ag    string
}

// Start starts `ag serve` (the binary ag) on db, listening on 127.0.0.1:port, its audit key
// and working directory in dir, and waits until it answers.
func Start(ctx context.Context, ag, db, dir string, port int) (*Server, error) {
	s := &Server{
		URL:   fmt.Sprintf("http://127.0.0.1:%d", port),
		Token: fmt.Sprintf("agt_bench%d", time.Now().UnixNano()),
		ag:    ag,
	}
	s.Cmd = exec.CommandContext(ctx, ag, "serve", "--db", db, "--addr", fmt.Sprintf("127.0.0.1:%d", port),
		"--audit-key", filepath.Join(dir, "audit.key"), "--log-level", "warn")
	s.Cmd.Env = append(os.Environ(), "AG_BOOTSTRAP_TOKEN="+s.Token)
	s.Cmd.Dir = dir
	s.Cmd.Stderr = os.Stderr
	if err := s.Cmd.Start(); err != nil {
		return nil, err
	}
	var up error
	for range 100 {
		if _, up = s.AG("whoami"); up == nil {
			return s, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.Stop()
	return nil, up
}

// AG runs the ag command line against the server as its admin and answers how long it took.
func (s *Server) AG(args ...string) (time.Duration, error) {
	args = append(args, "--server", s.URL, "--token", s.Token)
	cmd := exec.Command(s.ag, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		return took, fmt.Errorf("ag %s: %w\n%s", strings.Join(args[:min(len(args), 3)], " "), err, out.String())
	}
	return took, nil
}

// Stop interrupts the server and waits for it to exit.
func (s *Server) Stop() {
	_ = s.Cmd.Process.Signal(os.Interrupt)
	_ = s.Cmd.Wait()
}

// Seconds writes a duration as a benchmark table shows it.
func Seconds(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// Version describes the ag binary measured: its Go version and the commit it was built from,
// when recorded.
func Version(ag string) string {
	info, err := buildinfo.ReadFile(ag)
	if err != nil {
		return ag
	}
	var rev, modified, when string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", with uncommitted changes"
			}
		case "vcs.time":
			when = ", committed " + s.Value
		}
	}
	if rev == "" {
		// Built with -buildvcs=false (or outside a repository): the file's time is all there is.
		built := ""
		if fi, err := os.Stat(ag); err == nil {
			built = ", built " + fi.ModTime().UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("%s (%s, no commit recorded%s)", ag, info.GoVersion, built)
	}
	return fmt.Sprintf("%s (%s, commit %.12s%s%s)", ag, info.GoVersion, rev, when, modified)
}
