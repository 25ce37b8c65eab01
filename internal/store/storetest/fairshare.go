package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

// testLeaseCap: a principal holds at most MaxLivePaths paths in live leases of a repository,
// whatever its labels; another principal's share is its own, another repository's is apart,
// and released or expired leases no longer count.
func testLeaseCap(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	b.createRepo(t, "api")
	acquire := func(repository, holder string, paths ...string) (store.Lease, error) {
		return b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: repository, Paths: paths, Holder: holder,
			TTL: time.Minute, MaxLivePaths: 3})
	}
	first, err := acquire("web", alice, "a.go", "b.go")
	if err != nil {
		t.Fatalf("AcquireLease of 2 paths under a cap of 3: %v", err)
	}
	_, err = acquire("web", "alice|w2", "c.go", "d.go")
	var ce *store.LeaseCapError
	if !errors.Is(err, store.ErrResourceExhausted) || !errors.As(err, &ce) {
		t.Fatalf("AcquireLease of 2 more paths by another label of alice: %v (%T), want a *store.LeaseCapError", err, err)
	}
	assertFields(t, "the refusal", *ce, store.LeaseCapError{Principal: "alice", Repository: "web", Held: 2, Asked: 2, Max: 3})
	if _, err := acquire("web", "alice|w2", "c.go"); err != nil {
		t.Fatalf("AcquireLease of the third path: %v", err)
	}
	if _, err := acquire("web", bob, "x.go", "y.go", "z.go"); err != nil {
		t.Fatalf("bob's own share: %v", err)
	}
	if _, err := acquire("api", alice, "a.go", "b.go", "c.go"); err != nil {
		t.Fatalf("alice's share of another repository: %v", err)
	}
	if _, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: first.ID, Principal: "alice", FencingToken: first.FencingToken}); err != nil {
		t.Fatal(err)
	}
	if _, err := acquire("web", alice, "e.go", "f.go"); err != nil {
		t.Fatalf("AcquireLease once 2 paths were released: %v", err)
	}
	b.clk.Advance(2 * time.Minute)
	if _, err := acquire("web", alice, "g.go", "h.go", "i.go"); err != nil {
		t.Fatalf("AcquireLease once the others expired: %v", err)
	}
	// Without a cap, none.
	if _, err := b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: "web", Paths: []string{"j.go", "k.go"}, Holder: alice, TTL: time.Minute}); err != nil {
		t.Fatalf("AcquireLease without a cap: %v", err)
	}
}

// testLeaseMaxAge: a lease is renewed until its maximum age and no further, and a renewal
// does not take it past that age; a conflict says since when the other lease is held.
func testLeaseMaxAge(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Minute, "src/")
	renew := func(ttl time.Duration) (store.Lease, error) {
		return b.rs.RenewLease(b.ctx, store.RenewLeaseParams{LeaseID: l.ID, Principal: "alice", FencingToken: l.FencingToken,
			TTL: ttl, MaxAge: time.Hour})
	}
	b.clk.Advance(30 * time.Second)
	r, err := renew(10 * time.Minute)
	if err != nil || !r.ExpiresAt.Equal(b.clk.Now().Add(10*time.Minute)) {
		t.Fatalf("RenewLease young = %v, %v; want it renewed for 10m", r.ExpiresAt, err)
	}
	b.clk.Advance(55 * time.Minute)
	if r, err = renew(10 * time.Minute); err != nil || !r.ExpiresAt.Equal(l.AcquiredAt.Add(time.Hour)) {
		t.Fatalf("RenewLease near its maximum age = %v, %v; want it to end at %v, an hour after its grant", r.ExpiresAt, err, l.AcquiredAt.Add(time.Hour))
	}
	_, err = b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: "web", Paths: []string{"src/x.go"}, Holder: bob, TTL: time.Minute})
	var ce *store.LeaseConflictError
	if !errors.As(err, &ce) || !ce.AcquiredAt.Equal(l.AcquiredAt) {
		t.Fatalf("bob's conflicting grant: %v; want it to say since when alice holds src/ (%v)", err, l.AcquiredAt)
	}
	b.clk.Advance(5 * time.Minute)
	_, err = renew(time.Minute)
	var ae *store.LeaseAgeError
	if !errors.Is(err, store.ErrFailedPrecondition) || !errors.As(err, &ae) || ae.LeaseID != l.ID || ae.MaxAge != time.Hour {
		t.Fatalf("RenewLease at its maximum age: %v (%T), want a *store.LeaseAgeError", err, err)
	}
	if got := b.lease(t, l.ID); !got.ExpiresAt.Equal(r.ExpiresAt) {
		t.Fatalf("the refused renewal moved the expiry to %v, from %v", got.ExpiresAt, r.ExpiresAt)
	}
	if _, err := b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: "web", Paths: []string{"src/x.go"}, Holder: bob, TTL: time.Minute}); err != nil {
		t.Fatalf("bob's grant once alice's lease reached its age and expired: %v", err)
	}
}
