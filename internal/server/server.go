// Package server serves AGWP v1 over ConnectRPC (Connect, gRPC and gRPC-Web) with the operational
// endpoints beside it. Handlers are thin: they validate at the edge, call the store, and map the
// outcome to Connect codes.
package server

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
	"github.com/ag-coord/ag/gen/openapi"
	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/console"
	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/mirror"
	"github.com/ag-coord/ag/internal/store"
)

// Config is what a server needs.
type Config struct {
	Store store.Store
	// RequireFencing refuses a heartbeat, completion or failure without a claim number.
	RequireFencing bool
	Logger         *slog.Logger
	// PollInterval bounds how late a long-polling claimer sees a job whose wake-up it missed
	// (a delayed job coming due, an expired lease, a lost notification). Default 1s.
	PollInterval time.Duration
	// ExpireInterval is how often the server settles expired claims that cannot be claimed
	// again. Default 5s.
	ExpireInterval time.Duration
	// MaxRequestBytes limits a request body. Default 8 MiB.
	MaxRequestBytes int
	// GateSweep is how often the server looks at every integration queue with pending changes,
	// besides advancing a queue at once when a request moves it. Default 2s.
	GateSweep time.Duration
	// MirrorSweep is how often the server looks at every forge mirror that is behind (default
	// 10s): a forge that was unreachable is tried again so often.
	MirrorSweep time.Duration
	// GateMaxDepth bounds how many candidates of a repository whose policy names no depth
	// validate at once; the depth follows the validate workers seen. Default gate.DefaultMaxDepth.
	GateMaxDepth int
	// BodyIdleTimeout is how long a request body may go without delivering a byte, and
	// BodyTimeout how long any body may take before it must keep 64 KiB/s on average (the time
	// the bytes that arrived take at that pace is added to it). Defaults DefaultBodyIdleTimeout
	// and DefaultBodyTimeout.
	BodyIdleTimeout time.Duration
	BodyTimeout     time.Duration
	// UploadsPerPrincipal bounds the content requests over 1 MiB (or of unknown size) that one
	// principal has in flight at once. Default DefaultUploadsPerPrincipal.
	UploadsPerPrincipal int
	// GitFetchesPerPrincipal bounds the git upload-pack requests (the ones that build a pack)
	// that one principal has in flight at once on /git/. Default DefaultGitFetchesPerPrincipal.
	GitFetchesPerPrincipal int
	// PackCache, when set, keeps the last pack a whole clone of each repository's mainline was
	// sent, for the next whole clone (gitstore.PackCache).
	PackCache *gitstore.PackCache
	// BlobPartBytes is the size of the parts of a blob sent in parts (StartBlobUpload), and
	// MaxBlobBytes the largest such blob. Defaults DefaultBlobPartBytes and DefaultMaxBlobBytes.
	BlobPartBytes uint64
	MaxBlobBytes  uint64
	// MaxLeasedPaths bounds the paths one principal holds in live leases of a repository
	// (default DefaultMaxLeasedPaths; negative: no cap), and MaxLeaseAge the age past which a
	// lease is not renewed (0: none).
	MaxLeasedPaths int
	MaxLeaseAge    time.Duration
	// MaxMessagesPerMinute bounds the messages a principal sends in a minute (default
	// DefaultMaxMessagesPerMinute; negative: no cap).
	MaxMessagesPerMinute int
	// AuditSigner signs the audit log's checkpoints. Every replica of one log must hold the
	// same key. Nil: events are recorded but this server does not seal them.
	AuditSigner *audit.Signer
	// BlobDeltasByHand: Run does not start the walk that keeps stored blobs as deltas
	// (KeepStoredBlobsAsDeltas); its caller runs it, at the moment it chooses (a test that
	// counts what one walk keeps).
	BlobDeltasByHand bool
}

