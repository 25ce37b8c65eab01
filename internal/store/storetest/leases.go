package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// pollFallback bounds how long an acquirer waits for LeaseSignal before it looks again anyway;
// a backend may deliver its signal late, and the wait must not make the test depend on it.
const pollFallback = 100 * time.Millisecond

func (b *rbundle) acquire(t *testing.T, repository, holder string, ttl time.Duration, paths ...string) store.Lease {
	t.Helper()
	l, err := b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: repository, Paths: paths, Holder: holder, TTL: ttl})
	if err != nil {
		t.Fatalf("AcquireLease(%s, %v, %s): %v", repository, paths, holder, err)
	}
	return l
}

func (b *rbundle) lease(t *testing.T, id string) store.Lease {
	t.Helper()
	l, err := b.rs.GetLease(b.ctx, id)
	if err != nil {
		t.Fatalf("GetLease(%s): %v", id, err)
	}
	return l
}

// wantConflict fails the test unless err is a *store.LeaseConflictError naming path and the
// lease held.
func wantConflict(t *testing.T, what string, err error, path string, held store.Lease, heldPath string) {
	t.Helper()
	if !errors.Is(err, store.ErrLeaseConflict) {
		t.Fatalf("%s: err = %v, want %v", what, err, store.ErrLeaseConflict)
	}
	var ce *store.LeaseConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("%s: err = %v (%T), want a *store.LeaseConflictError", what, err, err)
	}
	want := store.LeaseConflictError{Path: path, LeaseID: held.ID, LeasePath: heldPath, Holder: held.Holder,
		AcquiredAt: held.AcquiredAt, ExpiresAt: held.ExpiresAt}
	assertFields(t, what+": the conflict", *ce, want)
}

// wantLeaseState fails the test unless err is a *store.LeaseStateError about lease id.
func wantLeaseState(t *testing.T, what string, err error, id string) {
	t.Helper()
	if !errors.Is(err, store.ErrFailedPrecondition) {
		t.Fatalf("%s: err = %v, want %v", what, err, store.ErrFailedPrecondition)
	}
	var se *store.LeaseStateError
	if !errors.As(err, &se) || se.LeaseID != id {
		t.Fatalf("%s: err = %v (%T), want a *store.LeaseStateError about %s", what, err, err, id)
	}
}

// leaseUnchanged fails the test unless the stored lease is still before.
func (b *rbundle) leaseUnchanged(t *testing.T, before store.Lease, after string) {
	t.Helper()
	if diff := diffFields(b.lease(t, before.ID), before); diff != "" {
		t.Fatalf("lease %s changed after %s, which was refused:\n%s", before.ID, after, diff)
	}
}

// overlapCases are the overlap rule of design.md: equal, or one is a directory that contains
// the other. Names that share a prefix are not contained in each other.
var overlapCases = []struct {
	p, q    string
	overlap bool
}{
	// file / file
	{"a.go", "a.go", true},
	{"a.go", "b.go", false},
	{"src/a", "src/ab", false},
	{"src/ab", "src/a", false},
	{"a", "a/b", false},
	// file / directory
	{"src/a.go", "src/", true},
	{"src/", "src/a.go", true},
	{"src/x/y/z.go", "src/", true},
	{"src/", "src/x/y/z.go", true},
	{"src/a.go", "docs/", false},
	{"src/a/", "src/ab", false},
	{"src/ab", "src/a/", false},
	{"src/a/", "src/a.go", false},
	{"src/a/", "src/a-b/c", false},
	{"src/a/", "src/a0", false},
	{"src/a", "src/a/", false},
	{"src/a/", "src/a", false},
	{"src/", "src", false},
	{"a/", "a/b", true},
	{"é/", "é/ü.go", true},
	// directory / directory
	{"src/", "src/", true},
	{"src/", "src/x/", true},
	{"src/x/", "src/", true},
	{"src/", "srcs/", false},
	{"src/a/", "src/ab/", false},
	{"src/ab/", "src/a/", false},
}

