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
	d.b = store.AppendJSONString(d.b, k)
	d.b = append(d.b, ':')
	return d
}

func (d *detailsBuilder) str(k, v string) *detailsBuilder {
	d.key(k)
	d.b = store.AppendJSONString(d.b, v)
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

// A seal finds the pending records by the transaction that wrote them (0006_audit_seals.sql):
// every transaction whose xid is below the oldest one still running has ended, so the records
// below that bound are all those transactions wrote, and sealing them in (xid, id) order from
// where the last seal stopped (audit_head.last_xid, last_id) misses none and takes none twice.
// Ids alone would not do: a sequence hands them out as statements run, not as they commit.
//
// A seal writes one row of audit_seals per record and never touches the records. It is computed
// outside any transaction and stored by one statement that moves the head only from where the
// seal began: a transaction held open meanwhile would keep vacuum from cleaning the rows that
// claims and completions leave behind, and every claim would walk past them.

// sealHeadSQL reads the head, where its seals stopped, and the greatest xid of the records
// committed after that, NULL when there are none.
const sealHeadSQL = `SELECT h.size, h.hash, h.last_xid, h.last_id,
	(SELECT max(xid) FROM audit_records WHERE (xid, id) > (h.last_xid, h.last_id))
FROM audit_head h`

// sealWaitSQL counts the transactions still running whose xid is below $1, other than this
// one: until they end, a record they write would come before those of $1 in seal order.
const sealWaitSQL = `SELECT count(*) FROM pg_snapshot_xip(pg_current_snapshot()) AS x
WHERE x < $1::xid8 AND x IS DISTINCT FROM pg_current_xact_id_if_assigned()`

// sealWaitMost bounds how long a seal waits for older transactions to end before it seals
// without the records committed after them. A transaction that writes and stays open (in any
// database of the cluster) holds sealing back that long each time, as it holds vacuum back.
const sealWaitMost = 5 * time.Second

// sealReadSQL reads $1 pending records after ($2, $3) in seal order: (xid, id), below the
// oldest transaction still running.
const sealReadSQL = `SELECT xid, id, events FROM audit_records
WHERE (xid, id) > ($2::xid8, $3::bigint) AND xid < (SELECT pg_snapshot_xmin(pg_current_snapshot()))
ORDER BY xid, id LIMIT $1`

// sealPage answers how many pending records to read for want more events, when the last seal
// took perRecord16/16 events per record: enough at that rate and a few more, since records
// vary, and never more than want, since a record holds an event at least.
func sealPage(want int, perRecord16 int64) int {
	n := int64(want)*16/max(perRecord16, 16) + 8
	return int(min(n, int64(want)))
}

// sealWriteSQL stores a seal computed from the head of size $1 whose seals stopped at ($2,
// $3): the head ($4 size, $5 hash, $6 and $7 the last record sealed), each record's place ($8
// seqs, $9 xids, $10 ids, $11 prev hashes, $12 hashes), the block of new tree hashes ($13 its
// first index, $14 the hashes) and the checkpoint ($15..$19). When the head is no longer the
// one the seal began from (another sealer moved it), it stores nothing. It answers how many
// heads it moved (1 or 0) and how many records it sealed; a record sealed already fails it.
const sealWriteSQL = `WITH h AS (
	UPDATE audit_head SET size = $4, hash = $5, last_xid = $6, last_id = $7
	WHERE size = $1 AND last_xid = $2::xid8 AND last_id = $3
	RETURNING 1),
s AS (
	INSERT INTO audit_seals (seq, record_xid, record_id, prev_hash, hashes)
	SELECT * FROM unnest($8::bigint[], $9::xid8[], $10::bigint[], $11::bytea[], $12::bytea[])
	WHERE EXISTS (SELECT FROM h)
	RETURNING 1),
b AS (
	INSERT INTO audit_tree_blocks (first, hashes) SELECT $13, $14 WHERE EXISTS (SELECT FROM h)),
c AS (
	INSERT INTO audit_checkpoints (size, root_hash, head_hash, note, created_at)
	SELECT $15, $16, $17, $18, coalesce($19::timestamptz, now()) WHERE EXISTS (SELECT FROM h))
SELECT (SELECT count(*) FROM h), (SELECT count(*) FROM s)`

// sealAttempts bounds how often a seal is computed again because another replica's seal moved
// the head first; the last attempt holds the head's row from the start, so that it cannot.
const sealAttempts = 5

// errHeadMoved says that another sealer moved the head since the seal began.
var errHeadMoved = errors.New("postgres: seal audit: the head moved since the seal began")

// defaultSealLimit is SealAudit's batch when the caller gives none. Every seal reads the head,
// waits for the transactions older than its newest record, and stores itself with a statement
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
		return 0, mapErr("seal audit", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	n, err := db.seal(ctx, tx, p, limit, true, &buf)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, mapErr("seal audit: commit", err)
	}
	return n, nil
}

