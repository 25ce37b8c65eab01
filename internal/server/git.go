package server

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/store"
)

// The /git/ endpoint serves each repository's mainline to git itself, read-only:
//
//	git clone https://ag.example/git/app.git
//
// It is internal/gitstore's upload-pack behind a gate of its own, since the edge passes every
// path outside AGWP through. The gate takes the API's tokens, sent as a bearer token
// (`git -c http.extraHeader="Authorization: Bearer ..."`) or as the password of HTTP Basic,
// which git sends after a 401 with what its credential helper (`ag git-credential`) gave it.
// From the headers alone it authenticates the caller, checks its role, and bounds the
// principal's fetches in flight; only then is the body read (at the edge's pace) or anything of
// the repository. Reads go through gitObjects: read-only, and never holding a whole
// repository's contents in memory.

const (
	// gitPathPrefix starts every path of the endpoint: /git/REPOSITORY.git/info/refs.
	gitPathPrefix = "/git/"
	// gitChallenge is the WWW-Authenticate of a 401: git then asks its credential helpers (or
	// its user) for a user name and password, and sends them as Basic.
	gitChallenge = `Basic realm="ag"`
	// maxGitRequestBytes bounds an upload-pack request's body as sent; gitstore bounds it to the
	// same once decompressed.
	maxGitRequestBytes = 16 << 20
	// DefaultGitFetchesPerPrincipal bounds the upload-pack requests (the ones that build a
	// pack) one principal has in flight at once.
	DefaultGitFetchesPerPrincipal = 4
	// gitCacheBytes bounds the object contents one request keeps: the largest file ag takes
	// fits, so a big blob compared with its neighbours while packing is read once.
	gitCacheBytes = maxContentBytes
)

// gitObjectSource is what /git/ reads: repositories, and git objects by id. The store answers
// both once every mainline revision is a git commit.
type gitObjectSource interface {
	// GetRepository answers a repository by name, or store.ErrNotFound.
	GetRepository(ctx context.Context, name string) (store.Repository, error)
	// ReadGitObject answers the type and content (without git's header) of a commit, tree or
	// blob of any repository, or store.ErrNotFound.
	ReadGitObject(ctx context.Context, id plumbing.Hash) (plumbing.ObjectType, []byte, error)
}

// gitSource is what /git/ serves.
type gitSource struct {
	objects gitObjectSource
	// mainlineCommit answers a repository's mainline commit: 40 lowercase hex digits, or ""
	// while it has none (Repository.MainlineCommit).
	mainlineCommit func(store.Repository) string
}

// gitEndpoint answers /git/: the gate, then gitstore's handler for the repository named.
type gitEndpoint struct {
	s    *Server
	edge *edge // whose pace a body must keep
}

