//go:build unix

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
	"github.com/ag-coord/ag/internal/testutil/pgtest"
	"github.com/ag-coord/ag/internal/testutil/syncbuf"
)

// backends are the stores every test runs on, as parallel subtests.
var backends = []string{"sqlite", "postgres"}

const (
	// waitFor bounds every wait for a condition; pollEvery is how often it is looked at.
	waitFor   = 20 * time.Second
	pollEvery = 50 * time.Millisecond
)

// forEachBackend runs fn as a parallel subtest per backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, backend string)) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// proc is a process started for a test; it is killed when the test ends, and its output is
// logged when the test failed.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout *syncbuf.Buffer
	stderr *syncbuf.Buffer
	done   chan struct{} // closed when the process has exited
	err    error         // Wait's error, set before done is closed
}

// cleanEnv answers the test's environment without the AG_ variables, so that a developer's
// AG_TOKEN or AG_SERVER cannot leak into the processes under test.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AG_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// startProc starts bin with args in dir. The process is killed (SIGKILL, which also ends a
// stopped process) when t ends.
func startProc(t *testing.T, name, bin, dir string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Env = env
	p.cmd.Stdout = p.stdout
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
		}
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s (pid %d) did not end after SIGKILL", p.name, p.cmd.Process.Pid)
		}
		if t.Failed() {
			t.Logf("--- %s (pid %d) stderr:\n%s", p.name, p.cmd.Process.Pid, p.stderr.String())
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("send %v to %s: %v", sig, p.name, err)
	}
}

// wait waits up to d for the process to exit and answers its exit status.
func (p *proc) wait(t *testing.T, d time.Duration) *os.ProcessState {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState
	case <-time.After(d):
		t.Fatalf("%s (pid %d) did not exit within %v; its stderr:\n%s", p.name, p.cmd.Process.Pid, d, p.stderr.String())
		return nil
	}
}

// eventually polls cond until it holds, failing t after waitFor. cond answers whether it holds
// and what it saw, for the failure message.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	deadline := time.Now().Add(waitFor)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last saw: %s", waitFor, what, saw)
		}
		<-tick.C
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// server is an `ag serve` process.
type server struct {
	URL        string
	AdminToken string
	Admin      *client.Client // the SDK, as admin
	proc       *proc
}

