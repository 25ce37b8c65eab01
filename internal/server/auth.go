package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/internal/store"
)

// tokenPrefix marks ag bearer tokens so that secret scanners and people recognise them.
const tokenPrefix = "agt_"

// NewToken answers a new bearer token (256 random bits), its id and the sha256 that is stored.
func NewToken() (token, id string, hash []byte) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	token = tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return token, store.NewID("tok"), HashToken(token)
}

// HashToken answers the stored form of a token.
func HashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// caller is the authenticated principal of a request.
type caller struct {
	principal store.Principal
	tokenID   string
}

type callerKey struct{}

func callerFrom(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// holder answers "<principal>|<label>", the form the store keeps claims and leases under.
func (c caller) holder(label string) string {
	return store.Holder{Principal: c.principal.Name, Label: label}.String()
}

// authenticator resolves bearer tokens, with a short cache so the hot path (claim, heartbeat,
// complete) does not read the principal on every call. Revocation in this process drops the
// cache at once; another replica's revocation is seen within authCacheTTL.
type authenticator struct {
	store store.Store
	now   func() time.Time
	ttl   time.Duration

	mu    sync.Mutex
	cache map[[sha256.Size]byte]authEntry
}

type authEntry struct {
	caller  caller
	hash    []byte
	expires time.Time
}

const authCacheTTL = 5 * time.Second

func newAuthenticator(s store.Store) *authenticator {
	return &authenticator{store: s, now: time.Now, ttl: authCacheTTL, cache: map[[sha256.Size]byte]authEntry{}}
}

var errNoToken = errors.New("missing bearer token: send Authorization: Bearer <token>")

func (a *authenticator) authenticate(ctx context.Context, authorization string) (caller, error) {
	token, ok := strings.CutPrefix(authorization, "Bearer ")
	token = strings.TrimSpace(token)
	if !ok || token == "" {
		return caller{}, connect.NewError(connect.CodeUnauthenticated, errNoToken)
	}
	return a.authenticateToken(ctx, token)
}

// authenticateToken resolves a token however it came (the API's bearer header, or the /git/
// endpoint's bearer or Basic password): an unknown, revoked or disabled one is unauthenticated,
// a store that cannot answer unavailable.
func (a *authenticator) authenticateToken(ctx context.Context, token string) (caller, error) {
	if len(token) > 256 {
		return caller{}, connect.NewError(connect.CodeUnauthenticated, errors.New("bearer token is not one this server issued"))
	}
	hash := HashToken(token)
	key := [sha256.Size]byte(hash)
	now := a.now()
	a.mu.Lock()
	e, hit := a.cache[key]
	a.mu.Unlock()
	if hit && now.Before(e.expires) && subtle.ConstantTimeCompare(e.hash, hash) == 1 {
		return e.caller, nil
	}
	p, t, err := a.store.Authenticate(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return caller{}, connect.NewError(connect.CodeUnauthenticated, errors.New("bearer token is unknown, revoked, or its principal is disabled"))
	}
	if err != nil {
		// Whatever failed, the client can only wait and retry; the details are the operator's.
		// Authenticating only reads: the request was not applied.
		return caller{}, connect.NewError(connect.CodeUnavailable, &unavailableError{cause: fmt.Errorf("authenticate: %w", err), unapplied: true})
	}
	c := caller{principal: p, tokenID: t.ID}
	a.mu.Lock()
	if len(a.cache) > 10000 {
		clear(a.cache)
	}
	a.cache[key] = authEntry{caller: c, hash: hash, expires: now.Add(a.ttl)}
	a.mu.Unlock()
	return c, nil
}

// forget drops cached tokens of a principal (name) or one token (id) after a revocation.
func (a *authenticator) forget(principal, tokenID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, e := range a.cache {
		if e.caller.principal.Name == principal || e.caller.tokenID == tokenID {
			delete(a.cache, k)
		}
	}
}

// allowed lists the roles that may call each procedure besides admin, which may call all.
// A procedure missing here is refused to everyone but admin.
var allowed = map[string][]store.Role{
	"/agwp.v1.JobService/EnqueueJob":          {store.RoleAgent},
	"/agwp.v1.JobService/ClaimJob":            {store.RoleWorker},
	"/agwp.v1.JobService/ClaimJobs":           {store.RoleWorker},
	"/agwp.v1.JobService/HeartbeatJob":        {store.RoleWorker},
	"/agwp.v1.JobService/CompleteJob":         {store.RoleWorker},
	"/agwp.v1.JobService/CompleteJobs":        {store.RoleWorker},
	"/agwp.v1.JobService/FailJob":             {store.RoleWorker},
	"/agwp.v1.JobService/CancelJob":           {store.RoleAgent}, // and only its own jobs: see CancelJob
	"/agwp.v1.JobService/GetJob":              {store.RoleAgent, store.RoleWorker, store.RoleReader},
	"/agwp.v1.JobService/ListJobs":            {store.RoleAgent, store.RoleWorker, store.RoleReader},
	"/agwp.v1.JobService/GetAttestation":      {store.RoleAgent, store.RoleWorker, store.RoleReader},
	"/agwp.v1.JobService/CountJobs":           {store.RoleAgent, store.RoleWorker, store.RoleReader},
	"/agwp.v1.AdminService/RegisterWorkerKey": {store.RoleWorker},
	"/agwp.v1.AdminService/WhoAmI":            {store.RoleAgent, store.RoleWorker, store.RoleReader},
	"/agwp.v1.AdminService/ListWorkerKeys":    {store.RoleReader},

	"/agwp.v1.AuditService/ListAuditEvents":     {store.RoleReader},
	"/agwp.v1.AuditService/GetCheckpoint":       {store.RoleReader},
	"/agwp.v1.AuditService/GetInclusionProof":   {store.RoleReader},
	"/agwp.v1.AuditService/GetConsistencyProof": {store.RoleReader},

	"/agwp.v1.LeaseService/AcquireLease": {store.RoleAgent},
	"/agwp.v1.LeaseService/RenewLease":   {store.RoleAgent},
	"/agwp.v1.LeaseService/ReleaseLease": {store.RoleAgent},
	"/agwp.v1.LeaseService/ListLeases":   {store.RoleAgent, store.RoleWorker, store.RoleReader},

	"/agwp.v1.RepositoryService/GetRepository":    {store.RoleAgent, store.RoleWorker, store.RoleReader},
	"/agwp.v1.RepositoryService/ListRepositories": {store.RoleAgent, store.RoleWorker, store.RoleReader},
	"/agwp.v1.RepositoryService/UploadBlobs":      {store.RoleAgent},
	"/agwp.v1.RepositoryService/FindMissingBlobs": {store.RoleAgent},
	"/agwp.v1.RepositoryService/StartBlobUpload":  {store.RoleAgent},
	"/agwp.v1.RepositoryService/UploadBlobPart":   {store.RoleAgent},
	// A worker reads only what its current claim needs: see workerReads.
	"/agwp.v1.RepositoryService/GetBlob":     {store.RoleAgent, store.RoleWorker, store.RoleReader},
	"/agwp.v1.RepositoryService/GetBlobs":    {store.RoleAgent, store.RoleWorker, store.RoleReader},
	"/agwp.v1.RepositoryService/ReadBlob":    {store.RoleAgent, store.RoleWorker, store.RoleReader},
	"/agwp.v1.RepositoryService/GetTree":     {store.RoleAgent, store.RoleWorker, store.RoleReader},
	"/agwp.v1.RepositoryService/Integrate":   {store.RoleAgent},
	"/agwp.v1.RepositoryService/GetChange":   {store.RoleAgent, store.RoleWorker, store.RoleReader},
	"/agwp.v1.RepositoryService/ListChanges": {store.RoleAgent, store.RoleWorker, store.RoleReader},
	"/agwp.v1.RepositoryService/WatchChange": {store.RoleAgent, store.RoleWorker, store.RoleReader},
	"/agwp.v1.RepositoryService/GetQueue":    {store.RoleAgent, store.RoleWorker, store.RoleReader},
	// Approving a change to protected paths is the one thing a reviewer may do beyond reading;
	// an agent may not approve, its own changes least of all.
	"/agwp.v1.RepositoryService/ApproveChange": {store.RoleReviewer},

	// Tasks and messages: agents create, claim and post; a reviewer posts too (it reads as a
	// reader); renewing, releasing and cancelling are checked against the claimant or the
	// creator by the store.
	"/agwp.v1.TaskService/CreateTask":       {store.RoleAgent},
	"/agwp.v1.TaskService/GetTask":          {store.RoleAgent, store.RoleReader},
	"/agwp.v1.TaskService/ListTasks":        {store.RoleAgent, store.RoleReader},
	"/agwp.v1.TaskService/ClaimTask":        {store.RoleAgent},
	"/agwp.v1.TaskService/RenewTaskClaim":   {store.RoleAgent},
	"/agwp.v1.TaskService/ReleaseTaskClaim": {store.RoleAgent},
	"/agwp.v1.TaskService/CancelTask":       {store.RoleAgent},
	"/agwp.v1.TaskService/SendMessage":      {store.RoleAgent, store.RoleReviewer},
	"/agwp.v1.TaskService/ListMessages":     {store.RoleAgent, store.RoleReader},

	// Fetching a repository's mainline with git (git.go). Not a worker: it reads only the
	// candidate of a validate job it holds (workerReads), never a whole history.
	gitPathPrefix: {store.RoleAgent, store.RoleReader},
}

func mayCall(role store.Role, procedure string) bool {
	if role == store.RoleAdmin {
		return true
	}
	for _, r := range allowed[procedure] {
		// A reviewer reads what a reader reads.
		if r == role || role == store.RoleReviewer && r == store.RoleReader {
			return true
		}
	}
	return false
}

// authInterceptor authenticates every RPC, unary and streaming, and checks the caller's role for
// the procedure before the handler runs.
type authInterceptor struct {
	auth      *authenticator
	onRefusal func(procedure, reason string)
}

func (a *authenticator) interceptor(onRefusal func(procedure, reason string)) connect.Interceptor {
	return authInterceptor{auth: a, onRefusal: onRefusal}
}

// admit answers the context carrying the caller, or the refusal. The edge has authenticated
// the caller already when the request came through Server.Handler; the check is repeated for
// handlers mounted without it.
func (ai authInterceptor) admit(ctx context.Context, procedure, authorization string) (context.Context, error) {
	if c, ok := ctx.Value(callerKey{}).(caller); ok && mayCall(c.principal.Role, procedure) {
		return store.WithActor(ctx, store.Actor{Principal: c.principal.Name}), nil
	}
	c, err := ai.auth.authenticate(ctx, authorization)
	if err != nil {
		ai.onRefusal(procedure, "unauthenticated")
		return nil, err
	}
	if !mayCall(c.principal.Role, procedure) {
		ai.onRefusal(procedure, "permission_denied")
		return nil, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("principal %s has role %s, which may not call %s", c.principal.Name, c.principal.Role, procedure))
	}
	ctx = store.WithActor(ctx, store.Actor{Principal: c.principal.Name})
	return context.WithValue(ctx, callerKey{}, c), nil
}

func (ai authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, err := ai.admit(ctx, req.Spec().Procedure, req.Header().Get("Authorization"))
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (ai authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (ai authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := ai.admit(ctx, conn.Spec().Procedure, conn.RequestHeader().Get("Authorization"))
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// Bootstrap creates the principal admin on an empty store. The token is the given one, or a
// new random one; created is false (and token empty) when the store already had principals.
func Bootstrap(ctx context.Context, s store.Store, token string) (adminToken string, created bool, err error) {
	id := store.NewID("tok")
	if token == "" {
		token, id, _ = NewToken()
	}
	created, err = s.BootstrapAdmin(ctx, store.CreatePrincipalParams{
		Name: "admin", Role: store.RoleAdmin, TokenID: id, TokenHash: HashToken(token),
	})
	if err != nil || !created {
		return "", created, err
	}
	return token, true, nil
}
