//go:build linux

package e2e

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/attest"
)

// reachScript is a planted test that passes only when it reaches the port in port.txt on the
// worker's loopback, where the ag server listens: straight, and through the proxy that
// HTTPS_PROXY names when there is one, by the name localhost. A database with trust
// authentication would be as near as the server.
const reachScript = `port=$(cat port.txt)
reached=""
if exec 3<>/dev/tcp/127.0.0.1/$port; then
	printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
	echo "direct: $(head -c 200 <&3 | head -1)"
	reached="direct"
else
	echo "direct: no connection to 127.0.0.1:$port"
fi
if [ -n "$HTTPS_PROXY" ]; then
	hostport=${HTTPS_PROXY#http://}
	if exec 4<>/dev/tcp/${hostport%:*}/${hostport#*:}; then
		printf 'CONNECT localhost:%s HTTP/1.1\r\nHost: localhost:%s\r\n\r\n' "$port" "$port" >&4
		answer=$(head -c 800 <&4 | tr '\r\n' '  ')
		echo "proxy: $answer"
		case "$answer" in "HTTP/1.1 200"*) reached="$reached proxy" ;; esac
	fi
fi
echo "reached: [$reached]"
[ -n "$reached" ]
`

// TestValidationReachesNoServerOnTheWorkersLoopback: a worker started as the README says, with
// no network flag, runs a planted test that tries to reach the ag server on the worker's
// loopback; it gets no connection, its change is rejected, and the attestation says the run
// had no network. With a policy that asks for egress, the test reaches the worker's proxy and
// nothing else: the proxy refuses the server's port by the name localhost, even on a worker
// that allows that name.
func TestValidationReachesNoServerOnTheWorkersLoopback(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		files := map[string]string{"reach.sh": reachScript, "port.txt": "1\n"}
		g := startGate(t, backend, files, "--timeout", "30s", "--", "bash", "reach.sh")
		u, err := url.Parse(g.URL)
		if err != nil {
			t.Fatal(err)
		}
		port := u.Port()
		w := g.sandboxWorker(t, "w1")

		mallory := g.agent(t, "mallory")
		edit(t, mallory, "port.txt", port+"\n")
		stdout, stderr, code := mallory.ag(t, "integrate", "-m", "mallory: a test of the network")
		id := rejected(t, "mallory", stdout, stderr, code,
			"direct: no connection to 127.0.0.1:"+port, "reached: []")
		job := g.job(t, g.change(t, id).GetJobId())
		if out := job.GetOutput(); strings.Contains(out, "HTTP/1.") || strings.Contains(out, "proxy:") {
			t.Errorf("the planted test got an answer on the worker's loopback:\n%s", out)
		}
		if v := w.attestation(t, g, job); v.Network != attest.NetworkNone || v.Isolation != attest.IsolationBubblewrap {
			t.Errorf("the attestation says network %q, isolation %q; want %q in %q", v.Network, v.Isolation, attest.NetworkNone, attest.IsolationBubblewrap)
		}

		w.signal(t, syscall.SIGTERM)
		w.wait(t, 30*time.Second)
		mustAG(t, append(g.admin("repo", "set-validation", "app", "--network", "egress", "--timeout", "30s"), "--", "bash", "reach.sh")...)
		w2 := g.sandboxWorker(t, "w2", "--egress-allow", "localhost:"+port)
		stdout, stderr, code = mallory.ag(t, "integrate", "-m", "mallory: through the proxy")
		id = rejected(t, "mallory", stdout, stderr, code,
			"direct: no connection to 127.0.0.1:"+port, "proxy: HTTP/1.1 403 Forbidden", "127.0.0.1 is a loopback address", "reached: []")
		job = g.job(t, g.change(t, id).GetJobId())
		if v := w2.attestation(t, g, job); v.Network != attest.NetworkEgress {
			t.Errorf("the egress run's attestation says network %q, want %q", v.Network, attest.NetworkEgress)
		}
		if !strings.Contains(w2.stderr.String(), `msg="egress: refused"`) {
			t.Errorf("the worker did not log the refused connection; its stderr:\n%s", w2.stderr.String())
		}
	})
}

