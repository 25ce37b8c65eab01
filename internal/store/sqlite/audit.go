package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

// The audit log (docs/audit.md, store.AuditStore). Every write that changes state inserts its
// events with record, in its own transaction: one more statement, from the driver's statement
// cache. SealAudit is a write too, so the one writer serializes sealers with everything else.

var _ store.AuditStore = (*DB)(nil)

const insertAuditEventSQL = `INSERT INTO audit_events (time, principal, holder, action, subject, details)
	VALUES (?, ?, ?, ?, ?, ?)`

// record inserts one audit event in tx, which must be a write's transaction: only the writer
// goroutine runs it, and the commit of its batch fires the audit signal. The actor comes from
// the method's caller: the ctx a write function gets is the writer's, which carries no actor.
func (d *DB) record(ctx context.Context, tx *sql.Tx, now int64, actor store.Actor, action, subject string, details []byte) error {
	if !auditEnabled {
		return nil
	}
	var det any
	if details != nil {
		det = string(details) // TEXT, as written
	}
	if _, err := tx.ExecContext(ctx, insertAuditEventSQL, now, actor.Principal, actor.Holder, action, subject, det); err != nil {
		return interpret("record audit event "+action+" of "+subject, err)
	}
	d.audited = true
	return nil
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
	x.b = store.AppendJSONString(x.b, k)
	x.b = append(x.b, ':')
}

func (x *details) str(k, v string) *details {
	x.key(k)
	x.b = store.AppendJSONString(x.b, v)
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
		x.b = store.AppendJSONString(x.b, s)
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
		x.b = store.AppendJSONString(x.b, string(v))
		return x
	}
	x.b = append(x.b, buf.Bytes()...)
	return x
}

func (x *details) done() []byte {
	if x.b == nil {
		return []byte("{}")
	}
	return append(x.b, '}')
}

// detailsTimeLayout is how times appear in details.
const detailsTimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// ---- seal ----

// defaultSealLimit is SealAudit's batch when the caller gives none.
const defaultSealLimit = 1000

// sealAttempts bounds how often a seal is computed again because another sealer (another
// process on the same file) moved the head meanwhile.
const sealAttempts = 10

// SealAudit seals up to p.Limit pending events, oldest first. The seal is computed from a read
// snapshot, outside the one writer, and only stored by a write, which checks that the head is
// still the one the seal continues: hashing and signing a batch takes milliseconds, and every
// claim and completion would wait for them if they ran in the write. Events committed after the
// snapshot have larger ids than any it saw, so the batch is still the oldest pending events
// when it is stored.
func (d *DB) SealAudit(ctx context.Context, p store.SealAuditParams) (int, error) {
	if p.Seal == nil {
		return 0, errors.New("seal audit: no Seal function")
	}
	limit := p.Limit
	if limit <= 0 {
		limit = defaultSealLimit
	}
	for range sealAttempts {
		head, lastID, pending, seal, err := d.computeSeal(ctx, p, limit)
		if err != nil || len(pending) == 0 {
			return 0, err
		}
		err = d.write(ctx, "seal audit", func(ctx context.Context, tx *sql.Tx) error {
			now, nowID, err := readHead(ctx, tx)
			if err != nil {
				return err
			}
			if now.Size != head.Size || !bytes.Equal(now.Hash, head.Hash) || nowID != lastID {
				return errHeadMoved
			}
			return storeSeal(ctx, tx, head, seal, micros(d.now()))
		})
		if errors.Is(err, errHeadMoved) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return len(pending), nil
	}
	return 0, fmt.Errorf("seal audit: the head moved during %d seals in a row", sealAttempts)
}

// errHeadMoved says that a seal computed from a snapshot no longer continues the head.
var errHeadMoved = errors.New("seal audit: the head moved since the seal was computed")

