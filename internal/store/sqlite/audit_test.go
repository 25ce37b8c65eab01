package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
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

// newTamperLog writes a log of 18 events of several kinds to a new file, seals it in two
// batches (events 1-5 and 6-18) with a real audit key, and closes the store. Its records (one
// per transaction) are [1 2] [3 4] [5] [6] [7] ... [15] [16 17 18]: a principal is created with
// its token, and the last three events are one ClaimJobs call's.
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
	if _, err := db.ClaimJob(ctx, store.ClaimJobParams{Holder: "runner|w1", Lease: time.Minute}); err != nil { // 6
		t.Fatalf("ClaimJob: %v", err)
	}
	if _, err := db.CompleteJob(ctx, store.CompleteJobParams{JobID: job.ID, Holder: "runner|w1", OutputDigest: "sha256:0"}); err != nil { // 7
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
	for range 3 { // 13-15
		if _, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "test", MaxAttempts: 1, EnqueuedBy: "alice"}); err != nil {
			t.Fatalf("EnqueueJob: %v", err)
		}
	}
	if jobs, err := db.ClaimJobs(ctx, store.ClaimJobParams{Holder: "runner|w2", Lease: time.Minute, Max: 3}); err != nil || len(jobs) != 3 { // 16-18
		t.Fatalf("ClaimJobs = %d jobs, %v; want 3", len(jobs), err)
	}
	seal()

	log := tamperLog{path: path, key: signer.VerifierKey()}
	log.events, err = db.ListAuditEvents(ctx, store.ListAuditEventsParams{Limit: 1000})
	if err != nil || len(log.events) != 18 {
		t.Fatalf("ListAuditEvents = %d events, %v; want 18", len(log.events), err)
	}
	var records []string
	for i, e := range log.events {
		if i == 0 || e.ID != log.events[i-1].ID {
			records = append(records, "")
		}
		records[len(records)-1] += fmt.Sprint(" ", e.Seq)
	}
	if got := fmt.Sprint(records); got != "[ 1 2  3 4  5  6  7  8  9  10  11  12  13  14  15  16 17 18]" {
		t.Fatalf("the log's records hold the events %s, want one record per transaction", got)
	}
	return log
}

// at answers where event seq is stored: the seq of its record (its first event's) and its index
// in the record's array.
func (l tamperLog) at(seq uint64) (record uint64, index int) {
	e := l.events[seq-1]
	for _, f := range l.events {
		if f.ID == e.ID {
			return f.Seq, int(seq - f.Seq)
		}
	}
	panic("no event " + fmt.Sprint(seq))
}

// edit answers the statement that sets the member key of event seq to the SQL value.
func (l tamperLog) edit(seq uint64, key, value string) string {
	r, i := l.at(seq)
	return fmt.Sprintf(`UPDATE audit_records SET events = json_set(events, '$[%d].%s', %s) WHERE %s`, i, key, value, recordOf(r))
}

// recordOf answers the SQL condition on audit_records that selects the record whose first
// event is seq.
func recordOf(seq uint64) string {
	return fmt.Sprintf(`id = (SELECT record_id FROM audit_seals WHERE seq = %d)`, seq)
}

// deleteRecord answers the statements that delete the record whose first event is seq, and its
// seal.
func deleteRecord(seq uint64) []string {
	return []string{`DELETE FROM audit_records WHERE ` + recordOf(seq), fmt.Sprintf(`DELETE FROM audit_seals WHERE seq = %d`, seq)}
}

