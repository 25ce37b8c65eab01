package postgres_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/postgres"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// replicas opens n stores on one fresh database, all reading clk (nil: the database's clock).
func replicas(t *testing.T, n int, clk clock.Clock) []*postgres.DB {
	t.Helper()
	url := pgtest.NewDatabase(t)
	dbs := make([]*postgres.DB, n)
	for i := range dbs {
		dbs[i] = open(t, url, clk)
	}
	return dbs
}

func createRepo(t *testing.T, db *postgres.DB, name string) store.Repository {
	t.Helper()
	r, err := db.CreateRepository(t.Context(), store.CreateRepositoryParams{Name: name, CreatedBy: "admin"})
	if err != nil {
		t.Fatalf("CreateRepository(%q): %v", name, err)
	}
	return r
}

// TestOverlappingGrantsOnTwoReplicas ensures that grants of overlapping paths to different
// holders, sent at once through two replicas of one database, are granted to exactly one of
// them, whatever the shape of the overlap, and that every grant's token is new.
func TestOverlappingGrantsOnTwoReplicas(t *testing.T) {
	dbs := replicas(t, 2, nil)
	ctx := t.Context()
	createRepo(t, dbs[0], "r")

	// Each round, 8 acquirers (4 per replica, each its own holder) ask for the round's shape,
	// except two, who ask for the round's whole directory: every request overlaps every other
	// (equal paths, a file or a directory under a directory). The rounds use disjoint directories.
	shapes := [][]string{
		{"f.go"},
		{"src/"},
		{"src/a/b.go"},
		{"src/a/"},
		{"x.go", "src/"},
	}
	const rounds, perReplica = 12, 4
	var tokens []uint64
	for round := range rounds {
		base := fmt.Sprintf("r%02d/", round)
		type result struct {
			lease store.Lease
			err   error
		}
		results := make([]result, 2*perReplica)
		start := make(chan struct{})
		var wg sync.WaitGroup
		shape := shapes[round%len(shapes)]
		for i := range results {
			wg.Go(func() {
				paths := make([]string, len(shape))
				for j, p := range shape {
					paths[j] = base + p
				}
				if i%4 == 0 {
					// Some ask for the whole round's directory instead.
					paths = []string{base}
				}
				<-start
				l, err := dbs[i%2].AcquireLease(ctx, store.AcquireLeaseParams{Repository: "r", Paths: paths,
					Holder: fmt.Sprintf("agent%d|w", i), TTL: time.Minute})
				results[i] = result{l, err}
			})
		}
		close(start)
		wg.Wait()
		granted := 0
		for i, r := range results {
			switch {
			case r.err == nil:
				granted++
				tokens = append(tokens, r.lease.FencingToken)
			case errors.Is(r.err, store.ErrLeaseConflict):
				var conflict *store.LeaseConflictError
				if !errors.As(r.err, &conflict) || conflict.Holder == fmt.Sprintf("agent%d|w", i) {
					t.Fatalf("round %d, acquirer %d: conflict %v does not name another holder", round, i, r.err)
				}
			default:
				t.Fatalf("round %d, acquirer %d: AcquireLease: %v", round, i, r.err)
			}
		}
		if granted != 1 {
			t.Fatalf("round %d: %d of %d overlapping grants succeeded, want exactly 1", round, granted, len(results))
		}
	}
	if distinct := slices.Compact(slices.Sorted(slices.Values(tokens))); len(distinct) != rounds {
		t.Fatalf("tokens of the grants = %v, want %d distinct tokens", tokens, rounds)
	}
	leases, _, err := dbs[1].ListLeases(ctx, store.ListLeasesParams{Repository: "r", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != rounds {
		t.Fatalf("ListLeases answers %d active leases, want %d (one per round)", len(leases), rounds)
	}
}

// TestTokensGrowAcrossReplicas ensures that acquirers contending for one file through two
// replicas, each releasing it at once and waiting on LeaseSignal when refused, hold it one after
// another with tokens that grow in that order.
func TestTokensGrowAcrossReplicas(t *testing.T) {
	dbs := replicas(t, 2, nil)
	ctx := t.Context()
	createRepo(t, dbs[0], "r")
	const acquirers, each = 8, 10
	var mu sync.Mutex
	var order []uint64 // tokens in the order their holders held the file
	var wg sync.WaitGroup
	for i := range acquirers {
		wg.Go(func() {
			db := dbs[i%2]
			holder := fmt.Sprintf("agent%d|w", i)
			for n := 0; n < each; {
				// Taken before the attempt, so a release in between still wakes the wait.
				released := db.LeaseSignal()
				l, err := db.AcquireLease(ctx, store.AcquireLeaseParams{Repository: "r", Paths: []string{"hot.go"},
					Holder: holder, TTL: time.Minute})
				if errors.Is(err, store.ErrLeaseConflict) {
					select {
					case <-released:
					case <-time.After(time.Second):
						// A release through the other replica before this one listened.
					}
					continue
				}
				if err != nil {
					t.Errorf("AcquireLease: %v", err)
					return
				}
				mu.Lock()
				order = append(order, l.FencingToken)
				mu.Unlock()
				if _, err := db.ReleaseLease(ctx, store.ReleaseLeaseParams{LeaseID: l.ID, Principal: fmt.Sprintf("agent%d", i),
					FencingToken: l.FencingToken}); err != nil {
					t.Errorf("ReleaseLease: %v", err)
					return
				}
				n++
			}
		})
	}
	wg.Wait()
	if len(order) != acquirers*each {
		t.Fatalf("%d grants, want %d", len(order), acquirers*each)
	}
	if !slices.IsSorted(order) || len(slices.Compact(slices.Clone(order))) != len(order) {
		t.Fatalf("tokens in the order the file was held = %v, want strictly growing", order)
	}
}

// TestRenewOfAnExpiredLeaseRacesWithAGrant ensures that when alice renews her expired lease on
// one replica while bob asks for its path on another, exactly one of them gets the path.
func TestRenewOfAnExpiredLeaseRacesWithAGrant(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 10, 20, 9, 30, 0, 0, time.UTC))
	dbs := replicas(t, 2, clk)
	ctx := t.Context()
	createRepo(t, dbs[0], "r")
	for round := range 20 {
		path := fmt.Sprintf("f%02d.go", round)
		l, err := dbs[0].AcquireLease(ctx, store.AcquireLeaseParams{Repository: "r", Paths: []string{path},
			Holder: "alice|w1", TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Second)

		var renewErr, grantErr error
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			_, renewErr = dbs[0].RenewLease(ctx, store.RenewLeaseParams{LeaseID: l.ID, Principal: "alice", TTL: time.Minute})
		})
		wg.Go(func() {
			<-start
			_, grantErr = dbs[1].AcquireLease(ctx, store.AcquireLeaseParams{Repository: "r", Paths: []string{path},
				Holder: "bob|w1", TTL: time.Minute})
		})
		close(start)
		wg.Wait()
		switch {
		case renewErr == nil && errors.Is(grantErr, store.ErrLeaseConflict):
		case grantErr == nil && errors.Is(renewErr, store.ErrFailedPrecondition):
		default:
			t.Fatalf("round %d: renew: %v; grant: %v; want exactly one of them to have the path", round, renewErr, grantErr)
		}
	}
}

