package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// The AGWP services' descriptors, which knownProcedure looks procedures up in.
	_ "github.com/ag-coord/ag/gen/agwp/v1"
)

// The edge is what every AGWP request passes before a byte of its body is read: the caller is
// authenticated and its role checked from the headers alone, a declared size above the limit is
// refused, a principal's large uploads are bounded, and the body must arrive at a reasonable
// pace. Without it, anyone who can open a connection makes the server read and decode up to
// 64 MiB per request, or hold a connection open for as long as it likes, before learning that
// the request carries no token.

const (
	// agwpPathPrefix starts the path of every AGWP procedure ("/agwp.v1.JobService/ClaimJob").
	agwpPathPrefix = "/agwp.v1."
	// largeBodyBytes is the declared size from which a content request counts as a large upload.
	largeBodyBytes = 1 << 20
	// DefaultUploadsPerPrincipal bounds the large uploads one principal has in flight at once.
	DefaultUploadsPerPrincipal = 4
	// DefaultBodyIdleTimeout is how long a request body may go without delivering a byte.
	DefaultBodyIdleTimeout = 10 * time.Second
	// DefaultBodyTimeout is the time any request body may take, on top of the time the bytes
	// that arrived take at minBodyRate.
	DefaultBodyTimeout = 30 * time.Second
	// minBodyRate is the slowest pace a body may keep, on average, after its first
	// DefaultBodyTimeout: about half a megabit per second, 64 MiB in 17 minutes.
	minBodyRate = 64 << 10
)

// contentProcedures carry file contents: their bodies may be up to maxContentRequestBytes.
var contentProcedures = map[string]bool{
	"/agwp.v1.RepositoryService/UploadBlobs":      true,
	"/agwp.v1.RepositoryService/UploadGitObjects": true,
	"/agwp.v1.RepositoryService/Integrate":        true,
	"/agwp.v1.RepositoryService/UploadBlobPart":   true,
}

// edge wraps the AGWP handlers; other paths (health, metrics, the OpenAPI document, and /git/,
// which authenticates by itself: git.go) pass untouched.
type edge struct {
	s           *Server
	next        http.Handler
	errors      *connect.ErrorWriter
	idleTimeout time.Duration
	bodyTimeout time.Duration
	uploads     *uploadSlots
}

func (s *Server) newEdge(next http.Handler) *edge {
	e := &edge{
		s: s, next: next, errors: connect.NewErrorWriter(),
		idleTimeout: s.cfg.BodyIdleTimeout, bodyTimeout: s.cfg.BodyTimeout,
		uploads: s.uploads,
	}
	if e.idleTimeout <= 0 {
		e.idleTimeout = DefaultBodyIdleTimeout
	}
	if e.bodyTimeout <= 0 {
		e.bodyTimeout = DefaultBodyTimeout
	}
	return e
}

func (e *edge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	procedure := r.URL.Path
	if !strings.HasPrefix(procedure, agwpPathPrefix) {
		e.next.ServeHTTP(w, r)
		return
	}
	if !knownProcedure(procedure) {
		// Answered before anything else, so that no made-up path becomes a metrics label.
		http.NotFound(w, r)
		return
	}
	c, err := e.admit(r.Context(), procedure, r.Header.Get("Authorization"))
	if err != nil {
		e.refuse(w, r, err)
		return
	}
	limit := int64(e.s.maxBytes)
	if contentProcedures[procedure] {
		limit = int64(e.s.maxContentRequestBytes)
	}
	if r.ContentLength > limit {
		e.s.metrics.refusal(procedure, "too_large")
		e.refuse(w, r, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("the request declares %d bytes, more than the limit of %d for %s", r.ContentLength, limit, procedure)))
		return
	}
	if largeUpload(procedure, r) {
		release, ok := e.uploads.take(c.principal.Name)
		if !ok {
			e.s.metrics.refusal(procedure, "too_many_uploads")
			e.refuse(w, r, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
				"principal %s already has %d large uploads in progress, the most one principal may have at once: wait for one to finish",
				c.principal.Name, e.uploads.limit)))
			return
		}
		defer release()
	}
	r.Body = e.paced(w, r, limit)
	e.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
}

// largeUpload reports whether r takes one of its principal's upload slots: a call carrying file
// contents that declares over largeBodyBytes. A body of unknown size (gRPC streams it) counts as
// large: it may be. So does a compressed one, which may decompress to the whole limit whatever it
// declares.
func largeUpload(procedure string, r *http.Request) bool {
	return contentProcedures[procedure] && (r.ContentLength < 0 || r.ContentLength > largeBodyBytes || compressed(r.Header))
}

// compressed reports whether a request's body is compressed, in any of the protocols' ways.
func compressed(h http.Header) bool {
	for _, name := range []string{"Content-Encoding", "Connect-Content-Encoding", "Grpc-Encoding"} {
		if v := h.Get(name); v != "" && v != "identity" {
			return true
		}
	}
	return false
}

