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

	"github.com/jackc/pgx/v5"

	"github.com/ag-coord/ag/internal/store"
)

// ---- the audit log ----
//
// The log is two tables of appended rows (store/auditrecord.go, migrations/0005_audit_records.sql).
// Every statement that changes state inserts one row into audit_records holding all the events
// it records, as a JSON array, most often as one more data-modifying CTE of the statement
// itself (auditRecord(SELECT ... FROM the change's rows)), so that recording costs no round
// trip, and one row however many jobs a grouped claim or completion changes. A seal sets each
// record's place in the chain and its events' hashes in that row, and stores the Merkle tree
// hashes it computed as one row of audit_tree_blocks. An event used to be a row of its own,
// which a seal updated, and a tree hash too: a seal wrote a row per event and two more, which
// cost about a quarter of the claims and completions the server could make; it now writes a
// row per record and one more.
//
// Writers never touch audit_head: only SealAudit does, holding its row, which serializes the
// sealers of every replica.

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

// recordEventJSON is the JSON text of the event e in a record, as store.DecodeAuditRecord reads
// it (see auditRecord): the time in microseconds (extract answers numeric, so they are exact),
// the strings escaped by to_json, the details as written.
var recordEventJSON = `'{"t":' || (extract(epoch FROM e.time) * 1000000)::bigint || ',"p":' || ` + jsonText("e.principal") +
	` || ',"h":' || ` + jsonText("e.holder") + ` || ',"a":' || ` + jsonText("e.action") +
	` || ',"s":' || ` + jsonText("e.subject") + ` || coalesce(',"d":' || (e.details)::text, '') || '}'`

// ---- seal ----

// sealReadSQL reads $1 pending records after id $2, in insertion order. It runs after
// audit_head is locked, so on a snapshot that sees what the seal before committed. A seal reads
// in pages (sealPage) rather than as many records as it takes events: PostgreSQL sends every row
// a statement answers, each record decompressed, and a record of a grouped claim holds dozens
// of events. Each page is a statement of its own, with a newer snapshot: a record committed in
// between with a smaller id than the page before is left for the next seal, which is only a
// matter of order, since ids are not in commit order anyway.
const sealReadSQL = `SELECT id, events FROM audit_records WHERE seq IS NULL AND id > $2 ORDER BY id LIMIT $1`

// sealPage answers how many pending records to read for want more events, when the last seal
// took perRecord16/16 events per record: enough at that rate and a few more, since records
// vary, and never more than want, since a record holds an event at least.
func sealPage(want int, perRecord16 int64) int {
	n := int64(want)*16/max(perRecord16, 16) + 8
	return int(min(n, int64(want)))
}

// sealWriteSQL stores a seal: each record's place ($1..$4: ids, seqs, prev hashes, hashes), the
// block of new tree hashes ($5 its first index, $6 the hashes), the head ($7, $8; $14 its size
// before) and the checkpoint ($9..$13). It answers how many records it sealed and whether it
// moved the head: a record sealed already is not sealed again, and the transaction is then
// rolled back.
const sealWriteSQL = `WITH r AS (
	UPDATE audit_records a SET seq = u.seq, prev_hash = u.prev_hash, hashes = u.hashes
	FROM unnest($1::bigint[], $2::bigint[], $3::bytea[], $4::bytea[]) AS u(id, seq, prev_hash, hashes)
	WHERE a.id = ANY($1::bigint[]) AND a.id = u.id AND a.seq IS NULL
	RETURNING 1),
b AS (
	INSERT INTO audit_tree_blocks (first, hashes) VALUES ($5, $6)),
h AS (
	UPDATE audit_head SET size = $7, hash = $8 WHERE size = $14 RETURNING 1),
c AS (
	INSERT INTO audit_checkpoints (size, root_hash, head_hash, note, created_at)
	VALUES ($9, $10, $11, $12, coalesce($13::timestamptz, now())))
SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM h)`

