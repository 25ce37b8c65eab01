package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ag-coord/ag/internal/jsontext"
	"github.com/ag-coord/ag/internal/store"
)

// ---- the audit log ----
//
// The log is tables of appended rows (store/auditrecord.go, migrations/0005_audit_records.sql
// and 0006_audit_seals.sql). Every statement that changes state inserts one row into
// audit_records holding all the events it records, as a JSON array, most often as one more
// data-modifying CTE of the statement itself (auditRecord(SELECT ... FROM the change's rows)),
// so that recording costs no round trip, and one row however many jobs a grouped claim or
// completion changes. A seal inserts a row into audit_seals for each record it seals (the
// record's place in the chain and its events' hashes) and one into audit_tree_blocks (the
// Merkle tree hashes it computed); it never updates a record.
//
// Writers never touch audit_head: only a seal does, in the statement that stores it, which
// moves the head only from where the seal began; the head's row lock serializes the sealers of
// every replica.

var _ store.AuditStore = (*DB)(nil)

// AuditSignal answers a channel closed after the next commit of this store that wrote audit
// events. Other replicas' events are found by the sealer's polling.
func (db *DB) AuditSignal() <-chan struct{} { return db.auditSignal.Wait() }

// audited fires the audit signal: a commit wrote events.
func (db *DB) audited() { db.auditSignal.Fire() }

// ---- actors ----

// The actor of a method given a worker or holder, "<principal>|<label>", is taken from it by
// the statement: split_part(holder, '|', 1) and the holder itself.

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

// Details are compact JSON objects whose keys are sorted, as the canonical form has them anyway.
// Those computed by a statement are built in SQL by jsonObject from members whose values are
// SQL expressions of JSON text; the others in Go, by detailsBuilder or details.

// member is a member of a details object built in SQL: its key and an SQL expression of its
// JSON value, never NULL.
type member struct{ key, value string }

// mem is a member.
func mem(key, value string) member { return member{key: key, value: value} }

// jsonObject answers an SQL expression of the JSON object of members, which must come in key
// order. It is one concatenation, with as few function calls as can be: it runs for every
// event of the hot paths.
func jsonObject(members ...member) string {
	if !slices.IsSortedFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) }) {
		panic("postgres: details members out of key order")
	}
	sep := "{"
	parts := make([]string, 0, 2*len(members)+1)
	for _, m := range members {
		parts = append(parts, `'`+sep+`"`+m.key+`":'`, m.value)
		sep = ","
	}
	parts = append(parts, `'}'`)
	// Adjacent literals (a value's own quotes, the closing brace) are joined: one concatenation
	// less each.
	sql := strings.Join(parts, " || ")
	for {
		joined := adjacentLiterals.ReplaceAllString(sql, "'$1$2'")
		if joined == sql {
			return "(" + sql + ")"
		}
		sql = joined
	}
}

// adjacentLiterals matches two string literals concatenated, neither holding a quote.
var adjacentLiterals = regexp.MustCompile(`'([^']*)' \|\| '([^']*)'`)

// jsonText is the JSON string of a text expression.
func jsonText(expr string) string { return `to_json((` + expr + `)::text)::text` }

// jsonWord is the JSON string of a text expression whose values need no escaping (a state).
func jsonWord(expr string) string { return `'"' || (` + expr + `) || '"'` }

// jsonInt is the JSON number of an integer expression.
func jsonInt(expr string) string { return `(` + expr + `)::text` }

// jsonTexts is the JSON array of a text[] expression.
func jsonTexts(expr string) string { return `to_json((` + expr + `)::text[])::text` }

// jsonTime is the JSON string of a timestamptz expression: RFC 3339 in UTC with microseconds,
// as the store keeps times (its characters need no escaping).
func jsonTime(expr string) string {
	return `'"' || to_char((` + expr + `) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '"'`
}

// detailsBuilder writes the compact JSON of a details object whose members are added in key
// order, with less work than encoding/json: it runs for every enqueue and completion.
type detailsBuilder struct {
	b    []byte
	last string
}

