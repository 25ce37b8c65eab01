package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/postgres"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// newSigner answers a fresh audit key.
func newSigner(t *testing.T) *audit.Signer {
	t.Helper()
	s, err := audit.LoadOrCreateKey(filepath.Join(t.TempDir(), "audit.key"), "ag-test")
	if err != nil {
		t.Fatalf("LoadOrCreateKey: %v", err)
	}
	return s
}

// sealAll seals until nothing is pending, limit events at a time, and answers how many it sealed.
func sealAll(t *testing.T, db *postgres.DB, signer *audit.Signer, limit int) int {
	t.Helper()
	total := 0
	for {
		n, err := db.SealAudit(t.Context(), store.SealAuditParams{Limit: limit, Seal: signer.SealFunc(time.Now)})
		if err != nil {
			t.Fatalf("SealAudit: %v", err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
}

// allEvents answers every sealed event, by seq.
func allEvents(t *testing.T, db *postgres.DB) []store.AuditEvent {
	t.Helper()
	var out []store.AuditEvent
	for {
		page, err := db.ListAuditEvents(t.Context(), store.ListAuditEventsParams{AfterSeq: uint64(len(out)), Limit: 10000})
		if err != nil {
			t.Fatalf("ListAuditEvents: %v", err)
		}
		if len(page) == 0 {
			return out
		}
		out = append(out, page...)
	}
}

// verify checks db's sealed log against its newest checkpoint, opened with signer's key.
func verify(t *testing.T, db *postgres.DB, signer *audit.Signer) error {
	t.Helper()
	cp, err := db.LatestAuditCheckpoint(t.Context())
	if err != nil {
		t.Fatalf("LatestAuditCheckpoint: %v", err)
	}
	c, err := audit.OpenCheckpoint(cp.Note, signer.VerifierKey())
	if err != nil {
		t.Fatalf("OpenCheckpoint: %v", err)
	}
	_, err = audit.Verify(allEvents(t, db), c)
	return err
}

// claim claims a job of kind for worker. Another claimer may take the job this one would have
// taken, while the one left for it is not committed yet when it looks: then it looks again.
func claim(ctx context.Context, db *postgres.DB, worker, kind string) (*store.Job, error) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for range 100 {
		j, err := db.ClaimJob(ctx, store.ClaimJobParams{Holder: worker, Kinds: []string{kind}, Lease: time.Minute})
		if err != nil || j != nil {
			return j, err
		}
		<-tick.C
	}
	return nil, errors.New("no job to claim")
}

// writeSome runs a few state changes of every kind of writer on db, as worker "<who>|w".
func writeSome(ctx context.Context, db *postgres.DB, who string) error {
	actx := store.WithActor(ctx, store.Actor{Principal: "admin"})
	if _, _, err := db.CreatePrincipal(actx, store.CreatePrincipalParams{Name: who, Role: store.RoleWorker,
		TokenID: store.NewID("tok"), TokenHash: []byte(store.NewID("hash"))}); err != nil {
		return fmt.Errorf("CreatePrincipal: %w", err)
	}
	worker := who + "|w"
	for i := range 3 {
		if _, _, err := db.EnqueueJob(actx, store.EnqueueJobParams{Kind: "build", MaxAttempts: 3, EnqueuedBy: "admin",
			UniqueKey: fmt.Sprintf("%s-%d", who, i)}); err != nil {
			return fmt.Errorf("EnqueueJob: %w", err)
		}
		j, err := claim(ctx, db, worker, "build")
		if err != nil {
			return fmt.Errorf("ClaimJob: %w", err)
		}
		if i == 1 {
			_, err = db.FailJob(ctx, store.FailJobParams{JobID: j.ID, Holder: worker, ClaimNumber: j.ClaimNumber,
				Error: "it \"broke\"\n<&>", Final: true})
		} else {
			_, err = db.CompleteJob(ctx, store.CompleteJobParams{JobID: j.ID, Holder: worker, ClaimNumber: j.ClaimNumber,
				Output: "ok", OutputDigest: "sha256:00"})
		}
		if err != nil {
			return fmt.Errorf("finishing job %s: %w", j.ID, err)
		}
	}
	repoName := "repo-" + who
	if _, err := db.CreateRepository(actx, store.CreateRepositoryParams{Name: repoName, CreatedBy: "admin",
		Validation: []byte(`{"kind": "validate", "timeout": 1.50}`)}); err != nil {
		return fmt.Errorf("CreateRepository: %w", err)
	}
	l, err := db.AcquireLease(actx, store.AcquireLeaseParams{Repository: repoName, Paths: []string{"a.go", "src/"},
		Holder: worker, TTL: time.Minute})
	if err != nil {
		return fmt.Errorf("AcquireLease: %w", err)
	}
	wctx := store.WithActor(ctx, store.Actor{Principal: who, Holder: worker})
	if _, err := db.ReleaseLease(wctx, store.ReleaseLeaseParams{LeaseID: l.ID, Principal: who}); err != nil {
		return fmt.Errorf("ReleaseLease: %w", err)
	}
	return nil
}

// TestTwoReplicasSealingAtOnceMakeOneChain ensures that sealers on two replicas, sealing in
// loops while writers on both write, give every event exactly one place: seqs 1..N each once,
// every prev_hash the hash before it, and checkpoints whose sizes grow with each seal, each
// stating the root and head of the events it covers.
func TestTwoReplicasSealingAtOnceMakeOneChain(t *testing.T) {
	url := pgtest.NewDatabase(t)
	dbs := []*postgres.DB{open(t, url, nil), open(t, url, nil)}
	signer := newSigner(t)
	ctx := t.Context()

	// The seals computed: from which head, of how many events. A seal computed from a head
	// that another sealer moved first is not stored, and computed again.
	type sealRun struct{ from, n uint64 }
	var mu sync.Mutex
	runs := map[sealRun]bool{}
	seal := signer.SealFunc(time.Now)
	recording := func(head store.AuditHead, pending []store.AuditEvent, hashes func([]int64) ([][]byte, error)) (store.AuditSeal, error) {
		s, err := seal(head, pending, hashes)
		if err == nil {
			mu.Lock()
			runs[sealRun{head.Size, uint64(len(pending))}] = true
			mu.Unlock()
		}
		return s, err
	}

	var writers sync.WaitGroup
	for r, db := range dbs {
		for w := range 4 {
			writers.Go(func() {
				if err := writeSome(ctx, db, fmt.Sprintf("r%dw%d", r, w)); err != nil {
					t.Error(err)
				}
			})
		}
		// Claims and completions in groups, on both replicas.
		for w := range 8 {
			writers.Go(func() {
				worker := fmt.Sprintf("g%d|w%d", r, w)
				for range 10 {
					if _, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "k", MaxAttempts: 1, EnqueuedBy: "admin"}); err != nil {
						t.Errorf("EnqueueJob: %v", err)
						return
					}
					j, err := claim(ctx, db, worker, "k")
					if err != nil {
						t.Errorf("ClaimJob: %v", err)
						return
					}
					if _, err := db.CompleteJob(ctx, store.CompleteJobParams{JobID: j.ID, Holder: worker, ClaimNumber: j.ClaimNumber}); err != nil {
						t.Errorf("CompleteJob: %v", err)
						return
					}
				}
			})
		}
	}
	var done atomic.Bool
	var sealers sync.WaitGroup
	for _, db := range dbs {
		for range 2 {
			sealers.Go(func() {
				for !done.Load() {
					if _, err := db.SealAudit(ctx, store.SealAuditParams{Limit: 7, Seal: recording}); err != nil {
						t.Errorf("SealAudit: %v", err)
						return
					}
				}
			})
		}
	}
	writers.Wait()
	done.Store(true)
	sealers.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, db := range dbs {
		for {
			n, err := db.SealAudit(ctx, store.SealAuditParams{Limit: 50, Seal: recording})
			if err != nil {
				t.Fatalf("SealAudit: %v", err)
			}
			if n == 0 {
				break
			}
		}
	}

	var total int
	if err := connect(t, url).QueryRow(ctx, `SELECT coalesce(sum(json_array_length(events::json)), 0) FROM audit_records`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	events := allEvents(t, dbs[1])
	if len(events) != total {
		t.Fatalf("%d events sealed of %d written", len(events), total)
	}
	// The events of a record are sealed together, in one run of seqs.
	records := map[int64]bool{}
	for i, e := range events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d of the list has seq %d", i+1, e.Seq)
		}
		if (i == 0 || e.ID != events[i-1].ID) && records[e.ID] {
			t.Fatalf("event %d of record %d is sealed apart from the record's events before it", e.Seq, e.ID)
		}
		records[e.ID] = true
		prev := make([]byte, 32)
		if i > 0 {
			prev = events[i-1].Hash
		}
		if !bytes.Equal(e.PrevHash, prev) {
			t.Fatalf("seq %d: prev_hash %x, want %x", e.Seq, e.PrevHash, prev)
		}
	}

	rows, err := connect(t, url).Query(ctx, `SELECT size, root_hash, head_hash, note FROM audit_checkpoints ORDER BY created_at, size`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var last uint64
	var checkpoints int
	for rows.Next() {
		var cp store.AuditCheckpoint
		var cpSize int64
		if err := rows.Scan(&cpSize, &cp.RootHash, &cp.HeadHash, &cp.Note); err != nil {
			t.Fatal(err)
		}
		cp.Size = uint64(cpSize)
		if cp.Size <= last {
			t.Fatalf("checkpoint of size %d after one of size %d", cp.Size, last)
		}
		if !runs[sealRun{last, cp.Size - last}] {
			t.Fatalf("checkpoint of size %d follows one of size %d, but no seal of those events was computed", cp.Size, last)
		}
		last = cp.Size
		checkpoints++
		c, err := audit.OpenCheckpoint(cp.Note, signer.VerifierKey())
		if err != nil {
			t.Fatalf("checkpoint %d: %v", cp.Size, err)
		}
		root, err := audit.RootAt(events, cp.Size)
		if err != nil {
			t.Fatal(err)
		}
		if c.Size != cp.Size || c.Root != root || !bytes.Equal(cp.RootHash, root[:]) ||
			!bytes.Equal(c.Head, events[cp.Size-1].Hash) || !bytes.Equal(cp.HeadHash, c.Head) {
			t.Fatalf("checkpoint %d does not state the root and head of its first %d events", cp.Size, cp.Size)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if checkpoints < 2 || last != uint64(total) {
		t.Fatalf("%d checkpoints up to size %d; want several, one per seal, up to %d", checkpoints, last, total)
	}
	if err := verify(t, dbs[0], signer); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

// tamperLog writes a log to tamper with and seals it, limit events at a time: writeSome's, in
// which event 5 and event 6 are records of their own, then a claim of three jobs in one
// statement, whose events make one record, and a completion. It answers the log's size and the
// seq of the claim's record.
func tamperLog(t *testing.T, db *postgres.DB, signer *audit.Signer, limit int) (size, claims uint64) {
	t.Helper()
	ctx := t.Context()
	if err := writeSome(ctx, db, "alice"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "batch", MaxAttempts: 1, EnqueuedBy: "admin"}); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err := db.ClaimJobs(ctx, store.ClaimJobParams{Holder: "alice|w", Kinds: []string{"batch"}, Lease: time.Minute, Max: 3})
	if err != nil || len(jobs) != 3 {
		t.Fatalf("ClaimJobs = %d jobs, %v; want 3", len(jobs), err)
	}
	if _, err := db.CompleteJob(ctx, store.CompleteJobParams{JobID: jobs[0].ID, Holder: "alice|w", ClaimNumber: jobs[0].ClaimNumber}); err != nil {
		t.Fatal(err)
	}
	size = uint64(sealAll(t, db, signer, limit))

	events := allEvents(t, db)
	inRecord := map[int64]int{}
	for _, e := range events {
		inRecord[e.ID]++
	}
	for _, seq := range []uint64{5, 6, size} {
		if n := inRecord[events[seq-1].ID]; n != 1 {
			t.Fatalf("event %d is one of the %d events of its record; the test needs it alone", seq, n)
		}
	}
	for _, e := range events {
		if e.Action == "job.claimed" && e.Subject == "job/"+jobs[0].ID {
			claims = e.Seq
		}
	}
	if claims == 0 || inRecord[events[claims-1].ID] != 3 || claims+2 >= size {
		t.Fatalf("the claim of three jobs is not one record of three events inside the log (events %+v)", events)
	}
	for i, j := range jobs {
		if e := events[claims-1+uint64(i)]; e.ID != events[claims-1].ID || e.Action != "job.claimed" || e.Subject != "job/"+j.ID {
			t.Fatalf("event %d is %s %s of record %d, want the claim of job %s", e.Seq, e.Action, e.Subject, e.ID, j.ID)
		}
	}
	return size, claims
}

// TestTamperingIsNamed ensures that a change made to the stored log behind the store's back (an
// event's field edited, an event deleted or inserted, two events swapped, in a record of one
// event or of several, a record's hashes cut) fails verification, naming the first event that
// does not verify; and that a record no longer readable makes the listing fail, naming it.
func TestTamperingIsNamed(t *testing.T) {
	t.Parallel()
	const target = 5 // the event tampered with, well inside the log, a record of its own
	// In sql, {claims} is the seq of the claim's record of three events, and {record N} the
	// condition on audit_records that selects the record sealed as seq N. want answers the seq
	// that Verify must name, given the log's size and {claims}; nil: target. A negative seq: the
	// log verifies.
	tests := []struct {
		name       string
		sql        string
		want       func(size, claims uint64) int64
		unreadable bool // the listing fails, naming want
	}{
		{name: "every record rewritten in another JSON form, the same events", sql: `
			UPDATE audit_records SET events = events::jsonb::text`,
			want: func(_, _ uint64) int64 { return -1 }},
		{name: "time", sql: `UPDATE audit_records
			SET events = jsonb_set(events::jsonb, '{0,t}', to_jsonb((events::jsonb #>> '{0,t}')::bigint + 1))::text WHERE {record 5}`},
		{name: "principal", sql: `UPDATE audit_records SET events = jsonb_set(events::jsonb, '{0,p}', '"mallory"')::text WHERE {record 5}`},
		{name: "holder", sql: `UPDATE audit_records SET events = jsonb_set(events::jsonb, '{0,h}', '"mallory|m"')::text WHERE {record 5}`},
		{name: "action", sql: `UPDATE audit_records SET events = jsonb_set(events::jsonb, '{0,a}', '"job.cancelled"')::text WHERE {record 5}`},
		{name: "subject", sql: `UPDATE audit_records SET events = jsonb_set(events::jsonb, '{0,s}', '"job/job_other"')::text WHERE {record 5}`},
		{name: "details", sql: `UPDATE audit_records
			SET events = jsonb_set(events::jsonb, '{0,d}', '{"role":"worker","x":1}')::text WHERE {record 5}`},
		{name: "details removed", sql: `UPDATE audit_records SET events = (events::jsonb #- '{0,d}')::text WHERE {record 5}`},
		{name: "deleted", sql: `DELETE FROM audit_records WHERE {record 5}; DELETE FROM audit_seals WHERE seq = 5`},
		{name: "deleted but its seal kept", sql: `DELETE FROM audit_records WHERE {record 5}`},
		{name: "seal deleted but its record kept", sql: `DELETE FROM audit_seals WHERE seq = 5`},
		{name: "deleted and renumbered", sql: `
			DELETE FROM audit_records WHERE {record 5};
			DELETE FROM audit_seals WHERE seq = 5;
			UPDATE audit_seals SET seq = -seq WHERE seq > 5;
			UPDATE audit_seals SET seq = -seq - 1 WHERE seq < 0`},
		{name: "last deleted", sql: `
			DELETE FROM audit_records WHERE id = (SELECT record_id FROM audit_seals ORDER BY seq DESC LIMIT 1);
			DELETE FROM audit_seals WHERE seq = (SELECT max(seq) FROM audit_seals)`,
			want: func(size, _ uint64) int64 { return int64(size) }},
		{name: "inserted", sql: `
			UPDATE audit_seals SET seq = -seq WHERE seq >= 5;
			UPDATE audit_seals SET seq = -seq + 1 WHERE seq < 0;
			INSERT INTO audit_records (events)
			VALUES ('[{"t":0,"p":"mallory","h":"","a":"principal.created","s":"principal/mallory","d":{"role":"admin"}}]');
			INSERT INTO audit_seals (seq, record_id, prev_hash, hashes)
			SELECT 5, r.id, substring(s.hashes FROM octet_length(s.hashes) - 31), substring(s.hashes FROM octet_length(s.hashes) - 31)
			FROM audit_records r, audit_seals s
			WHERE r.id = (SELECT max(id) FROM audit_records) AND s.seq = (SELECT max(seq) FROM audit_seals WHERE seq <= 4)`},
		{name: "appended", sql: `
			INSERT INTO audit_records (events)
			VALUES ('[{"t":0,"p":"mallory","h":"","a":"principal.created","s":"principal/mallory","d":{"role":"admin"}}]');
			INSERT INTO audit_seals (seq, record_id, prev_hash, hashes)
			SELECT s.seq + octet_length(s.hashes) / 32, r.id,
				substring(s.hashes FROM octet_length(s.hashes) - 31), substring(s.hashes FROM octet_length(s.hashes) - 31)
			FROM audit_records r, audit_seals s
			WHERE r.id = (SELECT max(id) FROM audit_records) AND s.seq = (SELECT max(seq) FROM audit_seals)`,
			want: func(size, _ uint64) int64 { return int64(size) + 1 }},
		{name: "swapped", sql: `
			UPDATE audit_seals SET seq = -seq WHERE seq IN (5, 6);
			UPDATE audit_seals SET seq = CASE seq WHEN -5 THEN 6 ELSE 5 END WHERE seq IN (-5, -6)`},
		{name: "contents swapped", sql: `
			UPDATE audit_records a SET events = b.events
			FROM audit_records b, audit_seals sa, audit_seals sb
			WHERE a.id = sa.record_id AND b.id = sb.record_id AND (sa.seq, sb.seq) IN ((5, 6), (6, 5))`},

		{name: "middle event of a record edited", sql: `UPDATE audit_records
			SET events = jsonb_set(events::jsonb, '{1,p}', '"mallory"')::text WHERE {record {claims}}`,
			want: func(_, claims uint64) int64 { return int64(claims) + 1 }},
		{name: "middle event of a record deleted", sql: `UPDATE audit_records
			SET events = (events::jsonb - 1)::text WHERE {record {claims}}`,
			want: func(_, claims uint64) int64 { return int64(claims) + 1 }},
		{name: "events of a record swapped", sql: `UPDATE audit_records
			SET events = jsonb_build_array(events::jsonb -> 1, events::jsonb -> 0, events::jsonb -> 2)::text WHERE {record {claims}}`,
			want: func(_, claims uint64) int64 { return int64(claims) }},
		{name: "event added to a record", sql: `UPDATE audit_records
			SET events = (events::jsonb || jsonb_build_array(events::jsonb -> 2))::text WHERE {record {claims}}`,
			want: func(_, claims uint64) int64 { return int64(claims) + 3 }},
		{name: "hashes of a record cut", sql: `UPDATE audit_seals SET hashes = substring(hashes FOR 40) WHERE seq = {claims}`,
			want: func(_, claims uint64) int64 { return int64(claims) + 1 }},
		{name: "record unreadable", sql: `UPDATE audit_records SET events = '[{"t":0,' WHERE {record {claims}}`,
			want: func(_, claims uint64) int64 { return int64(claims) }, unreadable: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDatabase(t)
			db := open(t, url, nil)
			signer := newSigner(t)
			size, claims := tamperLog(t, db, signer, 4)
			if size < 2*target {
				t.Fatalf("%d events sealed; the test needs more", size)
			}
			if err := verify(t, db, signer); err != nil {
				t.Fatalf("Verify before tampering: %v", err)
			}
			sql := strings.ReplaceAll(tt.sql, "{claims}", strconv.FormatUint(claims, 10))
			sql = recordOfSeq.ReplaceAllString(sql, "id = (SELECT record_id FROM audit_seals WHERE seq = $1)")
			if _, err := connect(t, url).Exec(t.Context(), sql); err != nil {
				t.Fatalf("tamper: %v", err)
			}
			want := int64(target)
			if tt.want != nil {
				want = tt.want(size, claims)
			}

			if tt.unreadable {
				// From the start, and from the middle of the record.
				for _, after := range []uint64{0, uint64(want)} {
					_, err := db.ListAuditEvents(t.Context(), store.ListAuditEventsParams{AfterSeq: after, Limit: 10000})
					if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("audit record of event %d:", want)) {
						t.Fatalf("ListAuditEvents after %d, a record unreadable = %v; want an error naming event %d", after, err, want)
					}
				}
				return
			}
			err := verify(t, db, signer)
			if want < 0 {
				if err != nil {
					t.Fatalf("Verify = %v; want the log to verify", err)
				}
				return
			}
			var ve *audit.VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("Verify after tampering = %v; want a *audit.VerifyError", err)
			}
			if ve.Seq != uint64(want) {
				t.Fatalf("Verify after tampering names seq %d (%v); want %d", ve.Seq, err, want)
			}
		})
	}
}

