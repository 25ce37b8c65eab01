package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/sqlite"
	"github.com/ag-coord/ag/internal/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newStore opens a fresh database file in the test's temporary directory.
func newStore(t testing.TB, clk clock.Clock) store.Store {
	t.Helper()
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "ag.db"), store.Options{Clock: clk})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

// TestConformance runs the store conformance suite on SQLite.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, newStore)
}

// Test_a_claim_number_fences_a_stale_claimant_of_the_same_name is ADR-0012's storage test, by
// the name the ADR gives it.
func Test_a_claim_number_fences_a_stale_claimant_of_the_same_name(t *testing.T) {
	t.Parallel()
	storetest.RunNamed(t, newStore, "a_claim_number_fences_a_stale_claimant_of_the_same_name")
}

// TestOpenRefusesASchemaTooNew ensures a build never runs on a database a newer build migrated.
func TestOpenRefusesASchemaTooNew(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ag.db")
	db, err := sqlite.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := db.Ready(t.Context()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// A newer build recorded a version this one does not know.
	raw, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	var known int
	if err := raw.QueryRow(`SELECT max(version) FROM schema_version`).Scan(&known); err != nil {
		t.Fatalf("read schema version: %v", err)
	}
	if _, err := raw.Exec(`INSERT INTO schema_version (version, applied_at) VALUES (?, 0)`, known+1); err != nil {
		t.Fatalf("record a newer schema version: %v", err)
	}
	if err := raw.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	db, err = sqlite.Open(t.Context(), path, store.Options{})
	if err == nil {
		db.Close()
		t.Fatalf("Open of a database with schema version %d succeeded, want %v", known+1, store.ErrSchemaTooNew)
	}
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("Open: err = %v, want %v", err, store.ErrSchemaTooNew)
	}
	var tooNew *store.SchemaTooNewError
	if !errors.As(err, &tooNew) || tooNew.Database != known+1 || tooNew.Known != known {
		t.Fatalf("Open: err = %v, want a *store.SchemaTooNewError{Database: %d, Known: %d}", err, known+1, known)
	}
}

// TestOpenKeepsTheData ensures a second Open of the same file applies nothing twice and finds
// what the first one stored, and that Open creates the directories it needs, whatever their
// names hold.
func TestOpenKeepsTheData(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "a b?c#d%20e", "f", "ag.db")
	db, err := sqlite.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	job, _, err := db.EnqueueJob(t.Context(), store.EnqueueJobParams{Kind: "validate", MaxAttempts: 1})
	if err != nil {
		t.Fatalf("EnqueueJob: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the database file: %v", err)
	}

	db, err = sqlite.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatalf("Open again: %v", err)
	}
	defer db.Close()
	if err := db.Ready(t.Context()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	got, err := db.GetJob(t.Context(), job.ID)
	if err != nil || got.ID != job.ID || got.State != store.JobQueued {
		t.Fatalf("GetJob after reopening = %+v, %v; want the queued job %s", got, err, job.ID)
	}
}

// TestJobSignalWaitsForAClaimableJob ensures SQLite wakes claimers exactly when a commit may
// have made a job claimable, and before the call that committed returns: one process holds
// every writer, so nothing else can.
func TestJobSignalWaitsForAClaimableJob(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newStore(t, clock.NewFake(time.Date(2026, 10, 20, 0, 0, 0, 0, time.UTC)))
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}

	ch := st.JobSignal()
	if closed(ch) {
		t.Fatalf("JobSignal of a fresh store is closed")
	}
	job, _, err := st.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "validate", MaxAttempts: 3, UniqueKey: "k"})
	if err != nil {
		t.Fatalf("EnqueueJob: %v", err)
	}
	if !closed(ch) {
		t.Fatalf("the channel taken before EnqueueJob is open after it returned")
	}

	// Nothing below makes a job claimable.
	ch = st.JobSignal()
	if _, existing, err := st.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "validate", MaxAttempts: 3, UniqueKey: "k"}); err != nil || !existing {
		t.Fatalf("EnqueueJob(same key) = existing %v, %v", existing, err)
	}
	if _, err := st.ClaimJob(ctx, store.ClaimJobParams{Holder: "p|w", Lease: time.Minute}); err != nil {
		t.Fatalf("ClaimJob: %v", err)
	}
	if _, err := st.HeartbeatJob(ctx, store.HeartbeatJobParams{JobID: job.ID, Holder: "p|w", ClaimNumber: 1}); err != nil {
		t.Fatalf("HeartbeatJob: %v", err)
	}
	if _, err := st.FailJob(ctx, store.FailJobParams{JobID: job.ID, Holder: "p|w", ClaimNumber: 7, Error: "stale"}); !errors.Is(err, store.ErrLostClaim) {
		t.Fatalf("FailJob with a stale number: %v", err)
	}
	if closed(ch) {
		t.Fatalf("the signal fired without a job becoming claimable")
	}

	// A retry does.
	if _, err := st.FailJob(ctx, store.FailJobParams{JobID: job.ID, Holder: "p|w", ClaimNumber: 1, Error: "x"}); err != nil {
		t.Fatalf("FailJob: %v", err)
	}
	if !closed(ch) {
		t.Fatalf("the channel taken before a retry is open after it returned")
	}
}

func BenchmarkClaimComplete(b *testing.B) {
	storetest.BenchmarkClaimComplete(b, newStore)
}

// TestGroupCommitIsolatesAFailedWrite ensures that writes committed together stay independent:
// a write refused inside a shared transaction rolls back only itself.
func TestGroupCommitIsolatesAFailedWrite(t *testing.T) {
	t.Parallel()
	s := newStore(t, clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)))
	const names, tries = 16, 4
	var wg sync.WaitGroup
	var created, taken atomic.Int64
	for i := 0; i < names*tries; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := s.CreatePrincipal(context.Background(), store.CreatePrincipalParams{
				Name: fmt.Sprintf("p%d", i%names), Role: store.RoleAgent,
				TokenID: store.NewID("tok"), TokenHash: []byte(fmt.Sprintf("hash-%d", i)),
			})
			switch {
			case err == nil:
				created.Add(1)
			case errors.Is(err, store.ErrAlreadyExists):
				taken.Add(1)
			default:
				t.Errorf("create principal: %v", err)
			}
		}()
	}
	wg.Wait()
	if created.Load() != names || taken.Load() != names*(tries-1) {
		t.Fatalf("created %d and refused %d, want %d and %d", created.Load(), taken.Load(), names, names*(tries-1))
	}
	ps, _, err := s.ListPrincipals(context.Background(), store.ListPrincipalsParams{Limit: 100})
	if err != nil || len(ps) != names {
		t.Fatalf("list = %d principals, %v; want %d", len(ps), err, names)
	}
	// Only the token of the write that created a name survived; the refused writes left none.
	working := map[string]int{}
	for i := 0; i < names*tries; i++ {
		if p, _, err := s.Authenticate(context.Background(), []byte(fmt.Sprintf("hash-%d", i))); err == nil {
			working[p.Name]++
		}
	}
	for _, p := range ps {
		if working[p.Name] != 1 {
			t.Errorf("principal %s has %d working tokens, want 1", p.Name, working[p.Name])
		}
	}
}

func BenchmarkIntegrate(b *testing.B) {
	storetest.BenchmarkIntegrate(b, newStore)
}
