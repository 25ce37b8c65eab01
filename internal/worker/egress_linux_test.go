//go:build linux

package worker

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/egress"
)

// runNetwork runs script in sb as Handle runs a validation command with the network
// given, and the proxy p for egress. It answers the exit code and the output.
func runNetwork(t *testing.T, sb *Sandbox, network string, p *egress.Proxy, script string, policy map[string]string) (int, string) {
	t.Helper()
	rd, err := newRunDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.remove()
	tree := filepath.Join(rd.path, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	box, err := makeBoxDirs(rd.path, tree)
	if err != nil {
		t.Fatal(err)
	}
	box.Network = network
	if network == attest.NetworkEgress {
		policy = egressEnv(policy)
		sock, session, err := serveEgress(p, rd.path)
		if err != nil {
			t.Fatal(err)
		}
		defer session.Close()
		box.EgressSocket = sock
	}
	env, err := sb.Env(policy)
	if err != nil {
		t.Fatal(err)
	}
	res, err := runCommand(context.Background(), runSpec{
		Argv: []string{"bash", "-c", script}, Dir: tree, Env: env, Timeout: time.Minute, Grace: 200 * time.Millisecond,
		LogPath: filepath.Join(rd.path, "output.log"), Sandbox: sb, Box: box,
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	out, _ := os.ReadFile(filepath.Join(rd.path, "output.log"))
	return res.ExitCode, string(out)
}

// hostListener is a TCP listener on the worker's loopback, as an ag server, a database or a
// metrics endpoint would be, that counts the connections it accepts.
func hostListener(t *testing.T) (port int, accepted func() int) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	n := make(chan int, 1)
	n <- 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n <- <-n + 1
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, func() int { v := <-n; n <- v; return v }
}

// connectScript tries a TCP connection to 127.0.0.1:port and says whether it opened.
const connectScript = `if exec 3<>/dev/tcp/127.0.0.1/%d; then echo "connected"; else echo "no connection"; fi`

// TestSandboxHasNoNetworkByDefault ensures a validation of a worker started without network
// flags cannot open a connection to a listener on the worker's loopback (its ag server, a
// database with trust authentication) and has no route anywhere.
func TestSandboxHasNoNetworkByDefault(t *testing.T) {
	t.Parallel()
	sb := testSandbox(t, SandboxConfig{})
	port, accepted := hostListener(t)
	code, out := runNetwork(t, sb, attest.NetworkNone, nil, fmt.Sprintf(connectScript, port)+`
ip_route=$(cat /proc/net/route | tail -n +2)
echo "routes: [$ip_route]"
exec 4<>/dev/tcp/169.254.169.254/80 && echo "metadata reached"
true`, nil)
	if code != 0 || !strings.Contains(out, "no connection") || strings.Contains(out, "connected\n") || strings.Contains(out, "metadata reached") {
		t.Errorf("the sandboxed command reached the network (exit %d):\n%s", code, out)
	}
	if !strings.Contains(out, "routes: []") {
		t.Errorf("the sandbox has routes, want none:\n%s", out)
	}
	if n := accepted(); n != 0 {
		t.Errorf("the listener on the worker's loopback accepted %d connections from the sandbox", n)
	}

	// The operator's explicit opt-out: the worker's own network.
	shared := testSandbox(t, SandboxConfig{SharedNetwork: true})
	if code, out := runNetwork(t, shared, attest.NetworkShared, nil, fmt.Sprintf(connectScript, port), nil); code != 0 || !strings.Contains(out, "connected") {
		t.Errorf("with --sandbox-network shared the command did not reach the worker's loopback (exit %d):\n%s", code, out)
	}
	if _, _, err := sb.command([]string{"true"}, boxDirs{Network: attest.NetworkShared}, nil, os.Stdout); err == nil {
		t.Error("a sandbox that keeps the worker's network from validations made a command with it")
	}
}

// TestSandboxEgressGoesThroughTheProxyOnly ensures a run whose policy asks for egress finds
// the proxy at its HTTPS_PROXY, on its own loopback, and nothing else: the worker's loopback
// stays unreachable, and the proxy refuses loopback and hosts its operator did not allow.
func TestSandboxEgressGoesThroughTheProxyOnly(t *testing.T) {
	t.Parallel()
	sb := testSandbox(t, SandboxConfig{})
	rules, err := egress.ParseAllow([]string{"localhost", "proxy.golang.org"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := egress.New(rules, nil)
	if err != nil {
		t.Fatal(err)
	}
	port, accepted := hostListener(t)
	ask := func(target string) string {
		return fmt.Sprintf(`exec 5<>/dev/tcp/127.0.0.1/3128 && printf 'CONNECT %[1]s HTTP/1.1\r\nHost: %[1]s\r\n\r\n' >&5 && echo "asked %[1]s: $(head -c 800 <&5 | tr '\r\n' '  ')"; exec 5>&-`, target)
	}
	code, out := runNetwork(t, sb, attest.NetworkEgress, p, strings.Join([]string{
		`echo "proxy: $HTTPS_PROXY $http_proxy no_proxy: $NO_PROXY"`,
		fmt.Sprintf(connectScript, port),
		ask(fmt.Sprintf("127.0.0.1:%d", port)),
		ask(fmt.Sprintf("localhost:%d", port)),
		ask("localhost:443"),
		ask("example.com:443"),
	}, "\n"), map[string]string{"no_proxy": "policy.example"})
	for _, want := range []string{
		"proxy: http://127.0.0.1:3128 http://127.0.0.1:3128 no_proxy: localhost,127.0.0.1,::1",
		"no connection",
		fmt.Sprintf("asked 127.0.0.1:%d: HTTP/1.1 403 Forbidden", port),
		"is an IP address: the egress proxy takes host names only",
		fmt.Sprintf("asked localhost:%d: HTTP/1.1 403 Forbidden", port), "not a host this worker allows (ag-worker --egress-allow localhost,proxy.golang.org)",
		"asked localhost:443: HTTP/1.1 403 Forbidden", "127.0.0.1 is a loopback address",
		"asked example.com:443: HTTP/1.1 403 Forbidden",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the egress run's output lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	if n := accepted(); n != 0 {
		t.Errorf("the listener on the worker's loopback accepted %d connections from the egress run", n)
	}
}

// TestTwoRunsBindTheSamePort ensures two candidates validated at once on one worker cannot
// touch each other's ports: while one run holds 127.0.0.1:8080, another binds the same port in
// its own loopback. (On the worker's shared network the second is refused, as the test of the
// opt-out shows.)
func TestTwoRunsBindTheSamePort(t *testing.T) {
	t.Parallel()
	gate := t.TempDir() // read-only to the runs: the test releases the first run by a file here
	bindOn := func(port int) string {
		return fmt.Sprintf(`perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:%d", Listen => 1) or die "bind: $!\n"; $| = 1; print "bound\n"; until (-e "%s/release") { select(undef, undef, undef, 0.01) }'`, port, gate)
	}
	for _, c := range []struct {
		name      string
		shared    bool
		wantBound bool
	}{{"own loopbacks", false, true}, {"the worker's network", true, false}} {
		t.Run(c.name, func(t *testing.T) {
			sb := testSandbox(t, SandboxConfig{ReadOnly: []string{gate}, SharedNetwork: c.shared})
			network, bind := attest.NetworkNone, bindOn(8080)
			if c.shared {
				// On the worker's network, a port this machine has free.
				ln, err := net.Listen("tcp4", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				free := ln.Addr().(*net.TCPAddr).Port
				ln.Close()
				network, bind = attest.NetworkShared, bindOn(free)
			}
			_ = os.Remove(filepath.Join(gate, "release"))
			bound := make(chan struct{})
			var once sync.Once
			done := make(chan string, 1)
			go func() {
				_, out := runNetworkFollowing(t, sb, network, bind, func(line string) {
					if line == "bound" {
						once.Do(func() { close(bound) })
					}
				})
				done <- out
			}()
			select {
			case <-bound:
			case out := <-done:
				t.Fatalf("the first run never bound the port:\n%s", out)
			}
			_, second := runNetworkFollowing(t, sb, network, strings.ReplaceAll(bind, "until (-e", "until (1 || -e"), nil)
			if err := os.WriteFile(filepath.Join(gate, "release"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			<-done
			if got := strings.Contains(second, "bound"); got != c.wantBound {
				t.Errorf("with %s, the second run bound the port the first held: %v, want %v:\n%s", c.name, got, c.wantBound, second)
			}
		})
	}
}

// runNetworkFollowing runs script in sb with network, calling progress with each line of its
// output as it comes, and answers its exit code and output.
func runNetworkFollowing(t *testing.T, sb *Sandbox, network, script string, progress func(string)) (int, string) {
	rd, err := newRunDir(t.TempDir())
	if err != nil {
		t.Error(err)
		return -1, ""
	}
	defer rd.remove()
	tree := filepath.Join(rd.path, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		t.Error(err)
		return -1, ""
	}
	box, err := makeBoxDirs(rd.path, tree)
	if err != nil {
		t.Error(err)
		return -1, ""
	}
	box.Network = network
	env, err := sb.Env(nil)
	if err != nil {
		t.Error(err)
		return -1, ""
	}
	res, err := runCommand(context.Background(), runSpec{
		Argv: []string{"sh", "-c", script}, Dir: tree, Env: env, Timeout: time.Minute, Grace: 200 * time.Millisecond,
		LogPath: filepath.Join(rd.path, "output.log"), Sandbox: sb, Box: box, Progress: progress,
	})
	if err != nil {
		t.Errorf("run: %v", err)
		return -1, ""
	}
	out, _ := os.ReadFile(filepath.Join(rd.path, "output.log"))
	return res.ExitCode, string(out)
}

// TestAValidationAskingForEgressFindsTheProxy: a validate job whose policy asks for egress runs
// with the worker's proxy on its loopback and HTTPS_PROXY naming it, and one that does not has
// neither: what the job asks, not the worker's test harness, sets up the proxy.
func TestAValidationAskingForEgressFindsTheProxy(t *testing.T) {
	t.Parallel()
	sb := testSandbox(t, SandboxConfig{})
	c, treeDigest, signer, _ := serveCandidate(t, map[string]string{"a.txt": "a\n"})
	v := &Validator{Client: c, Signer: signer, CacheDir: t.TempDir(), WorkDir: t.TempDir(), Sandbox: sb, KillGrace: 200 * time.Millisecond}
	script := `echo "proxy: $HTTPS_PROXY"; if exec 5<>/dev/tcp/127.0.0.1/3128; then echo "the proxy answers"; fi`
	for _, c := range []struct {
		network string
		want    []string
		not     string
	}{
		{attest.NetworkEgress, []string{"proxy: http://127.0.0.1:3128", "the proxy answers"}, ""},
		{attest.NetworkNone, []string{"proxy: \n"}, "the proxy answers"},
	} {
		out, err := handleValidate(t, v, map[string]any{
			"repository": "app", "candidate_revision": "rev_1", "tree_digest": treeDigest,
			"command": []any{"bash", "-c", script}, "timeout": "1m", "network": c.network,
		})
		if err != nil {
			t.Fatalf("network %s: %v", c.network, err)
		}
		for _, want := range c.want {
			if !strings.Contains(out.Output, want) {
				t.Errorf("network %s: the run's output lacks %q:\n%s", c.network, want, out.Output)
			}
		}
		if c.not != "" && strings.Contains(out.Output, c.not) {
			t.Errorf("network %s: the run's output says %q:\n%s", c.network, c.not, out.Output)
		}
	}
}