// testLeaseOverlapTable runs the overlap rule through the store: holder A leases p, holder B
// asks for q, and is refused exactly when p and q overlap.
func testLeaseOverlapTable(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	for i, c := range overlapCases {
		if got := repo.Overlap(c.p, c.q); got != c.overlap {
			t.Fatalf("repo.Overlap(%q, %q) = %v, the table says %v", c.p, c.q, got, c.overlap)
		}
		name := fmt.Sprintf("overlap-%d", i)
		b.createRepo(t, name)
		held := b.acquire(t, name, alice, time.Minute, c.p)
		l, err := b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: name, Paths: []string{c.q}, Holder: bob, TTL: time.Minute})
		what := fmt.Sprintf("%s holds %q, %s asks for %q", alice, c.p, bob, c.q)
		if c.overlap {
			wantConflict(t, what, err, c.q, held, c.p)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v, want a grant", what, err)
		}
		if l.FencingToken <= held.FencingToken {
			t.Fatalf("%s: token %d, not larger than the earlier grant's %d", what, l.FencingToken, held.FencingToken)
		}
	}
}

func testLeaseGrant(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	l := b.acquire(t, "web", alice, 5*time.Minute, "src/a.go", "docs/")
	if l.ID == "" || l.FencingToken == 0 {
		t.Fatalf("AcquireLease = %+v: no id or token", l)
	}
	assertFields(t, "AcquireLease", l, store.Lease{
		ID: l.ID, Repository: "web", Paths: []string{"src/a.go", "docs/"}, Holder: alice, FencingToken: l.FencingToken,
		State: store.LeaseActive, AcquiredAt: epoch, ExpiresAt: epoch.Add(5 * time.Minute),
	})
	assertFields(t, "GetLease", b.lease(t, l.ID), l)

	_, err := b.rs.GetLease(b.ctx, "lse_unknown")
	wantErr(t, "GetLease of an unknown lease", err, store.ErrNotFound)
	_, err = b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: "nope", Paths: []string{"a"}, Holder: alice, TTL: time.Minute})
	wantErr(t, "AcquireLease in an unknown repository", err, store.ErrNotFound)

	// Every grant takes the next token of its repository, overlapping or not.
	prev := l.FencingToken
	for _, p := range []string{"lib/x.go", "lib/y.go", "tools/"} {
		b.clk.Advance(time.Millisecond)
		n := b.acquire(t, "web", bob, time.Minute, p)
		if n.FencingToken <= prev {
			t.Fatalf("AcquireLease(%s) token %d, not larger than the earlier grant's %d", p, n.FencingToken, prev)
		}
		prev = n.FencingToken
	}
	// Leases of another repository do not conflict.
	b.createRepo(t, "api")
	b.acquire(t, "api", bob, time.Minute, "src/a.go", "docs/")
}

func testLeaseConflictNamesTheLease(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	held := b.acquire(t, "web", alice, 5*time.Minute, "docs/", "src/a.go")
	b.clk.Advance(time.Minute)

	ask := func(paths ...string) (store.Lease, error) {
		return b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: "web", Paths: paths, Holder: bob, TTL: time.Minute})
	}
	_, err := ask("lib/x.go", "src/")
	wantConflict(t, "bob asks for lib/x.go and src/", err, "src/", held, "src/a.go")
	for _, s := range []string{"src/", alice, held.ExpiresAt.UTC().Format(time.RFC3339)} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("the conflict %q does not name %q", err, s)
		}
	}
	// The first conflicting path in the order asked.
	_, err = ask("lib/x.go", "docs/guide/intro.md", "src/")
	wantConflict(t, "bob asks for docs/guide/intro.md and src/", err, "docs/guide/intro.md", held, "docs/")

	// A refused request grants nothing.
	leases, _, err := b.rs.ListLeases(b.ctx, store.ListLeasesParams{Repository: "web", Holder: bob, IncludeEnded: true})
	if err != nil || len(leases) != 0 {
		t.Fatalf("ListLeases(bob) after refusals = %d leases, %v; want none", len(leases), err)
	}

	// Another label of the same principal is another holder.
	_, err = b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: "web", Paths: []string{"src/a.go"}, Holder: alice2, TTL: time.Minute})
	wantConflict(t, "alice|w2 asks for src/a.go", err, "src/a.go", held, "src/a.go")

	// Until the lease's expiry it stands in the way; after it, it does not.
	b.clk.Set(held.ExpiresAt.Add(-time.Microsecond))
	_, err = ask("src/a.go")
	wantConflict(t, "bob asks a microsecond before the expiry", err, "src/a.go", held, "src/a.go")
	b.clk.Set(held.ExpiresAt.Add(time.Microsecond))
	l, err := ask("src/", "docs/")
	if err != nil {
		t.Fatalf("AcquireLease after the conflicting lease expired: %v", err)
	}
	if l.FencingToken <= held.FencingToken {
		t.Fatalf("token %d after expiry, not larger than %d", l.FencingToken, held.FencingToken)
	}
	if got := b.lease(t, held.ID); got.State != store.LeaseExpired {
		t.Fatalf("the superseded lease is %s, want %s", got.State, store.LeaseExpired)
	}
}

