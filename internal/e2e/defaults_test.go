//go:build linux

package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/syncbuf"
)

// What a new user meets with the defaults: ag-worker started with no more than its token runs
// validations and shows their output as it comes, waits for a server that is not up yet, and
// explains itself with --help; ag serve on a busy port leaves nothing behind.

// stepsScript prints "step one", waits for $GATE_DIR/one, prints "step two", waits for
// $GATE_DIR/two, then passes: each line is printed while the command still runs. It gives up
// after about 30s, so that a command nobody releases does not linger.
const stepsScript = `wait_for() {
	i=0
	while [ ! -e "$GATE_DIR/$1" ]; do
		i=$((i+1))
		if [ "$i" -gt 600 ]; then echo "gave up waiting for $1"; exit 3; fi
		sleep 0.05
	done
}
echo "step one"
wait_for one
echo "step two"
wait_for two
echo "all steps done"
`

// TestDefaultWorkerValidatesAsItRuns: an ag-worker started without --kinds runs validate jobs
// in its sandbox, and `ag integrate` shows each line of the validation's output while the
// command runs, long before the claim's own heartbeat (a minute's lease: one every 20 s).
func TestDefaultWorkerValidatesAsItRuns(t *testing.T) {
	t.Parallel()
	gateDir := t.TempDir()
	t.Cleanup(func() { // ends a command nobody released
		_ = os.WriteFile(filepath.Join(gateDir, "one"), nil, 0o644)
		_ = os.WriteFile(filepath.Join(gateDir, "two"), nil, 0o644)
	})
	files := with(gateFiles, map[string]string{"check.sh": stepsScript})
	g := startGate(t, "sqlite", files, "--env", "GATE_DIR="+gateDir, "--", "sh", "check.sh")
	// Not g.worker, which names --kinds validate.
	w := g.startWorker(t, workerOpts{Label: "ci-1", Token: g.workerToken, Lease: time.Minute, WorkDir: t.TempDir(),
		Args: []string{"--sandbox-ro", gateDir}})
	if line := waitLog(t, w, `msg="ag-worker started"`); !strings.Contains(line, "kinds=ag.noop,validate ") {
		t.Errorf("ag-worker without --kinds started with %q, want kinds=ag.noop,validate", line)
	}
	waitLog(t, w, `msg="validation commands run in a sandbox"`)
	alice := g.agent(t, "alice")

	edit(t, alice, "a.txt", "a is better\n")
	run := startAG(t, alice.args([]string{"integrate", "-m", "alice: a is better"})...)
	id := waitProgress(t, run, "ci|ci-1", "step one")
	jobID := g.change(t, id).GetJobId()
	// The command is still waiting for "one": the line came while it ran.
	if j := g.job(t, jobID); j.GetState() != agwpv1.JobState_JOB_STATE_CLAIMED || j.GetClaimedBy() != "ci|ci-1" {
		t.Fatalf("the validate job after its first line: %s, want CLAIMED by ci|ci-1", describeJob(j))
	}
	if err := os.WriteFile(filepath.Join(gateDir, "one"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitProgress(t, run, "ci|ci-1", "step two")
	if err := os.WriteFile(filepath.Join(gateDir, "two"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := run.wait(t)
	integrated(t, "alice", stdout, stderr, code)
	one, two := strings.Index(stderr, ": step one\n"), strings.Index(stderr, ": step two\n")
	if one < 0 || two < one {
		t.Errorf("ag integrate did not show step one, then step two:\n%s", stderr)
	}
}

// startServerAt starts `ag serve` on addr over db with the admin token token, and waits until it
// is ready.
func startServerAt(t *testing.T, addr, db, token string) *server {
	t.Helper()
	p := startProc(t, "ag serve at "+addr, agBin, t.TempDir(), cleanEnv("AG_BOOTSTRAP_TOKEN="+token),
		"serve", "--addr", addr, "--db", db, "--poll-interval", "100ms")
	s := &server{URL: "http://" + addr, AdminToken: token, proc: p}
	if err := waitReady(s); err != nil {
		t.Fatalf("ag serve at %s did not become ready: %v\nits stderr:\n%s", addr, err, p.stderr.String())
	}
	s.Admin = client.New(s.URL, token, client.WithRetries(0, 0))
	return s
}

// stopServer stops the server with SIGTERM and waits until it has exited.
func stopServer(t *testing.T, s *server) {
	t.Helper()
	s.proc.signal(t, syscall.SIGTERM)
	s.proc.wait(t, waitFor)
}

// runNoop enqueues an ag.noop job and waits until it is completed by holder.
func runNoop(t *testing.T, s *server, holder string) {
	t.Helper()
	j := s.enqueueNoop(t, 10)
	done := s.waitJob(t, j.GetId(), "completed", isState(agwpv1.JobState_JOB_STATE_COMPLETED))
	if done.GetClaimedBy() != holder {
		t.Errorf("job %s was completed by %q, want %q", j.GetId(), done.GetClaimedBy(), holder)
	}
}

// TestWorkerWaitsForTheServer: an ag-worker started while its server is down says what it waits
// for and connects when the server comes up; when the server goes away while it runs, it waits
// again without flooding its log, and goes on when the server is back; SIGTERM stops it at
// once even while it waits. The server logs none of the requests at its default level.
func TestWorkerWaitsForTheServer(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "ag.db")
	token := "e2e-admin-" + randomHex(16)

	// A worker principal, created on the server before it goes down.
	s := startServerAt(t, addr, db, token)
	workerToken := s.principal(t, "builder", roleWorker)
	stopServer(t, s)

	w := startProc(t, "ag-worker w1", workerBin, t.TempDir(), cleanEnv("AG_TOKEN="+workerToken),
		"--server", "http://"+addr, "--label", "w1", "--kinds", "ag.noop", "--lease", "2s", "--wait", "2s")
	line := waitLog(t, w, `msg="the server does not answer; waiting for it"`)
	for _, want := range []string{`to="register this worker's key"`, "server=http://" + addr, "connection refused", "retry_in="} {
		if !strings.Contains(line, want) {
			t.Errorf("the worker's line while it waits, %q, does not say %q", line, want)
		}
	}
	if w.exited() {
		t.Fatalf("ag-worker exited while the server was down (%v); its stderr:\n%s", w.err, w.stderr.String())
	}

	s = startServerAt(t, addr, db, token)
	waitLog(t, w, `msg="the server answers again"`)
	waitLog(t, w, `msg="ag-worker started"`)
	runNoop(t, s, "builder|w1")

	// Down while the worker runs. The worker's lines after the first say how long it has waited:
	// the lines up to one that says 3 s are what it logged in those 3 s of its own, however fast
	// the machine let it go.
	stopServer(t, s)
	var waited []string
	eventually(t, "ag-worker to say it has waited 3 s for the server", func() (bool, string) {
		lines := w.stderr.Lines("level=WARN", `to="claim a job"`)
		for i, line := range lines {
			if m := waitedFor.FindStringSubmatch(line); m != nil {
				if d, err := time.ParseDuration(m[1]); err == nil && d >= 3*time.Second {
					waited = lines[:i+1]
					return true, ""
				}
			}
		}
		return false, "its stderr:\n" + w.stderr.String()
	})
	// At most a line per step of the backoff (100 ms, doubling), however many claims failed.
	if n := len(waited); n > 6 {
		t.Errorf("ag-worker logged %d lines in 3 s of a server away:\n%s", n, strings.Join(waited, "\n"))
	}
	s = startServerAt(t, addr, db, token)
	runNoop(t, s, "builder|w1")
	if lines := s.proc.stderr.Lines("msg=rpc"); len(lines) > 0 {
		t.Errorf("ag serve logged requests at its default level:\n%s", strings.Join(lines, "\n"))
	}

	// SIGTERM while it waits for the server.
	stopServer(t, s)
	eventually(t, "ag-worker to wait again", func() (bool, string) {
		return len(w.stderr.Lines(`msg="the server does not answer; waiting for it"`, `to="claim a job"`)) >= 2, w.stderr.String()
	})
	w.signal(t, syscall.SIGTERM)
	if st := w.wait(t, 10*time.Second); !st.Success() {
		t.Errorf("ag-worker ended with %v on SIGTERM, want exit 0; its stderr:\n%s", st, w.stderr.String())
	}
}

// waitedFor finds in a line of ag-worker's log how long it has waited for the server.
var waitedFor = regexp.MustCompile(` waiting_for=(\S+)`)

// TestWorkerHelp: ag-worker --help explains what it is, shows an example and its flags, and
// exits 0.
func TestWorkerHelp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cmd := exec.CommandContext(ctx, workerBin, "--help")
	cmd.Env = cleanEnv()
	var stdout, stderr syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ag-worker --help: %v, want exit 0\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	for _, want := range []string{"ag-worker runs the jobs of an ag server", "Example:", "AG_TOKEN=agt_... ag-worker --label", "-kinds", "-server"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("ag-worker --help does not say %q:\n%s", want, stdout.String())
		}
	}
}

// TestServeOnABusyPort: ag serve on an address in use exits non-zero saying so, and creates no
// database and prints no token: the next start on a free address prints it.
func TestServeOnABusyPort(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := filepath.Join(t.TempDir(), "data")
	stdout, stderr, code := runAG(t, "serve", "--addr", busy.Addr().String(), "--db", "sqlite:"+filepath.Join(dir, "ag.db"))
	if code == 0 || !strings.Contains(stderr, "address already in use") {
		t.Errorf("ag serve on a busy port: exit %d, stderr:\n%s\nwant non-zero and \"address already in use\"", code, stderr)
	}
	if strings.Contains(stdout+stderr, "AG_TOKEN") {
		t.Errorf("ag serve on a busy port printed a token:\n%s%s", stdout, stderr)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("ag serve on a busy port created %s", dir)
	}
}

// TestServeStartsWithoutAPackCacheDirectory: a pack cache directory ag serve cannot make
// (a default relative to a working directory it may not write) is said once, as a warning, and
// the server starts all the same, whole clones built as before: the cache only saves time.
func TestServeStartsWithoutAPackCacheDirectory(t *testing.T) {
	t.Parallel()
	token := "e2e-admin-" + randomHex(16)
	addr := freeAddr(t)
	p := startProc(t, "ag serve without a pack cache", agBin, t.TempDir(), cleanEnv("AG_BOOTSTRAP_TOKEN="+token),
		"serve", "--addr", addr, "--db", "sqlite:"+filepath.Join(t.TempDir(), "ag.db"), "--pack-cache", "/proc/ag-no-pack-cache")
	s := &server{URL: "http://" + addr, AdminToken: token, proc: p}
	if err := waitReady(s); err != nil {
		t.Fatalf("ag serve with a pack cache it cannot make did not become ready: %v\nits stderr:\n%s", err, p.stderr.String())
	}
	// The server answers before the harness has necessarily copied every line it wrote: wait for
	// the warning, which it logs before it listens.
	waitLog(t, p, "level=WARN", "no pack cache; whole clones build their packs")
}