func (g *gitEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	var principal, repository, service string
	defer func() { g.logRequest(r, sw.code, principal, repository, service, time.Since(start)) }()
	c, ok := g.admit(sw, r)
	if !ok {
		return
	}
	principal = c.principal.Name
	name, sub, ok := gitRepositoryPath(r.URL.Path)
	if !ok {
		gitError(sw, r, http.StatusNotFound, "not a repository's git URL: clone /git/REPOSITORY.git")
		return
	}
	repository = name
	if sub == "info/refs" || sub == "git-upload-pack" {
		service = sub
	}
	if g.s.git == nil {
		gitError(sw, r, http.StatusNotFound, "this server does not serve git: its store keeps no git objects")
		return
	}
	switch {
	case sub == "info/refs" && r.URL.Query().Get("service") == "git-receive-pack":
		service = "git-receive-pack"
		g.advertisePush(sw, r, c, name)
		return
	case sub == "git-receive-pack":
		service = sub
		if r.Method != http.MethodPost {
			gitError(sw, r, http.StatusMethodNotAllowed, "git-receive-pack is called with POST")
			return
		}
		g.receivePack(sw, r, c, name)
		return
	}
	if r.Method == http.MethodPost {
		if r.ContentLength > maxGitRequestBytes {
			g.s.metrics.refusal(gitPathPrefix, "too_large")
			gitError(sw, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request declares %d bytes, more than the limit of %d", r.ContentLength, maxGitRequestBytes))
			return
		}
		if sub == "git-upload-pack" {
			release, ok := g.s.gitFetches.take(principal)
			if !ok {
				g.s.metrics.refusal(gitPathPrefix, "too_many_fetches")
				gitError(sw, r, http.StatusTooManyRequests, fmt.Sprintf(
					"principal %s already has %d git fetches in progress, the most one principal may have at once: try again when one has finished",
					principal, g.s.gitFetches.limit))
				return
			}
			defer release()
		}
		body := g.edge.paced(w, r, maxGitRequestBytes)
		r.Body = body
		// gitstore reads a request up to its "done", not always to the body's end: once it
		// answers, it reads no more, and the body's deadline must not outlive that (on HTTP/1
		// it would cut the connection when net/http drains the body after a long pack).
		sw.onAnswer = func() {
			if pb, ok := body.(*pacedBody); ok && !pb.done {
				pb.finish()
			}
		}
	}
	inner := r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
	u := *r.URL
	u.Path, u.RawPath = "/"+sub, ""
	inner.URL = &u
	gitstore.NewHandler(g.open(name)).ServeHTTP(sw, inner)
}

// admit authenticates the caller from the headers and checks its role, or answers the refusal.
func (g *gitEndpoint) admit(w http.ResponseWriter, r *http.Request) (caller, bool) {
	token, ok := gitToken(r)
	if !ok {
		g.s.metrics.refusal(gitPathPrefix, "unauthenticated")
		gitError(w, r, http.StatusUnauthorized, "authentication required: send an ag token as the password of HTTP Basic (git credential helper: ag git-credential) or as Authorization: Bearer")
		return caller{}, false
	}
	c, err := g.s.auth.authenticateToken(r.Context(), token)
	if connect.CodeOf(err) == connect.CodeUnauthenticated {
		g.s.metrics.refusal(gitPathPrefix, "unauthenticated")
		gitError(w, r, http.StatusUnauthorized, "the token is unknown, revoked, or its principal is disabled")
		return caller{}, false
	}
	if err != nil {
		_ = g.s.publicError(r.Context(), gitPathPrefix, err) // logs the cause
		gitError(w, r, http.StatusServiceUnavailable, errDatabaseUnavailable.Error())
		return caller{}, false
	}
	if !mayCall(c.principal.Role, gitPathPrefix) {
		g.s.metrics.refusal(gitPathPrefix, "permission_denied")
		gitError(w, r, http.StatusForbidden, fmt.Sprintf("principal %s has role %s, which may not read repositories over git", c.principal.Name, c.principal.Role))
		return caller{}, false
	}
	return c, true
}

// gitToken answers the token a git request carries: the password of HTTP Basic (any user
// name), or a bearer token.
func gitToken(r *http.Request) (string, bool) {
	if _, password, ok := r.BasicAuth(); ok {
		return password, password != ""
	}
	const bearer = "Bearer "
	h := r.Header.Get("Authorization")
	if len(h) < len(bearer) || !strings.EqualFold(h[:len(bearer)], bearer) {
		return "", false
	}
	token := strings.TrimSpace(h[len(bearer):])
	return token, token != ""
}

// gitRepositoryPath splits /git/REPOSITORY.git/SUB into the repository's name and SUB. The
// ".git" may be left out, as git's own servers allow; a repository whose name ends in ".git"
// is then reached as NAME.git.git.
func gitRepositoryPath(p string) (name, sub string, ok bool) {
	rest, ok := strings.CutPrefix(p, gitPathPrefix)
	if !ok {
		return "", "", false
	}
	name, sub, ok = strings.Cut(rest, "/")
	name = strings.TrimSuffix(name, ".git")
	if !ok || !namePattern.MatchString(name) {
		return "", "", false
	}
	return name, sub, true
}

// gitError answers a one-line plain text message, which git prints to its user; a 401 carries
// the challenge. A body left unread closes the connection, as the edge's refusals do.
func gitError(w http.ResponseWriter, r *http.Request, code int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-cache, max-age=0, must-revalidate")
	if code == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", gitChallenge)
	}
	if r.ContentLength != 0 && r.ProtoMajor == 1 {
		h.Set("Connection", "close")
	}
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg+"\n")
}