func testSameHolderOverlaps(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	first := b.acquire(t, "web", alice, time.Minute, "src/")
	second := b.acquire(t, "web", alice, time.Minute, "src/a.go")
	third := b.acquire(t, "web", alice, time.Minute, "src/", "src/b/")
	if !(first.FencingToken < second.FencingToken && second.FencingToken < third.FencingToken) {
		t.Fatalf("tokens %d, %d, %d do not grow", first.FencingToken, second.FencingToken, third.FencingToken)
	}
	for _, l := range []store.Lease{first, second, third} {
		if got := b.lease(t, l.ID); got.State != store.LeaseActive {
			t.Fatalf("lease %s is %s, want all three active", l.ID, got.State)
		}
	}
	_, err := b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: "web", Paths: []string{"src/b/c.go"}, Holder: bob, TTL: time.Minute})
	wantConflict(t, "bob asks for src/b/c.go", err, "src/b/c.go", first, "src/")
}

// testTokenMonotonicity has 16 holders acquire and release overlapping paths concurrently. The
// test keeps a logical clock: a grant happens between the call and its answer, and a holder
// holds its lease from the answer until it calls release. Every grant observed to come after
// another (its call after the other's answer) must have a larger token, overlapping grants of
// different holders must not be held at once, and tokens are unique.
func testTokenMonotonicity(t *testing.T, newStore Factory) {
	const (
		agents = 16
		rounds = 12
	)
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	pool := []string{"src/", "src/a", "src/ab", "src/a/", "src/a/x", "src/b/y.go", "docs/", "docs/r.md", "README"}

	type grant struct {
		lease            store.Lease
		called, answered int64 // the last, successful attempt
		releasing        int64
	}
	var (
		seq    atomic.Int64
		mu     sync.Mutex
		grants []grant
		waits  atomic.Int64
		wg     sync.WaitGroup
	)
	// The first failure ends every agent's rounds: one that fails holding a lease would keep
	// the others waiting for it until the test's deadline, a hang where a failure is due.
	ctx, stop := context.WithCancel(b.ctx)
	defer stop()
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		stop()
	}
	for g := range agents {
		principal := fmt.Sprintf("agent%02d", g)
		holder := principal + "|w"
		rng := rand.New(rand.NewPCG(uint64(g), 7))
		wg.Go(func() {
			for range rounds {
				paths := []string{pool[rng.IntN(len(pool))]}
				if rng.IntN(3) == 0 {
					if q := pool[rng.IntN(len(pool))]; q != paths[0] {
						paths = append(paths, q)
					}
				}
				var (
					l      store.Lease
					called int64
				)
				for {
					ch := b.rs.LeaseSignal()
					called = seq.Add(1)
					var err error
					l, err = b.rs.AcquireLease(ctx, store.AcquireLeaseParams{Repository: "web", Paths: paths, Holder: holder, TTL: time.Minute})
					if err == nil {
						break
					}
					if ctx.Err() != nil {
						return // another agent failed
					}
					if !errors.Is(err, store.ErrLeaseConflict) {
						fail("AcquireLease(%v, %s): %v", paths, holder, err)
						return
					}
					waits.Add(1)
					select {
					case <-ch:
					case <-time.After(pollFallback):
					case <-ctx.Done():
						return
					}
				}
				answered := seq.Add(1)
				releasing := seq.Add(1)
				if _, err := b.rs.ReleaseLease(ctx, store.ReleaseLeaseParams{LeaseID: l.ID, Principal: principal, FencingToken: l.FencingToken}); err != nil {
					fail("ReleaseLease(%s): %v", l.ID, err)
					return
				}
				mu.Lock()
				grants = append(grants, grant{l, called, answered, releasing})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if len(grants) != agents*rounds {
		t.Fatalf("%d grants, want %d", len(grants), agents*rounds)
	}
	overlap := func(x, y store.Lease) bool {
		for _, p := range x.Paths {
			for _, q := range y.Paths {
				if repo.Overlap(p, q) {
					return true
				}
			}
		}
		return false
	}
	tokens := map[uint64]string{}
	for _, a := range grants {
		if other, ok := tokens[a.lease.FencingToken]; ok {
			t.Fatalf("token %d granted twice: leases %s and %s", a.lease.FencingToken, other, a.lease.ID)
		}
		tokens[a.lease.FencingToken] = a.lease.ID
		for _, c := range grants {
			if a.answered < c.called && a.lease.FencingToken >= c.lease.FencingToken {
				t.Fatalf("lease %s (%v, token %d) was granted before lease %s (%v) was asked for, yet that one got the smaller token %d",
					a.lease.ID, a.lease.Paths, a.lease.FencingToken, c.lease.ID, c.lease.Paths, c.lease.FencingToken)
			}
			if a.lease.Holder != c.lease.Holder && overlap(a.lease, c.lease) &&
				a.answered < c.releasing && c.answered < a.releasing {
				t.Fatalf("overlapping leases %s (%s on %v) and %s (%s on %v) were held at once",
					a.lease.ID, a.lease.Holder, a.lease.Paths, c.lease.ID, c.lease.Holder, c.lease.Paths)
			}
		}
	}
	// Overlapping grants follow each other, and the later one has the larger token.
	sort.Slice(grants, func(i, j int) bool { return grants[i].answered < grants[j].answered })
	for i, a := range grants {
		for _, c := range grants[i+1:] {
			if a.lease.Holder != c.lease.Holder && overlap(a.lease, c.lease) && a.lease.FencingToken >= c.lease.FencingToken {
				t.Fatalf("lease %s (token %d on %v) was held before the overlapping lease %s (token %d on %v)",
					a.lease.ID, a.lease.FencingToken, a.lease.Paths, c.lease.ID, c.lease.FencingToken, c.lease.Paths)
			}
		}
	}
	t.Logf("%d grants, %d waits for a conflicting lease", len(grants), waits.Load())
}

func testRenewLease(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Minute, "src/a.go")
	b.clk.Advance(40 * time.Second)
	r, err := b.rs.RenewLease(b.ctx, store.RenewLeaseParams{LeaseID: l.ID, Principal: "alice", FencingToken: l.FencingToken, TTL: 2 * time.Minute})
	if err != nil {
		t.Fatalf("RenewLease: %v", err)
	}
	want := l
	want.ExpiresAt = b.clk.Now().Add(2 * time.Minute)
	assertFields(t, "RenewLease", r, want)
	assertFields(t, "GetLease after renewal", b.lease(t, l.ID), want)

	// Past the first expiry, the renewed lease still stands in the way.
	b.clk.Advance(90 * time.Second)
	_, err = b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: "web", Paths: []string{"src/"}, Holder: bob, TTL: time.Minute})
	wantConflict(t, "bob asks for src/ after the first expiry", err, "src/", want, "src/a.go")

	// Without a token; and from another label of the holder's principal.
	r, err = b.rs.RenewLease(b.ctx, store.RenewLeaseParams{LeaseID: l.ID, Principal: "alice", TTL: time.Minute})
	if err != nil || r.FencingToken != l.FencingToken || !r.ExpiresAt.Equal(b.clk.Now().Add(time.Minute)) {
		t.Fatalf("RenewLease without a token = %+v, %v", r, err)
	}

	// An expired lease that nobody superseded may be renewed, even when other paths were
	// granted meanwhile; it is active again.
	b.clk.Advance(time.Hour)
	b.acquire(t, "web", bob, time.Minute, "src/ab.go", "docs/")
	if got := b.lease(t, l.ID); got.State != store.LeaseExpired {
		t.Fatalf("the lease after its expiry is %s, want %s", got.State, store.LeaseExpired)
	}
	r, err = b.rs.RenewLease(b.ctx, store.RenewLeaseParams{LeaseID: l.ID, Principal: "alice", FencingToken: l.FencingToken, TTL: time.Minute})
	if err != nil || r.State != store.LeaseActive || r.FencingToken != l.FencingToken || !r.ExpiresAt.Equal(b.clk.Now().Add(time.Minute)) {
		t.Fatalf("RenewLease of an expired lease nobody took = %+v, %v; want it active until %s", r, err, b.clk.Now().Add(time.Minute))
	}
	_, err = b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: "web", Paths: []string{"src/a.go"}, Holder: bob, TTL: time.Minute})
	wantErr(t, "bob asks for the renewed path", err, store.ErrLeaseConflict)

	_, err = b.rs.RenewLease(b.ctx, store.RenewLeaseParams{LeaseID: "lse_unknown", Principal: "alice", TTL: time.Minute})
	wantErr(t, "RenewLease of an unknown lease", err, store.ErrNotFound)
	_, err = b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: "lse_unknown", Principal: "alice"})
	wantErr(t, "ReleaseLease of an unknown lease", err, store.ErrNotFound)
}

