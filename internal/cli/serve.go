package cli

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/serveconfig"
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
	gateMaxDepth   int
	maxLeasedPaths int
	maxMessages    int
	maxLeaseAge    time.Duration
	pollInterval   time.Duration
	auditKey       string
	auditOrigin    string
	gitEmailDomain string
	packCache      string
}

func newServeCmd(g *globals) *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "run the ag server (AGWP v1 over Connect, gRPC and gRPC-Web)",
		Long: `Runs the ag server. With no flags it keeps its data in SQLite at ./ag-data/ag.db and
listens on 127.0.0.1:7777. On the first start on an empty store it creates the principal
admin, whose token is $AG_BOOTSTRAP_TOKEN or a random token printed once to stderr.

It binds its address before it opens the store: on an address in use it exits having created
nothing. The audit log's signing key is --audit-key; by default audit.key beside a SQLite
database, and ./ag-data/audit.key for PostgreSQL. It logs what happens to the server at INFO,
and each request at DEBUG (--log-level debug).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", envOr("AG_ADDR", "127.0.0.1:7777"), "address to listen on (AG_ADDR)")
	// AG_DB is read in serve, not shown as the default: a PostgreSQL URL may hold a password.
	f.StringVar(&o.db, "db", "", "store: sqlite:PATH or postgres://... (default $AG_DB, else "+serveconfig.DefaultDB+")")
	f.BoolVar(&o.requireFencing, "require-fencing", false, "refuse heartbeats, completions and failures without a claim number (fencing_token)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "TLS certificate file (PEM)")
	f.StringVar(&o.tlsKey, "tls-key", "", "TLS key file (PEM)")
	f.BoolVar(&o.insecure, "insecure-listen", false, "allow listening on a non-loopback address without TLS")
	f.StringVar(&o.logLevel, "log-level", envOr("AG_LOG_LEVEL", "info"), "debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", envOr("AG_LOG_FORMAT", "text"), "text or json")
	f.DurationVar(&o.pollInterval, "poll-interval", time.Second, "how often a long-polling claimer looks again without a wake-up")
	f.IntVar(&o.gateMaxDepth, "gate-max-depth", gate.DefaultMaxDepth, "at most this many candidates of a repository validate at once when its policy names no depth (it follows the validate workers seen)")
	f.IntVar(&o.maxLeasedPaths, "max-leased-paths", server.DefaultMaxLeasedPaths, "at most this many paths a principal holds in live leases of one repository; a grant past it is refused (0: no cap)")
	f.IntVar(&o.maxMessages, "max-messages-per-minute", server.DefaultMaxMessagesPerMinute, "at most this many messages a principal sends in a minute, across replicas; past it, sending is refused (resource exhausted; 0: no cap)")
	f.DurationVar(&o.maxLeaseAge, "max-lease-age", 0, "a lease older than this is not renewed, and no renewal takes it past this age, so that others get their turn (0: leases renew for ever)")
	f.StringVar(&o.auditKey, "audit-key", "", "the audit log's signing key (a note signer key), created with FILE.pub on first start; every replica of one database needs the same key (default $AG_AUDIT_KEY, else audit.key in the directory of a SQLite --db, else "+serveconfig.DefaultAuditKey+")")
	f.StringVar(&o.gitEmailDomain, "git-email-domain", envOr("AG_GIT_EMAIL_DOMAIN", store.DefaultGitEmailDomain),
		"the domain of the e-mail addresses of the mainline commits' authors (principal+label@DOMAIN) and committer (AG_GIT_EMAIL_DOMAIN)")
	f.StringVar(&o.packCache, "pack-cache", "", "where to keep the last pack a whole git clone of each repository was sent, for the next clone; none: keep none (default $AG_PACK_CACHE, else pack-cache in the directory of a SQLite --db, else "+serveconfig.DefaultPackCache+")")
	f.StringVar(&o.auditOrigin, "audit-origin", envOr("AG_AUDIT_ORIGIN", "ag"), "the name of this audit log in its signed checkpoints, used when the key is created (AG_AUDIT_ORIGIN)")
	return cmd
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

func serve(ctx context.Context, g *globals, o *serveOptions) error {
	if o.maxLeasedPaths < 0 || o.maxLeaseAge < 0 || o.maxMessages < 0 {
		return withExit(ExitUsage, errors.New("--max-leased-paths, --max-lease-age and --max-messages-per-minute are 0 (none) or more"))
	}
	if o.gateMaxDepth < 0 || o.gateMaxDepth > gate.MaxDepth {
		return withExit(ExitUsage, fmt.Errorf("--gate-max-depth %d is out of range (1 to %d; 0: the default, %d)", o.gateMaxDepth, gate.MaxDepth, gate.DefaultMaxDepth))
	}
	err := serveUntilDone(ctx, g, o)
	if err != nil && ctx.Err() != nil {
		// Stopped (Ctrl-C, SIGTERM) while it was starting: what failed then failed because of
		// the stop, which is not a failure.
		return nil
	}
	return err
}

func serveUntilDone(ctx context.Context, g *globals, o *serveOptions) error {
	if o.db == "" {
		o.db = envOr("AG_DB", serveconfig.DefaultDB)
	}
	if o.auditKey == "" {
		o.auditKey = envOr("AG_AUDIT_KEY", serveconfig.AuditKeyFor(o.db))
	}
	if o.packCache == "" {
		o.packCache = envOr("AG_PACK_CACHE", serveconfig.PackCacheFor(o.db))
	}
	log, err := serveconfig.NewLogger(os.Stderr, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if err := serveconfig.CheckListen(o.addr, o.tlsCert != "", o.insecure); err != nil {
		return err
	}

	if o.tlsCert != "" {
		// Read now, not by ServeTLS after the admin's token was printed.
		if _, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey); err != nil {
			return fmt.Errorf("--tls-cert %s, --tls-key %s: %w", o.tlsCert, o.tlsKey, err)
		}
	}

	// The address first: on one in use, nothing is created, no token printed.
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.addr, err)
	}
	defer ln.Close() // after a failure below; Serve closes it otherwise

	if o.gitEmailDomain == "" {
		o.gitEmailDomain = store.DefaultGitEmailDomain
	}
	if !serveconfig.ValidEmailDomain(o.gitEmailDomain) {
		return withExit(ExitUsage, fmt.Errorf("--git-email-domain %q: want a domain name such as example.com", o.gitEmailDomain))
	}
	st, err := OpenStore(ctx, o.db, store.Options{GitEmailDomain: o.gitEmailDomain})
	if err != nil {
		return fmt.Errorf("open store %s: %w", serveconfig.RedactDSN(o.db), err)
	}
	defer st.Close()
	if procs := serveconfig.Procs(o.db, runtime.GOMAXPROCS(0), os.Getenv("GOMAXPROCS")); procs != runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(procs)
	}

	// The audit key before the admin: a token printed once must not be followed by a failure
	// that makes the operator start again, when it would not be printed any more.
	signer, err := audit.LoadOrCreateKey(o.auditKey, o.auditOrigin)
	if err != nil {
		return fmt.Errorf("--audit-key %s: %w", o.auditKey, err)
	}
	log.Info("audit log", "key", o.auditKey, "verifier_key", signer.VerifierKey())

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

	var packCache *gitstore.PackCache
	if o.packCache != "none" {
		// The cache only saves time: a directory that cannot be made (a default relative to a
		// working directory the server may not write) leaves clones as they were, said once.
		if packCache, err = gitstore.NewPackCache(o.packCache); err != nil {
			log.Warn("git: no pack cache; whole clones build their packs (set --pack-cache DIR, or none)", "err", err)
		}
	}

	// The flags' 0 is no cap; the server's is its default.
	maxLeasedPaths, maxMessages := cmp.Or(o.maxLeasedPaths, -1), cmp.Or(o.maxMessages, -1)
	srv := server.New(server.Config{Store: st, RequireFencing: o.requireFencing, Logger: log, PollInterval: o.pollInterval, AuditSigner: signer,
		GateMaxDepth: o.gateMaxDepth, MaxLeasedPaths: maxLeasedPaths, MaxLeaseAge: o.maxLeaseAge, MaxMessagesPerMinute: maxMessages, PackCache: packCache})
	hs := srv.HTTPServer(o.addr)
	scheme := "http"
	if o.tlsCert != "" {
		scheme = "https"
	}
	log.Info("ag serving", "addr", ln.Addr().String(), "url", scheme+"://"+ln.Addr().String(), "db", serveconfig.RedactDSN(o.db), "require_fencing", o.requireFencing, "gomaxprocs", runtime.GOMAXPROCS(0))

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