// open answers the snapshot gitstore serves for one request of the repository name.
func (g *gitEndpoint) open(name string) func(ctx context.Context) (gitstore.Snapshot, error) {
	return func(ctx context.Context) (gitstore.Snapshot, error) { return g.s.gitSnapshot(ctx, name) }
}

// gitSnapshot answers the repository name as gitstore serves it: its mainline commit now,
// where its history stops (a shallow import), its objects through a storer of ctx's own, and
// the pack cache.
func (s *Server) gitSnapshot(ctx context.Context, name string) (gitstore.Snapshot, error) {
	src := s.git
	r, err := src.objects.GetRepository(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return gitstore.Snapshot{}, gitstore.ErrNotFound
	}
	if err != nil {
		logGitStoreError(ctx, s.log, "read the repository", err, "repository", name)
		return gitstore.Snapshot{}, err
	}
	main, err := parseCommitID(src.mainlineCommit(r))
	if err != nil {
		s.log.ErrorContext(ctx, "git: the mainline commit", "repository", name, "err", err)
		return gitstore.Snapshot{}, err
	}
	return gitstore.Snapshot{Objects: newGitObjects(ctx, src.objects, s.log), Main: main, Shallow: r.Shallow,
		Cache: s.cfg.PackCache, CacheKey: name}, nil
}

// parseCommitID reads a mainline commit id: 40 lowercase hex digits, or "" for none.
func parseCommitID(id string) (plumbing.Hash, error) {
	if id == "" {
		return plumbing.ZeroHash, nil
	}
	return store.ParseGitID(id)
}

// logGitStoreError logs a store error a git request met, at the level the API logs it at: a
// database that cannot answer is a WARN, anything else an ERROR, a client gone a DEBUG.
func logGitStoreError(ctx context.Context, log *slog.Logger, what string, err error, attrs ...any) {
	level := slog.LevelError
	if down, _ := store.Unavailable(err); down {
		level = slog.LevelWarn
	}
	if ctx.Err() != nil {
		level = slog.LevelDebug
	}
	log.Log(ctx, level, "git: "+what, append(attrs, "err", err)...)
}

// logRequest writes one line per request, as the API's logInterceptor does (the principal,
// never the token), and records its latency by service.
func (g *gitEndpoint) logRequest(r *http.Request, status int, principal, repository, service string, elapsed time.Duration) {
	if status == 0 {
		status = http.StatusOK
	}
	code := gitCode(status)
	procedure := gitPathPrefix + service
	g.s.metrics.latency.WithLabelValues(procedure, code).Observe(elapsed.Seconds())
	// A 5xx is a WARN: what failed was logged on its own, at its own level, as it happened.
	level := slog.LevelDebug
	if status >= 500 {
		level = slog.LevelWarn
	}
	if !g.s.log.Enabled(r.Context(), level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("procedure", procedure), slog.String("method", r.Method), slog.Int("status", status),
		slog.String("code", code), slog.Duration("elapsed", elapsed),
	}
	if repository != "" {
		attrs = append(attrs, slog.String("repository", repository))
	}
	if principal != "" {
		attrs = append(attrs, slog.String("principal", principal))
	}
	g.s.log.LogAttrs(r.Context(), level, "git", attrs...)
}

// gitCode names an HTTP status of /git/ as the Connect code the API would answer.
func gitCode(status int) string {
	switch {
	case status < 300:
		return "ok"
	case status == http.StatusUnauthorized:
		return "unauthenticated"
	case status == http.StatusForbidden:
		return "permission_denied"
	case status == http.StatusNotFound:
		return "not_found"
	case status == http.StatusTooManyRequests, status == http.StatusRequestEntityTooLarge:
		return "resource_exhausted"
	case status == http.StatusServiceUnavailable:
		return "unavailable"
	case status < 500:
		return "invalid_argument"
	}
	return "internal"
}

// statusWriter remembers the status a handler answered, and calls onAnswer (if set) as the
// answer begins.
type statusWriter struct {
	http.ResponseWriter
	code     int
	onAnswer func()
}

