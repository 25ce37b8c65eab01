// Package egress is the only way out of a validation's sandbox when its repository's policy asks
// for a network: an HTTP proxy on the worker's side that opens connections to the hosts the
// worker's operator allows (package registries, by name) and to nothing else.
//
// The sandbox has a network namespace of its own with only a loopback, so the proxy is all it
// can reach. The proxy takes host names only, resolves them itself and dials the addresses it
// checked, so a name that resolves to loopback, a private or link-local address (a cloud's
// metadata service), or an address of the worker's own machine is refused however it is
// spelled. It never follows a redirect: a client that follows one asks the proxy again for the
// new host, which is checked like the first.
package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Rule allows connections to one host name, or to every subdomain of a name ("*.example.com",
// not example.com itself), on one port, or on 80 and 443 when Port is 0.
type Rule struct {
	Host string // lowercase, without a trailing dot; "*." and a name for subdomains
	Port uint16
}

func (r Rule) String() string {
	if r.Port == 0 {
		return r.Host
	}
	return net.JoinHostPort(r.Host, strconv.Itoa(int(r.Port)))
}

// ParseAllow reads the hosts an operator allows (ag-worker --egress-allow), each HOST,
// *.DOMAIN, HOST:PORT or *.DOMAIN:PORT; an entry may hold several, separated by commas.
func ParseAllow(entries []string) ([]Rule, error) {
	var rules []Rule
	for _, entry := range entries {
		for _, s := range strings.Split(entry, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			r, err := parseRule(s)
			if err != nil {
				return nil, err
			}
			rules = append(rules, r)
		}
	}
	return rules, nil
}

func parseRule(s string) (Rule, error) {
	host, port := s, uint16(0)
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return Rule{}, fmt.Errorf("egress host %q: port %q is not a port number", s, p)
		}
		host, port = h, uint16(n)
	}
	wildcard := strings.HasPrefix(host, "*.")
	name, err := hostName(strings.TrimPrefix(host, "*."))
	if err != nil {
		return Rule{}, fmt.Errorf("egress host %q: %w", s, err)
	}
	if wildcard {
		name = "*." + name
	}
	return Rule{Host: name, Port: port}, nil
}

// hostName checks a DNS name (letters, digits and hyphens in dot-separated labels) and answers
// it lowercase, without a trailing dot. An address is refused: the proxy checks the addresses
// a name resolves to, and an address written as a host would skip nothing less.
func hostName(h string) (string, error) {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return "", errors.New("is an IP address: the egress proxy takes host names only")
	}
	if h == "" || len(h) > 253 {
		return "", errors.New("is not a host name")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", errors.New("is not a host name")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return "", errors.New("is not a host name")
			}
		}
	}
	if _, err := strconv.Atoi(h[strings.LastIndexByte(h, '.')+1:]); err == nil {
		return "", errors.New("is not a host name (its last label is a number)")
	}
	return h, nil
}

// A Refusal is a connection the proxy does not open, and why; the client is told.
type Refusal struct {
	Target string
	Why    string
}

func (r *Refusal) Error() string { return "refused " + r.Target + ": " + r.Why }

// Proxy opens the connections validations ask for when the rules allow them. Make one with
// New; Serve it on each run's listener.
type Proxy struct {
	rules []Rule
	log   *slog.Logger
	// lookup resolves a host name; tests replace it.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// refuseAddr answers why an address may not be dialed, "" when it may; tests replace it.
	refuseAddr func(netip.Addr) string
	own        map[netip.Addr]bool // this machine's addresses, when the proxy was made
	dialer     net.Dialer
	transport  *http.Transport
}