// key starts the member k.
func (d *detailsBuilder) key(k string) *detailsBuilder {
	if d.b == nil {
		d.b = append(make([]byte, 0, 128), '{')
	} else {
		if k <= d.last {
			panic("postgres: details member " + k + " after " + d.last) // a bug of this package
		}
		d.b = append(d.b, ',')
	}
	d.last = k
	d.b = jsontext.AppendString(d.b, k)
	d.b = append(d.b, ':')
	return d
}

func (d *detailsBuilder) str(k, v string) *detailsBuilder {
	d.key(k)
	d.b = jsontext.AppendString(d.b, v)
	return d
}

func (d *detailsBuilder) int(k string, v int64) *detailsBuilder {
	d.key(k)
	d.b = strconv.AppendInt(d.b, v, 10)
	return d
}

// done answers the object.
func (d *detailsBuilder) done() string {
	if d.b == nil {
		return "{}"
	}
	return string(append(d.b, '}'))
}

// details answers the compact JSON of a details object (keys sorted, HTML left unescaped).
func details(m map[string]any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		panic(fmt.Sprintf("postgres: encode audit details: %v", err)) // only strings, numbers and raw JSON
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// jsonValue answers b as a JSON value for details: itself, compacted, when it is JSON, null when
// it is empty, and a JSON string otherwise, so that a seal never meets details it cannot read.
func jsonValue(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		s, _ := json.Marshal(string(b))
		return s
	}
	return buf.Bytes()
}

// ---- records ----

// recordEventJSON is the JSON text of the event e in a record, after its time, as
// store.DecodeAuditRecord reads it (see auditRecord): the strings escaped by to_json, but the
// action, always one of the store's own names, which JSON needs not escape; the details as
// written.
var recordEventJSON = `',"p":' || ` + jsonText("e.principal") + ` || ',"h":' || ` + jsonText("e.holder") +
	` || ',"a":"' || e.action || '","s":' || ` + jsonText("e.subject") + ` || coalesce(',"d":' || (e.details)::text, '') || '}'`

// recordTimeJSON is the start of the JSON text of every event of a statement: its time, the
// statement's, in microseconds (extract answers numeric, so they are exact). It is computed once
// per statement, not per event.
const recordTimeJSON = `(SELECT '{"t":' || (extract(epoch FROM {now}) * 1000000)::bigint)`

// ---- seal ----

// A seal takes the pending records in the order their ids were taken (0008_audit_order_by_id.sql,
// ADR-0019). A record's id is taken by the statement that writes it, after everything that
// statement saw: a record written after another committed has the greater id, so the log's
// order never contradicts what one writer saw of another. Ids are taken before their records
// commit, though. A seal therefore first reads the last id taken, then waits for every
// transaction that holds audit_records open for writing (a record's id is taken under that
// lock) to end: after that, every record up to that id has committed or never will.
//
// A seal writes one row of audit_seals per record and never touches the records. It is computed
// outside any transaction and stored by one statement that moves the head only from where the
// seal began: a transaction held open meanwhile would keep vacuum from cleaning the rows that
// claims and completions leave behind, and every claim would walk past them.

// sealHeadSQL reads the head and the id of the last record it sealed.
const sealHeadSQL = `SELECT size, hash, last_id FROM audit_head`

// sealLastIDSQL answers the last record id taken, committed or not (0 before the first).
const sealLastIDSQL = `SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('audit_records', 'id')::regclass), 0)`

// sealWritersSQL answers the virtual transaction ids of the other transactions holding
// audit_records open for writing. Run after sealLastIDSQL: a record whose id was taken by then
// is held by one of them until it commits.
const sealWritersSQL = `SELECT coalesce(array_agg(virtualtransaction), '{}') FROM pg_locks
WHERE locktype = 'relation' AND relation = 'audit_records'::regclass AND mode = 'RowExclusiveLock' AND granted
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND pid IS DISTINCT FROM pg_backend_pid()`

