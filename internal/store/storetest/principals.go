package storetest

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

// newToken answers the id and hash of a fresh bearer token; the secret is only hashed.
func newToken(secret string) (id string, hash []byte) {
	sum := sha256.Sum256([]byte(secret))
	return store.NewID("tok"), sum[:]
}

func assertPrincipal(t *testing.T, what string, got, want store.Principal) {
	t.Helper()
	if got.ID != want.ID || got.Name != want.Name || got.Role != want.Role || got.Disabled != want.Disabled ||
		!got.CreatedAt.Equal(want.CreatedAt) {
		t.Fatalf("%s = %+v, want %+v", what, got, want)
	}
}

func assertToken(t *testing.T, what string, got, want store.Token) {
	t.Helper()
	if got.ID != want.ID || got.Principal != want.Principal || !got.CreatedAt.Equal(want.CreatedAt) ||
		!got.RevokedAt.Equal(want.RevokedAt) {
		t.Fatalf("%s = %+v, want %+v", what, got, want)
	}
}

func (b *bundle) createPrincipal(t *testing.T, name string, role store.Role) (store.Principal, store.Token, []byte) {
	t.Helper()
	id, hash := newToken("secret of " + name)
	p, tok, err := b.st.CreatePrincipal(b.ctx, store.CreatePrincipalParams{Name: name, Role: role, TokenID: id, TokenHash: hash})
	if err != nil {
		t.Fatalf("CreatePrincipal(%s): %v", name, err)
	}
	return p, tok, hash
}