// startServer starts `ag serve` on a free loopback port over a fresh store of backend, with the
// admin token the test chose, and waits until /readyz answers 200.
func startServer(t *testing.T, backend string) *server {
	t.Helper()
	var db string
	switch backend {
	case "sqlite":
		db = "sqlite:" + filepath.Join(t.TempDir(), "ag.db")
	case "postgres":
		// Registered before the process's cleanup, so the database is dropped after the
		// server is gone.
		db = pgtest.NewDatabase(t)
	default:
		t.Fatalf("unknown backend %q", backend)
	}
	token := "e2e-admin-" + randomHex(16)
	dir := t.TempDir()
	// The port is free when picked, but another process may take it before the server binds
	// it: then the server exits saying so, and another port is tried.
	for try := 1; ; try++ {
		addr := freeAddr(t)
		p := startProc(t, "ag serve ("+backend+")", agBin, dir, cleanEnv("AG_BOOTSTRAP_TOKEN="+token),
			"serve", "--addr", addr, "--db", db, "--poll-interval", "100ms")
		s := &server{URL: "http://" + addr, AdminToken: token, proc: p}
		err := waitReady(s)
		if err == nil {
			s.Admin = client.New(s.URL, token, client.WithRetries(0, 0))
			return s
		}
		if p.exited() && strings.Contains(p.stderr.String(), "address already in use") && try < 3 {
			continue
		}
		t.Fatalf("ag serve --db %s did not become ready: %v\nits stderr:\n%s", backend, err, p.stderr.String())
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitReady polls GET /readyz until it answers 200, the process exits, or waitFor passes.
func waitReady(s *server) error {
	hc := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	deadline := time.Now().Add(waitFor)
	last := "no answer yet"
	for {
		if s.proc.exited() {
			return fmt.Errorf("the process exited (%v) before it was ready", s.proc.err)
		}
		res, err := hc.Get(s.URL + "/readyz")
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
		if time.Now().After(deadline) {
			return fmt.Errorf("GET /readyz not 200 after %v; last: %s", waitFor, last)
		}
		<-tick.C
	}
}

// principal creates a principal of role through the SDK and answers its token.
func (s *server) principal(t *testing.T, name string, role agwpv1.Role) string {
	t.Helper()
	res, err := s.Admin.Admin.CreatePrincipal(context.Background(), &agwpv1.CreatePrincipalRequest{Name: name, Role: role})
	if err != nil {
		t.Fatalf("create principal %s: %v", name, err)
	}
	return res.GetToken()
}

// enqueueNoop enqueues an ag.noop job that sleeps ms milliseconds.
func (s *server) enqueueNoop(t *testing.T, ms int) *agwpv1.Job {
	t.Helper()
	payload, err := structpb.NewStruct(map[string]any{"ms": ms})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Admin.Jobs.EnqueueJob(context.Background(), &agwpv1.EnqueueJobRequest{Kind: "ag.noop", Payload: payload})
	if err != nil {
		t.Fatalf("enqueue ag.noop: %v", err)
	}
	return res.GetJob()
}

// job answers the job as the server has it now.
func (s *server) job(t *testing.T, id string) *agwpv1.Job {
	t.Helper()
	res, err := s.Admin.Jobs.GetJob(context.Background(), &agwpv1.GetJobRequest{JobId: id})
	if err != nil {
		t.Fatalf("get job %s: %v", id, err)
	}
	return res.GetJob()
}

// waitJob waits until the job satisfies cond and answers it.
func (s *server) waitJob(t *testing.T, id, what string, cond func(*agwpv1.Job) bool) *agwpv1.Job {
	t.Helper()
	var j *agwpv1.Job
	eventually(t, "job "+id+" "+what, func() (bool, string) {
		j = s.job(t, id)
		return cond(j), describeJob(j)
	})
	return j
}

func describeJob(j *agwpv1.Job) string {
	return fmt.Sprintf("state=%s attempts=%d claimed_by=%q last_error=%q output=%q",
		j.GetState(), j.GetAttempts(), j.GetClaimedBy(), j.GetLastError(), j.GetOutput())
}

// isClaim reports whether the job is CLAIMED by holder under claim number n.
func isClaim(holder string, n uint32) func(*agwpv1.Job) bool {
	return func(j *agwpv1.Job) bool {
		return j.GetState() == agwpv1.JobState_JOB_STATE_CLAIMED && j.GetClaimedBy() == holder && j.GetAttempts() == n
	}
}

func isState(st agwpv1.JobState) func(*agwpv1.Job) bool {
	return func(j *agwpv1.Job) bool { return j.GetState() == st }
}

// metric answers the value of the series name{labels} on the server's /metrics, and whether
// it is there. labels are "key=value" pairs; a series matches when it has all of them.
func (s *server) metric(t *testing.T, name string, labels ...string) (float64, bool) {
	t.Helper()
	res, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s %v", res.Status, err)
	}
	want := make([]string, len(labels))
	for i, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		want[i] = k + "=" + strconv.Quote(v)
	}
	for _, line := range strings.Split(string(body), "\n") {
		series, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		n, lbls, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		lbls = strings.TrimSuffix(lbls, "}")
		if !containsAll(","+lbls+",", wrapAll(want)...) {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", line, err)
		}
		return f, true
	}
	return 0, false
}

func wrapAll(labels []string) []string {
	out := make([]string, len(labels))
	for i, l := range labels {
		out[i] = "," + l + ","
	}
	return out
}

