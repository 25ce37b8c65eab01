package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/server"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/postgres"
	"github.com/ag-coord/ag/internal/store/sqlite"
)

type serveOptions struct {
	addr           string
	db             string
	requireFencing bool
	tlsCert        string
	tlsKey         string
	insecure       bool
	logLevel       string
	logFormat      string
	pollInterval   time.Duration
	auditKey       string
	auditOrigin    string
}

func newServeCmd(g *globals) *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "run the ag server (AGWP v1 over Connect, gRPC and gRPC-Web)",
		Long: `Runs the ag server. With no flags it keeps its data in SQLite at ./ag-data/ag.db and
listens on 127.0.0.1:7777. On the first start on an empty store it creates the principal
admin, whose token is $AG_BOOTSTRAP_TOKEN or a random token printed once to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", envOr("AG_ADDR", "127.0.0.1:7777"), "address to listen on (AG_ADDR)")
	// AG_DB is read in serve, not shown as the default: a PostgreSQL URL may hold a password.
	f.StringVar(&o.db, "db", "", "store: sqlite:PATH or postgres://... (default $AG_DB, else "+defaultDB+")")
	f.BoolVar(&o.requireFencing, "require-fencing", false, "refuse heartbeats, completions and failures without a claim number (fencing_token)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "TLS certificate file (PEM)")
	f.StringVar(&o.tlsKey, "tls-key", "", "TLS key file (PEM)")
	f.BoolVar(&o.insecure, "insecure-listen", false, "allow listening on a non-loopback address without TLS")
	f.StringVar(&o.logLevel, "log-level", envOr("AG_LOG_LEVEL", "info"), "debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", envOr("AG_LOG_FORMAT", "text"), "text or json")
	f.DurationVar(&o.pollInterval, "poll-interval", time.Second, "how often a long-polling claimer looks again without a wake-up")
	f.StringVar(&o.auditKey, "audit-key", envOr("AG_AUDIT_KEY", "ag-data/audit.key"), "the audit log's signing key (a note signer key), created with FILE.pub on first start; every replica of one database needs the same key (AG_AUDIT_KEY)")
	f.StringVar(&o.auditOrigin, "audit-origin", envOr("AG_AUDIT_ORIGIN", "ag"), "the name of this audit log in its signed checkpoints, used when the key is created (AG_AUDIT_ORIGIN)")
	return cmd
}

// serveProcs answers how many Go processors ag serve runs st with, given the runtime's
// default and the GOMAXPROCS variable. On SQLite one more than the default: the one writer
// makes many short calls into SQLite, each holding a processor that nothing else can use
// meanwhile, and the whole queue waits on the writer. On 2 cores, 3 processors made batched
// claim+complete about 19% faster with the audit log and 6% without it (docs/benchmarks.md).
// A GOMAXPROCS the operator set is kept as it is.
func serveProcs(st store.Store, procs int, env string) int {
	if _, ok := st.(*sqlite.DB); ok && env == "" {
		return procs + 1
	}
	return procs
}

// OpenStore opens the store a --db value names: "sqlite:PATH", "postgres://..." or
// "postgresql://...".
func OpenStore(ctx context.Context, db string, opts store.Options) (store.Store, error) {
	switch {
	case strings.HasPrefix(db, "postgres://"), strings.HasPrefix(db, "postgresql://"):
		return postgres.Open(ctx, db, opts)
	case strings.HasPrefix(db, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(db, "sqlite:"), "//")
		if path == "" {
			return nil, errors.New("--db sqlite: needs a file path, such as sqlite:./ag-data/ag.db")
		}
		return sqlite.Open(ctx, filepath.Clean(path), opts)
	}
	return nil, fmt.Errorf("--db %q: use sqlite:PATH or postgres://USER@HOST/DB", db)
}

func newLogger(w *os.File, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}

// defaultDB is the store of `ag serve` without --db or AG_DB.
const defaultDB = "sqlite:./ag-data/ag.db"

func serve(ctx context.Context, g *globals, o *serveOptions) error {
	if o.db == "" {
		o.db = envOr("AG_DB", defaultDB)
	}
	log, err := newLogger(os.Stderr, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	host, _, err := net.SplitHostPort(o.addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %v", o.addr, err)
	}
	if ip := net.ParseIP(host); o.tlsCert == "" && !o.insecure && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--addr %s is not a loopback address: serve it with --tls-cert/--tls-key, or pass --insecure-listen behind a proxy that terminates TLS", o.addr)
	}

	st, err := OpenStore(ctx, o.db, store.Options{})
	if err != nil {
		return fmt.Errorf("open store %s: %w", redactDSN(o.db), err)
	}
	defer st.Close()
	if procs := serveProcs(st, runtime.GOMAXPROCS(0), os.Getenv("GOMAXPROCS")); procs != runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(procs)
	}

	token, created, err := server.Bootstrap(ctx, st, os.Getenv("AG_BOOTSTRAP_TOKEN"))
	if err != nil {
		return fmt.Errorf("create the admin principal: %w", err)
	}
	if created {
		if os.Getenv("AG_BOOTSTRAP_TOKEN") != "" {
			log.Info("created principal admin with the token from AG_BOOTSTRAP_TOKEN")
		} else {
			fmt.Fprintf(g.stderr, "\nag: created principal admin. Its token, shown only this once:\n\n    export AG_TOKEN=%s\n\n", token)
		}
	}

	signer, err := audit.LoadOrCreateKey(o.auditKey, o.auditOrigin)
	if err != nil {
		return fmt.Errorf("--audit-key %s: %w", o.auditKey, err)
	}
	log.Info("audit log", "key", o.auditKey, "verifier_key", signer.VerifierKey())
	srv := server.New(server.Config{Store: st, RequireFencing: o.requireFencing, Logger: log, PollInterval: o.pollInterval, AuditSigner: signer})
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{
		Addr:              o.addr,
		Handler:           srv.Handler(),
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.addr, err)
	}
	scheme := "http"
	if o.tlsCert != "" {
		scheme = "https"
	}
	log.Info("ag serving", "addr", ln.Addr().String(), "url", scheme+"://"+ln.Addr().String(), "db", redactDSN(o.db), "require_fencing", o.requireFencing, "gomaxprocs", runtime.GOMAXPROCS(0))

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go srv.Run(ctx)
	errc := make(chan error, 1)
	go func() {
		if o.tlsCert != "" {
			errc <- hs.ServeTLS(ln, o.tlsCert, o.tlsKey)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return hs.Shutdown(sctx)
}

// redactDSN hides a password in a database URL before it is logged.
func redactDSN(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		if at := strings.LastIndex(dsn, "@"); at > i {
			creds := dsn[i+3 : at]
			if c := strings.Index(creds, ":"); c >= 0 {
				return dsn[:i+3] + creds[:c] + ":***" + dsn[at:]
			}
		}
	}
	return dsn
}
