package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/internal/store"
)

// tokenStore answers Authenticate from a fixed set of tokens and counts the reads; the rest of
// store.Store is not called by the authenticator.
type tokenStore struct {
	store.Store
	principals map[string]store.Principal // token → principal; nil: every token is an agent's
	fail       error
	reads      int
}

func (s *tokenStore) Authenticate(_ context.Context, hash []byte) (store.Principal, store.Token, error) {
	s.reads++
	if s.fail != nil {
		return store.Principal{}, store.Token{}, s.fail
	}
	for token, p := range s.principals {
		if bytes.Equal(HashToken(token), hash) {
			return p, store.Token{ID: "tok_" + token, Principal: p.Name}, nil
		}
	}
	if s.principals == nil { // every token is someone's
		return store.Principal{Name: fmt.Sprintf("p%x", hash[:4]), Role: store.RoleAgent}, store.Token{ID: fmt.Sprintf("tok_%x", hash[:4])}, nil
	}
	return store.Principal{}, store.Token{}, store.ErrNotFound
}

// TestAuthenticatorTakesOnlyAKnownBearerTokenAndRereadsItAfterItsTTL holds the authentication of
// every call: a bearer token of at most 256 bytes, known to the store; a token the cache holds
// is read again once its few seconds are over, and at once after a revocation in this process,
// so that a revoked token stops working.
func TestAuthenticatorTakesOnlyAKnownBearerTokenAndRereadsItAfterItsTTL(t *testing.T) {
	t.Parallel()
	alice := store.Principal{Name: "alice", Role: store.RoleAgent}
	bob := store.Principal{Name: "bob", Role: store.RoleWorker}
	s := &tokenStore{principals: map[string]store.Principal{"agt_alice": alice, "agt_bob": bob}}
	a := newAuthenticator(s)
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return now }
	ctx := t.Context()

	refused := func(what, authorization string, code connect.Code) {
		t.Helper()
		before := s.reads
		if c, err := a.authenticate(ctx, authorization); connect.CodeOf(err) != code {
			t.Errorf("%s: %+v, %v; want %v", what, c, err, code)
		}
		if code == connect.CodeUnauthenticated && !strings.HasPrefix(authorization, "Bearer agt_") && s.reads != before {
			t.Errorf("%s: the store was read for a token that cannot be one", what)
		}
	}
	refused("no header", "", connect.CodeUnauthenticated)
	refused("no bearer", "Basic YWxpY2U6eA==", connect.CodeUnauthenticated)
	refused("a bearer of spaces", "Bearer    ", connect.CodeUnauthenticated)
	refused("a token of 257 bytes", "Bearer "+strings.Repeat("a", 257), connect.CodeUnauthenticated)
	refused("an unknown token", "Bearer agt_carol", connect.CodeUnauthenticated)
	// 256 bytes is the longest token looked up.
	before := s.reads
	refused("an unknown token of 256 bytes", "Bearer agt_"+strings.Repeat("a", 252), connect.CodeUnauthenticated)
	if s.reads != before+1 {
		t.Errorf("a token of 256 bytes was not looked up")
	}

	c, err := a.authenticate(ctx, "Bearer  agt_alice ")
	if err != nil || c.principal.Name != "alice" || c.tokenID != "tok_agt_alice" {
		t.Fatalf("alice's token: %+v, %v", c, err)
	}
	reads := s.reads
	now = now.Add(authCacheTTL - time.Nanosecond)
	if c, err := a.authenticate(ctx, "Bearer agt_alice"); err != nil || c.principal.Name != "alice" || s.reads != reads {
		t.Errorf("alice's token again within the TTL: %+v, %v, %d more reads; want it from the cache", c, err, s.reads-reads)
	}
	now = now.Add(time.Nanosecond)
	delete(s.principals, "agt_alice") // revoked on another replica
	if c, err := a.authenticate(ctx, "Bearer agt_alice"); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("alice's token revoked, at the end of the TTL: %+v, %v; want it read again and refused", c, err)
	}

	// A revocation in this process drops the cache at once: by principal, or by token.
	for _, forget := range []func(){func() { a.forget("bob", "") }, func() { a.forget("", "tok_agt_bob") }} {
		s.principals["agt_bob"] = bob
		if _, err := a.authenticate(ctx, "Bearer agt_bob"); err != nil {
			t.Fatal(err)
		}
		delete(s.principals, "agt_bob")
		if _, err := a.authenticate(ctx, "Bearer agt_bob"); err != nil {
			t.Fatalf("bob's token from the cache: %v", err)
		}
		forget()
		if c, err := a.authenticate(ctx, "Bearer agt_bob"); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("bob's token once forgotten: %+v, %v; want it refused", c, err)
		}
	}
	s.principals["agt_bob"] = bob
	s.principals["agt_alice"] = alice
	for _, token := range []string{"agt_alice", "agt_bob"} {
		if _, err := a.authenticate(ctx, "Bearer "+token); err != nil {
			t.Fatal(err)
		}
	}
	reads = s.reads
	for _, token := range []string{"agt_alice", "agt_bob"} {
		if _, err := a.authenticate(ctx, "Bearer "+token); err != nil {
			t.Fatal(err)
		}
	}
	if s.reads != reads {
		t.Errorf("two tokens authenticated one after the other: %d store reads for the second time, want both cached", s.reads-reads)
	}
	a.forget("alice", "")
	if len(a.cache) != 1 {
		t.Errorf("forgetting alice left %d tokens cached, want bob's alone", len(a.cache))
	}

	s.fail = errors.New("the database is down")
	// The details are dropped where the answer leaves the server (TestDatabaseFailuresAreUnavailableWithoutDetails).
	if _, err := a.authenticate(ctx, "Bearer agt_dave"); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("a store that cannot answer: %v; want unavailable", err)
	}
}