// recordOfSeq matches {record N} in the statements of TestTamperingIsNamed.
var recordOfSeq = regexp.MustCompile(`\{record (\d+)\}`)

// TestRecomputedChainIsCaughtByTheCheckpoint ensures that an edit whose every later hash was
// recomputed, so that the chain holds, is named at the signed checkpoint's size.
func TestRecomputedChainIsCaughtByTheCheckpoint(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	db := open(t, url, nil)
	signer := newSigner(t)
	size, _ := tamperLog(t, db, signer, 1000)

	conn := connect(t, url)
	if _, err := conn.Exec(t.Context(), `UPDATE audit_records SET events = jsonb_set(events::jsonb, '{0,p}', '"mallory"')::text
		WHERE id = (SELECT record_id FROM audit_seals WHERE seq = 3)`); err != nil {
		t.Fatal(err)
	}
	// The events as the store now answers them, their chain recomputed from seq 3 on, and
	// stored back record by record.
	events := allEvents(t, db)
	for i := 2; i < len(events); i++ {
		canon, err := audit.Canonical(events[i])
		if err != nil {
			t.Fatal(err)
		}
		events[i].PrevHash = events[i-1].Hash
		events[i].Hash = audit.ChainHash(events[i].PrevHash, canon)
	}
	for i := 2; i < len(events); {
		first, hashes := events[i], []byte{}
		for ; i < len(events) && events[i].ID == first.ID; i++ {
			hashes = append(hashes, events[i].Hash...)
		}
		if _, err := conn.Exec(t.Context(), `UPDATE audit_seals SET prev_hash = $2, hashes = $3 WHERE seq = $1`,
			int64(first.Seq), first.PrevHash, hashes); err != nil {
			t.Fatal(err)
		}
	}
	err := verify(t, db, signer)
	var ve *audit.VerifyError
	if !errors.As(err, &ve) || ve.Seq != size {
		t.Fatalf("Verify after rewriting the chain = %v; want a *audit.VerifyError at seq %d", err, size)
	}
}