// New answers a proxy that allows rules (none: it refuses everything, saying so). It reads the
// machine's own addresses now, to refuse them whatever they are.
func New(rules []Rule, log *slog.Logger) (*Proxy, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{rules: rules, log: log, own: map[netip.Addr]bool{}, dialer: net.Dialer{Timeout: 30 * time.Second}}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("egress proxy: this machine's addresses: %w", err)
	}
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			p.own[pfx.Addr().Unmap()] = true
		}
	}
	p.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}
	p.refuseAddr = p.publicOnly
	// Every address is checked once more as the socket connects: nothing reaches a dial
	// but what the checks let through.
	p.dialer.Control = func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return err
		}
		if why := p.refuseAddr(ap.Addr().Unmap()); why != "" {
			return &Refusal{Target: address, Why: why}
		}
		return nil
	}
	p.transport = &http.Transport{
		Proxy:                 nil, // never the worker's own proxy: the checks are this one's
		DialContext:           p.dialChecked,
		MaxIdleConns:          16,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
	}
	return p, nil
}

// Rules answers the rules the proxy allows.
func (p *Proxy) Rules() []Rule { return p.rules }

// reserved are the ranges that are neither loopback, link-local nor private by netip's words
// and still lead inside a network: shared address space (carrier NAT, and a cloud's metadata
// service at 100.100.100.200), "this network", IETF protocol assignments, benchmarking,
// reserved, and IPv6's NAT64 prefixes, which may lead back to any private IPv4 address. The
// documentation ranges (192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32) are not here:
// they route nowhere on the internet, and a network that routes them (an egress gateway of a
// build farm) chose to.
var reserved = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("fec0::/10"),
}

// publicOnly answers why a may not be dialed: anything but a public unicast address that is
// not this machine's.
func (p *Proxy) publicOnly(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return a.String() + " is a loopback address"
	case a.IsLinkLocalUnicast():
		return a.String() + " is a link-local address (where clouds serve their metadata)"
	case a.IsPrivate():
		return a.String() + " is a private address"
	case !a.IsGlobalUnicast():
		return a.String() + " is not a unicast address"
	case p.own[a]:
		return a.String() + " is an address of the worker's own machine"
	}
	for _, r := range reserved {
		if r.Contains(a) {
			return a.String() + " is in " + r.String() + ", a reserved range"
		}
	}
	return ""
}

// allowed reports whether a rule allows host (a checked name) on port.
func (p *Proxy) allowed(host string, port uint16) bool {
	for _, r := range p.rules {
		if r.Port == 0 && port != 80 && port != 443 || r.Port != 0 && r.Port != port {
			continue
		}
		if r.Host == host {
			return true
		}
		if sub, ok := strings.CutPrefix(r.Host, "*"); ok && strings.HasSuffix(host, sub) {
			return true
		}
	}
	return false
}

// resolve checks target ("host:port"), resolves its host and answers the addresses to dial,
// or a Refusal. Every address the name resolves to must pass: a name that resolves to a
// private address among public ones is one an attacker may control.
func (p *Proxy) resolve(ctx context.Context, target string) ([]netip.AddrPort, error) {
	host, portText, err := net.SplitHostPort(target)
	if err != nil {
		return nil, &Refusal{Target: target, Why: "not a host:port"}
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return nil, &Refusal{Target: target, Why: "not a port number"}
	}
	name, err := hostName(host)
	if err != nil {
		return nil, &Refusal{Target: target, Why: "the host " + err.Error()}
	}
	if !p.allowed(name, uint16(port)) {
		if len(p.rules) == 0 {
			return nil, &Refusal{Target: target, Why: "this worker allows no host (ag-worker --egress-allow HOST,...)"}
		}
		return nil, &Refusal{Target: target, Why: fmt.Sprintf("not a host this worker allows (ag-worker --egress-allow %s)", p.rulesText())}
	}
	addrs, err := p.lookup(ctx, name)
	if err != nil {
		return nil, &Refusal{Target: target, Why: "cannot resolve " + name + ": " + err.Error()}
	}
	if len(addrs) == 0 {
		return nil, &Refusal{Target: target, Why: name + " resolves to no address"}
	}
	out := make([]netip.AddrPort, 0, len(addrs))
	for _, a := range addrs {
		if why := p.refuseAddr(a.Unmap()); why != "" {
			return nil, &Refusal{Target: target, Why: name + " resolves to an address the proxy never opens: " + why}
		}
		out = append(out, netip.AddrPortFrom(a.Unmap(), uint16(port)))
	}
	return out, nil
}