// TestLeaseSignalAcrossReplicas ensures that an acquirer waiting on one replica is woken by a
// release, and by a break, committed through another.
func TestLeaseSignalAcrossReplicas(t *testing.T) {
	dbs := replicas(t, 2, nil)
	a, b := dbs[0], dbs[1]
	ctx := t.Context()
	createRepo(t, b, "r")
	waitListening(t, a, 1)

	acquire := func() store.Lease {
		t.Helper()
		l, err := b.AcquireLease(ctx, store.AcquireLeaseParams{Repository: "r", Paths: []string{"a.go"}, Holder: "bob|w1", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l := acquire()
	woken := a.LeaseSignal()
	if _, err := b.ReleaseLease(ctx, store.ReleaseLeaseParams{LeaseID: l.ID, Principal: "bob"}); err != nil {
		t.Fatal(err)
	}
	wantLeaseSignal(t, woken, "after a release through the other replica")

	l = acquire()
	woken = a.LeaseSignal()
	if _, err := b.BreakLease(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	wantLeaseSignal(t, woken, "after a break through the other replica")

	// A job notification is not a lease's.
	woken = a.LeaseSignal()
	if _, _, err := b.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "k", MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	jobs := a.JobSignal()
	if _, _, err := b.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "k", MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	wantClosed(t, jobs, "after an enqueue through the other replica")
	select {
	case <-woken:
		t.Fatal("LeaseSignal closed by job notifications")
	default:
	}
}

func wantLeaseSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("LeaseSignal not closed within 30s %s", what)
	}
}

// TestIntegrateOnTwoReplicas ensures that agents integrating disjoint files at once through two
// replicas are all integrated, one after another: the mainline holds every edit, and its
// revisions form one line with one revision per change.
func TestIntegrateOnTwoReplicas(t *testing.T) {
	dbs := replicas(t, 2, nil)
	ctx := t.Context()
	first := createRepo(t, dbs[0], "r")
	const agents = 16
	var wg sync.WaitGroup
	for i := range agents {
		wg.Go(func() {
			db := dbs[i%2]
			holder := fmt.Sprintf("agent%d|w", i)
			path := fmt.Sprintf("dir%d/file.go", i)
			l, err := db.AcquireLease(ctx, store.AcquireLeaseParams{Repository: "r", Paths: []string{fmt.Sprintf("dir%d/", i)},
				Holder: holder, TTL: time.Minute})
			if err != nil {
				t.Errorf("AcquireLease: %v", err)
				return
			}
			content := []byte("agent " + holder)
			edit := repo.FileEdit{Path: path, Digest: repo.Digest(content), Size: uint64(len(content))}
			_, err = db.Integrate(ctx, store.IntegrateParams{
				Repository: "r", BaseRevision: first.Mainline, Holder: holder, FencingTokens: []uint64{l.FencingToken},
				Paths: []string{path}, Message: "edit",
				Edits: []repo.FileEdit{edit},
				Blobs: []store.Blob{{Digest: edit.Digest, Content: content}},
			})
			if err != nil {
				t.Errorf("Integrate(%s): %v", path, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	r, err := dbs[1].GetRepository(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	rev, err := dbs[1].GetRevision(ctx, "r", r.Mainline)
	if err != nil {
		t.Fatal(err)
	}
	if len(rev.Tree) != agents {
		t.Fatalf("the mainline holds %d files, want %d: %v", len(rev.Tree), agents, rev.Tree)
	}
	for _, e := range rev.Tree {
		b, err := dbs[0].GetBlob(ctx, e.Digest)
		if err != nil {
			t.Fatalf("GetBlob(%s) of %s: %v", e.Digest, e.Path, err)
		}
		if uint64(len(b.Content)) != e.Size {
			t.Fatalf("blob of %s has %d bytes, the tree says %d", e.Path, len(b.Content), e.Size)
		}
	}
	// Walk the line of revisions back to the first.
	n := 0
	for rev.Parent != "" {
		if rev.ChangeID == "" {
			t.Fatalf("revision %s has a parent but no change", rev.ID)
		}
		if rev, err = dbs[n%2].GetRevision(ctx, "r", rev.Parent); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if rev.ID != first.Mainline || n != agents {
		t.Fatalf("the mainline's line of revisions has %d changes back to %s, want %d back to %s", n, rev.ID, agents, first.Mainline)
	}
	changes, _, err := dbs[0].ListChanges(ctx, store.ListChangesParams{Repository: "r", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != agents {
		t.Fatalf("ListChanges answers %d changes, want %d", len(changes), agents)
	}
}

// TestConcurrentChangesOfOneLease ensures that renewals that pass (one round trip) and renewals
// that are refused (read and explained in a transaction) of one lease, on two replicas at once,
// take their locks in one order: each is answered, none fails on a deadlock.
func TestConcurrentChangesOfOneLease(t *testing.T) {
	dbs := replicas(t, 2, nil)
	ctx := t.Context()
	createRepo(t, dbs[0], "r")
	l, err := dbs[0].AcquireLease(ctx, store.AcquireLeaseParams{Repository: "r", Paths: []string{"a.go"}, Holder: "alice|w1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 25 {
				principal := "alice"
				if i%2 == 1 {
					principal = "bob"
				}
				_, err := dbs[i%2].RenewLease(ctx, store.RenewLeaseParams{LeaseID: l.ID, Principal: principal, TTL: time.Minute})
				if principal == "alice" && err != nil {
					t.Errorf("alice's renewal: %v", err)
					return
				}
				var refusal *store.LeaseStateError
				if principal == "bob" && !errors.As(err, &refusal) {
					t.Errorf("bob's renewal: err = %v, want a *store.LeaseStateError", err)
					return
				}
			}
		})
	}
	wg.Wait()
}
