package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// TestParseAllowTakesHostNamesOnly ensures an operator's list holds names (a subdomain
// wildcard, a port) and refuses an address, however written, and what is no name.
func TestParseAllowTakesHostNamesOnly(t *testing.T) {
	t.Parallel()
	rules, err := ParseAllow([]string{"proxy.golang.org, Registry.NPMjs.org.", "*.pythonhosted.org:8443"})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(rules)
	if want := "[proxy.golang.org registry.npmjs.org *.pythonhosted.org:8443]"; got != want {
		t.Errorf("ParseAllow: got %s, want %s", got, want)
	}
	for _, bad := range []string{"127.0.0.1", "[::1]:443", "169.254.169.254", "10.0.0.1:80", "::1", "a_b.example", "-x.example", "x..example", "host:0", "host:http", "1.2.3.4.5"} {
		if _, err := ParseAllow([]string{bad}); err == nil {
			t.Errorf("ParseAllow(%q): accepted", bad)
		}
	}
}

// proxyEnv is a proxy serving on loopback, the addresses fake names resolve to, and a client
// that uses it.
type proxyEnv struct {
	p      *Proxy
	url    *url.URL
	client *http.Client
	names  map[string][]netip.Addr
}

func newProxyEnv(t *testing.T, allow ...string) *proxyEnv {
	t.Helper()
	rules, err := ParseAllow(allow)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(rules, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &proxyEnv{p: p, names: map[string][]netip.Addr{}}
	p.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
		if a, ok := e.names[host]; ok {
			return a, nil
		}
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host) // localhost, as the machine has it
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Serve(ln)
	t.Cleanup(s.Close)
	e.url = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	e.client = &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(e.url)}}
	return e
}

// get answers the status and body of a GET of u through the proxy.
func (e *proxyEnv) get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := e.client.Get(u)
	if err != nil {
		// A refused CONNECT is an error of the client, carrying the proxy's status line.
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// connect sends CONNECT target to the proxy and answers its status line and body.
func (e *proxyEnv) connect(t *testing.T, target string) string {
	t.Helper()
	c, err := net.Dial("tcp", e.url.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	b, _ := io.ReadAll(io.LimitReader(c, 4096))
	return string(b)
}

// TestProxyRefusesWhatIsNotAPublicAllowedHost ensures the proxy opens nothing to an address
// given as such, to a host not allowed, nor to an allowed name that resolves to loopback, a
// private, link-local (cloud metadata), reserved or the worker's own address, or to several
// addresses one of which is such.
func TestProxyRefusesWhatIsNotAPublicAllowedHost(t *testing.T) {
	t.Parallel()
	e := newProxyEnv(t, "localhost", "metadata.test", "private.test", "mixed.test", "self.test", "cgnat.test", "registry.test")
	e.names["metadata.test"] = []netip.Addr{netip.MustParseAddr("169.254.169.254")}
	e.names["private.test"] = []netip.Addr{netip.MustParseAddr("10.1.2.3")}
	e.names["mixed.test"] = []netip.Addr{netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("192.168.1.1")}
	e.names["cgnat.test"] = []netip.Addr{netip.MustParseAddr("100.100.100.200")}
	own := netip.MustParseAddr("93.184.215.99")
	e.p.own[own] = true
	e.names["self.test"] = []netip.Addr{own}
	for target, want := range map[string]string{
		"127.0.0.1:443":      "is an IP address: the egress proxy takes host names only",
		"[::1]:443":          "is an IP address",
		"169.254.169.254:80": "is an IP address",
		"localhost:443":      "is a loopback address",
		"metadata.test:80":   "169.254.169.254 is a link-local address",
		"private.test:443":   "10.1.2.3 is a private address",
		"mixed.test:443":     "192.168.1.1 is a private address",
		"cgnat.test:80":      "100.100.100.200 is in 100.64.0.0/10, a reserved range",
		"self.test:443":      "93.184.215.99 is an address of the worker's own machine",
		"example.com:443":    "not a host this worker allows (ag-worker --egress-allow localhost,metadata.test,",
		"registry.test:5432": "not a host this worker allows",
	} {
		got := e.connect(t, target)
		if !strings.HasPrefix(got, "HTTP/1.1 403") || !strings.Contains(got, want) {
			t.Errorf("CONNECT %s: got %q, want a 403 saying %q", target, got, want)
		}
		status, body := e.get(t, "http://"+target+"/")
		if status != http.StatusForbidden || !strings.Contains(body, want) {
			t.Errorf("GET http://%s/: got %d %q, want a 403 saying %q", target, status, body, want)
		}
	}

	none := newProxyEnv(t)
	if got := none.connect(t, "proxy.golang.org:443"); !strings.Contains(got, "this worker allows no host (ag-worker --egress-allow HOST,...)") {
		t.Errorf("CONNECT with no host allowed: got %q", got)
	}
}

// TestProxyTunnelsToAnAllowedHostAndNeverFollowsARedirect ensures an allowed name is reached
// (a tunnel for https, a forwarded request for http), and that a redirect to a host the
// rules do not allow reaches the client as a redirect, whose next request is refused: the
// server the redirect pointed at gets nothing.
func TestProxyTunnelsToAnAllowedHostAndNeverFollowsARedirect(t *testing.T) {
	t.Parallel()
	var internalHits atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		internalHits.Add(1)
		io.WriteString(w, "secret")
	}))
	t.Cleanup(internal.Close)
	registry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://internal.test:"+internal.URL[strings.LastIndexByte(internal.URL, ':')+1:]+"/latest/meta-data", http.StatusFound)
	}))
	t.Cleanup(registry.Close)
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "module v1.0.0")
	}))
	t.Cleanup(secure.Close)
	port := func(u string) string { return u[strings.LastIndexByte(u, ':')+1:] }

	e := newProxyEnv(t, "registry.test:"+port(registry.URL), "secure.test:"+port(secure.URL))
	loopback := netip.MustParseAddr("127.0.0.1")
	// The test servers listen on loopback, which the proxy refuses: let it through here
	// for the names under test, and only for them.
	e.p.refuseAddr = func(a netip.Addr) string {
		if a == loopback {
			return ""
		}
		return e.p.publicOnly(a)
	}
	e.names["registry.test"] = []netip.Addr{loopback}
	e.names["secure.test"] = []netip.Addr{loopback}
	e.names["internal.test"] = []netip.Addr{loopback}

	tr := &http.Transport{Proxy: http.ProxyURL(e.url), TLSClientConfig: &tls.Config{RootCAs: secure.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, ServerName: "example.com"}}
	e.client = &http.Client{Transport: tr}
	status, body := e.get(t, "https://secure.test:"+port(secure.URL)+"/mod")
	if status != http.StatusOK || body != "module v1.0.0" {
		t.Errorf("GET https://secure.test through the tunnel: got %d %q", status, body)
	}

	status, body = e.get(t, "http://registry.test:"+port(registry.URL)+"/pkg")
	if status != http.StatusForbidden || !strings.Contains(body, "internal.test") || !strings.Contains(body, "not a host this worker allows") {
		t.Errorf("GET through a redirect to internal.test: got %d %q, want the second request refused", status, body)
	}
	if n := internalHits.Load(); n != 0 {
		t.Errorf("the host the redirect named got %d requests through the proxy", n)
	}
}