func (w *statusWriter) WriteHeader(code int) {
	w.answer(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.answer(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) answer(code int) {
	if w.code != 0 {
		return
	}
	w.code = code
	if w.onAnswer != nil {
		w.onAnswer()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var (
	errGitReadOnly = errors.New("ag's git objects are read-only here")
	errGitRead     = errors.New("could not read a git object; the server log has the details")
)

// gitObjects is the object storer one /git/ request reads through: read-only, over the source,
// keeping the contents it read in a cache of at most gitCacheBytes, the least recently used
// dropped first. The objects it answers hold no content: the pack encoder keeps every object
// it sends until the pack is written, and reads each content again (from the cache, or the
// store) when it compares or writes it, so a clone holds the cache and the encoder's window in
// memory, not the repository. A store error reaches the client as errGitRead; the log has it.
type gitObjects struct {
	ctx context.Context
	src gitObjectSource
	log *slog.Logger

	mu       sync.Mutex
	large    map[plumbing.Hash]store.BlobRef // blobs streamed, never read whole (LargeObjects)
	maxBytes int                             // gitCacheBytes but in tests
	cache    map[plumbing.Hash]*list.Element // of *cachedGitObject
	lru      list.List                       // the most recently used first
	bytes    int
}

var _ storer.EncodedObjectStorer = (*gitObjects)(nil)

type cachedGitObject struct {
	id      plumbing.Hash
	typ     plumbing.ObjectType
	content []byte
}

func newGitObjects(ctx context.Context, src gitObjectSource, log *slog.Logger) *gitObjects {
	return &gitObjects{ctx: ctx, src: src, log: log, maxBytes: gitCacheBytes, cache: map[plumbing.Hash]*list.Element{}}
}

// read answers an object's type and content, from the cache or the store.
func (o *gitObjects) read(id plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	o.mu.Lock()
	if e, ok := o.cache[id]; ok {
		o.lru.MoveToFront(e)
		c := e.Value.(*cachedGitObject)
		o.mu.Unlock()
		return c.typ, c.content, nil
	}
	o.mu.Unlock()
	typ, content, err := o.src.ReadGitObject(o.ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return plumbing.InvalidObject, nil, plumbing.ErrObjectNotFound
	case err != nil:
		logGitStoreError(o.ctx, o.log, "read an object", err, "object", id.String())
		return plumbing.InvalidObject, nil, errGitRead
	}
	switch typ {
	case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
	default:
		o.log.ErrorContext(o.ctx, "git: read an object", "object", id.String(), "err", fmt.Errorf("the store answered the type %s", typ))
		return plumbing.InvalidObject, nil, errGitRead
	}
	o.remember(&cachedGitObject{id: id, typ: typ, content: content})
	return typ, content, nil
}

// batchSource is a gitObjectSource that reads many objects in one request; the store is one.
type batchSource interface {
	ReadGitObjects(ctx context.Context, ids []plumbing.Hash) ([]store.GitObject, error)
}

// deltaSource is a gitObjectSource that keeps some blobs as deltas; the store is one.
type deltaSource interface {
	ReadStoredDeltas(ctx context.Context, ids []plumbing.Hash) (map[plumbing.Hash]store.PackDelta, error)
}

// StoredDeltas answers the blobs among ids the store keeps as deltas (gitstore.DeltaStorer),
// or none when it keeps none so.
func (o *gitObjects) StoredDeltas(ids []plumbing.Hash) (map[plumbing.Hash]gitstore.StoredDelta, error) {
	src, ok := o.src.(deltaSource)
	if !ok {
		return nil, nil
	}
	kept, err := src.ReadStoredDeltas(o.ctx, ids)
	if err != nil {
		logGitStoreError(o.ctx, o.log, "read stored deltas", err, "objects", len(ids))
		return nil, errGitRead
	}
	out := make(map[plumbing.Hash]gitstore.StoredDelta, len(kept))
	for id, d := range kept {
		out[id] = gitstore.StoredDelta{Base: d.Base, Size: d.Len, Deflated: d.Deflated}
	}
	return out, nil
}

// Prefetch reads the objects among ids that the cache lacks in one request to a store that
// can (gitstore.Prefetcher): a pack of 100,000 objects then costs a few hundred requests,
// not 100,000. A failure is only logged: each object is read again, alone, when it is used.
func (o *gitObjects) Prefetch(ids []plumbing.Hash) {
	b, ok := o.src.(batchSource)
	if !ok {
		return
	}
	o.mu.Lock()
	var ask []plumbing.Hash
	for _, id := range ids {
		_, cached := o.cache[id]
		_, large := o.large[id] // streamed when written, never read whole
		if !cached && !large {
			ask = append(ask, id)
		}
	}
	o.mu.Unlock()
	if len(ask) == 0 {
		return
	}
	objs, err := b.ReadGitObjects(o.ctx, ask)
	if err != nil {
		logGitStoreError(o.ctx, o.log, "read objects", err, "objects", len(ask))
		return
	}
	for _, obj := range objs {
		switch obj.Type {
		case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
			o.remember(&cachedGitObject{id: obj.ID, typ: obj.Type, content: obj.Data})
		}
	}
}

func (o *gitObjects) remember(c *cachedGitObject) {
	if len(c.content) > o.maxBytes {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.cache[c.id]; ok {
		return
	}
	for o.bytes+len(c.content) > o.maxBytes {
		last := o.lru.Back()
		old := o.lru.Remove(last).(*cachedGitObject)
		delete(o.cache, old.id)
		o.bytes -= len(old.content)
	}
	o.cache[c.id] = o.lru.PushFront(c)
	o.bytes += len(c.content)
}

// largeBlobSource is a gitObjectSource that reads a blob part by part; the store is one.
type largeBlobSource interface {
	BlobsByGitID(ctx context.Context, ids []plumbing.Hash) (map[plumbing.Hash]store.BlobRef, error)
	ReadBlob(ctx context.Context, digest string, offset uint64, fn func(piece []byte) error) error
}

// largeGitBlobBytes is the size from which a blob is streamed into a pack, never read whole.
const largeGitBlobBytes = 4 << 20

// largeLookupBatch is how many ids one lookup of blob sizes asks about.
const largeLookupBatch = 1000

// LargeObjects finds the blobs among ids of largeGitBlobBytes or more, which EncodedObject
// then answers as streams (gitstore.LargeObjectStorer), and answers how many there are.
func (o *gitObjects) LargeObjects(ids []plumbing.Hash) (int, error) {
	src, ok := o.src.(largeBlobSource)
	if !ok {
		return 0, nil
	}
	large := map[plumbing.Hash]store.BlobRef{}
	for i := 0; i < len(ids); i += largeLookupBatch {
		refs, err := src.BlobsByGitID(o.ctx, ids[i:min(len(ids), i+largeLookupBatch)])
		if err != nil {
			logGitStoreError(o.ctx, o.log, "read blob sizes", err)
			return 0, errGitRead
		}
		for id, ref := range refs {
			if ref.Size >= largeGitBlobBytes {
				large[id] = ref
			}
		}
	}
	o.mu.Lock()
	o.large = large
	o.mu.Unlock()
	return len(large), nil
}

// EncodedObject answers the object id of type t (any type: plumbing.AnyObject), or
// plumbing.ErrObjectNotFound when there is none of that type.
func (o *gitObjects) EncodedObject(t plumbing.ObjectType, id plumbing.Hash) (plumbing.EncodedObject, error) {
	o.mu.Lock()
	ref, large := o.large[id]
	o.mu.Unlock()
	if large {
		if t != plumbing.AnyObject && t != plumbing.BlobObject {
			return nil, plumbing.ErrObjectNotFound
		}
		return &gitObject{objects: o, id: id, typ: plumbing.BlobObject, size: int64(ref.Size), digest: ref.Digest}, nil
	}
	typ, content, err := o.read(id)
	if err != nil {
		return nil, err
	}
	if t != plumbing.AnyObject && t != typ {
		return nil, plumbing.ErrObjectNotFound
	}
	return &gitObject{objects: o, id: id, typ: typ, size: int64(len(content))}, nil
}

// HasEncodedObject answers nil when the object exists, plumbing.ErrObjectNotFound when not.
func (o *gitObjects) HasEncodedObject(id plumbing.Hash) error {
	_, _, err := o.read(id)
	return err
}

// EncodedObjectSize answers the size of an object's content.
func (o *gitObjects) EncodedObjectSize(id plumbing.Hash) (int64, error) {
	_, content, err := o.read(id)
	return int64(len(content)), err
}

// NewEncodedObject answers an object in memory, which SetEncodedObject refuses to store.
func (o *gitObjects) NewEncodedObject() plumbing.EncodedObject { return &plumbing.MemoryObject{} }

// SetEncodedObject refuses: nothing is written through /git/.
func (o *gitObjects) SetEncodedObject(plumbing.EncodedObject) (plumbing.Hash, error) {
	return plumbing.ZeroHash, errGitReadOnly
}

// IterEncodedObjects refuses: the objects of every repository are no one request's to list.
func (o *gitObjects) IterEncodedObjects(plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return nil, errors.New("listing every git object is not supported")
}

// AddAlternate refuses.
func (o *gitObjects) AddAlternate(string) error { return errGitReadOnly }

// gitObject is an object gitObjects answered: its type and size, its content read on demand.
type gitObject struct {
	objects *gitObjects
	id      plumbing.Hash
	typ     plumbing.ObjectType
	size    int64
	digest  string // a large blob's, which Reader streams
}

func (x *gitObject) Hash() plumbing.Hash       { return x.id }
func (x *gitObject) Type() plumbing.ObjectType { return x.typ }
func (x *gitObject) Size() int64               { return x.size }

// SetType and SetSize do nothing: an object read from the store is what it is.
func (x *gitObject) SetType(plumbing.ObjectType) {}
func (x *gitObject) SetSize(int64)               {}

func (x *gitObject) Reader() (io.ReadCloser, error) {
	if x.digest != "" {
		return x.objects.stream(x.digest, x.size), nil
	}
	typ, content, err := x.objects.read(x.id)
	if err != nil {
		return nil, err
	}
	if typ != x.typ || int64(len(content)) != x.size {
		x.objects.log.ErrorContext(x.objects.ctx, "git: read an object", "object", x.id.String(), "err", errors.New("the store answered another type or size than before"))
		return nil, errGitRead
	}
	return io.NopCloser(bytes.NewReader(content)), nil
}

func (x *gitObject) Writer() (io.WriteCloser, error) { return nil, errGitReadOnly }

// stream answers a reader of a large blob's content, read part by part from the store as it
// is consumed. Closing it early stops the read.
func (o *gitObjects) stream(digest string, size int64) io.ReadCloser {
	pr, pw := io.Pipe()
	src := o.src.(largeBlobSource)
	go func() {
		var n int64
		err := src.ReadBlob(o.ctx, digest, 0, func(piece []byte) error {
			n += int64(len(piece))
			_, err := pw.Write(piece)
			return err
		})
		switch {
		case errors.Is(err, io.ErrClosedPipe):
		case err != nil:
			logGitStoreError(o.ctx, o.log, "read a blob", err, "blob", digest)
			err = errGitRead
		case n != size:
			o.log.ErrorContext(o.ctx, "git: read a blob", "blob", digest, "err", fmt.Errorf("the store answered %d bytes of %d", n, size))
			err = errGitRead
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// warmPackCache asks Run to build the cached pack of the repository name (just imported) in
// the background, so that its first clone does not wait for it; a request made while the
// queue is full is dropped, and the first clone builds the pack.
func (s *Server) warmPackCache(name string) {
	if s.cfg.PackCache == nil {
		return
	}
	select {
	case s.packWarmups <- name:
	default:
	}
}

// warmPackCaches builds the cached packs warmPackCache asks for, one at a time.
func (s *Server) warmPackCaches(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case name := <-s.packWarmups:
			start := time.Now()
			snap, err := s.gitSnapshot(ctx, name)
			if err == nil {
				err = s.cfg.PackCache.Warm(ctx, snap)
			}
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("git: build the cached pack of an imported repository", "repository", name, "err", err)
				}
				continue
			}
			s.log.Info("git: built the cached pack of an imported repository", "repository", name, "took", time.Since(start).Round(time.Millisecond))
		}
	}
}