// insertRecord answers the statements that insert a record of the events r holds, sealed as seq
// with the hashes given.
func insertRecord(r *store.AuditRecordBuilder, seq uint64, prevHash, hashes []byte) []string {
	return []string{fmt.Sprintf(`INSERT INTO audit_records (events) VALUES ('%s')`, r.Text()),
		fmt.Sprintf(`INSERT INTO audit_seals (seq, record_id, prev_hash, hashes) VALUES (%d, (SELECT max(id) FROM audit_records), x'%x', x'%x')`,
			seq, prevHash, hashes)}
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
		return err
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

// chain answers the statements that store events, from the first one's record on, with their
// hashes recomputed after edits: each record's prev_hash and hashes.
func chain(prev []byte, events []store.AuditEvent) []string {
	var stmts []string
	for i := 0; i < len(events); {
		first, hashes := events[i], []byte{}
		recordPrev := prev
		for ; i < len(events) && events[i].ID == first.ID; i++ {
			canonical, err := audit.Canonical(events[i])
			if err != nil {
				panic(err)
			}
			prev = audit.ChainHash(prev, canonical)
			hashes = append(hashes, prev...)
		}
		stmts = append(stmts, fmt.Sprintf(`UPDATE audit_seals SET prev_hash = x'%x', hashes = x'%x' WHERE seq = %d`, recordPrev, hashes, first.Seq))
	}
	return stmts
}

// TestAuditTamperingIsDetected edits a sealed log in its file in each way an attacker with the
// file could, and checks that verification fails naming the first event that does not verify.
func TestAuditTamperingIsDetected(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// sql answers the statements that tamper with log (see newTamperLog).
		sql     func(l tamperLog) []string
		wantSeq uint64
	}{
		// The time is set, not computed in SQL: an event that shares its time with the one
		// before it has none of its own in the record.
		{"edit_an_events_time", func(l tamperLog) []string {
			return []string{l.edit(7, "t", fmt.Sprint(l.events[6].Time.UnixMicro()+1000000))}
		}, 7},
		{"edit_an_events_time_by_a_microsecond", func(l tamperLog) []string {
			return []string{l.edit(2, "t", fmt.Sprint(l.events[1].Time.UnixMicro()-1))}
		}, 2},
		{"edit_an_events_principal", func(l tamperLog) []string { return []string{l.edit(6, "p", `'mallory'`)} }, 6},
		{"edit_an_events_holder", func(l tamperLog) []string { return []string{l.edit(6, "h", `'runner|w2'`)} }, 6},
		{"edit_an_events_action", func(l tamperLog) []string { return []string{l.edit(7, "a", `'job.failed'`)} }, 7},
		{"edit_an_events_subject", func(l tamperLog) []string { return []string{l.edit(1, "s", `'principal/mallory'`)} }, 1},
		{"edit_an_events_details", func(l tamperLog) []string { return []string{l.edit(3, "d", `json('{"role":"admin"}')`)} }, 3},
		{"remove_an_events_details", func(l tamperLog) []string {
			r, i := l.at(9)
			return []string{fmt.Sprintf(`UPDATE audit_records SET events = json_remove(events, '$[%d].d') WHERE %s`, i, recordOf(r))}
		}, 9},
		{"edit_the_middle_event_of_a_record", func(l tamperLog) []string { return []string{l.edit(17, "s", `'job/job_forged'`)} }, 17},
		{"edit_the_last_event", func(l tamperLog) []string { return []string{l.edit(18, "p", `'mallory'`)} }, 18},
		{"delete_an_event_from_its_record", func(l tamperLog) []string {
			r, i := l.at(4)
			return []string{fmt.Sprintf(`UPDATE audit_records SET events = json_remove(events, '$[%d]') WHERE %s`, i, recordOf(r))}
		}, 4},
		{"delete_the_middle_event_of_a_record", func(l tamperLog) []string {
			return []string{`UPDATE audit_records SET events = json_remove(events, '$[1]') WHERE ` + recordOf(16)}
		}, 17},
		{"delete_a_record", func(tamperLog) []string {
			return deleteRecord(5)
		}, 5},
		{"delete_a_record_but_not_its_seal", func(tamperLog) []string {
			return deleteRecord(5)[:1]
		}, 5},
		{"delete_a_records_seal", func(tamperLog) []string {
			return []string{`DELETE FROM audit_seals WHERE seq = 5`}
		}, 5},
		{"delete_a_record_and_renumber_the_rest", func(tamperLog) []string {
			return append(deleteRecord(5),
				`UPDATE audit_seals SET seq = -(seq - 1) WHERE seq > 5`, `UPDATE audit_seals SET seq = -seq WHERE seq < 0`)
		}, 5},
		{"delete_the_last_record", func(tamperLog) []string {
			return deleteRecord(16)
		}, 16},
		{"insert_a_record_chained_to_the_one_before", func(l tamperLog) []string {
			// The inserted event is chained correctly to event 5, so it verifies by itself; the
			// event after it, the old event 6, no longer follows its predecessor.
			forged := l.events[5]
			forged.Seq, forged.Subject, forged.PrevHash = 6, "job/job_forged", l.events[4].Hash
			canonical, err := audit.Canonical(forged)
			if err != nil {
				panic(err)
			}
			var r store.AuditRecordBuilder
			r.Add(forged.Time.UnixMicro(), store.Actor{Principal: forged.Principal, Holder: forged.Holder}, forged.Action, forged.Subject, forged.Details)
			return append([]string{`UPDATE audit_seals SET seq = -(seq + 1) WHERE seq >= 6`, `UPDATE audit_seals SET seq = -seq WHERE seq < 0`},
				insertRecord(&r, 6, forged.PrevHash, audit.ChainHash(forged.PrevHash, canonical))...)
		}, 7},
		{"insert_a_record_with_a_made_up_seq", func(l tamperLog) []string {
			var r store.AuditRecordBuilder
			r.Add(0, store.Actor{Principal: "mallory"}, "principal.created", "principal/mallory", nil)
			return insertRecord(&r, 100, l.events[17].Hash, l.events[17].Hash)
		}, 19},
		{"swap_two_records_seq", func(tamperLog) []string {
			return []string{`UPDATE audit_seals SET seq = -seq WHERE seq IN (3, 8)`,
				`UPDATE audit_seals SET seq = CASE seq WHEN -3 THEN 8 ELSE 3 END WHERE seq IN (-3, -8)`}
		}, 3},
		{"swap_two_adjacent_records_seq", func(tamperLog) []string {
			return []string{`UPDATE audit_seals SET seq = -seq WHERE seq IN (10, 11)`,
				`UPDATE audit_seals SET seq = CASE seq WHEN -10 THEN 11 ELSE 10 END WHERE seq IN (-10, -11)`}
		}, 10},
		{"swap_two_events_of_a_record", func(tamperLog) []string {
			return []string{`UPDATE audit_records SET events = json_array(json_extract(events, '$[1]'), json_extract(events, '$[0]'), json_extract(events, '$[2]')) WHERE ` + recordOf(16)}
		}, 16},
		{"cut_a_records_hashes_short", func(tamperLog) []string {
			return []string{`UPDATE audit_seals SET hashes = substr(hashes, 1, 64) WHERE seq = 16`}
		}, 18},
		{"edit_an_event_and_rebuild_the_chain_after_it", func(l tamperLog) []string {
			// Every hash from the edited event on is recomputed: the chain verifies, but the
			// signed checkpoint names another head and root.
			events := slices.Clone(l.events[7:])
			events[0].Principal = "mallory"
			return append([]string{l.edit(8, "p", `'mallory'`)}, chain(l.events[6].Hash, events)...)
		}, 18},
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

// TestAuditUnreadableRecordIsNamed ensures that a record made unreadable in the file fails
// ListAuditEvents with an error naming the record's first event, rather than dropping it.
func TestAuditUnreadableRecordIsNamed(t *testing.T) {
	t.Parallel()
	l := newTamperLog(t)
	l.tamper(t, `UPDATE audit_records SET events = '[{"t":1,' WHERE `+recordOf(16))
	err := l.verify(t)
	if err == nil || !strings.Contains(err.Error(), "the audit record of event 16") {
		t.Fatalf("ListAuditEvents of a log with an unreadable record = %v, want an error naming event 16", err)
	}
	t.Logf("ListAuditEvents: %v", err)
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
	l.tamper(t, `DELETE FROM audit_records WHERE `+recordOf(16))
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