// SealAudit seals the oldest pending records, p.Limit events or a little more (whole records),
// in one transaction that holds audit_head.
func (db *DB) SealAudit(ctx context.Context, p store.SealAuditParams) (int, error) {
	if p.Seal == nil {
		return 0, errors.New("postgres: seal audit: no Seal given")
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 1000
	}
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return 0, mapErr("seal audit", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op

	// The head's lock and the first page go in one round trip.
	var batch pgx.Batch
	batch.Queue(`SELECT size, hash FROM audit_head FOR UPDATE`)
	page := sealPage(limit, db.sealPerRecord16.Load())
	batch.Queue(sealReadSQL, page, int64(0))
	br := tx.SendBatch(ctx, &batch)
	var head store.AuditHead
	var size int64
	if err := br.QueryRow().Scan(&size, &head.Hash); err != nil {
		br.Close()
		return 0, mapErr("seal audit: lock the head", err)
	}
	head.Size = uint64(size)
	rows, err := br.Query()
	var got pendingPage
	if err == nil {
		got, err = readPendingRecords(rows, limit)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, mapErr("seal audit: read pending records", err)
	}
	records, events := got.records, got.events
	// A full page may have more behind it.
	for events < limit && got.read == page {
		page = sealPage(limit-events, db.sealPerRecord16.Load())
		rows, err := tx.Query(ctx, sealReadSQL, page, got.last)
		if err == nil {
			got, err = readPendingRecords(rows, limit-events)
		}
		if err != nil {
			return 0, mapErr("seal audit: read pending records", err)
		}
		records, events = append(records, got.records...), events+got.events
	}
	if len(records) > 0 {
		db.sealPerRecord16.Store(int64(events) * 16 / int64(len(records)))
	}
	pending := store.TakeAuditRecords(records, limit)
	if len(pending) == 0 {
		return 0, nil
	}

	seal, err := p.Seal(head, pending, func(indexes []int64) ([][]byte, error) {
		return readAuditHashes(ctx, tx, indexes)
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: seal audit: %w", err)
	}
	sealed, first, block, err := store.AuditSealRows(head, pending, seal)
	if err != nil {
		return 0, fmt.Errorf("postgres: seal audit: %w", err)
	}
	ids, seqs, prevs, hashes := make([]int64, len(sealed)), make([]int64, len(sealed)), make([][]byte, len(sealed)), make([][]byte, len(sealed))
	for i, r := range sealed {
		ids[i], seqs[i], prevs[i], hashes[i] = r.ID, int64(r.Seq), r.PrevHash, r.Hashes
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
	var updated, moved int64
	err = tx.QueryRow(ctx, sealWriteSQL, ids, seqs, prevs, hashes, first, block, int64(seal.Head.Size), seal.Head.Hash,
		int64(cp.Size), cp.RootHash, cp.HeadHash, note, created, int64(head.Size)).Scan(&updated, &moved)
	if err != nil {
		return 0, mapErr("seal audit: store the seal", err)
	}
	if int(updated) != len(sealed) || moved != 1 {
		return 0, fmt.Errorf("postgres: seal audit: %d of %d records were pending still, head moved %d times: nothing sealed",
			updated, len(sealed), moved)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, mapErr("seal audit: commit", err)
	}
	return len(pending), nil
}

// pendingPage is what a page of sealReadSQL held: its records decoded, up to the one that
// reached the events wanted, how many events they hold, and how many rows the page answered,
// the last one's id.
type pendingPage struct {
	records [][]store.AuditEvent
	events  int
	read    int
	last    int64
}

// readPendingRecords reads a page of sealReadSQL from rows, decoding its records up to the one
// that reaches want events: the seal takes no more.
func readPendingRecords(rows pgx.Rows, want int) (pendingPage, error) {
	defer rows.Close()
	var p pendingPage
	for rows.Next() {
		var text []byte
		if err := rows.Scan(&p.last, &text); err != nil {
			return pendingPage{}, err
		}
		p.read++
		if p.events >= want {
			continue
		}
		events, err := store.DecodeAuditRecord(p.last, text)
		if err != nil {
			return pendingPage{}, err
		}
		p.records = append(p.records, events)
		p.events += len(events)
	}
	return p, rows.Err()
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
// holding $1 (the greatest seq <= $1) and those starting after it, up to $2. Both walk
// audit_records_seq.
const listAuditRecordsSQL = `SELECT id, seq, events, prev_hash, hashes FROM audit_records
WHERE seq >= coalesce((SELECT max(seq) FROM audit_records WHERE seq <= $1), $1) AND seq <= $2
ORDER BY seq`

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