// Server is an AGWP v1 server over one store.
type Server struct {
	store store.Store
	// uploadBases keeps the objects UploadGitObjects made last, the bases of the next deltas.
	uploadBases    *store.BlobCache
	log            *slog.Logger
	auth           *authenticator
	metrics        *metrics
	requireFencing bool
	pollInterval   time.Duration
	expireInterval time.Duration
	maxBytes       int
	// maxContentRequestBytes limits RepositoryService requests, which carry file contents.
	maxContentRequestBytes int
	blobPartBytes          uint64
	maxBlobBytes           uint64
	waiting                atomic.Int64 // long-polling requests now waiting
	gate                   *gate.Gate
	mirrors                *mirror.Mirrors
	workerReads            *workerReads
	auditSigner            *audit.Signer
	sealed                 store.Signal // fired after this server sealed events
	cfg                    Config
	uploads                *uploadSlots // every handler's: the limit is the server's
	// git is what /git/ serves (git.go); nil answers 404 to every caller it admits.
	git        *gitSource
	gitFetches *uploadSlots
	// packWarmups are the repositories whose cached pack Run builds next (warmPackCache).
	packWarmups chan string
}

// New answers a server over cfg.Store.
func New(cfg Config) *Server {
	s := &Server{
		store:          cfg.Store,
		log:            cfg.Logger,
		auth:           newAuthenticator(cfg.Store),
		requireFencing: cfg.RequireFencing,
		pollInterval:   cfg.PollInterval,
		expireInterval: cfg.ExpireInterval,
		maxBytes:       cfg.MaxRequestBytes,
		auditSigner:    cfg.AuditSigner,
		cfg:            cfg,
		uploads:        &uploadSlots{limit: cfg.UploadsPerPrincipal, held: map[string]int{}},
		gitFetches:     &uploadSlots{limit: cfg.GitFetchesPerPrincipal, held: map[string]int{}},
		packWarmups:    make(chan string, 16),
		uploadBases:    store.NewBlobCache(uploadCacheBytes),
	}
	if s.uploads.limit <= 0 {
		s.uploads.limit = DefaultUploadsPerPrincipal
	}
	if s.gitFetches.limit <= 0 {
		s.gitFetches.limit = DefaultGitFetchesPerPrincipal
	}
	s.git = &gitSource{objects: cfg.Store, mainlineCommit: func(r store.Repository) string { return r.MainlineCommit }}
	s.metrics = newMetrics(cfg.Store, func() float64 { return float64(s.waiting.Load()) })
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.gate = gate.New(cfg.Store, s.log, cfg.GateSweep)
	s.mirrors = s.newMirrors()
	s.gate.OnChange = func(c store.Change) {
		s.metrics.changeSettled(c)
		s.landed(c)
	}
	s.gate.MaxDepth = cfg.GateMaxDepth
	s.gate.Capacity = gate.NewCapacity(nil, s.gate.KickAll)
	s.metrics.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ag_gate_validate_capacity",
		Help: "The validations this replica's workers can run at once, as seen in the last minute: the automatic depth of the integration queues.",
	}, func() float64 { return float64(s.gate.Capacity.Estimate()) }))
	s.workerReads = &workerReads{s: s}
	if s.pollInterval <= 0 {
		s.pollInterval = time.Second
	}
	if s.expireInterval <= 0 {
		s.expireInterval = 5 * time.Second
	}
	if s.maxBytes <= 0 {
		s.maxBytes = 8 << 20
	}
	s.maxContentRequestBytes = max(s.maxBytes, maxContentBytes+(8<<20))
	s.blobPartBytes, s.maxBlobBytes = cfg.BlobPartBytes, cfg.MaxBlobBytes
	if s.blobPartBytes == 0 {
		s.blobPartBytes = DefaultBlobPartBytes
	}
	s.blobPartBytes = min(s.blobPartBytes, maxContentBytes)
	if s.maxBlobBytes == 0 {
		s.maxBlobBytes = DefaultMaxBlobBytes
	}
	return s
}

// WaitingRequests answers how many long-polling requests (claims, lease acquisitions, change
// waits) are waiting now.
func (s *Server) WaitingRequests() int64 { return s.waiting.Load() }

// fastGzip answers gzip at its fastest level rather than Connect's default: on answers of
// batched claims, the default level took a fifth of the server's CPU for a ratio only a little
// better. Anything that reads gzip reads either.
var fastGzip = connect.WithCompression("gzip",
	func() connect.Decompressor { return &gzip.Reader{} },
	func() connect.Compressor {
		w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed) // the level is valid
		return w
	})

// HeaderTimeout is how long a client has to send a request's headers once its connection is
// open: the edge judges a request by its headers (the token, the role) before it reads a byte
// of its body, and a connection that never finishes them must not be held for it.
const HeaderTimeout = 10 * time.Second