// computeSeal reads the head and up to limit pending events in one read transaction (one
// snapshot) and seals them with p.Seal, which reads tree hashes in that snapshot too.
func (d *DB) computeSeal(ctx context.Context, p store.SealAuditParams, limit int) (
	head store.AuditHead, lastID int64, pending []store.AuditEvent, sealed store.AuditSeal, err error,
) {
	tx, err := d.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return head, 0, nil, sealed, interpret("seal audit: begin", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to keep
	if head, lastID, err = readHead(ctx, tx); err != nil {
		return head, 0, nil, sealed, err
	}
	if err = checkHead(ctx, tx, head, lastID); err != nil {
		return head, 0, nil, sealed, err
	}
	if pending, err = pendingEvents(ctx, tx, lastID, limit); err != nil || len(pending) == 0 {
		return head, lastID, nil, sealed, err
	}
	sealed, err = p.Seal(head, slices.Clone(pending), func(indexes []int64) ([][]byte, error) {
		return readAuditHashes(ctx, tx, indexes)
	})
	if err != nil {
		return head, 0, nil, sealed, fmt.Errorf("seal audit: %w", err)
	}
	if err := checkSeal(head, pending, sealed); err != nil {
		return head, 0, nil, sealed, fmt.Errorf("seal audit: %w", err)
	}
	return head, lastID, pending, sealed, nil
}

// readHead reads the head and the id of its last event.
func readHead(ctx context.Context, tx *sql.Tx) (store.AuditHead, int64, error) {
	var (
		head         store.AuditHead
		size, lastID int64
	)
	if err := tx.QueryRowContext(ctx, `SELECT size, hash, last_id FROM audit_head WHERE one = 1`).
		Scan(&size, &head.Hash, &lastID); err != nil {
		return head, 0, interpret("seal audit: read the head", err)
	}
	head.Size = uint64(size)
	return head, lastID, nil
}

// checkHead refuses to seal after the head's event was deleted or renumbered: ids would then
// be taken again by new events, which would hide among the sealed ones (0004_audit.sql) and never
// be sealed. Only tampering with the file does that, and verification names it; the seal stops,
// loudly, rather than lose events quietly.
func checkHead(ctx context.Context, tx *sql.Tx, head store.AuditHead, lastID int64) error {
	if head.Size == 0 {
		return nil
	}
	var seq sql.NullInt64
	err := tx.QueryRowContext(ctx, `SELECT seq FROM audit_events WHERE id = ?`, lastID).Scan(&seq)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return interpret("seal audit: read the head's event", err)
	}
	if err != nil || !seq.Valid || uint64(seq.Int64) != head.Size {
		return fmt.Errorf("seal audit: the head's event (seq %d, id %d) is missing or renumbered: the log was tampered with; "+
			"nothing is sealed until it is restored", head.Size, lastID)
	}
	return nil
}

// pendingEvents reads up to limit unsealed events in insertion order: those after the last
// sealed one, lastID (see 0004_audit.sql). The limit is "? + 0" because SQLite prepares a
// statement again whenever a bare LIMIT parameter is bound.
func pendingEvents(ctx context.Context, tx *sql.Tx, lastID int64, limit int) ([]store.AuditEvent, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, time, principal, holder, action, subject, details
		FROM audit_events WHERE id > ? AND seq IS NULL ORDER BY id LIMIT ? + 0`, lastID, limit)
	if err != nil {
		return nil, interpret("seal audit: read pending events", err)
	}
	defer rows.Close()
	var pending []store.AuditEvent
	for rows.Next() {
		var (
			e       store.AuditEvent
			t       int64
			details sql.NullString
		)
		if err := rows.Scan(&e.ID, &t, &e.Principal, &e.Holder, &e.Action, &e.Subject, &details); err != nil {
			return nil, interpret("seal audit: read pending events", err)
		}
		e.Time = fromMicros(t)
		if details.Valid {
			e.Details = []byte(details.String)
		}
		pending = append(pending, e)
	}
	if err := rows.Err(); err != nil {
		return nil, interpret("seal audit: read pending events", err)
	}
	return pending, nil
}

// checkSeal refuses a seal that does not give exactly the pending events, in their order, the
// places that follow head: the store keeps only what continues its chain.
func checkSeal(head store.AuditHead, pending []store.AuditEvent, seal store.AuditSeal) error {
	if len(seal.Events) != len(pending) {
		return fmt.Errorf("%d events pending, %d sealed", len(pending), len(seal.Events))
	}
	for i, e := range seal.Events {
		if e.ID != pending[i].ID {
			return fmt.Errorf("sealed event %d is event id %d, want id %d (insertion order)", i, e.ID, pending[i].ID)
		}
		if want := head.Size + uint64(i) + 1; e.Seq != want {
			return fmt.Errorf("event id %d sealed as seq %d, want %d", e.ID, e.Seq, want)
		}
		if len(e.Hash) == 0 || len(e.PrevHash) == 0 {
			return fmt.Errorf("event id %d sealed without its hashes", e.ID)
		}
	}
	n := head.Size + uint64(len(pending))
	if seal.Head.Size != n || seal.Checkpoint.Size != n {
		return fmt.Errorf("head size %d and checkpoint size %d, want %d", seal.Head.Size, seal.Checkpoint.Size, n)
	}
	if last := seal.Events[len(seal.Events)-1].Hash; !bytes.Equal(seal.Head.Hash, last) {
		return errors.New("the head's hash is not the last sealed event's")
	}
	if n > math.MaxInt64 {
		return fmt.Errorf("log size %d is out of range", n)
	}
	return nil
}

// sealChunk bounds the rows of one statement of storeSeal: 4 parameters each, well under
// SQLite's limit. A seal of the server's batch (1000 events) takes a handful of statements.
const sealChunk = 250

// storeSeal stores what a checked seal answers: each event's place, exactly once, the new tree
// hashes, the head and the checkpoint.
func storeSeal(ctx context.Context, tx *sql.Tx, head store.AuditHead, seal store.AuditSeal, now int64) error {
	for chunk := range slices.Chunk(seal.Events, sealChunk) {
		args := make([]any, 0, 4*len(chunk))
		for _, e := range chunk {
			args = append(args, e.ID, int64(e.Seq), e.PrevHash, e.Hash)
		}
		// checkSeal made the ids the pending ones, each once: every row of v must update an
		// event that is still pending, or nothing is sealed.
		res, err := tx.ExecContext(ctx, `WITH v (id, seq, prev_hash, hash) AS (VALUES `+rows(len(chunk), 4)+`)
			UPDATE audit_events SET seq = v.seq, prev_hash = v.prev_hash, hash = v.hash FROM v
			WHERE audit_events.id = v.id AND audit_events.seq IS NULL`, args...)
		if err != nil {
			return interpret(fmt.Sprintf("seal audit: events %d to %d", chunk[0].Seq, chunk[len(chunk)-1].Seq), err)
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(len(chunk)) {
			return fmt.Errorf("seal audit: %d of events %d to %d were pending (%v): nothing sealed",
				n, chunk[0].Seq, chunk[len(chunk)-1].Seq, err)
		}
	}
	for chunk := range slices.Chunk(seal.TreeHashes, 2*sealChunk) {
		args := make([]any, 0, 2*len(chunk))
		for _, h := range chunk {
			args = append(args, h.Index, h.Hash)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO audit_tree_hashes (idx, hash) VALUES `+rows(len(chunk), 2), args...); err != nil {
			return interpret(fmt.Sprintf("seal audit: tree hashes %d to %d", chunk[0].Index, chunk[len(chunk)-1].Index), err)
		}
	}
	res, err := tx.ExecContext(ctx, `UPDATE audit_head SET size = ?, hash = ?, last_id = ? WHERE one = 1 AND size = ?`,
		int64(seal.Head.Size), seal.Head.Hash, seal.Events[len(seal.Events)-1].ID, int64(head.Size))
	if err != nil {
		return interpret("seal audit: move the head", err)
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
		return interpret(fmt.Sprintf("seal audit: checkpoint of size %d", cp.Size), err)
	}
	return nil
}

