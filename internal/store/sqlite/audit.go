package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/ag-coord/ag/internal/jsontext"
	"github.com/ag-coord/ag/internal/store"
)

// The audit log (docs/audit.md, store.AuditStore). Every write that changes state inserts its
// events with record, in its own transaction: one more statement, from the driver's statement
// cache. SealAudit is a write too, so the one writer serializes sealers with everything else.

var _ store.AuditStore = (*DB)(nil)

// record adds one audit event to the record of the batch the writer is committing, which
// commit stores in its transaction (storeRecord): only the writer goroutine runs it. The actor
// comes from the method's caller: the ctx a write function gets is the writer's, which carries
// no actor. Details come from a details builder, or are nil for none.
func (d *DB) record(now int64, actor store.Actor, action, subject string, details detailsJSON) {
	if auditEnabled {
		d.events.AddJSON(now, actor, action, subject, details)
	}
}

// storeRecord stores the events of the batch as one record, and answers whether it did.
func (d *DB) storeRecord(ctx context.Context, tx *sql.Tx) (bool, error) {
	if d.events.Len() == 0 {
		return false, nil
	}
	n := d.events.Len()
	// The id SQLite would choose, max(id) + 1, but never one of the sealed range: were the
	// newest sealed records deleted from the file, a new record would take a sealed id, look
	// sealed and be skipped, where this one is pending and the seal after it stops (checkHead).
	if _, err := tx.ExecContext(ctx, `INSERT INTO audit_records (id, events)
		VALUES (max((SELECT coalesce(max(id), 0) FROM audit_records), (SELECT last_id FROM audit_head)) + 1, ?)`, d.events.Text()); err != nil {
		return false, interpretError(fmt.Sprintf("record %d audit events", n), err)
	}
	return true, nil
}

// AuditSignal answers the channel that the next commit that wrote audit events closes.
func (d *DB) AuditSignal() <-chan struct{} { return d.auditSignal.Wait() }

// ---- actors ----

// holderActor is the actor of a method given a worker or holder, "<principal>|<label>".
func holderActor(ctx context.Context, holder string) store.Actor {
	if holder == "" {
		return store.ActorOf(ctx)
	}
	return store.Actor{Principal: store.PrincipalOf(holder), Holder: holder}
}

// principalActor is the actor of a method given the principal acting (EnqueuedBy, CreatedBy).
func principalActor(ctx context.Context, principal string) store.Actor {
	if principal == "" {
		return store.ActorOf(ctx)
	}
	return store.Actor{Principal: principal}
}

// systemActor is the actor of what the server does by itself: expiry, the integration queue.
var systemActor = store.Actor{Principal: store.SystemPrincipal}

// ---- details ----

// details builds the compact JSON object of an event's details. Members must be added in key
// order, the order the canonical form has them anyway; a builder that is never given a member
// answers "{}".
//
// What it writes is valid JSON by construction, which is why the record builder takes it
// without checking (AddJSON): checking cost the one writer about half a microsecond a job.
type details struct {
	b    []byte
	last string
}

func (x *details) key(k string) {
	if x.b == nil {
		x.b = make([]byte, 0, 96)
		x.b = append(x.b, '{')
	} else {
		if k <= x.last {
			panic("sqlite: audit details member " + k + " after " + x.last) // a bug of this package
		}
		x.b = append(x.b, ',')
	}
	x.last = k
	x.b = jsontext.AppendString(x.b, k)
	x.b = append(x.b, ':')
}

func (x *details) str(k, v string) *details {
	x.key(k)
	x.b = jsontext.AppendString(x.b, v)
	return x
}

// strIf adds a string member only when v is not empty.
func (x *details) strIf(k, v string) *details {
	if v != "" {
		x.str(k, v)
	}
	return x
}

func (x *details) int(k string, v int64) *details {
	x.key(k)
	x.b = strconv.AppendInt(x.b, v, 10)
	return x
}