func testReleaseLease(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Minute, "src/")
	b.clk.Advance(10 * time.Second)
	r, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: l.ID, Principal: "alice", FencingToken: l.FencingToken})
	if err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	want := l
	want.State, want.EndedAt = store.LeaseReleased, b.clk.Now()
	assertFields(t, "ReleaseLease", r, want)
	assertFields(t, "GetLease after release", b.lease(t, l.ID), want)
	// The path is free at once.
	b.acquire(t, "web", bob, time.Minute, "src/a.go")
}

// testRenewReleaseRefused: renew and release are refused, and change nothing, when the lease
// ended, when it expired and an overlapping lease was granted since, when the caller is not
// its holder's principal, and when the token is not the lease's.
func testRenewReleaseRefused(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	both := func(what string, l store.Lease, principal string, token uint64) {
		t.Helper()
		before := b.lease(t, l.ID)
		_, err := b.rs.RenewLease(b.ctx, store.RenewLeaseParams{LeaseID: l.ID, Principal: principal, FencingToken: token, TTL: time.Hour})
		wantLeaseState(t, "RenewLease "+what, err, l.ID)
		b.leaseUnchanged(t, before, "RenewLease "+what)
		_, err = b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: l.ID, Principal: principal, FencingToken: token})
		wantLeaseState(t, "ReleaseLease "+what, err, l.ID)
		b.leaseUnchanged(t, before, "ReleaseLease "+what)
	}

	released := b.acquire(t, "web", alice, time.Minute, "a/")
	if _, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: released.ID, Principal: "alice"}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	both("after release", released, "alice", released.FencingToken)

	broken := b.acquire(t, "web", alice, time.Minute, "b/")
	if _, err := b.rs.BreakLease(b.ctx, broken.ID); err != nil {
		t.Fatalf("BreakLease: %v", err)
	}
	both("after break", broken, "alice", broken.FencingToken)

	other := b.acquire(t, "web", alice, time.Minute, "c/")
	both("by another principal", other, "bob", other.FencingToken)
	both("by another principal without a token", other, "bob", 0)
	both("with a wrong token", other, "alice", other.FencingToken+100)

	// Expired, then someone else was granted an overlapping path.
	superseded := b.acquire(t, "web", alice, time.Minute, "d/x.go", "e/")
	b.clk.Advance(2 * time.Minute)
	b.acquire(t, "web", bob, time.Minute, "e/f/")
	both("after expiry and someone else's grant", superseded, "alice", superseded.FencingToken)
	both("after expiry and someone else's grant, without a token", superseded, "alice", 0)

	// An admin may renew and release a lease of anyone that is still current.
	live := b.acquire(t, "web", alice, time.Minute, "g/")
	r, err := b.rs.RenewLease(b.ctx, store.RenewLeaseParams{LeaseID: live.ID, Principal: "root", Admin: true, TTL: time.Hour})
	if err != nil || !r.ExpiresAt.Equal(b.clk.Now().Add(time.Hour)) {
		t.Fatalf("RenewLease by an admin = %+v, %v", r, err)
	}
	if r, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: live.ID, Principal: "root", Admin: true}); err != nil || r.State != store.LeaseReleased {
		t.Fatalf("ReleaseLease by an admin = %+v, %v", r, err)
	}
	// But not one that ended.
	_, err = b.rs.RenewLease(b.ctx, store.RenewLeaseParams{LeaseID: released.ID, Principal: "root", Admin: true, TTL: time.Hour})
	wantLeaseState(t, "RenewLease by an admin of a released lease", err, released.ID)
}