// rows answers n rows of width parameters for a VALUES clause: "(?, ?), (?, ?), ...".
func rows(n, width int) string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", width), ", ") + ")"
	return strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
}

// hashChunk bounds the indexes of one lookup, well under SQLite's parameter limit.
const hashChunk = 500

// readAuditHashes answers the stored tree hashes at indexes, in their order.
func readAuditHashes(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, indexes []int64) ([][]byte, error) {
	found := make(map[int64][]byte, len(indexes))
	for chunk := range slices.Chunk(indexes, hashChunk) {
		args := make([]any, len(chunk))
		for i, idx := range chunk {
			args[i] = idx
		}
		rows, err := q.QueryContext(ctx, `SELECT idx, hash FROM audit_tree_hashes WHERE idx IN (`+placeholders(1, len(chunk))+`)`, args...)
		if err != nil {
			return nil, interpret("read audit hashes", err)
		}
		for rows.Next() {
			var (
				idx  int64
				hash []byte
			)
			if err := rows.Scan(&idx, &hash); err != nil {
				rows.Close()
				return nil, interpret("read audit hashes", err)
			}
			found[idx] = hash
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, interpret("read audit hashes", err)
		}
	}
	out := make([][]byte, len(indexes))
	for i, idx := range indexes {
		h, ok := found[idx]
		if !ok {
			return nil, fmt.Errorf("read audit hashes: tree hash %d: %w", idx, store.ErrNotFound)
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

// ListAuditEvents answers sealed events after p.AfterSeq, by seq.
func (d *DB) ListAuditEvents(ctx context.Context, p store.ListAuditEventsParams) ([]store.AuditEvent, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, maxAuditPage)
	rows, err := d.r.QueryContext(ctx, `SELECT id, seq, time, principal, holder, action, subject, details, prev_hash, hash
		FROM audit_events WHERE seq > ? ORDER BY seq LIMIT ?`, int64(min(p.AfterSeq, math.MaxInt64)), limit)
	if err != nil {
		return nil, interpret("list audit events", err)
	}
	defer rows.Close()
	var events []store.AuditEvent
	for rows.Next() {
		var (
			e       store.AuditEvent
			seq, t  int64
			details sql.NullString
		)
		if err := rows.Scan(&e.ID, &seq, &t, &e.Principal, &e.Holder, &e.Action, &e.Subject, &details, &e.PrevHash, &e.Hash); err != nil {
			return nil, interpret("list audit events", err)
		}
		e.Seq = uint64(seq)
		e.Time = fromMicros(t)
		if details.Valid {
			e.Details = []byte(details.String)
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, interpret("list audit events", err)
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
		return store.AuditCheckpoint{}, interpret("latest audit checkpoint", err)
	}
	cp.Size = uint64(size)
	cp.CreatedAt = fromMicros(created)
	return cp, nil
}