// time adds t as RFC 3339 in UTC with microseconds, as the store keeps it.
func (x *details) time(k string, t time.Time) *details {
	x.key(k)
	x.b = append(x.b, '"')
	x.b = t.UTC().AppendFormat(x.b, detailsTimeLayout)
	x.b = append(x.b, '"')
	return x
}

func (x *details) strs(k string, v []string) *details {
	x.key(k)
	x.b = append(x.b, '[')
	for i, s := range v {
		if i > 0 {
			x.b = append(x.b, ',')
		}
		x.b = jsontext.AppendString(x.b, s)
	}
	x.b = append(x.b, ']')
	return x
}

// raw adds a JSON value as stored: compacted when it is JSON, null when it is empty, and a
// JSON string otherwise, so that a seal never meets details it cannot read.
func (x *details) raw(k string, v []byte) *details {
	x.key(k)
	if len(v) == 0 {
		x.b = append(x.b, "null"...)
		return x
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		x.b = jsontext.AppendString(x.b, string(v))
		return x
	}
	x.b = append(x.b, buf.Bytes()...)
	return x
}

// detailsOf encodes details given as a map, as the PostgreSQL store does: keys in order, no
// HTML escaping.
func detailsOf(m map[string]any) detailsJSON {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		panic(fmt.Sprintf("sqlite: encode audit details: %v", err)) // only strings, numbers and lists of them
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// detailsJSON is what a details builder wrote: a JSON object.
type detailsJSON []byte

func (x *details) done() detailsJSON {
	if x.b == nil {
		return detailsJSON("{}")
	}
	return append(x.b, '}')
}

// detailsTimeLayout is how times appear in details.
const detailsTimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// ---- seal ----

// defaultSealLimit is SealAudit's batch when the caller gives none. A seal's write holds the one
// writer, every claim and completion waiting behind it, for as long as it takes to store the
// seal: 1–3 ms for 1,000 events. Seals of 5,000 did not cost claim+complete less on SQLite, as
// they do on PostgreSQL (docs/benchmarks.md).
const defaultSealLimit = 1000

// AuditSealBatch answers defaultSealLimit.
func (d *DB) AuditSealBatch() int { return defaultSealLimit }

// sealAttempts bounds how often a seal is computed again because another sealer (another
// process on the same file) moved the head meanwhile.
const sealAttempts = 10

// SealAudit seals the oldest pending records, p.Limit events or a little more (whole records).
// The seal is computed from a read snapshot, outside the one writer, and only stored by a
// write, which checks that the head is still the one the seal continues: hashing and signing a
// batch takes milliseconds, and every claim and completion would wait for them if they ran in
// the write. Records committed after the snapshot have larger ids than any it saw, so the batch
// is still the oldest pending records when it is stored. Should other sealers (other processes
// on the file) move the head sealAttempts-1 times in a row, the last attempt computes its seal
// in the write, where nothing can move the head.
func (d *DB) SealAudit(ctx context.Context, p store.SealAuditParams) (int, error) {
	if p.Seal == nil {
		return 0, errors.New("seal audit: no Seal function")
	}
	limit := p.Limit
	if limit <= 0 {
		limit = defaultSealLimit
	}
	buf, owned := d.sealReads.Take()
	defer func() { d.sealReads.Give(buf.reset(), owned) }()
	for range sealAttempts - 1 {
		c, err := d.computeSealFromSnapshot(ctx, p, limit, &buf)
		if err != nil || len(c.pending) == 0 {
			return 0, err
		}
		err = d.write(ctx, "seal audit", func(ctx context.Context, tx *sql.Tx) error {
			head, lastID, err := readHead(ctx, tx)
			if err != nil {
				return err
			}
			if head.Size != c.head.Size || !bytes.Equal(head.Hash, c.head.Hash) || lastID != c.lastID {
				return errHeadMoved
			}
			return storeSeal(ctx, tx, c.head, c.pending, c.seal, micros(d.now()))
		})
		if errors.Is(err, errHeadMoved) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return len(c.pending), nil
	}
	var n int
	err := d.write(ctx, "seal audit", func(ctx context.Context, tx *sql.Tx) error {
		c, err := computeSeal(ctx, tx, p, limit, &buf)
		if err != nil || len(c.pending) == 0 {
			return err
		}
		n = len(c.pending)
		return storeSeal(ctx, tx, c.head, c.pending, c.seal, micros(d.now()))
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// errHeadMoved says that a seal computed from a snapshot no longer continues the head.
var errHeadMoved = errors.New("seal audit: the head moved since the seal was computed")

// computedSeal is a seal of pending after head, whose last sealed record was lastID.
type computedSeal struct {
	head    store.AuditHead
	lastID  int64
	pending []store.AuditEvent
	seal    store.AuditSeal
}

// computeSealFromSnapshot is computeSeal in a read transaction of its own: one snapshot.
func (d *DB) computeSealFromSnapshot(ctx context.Context, p store.SealAuditParams, limit int, buf *sealRead) (computedSeal, error) {
	tx, err := d.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return computedSeal{}, interpretError("seal audit: begin", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to keep
	return computeSeal(ctx, tx, p, limit, buf)
}

// computeSeal reads the head and the pending records a seal of limit events takes, in tx, into
// buf, and seals their events with p.Seal, which reads tree hashes in tx too. No pending
// event: a computedSeal without events, and p.Seal is not called.
func computeSeal(ctx context.Context, tx *sql.Tx, p store.SealAuditParams, limit int, buf *sealRead) (c computedSeal, err error) {
	if c.head, c.lastID, err = readHead(ctx, tx); err != nil {
		return computedSeal{}, err
	}
	if err = checkHead(ctx, tx, c.head, c.lastID); err != nil {
		return computedSeal{}, err
	}
	if err = buf.readPending(ctx, tx, c.lastID, limit); err != nil || len(buf.events) == 0 {
		return computedSeal{}, err
	}
	c.pending = buf.events
	c.seal, err = p.Seal(c.head, c.pending, func(indexes []int64) ([][]byte, error) {
		return readAuditHashes(ctx, tx, indexes)
	})
	if err != nil {
		return computedSeal{}, fmt.Errorf("seal audit: %w", err)
	}
	return c, nil
}

// readHead reads the head and the id of its last event.
func readHead(ctx context.Context, tx *sql.Tx) (store.AuditHead, int64, error) {
	var (
		head         store.AuditHead
		size, lastID int64
	)
	if err := tx.QueryRowContext(ctx, `SELECT size, hash, last_id FROM audit_head WHERE one = 1`).
		Scan(&size, &head.Hash, &lastID); err != nil {
		return head, 0, interpretError("seal audit: read the head", err)
	}
	head.Size = uint64(size)
	return head, lastID, nil
}

// checkHead refuses to seal after the head's record or its seal was deleted or renumbered: the
// chain could not go on from where the head says it ends. Only tampering with the file does
// that, and verification names it; the seal stops, loudly, rather than go on quietly.
func checkHead(ctx context.Context, tx *sql.Tx, head store.AuditHead, lastID int64) error {
	if head.Size == 0 {
		return nil
	}
	var (
		seq    sql.NullInt64
		hashes []byte
	)
	err := tx.QueryRowContext(ctx, `SELECT s.seq, s.hashes FROM audit_seals s JOIN audit_records r ON r.id = s.record_id
		WHERE s.record_id = ?`, lastID).Scan(&seq, &hashes)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return interpretError("seal audit: read the head's record", err)
	}
	if err != nil || !seq.Valid || seq.Int64 <= 0 || uint64(seq.Int64)+uint64(len(hashes)/store.AuditHashSize)-1 != head.Size {
		return fmt.Errorf("seal audit: the head's record (ending at seq %d, id %d) is missing or renumbered: the log was tampered with; "+
			"nothing is sealed until it is restored", head.Size, lastID)
	}
	return nil
}

// sealRead holds what a seal reads: the pending events and the text of their records, which
// the events' details point into.
type sealRead struct {
	events []store.AuditEvent
	text   []byte
}

// reset empties b for the next seal, keeping its memory: a seal reads about 1,000 events, some
// 200 KB of them, and the sealer runs several seals a second. No reference into the records of
// the seal before outlives it.
func (b sealRead) reset() sealRead {
	clear(b.events[:cap(b.events)])
	return sealRead{events: b.events[:0], text: b.text[:0]}
}

// readPending reads into b the events of the unsealed records a seal of limit events takes, in
// insertion order: the records after the last sealed one, lastID (see 0004_audit.sql). Each
// record holds an event at least, so limit records are enough. The limit is "? + 0" because
// SQLite prepares a statement again whenever a bare LIMIT parameter is bound.
func (b *sealRead) readPending(ctx context.Context, tx *sql.Tx, lastID int64, limit int) error {
	rows, err := tx.QueryContext(ctx, `SELECT id, events FROM audit_records WHERE id > ? ORDER BY id LIMIT ? + 0`, lastID, limit)
	if err != nil {
		return interpretError("seal audit: read pending events", err)
	}
	defer rows.Close()
	// Whole records, up to the one that reaches limit, decoded into one slice.
	if b.events = b.events[:0]; cap(b.events) < limit+limit/4 {
		b.events = make([]store.AuditEvent, 0, limit+limit/4)
	}
	b.text = b.text[:0]
	var raw sql.RawBytes
	for len(b.events) < limit && rows.Next() {
		var id int64
		if err := rows.Scan(&id, &raw); err != nil {
			return interpretError("seal audit: read pending events", err)
		}
		// A record's events keep slices of its text: it goes where nothing overwrites it
		// during this seal. Should b.text grow, the records before keep the array they are in.
		start := len(b.text)
		b.text = append(b.text, raw...)
		if b.events, err = store.AppendAuditRecord(b.events, id, b.text[start:len(b.text):len(b.text)]); err != nil {
			return fmt.Errorf("seal audit: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return interpretError("seal audit: read pending events", err)
	}
	return nil
}

// storeSeal stores what a seal answers, once store.AuditSealRows checked it: each record's
// place and hashes, exactly once, the block of new tree hashes, the head and the checkpoint.
func storeSeal(ctx context.Context, tx *sql.Tx, head store.AuditHead, pending []store.AuditEvent, seal store.AuditSeal, now int64) error {
	records, first, block, err := store.AuditSealRows(head, pending, seal)
	if err != nil {
		return fmt.Errorf("seal audit: %w", err)
	}
	for _, r := range records {
		// A record sealed already fails the insert (audit_seals.record_id is unique), and with
		// it the whole seal.
		if _, err := tx.ExecContext(ctx, `INSERT INTO audit_seals (seq, record_id, prev_hash, hashes) VALUES (?, ?, ?, ?)`,
			int64(r.Seq), r.ID, r.PrevHash, r.Hashes); err != nil {
			return interpretError(fmt.Sprintf("seal audit: the record of event %d", r.Seq), err)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO audit_tree_blocks (first, hashes) VALUES (?, ?)`, first, block); err != nil {
		return interpretError(fmt.Sprintf("seal audit: tree hashes from %d", first), err)
	}
	res, err := tx.ExecContext(ctx, `UPDATE audit_head SET size = ?, hash = ?, last_id = ? WHERE one = 1 AND size = ?`,
		int64(seal.Head.Size), seal.Head.Hash, records[len(records)-1].ID, int64(head.Size))
	if err != nil {
		return interpretError("seal audit: move the head", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("seal audit: the head moved during the seal (%d rows, %v)", n, err)
	}
	cp := seal.Checkpoint
	created := now
	if !cp.CreatedAt.IsZero() {
		created = micros(cp.CreatedAt)
	}
	note := cp.Note
	if note == nil {
		note = []byte{}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO audit_checkpoints (size, root_hash, head_hash, note, created_at)
		VALUES (?, ?, ?, ?, ?)`, int64(cp.Size), cp.RootHash, cp.HeadHash, note, created); err != nil {
		return interpretError(fmt.Sprintf("seal audit: checkpoint of size %d", cp.Size), err)
	}
	return nil
}

// readAuditHashes answers the stored tree hashes at indexes, in their order: each from the
// block of the seal that stored it, the one that starts last at or before it.
func readAuditHashes(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, indexes []int64) ([][]byte, error) {
	out := make([][]byte, len(indexes))
	var (
		first int64 = -1
		block []byte
	)
	for i, idx := range indexes {
		h, ok := store.AuditBlockHash(first, block, idx)
		if !ok {
			err := q.QueryRowContext(ctx, `SELECT first, hashes FROM audit_tree_blocks WHERE first <= ? ORDER BY first DESC LIMIT 1`, idx).
				Scan(&first, &block)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return nil, interpretError("read audit hashes", err)
			}
			if h, ok = store.AuditBlockHash(first, block, idx); err != nil || !ok {
				return nil, fmt.Errorf("read audit hashes: tree hash %d: %w", idx, store.ErrNotFound)
			}
		}
		out[i] = h
	}
	return out, nil
}

// ReadAuditHashes answers the Merkle tree's stored hashes at indexes, in order.
func (d *DB) ReadAuditHashes(ctx context.Context, indexes []int64) ([][]byte, error) {
	return readAuditHashes(ctx, d.r, indexes)
}

// ---- read ----

// maxAuditPage is the most events one ListAuditEvents answers.
const maxAuditPage = 10000

// ListAuditEvents answers sealed events after p.AfterSeq, by seq: those of the records from the
// one holding event AfterSeq+1 on. Each record holds an event at least, so limit records are
// enough.
func (d *DB) ListAuditEvents(ctx context.Context, p store.ListAuditEventsParams) ([]store.AuditEvent, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, maxAuditPage)
	after := int64(min(p.AfterSeq, math.MaxInt64-1))
	// A seal whose record is gone answers nothing: the events missing from the chain are what
	// verification names.
	rows, err := d.r.QueryContext(ctx, `SELECT s.record_id, s.seq, r.events, s.prev_hash, s.hashes FROM audit_seals s
		JOIN audit_records r ON r.id = s.record_id
		WHERE s.seq >= coalesce((SELECT max(seq) FROM audit_seals WHERE seq <= ?1 + 1), 1) ORDER BY s.seq LIMIT ?2 + 0`, after, limit)
	if err != nil {
		return nil, interpretError("list audit events", err)
	}
	defer rows.Close()
	var events []store.AuditEvent
	for rows.Next() && len(events) < limit {
		var (
			id, seq                int64
			text, prevHash, hashes []byte
		)
		if err := rows.Scan(&id, &seq, &text, &prevHash, &hashes); err != nil {
			return nil, interpretError("list audit events", err)
		}
		record, err := store.ExpandAuditRecord(id, uint64(seq), text, prevHash, hashes)
		if err != nil {
			return nil, fmt.Errorf("list audit events: %w", err)
		}
		for _, e := range record {
			if e.Seq > p.AfterSeq && len(events) < limit {
				events = append(events, e)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("list audit events", err)
	}
	return events, nil
}

// LatestAuditCheckpoint answers the newest checkpoint.
func (d *DB) LatestAuditCheckpoint(ctx context.Context) (store.AuditCheckpoint, error) {
	var (
		cp            store.AuditCheckpoint
		size, created int64
	)
	err := d.r.QueryRowContext(ctx, `SELECT size, root_hash, head_hash, note, created_at FROM audit_checkpoints
		ORDER BY size DESC LIMIT 1`).Scan(&size, &cp.RootHash, &cp.HeadHash, &cp.Note, &created)
	if err != nil {
		return store.AuditCheckpoint{}, interpretError("latest audit checkpoint", err)
	}
	cp.Size = uint64(size)
	cp.CreatedAt = fromMicros(created)
	return cp, nil
}