// TestAStatementWritesOneRecord ensures that the events of one statement make one record, in
// the order the statement made them, and that a statement that changes nothing writes none.
func TestAStatementWritesOneRecord(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	db := open(t, url, nil)
	ctx := store.WithActor(t.Context(), store.Actor{Principal: "admin"})
	records := func() int {
		t.Helper()
		var n int
		if err := connect(t, url).QueryRow(ctx, `SELECT count(*) FROM audit_records`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, _, err := db.CreatePrincipal(ctx, store.CreatePrincipalParams{Name: "bob", Role: store.RoleWorker,
		TokenID: store.NewID("tok"), TokenHash: []byte("h")}); err != nil {
		t.Fatal(err)
	}
	if n := records(); n != 1 {
		t.Fatalf("CreatePrincipal wrote %d records, want 1", n)
	}
	for range 2 {
		if _, err := db.DisablePrincipal(ctx, "bob"); err != nil {
			t.Fatal(err)
		}
	}
	if n := records(); n != 2 {
		t.Fatalf("after disabling a principal twice, %d records, want 2: the second changed nothing", n)
	}
	sealAll(t, db, newSigner(t), 1000)
	events := allEvents(t, db)
	var got []string
	for _, e := range events {
		got = append(got, e.Action)
	}
	if want := []string{"principal.created", "token.created", "principal.disabled"}; !slices.Equal(got, want) {
		t.Fatalf("the log holds %v, want %v", got, want)
	}
	if events[0].ID != events[1].ID || events[1].ID == events[2].ID {
		t.Fatalf("the events are of records %d, %d and %d; want the first two of one record", events[0].ID, events[1].ID, events[2].ID)
	}
}

// TestGroupCommitsRecordEachCall ensures that claims and completions that went together in one
// statement record one event each, by their own worker, with their own claim.
func TestGroupCommitsRecordEachCall(t *testing.T) {
	t.Parallel()
	db := open(t, pgtest.NewDatabase(t), nil)
	ctx := t.Context()
	const workers, perWorker = 24, 8
	for range workers * perWorker {
		if _, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "k", MaxAttempts: 2, EnqueuedBy: "admin"}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			worker := fmt.Sprintf("p%d|w%d", w%3, w)
			for range perWorker {
				j, err := db.ClaimJob(ctx, store.ClaimJobParams{Holder: worker, Kinds: []string{"k"}, Lease: time.Minute})
				if err != nil || j == nil {
					t.Errorf("ClaimJob = %v, %v", j, err)
					return
				}
				if _, err := db.CompleteJob(ctx, store.CompleteJobParams{JobID: j.ID, Holder: worker, ClaimNumber: j.ClaimNumber,
					OutputDigest: "sha256:" + j.ID}); err != nil {
					t.Errorf("CompleteJob: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	sealAll(t, db, newSigner(t), 1000)

	jobs, _, err := db.ListJobs(ctx, store.ListJobsParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	byJob := map[string][]store.AuditEvent{}
	for _, e := range allEvents(t, db) {
		byJob[e.Subject] = append(byJob[e.Subject], e)
	}
	for _, j := range jobs {
		evs := byJob["job/"+j.ID]
		var actions []string
		for _, e := range evs {
			actions = append(actions, e.Action)
		}
		if !slices.Equal(actions, []string{"job.enqueued", "job.claimed", "job.completed"}) {
			t.Fatalf("job %s: events %v", j.ID, actions)
		}
		for _, e := range evs[1:] {
			if e.Holder != j.Holder || e.Principal != store.PrincipalOf(j.Holder) {
				t.Fatalf("job %s claimed by %s: %s by %q, holder %q", j.ID, j.Holder, e.Action, e.Principal, e.Holder)
			}
		}
		var claimed map[string]any
		if err := json.Unmarshal(evs[1].Details, &claimed); err != nil {
			t.Fatalf("job %s: job.claimed details %s: %v", j.ID, evs[1].Details, err)
		}
		if claimed["claim"] != float64(1) || len(claimed) != 2 {
			t.Fatalf("job %s: job.claimed details %s", j.ID, evs[1].Details)
		}
		want := fmt.Sprintf(`{"claim":1,"output_digest":"sha256:%s"}`, j.ID)
		if string(evs[2].Details) != want {
			t.Fatalf("job %s: job.completed details %s, want %s", j.ID, evs[2].Details, want)
		}
	}
}

// TestDetailsBuiltInSQLAreCompactJSON ensures that details that statements build themselves
// are compact JSON objects, keys in order, times in UTC with microseconds, and strings meaning
// exactly what was given, whatever they hold.
func TestDetailsBuiltInSQLAreCompactJSON(t *testing.T) {
	t.Parallel()
	db := open(t, pgtest.NewDatabase(t), nil)
	ctx := t.Context()
	odd := "quote \" backslash \\ newline \n tab \t nul-free \x01 <&> é 世 \u2028"
	if _, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: odd, Priority: -3, MaxAttempts: 4000000000, UniqueKey: odd, EnqueuedBy: "admin"}); err != nil {
		t.Fatal(err)
	}
	j, err := db.ClaimJob(ctx, store.ClaimJobParams{Holder: "bob|b1", Lease: 90 * time.Second})
	if err != nil || j == nil {
		t.Fatalf("ClaimJob = %v, %v", j, err)
	}
	if _, err := db.FailJob(ctx, store.FailJobParams{JobID: j.ID, Holder: "bob|b1", ClaimNumber: j.ClaimNumber, Error: odd}); err != nil {
		t.Fatal(err)
	}
	sealAll(t, db, newSigner(t), 1000)
	events := allEvents(t, db)
	if len(events) != 3 {
		t.Fatalf("%d events, want 3", len(events))
	}
	want := []map[string]any{
		{"kind": odd, "max_attempts": 4000000000, "priority": -3, "unique_key": odd},
		{"claim": 1, "lease_expires_at": j.LeaseExpiresAt.Format("2006-01-02T15:04:05.000000Z07:00")},
		{"claim": 1, "error": odd, "state": "queued"},
	}
	for i, e := range events {
		var compact bytes.Buffer
		if err := json.Compact(&compact, e.Details); err != nil || !bytes.Equal(compact.Bytes(), e.Details) {
			t.Errorf("%s details %s are not compact JSON (%v)", e.Action, e.Details, err)
		}
		var got map[string]any
		if err := json.Unmarshal(e.Details, &got); err != nil {
			t.Fatalf("%s details %s: %v", e.Action, e.Details, err)
		}
		wantJSON, _ := json.Marshal(want[i])
		var w map[string]any
		json.Unmarshal(wantJSON, &w) //nolint:errcheck // just marshalled
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s details = %v, want %v", e.Action, got, w)
		}
		if _, err := audit.Canonical(e); err != nil {
			t.Errorf("%s: Canonical: %v", e.Action, err)
		}
	}
	if events[1].Principal != "bob" || events[1].Holder != "bob|b1" || events[0].Principal != "admin" || events[0].Holder != "" {
		t.Errorf("actors: %q %q, %q %q", events[0].Principal, events[0].Holder, events[1].Principal, events[1].Holder)
	}
}

// TestSealReadsPendingRecordsInPages ensures that a seal takes its events from as many pages
// of pending records as it needs, whole records in insertion order, however many events the
// records before held: after a seal of 80 events in 41 records (one of 40), a seal of 100
// one-event records reads pages sized for two events per record, and still takes exactly the
// oldest 100.
func TestSealReadsPendingRecordsInPages(t *testing.T) {
	t.Parallel()
	db := open(t, pgtest.NewDatabase(t), nil)
	ctx := store.WithActor(t.Context(), store.Actor{Principal: "admin"})
	signer := newSigner(t)
	var ids []string
	enqueue := func(n int) {
		t.Helper()
		for range n {
			j, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "build", MaxAttempts: 1})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.ID)
		}
	}
	enqueue(40)
	claimed, err := db.ClaimJobs(ctx, store.ClaimJobParams{Holder: "ci|w", Kinds: []string{"build"}, Lease: time.Minute, Max: 40})
	if err != nil || len(claimed) != 40 {
		t.Fatalf("ClaimJobs = %d jobs, %v; want 40", len(claimed), err)
	}
	if n := sealAll(t, db, signer, 1000); n != 80 {
		t.Fatalf("sealed %d events, want 40 enqueued and 40 claimed", n)
	}
	enqueue(300)
	seal := func(limit int) int {
		t.Helper()
		n, err := db.SealAudit(ctx, store.SealAuditParams{Limit: limit, Seal: signer.SealFunc(time.Now)})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := seal(100); n != 100 {
		t.Fatalf("a seal of 100 one-event records after one of 40 events took %d events", n)
	}
	if n := seal(1000); n != 200 {
		t.Fatalf("the next seal took %d events, want the other 200", n)
	}
	events := allEvents(t, db)
	if len(events) != 380 {
		t.Fatalf("%d events sealed, want 380", len(events))
	}
	for i, e := range events[80:] {
		if want := "job/" + ids[40+i]; e.Action != "job.enqueued" || e.Subject != want {
			t.Fatalf("event %d is %s %s, want job.enqueued %s: the seals took the records out of order", e.Seq, e.Action, e.Subject, want)
		}
	}
	if err := verify(t, db, signer); err != nil {
		t.Fatalf("the log does not verify: %v", err)
	}
}

// beginByHand begins a transaction on a connection of its own to url, which the test commits;
// it is rolled back if the test ends first.
func beginByHand(t *testing.T, url string) pgx.Tx {
	t.Helper()
	tx, err := connect(t, url).Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) }) //nolint:errcheck // a no-op once committed
	return tx
}

