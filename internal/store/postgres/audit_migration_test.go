package postgres_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/postgres"
	"github.com/ag-coord/ag/internal/store/storetest"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// oldLayoutEvents are events as the writers of schema 4 stored them, with what tries a copy:
// details spaced and with numbers in forms a JSON parser would rewrite, strings to escape,
// no details, times before 1970 and with microseconds. Their ids leave gaps, as rolled back
// inserts do.
func oldLayoutEvents() []store.AuditEvent {
	odd := "quote \" backslash \\ newline \n tab \t \x01 <&> é 世 \u2028"
	at := time.Date(2024, 2, 29, 23, 59, 58, 123456000, time.UTC)
	events := []store.AuditEvent{
		{Principal: "admin", Action: "principal.created", Subject: "principal/bob", Details: []byte(`{"role":"worker"}`)},
		{Principal: "admin", Action: "token.created", Subject: "token/tok_1", Details: []byte(`{"principal":"bob"}`)},
		{Principal: "admin", Action: "repository.created", Subject: "repository/r",
			Details: []byte(`{"validation": {"n": 1e2, "timeout" : 1.50, "z": [-0, 0.0E-0, "\u00e9\/"], "a": {}}}`)},
		{Principal: "bob", Holder: "bob|w1", Action: "job.claimed", Subject: "job/job_1",
			Details: []byte(`{"claim":1,"lease_expires_at":"2024-02-29T23:59:59.123456Z"}`), Time: at.Add(-time.Microsecond)},
		{Principal: "admin", Action: "job.cancelled", Subject: "job/job_2"},
		{Principal: odd, Holder: odd + "|" + odd, Action: "job.failed", Subject: "job/" + odd,
			Details: []byte(`{"claim":1,"error":"it \"broke\"\n\u2028","state":"queued"}`)},
		{Principal: "ag", Action: "job.expired", Subject: "job/job_3", Details: []byte(`{"claim":3,"state":"failed"}`),
			Time: time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC)},
		{Principal: "ag", Action: "job.expired", Subject: "job/job_4", Details: []byte(`{"claim":3,"state":"failed"}`),
			Time: time.Unix(0, 0).UTC()},
		{Principal: "bob", Holder: "bob|w1", Action: "lease.granted", Subject: "lease/lse_1",
			Details: []byte("{\"expires_at\":\"2024-03-01T00:00:00.000001Z\",\n\t\"paths\":[\"a.go\",\"src/\"],\"repository\":\"r\",\"token\":1}")},
		// Pending.
		{Principal: "bob", Holder: "bob|w1", Action: "lease.released", Subject: "lease/lse_1", Details: []byte(`{"token": 1}`)},
		{Principal: "admin", Action: "principal.disabled", Subject: "principal/bob"},
	}
	for i := range events {
		events[i].ID = int64(3*i + 2)
		if events[i].Time.IsZero() {
			events[i].Time = at.Add(time.Duration(i) * time.Second)
		}
	}
	return events
}