// HTTPServer answers the http.Server that serves the server's Handler at addr, over HTTP/1.1
// and HTTP/2 (with TLS, or h2c without), with the bounds of a connection that the handler
// cannot set: its headers within HeaderTimeout and 64 KiB, and an idle connection closed after
// two minutes. A body's pace is the edge's (edge.go).
func (s *Server) HTTPServer(addr string) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{
		Addr:              addr,
		Handler:           s.Handler(),
		Protocols:         &protocols,
		ReadHeaderTimeout: HeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// Handler answers the server's HTTP handler: the AGWP services, git's read-only smart HTTP
// under /git/, and the operational endpoints.
func (s *Server) Handler() http.Handler {
	opts := connect.WithHandlerOptions(
		connect.WithInterceptors(s.logInterceptor(), s.auth.interceptor(s.metrics.refusal)),
		connect.WithReadMaxBytes(s.maxBytes),
		// Compressing the small answers that make up nearly all traffic costs more CPU than
		// the bytes it saves on the networks ag runs on.
		connect.WithCompressMinBytes(16<<10),
		fastGzip,
	)
	mux := http.NewServeMux()
	mux.Handle(agwpv1connect.NewJobServiceHandler(jobService{s}, opts))
	mux.Handle(agwpv1connect.NewAdminServiceHandler(adminService{s}, opts))
	mux.Handle(agwpv1connect.NewLeaseServiceHandler(leaseService{s}, opts))
	mux.Handle(agwpv1connect.NewAuditServiceHandler(auditService{s}, opts))
	mux.Handle(agwpv1connect.NewTaskServiceHandler(taskService{s}, opts))
	// Content requests may carry up to 64 MiB of files; the other services keep the small limit.
	mux.Handle(agwpv1connect.NewRepositoryServiceHandler(repoService{s}, connect.WithHandlerOptions(
		connect.WithInterceptors(s.logInterceptor(), s.auth.interceptor(s.metrics.refusal)),
		connect.WithReadMaxBytes(s.maxContentRequestBytes),
		connect.WithCompressMinBytes(16<<10),
		fastGzip,
	)))

	services := []string{agwpv1connect.JobServiceName, agwpv1connect.AdminServiceName,
		agwpv1connect.LeaseServiceName, agwpv1connect.RepositoryServiceName, agwpv1connect.AuditServiceName,
		agwpv1connect.TaskServiceName}
	mux.Handle(grpchealth.NewHandler(healthChecker{s}))
	reflector := grpcreflect.NewStaticReflector(services...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))

	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.store.Ready(r.Context()); err != nil {
			// The error may name the database, its host and its user: the log has it, the
			// answer (to anyone who asks) does not.
			s.log.Warn("not ready", "err", err)
			http.Error(w, "not ready: the database is unavailable or its schema is not current; the server log has the details", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
	console.Register(mux)
	mux.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(openapi.YAML)
	})
	e := s.newEdge(mux)
	// The edge passes /git/ through, as every path outside AGWP: the git endpoint
	// authenticates in its own way (Basic as well as bearer) before anything else.
	mux.Handle(gitPathPrefix, &gitEndpoint{s: s, edge: e})
	return e
}

// Run does the server's background work until ctx ends: it advances the integration queues,
// seals the audit log, and
// it settles expired claims that cannot be claimed again, so they do not sit CLAIMED until the
// next claimer comes.
func (s *Server) Run(ctx context.Context) {
	var background sync.WaitGroup
	background.Go(func() { s.gate.Run(ctx) })
	background.Go(func() { s.mirrors.Run(ctx) })
	background.Go(func() { s.sealLoop(ctx) })
	background.Go(func() {
		s.compactStored(ctx)
		if !s.cfg.BlobDeltasByHand {
			s.keepBlobsAsDeltas(ctx)
		}
	})
	background.Go(func() { s.warmPackCaches(ctx) })
	defer background.Wait()
	t := time.NewTicker(s.expireInterval)
	defer t.Stop()
	var uploadsDropped time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if now.Sub(uploadsDropped) >= time.Hour {
				uploadsDropped = now
				s.dropStaleBlobUploads(ctx, now)
			}
			n, err := s.store.ExpireJobs(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("settle expired claims", "err", err)
			} else if n > 0 {
				s.log.Info("settled expired claims", "jobs", n)
			}
		}
	}
}

