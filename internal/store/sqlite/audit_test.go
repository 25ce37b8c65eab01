package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/sqlite"
	"github.com/ag-coord/ag/internal/store/storetest"
)

// tamperLog is a sealed audit log in a SQLite file, and the key its checkpoints verify with.
type tamperLog struct {
	path   string
	key    string // the verifier key
	events []store.AuditEvent
}

// newTamperLog writes a log of 12 events of several kinds to a new file, seals it in two
// batches with a real audit key, and closes the store.
func newTamperLog(t *testing.T) tamperLog {
	t.Helper()
	ctx := store.WithActor(t.Context(), store.Actor{Principal: "admin", Holder: "admin|console"})
	dir := t.TempDir()
	path := filepath.Join(dir, "ag.db")
	clk := clock.NewFake(time.Date(2026, 11, 30, 18, 0, 0, 123456000, time.UTC))
	db, err := sqlite.Open(ctx, path, store.Options{Clock: clk})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer db.Close()
	signer, err := audit.LoadOrCreateKey(filepath.Join(dir, "audit.key"), "ag-test")
	if err != nil {
		t.Fatalf("LoadOrCreateKey: %v", err)
	}
	seal := func() {
		t.Helper()
		if _, err := db.SealAudit(ctx, store.SealAuditParams{Limit: 1000, Seal: signer.SealFunc(clk.Now)}); err != nil {
			t.Fatalf("SealAudit: %v", err)
		}
	}

	for _, name := range []string{"alice", "bob"} { // events 1-4
		sum := fmt.Appendf(nil, "token of %s", name)
		if _, _, err := db.CreatePrincipal(ctx, store.CreatePrincipalParams{Name: name, Role: store.RoleAgent,
			TokenID: store.NewID("tok"), TokenHash: sum}); err != nil {
			t.Fatalf("CreatePrincipal: %v", err)
		}
		clk.Advance(time.Second)
	}
	job, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "build", MaxAttempts: 3, EnqueuedBy: "alice"}) // 5
	if err != nil {
		t.Fatalf("EnqueueJob: %v", err)
	}
	seal()
	clk.Advance(time.Second)
	if _, err := db.ClaimJob(ctx, store.ClaimJobParams{Worker: "runner|w1", Lease: time.Minute}); err != nil { // 6
		t.Fatalf("ClaimJob: %v", err)
	}
	if _, err := db.CompleteJob(ctx, store.CompleteJobParams{JobID: job.ID, Worker: "runner|w1", OutputDigest: "sha256:0"}); err != nil { // 7
		t.Fatalf("CompleteJob: %v", err)
	}
	if _, err := db.CreateRepository(ctx, store.CreateRepositoryParams{Name: "web", CreatedBy: "admin"}); err != nil { // 8
		t.Fatalf("CreateRepository: %v", err)
	}
	l, err := db.AcquireLease(ctx, store.AcquireLeaseParams{Repository: "web", Paths: []string{"src/"}, Holder: "alice|w1", TTL: time.Minute}) // 9
	if err != nil {
		t.Fatalf("AcquireLease: %v", err)
	}
	if _, err := db.RenewLease(ctx, store.RenewLeaseParams{LeaseID: l.ID, Principal: "alice", TTL: time.Hour}); err != nil { // 10
		t.Fatalf("RenewLease: %v", err)
	}
	if _, err := db.ReleaseLease(ctx, store.ReleaseLeaseParams{LeaseID: l.ID, Principal: "alice"}); err != nil { // 11
		t.Fatalf("ReleaseLease: %v", err)
	}
	if _, err := db.DisablePrincipal(ctx, "bob"); err != nil { // 12
		t.Fatalf("DisablePrincipal: %v", err)
	}
	seal()

	log := tamperLog{path: path, key: signer.VerifierKey()}
	log.events, err = db.ListAuditEvents(ctx, store.ListAuditEventsParams{Limit: 1000})
	if err != nil || len(log.events) != 12 {
		t.Fatalf("ListAuditEvents = %d events, %v; want 12", len(log.events), err)
	}
	return log
}