// TestGateRefusesAPassOfAnOpenRun: a worker whose operator opted out of the closed network
// (--sandbox-network shared) says so at start and in its attestations, and the gate refuses
// its pass of an honest change, naming the worker and its flag; the change lands once an admin
// says the repository takes any run.
func TestGateRefusesAPassOfAnOpenRun(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g := startGate(t, backend, gateFiles, "--timeout", "30s", "--", "sh", "check.sh")
		w := g.sandboxWorker(t, "open", "--sandbox-network", "shared")
		if !strings.Contains(w.stderr.String(), `level=WARN msg="--sandbox-network shared: validation commands run with this worker's own network`) {
			t.Errorf("the worker did not warn of its shared network at start; its stderr:\n%s", w.stderr.String())
		}

		alice := g.agent(t, "alice")
		edit(t, alice, "a.txt", "a is still fine\n")
		stdout, stderr, code := alice.ag(t, "integrate", "-m", "alice: an honest change")
		id := rejected(t, "alice", stdout, stderr, code,
			"the pass of worker ci|open is weaker evidence than the policy of app asks",
			"its run had the worker's own network (ag-worker --sandbox-network shared)")
		if v := w.attestation(t, g, g.job(t, g.change(t, id).GetJobId())); v.Network != attest.NetworkShared || !v.Passed() {
			t.Errorf("the open run's attestation: network %q, result %s; want a pass with network %q", v.Network, v.Result, attest.NetworkShared)
		}

		mustAG(t, append(g.admin("repo", "set-validation", "app", "--isolation", "none", "--timeout", "30s"), "--", "sh", "check.sh")...)
		stdout, stderr, code = alice.ag(t, "integrate", "-m", "alice: an honest change, again")
		_, rev, _ := integrated(t, "alice", stdout, stderr, code)
		g.assertMainline(t, rev, with(gateFiles, map[string]string{"a.txt": "a is still fine\n"}))
	})
}

// portScript holds port 8080 of its loopback until the test lets it go on, then checks the
// tree as checkScript does. Its "bound" line is its job's progress while it waits.
const portScript = `perl -MIO::Socket::INET -e '
	my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:8080", Listen => 1) or die "bind 127.0.0.1:8080: $!\n";
	$| = 1; print "bound 127.0.0.1:8080\n";
	for (1 .. 3000) { last if -e "$ENV{GATE_DIR}/go"; select(undef, undef, undef, 0.01) }' || exit 1
` + checkScript

// TestTwoCandidatesAtOnceHoldTheSamePort: two candidates validated at once on one worker
// started as the README says (with --concurrency 2) each bind port 8080 and hold it together,
// each in a loopback of its own, so neither can make the other fail; both land.
func TestTwoCandidatesAtOnceHoldTheSamePort(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		dir := gateDir(t.TempDir())
		t.Cleanup(func() { _ = os.WriteFile(filepath.Join(string(dir), "go"), nil, 0o644) })
		g := startGate(t, backend, speculationFiles(2, portScript),
			"--env", "GATE_DIR="+string(dir), "--depth", "2", "--timeout", "60s", "--", "sh", "check.sh")
		g.worker(t, "w1", 10*time.Second, "--concurrency", "2", "--sandbox-ro", string(dir))
		subs := g.submitAll(t, better(1), better(2))
		eventually(t, "both candidates to hold port 8080 at once", func() (bool, string) {
			var held []string
			for _, s := range subs {
				c := g.change(t, s.id)
				if c.GetJobId() == "" {
					return false, s.id + " has no validate job yet"
				}
				if p := g.job(t, c.GetJobId()).GetProgress(); strings.Contains(p, "bound 127.0.0.1:8080") {
					held = append(held, s.id)
				}
			}
			return len(held) == 2, fmt.Sprintf("holding: %v", held)
		})
		dir.open(t, "go")
		for _, s := range subs {
			rev, _ := s.integrated(t)
			if rev == "" {
				t.Errorf("change %s did not land", s.id)
			}
		}
	})
}
