package postgres_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/postgres"
	"github.com/ag-coord/ag/internal/store/storetest"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newStore is the storetest.Factory of this backend: a fresh database per store.
func newStore(t testing.TB, clk clock.Clock) store.Store {
	t.Helper()
	return open(t, pgtest.NewDatabase(t), clk)
}

// open opens a store on url and closes it when the test ends.
func open(t testing.TB, url string, clk clock.Clock) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(context.Background(), url, store.Options{Clock: clk})
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestConformance(t *testing.T) {
	storetest.Run(t, newStore)
}

func Test_a_claim_number_fences_a_stale_claimant_of_the_same_name(t *testing.T) {
	storetest.RunNamed(t, newStore, "a_claim_number_fences_a_stale_claimant_of_the_same_name")
}

func BenchmarkClaimComplete(b *testing.B) {
	storetest.BenchmarkClaimComplete(b, newStore)
}

func BenchmarkIntegrate(b *testing.B) {
	storetest.BenchmarkIntegrate(b, newStore)
}

// TestConcurrentOpenMigratesOnce ensures that replicas starting together on an empty database
// all start, and that the schema is migrated once.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	url := pgtest.NewDatabase(t)
	const replicas = 4
	var wg sync.WaitGroup
	errs := make([]error, replicas)
	dbs := make([]*postgres.DB, replicas)
	for i := range replicas {
		wg.Go(func() {
			dbs[i], errs[i] = postgres.Open(t.Context(), url, store.Options{})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: Open: %v", i, err)
		}
		t.Cleanup(func() { dbs[i].Close() })
		if err := dbs[i].Ready(t.Context()); err != nil {
			t.Errorf("replica %d: Ready: %v", i, err)
		}
	}
	conn := connect(t, url)
	rows, err := conn.Query(t.Context(), `SELECT version FROM schema_version ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int, postgres.KnownVersion())
	for i := range want {
		want[i] = i + 1
	}
	if !slices.Equal(versions, want) {
		t.Fatalf("schema_version rows = %v, want %v: one row per migration, each applied once", versions, want)
	}
	// Every replica works on the one schema.
	job, _, err := dbs[0].EnqueueJob(t.Context(), store.EnqueueJobParams{Kind: "k", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := dbs[3].GetJob(t.Context(), job.ID); err != nil || got.ID != job.ID {
		t.Fatalf("GetJob on another replica = %v, %v; want job %s", got.ID, err, job.ID)
	}
}

// TestOpenRefusesANewerSchema ensures that a build does not run on a schema that a newer build
// migrated, and says so.
func TestOpenRefusesANewerSchema(t *testing.T) {
	url := pgtest.NewDatabase(t)
	db := open(t, url, nil)
	conn := connect(t, url)
	future := postgres.KnownVersion() + 1
	if _, err := conn.Exec(t.Context(), `INSERT INTO schema_version (version, name) VALUES ($1, 'future.sql')`, future); err != nil {
		t.Fatal(err)
	}

	if err := db.Ready(t.Context()); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("Ready of a store whose schema became newer: err = %v, want %v", err, store.ErrSchemaTooNew)
	}
	newer, err := postgres.Open(t.Context(), url, store.Options{})
	if err == nil {
		newer.Close()
		t.Fatal("Open on a newer schema succeeded, want it refused")
	}
	var tooNew *store.SchemaTooNewError
	if !errors.As(err, &tooNew) || !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("Open on a newer schema: err = %v (%T), want a *store.SchemaTooNewError", err, err)
	}
	if tooNew.Database != future || tooNew.Known != future-1 {
		t.Errorf("SchemaTooNewError = %+v, want Database %d, Known %d", *tooNew, future, future-1)
	}
}

// TestJobSignalAcrossReplicas ensures that a claimer waiting on one replica is woken by an
// enqueue, and by a retry, committed through another replica of the same database.
func TestJobSignalAcrossReplicas(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a, b := open(t, url, nil), open(t, url, nil)
	ctx := t.Context()

	// Only a notification sent once a listens can reach it.
	waitListening(t, a, 1)

	woken := a.JobSignal()
	job, _, err := b.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "k", MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	wantClosed(t, woken, "after an enqueue through the other replica")

	claimed, err := b.ClaimJob(ctx, store.ClaimJobParams{Holder: "p|w", Lease: time.Minute})
	if err != nil || claimed == nil || claimed.ID != job.ID {
		t.Fatalf("ClaimJob = %v, %v; want job %s", claimed, err, job.ID)
	}
	woken = a.JobSignal()
	retry := time.Duration(0)
	if _, err := b.FailJob(ctx, store.FailJobParams{JobID: job.ID, Holder: "p|w", ClaimNumber: claimed.ClaimNumber,
		Error: "boom", RetryDelay: &retry}); err != nil {
		t.Fatal(err)
	}
	wantClosed(t, woken, "after a retry through the other replica")
}

// waitListening waits until db's listener has started listening n times in all.
func waitListening(t *testing.T, db *postgres.DB, n int64) {
	t.Helper()
	if !postgres.WaitListening(db, n, 30*time.Second) {
		t.Fatalf("the listener did not listen %d times within 30s", n)
	}
}

func wantClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("JobSignal not closed within 30s %s", what)
	}
}

// TestBootstrapAdminConcurrently ensures that replicas bootstrapping together on an empty
// database create exactly one principal.
func TestBootstrapAdminConcurrently(t *testing.T) {
	url := pgtest.NewDatabase(t)
	const replicas = 8
	dbs := make([]*postgres.DB, replicas)
	for i := range dbs {
		dbs[i] = open(t, url, nil)
	}
	var wg sync.WaitGroup
	created := make([]bool, replicas)
	errs := make([]error, replicas)
	for i, db := range dbs {
		wg.Go(func() {
			created[i], errs[i] = db.BootstrapAdmin(t.Context(), store.CreatePrincipalParams{
				Name: "admin", TokenID: store.NewID("tok"), TokenHash: []byte{byte(i), 1, 2, 3}})
		})
	}
	wg.Wait()
	n := 0
	for i := range dbs {
		if errs[i] != nil {
			t.Errorf("replica %d: BootstrapAdmin: %v", i, errs[i])
		}
		if created[i] {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d replicas created the admin, want exactly 1", n)
	}
	ps, _, err := dbs[0].ListPrincipals(t.Context(), store.ListPrincipalsParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Name != "admin" || ps[0].Role != store.RoleAdmin {
		t.Errorf("principals = %+v, want the one admin", ps)
	}
}

// TestListenerSurvivesADroppedConnection ensures that a replica whose listening connection is
// killed (a database restart, a network cut) listens again and still hears other replicas.
func TestListenerSurvivesADroppedConnection(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a, b := open(t, url, nil), open(t, url, nil)
	waitListening(t, a, 1)
	waitListening(t, b, 1) // both listeners are to be found below

	woken := a.JobSignal()
	conn := connect(t, url)
	tag, err := conn.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN ag_jobs'`)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 2 {
		t.Fatalf("terminated %d listening connections, want 2 (one per replica)", tag.RowsAffected())
	}
	// Listening again fires the signal, as a notification may have been lost meanwhile.
	wantClosed(t, woken, "after the listener listened again")
	waitListening(t, a, 2)

	woken = a.JobSignal()
	if _, _, err := b.EnqueueJob(t.Context(), store.EnqueueJobParams{Kind: "k", MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	wantClosed(t, woken, "after an enqueue through the other replica, once the listener reconnected")
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