// TestAuthenticatorsCacheIsBounded holds that tokens sent once each cannot grow the cache
// without end: past 10,000 it starts again.
func TestAuthenticatorsCacheIsBounded(t *testing.T) {
	t.Parallel()
	a := newAuthenticator(&tokenStore{})
	for i := range 10002 {
		if _, err := a.authenticate(t.Context(), fmt.Sprintf("Bearer agt_%d", i)); err != nil {
			t.Fatal(err)
		}
		if n := len(a.cache); n > 10001 {
			t.Fatalf("%d tokens cached", n)
		}
	}
	if n := len(a.cache); n != 1 {
		t.Errorf("after 10,002 tokens the cache holds %d; want it started again at the 10,002nd", n)
	}
}

// TestAuthRolesMayCallWhatTheContractGivesThem holds the role rules of docs/api.md that no
// table entry alone shows: admin calls everything, a procedure nobody is given is admin's only,
// a reviewer reads what a reader reads and approves, which no agent may.
func TestAuthRolesMayCallWhatTheContractGivesThem(t *testing.T) {
	t.Parallel()
	const made = "/agwp.v1.JobService/MadeUp"
	for _, tc := range []struct {
		role      store.Role
		procedure string
		may       bool
	}{
		{store.RoleAdmin, made, true},
		{store.RoleAdmin, "/agwp.v1.AdminService/CreatePrincipal", true},
		{store.RoleAgent, made, false},
		{store.RoleAgent, "/agwp.v1.AdminService/CreatePrincipal", false},
		{store.RoleReviewer, "/agwp.v1.JobService/ListJobs", true},
		{store.RoleReviewer, "/agwp.v1.RepositoryService/ApproveChange", true},
		{store.RoleReviewer, "/agwp.v1.RepositoryService/Integrate", false},
		{store.RoleReviewer, "/agwp.v1.JobService/ClaimJob", false},
		{store.RoleReader, "/agwp.v1.RepositoryService/ApproveChange", false},
		{store.RoleAgent, "/agwp.v1.RepositoryService/ApproveChange", false},
		{store.RoleAgent, "/agwp.v1.RepositoryService/Integrate", true},
		{store.RoleWorker, "/agwp.v1.RepositoryService/Integrate", false},
		{store.RoleWorker, "/agwp.v1.JobService/CompleteJob", true},
		{store.RoleAgent, "/agwp.v1.JobService/CompleteJob", false},
		{store.RoleWorker, gitPathPrefix, false},
		{store.RoleReader, gitPathPrefix, true},
		{store.Role("ghost"), "/agwp.v1.JobService/ListJobs", false},
	} {
		if got := mayCall(tc.role, tc.procedure); got != tc.may {
			t.Errorf("mayCall(%s, %s) = %v, want %v", tc.role, tc.procedure, got, tc.may)
		}
	}
}