// recordByHand writes, in tx, a record of one principal.created event of subject, as a store's
// statement would.
func recordByHand(t *testing.T, tx pgx.Tx, subject string) {
	t.Helper()
	var r store.AuditRecordBuilder
	r.Add(0, store.Actor{Principal: "admin"}, "principal.created", subject, []byte(`{"role":"agent"}`))
	if _, err := tx.Exec(t.Context(), `INSERT INTO audit_records (events) VALUES ($1)`, r.Text()); err != nil {
		t.Fatal(err)
	}
}

// TestSealTakesWhatCommittedBehindAnOlderTransaction ensures that a seal takes the records
// committed before it began even when a transaction that wrote a record before them, still
// open, holds them back: it waits for that transaction to end, and seals its record first,
// since its id was taken first, although it committed last.
func TestSealTakesWhatCommittedBehindAnOlderTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	db := open(t, url, nil)
	signer := newSigner(t)

	older := beginByHand(t, url)
	recordByHand(t, older, "principal/early")
	if _, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "build", MaxAttempts: 1, EnqueuedBy: "admin"}); err != nil {
		t.Fatal(err)
	}

	sealed := make(chan error, 1)
	go func() {
		n, err := db.SealAudit(ctx, store.SealAuditParams{Limit: 100, Seal: signer.SealFunc(time.Now)})
		if err == nil && n != 2 {
			err = fmt.Errorf("sealed %d events, want 2", n)
		}
		sealed <- err
	}()
	// The seal polls for the older transaction's end; once it does, it has not returned.
	// (sealWritersLeftSQL is the only statement of the store naming virtualtransaction = ANY.)
	watch := connect(t, url)
	for waiting := false; !waiting; {
		select {
		case err := <-sealed:
			t.Fatalf("SealAudit returned while an older transaction was open: %v", err)
		default:
		}
		if err := watch.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE '%virtualtransaction = ANY%' AND pid <> pg_backend_pid()`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-sealed:
		t.Fatalf("SealAudit returned while an older transaction was open: %v", err)
	default:
	}
	if err := older.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-sealed; err != nil {
		t.Fatalf("SealAudit: %v", err)
	}
	events := allEvents(t, db)
	if len(events) != 2 || events[0].Subject != "principal/early" || events[1].Action != "job.enqueued" {
		t.Fatalf("sealed %+v; want the older transaction's event, then the enqueue", events)
	}
	if err := verify(t, db, signer); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

// TestAWriterLeftOpenHoldsBackOnlyWhatCameAfterIt ensures that a transaction that wrote a
// record and stays open keeps the seal from the records whose ids came after its own, however
// long it stays: the seal answers that it waited for writers still open, and seals them all, in
// id order, once it has ended. What was sealed before it began stays sealed.
func TestAWriterLeftOpenHoldsBackOnlyWhatCameAfterIt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	db := open(t, url, nil)
	postgres.SetSealWaitMost(db, 100*time.Millisecond)
	signer := newSigner(t)
	admin := store.WithActor(ctx, store.Actor{Principal: "admin"})
	enqueue := func() {
		t.Helper()
		if _, _, err := db.EnqueueJob(admin, store.EnqueueJobParams{Kind: "build", MaxAttempts: 1, EnqueuedBy: "admin"}); err != nil {
			t.Fatal(err)
		}
	}
	seal := func() (int, error) {
		return db.SealAudit(ctx, store.SealAuditParams{Limit: 100, Seal: signer.SealFunc(time.Now)})
	}
	enqueue()
	if n, err := seal(); n != 1 || err != nil {
		t.Fatalf("the first seal = %d events, %v; want the enqueue", n, err)
	}

	writer := beginByHand(t, url)
	recordByHand(t, writer, "principal/left-open")
	enqueue()
	for range 2 {
		if n, err := seal(); n != 0 || !errors.Is(err, postgres.ErrWritersStillOpen) {
			t.Fatalf("a seal while a writer is open = %d events, %v; want none, and that it waited for writers still open", n, err)
		}
	}
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := seal(); n != 2 || err != nil {
		t.Fatalf("the seal after the writer committed = %d events, %v; want its event and the enqueue after it", n, err)
	}
	events := allEvents(t, db)
	if len(events) != 3 || events[0].Action != "job.enqueued" || events[1].Subject != "principal/left-open" || events[2].Action != "job.enqueued" {
		t.Fatalf("sealed %+v; want the first enqueue, the open writer's event, then the second enqueue", events)
	}
	if err := verify(t, db, signer); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

// TestALaterWriterIsSealedAfterWhatItSaw ensures that the log never puts a write before one it
// followed: a transaction that began, and wrote, before another committed, but wrote its record
// after it saw that commit, is sealed after it. This is how a lease grant runs: it locks its
// repository's row (its first write), then finds the paths free because a release committed
// meanwhile; a log in the order the transactions began would show the grant while the released
// lease was still live.
func TestALaterWriterIsSealedAfterWhatItSaw(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	db := open(t, url, nil)
	signer := newSigner(t)
	admin := store.WithActor(ctx, store.Actor{Principal: "admin"})
	if _, err := db.CreateRepository(admin, store.CreateRepositoryParams{Name: "r", CreatedBy: "admin"}); err != nil {
		t.Fatal(err)
	}

	grant := beginByHand(t, url)
	// Its first write: from here on it has its transaction id.
	if _, err := grant.Exec(ctx, `SELECT true FROM repositories WHERE name = 'r' FOR NO KEY UPDATE`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.EnqueueJob(admin, store.EnqueueJobParams{Kind: "build", MaxAttempts: 1, EnqueuedBy: "admin"}); err != nil {
		t.Fatal(err)
	}
	// It sees the enqueue, and records what it did after that.
	var jobs int
	if err := grant.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&jobs); err != nil || jobs != 1 {
		t.Fatalf("the transaction sees %d jobs, %v; want the one committed", jobs, err)
	}
	recordByHand(t, grant, "principal/after-the-job")
	if err := grant.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	sealAll(t, db, signer, 100)
	var order []string
	for _, e := range allEvents(t, db) {
		order = append(order, e.Action+" "+e.Subject)
	}
	if len(order) < 2 || !strings.HasPrefix(order[len(order)-2], "job.enqueued ") || order[len(order)-1] != "principal.created principal/after-the-job" {
		t.Fatalf("the log ends %q; want the enqueue, then the write that followed it", order)
	}
	if err := verify(t, db, signer); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

// TestRecordsAreCompressedWithLZ4 ensures that a record large enough to be compressed is
// compressed with lz4 when the server has it (migration 6), pglz otherwise.
func TestRecordsAreCompressedWithLZ4(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	db := open(t, url, nil)
	for range 64 {
		if _, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "big", MaxAttempts: 1, EnqueuedBy: "admin"}); err != nil {
			t.Fatal(err)
		}
	}
	if jobs, err := db.ClaimJobs(ctx, store.ClaimJobParams{Holder: "alice|w", Kinds: []string{"big"}, Lease: time.Minute, Max: 64}); err != nil || len(jobs) != 64 {
		t.Fatalf("ClaimJobs = %d jobs, %v; want 64, in one record", len(jobs), err)
	}
	conn := connect(t, url)
	var hasLZ4 bool
	if err := conn.QueryRow(ctx, `SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'`).Scan(&hasLZ4); err != nil {
		t.Fatal(err)
	}
	want := "pglz"
	if hasLZ4 {
		want = "lz4"
	}
	var size int
	var method string
	if err := conn.QueryRow(ctx, `SELECT octet_length(events), coalesce(pg_column_compression(events), 'nothing')
		FROM audit_records ORDER BY octet_length(events) DESC LIMIT 1`).Scan(&size, &method); err != nil {
		t.Fatal(err)
	}
	if method != want {
		t.Fatalf("the claim's record of %d bytes is compressed with %s; want %s", size, method, want)
	}
}