// agwpProcedures are the paths of every AGWP method ("/agwp.v1.JobService/ClaimJob"), from the
// generated descriptors, looked up on every request.
var agwpProcedures = func() map[string]bool {
	procedures := map[string]bool{}
	protoregistry.GlobalFiles.RangeFilesByPackage("agwp.v1", func(f protoreflect.FileDescriptor) bool {
		for i := range f.Services().Len() {
			svc := f.Services().Get(i)
			for j := range svc.Methods().Len() {
				procedures["/"+string(svc.FullName())+"/"+string(svc.Methods().Get(j).Name())] = true
			}
		}
		return true
	})
	return procedures
}()

// knownProcedure reports whether path names a method of an AGWP service.
func knownProcedure(path string) bool { return agwpProcedures[path] }

// admit authenticates the caller from the headers and checks its role for the procedure.
func (e *edge) admit(ctx context.Context, procedure, authorization string) (caller, error) {
	c, err := e.s.auth.authenticate(ctx, authorization)
	if err != nil {
		e.s.metrics.refusal(procedure, "unauthenticated")
		return caller{}, err
	}
	if !mayCall(c.principal.Role, procedure) {
		e.s.metrics.refusal(procedure, "permission_denied")
		return caller{}, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("principal %s has role %s, which may not call %s", c.principal.Name, c.principal.Role, procedure))
	}
	return c, nil
}

// refuse answers err in the protocol the request speaks (Connect, gRPC or gRPC-Web), without
// reading the body, and closes the connection when the body was not read: a client still
// sending it would otherwise have the server drain it.
func (e *edge) refuse(w http.ResponseWriter, r *http.Request, err error) {
	err = e.s.publicError(r.Context(), r.URL.Path, err)
	if r.ContentLength != 0 && r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	if !e.errors.IsSupported(r) {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	_ = e.errors.Write(w, r, err)
}

// paced answers r's body with deadlines: each read must deliver within the idle timeout, and
// the body as a whole must keep minBodyRate after its first body timeout, so a trickle of a
// byte now and then does not hold a connection and a handler for as long as the sender likes.
// Once the body has been read the deadline is lifted, so a long poll waiting after its request
// is not cut by it. Reads beyond limit fail, whatever the body declared.
func (e *edge) paced(w http.ResponseWriter, r *http.Request, limit int64) io.ReadCloser {
	return &pacedBody{
		body: http.MaxBytesReader(w, r.Body, limit), rc: http.NewResponseController(w),
		idle: e.idleTimeout, start: time.Now(), grace: e.bodyTimeout,
	}
}

type pacedBody struct {
	body     io.ReadCloser
	rc       *http.ResponseController
	idle     time.Duration
	start    time.Time
	grace    time.Duration
	received int64
	armed    time.Time // the read deadline set, zero while none is
	done     bool
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if b.done {
		return b.body.Read(p)
	}
	// A deadline is set again only when the one set is less than half the idle time away:
	// setting one is a call into the connection (on HTTP/2 a message to its serving
	// goroutine), and a small body is read in a few reads within microseconds.
	now := time.Now()
	if b.armed.Sub(now) < b.idle/2 {
		deadline := now.Add(b.idle)
		if paced := b.start.Add(b.grace + time.Duration(b.received)*time.Second/minBodyRate); paced.Before(deadline) {
			deadline = paced
		}
		// An error here means the connection cannot take a deadline (a test's recorder);
		// the body is then read as it would have been without one.
		_ = b.rc.SetReadDeadline(deadline)
		b.armed = deadline
	}
	n, err := b.body.Read(p)
	b.received += int64(n)
	if err != nil {
		b.finish()
		if err != io.EOF && errors.Is(err, os.ErrDeadlineExceeded) {
			err = connect.NewError(connect.CodeDeadlineExceeded, errors.New("the request body arrived too slowly: send it at a steady pace"))
		}
	}
	return n, err
}

// finish lifts the deadline once the body is read, so that a long poll waiting after it is not
// cut by it (net/http cancels a request whose read deadline passes).
func (b *pacedBody) finish() {
	b.done = true
	if !b.armed.IsZero() {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

func (b *pacedBody) Close() error {
	if !b.done {
		b.finish()
	}
	return b.body.Close()
}

// LargeUploads answers how many large uploads are in flight now, every principal's.
func (s *Server) LargeUploads() int {
	s.uploads.mu.Lock()
	defer s.uploads.mu.Unlock()
	n := 0
	for _, held := range s.uploads.held {
		n += held
	}
	return n
}

// uploadSlots counts the large uploads each principal has in flight.
type uploadSlots struct {
	limit int
	mu    sync.Mutex
	held  map[string]int
}

func (u *uploadSlots) take(principal string) (release func(), ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.held[principal] >= u.limit {
		return nil, false
	}
	u.held[principal]++
	return func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		if u.held[principal]--; u.held[principal] <= 0 {
			delete(u.held, principal)
		}
	}, true
}
