// Package client is the Go SDK of ag: a client for every AGWP v1 service with the bearer token,
// timeouts and retries, and a job handle that always speaks with its own claim number.
//
//	c := client.New("http://127.0.0.1:7777", token)
//	claim, err := c.Claim(ctx, client.ClaimOptions{Worker: "w1", Wait: 30 * time.Second})
//	if claim != nil {
//		ctx, stop := claim.KeepAlive(ctx)
//		defer stop()
//		... do the work with ctx ...
//		_, err = claim.Complete(ctx, client.CompleteOptions{Output: "done"})
//	}
package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
)

// Client calls an ag server.
type Client struct {
	Jobs   agwpv1connect.JobServiceClient
	Admin  agwpv1connect.AdminServiceClient
	Leases agwpv1connect.LeaseServiceClient
	Repos  agwpv1connect.RepositoryServiceClient
	Audit  agwpv1connect.AuditServiceClient
	Tasks  agwpv1connect.TaskServiceClient

	baseURL string
}

// Option configures a Client.
type Option func(*options)

type options struct {
	httpClient  *http.Client
	timeout     time.Duration
	retries     int
	retryBase   time.Duration
	useJSON     bool
	userAgent   string
	interceptor []connect.Interceptor
}

// WithHTTPClient uses hc for every call.
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.httpClient = hc } }

// WithTimeout bounds each call that has no deadline of its own (default 30s); a long-polling
// ClaimJob gets its wait on top.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithRetries sets how often a call that failed with `unavailable` is tried again (default 4),
// with exponential backoff from base (default 100ms). No other code is retried.
func WithRetries(n int, base time.Duration) Option {
	return func(o *options) { o.retries, o.retryBase = n, base }
}

// WithJSON speaks the Connect protocol with JSON bodies instead of binary protobuf.
func WithJSON() Option { return func(o *options) { o.useJSON = true } }

// WithUserAgent names the program in the User-Agent header.
func WithUserAgent(ua string) Option { return func(o *options) { o.userAgent = ua } }

// New answers a client of the server at baseURL (such as "http://127.0.0.1:7777") that
// authenticates with token.
func New(baseURL, token string, opts ...Option) *Client {
	o := options{timeout: 30 * time.Second, retries: 4, retryBase: 100 * time.Millisecond, userAgent: "ag-go-sdk"}
	for _, opt := range opts {
		opt(&o)
	}
	if o.httpClient == nil {
		o.httpClient = &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	baseURL = strings.TrimRight(baseURL, "/")
	copts := []connect.ClientOption{
		connect.WithInterceptors(callInterceptor{token: token, userAgent: o.userAgent, timeout: o.timeout, retries: o.retries, retryBase: o.retryBase}),
	}
	if o.useJSON {
		copts = append(copts, connect.WithProtoJSON())
	}
	if onThisMachine(baseURL) {
		// Compressing and inflating an answer costs both ends more CPU than sending its bytes
		// across a loopback: with batches of 128 jobs, gzip was a fifth of the server's CPU.
		copts = append(copts, connect.WithAcceptCompression("gzip", nil, nil))
	}
	return &Client{
		Jobs:    agwpv1connect.NewJobServiceClient(o.httpClient, baseURL, copts...),
		Admin:   agwpv1connect.NewAdminServiceClient(o.httpClient, baseURL, copts...),
		Leases:  agwpv1connect.NewLeaseServiceClient(o.httpClient, baseURL, copts...),
		Repos:   agwpv1connect.NewRepositoryServiceClient(o.httpClient, baseURL, copts...),
		Audit:   agwpv1connect.NewAuditServiceClient(o.httpClient, baseURL, copts...),
		Tasks:   agwpv1connect.NewTaskServiceClient(o.httpClient, baseURL, copts...),
		baseURL: baseURL,
	}
}

// onThisMachine reports whether baseURL names a loopback host: localhost or a loopback address.
func onThisMachine(baseURL string) bool {
	u, err := url.Parse(baseURL)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// BaseURL answers the server's address.
func (c *Client) BaseURL() string { return c.baseURL }

// callInterceptor adds the bearer token, a default deadline, and retries on unavailable.
type callInterceptor struct {
	token     string
	userAgent string
	timeout   time.Duration
	retries   int
	retryBase time.Duration
}

func (ci callInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+ci.token)
		req.Header().Set("User-Agent", ci.userAgent)
		if _, ok := ctx.Deadline(); !ok && ci.timeout > 0 {
			timeout := ci.timeout + longPollWait(req.Any())
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		delay := ci.retryBase
		for attempt := 0; ; attempt++ {
			res, err := next(ctx, req)
			if err == nil || attempt >= ci.retries || !safeToRetry(req.Spec().Procedure, err) {
				return res, err
			}
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, err
			case <-t.C:
			}
			delay *= 2
		}
	}
}

// retrySafeHeader is the server's word that a request answered unavailable was not applied
// (internal/server.RetrySafeHeader).
const retrySafeHeader = "Ag-Retry-Safe"

// safeToRetry reports whether a call that failed with err may be sent again without the risk
// of applying it twice: it failed as unavailable, and it only reads (or stores content by
// digest), or it never reached the server, or the server said it was not applied. A write that
// failed otherwise (a connection lost during its commit) may have been applied: the caller,
// who knows whether repeating it is harmless, decides.
func safeToRetry(procedure string, err error) bool {
	if connect.CodeOf(err) != connect.CodeUnavailable {
		return false
	}
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Meta().Get(retrySafeHeader) == "true" {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true // refused or unreachable: nothing was sent
	}
	_, method, _ := strings.Cut(strings.TrimPrefix(procedure, "/"), "/")
	for _, prefix := range []string{"Get", "List", "Find", "Watch"} {
		if strings.HasPrefix(method, prefix) {
			return true
		}
	}
	switch method {
	case "WhoAmI", "UploadBlobs":
		return true // a read; content stored by its digest
	case "HeartbeatJob", "CompleteJob", "CompleteJobs", "FailJob", "RenewLease":
		// Fenced by the claim number or lease token they carry: a repeat of one that applied
		// is refused as a lost claim, and changes nothing.
		return true
	}
	return false
}

func (ci callInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+ci.token)
		conn.RequestHeader().Set("User-Agent", ci.userAgent)
		return conn
	}
}

func (ci callInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// longPollWait answers how long a request may legitimately wait on the server.
func longPollWait(msg any) time.Duration {
	switch r := msg.(type) {
	case *agwpv1.ClaimJobRequest:
		return r.GetWait().AsDuration()
	case *agwpv1.GetChangeRequest:
		return r.GetWait().AsDuration()
	case *agwpv1.AcquireLeaseRequest:
		return r.GetWait().AsDuration()
	case *agwpv1.ListAuditEventsRequest:
		return r.GetWait().AsDuration()
	case *agwpv1.ListMessagesRequest:
		return r.GetWait().AsDuration()
	}
	return 0
}

// IsCode reports whether err is a Connect error with code.
func IsCode(err error, code connect.Code) bool {
	var ce *connect.Error
	return errors.As(err, &ce) && ce.Code() == code
}