func testBootstrapAdmin(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	const callers = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created []int
		hashes  [callers][]byte
	)
	for i := range callers {
		id, hash := newToken(fmt.Sprint("bootstrap ", i))
		hashes[i] = hash
		wg.Go(func() {
			ok, err := b.st.BootstrapAdmin(b.ctx, store.CreatePrincipalParams{Name: "admin", Role: store.RoleAdmin, TokenID: id, TokenHash: hash})
			if err != nil {
				t.Errorf("BootstrapAdmin %d: %v", i, err)
				return
			}
			if ok {
				mu.Lock()
				created = append(created, i)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if len(created) != 1 {
		t.Fatalf("BootstrapAdmin from %d callers created the admin %d times (callers %v), want once", callers, len(created), created)
	}
	winner := created[0]

	prs, _, err := b.st.ListPrincipals(b.ctx, store.ListPrincipalsParams{})
	if err != nil {
		t.Fatalf("ListPrincipals: %v", err)
	}
	if len(prs) != 1 || prs[0].Name != "admin" || prs[0].Role != store.RoleAdmin || prs[0].Disabled || prs[0].ID == "" ||
		!prs[0].CreatedAt.Equal(epoch) {
		t.Fatalf("ListPrincipals after BootstrapAdmin = %+v, want the one admin", prs)
	}
	for i, hash := range hashes {
		p, _, err := b.st.Authenticate(b.ctx, hash)
		if i == winner {
			if err != nil || p.Name != "admin" {
				t.Fatalf("Authenticate with the created admin's token = %+v, %v", p, err)
			}
			continue
		}
		wantErr(t, fmt.Sprint("Authenticate with the token of bootstrap ", i, ", which created nothing"), err, store.ErrNotFound)
	}

	// Once there is any principal, bootstrap does nothing.
	id, hash := newToken("late")
	ok, err := b.st.BootstrapAdmin(b.ctx, store.CreatePrincipalParams{Name: "root", Role: store.RoleAdmin, TokenID: id, TokenHash: hash})
	if err != nil || ok {
		t.Fatalf("BootstrapAdmin with an admin present = %v, %v; want false", ok, err)
	}
	_, err = b.st.GetPrincipal(b.ctx, "root")
	wantErr(t, "GetPrincipal(root)", err, store.ErrNotFound)

	other := setup(t, newStore)
	other.createPrincipal(t, "alice", store.RoleAgent)
	ok, err = other.st.BootstrapAdmin(other.ctx, store.CreatePrincipalParams{Name: "admin", Role: store.RoleAdmin, TokenID: id, TokenHash: hash})
	if err != nil || ok {
		t.Fatalf("BootstrapAdmin on a store with a non-admin principal = %v, %v; want false", ok, err)
	}
}

func testCreatePrincipal(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	b.clk.Advance(time.Minute)
	now := b.clk.Now()
	id, hash := newToken("alice's secret")
	p, tok, err := b.st.CreatePrincipal(b.ctx, store.CreatePrincipalParams{Name: "alice", Role: store.RoleAgent, TokenID: id, TokenHash: hash})
	if err != nil {
		t.Fatalf("CreatePrincipal: %v", err)
	}
	if p.ID == "" {
		t.Fatalf("CreatePrincipal: empty id")
	}
	wantP := store.Principal{ID: p.ID, Name: "alice", Role: store.RoleAgent, CreatedAt: now}
	wantT := store.Token{ID: id, Principal: "alice", CreatedAt: now}
	assertPrincipal(t, "CreatePrincipal", p, wantP)
	assertToken(t, "CreatePrincipal's token", tok, wantT)

	got, err := b.st.GetPrincipal(b.ctx, "alice")
	if err != nil {
		t.Fatalf("GetPrincipal: %v", err)
	}
	assertPrincipal(t, "GetPrincipal", got, wantP)
	_, err = b.st.GetPrincipal(b.ctx, "bob")
	wantErr(t, "GetPrincipal(unknown)", err, store.ErrNotFound)

	ap, at, err := b.st.Authenticate(b.ctx, hash)
	if err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	assertPrincipal(t, "Authenticate's principal", ap, wantP)
	assertToken(t, "Authenticate's token", at, wantT)
	_, unknown := newToken("nobody's secret")
	_, _, err = b.st.Authenticate(b.ctx, unknown)
	wantErr(t, "Authenticate(unknown hash)", err, store.ErrNotFound)

	// A taken name, whatever the role or token.
	id2, hash2 := newToken("another secret")
	_, _, err = b.st.CreatePrincipal(b.ctx, store.CreatePrincipalParams{Name: "alice", Role: store.RoleReader, TokenID: id2, TokenHash: hash2})
	wantErr(t, "CreatePrincipal(taken name)", err, store.ErrAlreadyExists)
	assertPrincipal(t, "alice after a refused CreatePrincipal", b.getPrincipal(t, "alice"), wantP)
	_, _, err = b.st.Authenticate(b.ctx, hash2)
	wantErr(t, "Authenticate with the refused principal's token", err, store.ErrNotFound)

	bob, _, _ := b.createPrincipal(t, "bob", store.RoleWorker)
	if bob.ID == p.ID {
		t.Fatalf("two principals got the same id %s", p.ID)
	}
}

func (b *bundle) getPrincipal(t *testing.T, name string) store.Principal {
	t.Helper()
	p, err := b.st.GetPrincipal(b.ctx, name)
	if err != nil {
		t.Fatalf("GetPrincipal(%s): %v", name, err)
	}
	return p
}

func testRevokeToken(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	_, first, firstHash := b.createPrincipal(t, "alice", store.RoleAgent)
	b.clk.Advance(time.Second)
	id, hash := newToken("alice's second secret")
	second, err := b.st.CreateToken(b.ctx, store.CreateTokenParams{Principal: "alice", TokenID: id, TokenHash: hash})
	if err != nil {
		t.Fatalf("CreateToken: %v", err)
	}
	assertToken(t, "CreateToken", second, store.Token{ID: id, Principal: "alice", CreatedAt: b.clk.Now()})
	for _, h := range [][]byte{firstHash, hash} {
		if p, _, err := b.st.Authenticate(b.ctx, h); err != nil || p.Name != "alice" {
			t.Fatalf("Authenticate = %s, %v; want alice", p.Name, err)
		}
	}

	b.clk.Advance(time.Second)
	revokedAt := b.clk.Now()
	revoked, err := b.st.RevokeToken(b.ctx, first.ID)
	if err != nil {
		t.Fatalf("RevokeToken: %v", err)
	}
	want := first
	want.RevokedAt = revokedAt
	assertToken(t, "RevokeToken", revoked, want)
	_, _, err = b.st.Authenticate(b.ctx, firstHash)
	wantErr(t, "Authenticate with a revoked token", err, store.ErrNotFound)
	if _, at, err := b.st.Authenticate(b.ctx, hash); err != nil || at.ID != second.ID {
		t.Fatalf("Authenticate with the other token = %s, %v; want %s", at.ID, err, second.ID)
	}

	// Revoking again keeps the first revocation time.
	b.clk.Advance(time.Hour)
	again, err := b.st.RevokeToken(b.ctx, first.ID)
	if err != nil {
		t.Fatalf("RevokeToken again: %v", err)
	}
	assertToken(t, "RevokeToken again", again, want)

	_, err = b.st.RevokeToken(b.ctx, store.NewID("tok"))
	wantErr(t, "RevokeToken(unknown)", err, store.ErrNotFound)

	id3, hash3 := newToken("nobody's secret")
	_, err = b.st.CreateToken(b.ctx, store.CreateTokenParams{Principal: "nobody", TokenID: id3, TokenHash: hash3})
	wantErr(t, "CreateToken for an unknown principal", err, store.ErrNotFound)
	_, _, err = b.st.Authenticate(b.ctx, hash3)
	wantErr(t, "Authenticate with the refused token", err, store.ErrNotFound)

	// A hash is one token's.
	_, err = b.st.CreateToken(b.ctx, store.CreateTokenParams{Principal: "alice", TokenID: store.NewID("tok"), TokenHash: hash})
	wantErr(t, "CreateToken with a hash in use", err, store.ErrAlreadyExists)
}

func testDisablePrincipal(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	alice, _, aliceHash := b.createPrincipal(t, "alice", store.RoleWorker)
	_, _, bobHash := b.createPrincipal(t, "bob", store.RoleWorker)
	b.clk.Advance(time.Second)

	disabled, err := b.st.DisablePrincipal(b.ctx, "alice")
	if err != nil {
		t.Fatalf("DisablePrincipal: %v", err)
	}
	want := alice
	want.Disabled = true
	assertPrincipal(t, "DisablePrincipal", disabled, want)
	assertPrincipal(t, "GetPrincipal of a disabled principal", b.getPrincipal(t, "alice"), want)
	_, _, err = b.st.Authenticate(b.ctx, aliceHash)
	wantErr(t, "Authenticate as a disabled principal", err, store.ErrNotFound)
	if p, _, err := b.st.Authenticate(b.ctx, bobHash); err != nil || p.Name != "bob" {
		t.Fatalf("Authenticate as bob = %s, %v", p.Name, err)
	}

	again, err := b.st.DisablePrincipal(b.ctx, "alice")
	if err != nil {
		t.Fatalf("DisablePrincipal again: %v", err)
	}
	assertPrincipal(t, "DisablePrincipal again", again, want)

	_, err = b.st.DisablePrincipal(b.ctx, "nobody")
	wantErr(t, "DisablePrincipal(unknown)", err, store.ErrNotFound)
}

func testListPrincipals(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	// Lowercase letters and digits only, which every collation orders alike.
	names := []string{"mallory", "alice", "zed", "bob", "carol", "bob2", "dave", "alice2", "eve"}
	for i, n := range names {
		b.createPrincipal(t, n, []store.Role{store.RoleAdmin, store.RoleAgent, store.RoleWorker, store.RoleReader, store.RoleReviewer}[i%5])
	}
	want := slices.Sorted(slices.Values(names))

	for _, limit := range []int{1, 2, 4, 9, 10, 0} {
		var got []string
		p := store.ListPrincipalsParams{Limit: limit}
		for pages := 1; ; pages++ {
			page, next, err := b.st.ListPrincipals(b.ctx, p)
			if err != nil {
				t.Fatalf("ListPrincipals(%+v): %v", p, err)
			}
			if limit > 0 && len(page) > limit {
				t.Fatalf("ListPrincipals page of %d principals, limit %d", len(page), limit)
			}
			for _, pr := range page {
				got = append(got, pr.Name)
			}
			if next == "" {
				break
			}
			if pages > len(names) {
				t.Fatalf("ListPrincipals(limit %d) did not end", limit)
			}
			p.PageToken = next
		}
		if !slices.Equal(got, want) {
			t.Fatalf("ListPrincipals in pages of %d = %v, want %v", limit, got, want)
		}
	}

	_, _, err := b.st.ListPrincipals(b.ctx, store.ListPrincipalsParams{PageToken: "!!!"})
	wantErr(t, "ListPrincipals(malformed page token)", err, store.ErrInvalidPageToken)
}

func testWorkerKeys(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	b.createPrincipal(t, "w", store.RoleWorker)
	b.createPrincipal(t, "v", store.RoleWorker)
	key := func(seed string) store.RegisterWorkerKeyParams {
		pub := sha256.Sum256([]byte(seed)) // 32 bytes, the size of an Ed25519 public key
		id := sha256.Sum256(pub[:])
		return store.RegisterWorkerKeyParams{KeyID: fmt.Sprintf("sha256:%x", id), PublicKey: pub[:]}
	}

	keys, err := b.st.ListWorkerKeys(b.ctx, "w")
	if err != nil || len(keys) != 0 {
		t.Fatalf("ListWorkerKeys before any = %v, %v; want none", keys, err)
	}

	k1 := key("one")
	k1.Principal = "w"
	now := b.clk.Now()
	got, err := b.st.RegisterWorkerKey(b.ctx, k1)
	if err != nil {
		t.Fatalf("RegisterWorkerKey: %v", err)
	}
	want := store.WorkerKey{KeyID: k1.KeyID, Principal: "w", PublicKey: k1.PublicKey, CreatedAt: now}
	check := func(what string, got, want store.WorkerKey) {
		t.Helper()
		if got.KeyID != want.KeyID || got.Principal != want.Principal || string(got.PublicKey) != string(want.PublicKey) ||
			!got.CreatedAt.Equal(want.CreatedAt) {
			t.Fatalf("%s = %+v, want %+v", what, got, want)
		}
	}
	check("RegisterWorkerKey", got, want)

	// The same key again: the stored one, registered when it first was.
	b.clk.Advance(time.Minute)
	again, err := b.st.RegisterWorkerKey(b.ctx, k1)
	if err != nil {
		t.Fatalf("RegisterWorkerKey again: %v", err)
	}
	check("RegisterWorkerKey again", again, want)

	// Another principal may not claim it.
	stolen := k1
	stolen.Principal = "v"
	_, err = b.st.RegisterWorkerKey(b.ctx, stolen)
	wantErr(t, "RegisterWorkerKey of w's key by v", err, store.ErrAlreadyExists)
	if keys, err := b.st.ListWorkerKeys(b.ctx, "v"); err != nil || len(keys) != 0 {
		t.Fatalf("ListWorkerKeys(v) after a refused registration = %v, %v; want none", keys, err)
	}

	k2 := key("two")
	k2.Principal = "w"
	b.clk.Advance(time.Minute)
	second, err := b.st.RegisterWorkerKey(b.ctx, k2)
	if err != nil {
		t.Fatalf("RegisterWorkerKey(second key): %v", err)
	}
	k3 := key("three")
	k3.Principal = "v"
	if _, err := b.st.RegisterWorkerKey(b.ctx, k3); err != nil {
		t.Fatalf("RegisterWorkerKey(v's key): %v", err)
	}

	keys, err = b.st.ListWorkerKeys(b.ctx, "w")
	if err != nil {
		t.Fatalf("ListWorkerKeys: %v", err)
	}
	if len(keys) != 2 {
		t.Fatalf("ListWorkerKeys(w) = %d keys, want 2", len(keys))
	}
	check("ListWorkerKeys(w)[0]", keys[0], want)
	check("ListWorkerKeys(w)[1]", keys[1], second)
	if keys, err := b.st.ListWorkerKeys(b.ctx, "nobody"); err != nil || len(keys) != 0 {
		t.Fatalf("ListWorkerKeys(nobody) = %v, %v; want none", keys, err)
	}
}

func testReady(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	if err := b.st.Ready(b.ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
}
