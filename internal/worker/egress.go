package worker

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"

	"github.com/ag-coord/ag/internal/egress"
)

// A run whose policy asks for egress has a network namespace of its own like any other, so
// it cannot reach the worker's loopback or anything else; the proxy of egress is its only way
// out. The proxy listens on a Unix socket in the run's directory (never on a port: every
// process of the machine could use a port), which the sandbox shows at sandboxEgressSocket.
// Tools speak HTTP proxy over TCP, so a forwarder started in the sandbox, this very program
// (egress_linux.go), listens on the sandbox's own loopback and carries each connection to
// the socket. The forwarder runs with the command's rights and holds nothing: a command that
// kills it or speaks to the socket itself meets the same proxy.
const (
	sandboxEgressSocket = "/ag/egress.sock"
	sandboxForwarder    = "/ag/egress-forward"
	// egressListen is where the forwarder listens in the sandbox, and egressProxyURL what the
	// command's environment names for its tools. Fixed: every run has a loopback of its own.
	egressListen   = "127.0.0.1:3128"
	egressProxyURL = "http://" + egressListen
)

// egressEnv answers the policy's environment with the proxy's variables, which most tools read
// (Go, npm, pip, cargo, curl), under it: the policy's own values win. Loopback goes direct,
// to the servers a test starts in its sandbox.
func egressEnv(policy map[string]string) map[string]string {
	env := map[string]string{
		"HTTP_PROXY": egressProxyURL, "HTTPS_PROXY": egressProxyURL,
		"http_proxy": egressProxyURL, "https_proxy": egressProxyURL,
		"NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
	}
	maps.Copy(env, policy)
	return env
}

// serveEgress starts p on a socket in dir, the run's own directory, and answers the socket's
// path and the session to close when the run ends.
func serveEgress(p *egress.Proxy, dir string) (string, *egress.Session, error) {
	sock := filepath.Join(dir, "egress.sock")
	// A socket's path is at most 107 bytes, and a work directory may be deeper: bind it
	// through the directory's descriptor, whose /proc path is short.
	d, err := os.Open(dir)
	if err != nil {
		return "", nil, fmt.Errorf("egress proxy: %w", err)
	}
	defer d.Close()
	ln, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/egress.sock", d.Fd()))
	if err != nil {
		return "", nil, fmt.Errorf("egress proxy: listen in the run's directory: %w", err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return "", nil, fmt.Errorf("egress proxy: %w", err)
	}
	return sock, p.Serve(ln), nil
}