// TestAuthInterceptorAdmitsOnlyWhoMayCall holds the interceptor's check, which handlers mounted
// without the edge rely on: a caller the edge admitted passes for what its role may call, and
// for anything else is authenticated again and refused; each refusal is reported.
func TestAuthInterceptorAdmitsOnlyWhoMayCall(t *testing.T) {
	t.Parallel()
	s := &tokenStore{principals: map[string]store.Principal{"agt_w": {Name: "w", Role: store.RoleWorker}}}
	var refusals []string
	ai := authInterceptor{auth: newAuthenticator(s), onRefusal: func(procedure, reason string) {
		refusals = append(refusals, reason)
	}}
	const claim, integrate = "/agwp.v1.JobService/ClaimJob", "/agwp.v1.RepositoryService/Integrate"

	ctx, err := ai.admit(t.Context(), claim, "Bearer agt_w")
	if err != nil || callerFrom(ctx).principal.Name != "w" || store.ActorOf(ctx).Principal != "w" {
		t.Fatalf("the worker's claim: %v", err)
	}
	reads := s.reads
	if again, err := ai.admit(ctx, claim, ""); err != nil || store.ActorOf(again).Principal != "w" {
		t.Errorf("the worker, admitted by the edge, claiming: %v", err)
	}
	if s.reads != reads {
		t.Errorf("a caller the edge admitted was authenticated again")
	}
	if _, err := ai.admit(ctx, integrate, ""); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("the worker, admitted by the edge, integrating without a token: %v; want unauthenticated", err)
	}
	if _, err := ai.admit(t.Context(), integrate, "Bearer agt_w"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("the worker integrating: %v; want permission_denied", err)
	}
	if want := []string{"unauthenticated", "permission_denied"}; strings.Join(refusals, " ") != strings.Join(want, " ") {
		t.Errorf("refusals reported: %v, want %v", refusals, want)
	}
}

// bootstrapStore answers BootstrapAdmin as a store with or without principals would.
type bootstrapStore struct {
	store.Store
	had  bool  // principals already
	fail error // the store cannot answer
	got  store.CreatePrincipalParams
}

func (s *bootstrapStore) BootstrapAdmin(_ context.Context, p store.CreatePrincipalParams) (bool, error) {
	s.got = p
	if s.fail != nil {
		return false, s.fail
	}
	return !s.had, nil
}

// TestBootstrapGivesAnAdminTokenOnlyToAnEmptyStore holds that `ag serve` prints an admin token
// only when it made one: the token given, or a new one, whose hash alone the store keeps; a
// store with principals already, or one that fails, gives none.
func TestBootstrapGivesAnAdminTokenOnlyToAnEmptyStore(t *testing.T) {
	t.Parallel()
	s := &bootstrapStore{}
	token, created, err := Bootstrap(t.Context(), s, "agt_given")
	if err != nil || !created || token != "agt_given" {
		t.Errorf("Bootstrap of an empty store with a token = %q, %v, %v", token, created, err)
	}
	// The store is given the token's sha256 only, never the token (SECURITY.md).
	sum := sha256.Sum256([]byte("agt_given"))
	if s.got.Name != "admin" || s.got.Role != store.RoleAdmin || !bytes.Equal(s.got.TokenHash, sum[:]) ||
		strings.Contains(fmt.Sprintf("%+v", s.got), "agt_given") {
		t.Errorf("the admin stored: %+v; want the token's sha256 alone", s.got)
	}
	token, created, err = Bootstrap(t.Context(), s, "")
	if err != nil || !created || !strings.HasPrefix(token, tokenPrefix) || len(token) != len(tokenPrefix)+43 ||
		!bytes.Equal(s.got.TokenHash, HashToken(token)) || !strings.HasPrefix(s.got.TokenID, "tok") {
		t.Errorf("Bootstrap of an empty store without a token = %q, %v, %v; stored %+v", token, created, err, s.got)
	}
	s.had = true
	if token, created, err := Bootstrap(t.Context(), s, "agt_given"); token != "" || created || err != nil {
		t.Errorf("Bootstrap of a store with principals = %q, %v, %v; want no token", token, created, err)
	}
	s.fail = errors.New("the database is down")
	if token, created, err := Bootstrap(t.Context(), s, ""); token != "" || created || err != s.fail {
		t.Errorf("Bootstrap of a store that fails = %q, %v, %v; want its error and no token", token, created, err)
	}
}