func testReleaseExpiredLease(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Minute, "src/a.go")
	b.clk.Advance(2 * time.Minute)
	// Someone else's grant on a path that does not overlap supersedes nothing.
	b.acquire(t, "web", bob, time.Minute, "src/ab.go")
	if got := b.lease(t, l.ID); got.State != store.LeaseExpired {
		t.Fatalf("GetLease after the expiry: state %s, want %s", got.State, store.LeaseExpired)
	}
	r, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: l.ID, Principal: "alice", FencingToken: l.FencingToken})
	if err != nil {
		t.Fatalf("ReleaseLease of an expired lease nobody took: %v", err)
	}
	want := l
	want.State, want.EndedAt = store.LeaseReleased, b.clk.Now()
	assertFields(t, "ReleaseLease of an expired lease", r, want)
	assertFields(t, "GetLease after it", b.lease(t, l.ID), want)
}

func testBreakLease(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	b.clk.Advance(time.Second)
	r, err := b.rs.BreakLease(b.ctx, l.ID)
	if err != nil {
		t.Fatalf("BreakLease: %v", err)
	}
	want := l
	want.State, want.EndedAt = store.LeaseBroken, b.clk.Now()
	assertFields(t, "BreakLease", r, want)
	assertFields(t, "GetLease after break", b.lease(t, l.ID), want)
	b.acquire(t, "web", bob, time.Minute, "src/a.go") // free at once

	_, err = b.rs.BreakLease(b.ctx, l.ID)
	wantLeaseState(t, "BreakLease of a broken lease", err, l.ID)
	b.leaseUnchanged(t, want, "a second break")

	released := b.acquire(t, "web", alice, time.Minute, "docs/")
	if _, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: released.ID, Principal: "alice"}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	before := b.lease(t, released.ID)
	_, err = b.rs.BreakLease(b.ctx, released.ID)
	wantLeaseState(t, "BreakLease of a released lease", err, released.ID)
	b.leaseUnchanged(t, before, "a break of a released lease")

	// An expired lease has not ended: it can be broken.
	expired := b.acquire(t, "web", alice, time.Minute, "lib/")
	b.clk.Advance(time.Hour)
	if r, err := b.rs.BreakLease(b.ctx, expired.ID); err != nil || r.State != store.LeaseBroken || !r.EndedAt.Equal(b.clk.Now()) {
		t.Fatalf("BreakLease of an expired lease = %+v, %v; want it broken now", r, err)
	}

	_, err = b.rs.BreakLease(b.ctx, "lse_unknown")
	wantErr(t, "BreakLease of an unknown lease", err, store.ErrNotFound)
}