// writeOldLayoutLog stores events in the tables of schema 4, as its store did: the first sealed
// in seals of the sizes given (tree hashes, head and checkpoints too), the others pending. It
// answers the sealed events and the last checkpoint.
func writeOldLayoutLog(t *testing.T, url string, signer *audit.Signer, events []store.AuditEvent, seals ...int) ([]store.AuditEvent, store.AuditCheckpoint) {
	t.Helper()
	ctx := t.Context()
	conn := connect(t, url)
	tree := map[int64][]byte{}
	readTree := treeReader(tree)
	var head store.AuditHead
	var sealed []store.AuditEvent
	var cp store.AuditCheckpoint
	for _, n := range seals {
		s, err := signer.SealFunc(time.Now)(head, events[len(sealed):len(sealed)+n], readTree)
		if err != nil {
			t.Fatal(err)
		}
		for idx, h := range storetest.SealTreeHashes(head, s) {
			tree[idx] = h
			if _, err := conn.Exec(ctx, `INSERT INTO audit_tree_hashes (idx, hash) VALUES ($1, $2)`, idx, h); err != nil {
				t.Fatal(err)
			}
		}
		cp = s.Checkpoint
		if _, err := conn.Exec(ctx, `INSERT INTO audit_checkpoints (size, root_hash, head_hash, note, created_at) VALUES ($1, $2, $3, $4, $5)`,
			int64(cp.Size), cp.RootHash, cp.HeadHash, cp.Note, cp.CreatedAt); err != nil {
			t.Fatal(err)
		}
		sealed = append(sealed, storetest.SealedEvents(head, events[len(sealed):len(sealed)+n], s)...)
		head = s.Head
	}
	if _, err := conn.Exec(ctx, `UPDATE audit_head SET size = $1, hash = $2`, int64(head.Size), head.Hash); err != nil {
		t.Fatal(err)
	}
	for i, e := range events {
		var seq *int64
		var prev, hash []byte
		if i < len(sealed) {
			e = sealed[i]
			s := int64(e.Seq)
			seq, prev, hash = &s, e.PrevHash, e.Hash
		}
		var details *string
		if e.Details != nil {
			d := string(e.Details)
			details = &d
		}
		if _, err := conn.Exec(ctx, `INSERT INTO audit_events (id, time, principal, holder, action, subject, details, seq, prev_hash, hash)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			e.ID, e.Time, e.Principal, e.Holder, e.Action, e.Subject, details, seq, prev, hash); err != nil {
			t.Fatal(err)
		}
	}
	return sealed, cp
}

// treeReader answers a reader of the stored tree hashes in tree.
func treeReader(tree map[int64][]byte) func(indexes []int64) ([][]byte, error) {
	return func(indexes []int64) ([][]byte, error) {
		out := make([][]byte, len(indexes))
		for i, x := range indexes {
			if out[i] = tree[x]; out[i] == nil {
				return nil, fmt.Errorf("tree hash %d: %w", x, store.ErrNotFound)
			}
		}
		return out, nil
	}
}

// sameLogAfterMigration checks that db, just migrated, lists exactly the events sealed before,
// and that they verify against the last checkpoint signed before.
func sameLogAfterMigration(t *testing.T, db *postgres.DB, signer *audit.Signer, sealed []store.AuditEvent, cp store.AuditCheckpoint) {
	t.Helper()
	got := allEvents(t, db)
	if len(got) != len(sealed) {
		t.Fatalf("%d events listed after the migration, want the %d sealed before", len(got), len(sealed))
	}
	for i := range got {
		if diff := sameEvent(got[i], sealed[i]); diff != "" {
			t.Errorf("event %d after the migration: %s", i+1, diff)
		}
	}
	note, err := audit.OpenCheckpoint(cp.Note, signer.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := audit.Verify(got, note); err != nil {
		t.Fatalf("Verify of the migrated log against its checkpoint: %v", err)
	}
}

// sealPendingThenNew writes new events into db, just migrated, seals everything and checks that
// the log verifies and that its events after the first sealed ones are the records pending at
// the migration, in order (their ids renumbered after every id up to greatest), then new ones.
func sealPendingThenNew(t *testing.T, db *postgres.DB, signer *audit.Signer, sealed int, pending []store.AuditEvent, greatest int64) {
	t.Helper()
	if err := writeSome(t.Context(), db, "carol"); err != nil {
		t.Fatal(err)
	}
	sealAll(t, db, signer, 2)
	if err := verify(t, db, signer); err != nil {
		t.Fatalf("Verify after sealing on: %v", err)
	}
	all := allEvents(t, db)
	if len(all) <= sealed+len(pending) {
		t.Fatalf("%d events sealed in all; want the new ones after the %d old", len(all), sealed+len(pending))
	}
	for i, want := range pending {
		e := all[sealed+i]
		want.Seq, want.PrevHash, want.Hash = e.Seq, e.PrevHash, e.Hash
		want.ID = renumbered(t, e, all[sealed+i-1], greatest)
		if diff := sameEvent(e, want); diff != "" {
			t.Errorf("the record pending at the migration, sealed as event %d: %s", e.Seq, diff)
		}
	}
	for _, e := range all[sealed+len(pending):] {
		if e.Principal != "carol" && e.Principal != "admin" && e.Principal != store.SystemPrincipal {
			t.Errorf("event %d after the old ones is %s by %s; want one writeSome wrote", e.Seq, e.Action, e.Principal)
		}
	}
}

// renumbered answers the id of e, a record pending at migration 8, after checking that the
// migration gave it one after every id before it (greatest) and after that of the event
// sealed before it, prev: the pending records keep their order and follow every other.
func renumbered(t *testing.T, e, prev store.AuditEvent, greatest int64) int64 {
	t.Helper()
	if e.ID <= greatest || e.ID <= prev.ID {
		t.Errorf("the pending record sealed as event %d has id %d; want one after %d and after the record before it (%d)",
			e.Seq, e.ID, greatest, prev.ID)
	}
	return e.ID
}

// sameEvent answers how got differs from want, or "".
func sameEvent(got, want store.AuditEvent) string {
	switch {
	case got.ID != want.ID || got.Seq != want.Seq:
		return fmt.Sprintf("id %d seq %d, want id %d seq %d", got.ID, got.Seq, want.ID, want.Seq)
	case !got.Time.Equal(want.Time):
		return fmt.Sprintf("time %s, want %s", got.Time.Format(time.RFC3339Nano), want.Time.Format(time.RFC3339Nano))
	case got.Principal != want.Principal || got.Holder != want.Holder || got.Action != want.Action || got.Subject != want.Subject:
		return fmt.Sprintf("%q %q %q %q, want %q %q %q %q", got.Principal, got.Holder, got.Action, got.Subject,
			want.Principal, want.Holder, want.Action, want.Subject)
	case !bytes.Equal(got.Details, want.Details) || (got.Details == nil) != (want.Details == nil):
		return fmt.Sprintf("details %q, want %q", got.Details, want.Details)
	case !bytes.Equal(got.PrevHash, want.PrevHash) || !bytes.Equal(got.Hash, want.Hash):
		return fmt.Sprintf("hashes %x %x, want %x %x", got.PrevHash, got.Hash, want.PrevHash, want.Hash)
	}
	return ""
}

// oldSchemaLog makes a database of schema 4 holding a log in its layout (oldLayoutEvents, sealed
// by two signed seals of 4 and 5 events, the rest pending) and answers its URL, the signer, the
// sealed events and the last checkpoint.
func oldSchemaLog(t *testing.T) (string, *audit.Signer, []store.AuditEvent, store.AuditCheckpoint) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	if err := postgres.MigrateTo(t.Context(), url, 4); err != nil {
		t.Fatalf("migrate to schema 4: %v", err)
	}
	signer := newSigner(t)
	sealed, cp := writeOldLayoutLog(t, url, signer, oldLayoutEvents(), 4, 5)
	return url, signer, sealed, cp
}

// TestMigrationToAuditRecordsKeepsTheLog ensures that a log of schema 4 (a row per event and per
// tree hash) migrated to audit records answers the same events, byte for byte, which verify
// against the old checkpoint; and that the log goes on: its pending events and new ones are
// sealed after them into a log that verifies and whose stored tree hashes prove it.
func TestMigrationToAuditRecordsKeepsTheLog(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url, signer, sealed, oldCP := oldSchemaLog(t)
	old := oldLayoutEvents()
	const oldSealed = 9

	db := open(t, url, nil)
	if err := db.Ready(ctx); err != nil {
		t.Fatalf("Ready after the migration: %v", err)
	}
	if len(sealed) != oldSealed {
		t.Fatalf("%d events sealed before the migration, want %d", len(sealed), oldSealed)
	}
	sameLogAfterMigration(t, db, signer, sealed, oldCP)
	if cp, err := db.LatestAuditCheckpoint(ctx); err != nil || !bytes.Equal(cp.Note, oldCP.Note) {
		t.Fatalf("LatestAuditCheckpoint after the migration = %q, %v; want the old one", cp.Note, err)
	}

	// The log goes on: the old pending events are sealed first, then new records, in seals of
	// several records and several blocks of tree hashes.
	if err := writeSome(ctx, db, "carol"); err != nil {
		t.Fatal(err)
	}
	sealAll(t, db, signer, 3)
	if err := verify(t, db, signer); err != nil {
		t.Fatalf("Verify after sealing on: %v", err)
	}
	events := allEvents(t, db)
	for i, want := range old[oldSealed:] {
		e := events[oldSealed+i]
		want.Seq, want.PrevHash, want.Hash = e.Seq, e.PrevHash, e.Hash
		want.ID = renumbered(t, e, events[oldSealed+i-1], old[len(old)-1].ID)
		if diff := sameEvent(e, want); diff != "" {
			t.Errorf("the old pending event %d: %s", e.Seq, diff)
		}
	}
	if next := events[len(old)]; next.ID <= old[len(old)-1].ID {
		t.Errorf("a new record got id %d, not after the old events' %d", next.ID, old[len(old)-1].ID)
	}

	cp, err := db.LatestAuditCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Size != uint64(len(events)) {
		t.Fatalf("the checkpoint covers %d events of %d", cp.Size, len(events))
	}
	hashes := func(indexes []int64) ([][]byte, error) { return db.ReadAuditHashes(ctx, indexes) }
	root, err := tlog.TreeHash(int64(cp.Size), tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		raw, err := hashes(indexes)
		out := make([]tlog.Hash, len(raw))
		for i, h := range raw {
			out[i] = tlog.Hash(h)
		}
		return out, err
	}))
	if err != nil || !bytes.Equal(root[:], cp.RootHash) {
		t.Fatalf("the tree hash of the stored hashes = %x, %v; want the checkpoint's root %x", root, err, cp.RootHash)
	}
	for _, e := range events {
		proof, err := audit.InclusionProof(e.Seq, cp.Size, hashes)
		if err != nil {
			t.Fatal(err)
		}
		canonical, err := audit.Canonical(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := audit.CheckInclusion(proof, cp.Size, root, e.Seq, canonical); err != nil {
			t.Fatalf("the inclusion proof of event %d: %v", e.Seq, err)
		}
	}
	proof, err := audit.ConsistencyProof(oldCP.Size, cp.Size, hashes)
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.CheckConsistency(proof, oldCP.Size, tlog.Hash(oldCP.RootHash), cp.Size, root); err != nil {
		t.Fatalf("the consistency proof from the old checkpoint: %v", err)
	}
	beyond := tlog.StoredHashCount(int64(cp.Size))
	if _, err := db.ReadAuditHashes(ctx, []int64{0, beyond}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReadAuditHashes of index %d, not stored = %v; want ErrNotFound", beyond, err)
	}
}

// TestReplicasOfTheOldSchemaKeepWorkingDuringARollout runs the audit statements of the build
// before schema 5 against a migrated database, as a replica not yet stopped would: its reads
// answer the events and tree hashes the new build answers, its events are recorded and sealed
// by the new build, and its sealer fails without changing anything.
func TestReplicasOfTheOldSchemaKeepWorkingDuringARollout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url, signer, _, _ := oldSchemaLog(t)
	db := open(t, url, nil)
	if err := writeSome(ctx, db, "carol"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "test", MaxAttempts: 1, EnqueuedBy: "admin"}); err != nil {
			t.Fatal(err)
		}
	}
	if jobs, err := db.ClaimJobs(ctx, store.ClaimJobParams{Holder: "carol|w", Kinds: []string{"test"}, Lease: time.Minute, Max: 3}); err != nil || len(jobs) != 3 {
		t.Fatalf("ClaimJobs = %d jobs, %v; want 3, written as one record", len(jobs), err)
	}
	sealAll(t, db, signer, 3)
	conn := connect(t, url)

	// The old build's write of an event, in a statement of its own as its CTEs do.
	if _, err := conn.Exec(ctx, `WITH ev AS (INSERT INTO audit_events (time, principal, holder, action, subject, details)
		SELECT now(), 'dave', 'dave|w1', 'job.enqueued', 'job/old-build', '{ "kind" : "build" }')
		SELECT 1`); err != nil {
		t.Fatalf("an insert of the old build: %v", err)
	}
	// Its sealer: reading the pending events works, storing the seal does not.
	var pending int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT id, time, principal, holder, action, subject, details
		FROM audit_events WHERE seq IS NULL ORDER BY id LIMIT 1000) p`).Scan(&pending); err != nil || pending != 1 {
		t.Fatalf("the old build's read of pending events = %d, %v; want the one it wrote", pending, err)
	}
	if _, err := conn.Exec(ctx, `UPDATE audit_events SET seq = 1000 WHERE seq IS NULL`); err == nil {
		t.Fatalf("the old build's seal updated the view of the events")
	}
	sealAll(t, db, signer, 100)
	if err := verify(t, db, signer); err != nil {
		t.Fatalf("Verify after sealing the old build's event: %v", err)
	}
	events := allEvents(t, db)
	last := events[len(events)-1]
	if last.Subject != "job/old-build" || last.Holder != "dave|w1" || string(last.Details) != `{ "kind" : "build" }` {
		t.Fatalf("the last event is %s by %s with %s, want the old build's, details as written", last.Subject, last.Holder, last.Details)
	}

	// Its reads: the events page and the tree hashes, as the new build answers them.
	rows, err := conn.Query(ctx, `SELECT id, seq, time, principal, holder, action, subject, details, prev_hash, hash
		FROM audit_events WHERE seq > $1 ORDER BY seq LIMIT $2`, 0, 1000)
	if err != nil {
		t.Fatalf("the old build's list of events: %v", err)
	}
	var old []store.AuditEvent
	for rows.Next() {
		var (
			e       store.AuditEvent
			seq     int64
			details *string
		)
		if err := rows.Scan(&e.ID, &seq, &e.Time, &e.Principal, &e.Holder, &e.Action, &e.Subject, &details, &e.PrevHash, &e.Hash); err != nil {
			t.Fatal(err)
		}
		e.Seq, e.Time = uint64(seq), e.Time.UTC()
		if details != nil {
			e.Details = []byte(*details)
		}
		old = append(old, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(old) != len(events) {
		t.Fatalf("the old build lists %d events, the new %d", len(old), len(events))
	}
	for i := range old {
		if diff := sameEvent(old[i], events[i]); diff != "" {
			t.Fatalf("event %d as the old build reads it: %s", i+1, diff)
		}
	}
	cp, err := db.LatestAuditCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	count := tlog.StoredHashCount(int64(cp.Size))
	indexes := make([]int64, count)
	for i := range indexes {
		indexes[i] = int64(i)
	}
	want, err := db.ReadAuditHashes(ctx, indexes)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	if err := conn.QueryRow(ctx, `SELECT array_agg(h.hash ORDER BY u.n) FROM unnest($1::bigint[]) WITH ORDINALITY AS u(idx, n)
		LEFT JOIN audit_tree_hashes h ON h.idx = u.idx`, indexes).Scan(&got); err != nil {
		t.Fatalf("the old build's read of tree hashes: %v", err)
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("tree hash %d as the old build reads it is %x, want %x", i, got[i], want[i])
		}
	}
}

// TestMigrationToSealsBesideRecordsKeepsTheLog ensures that a log of schema 5 (each sealed
// record's place and hashes in its own row, a record per transaction) migrated to seals beside
// the records answers the same events, which verify against the old checkpoint; that the records
// pending at the migration are sealed next, in id order, even one whose id is below those of
// sealed records (ids are not in commit order); and that the log goes on after them.
func TestMigrationToSealsBesideRecordsKeepsTheLog(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	if err := postgres.MigrateTo(ctx, url, 5); err != nil {
		t.Fatalf("migrate to schema 5: %v", err)
	}
	signer := newSigner(t)
	conn := connect(t, url)

	// A record per event, by its id; the third (id 8) committed late and still pending, after
	// two seals of the others.
	events := oldLayoutEvents()
	pending := []store.AuditEvent{events[2], events[9], events[10]}
	order := append(append([]store.AuditEvent{}, events[:2]...), events[3:9]...)
	for _, e := range events {
		var r store.AuditRecordBuilder
		r.Add(e.Time.UnixMicro(), store.Actor{Principal: e.Principal, Holder: e.Holder}, e.Action, e.Subject, e.Details)
		if _, err := conn.Exec(ctx, `INSERT INTO audit_records (id, events) VALUES ($1, $2)`, e.ID, r.Text()); err != nil {
			t.Fatal(err)
		}
	}
	// As the store would have: its inserts take ids from the sequence.
	if _, err := conn.Exec(ctx, `SELECT setval(pg_get_serial_sequence('audit_records', 'id'), max(id)) FROM audit_records`); err != nil {
		t.Fatal(err)
	}
	tree := map[int64][]byte{}
	readTree := treeReader(tree)
	var (
		head   store.AuditHead
		sealed []store.AuditEvent
		oldCP  store.AuditCheckpoint
	)
	for _, n := range []int{3, 5} {
		batch := order[len(sealed) : len(sealed)+n]
		s, err := signer.SealFunc(time.Now)(head, batch, readTree)
		if err != nil {
			t.Fatal(err)
		}
		first, block := int64(-1), []byte{}
		for idx, h := range storetest.SealTreeHashes(head, s) {
			if first < 0 {
				first = idx
			}
			tree[idx] = h
			block = append(block, h...)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO audit_tree_blocks (first, hashes) VALUES ($1, $2)`, first, block); err != nil {
			t.Fatal(err)
		}
		for _, e := range storetest.SealedEvents(head, batch, s) {
			if _, err := conn.Exec(ctx, `UPDATE audit_records SET seq = $2, prev_hash = $3, hashes = $4 WHERE id = $1`,
				e.ID, int64(e.Seq), e.PrevHash, e.Hash); err != nil {
				t.Fatal(err)
			}
			sealed = append(sealed, e)
		}
		oldCP = s.Checkpoint
		if _, err := conn.Exec(ctx, `INSERT INTO audit_checkpoints (size, root_hash, head_hash, note, created_at) VALUES ($1, $2, $3, $4, $5)`,
			int64(oldCP.Size), oldCP.RootHash, oldCP.HeadHash, oldCP.Note, oldCP.CreatedAt); err != nil {
			t.Fatal(err)
		}
		head = s.Head
	}
	if _, err := conn.Exec(ctx, `UPDATE audit_head SET size = $1, hash = $2`, int64(head.Size), head.Hash); err != nil {
		t.Fatal(err)
	}

	db := open(t, url, nil)
	sameLogAfterMigration(t, db, signer, sealed, oldCP)

	// The pending records are sealed first, in the order they were written, then new ones.
	sealPendingThenNew(t, db, signer, len(sealed), pending, events[len(events)-1].ID)
}

// TestMigrationToIDOrderSealsPendingRecordsInTheOrderBefore ensures that the records pending
// when a log of schema 7 (sealed in the order of the transactions that wrote them) is migrated
// to id order are sealed next in the order schema 7 would have sealed them, though their ids
// are in another, and before every record written after the migration.
func TestMigrationToIDOrderSealsPendingRecordsInTheOrderBefore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	if err := postgres.MigrateTo(ctx, url, 7); err != nil {
		t.Fatalf("migrate to schema 7: %v", err)
	}
	signer := newSigner(t)
	conn := connect(t, url)

	// Two sealed records, then three pending ones whose transactions (xids) run in another
	// order than their ids.
	events := oldLayoutEvents()[:5]
	places := []struct {
		xid string
		id  int64
	}{{"5", 1}, {"5", 2}, {"7", 4}, {"8", 3}, {"9", 6}}
	for i, e := range events {
		var r store.AuditRecordBuilder
		r.Add(e.Time.UnixMicro(), store.Actor{Principal: e.Principal, Holder: e.Holder}, e.Action, e.Subject, e.Details)
		if _, err := conn.Exec(ctx, `INSERT INTO audit_records (xid, id, events) VALUES ($1::xid8, $2, $3)`,
			places[i].xid, places[i].id, r.Text()); err != nil {
			t.Fatal(err)
		}
		events[i].ID = places[i].id
	}
	if _, err := conn.Exec(ctx, `SELECT setval(pg_get_serial_sequence('audit_records', 'id'), 6)`); err != nil {
		t.Fatal(err)
	}
	tree := map[int64][]byte{}
	s, err := signer.SealFunc(time.Now)(store.AuditHead{}, events[:2], treeReader(tree))
	if err != nil {
		t.Fatal(err)
	}
	first, block := int64(-1), []byte{}
	for idx, h := range storetest.SealTreeHashes(store.AuditHead{}, s) {
		if first < 0 {
			first = idx
		}
		block = append(block, h...)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO audit_tree_blocks (first, hashes) VALUES ($1, $2)`, first, block); err != nil {
		t.Fatal(err)
	}
	sealed := storetest.SealedEvents(store.AuditHead{}, events[:2], s)
	for i, e := range sealed {
		if _, err := conn.Exec(ctx, `INSERT INTO audit_seals (seq, record_xid, record_id, prev_hash, hashes) VALUES ($1, $2::xid8, $3, $4, $5)`,
			int64(e.Seq), places[i].xid, e.ID, e.PrevHash, e.Hash); err != nil {
			t.Fatal(err)
		}
	}
	cp := s.Checkpoint
	if _, err := conn.Exec(ctx, `INSERT INTO audit_checkpoints (size, root_hash, head_hash, note, created_at) VALUES ($1, $2, $3, $4, $5)`,
		int64(cp.Size), cp.RootHash, cp.HeadHash, cp.Note, cp.CreatedAt); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE audit_head SET size = $1, hash = $2, last_xid = '5', last_id = 2`,
		int64(s.Head.Size), s.Head.Hash); err != nil {
		t.Fatal(err)
	}

	db := open(t, url, nil)
	sameLogAfterMigration(t, db, signer, sealed, cp)
	sealPendingThenNew(t, db, signer, len(sealed), events[2:], 6)
}