// sealWritersLeftSQL counts the transactions of $1 still holding audit_records open.
const sealWritersLeftSQL = `SELECT count(*) FROM pg_locks
WHERE locktype = 'relation' AND relation = 'audit_records'::regclass AND virtualtransaction = ANY($1::text[])`

// defaultSealWaitMost bounds how long a seal waits for the transactions writing records to end.
// A transaction that writes a record and stays open holds back the sealing of every record
// after it; the seal then seals what it knew to be final and reports what it waits for.
const defaultSealWaitMost = 5 * time.Second

// sealReadSQL reads $1 pending records after id $2, up to id $3, in id order.
const sealReadSQL = `SELECT id, events FROM audit_records WHERE id > $2 AND id <= $3 ORDER BY id LIMIT $1`

// sealPage answers how many pending records to read for want more events, when the last seal
// took perRecord16/16 events per record: enough at that rate and a few more, since records
// vary, and never more than want, since a record holds an event at least.
func sealPage(want int, perRecord16 int64) int {
	n := int64(want)*16/max(perRecord16, 16) + 8
	return int(min(n, int64(want)))
}

// sealWriteSQL stores a seal computed from the head of size $1 whose seals stopped at record
// $2: the head ($3 size, $4 hash, $5 the last record sealed), each record's place ($6 seqs, $7
// ids, $8 prev hashes, $9 hashes), the block of new tree hashes ($10 its first index, $11 the
// hashes) and the checkpoint ($12..$16). When the head is no longer the one the seal began from
// (another sealer moved it), it stores nothing. It answers how many heads it moved (1 or 0) and
// how many records it sealed; a record sealed already fails it.
const sealWriteSQL = `WITH h AS (
	UPDATE audit_head SET size = $3, hash = $4, last_id = $5
	WHERE size = $1 AND last_id = $2
	RETURNING 1),
s AS (
	INSERT INTO audit_seals (seq, record_id, prev_hash, hashes)
	SELECT * FROM unnest($6::bigint[], $7::bigint[], $8::bytea[], $9::bytea[])
	WHERE EXISTS (SELECT FROM h)
	RETURNING 1),
b AS (
	INSERT INTO audit_tree_blocks (first, hashes) SELECT $10, $11 WHERE EXISTS (SELECT FROM h)),
c AS (
	INSERT INTO audit_checkpoints (size, root_hash, head_hash, note, created_at)
	SELECT $12, $13, $14, $15, coalesce($16::timestamptz, now()) WHERE EXISTS (SELECT FROM h))
SELECT (SELECT count(*) FROM h), (SELECT count(*) FROM s)`

// sealAttempts bounds how often a seal is computed again because another replica's seal moved
// the head first; the last attempt holds the head's row from the start, so that it cannot.
const sealAttempts = 5

// errHeadMoved says that another sealer moved the head since the seal began.
var errHeadMoved = errors.New("postgres: seal audit: the head moved since the seal began")

// defaultSealLimit is SealAudit's batch when the caller gives none. Every seal reads the head,
// waits for the transactions writing records, and stores itself with a statement
// that moves the head's row and inserts a checkpoint, however many events it takes: under a
// steady claim+complete load, the log cost the queue 12–18% of its throughput with seals of
// 1,000 events and 1–9% with seals of 5,000 (docs/benchmarks.md).
const defaultSealLimit = 5000

// AuditSealBatch answers defaultSealLimit.
func (db *DB) AuditSealBatch() int { return defaultSealLimit }

// SealAudit seals the oldest pending records, p.Limit events or a little more (whole records).
func (db *DB) SealAudit(ctx context.Context, p store.SealAuditParams) (int, error) {
	if p.Seal == nil {
		return 0, errors.New("postgres: seal audit: no Seal given")
	}
	limit := p.Limit
	if limit <= 0 {
		limit = defaultSealLimit
	}
	buf, owned := db.sealReads.Take()
	defer func() { db.sealReads.Give(buf.reset(), owned) }()
	for range sealAttempts - 1 {
		n, err := db.seal(ctx, db.pool, p, limit, false, &buf)
		if !errors.Is(err, errHeadMoved) {
			return n, err
		}
	}
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return 0, interpretError("seal audit", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	n, err := db.seal(ctx, tx, p, limit, true, &buf)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, interpretError("seal audit: commit", err)
	}
	return n, nil
}