// seal seals the pending records after the head, limit events or a little more, through q,
// reading them into pendingRead; with lock, the head's row is locked first (q is a
// transaction), so no other sealer can move it.
func (db *DB) seal(ctx context.Context, q querier, p store.SealAuditParams, limit int, lock bool, pendingRead *pendingPage) (int, error) {
	headSQL := sealHeadSQL
	if lock {
		headSQL += " FOR UPDATE"
	}
	var (
		head   store.AuditHead
		size   int64
		from   sealCursor
		newest *uint64
	)
	if err := q.QueryRow(ctx, headSQL).Scan(&size, &head.Hash, &from.xid, &from.id, &newest); err != nil {
		return 0, mapErr("seal audit: read the head", err)
	}
	head.Size = uint64(size)
	*pendingRead = pendingRead.reset()
	pendingRead.last = from
	mayWait := newest != nil
	for {
		page := sealPage(limit-len(pendingRead.events), db.sealPerRecord16.Load())
		rows, err := q.Query(ctx, sealReadSQL, page, pendingRead.last.xid, pendingRead.last.id)
		if err != nil {
			return 0, mapErr("seal audit: read pending records", err)
		}
		read, err := pendingRead.read(rows, limit)
		if err != nil {
			return 0, mapErr("seal audit: read pending records", err)
		}
		if len(pendingRead.events) >= limit {
			break
		}
		if read == page {
			continue // a full page may have more behind it
		}
		// Every record below the oldest transaction still running is read. Records committed
		// by the time the seal began but after that transaction in seal order are sealed too,
		// once it ends, so that a seal takes every event committed before it.
		if !mayWait || pendingRead.last.xid >= *newest {
			break
		}
		mayWait = false
		if err := waitForOlderTransactions(ctx, q, *newest); err != nil {
			return 0, err
		}
	}
	pending := pendingRead.events
	if len(pending) == 0 {
		return 0, nil
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
	seqs, xids, ids := make([]int64, len(sealed)), make([]uint64, len(sealed)), make([]int64, len(sealed))
	prevs, hashes := make([][]byte, len(sealed)), make([][]byte, len(sealed))
	for i, r := range sealed {
		seqs[i], xids[i], ids[i], prevs[i], hashes[i] = int64(r.Seq), pendingRead.records[i].xid, r.ID, r.PrevHash, r.Hashes
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
	err = q.QueryRow(ctx, sealWriteSQL, size, from.xid, from.id,
		int64(seal.Head.Size), seal.Head.Hash, to.xid, to.id,
		seqs, xids, ids, prevs, hashes, first, block,
		int64(cp.Size), cp.RootHash, cp.HeadHash, note, created).Scan(&moved, &stored)
	if err != nil {
		return 0, mapErr("seal audit: store the seal", err)
	}
	if moved == 0 && !lock {
		return 0, errHeadMoved
	}
	if moved != 1 || int(stored) != len(sealed) {
		return 0, fmt.Errorf("postgres: seal audit: the head moved %d times and %d of %d records were sealed", moved, stored, len(sealed))
	}
	return len(pending), nil
}

// sealCursor is a record's place in seal order.
type sealCursor struct {
	xid uint64
	id  int64
}

// waitForOlderTransactions waits until every transaction whose xid is below xid has ended, or
// sealWaitMost has passed.
func waitForOlderTransactions(ctx context.Context, q querier, xid uint64) error {
	deadline := time.Now().Add(sealWaitMost)
	pause := time.Millisecond
	for {
		var running int64
		if err := q.QueryRow(ctx, sealWaitSQL, xid).Scan(&running); err != nil {
			return mapErr("seal audit: wait for older transactions", err)
		}
		if running == 0 || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// pendingPage gathers the pending records a seal reads, page after page: their events decoded
// into one slice, up to the record that reaches the events wanted, each record's place, and the
// place of the last row read.
type pendingPage struct {
	events  []store.AuditEvent
	records []sealCursor
	last    sealCursor
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
		if err := rows.Scan(&p.last.xid, &p.last.id, &text); err != nil {
			return n, err
		}
		n++
		if len(p.events) >= want {
			continue
		}
		var err error
		if p.events, err = store.AppendAuditRecord(p.events, p.last.id, text); err != nil {
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
		return nil, mapErr("read audit hashes", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, mapErr("read audit hashes", err)
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
// primary key and each record's place in audit_records_order. A seal whose record is gone
// answers nothing: the events missing from the chain are what verification names.
const listAuditRecordsSQL = `SELECT s.record_id, s.seq, r.events, s.prev_hash, s.hashes FROM audit_seals s
JOIN audit_records r ON r.xid = s.record_xid AND r.id = s.record_id
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
		return nil, mapErr("list audit events", err)
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
		return nil, mapErr("list audit events", err)
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
		return store.AuditCheckpoint{}, mapErr("audit checkpoint", err)
	}
	cp.Size = uint64(size)
	cp.CreatedAt = cp.CreatedAt.UTC()
	return cp, nil
}