// logInterceptor writes one line per request with the principal and the method (never a
// token), records latency, and hides internal errors' details from clients. The line is at
// rpcLevel: requests are DEBUG, the errors an operator must look at WARN or ERROR.
func (s *Server) logInterceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			res, err := next(ctx, req)
			elapsed := time.Since(start)
			code := "ok"
			level := slog.LevelDebug
			if err != nil {
				c := connect.CodeOf(err)
				code = c.String()
				level = rpcLevel(c)
				err = s.publicError(ctx, req.Spec().Procedure, err)
			}
			s.metrics.latency.WithLabelValues(req.Spec().Procedure, code).Observe(elapsed.Seconds())
			if s.log.Enabled(ctx, level) {
				attrs := []slog.Attr{
					slog.String("procedure", req.Spec().Procedure),
					slog.String("code", code),
					slog.Duration("elapsed", elapsed),
				}
				if c := callerFrom(ctx); c.principal.Name != "" {
					attrs = append(attrs, slog.String("principal", c.principal.Name))
				}
				if err != nil && level != slog.LevelError { // publicError logged an internal error's details
					attrs = append(attrs, slog.String("err", err.Error()))
				}
				s.log.LogAttrs(ctx, level, "rpc", attrs...)
			}
			return res, err
		}
	}
}

// rpcLevel answers the level of the log line of a request that failed with code. The answers
// a client gets in the normal course (a lost claim, a held lease, a bad argument, a wrong token)
// are DEBUG like the requests that succeed, so that `ag serve` at its default level logs what
// happens to the server, not every call: they are counted in the metrics. A server that cannot
// answer (its database away, a timeout) is a WARN, an internal error an ERROR.
func rpcLevel(code connect.Code) slog.Level {
	switch code {
	case connect.CodeInternal, connect.CodeUnknown:
		return slog.LevelError
	case connect.CodeUnavailable:
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

// errDatabaseUnavailable is what a client is told when the store cannot be reached: a database
// error names hosts, users and databases, which are nobody's business but the operator's.
var errDatabaseUnavailable = errors.New("the database is unavailable; retry shortly (the server log has the details)")

// unavailableError carries a store error that means the database cannot be reached now, to be
// logged and answered as errDatabaseUnavailable; unapplied when the request surely did not
// apply, which the answer says so that a client may send it again (RetrySafeHeader).
type unavailableError struct {
	cause     error
	unapplied bool
}

// RetrySafeHeader, "true" on an unavailable answer, says the request was not applied: sending
// it again cannot apply it twice. Without it, a write that failed as unavailable may have been
// applied (a connection lost during its commit), and only the caller knows whether to repeat it.
const RetrySafeHeader = "Ag-Retry-Safe"

func (e *unavailableError) Error() string { return e.cause.Error() }
func (e *unavailableError) Unwrap() error { return e.cause }

// publicError answers what a client may see of err: internal errors and an unreachable database
// lose their details, which go to the log.
func (s *Server) publicError(ctx context.Context, procedure string, err error) error {
	var down *unavailableError
	switch c := connect.CodeOf(err); {
	case errors.As(err, &down):
		s.log.WarnContext(ctx, "database unavailable", "procedure", procedure, "err", down.cause, "applied", !down.unapplied)
		public := connect.NewError(connect.CodeUnavailable, errDatabaseUnavailable)
		if down.unapplied {
			public.Meta().Set(RetrySafeHeader, "true")
		}
		return public
	case c == connect.CodeInternal || c == connect.CodeUnknown:
		s.log.ErrorContext(ctx, "internal error", "procedure", procedure, "err", err)
		return connect.NewError(c, errors.New("internal error; the server log has the details"))
	}
	return err
}

// healthChecker answers gRPC health checks from the store's readiness.
type healthChecker struct{ s *Server }

func (h healthChecker) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	switch req.Service {
	case "", agwpv1connect.JobServiceName, agwpv1connect.AdminServiceName,
		agwpv1connect.LeaseServiceName, agwpv1connect.RepositoryServiceName, agwpv1connect.AuditServiceName,
		agwpv1connect.TaskServiceName:
	default:
		return nil, connect.NewError(connect.CodeNotFound, errors.New("unknown service "+req.Service))
	}
	if err := h.s.store.Ready(ctx); err != nil {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}
