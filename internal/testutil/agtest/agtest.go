// Package agtest starts real ag servers for tests: the production handler on a loopback port,
// over a real store (SQLite in a temp dir, or a fresh PostgreSQL database from pgtest).
package agtest

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/ag-coord/ag/client"
	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/server"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/postgres"
	"github.com/ag-coord/ag/internal/store/sqlite"
	"github.com/ag-coord/ag/internal/testutil/pgtest"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// Backends are the store backends every server test runs on.
var Backends = []string{"sqlite", "postgres"}

// Options configure a test server.
type Options struct {
	Backend        string      // "sqlite" (default) or "postgres"
	Clock          clock.Clock // nil: real time (the database's, on PostgreSQL)
	RequireFencing bool
	PollInterval   time.Duration
	// The edge's limits (server.Config); zero: the server's defaults.
	BodyIdleTimeout     time.Duration
	BodyTimeout         time.Duration
	UploadsPerPrincipal int
	// BlobPartBytes is the part size of blobs sent in parts; zero: the server's default.
	BlobPartBytes uint64
	// MaxLeasedPaths and MaxLeaseAge are server.Config's; zero: the server's defaults.
	MaxLeasedPaths int
	MaxLeaseAge    time.Duration
	// MaxMessagesPerMinute is server.Config's; zero: the server's default.
	MaxMessagesPerMinute int
	// BlobDeltasByHand is server.Config's: the test runs KeepStoredBlobsAsDeltas itself.
	BlobDeltasByHand bool
}

// Server is a running test server.
type Server struct {
	URL        string
	AdminToken string
	Store      store.Store
	Admin      *client.Client

	srv *server.Server
}

// LargeUploads answers how many large uploads the server has in flight now.
func (s *Server) LargeUploads() int { return s.srv.LargeUploads() }

// WaitingRequests answers how many long-polling requests wait on the server now.
func (s *Server) WaitingRequests() int64 { return s.srv.WaitingRequests() }

// OpenStore opens a fresh store of the backend for t, closed when t ends.
func OpenStore(t testing.TB, backend string, clk clock.Clock) store.Store {
	t.Helper()
	ctx := context.Background()
	var (
		st  store.Store
		err error
	)
	switch backend {
	case "", "sqlite":
		st, err = sqlite.Open(ctx, filepath.Join(t.TempDir(), "ag.db"), store.Options{Clock: clk})
	case "postgres":
		st, err = postgres.Open(ctx, pgtest.NewDatabase(t), store.Options{Clock: clk})
	default:
		t.Fatalf("unknown backend %q", backend)
	}
	if err != nil {
		t.Fatalf("open %s store: %v", backend, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// Start runs a server until t ends and answers it with its admin client.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	st := OpenStore(t, o.Backend, o.Clock)
	return Serve(t, st, o)
}

// Serve runs a server over st until t ends.
func Serve(t testing.TB, st store.Store, o Options) *Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	token, _, err := server.Bootstrap(ctx, st, "")
	if err != nil {
		t.Fatalf("bootstrap admin: %v", err)
	}
	poll := o.PollInterval
	if poll == 0 {
		poll = 50 * time.Millisecond
	}
	signer, err := audit.LoadOrCreateKey(filepath.Join(t.TempDir(), "audit.key"), "ag-test")
	if err != nil {
		t.Fatalf("audit key: %v", err)
	}
	srv := server.New(server.Config{Store: st, RequireFencing: o.RequireFencing, PollInterval: poll, AuditSigner: signer,
		BodyIdleTimeout: o.BodyIdleTimeout, BodyTimeout: o.BodyTimeout, UploadsPerPrincipal: o.UploadsPerPrincipal,
		BlobPartBytes: o.BlobPartBytes, MaxLeasedPaths: o.MaxLeasedPaths, MaxLeaseAge: o.MaxLeaseAge,
		MaxMessagesPerMinute: o.MaxMessagesPerMinute, BlobDeltasByHand: o.BlobDeltasByHand})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	hs := srv.HTTPServer("")
	go srv.Run(ctx)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() {
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = hs.Shutdown(sctx)
	})
	url := "http://" + ln.Addr().String()
	return &Server{URL: url, AdminToken: token, Store: st, Admin: client.New(url, token, client.WithRetries(0, 0)), srv: srv}
}

// Principal creates a principal of role and answers a client with its token.
func (s *Server) Principal(t testing.TB, name string, role agwpv1.Role, opts ...client.Option) *client.Client {
	t.Helper()
	res, err := s.Admin.Admin.CreatePrincipal(context.Background(), &agwpv1.CreatePrincipalRequest{Name: name, Role: role})
	if err != nil {
		t.Fatalf("create principal %s: %v", name, err)
	}
	return client.New(s.URL, res.GetToken(), append([]client.Option{client.WithRetries(0, 0)}, opts...)...)
}

// KeepStoredBlobsAsDeltas runs the server's migration of blobs stored whole to deltas now, as
// ag serve runs it at its start.
func (s *Server) KeepStoredBlobsAsDeltas(ctx context.Context) (int, error) {
	return s.srv.KeepStoredBlobsAsDeltas(ctx)
}