// verify reads the log from the file as the server would export it and verifies it against its
// newest checkpoint, whose signature it checks first.
func (l tamperLog) verify(t *testing.T) error {
	t.Helper()
	db, err := sqlite.Open(t.Context(), l.path, store.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer db.Close()
	events, err := db.ListAuditEvents(t.Context(), store.ListAuditEventsParams{Limit: 1000})
	if err != nil {
		t.Fatalf("ListAuditEvents: %v", err)
	}
	cp, err := db.LatestAuditCheckpoint(t.Context())
	if err != nil {
		t.Fatalf("LatestAuditCheckpoint: %v", err)
	}
	c, err := audit.OpenCheckpoint(cp.Note, l.key)
	if err != nil {
		t.Fatalf("OpenCheckpoint: %v", err)
	}
	_, err = audit.Verify(events, c)
	return err
}

// tamper edits the file with SQL statements, as someone with the file but not the key could.
func (l tamperLog) tamper(t *testing.T, statements ...string) {
	t.Helper()
	raw, err := sql.Open("sqlite3", l.path)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	defer raw.Close()
	for _, s := range statements {
		res, err := raw.Exec(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			t.Fatalf("%s changed no row", s)
		}
	}
}

// TestAuditTamperingIsDetected edits a sealed log in its file in each way an attacker with the
// file could, and checks that verification fails naming the first event that does not verify.
func TestAuditTamperingIsDetected(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// sql answers the statements that tamper with log (of 12 events, sealed in two batches
		// of 5 and 7).
		sql     func(l tamperLog) []string
		wantSeq uint64
	}{
		{"edit_an_events_time", func(tamperLog) []string {
			return []string{`UPDATE audit_events SET time = time + 1000000 WHERE seq = 7`}
		}, 7},
		{"edit_an_events_time_by_a_microsecond", func(tamperLog) []string {
			return []string{`UPDATE audit_events SET time = time - 1 WHERE seq = 2`}
		}, 2},
		{"edit_an_events_principal", func(tamperLog) []string {
			return []string{`UPDATE audit_events SET principal = 'mallory' WHERE seq = 6`}
		}, 6},
		{"edit_an_events_holder", func(tamperLog) []string {
			return []string{`UPDATE audit_events SET holder = 'runner|w2' WHERE seq = 6`}
		}, 6},
		{"edit_an_events_action", func(tamperLog) []string {
			return []string{`UPDATE audit_events SET action = 'job.failed' WHERE seq = 7`}
		}, 7},
		{"edit_an_events_subject", func(tamperLog) []string {
			return []string{`UPDATE audit_events SET subject = 'principal/mallory' WHERE seq = 1`}
		}, 1},
		{"edit_an_events_details", func(tamperLog) []string {
			return []string{`UPDATE audit_events SET details = '{"role":"admin"}' WHERE seq = 3`}
		}, 3},
		{"remove_an_events_details", func(tamperLog) []string {
			return []string{`UPDATE audit_events SET details = NULL WHERE seq = 9`}
		}, 9},
		{"edit_an_event_of_the_last_batch", func(tamperLog) []string {
			return []string{`UPDATE audit_events SET subject = 'principal/alice' WHERE seq = 12`}
		}, 12},
		{"delete_an_event", func(tamperLog) []string {
			return []string{`DELETE FROM audit_events WHERE seq = 4`}
		}, 4},
		{"delete_an_event_and_renumber_the_rest", func(tamperLog) []string {
			return []string{`DELETE FROM audit_events WHERE seq = 4`,
				`UPDATE audit_events SET seq = -(seq - 1) WHERE seq > 4`, `UPDATE audit_events SET seq = -seq WHERE seq < 0`}
		}, 4},
		{"delete_the_last_event", func(tamperLog) []string {
			return []string{`DELETE FROM audit_events WHERE seq = 12`}
		}, 12},
		{"insert_an_event_chained_to_the_one_before", func(l tamperLog) []string {
			// The inserted event is chained correctly to event 5, so it verifies by itself; the
			// event after it, the old event 6, no longer follows its predecessor.
			forged := l.events[5]
			forged.Seq, forged.Subject, forged.PrevHash = 6, "job/job_forged", l.events[4].Hash
			canonical, err := audit.Canonical(forged)
			if err != nil {
				panic(err)
			}
			hash := audit.ChainHash(forged.PrevHash, canonical)
			return []string{`UPDATE audit_events SET seq = -(seq + 1) WHERE seq >= 6`, `UPDATE audit_events SET seq = -seq WHERE seq < 0`,
				fmt.Sprintf(`INSERT INTO audit_events (time, principal, holder, action, subject, details, seq, prev_hash, hash)
					VALUES (%d, '%s', '%s', '%s', '%s', '%s', 6, x'%x', x'%x')`,
					forged.Time.UnixMicro(), forged.Principal, forged.Holder, forged.Action, forged.Subject, forged.Details,
					forged.PrevHash, hash)}
		}, 7},
		{"insert_an_event_with_a_made_up_seq", func(l tamperLog) []string {
			return []string{fmt.Sprintf(`INSERT INTO audit_events (time, principal, holder, action, subject, seq, prev_hash, hash)
				VALUES (0, 'mallory', '', 'principal.created', 'principal/mallory', 100, x'%x', x'%x')`, l.events[11].Hash, l.events[11].Hash)}
		}, 13},
		{"swap_two_events_seq", func(tamperLog) []string {
			return []string{`UPDATE audit_events SET seq = -seq WHERE seq IN (3, 8)`,
				`UPDATE audit_events SET seq = CASE seq WHEN -3 THEN 8 ELSE 3 END WHERE seq IN (-3, -8)`}
		}, 3},
		{"swap_two_adjacent_events_seq", func(tamperLog) []string {
			return []string{`UPDATE audit_events SET seq = -seq WHERE seq IN (10, 11)`,
				`UPDATE audit_events SET seq = CASE seq WHEN -10 THEN 11 ELSE 10 END WHERE seq IN (-10, -11)`}
		}, 10},
		{"edit_an_event_and_rebuild_the_chain_after_it", func(l tamperLog) []string {
			// Every hash from the edited event on is recomputed: the chain verifies, but the
			// signed checkpoint names another head and root.
			stmts := []string{`UPDATE audit_events SET principal = 'mallory' WHERE seq = 8`}
			prev := l.events[6].Hash
			for _, e := range l.events[7:] {
				if e.Seq == 8 {
					e.Principal = "mallory"
				}
				canonical, err := audit.Canonical(e)
				if err != nil {
					panic(err)
				}
				hash := audit.ChainHash(prev, canonical)
				stmts = append(stmts, fmt.Sprintf(`UPDATE audit_events SET prev_hash = x'%x', hash = x'%x' WHERE seq = %d`, prev, hash, e.Seq))
				prev = hash
			}
			return stmts
		}, 12},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l := newTamperLog(t)
			if err := l.verify(t); err != nil {
				t.Fatalf("the log before tampering does not verify: %v", err)
			}
			l.tamper(t, c.sql(l)...)
			err := l.verify(t)
			var ve *audit.VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("Verify after tampering = %v (%T), want an *audit.VerifyError", err, err)
			}
			if ve.Seq != c.wantSeq {
				t.Fatalf("Verify after tampering names event %d (%v), want event %d", ve.Seq, ve, c.wantSeq)
			}
			t.Logf("Verify: %v", ve)
		})
	}
}