// seal seals the pending records after the head, limit events or a little more, through q,
// reading them into pendingRead; with lock, the head's row is locked first (q is a
// transaction), so no other sealer can move it.
func (db *DB) seal(ctx context.Context, q sealQuerier, p store.SealAuditParams, limit int, lock bool, pendingRead *pendingPage) (int, error) {
	headSQL := sealHeadSQL
	if lock {
		headSQL += " FOR UPDATE"
	}
	var (
		head store.AuditHead
		size int64
		from int64
	)
	if err := q.QueryRow(ctx, headSQL).Scan(&size, &head.Hash, &from); err != nil {
		return 0, interpretError("seal audit: read the head", err)
	}
	head.Size = uint64(size)
	*pendingRead = pendingRead.reset()
	pendingRead.last = from
	// The records up to final are all committed that ever will be: first those a seal before
	// found so, then, when they are not enough, those whose writers this seal waits for.
	final, waited := db.sealFinal.Load(), false
	var waitErr error
	for {
		if pendingRead.last < final {
			page := sealPage(limit-len(pendingRead.events), db.sealPerRecord16.Load())
			rows, err := q.Query(ctx, sealReadSQL, page, pendingRead.last, final)
			if err != nil {
				return 0, interpretError("seal audit: read pending records", err)
			}
			read, err := pendingRead.read(rows, limit)
			if err != nil {
				return 0, interpretError("seal audit: read pending records", err)
			}
			if len(pendingRead.events) >= limit {
				break
			}
			if read == page {
				continue // a full page may have more behind it
			}
			pendingRead.last = final
		}
		if waited {
			break
		}
		waited = true
		newFinal, err := waitForRecordWriters(ctx, q, db.sealWaitMost)
		if err != nil {
			if !errors.Is(err, errWritersStillOpen) {
				return 0, err
			}
			waitErr = err
			break
		}
		db.raiseSealFinal(newFinal)
		final = newFinal
	}
	pending := pendingRead.events
	if len(pending) == 0 {
		return 0, waitErr
	}
	db.sealPerRecord16.Store(int64(len(pending)) * 16 / int64(len(pendingRead.records)))

	seal, err := p.Seal(head, pending, func(indexes []int64) ([][]byte, error) {
		return readAuditHashes(ctx, q, indexes)
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: seal audit: %w", err)
	}
	sealed, first, block, err := store.AuditSealRows(head, pending, seal)
	if err != nil {
		return 0, fmt.Errorf("postgres: seal audit: %w", err)
	}
	if len(sealed) != len(pendingRead.records) {
		return 0, fmt.Errorf("postgres: seal audit: %d records sealed of %d read", len(sealed), len(pendingRead.records))
	}
	seqs, ids := make([]int64, len(sealed)), make([]int64, len(sealed))
	prevs, hashes := make([][]byte, len(sealed)), make([][]byte, len(sealed))
	for i, r := range sealed {
		seqs[i], ids[i], prevs[i], hashes[i] = int64(r.Seq), r.ID, r.PrevHash, r.Hashes
	}
	cp := seal.Checkpoint
	var created any
	if !cp.CreatedAt.IsZero() {
		created = cp.CreatedAt
	}
	note := cp.Note
	if note == nil {
		note = []byte{}
	}
	to := pendingRead.records[len(pendingRead.records)-1]
	var moved, stored int64
	err = q.QueryRow(ctx, sealWriteSQL, size, from,
		int64(seal.Head.Size), seal.Head.Hash, to,
		seqs, ids, prevs, hashes, first, block,
		int64(cp.Size), cp.RootHash, cp.HeadHash, note, created).Scan(&moved, &stored)
	if err != nil {
		return 0, interpretError("seal audit: store the seal", err)
	}
	if moved == 0 && !lock {
		return 0, errHeadMoved
	}
	if moved != 1 || int(stored) != len(sealed) {
		return 0, fmt.Errorf("postgres: seal audit: the head moved %d times and %d of %d records were sealed", moved, stored, len(sealed))
	}
	return len(pending), nil
}

// sealQuerier is the pool or a transaction.
type sealQuerier interface {
	querier
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// raiseSealFinal records that every record up to id has committed or never will, unless a
// seal knew more already.
func (db *DB) raiseSealFinal(id int64) {
	for {
		old := db.sealFinal.Load()
		if id <= old || db.sealFinal.CompareAndSwap(old, id) {
			return
		}
	}
}

// errWritersStillOpen says that transactions writing records were still open after a seal's wait.
var errWritersStillOpen = errors.New("still open")

// waitForRecordWriters answers the last record id taken, once every transaction that held
// audit_records open for writing when it was read has ended: every record up to that id has
// then committed or never will. After most it gives up with errWritersStillOpen,
// naming the virtual transaction ids it waited for (pg_locks.virtualtransaction).
func waitForRecordWriters(ctx context.Context, q sealQuerier, most time.Duration) (int64, error) {
	var batch pgx.Batch
	batch.Queue(sealLastIDSQL)
	batch.Queue(sealWritersSQL)
	br := q.SendBatch(ctx, &batch)
	var (
		last    int64
		writers []string
	)
	err := br.QueryRow().Scan(&last)
	if err == nil {
		err = br.QueryRow().Scan(&writers)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, interpretError("seal audit: read the last record id", err)
	}
	deadline := time.Now().Add(most)
	pause := 500 * time.Microsecond
	for len(writers) > 0 {
		var open int64
		if err := q.QueryRow(ctx, sealWritersLeftSQL, writers).Scan(&open); err != nil {
			return 0, interpretError("seal audit: wait for the transactions writing records", err)
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("postgres: seal audit: %d of the transactions writing audit records (virtual ids %v) %w after %s; "+
				"the records after theirs wait until they end (pg_locks shows their pids)", open, writers, errWritersStillOpen, most)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 20*time.Millisecond)
	}
	return last, nil
}

// pendingPage gathers the pending records a seal reads, page after page: their events decoded
// into one slice, up to the record that reaches the events wanted, each record's id, and the id
// of the last row read.
type pendingPage struct {
	events  []store.AuditEvent
	records []int64
	last    int64
}

// reset empties p for the next seal, keeping its memory: a seal reads up to 5,000 events, about
// 200 bytes each, and the sealer runs seals back to back under load. No reference into the
// records of the seal before outlives it.
func (p pendingPage) reset() pendingPage {
	clear(p.events[:cap(p.events)])
	return pendingPage{events: p.events[:0], records: p.records[:0]}
}

// read reads a page of sealReadSQL from rows, decoding its records up to the one that reaches
// want events (the seal takes no more), and answers how many rows the page held.
func (p *pendingPage) read(rows pgx.Rows, want int) (int, error) {
	defer rows.Close()
	n := 0
	for rows.Next() {
		var text []byte
		if err := rows.Scan(&p.last, &text); err != nil {
			return n, err
		}
		n++
		if len(p.events) >= want {
			continue
		}
		var err error
		if p.events, err = store.AppendAuditRecord(p.events, p.last, text); err != nil {
			return n, err
		}
		p.records = append(p.records, p.last)
	}
	return n, rows.Err()
}

// readAuditHashesSQL answers the stored tree hashes at the indexes $1, in their order; NULL for
// an index not stored. Index i is in the block with the greatest first <= i, if that block
// reaches it; only its own 32 bytes are read from the block and sent.
const readAuditHashesSQL = `SELECT CASE WHEN u.idx - b.first < octet_length(b.hashes) / 32
	THEN substring(b.hashes FROM ((u.idx - b.first) * 32 + 1)::int FOR 32) END
FROM unnest($1::bigint[]) WITH ORDINALITY AS u(idx, n)
LEFT JOIN LATERAL (
	SELECT first, hashes FROM audit_tree_blocks WHERE first <= u.idx ORDER BY first DESC LIMIT 1) b ON true
ORDER BY u.n`

func readAuditHashes(ctx context.Context, qr querier, indexes []int64) ([][]byte, error) {
	if len(indexes) == 0 {
		return [][]byte{}, nil
	}
	rows, err := qr.Query(ctx, readAuditHashesSQL, indexes)
	if err != nil {
		return nil, interpretError("read audit hashes", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, interpretError("read audit hashes", err)
	}
	for i, h := range out {
		if h == nil {
			return nil, fmt.Errorf("audit tree hash %d: %w", indexes[i], store.ErrNotFound)
		}
	}
	return out, nil
}

// ReadAuditHashes answers the Merkle tree's stored hashes at indexes, in order.
func (db *DB) ReadAuditHashes(ctx context.Context, indexes []int64) ([][]byte, error) {
	return readAuditHashes(ctx, db.pool, indexes)
}

// ---- read ----

// maxAuditPage is the most events one ListAuditEvents answers.
const maxAuditPage = 10000

// listAuditRecordsSQL answers the sealed records that hold events $1 to $2, by seq: the one
// holding $1 (the greatest seq <= $1) and those starting after it, up to $2, through the seals'
// primary key and the records' own. A seal whose record is gone
// answers nothing: the events missing from the chain are what verification names.
const listAuditRecordsSQL = `SELECT s.record_id, s.seq, r.events, s.prev_hash, s.hashes FROM audit_seals s
JOIN audit_records r ON r.id = s.record_id
WHERE s.seq >= coalesce((SELECT max(seq) FROM audit_seals WHERE seq <= $1), $1) AND s.seq <= $2
ORDER BY s.seq`

// ListAuditEvents answers sealed events after p.AfterSeq, by seq.
func (db *DB) ListAuditEvents(ctx context.Context, p store.ListAuditEventsParams) ([]store.AuditEvent, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, maxAuditPage)
	if p.AfterSeq >= math.MaxInt64 {
		return nil, nil
	}
	from := int64(p.AfterSeq) + 1
	to := from + int64(limit) - 1
	if to < from {
		to = math.MaxInt64
	}
	rows, err := db.pool.Query(ctx, listAuditRecordsSQL, from, to)
	if err != nil {
		return nil, interpretError("list audit events", err)
	}
	var out []store.AuditEvent
	var id, seq int64
	var text, prev, hashes []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &seq, &text, &prev, &hashes}, func() error {
		events, err := store.ExpandAuditRecord(id, uint64(seq), text, prev, hashes)
		if err != nil {
			return err
		}
		for _, e := range events {
			if e.Seq > p.AfterSeq && len(out) < limit {
				out = append(out, e)
			}
		}
		text, prev, hashes = nil, nil, nil // the next row's get slices of their own
		return nil
	})
	if err != nil {
		return nil, interpretError("list audit events", err)
	}
	return out, nil
}

// LatestAuditCheckpoint answers the newest checkpoint.
func (db *DB) LatestAuditCheckpoint(ctx context.Context) (store.AuditCheckpoint, error) {
	var cp store.AuditCheckpoint
	var size int64
	err := db.pool.QueryRow(ctx, `SELECT size, root_hash, head_hash, note, created_at FROM audit_checkpoints
		ORDER BY size DESC LIMIT 1`).Scan(&size, &cp.RootHash, &cp.HeadHash, &cp.Note, &cp.CreatedAt)
	if err != nil {
		return store.AuditCheckpoint{}, interpretError("audit checkpoint", err)
	}
	cp.Size = uint64(size)
	cp.CreatedAt = cp.CreatedAt.UTC()
	return cp, nil
}