func (p *Proxy) rulesText() string {
	s := make([]string, len(p.rules))
	for i, r := range p.rules {
		s[i] = r.String()
	}
	return strings.Join(s, ",")
}

// dialChecked opens a connection to target when the rules allow it, to the addresses its
// name resolved to when checked, never by the name again (which could resolve elsewhere).
func (p *Proxy) dialChecked(ctx context.Context, _, target string) (net.Conn, error) {
	addrs, err := p.resolve(ctx, target)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, a := range addrs {
		c, err := p.dialer.DialContext(ctx, "tcp", a.String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// Session is the proxy serving one run. Close ends it and every connection it opened.
type Session struct {
	p      *Proxy
	server *http.Server
	mu     sync.Mutex
	conns  map[net.Conn]struct{} // tunnels, which the HTTP server no longer tracks
	closed bool
	done   chan struct{}
}

// Serve answers a session serving ln until Close.
func (p *Proxy) Serve(ln net.Listener) *Session {
	s := &Session{p: p, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	s.server = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	go func() {
		defer close(s.done)
		_ = s.server.Serve(ln)
	}()
	return s
}

// Close stops serving and closes every connection of the session.
func (s *Session) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	_ = s.server.Close()
	<-s.done
}

func (s *Session) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Session) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// ServeHTTP serves CONNECT (a tunnel, for https) and requests in absolute form (plain http).
func (s *Session) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		s.tunnel(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		s.refuse(w, &Refusal{Target: r.URL.String(), Why: "this is a proxy: ask for an http:// URL, or CONNECT for https"}, http.StatusBadRequest)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = pr.In.URL
			pr.Out.Host = ""
			pr.Out.Header.Del("Proxy-Authorization")
		},
		Transport: s.p.transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.refuse(w, err, http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
}

func (s *Session) tunnel(w http.ResponseWriter, r *http.Request) {
	up, err := s.p.dialChecked(r.Context(), "tcp", r.Host)
	if err != nil {
		s.refuse(w, err, http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "egress proxy: cannot tunnel on this connection", http.StatusInternalServerError)
		return
	}
	down, rw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if !s.track(down) || !s.track(up) {
		down.Close()
		up.Close()
		return
	}
	s.p.log.Info("egress: tunnel opened", "target", r.Host, "remote", up.RemoteAddr().String())
	_, err = io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n")
	if err == nil {
		err = rw.Writer.Flush()
	}
	if err != nil {
		s.end(down, up)
		return
	}
	go s.pipe(up, rw.Reader, down, up)
	go s.pipe(down, up, down, up)
}

// pipe copies from src to dst until either side ends, then ends both. From the client, src
// is the server's reader of the connection, which may hold bytes read ahead of the tunnel.
func (s *Session) pipe(dst io.Writer, src io.Reader, down, up net.Conn) {
	_, _ = io.Copy(dst, src)
	s.end(down, up)
}

func (s *Session) end(down, up net.Conn) {
	down.Close()
	up.Close()
	s.untrack(down)
	s.untrack(up)
}

// refuse answers a request the proxy does not serve, saying why in the body, which the
// validation's output shows.
func (s *Session) refuse(w http.ResponseWriter, err error, status int) {
	var ref *Refusal
	if errors.As(err, &ref) {
		status = http.StatusForbidden
	}
	s.p.log.Info("egress: refused", "why", err.Error())
	// A refused client has nothing more to ask on this connection that would not be refused.
	w.Header().Set("Connection", "close")
	http.Error(w, "ag-worker egress proxy: "+err.Error(), status)
}