// BenchmarkSealAudit measures how many events a seal stores per second, with internal/audit's
// seal and an Ed25519 key, in batches of the server's size (1000).
func BenchmarkSealAudit(b *testing.B) {
	const batch = 1000
	db := newStore(b, clock.Real{})
	signer, err := audit.LoadOrCreateKey(filepath.Join(b.TempDir(), "audit.key"), "ag-bench")
	if err != nil {
		b.Fatalf("LoadOrCreateKey: %v", err)
	}
	ctx := b.Context()
	// b.N pending events, written by 8 writers so that their commits are grouped.
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if _, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "build", MaxAttempts: 3, EnqueuedBy: "bench"}); err != nil {
					b.Errorf("EnqueueJob: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	seal := signer.SealFunc(time.Now)
	b.ResetTimer()
	sealed := 0
	for sealed < b.N {
		n, err := db.SealAudit(ctx, store.SealAuditParams{Limit: batch, Seal: seal})
		if err != nil || n == 0 {
			b.Fatalf("SealAudit = %d, %v; want events sealed (%d of %d so far)", n, err, sealed, b.N)
		}
		sealed += n
	}
	b.StopTimer()
	b.ReportMetric(float64(sealed)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkClaimCompleteSealed is BenchmarkClaimComplete with the audit log sealed as the server
// seals it meanwhile: a sealer woken by every commit that wrote events.
func BenchmarkClaimCompleteSealed(b *testing.B) {
	signer, err := audit.LoadOrCreateKey(filepath.Join(b.TempDir(), "audit.key"), "ag-bench")
	if err != nil {
		b.Fatalf("LoadOrCreateKey: %v", err)
	}
	ctx, stop := context.WithCancel(b.Context())
	var sealer sync.WaitGroup
	defer sealer.Wait()
	defer stop()
	storetest.BenchmarkClaimComplete(b, func(tb testing.TB, clk clock.Clock) store.Store {
		st := newStore(tb, clk)
		seal := signer.SealFunc(time.Now)
		sealer.Go(func() {
			for {
				wake := st.AuditSignal()
				for {
					n, err := st.SealAudit(ctx, store.SealAuditParams{Limit: 1000, Seal: seal})
					if err != nil || n < 1000 {
						break
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-wake:
				}
			}
		})
		return st
	})
}

// TestAuditSealStopsWhenTheHeadsEventIsGone ensures that after the newest sealed event was
// deleted from the file, whose id a new event could take again, a seal fails loudly instead of
// skipping events.
func TestAuditSealStopsWhenTheHeadsEventIsGone(t *testing.T) {
	t.Parallel()
	l := newTamperLog(t)
	l.tamper(t, `DELETE FROM audit_events WHERE seq = 12`)
	db, err := sqlite.Open(t.Context(), l.path, store.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer db.Close()
	if _, _, err := db.EnqueueJob(t.Context(), store.EnqueueJobParams{Kind: "build", MaxAttempts: 1}); err != nil {
		t.Fatalf("EnqueueJob: %v", err)
	}
	seal := func(store.AuditHead, []store.AuditEvent, func([]int64) ([][]byte, error)) (store.AuditSeal, error) {
		t.Errorf("Seal was called on a log whose head's event is gone")
		return store.AuditSeal{}, errors.New("no seal")
	}
	if n, err := db.SealAudit(t.Context(), store.SealAuditParams{Limit: 10, Seal: seal}); err == nil {
		t.Fatalf("SealAudit of a log whose head's event was deleted = %d, nil; want an error", n)
	} else {
		t.Logf("SealAudit: %v", err)
	}
}