func testLeaseSignal(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	waitClosed := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(signalDeadline):
			t.Fatalf("the channel taken before %s was not closed after it", what)
		}
	}
	l := b.acquire(t, "web", alice, time.Minute, "src/")
	ch := b.rs.LeaseSignal()
	if _, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: l.ID, Principal: "alice"}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	waitClosed("a release", ch)

	l = b.acquire(t, "web", alice, time.Minute, "src/")
	ch = b.rs.LeaseSignal()
	if _, err := b.rs.BreakLease(b.ctx, l.ID); err != nil {
		t.Fatalf("BreakLease: %v", err)
	}
	waitClosed("a break", ch)
}

// listAllLeases pages through ListLeases with pages of p.Limit.
func (b *rbundle) listAllLeases(t *testing.T, p store.ListLeasesParams) (leases []store.Lease, pages int) {
	t.Helper()
	seen := map[string]bool{}
	for {
		page, next, err := b.rs.ListLeases(b.ctx, p)
		if err != nil {
			t.Fatalf("ListLeases(%+v): %v", p, err)
		}
		pages++
		if p.Limit > 0 && len(page) > p.Limit {
			t.Fatalf("ListLeases page %d has %d leases, more than the limit %d", pages, len(page), p.Limit)
		}
		if next != "" && len(page) == 0 {
			t.Fatalf("ListLeases page %d is empty but has a next page token", pages)
		}
		for _, l := range page {
			if seen[l.ID] {
				t.Fatalf("ListLeases answered lease %s twice", l.ID)
			}
			seen[l.ID] = true
		}
		leases = append(leases, page...)
		if next == "" {
			return leases, pages
		}
		if pages > 1000 {
			t.Fatalf("ListLeases did not end")
		}
		p.PageToken = next
	}
}

func leaseIDs(leases []store.Lease) []string {
	out := make([]string, len(leases))
	for i, l := range leases {
		out[i] = l.ID
	}
	return out
}

