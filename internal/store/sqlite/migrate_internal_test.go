package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/storetest"
)

// migrateTo applies the migrations up to version to the new file path, as a build of that
// version would have.
func migrateTo(t *testing.T, path string, version int) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", dsn(path, "_txlock", "immediate"))
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	if _, err := db.Exec(`CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatalf("create schema_version: %v", err)
	}
	for _, m := range migrations()[:version] {
		if _, err := db.Exec(m.sql); err != nil {
			t.Fatalf("apply %s: %v", m.name, err)
		}
		if _, err := db.Exec(`INSERT INTO schema_version (version, applied_at) VALUES (?, 0)`, m.version); err != nil {
			t.Fatalf("record %s: %v", m.name, err)
		}
	}
	return db
}

// TestMigrationToAuditRecordsKeepsTheLog writes an audit log in the layout of schema version 4
// (a row per event, a row per tree hash), sealed twice and with events still pending, then
// opens the file with this build: the sealed events must read back exactly as they were and
// verify against the old checkpoint, the pending ones must be sealed after them, and the whole
// log, with events written since, must verify, its Merkle root computed from the tree hashes
// the store keeps.
func TestMigrationToAuditRecordsKeepsTheLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "ag.db")
	signer, err := audit.LoadOrCreateKey(filepath.Join(dir, "audit.key"), "ag-test")
	if err != nil {
		t.Fatalf("LoadOrCreateKey: %v", err)
	}
	start := time.Date(2026, 11, 30, 18, 0, 0, 123456000, time.UTC)
	clk := clock.NewFake(start)
	old := migrateTo(t, path, 4)

	// Events as version 4 wrote them, details as written: spacing and number forms that a
	// JSON library would rewrite.
	details := []string{`{"role":"agent"}`, `{ "n" : 1e2, "s": "a\u00e9\"" }`, ``, `{"paths":["src/","a b"],"x":-0.50}`, `{}`}
	var events []store.AuditEvent
	for i := range 12 {
		e := store.AuditEvent{ID: int64(i + 1), Time: start.Add(time.Duration(i) * time.Second), Principal: "alice",
			Holder: fmt.Sprintf("alice|w%d", i%3), Action: "job.enqueued", Subject: fmt.Sprintf("job/j%d", i)}
		if i%4 == 1 {
			e.Holder = "" // an event without a holder
		}
		if d := details[i%len(details)]; d != "" {
			e.Details = []byte(d)
		}
		events = append(events, e)
		var det any
		if e.Details != nil {
			det = string(e.Details)
		}
		if _, err := old.Exec(`INSERT INTO audit_events (id, time, principal, holder, action, subject, details) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			e.ID, e.Time.UnixMicro(), e.Principal, e.Holder, e.Action, e.Subject, det); err != nil {
			t.Fatalf("insert event %d: %v", e.ID, err)
		}
	}
	// Two seals of the old layout: events 1-5, then 6-9; 10-12 stay pending.
	stored := map[int64][]byte{}
	head := store.AuditHead{}
	var cp store.AuditCheckpoint
	for _, batch := range [][2]int{{0, 5}, {5, 9}} {
		seal, err := signer.SealFunc(clk.Now)(head, events[batch[0]:batch[1]], func(indexes []int64) ([][]byte, error) {
			out := make([][]byte, len(indexes))
			for i, x := range indexes {
				out[i] = stored[x]
			}
			return out, nil
		})
		if err != nil {
			t.Fatalf("seal: %v", err)
		}
		for _, e := range storetest.SealedEvents(head, events[batch[0]:batch[1]], seal) {
			if _, err := old.Exec(`UPDATE audit_events SET seq = ?, prev_hash = ?, hash = ? WHERE id = ?`, e.Seq, e.PrevHash, e.Hash, e.ID); err != nil {
				t.Fatalf("seal event %d: %v", e.ID, err)
			}
			events[e.Seq-1] = e
		}
		for idx, h := range storetest.SealTreeHashes(head, seal) {
			stored[idx] = h
			if _, err := old.Exec(`INSERT INTO audit_tree_hashes (idx, hash) VALUES (?, ?)`, idx, h); err != nil {
				t.Fatalf("store tree hash %d: %v", idx, err)
			}
		}
		head, cp = seal.Head, seal.Checkpoint
		if _, err := old.Exec(`UPDATE audit_head SET size = ?, hash = ?, last_id = ?`, head.Size, head.Hash, batch[1]); err != nil {
			t.Fatalf("move the head: %v", err)
		}
		if _, err := old.Exec(`INSERT INTO audit_checkpoints (size, root_hash, head_hash, note, created_at) VALUES (?, ?, ?, ?, 0)`,
			cp.Size, cp.RootHash, cp.HeadHash, cp.Note); err != nil {
			t.Fatalf("store the checkpoint: %v", err)
		}
	}
	old.Close()

	db, err := Open(ctx, path, store.Options{Clock: clk})
	if err != nil {
		t.Fatalf("Open a version 4 file: %v", err)
	}
	defer db.Close()
	got, err := db.ListAuditEvents(ctx, store.ListAuditEventsParams{Limit: 100})
	if err != nil || len(got) != 9 {
		t.Fatalf("ListAuditEvents after the migration = %d events, %v; want the 9 sealed", len(got), err)
	}
	for i, e := range got {
		w := events[i]
		if e.Seq != w.Seq || !e.Time.Equal(w.Time) || e.Principal != w.Principal || e.Holder != w.Holder || e.Action != w.Action ||
			e.Subject != w.Subject || !bytes.Equal(e.Details, w.Details) || (e.Details == nil) != (w.Details == nil) ||
			!bytes.Equal(e.PrevHash, w.PrevHash) || !bytes.Equal(e.Hash, w.Hash) {
			t.Fatalf("event %d after the migration is\n  %+v\nwant\n  %+v", w.Seq, e, w)
		}
	}
	c, err := audit.OpenCheckpoint(cp.Note, signer.VerifierKey())
	if err != nil {
		t.Fatalf("OpenCheckpoint: %v", err)
	}
	if _, err := audit.Verify(got, c); err != nil {
		t.Fatalf("the migrated log does not verify against its old checkpoint: %v", err)
	}

	// The pending events are sealed after the sealed ones, then events written since.
	if _, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "build", MaxAttempts: 1, EnqueuedBy: "bob"}); err != nil {
		t.Fatalf("EnqueueJob: %v", err)
	}
	clk.Advance(time.Minute)
	sealed := 0
	for {
		n, err := db.SealAudit(ctx, store.SealAuditParams{Limit: 2, Seal: signer.SealFunc(clk.Now)})
		if err != nil {
			t.Fatalf("SealAudit after the migration: %v", err)
		}
		if n == 0 {
			break
		}
		sealed += n
	}
	if sealed != 4 {
		t.Fatalf("SealAudit after the migration sealed %d events, want the 3 pending and the new one", sealed)
	}
	all, err := db.ListAuditEvents(ctx, store.ListAuditEventsParams{Limit: 100})
	if err != nil || len(all) != 13 {
		t.Fatalf("ListAuditEvents = %d events, %v; want 13", len(all), err)
	}
	for i, e := range all[9:12] {
		if e.Subject != events[9+i].Subject || !bytes.Equal(e.Details, events[9+i].Details) {
			t.Fatalf("event %d is %s %s, want the pending event %s %s", e.Seq, e.Subject, e.Details, events[9+i].Subject, events[9+i].Details)
		}
	}
	if all[12].Action != "job.enqueued" || all[12].Principal != "bob" {
		t.Fatalf("event 13 is %s by %s, want the new job.enqueued by bob", all[12].Action, all[12].Principal)
	}
	latest, err := db.LatestAuditCheckpoint(ctx)
	if err != nil {
		t.Fatalf("LatestAuditCheckpoint: %v", err)
	}
	c, err = audit.OpenCheckpoint(latest.Note, signer.VerifierKey())
	if err != nil {
		t.Fatalf("OpenCheckpoint: %v", err)
	}
	if _, err := audit.Verify(all, c); err != nil {
		t.Fatalf("the log does not verify after sealing on the migrated file: %v", err)
	}
	root, err := tlog.TreeHash(13, tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		raw, err := db.ReadAuditHashes(ctx, indexes)
		if err != nil {
			return nil, err
		}
		out := make([]tlog.Hash, len(raw))
		for i, h := range raw {
			copy(out[i][:], h)
		}
		return out, nil
	}))
	if err != nil || !bytes.Equal(root[:], latest.RootHash) {
		t.Fatalf("the Merkle root from the store's tree hashes = %x, %v; want the checkpoint's %x", root, err, latest.RootHash)
	}
}