// workerOpts are the flags of an ag-worker process.
type workerOpts struct {
	Label       string
	Token       string
	Key         string        // key file; empty: a new one in a temp dir
	Lease       time.Duration // default 2s
	Concurrency int           // default 1
	Grace       time.Duration // --shutdown-grace; 0: the worker's default
	Kinds       string        // --kinds; empty: the worker's default (ag.noop)
	WorkDir     string        // --work-dir; empty: the worker's default
	Args        []string      // more flags
}

// startWorker starts an ag-worker process against s and waits until it has registered its key
// and started claiming.
func (s *server) startWorker(t *testing.T, o workerOpts) *proc {
	t.Helper()
	dir := t.TempDir()
	if o.Key == "" {
		o.Key = filepath.Join(dir, "worker.key")
	}
	if o.Lease == 0 {
		o.Lease = 2 * time.Second
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	args := []string{"--server", s.URL, "--token", o.Token, "--label", o.Label, "--key", o.Key,
		"--lease", o.Lease.String(), "--wait", "10s", "--concurrency", strconv.Itoa(o.Concurrency)}
	if o.Grace > 0 {
		args = append(args, "--shutdown-grace", o.Grace.String())
	}
	if o.Kinds != "" {
		args = append(args, "--kinds", o.Kinds)
	}
	if o.WorkDir != "" {
		args = append(args, "--work-dir", o.WorkDir)
	}
	args = append(args, o.Args...)
	p := startProc(t, "ag-worker "+o.Label, workerBin, dir, cleanEnv(), args...)
	eventually(t, "ag-worker "+o.Label+" to start", func() (bool, string) {
		if p.exited() {
			t.Fatalf("ag-worker %s exited (%v) at start; its stderr:\n%s", o.Label, p.err, p.stderr.String())
		}
		return strings.Contains(p.stderr.String(), `msg="ag-worker started"`), p.stderr.String()
	})
	return p
}

// waitLog waits until the process's stderr has a line containing every one of subs.
func waitLog(t *testing.T, p *proc, subs ...string) string {
	t.Helper()
	var line string
	eventually(t, fmt.Sprintf("%s to log a line with %q", p.name, subs), func() (bool, string) {
		lines := p.stderr.Lines(subs...)
		if len(lines) == 0 {
			return false, "its stderr:\n" + p.stderr.String()
		}
		line = lines[0]
		return true, ""
	})
	return line
}

// runAG runs the ag command line and answers its stdout, stderr and exit code.
func runAG(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, agBin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = cleanEnv()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		code = exit.ExitCode()
	default:
		t.Fatalf("ag %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), errOut.String(), code
}

// mustAG runs the ag command line, failing t unless it exits 0, and answers its stdout.
func mustAG(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := runAG(t, args...)
	if code != 0 {
		t.Fatalf("ag %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// agRun is an ag command line running in the background.
type agRun struct {
	args   []string
	cmd    *exec.Cmd
	stdout *syncbuf.Buffer
	stderr *syncbuf.Buffer
	done   chan struct{} // closed when it has exited
	err    error         // Wait's error, set before done is closed
}

// startAG starts the ag command line in the background; it is killed when t ends. Its stderr
// may be read while it runs.
func startAG(t *testing.T, args ...string) *agRun {
	t.Helper()
	r := &agRun{args: args, stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(agBin, args...)
	r.cmd.Dir = t.TempDir()
	r.cmd.Env = cleanEnv()
	r.cmd.Stdout, r.cmd.Stderr = r.stdout, r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start ag %s: %v", strings.Join(args, " "), err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.done
	})
	return r
}

func (r *agRun) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// wait waits up to waitFor for the command to exit and answers its stdout, stderr and exit code.
func (r *agRun) wait(t *testing.T) (stdout, stderr string, code int) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(waitFor):
		t.Fatalf("ag %s did not exit within %v\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), waitFor, r.stdout, r.stderr)
	}
	var exit *exec.ExitError
	switch {
	case r.err == nil:
	case errors.As(r.err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("ag %s: %v\nstderr:\n%s", strings.Join(r.args, " "), r.err, r.stderr)
	}
	return r.stdout.String(), r.stderr.String(), code
}