func testListLeases(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	b.createRepo(t, "api")
	b.acquire(t, "api", alice, time.Hour, "a") // another repository's

	var l [8]store.Lease
	l[1] = b.acquire(t, "web", alice, time.Hour, "a")
	b.clk.Advance(time.Second)
	l[2] = b.acquire(t, "web", bob, time.Hour, "b")
	b.clk.Advance(time.Second)
	l[3] = b.acquire(t, "web", alice2, time.Hour, "c")
	b.clk.Advance(time.Second)
	l[4] = b.acquire(t, "web", alice, time.Minute, "d") // will expire
	b.clk.Advance(time.Second)
	l[5] = b.acquire(t, "web", "alicex|w1", time.Hour, "e") // another principal whose name starts with alice
	b.clk.Advance(time.Second)
	l[6] = b.acquire(t, "web", bob, time.Hour, "f") // will be released
	b.clk.Advance(time.Second)
	l[7] = b.acquire(t, "web", alice, time.Hour, "g") // will be broken
	if _, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: l[6].ID, Principal: "bob"}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	if _, err := b.rs.BreakLease(b.ctx, l[7].ID); err != nil {
		t.Fatalf("BreakLease: %v", err)
	}
	b.clk.Advance(2 * time.Minute)

	check := func(what string, p store.ListLeasesParams, want ...int) {
		t.Helper()
		p.Repository = "web"
		got, _ := b.listAllLeases(t, p)
		var wantIDs []string
		for _, i := range want {
			wantIDs = append(wantIDs, l[i].ID)
		}
		if !slices.Equal(leaseIDs(got), wantIDs) {
			t.Fatalf("ListLeases %s = %v, want %v", what, leaseIDs(got), wantIDs)
		}
		for _, g := range got {
			assertFields(t, "ListLeases "+what+": lease "+g.ID, g, b.lease(t, g.ID))
		}
	}
	check("(live)", store.ListLeasesParams{}, 5, 3, 2, 1)
	check("(all)", store.ListLeasesParams{IncludeEnded: true}, 7, 6, 5, 4, 3, 2, 1)
	check("(holder alice|w1)", store.ListLeasesParams{Holder: alice}, 1)
	check("(holder alice|w1, all)", store.ListLeasesParams{Holder: alice, IncludeEnded: true}, 7, 4, 1)
	check("(principal alice)", store.ListLeasesParams{Holder: "alice|"}, 3, 1)
	check("(principal alice, all)", store.ListLeasesParams{Holder: "alice|", IncludeEnded: true}, 7, 4, 3, 1)
	check("(holder alice without a label)", store.ListLeasesParams{Holder: "alice", IncludeEnded: true})
	check("(all, pages of 2)", store.ListLeasesParams{IncludeEnded: true, Limit: 2}, 7, 6, 5, 4, 3, 2, 1)
	check("(live, pages of 1)", store.ListLeasesParams{Limit: 1}, 5, 3, 2, 1)

	all, _ := b.listAllLeases(t, store.ListLeasesParams{Repository: "web", IncludeEnded: true})
	states := map[string]store.LeaseState{}
	for _, g := range all {
		states[g.ID] = g.State
	}
	for i, want := range map[int]store.LeaseState{4: store.LeaseExpired, 6: store.LeaseReleased, 7: store.LeaseBroken, 1: store.LeaseActive} {
		if states[l[i].ID] != want {
			t.Fatalf("ListLeases: lease %d is %s, want %s", i, states[l[i].ID], want)
		}
	}
	if _, pages := b.listAllLeases(t, store.ListLeasesParams{Repository: "web", IncludeEnded: true, Limit: 2}); pages != 4 {
		t.Fatalf("7 leases in pages of 2 took %d pages, want 4", pages)
	}
	// A page holding the last lease says there is no next page, also when it is full.
	if _, pages := b.listAllLeases(t, store.ListLeasesParams{Repository: "web", IncludeEnded: true, Limit: 7}); pages != 1 {
		t.Fatalf("7 leases in pages of 7 took %d pages, want 1", pages)
	}
	_, _, err := b.rs.ListLeases(b.ctx, store.ListLeasesParams{Repository: "web", PageToken: "!!!"})
	wantErr(t, "ListLeases(malformed page token)", err, store.ErrInvalidPageToken)
}
