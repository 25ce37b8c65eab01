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
// Every state change inserts its events into audit_events in its own statement or
// transaction, most often as one more data-modifying CTE of the statement that makes the
// change (auditInsert ... SELECT ... FROM the change's rows), so that recording costs no round
// trip. Writers never touch audit_head: only SealAudit does, holding its row, which serializes
// the sealers of every replica.

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

// ---- seal ----

// sealReadSQL reads the pending events, oldest first. It runs after audit_head is locked, so on
// a snapshot that sees what the seal before committed.
const sealReadSQL = `SELECT id, time, principal, holder, action, subject, details FROM audit_events
WHERE seq IS NULL ORDER BY id LIMIT $1`

// sealWriteSQL stores a seal: each event's place ($1..$4: ids, seqs, prev hashes, hashes), the
// new tree hashes ($5, $6), the head ($7, $8; $14 its size before) and the checkpoint ($9..$13).
// It answers how many events it sealed and whether it moved the head: an event sealed already is
// not sealed again, and the transaction is then rolled back.
var sealWriteSQL = `WITH e AS (
	UPDATE audit_events a SET seq = u.seq, prev_hash = u.prev_hash, hash = u.hash
	FROM unnest($1::bigint[], $2::bigint[], $3::bytea[], $4::bytea[]) AS u(id, seq, prev_hash, hash)
	WHERE a.id = ANY($1::bigint[]) AND a.id = u.id AND a.seq IS NULL
	RETURNING 1),
t AS (
	INSERT INTO audit_tree_hashes (idx, hash) SELECT * FROM unnest($5::bigint[], $6::bytea[])),
h AS (
	UPDATE audit_head SET size = $7, hash = $8 WHERE size = $14 RETURNING 1),
c AS (
	INSERT INTO audit_checkpoints (size, root_hash, head_hash, note, created_at)
	VALUES ($9, $10, $11, $12, coalesce($13::timestamptz, now())))
SELECT (SELECT count(*) FROM e), (SELECT count(*) FROM h)`

// SealAudit seals up to p.Limit pending events in one transaction that holds audit_head.
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

	var batch pgx.Batch
	batch.Queue(`SELECT size, hash FROM audit_head FOR UPDATE`)
	batch.Queue(sealReadSQL, limit)
	br := tx.SendBatch(ctx, &batch)
	var head store.AuditHead
	var size int64
	if err := br.QueryRow().Scan(&size, &head.Hash); err != nil {
		br.Close()
		return 0, mapErr("seal audit: lock the head", err)
	}
	head.Size = uint64(size)
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return 0, mapErr("seal audit: read pending events", err)
	}
	var pending []store.AuditEvent
	var e store.AuditEvent
	var det *string
	_, err = pgx.ForEachRow(rows, []any{&e.ID, &e.Time, &e.Principal, &e.Holder, &e.Action, &e.Subject, &det}, func() error {
		x := e
		x.Time = x.Time.UTC()
		x.Details = bytesOrNil(det)
		pending = append(pending, x)
		return nil
	})
	if err == nil {
		err = br.Close()
	} else {
		br.Close()
	}
	if err != nil {
		return 0, mapErr("seal audit: read pending events", err)
	}
	if len(pending) == 0 {
		return 0, nil
	}

	seal, err := p.Seal(head, slices.Clone(pending), func(indexes []int64) ([][]byte, error) {
		return readAuditHashes(ctx, tx, indexes)
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: seal audit: %w", err)
	}
	if err := checkSeal(head, pending, seal); err != nil {
		return 0, fmt.Errorf("postgres: seal audit: %w", err)
	}
	n := len(seal.Events)
	ids, seqs, prevs, hashes := make([]int64, n), make([]int64, n), make([][]byte, n), make([][]byte, n)
	for i, e := range seal.Events {
		ids[i], seqs[i], prevs[i], hashes[i] = e.ID, int64(e.Seq), e.PrevHash, e.Hash
	}
	idxs, treeHashes := make([]int64, len(seal.TreeHashes)), make([][]byte, len(seal.TreeHashes))
	for i, h := range seal.TreeHashes {
		idxs[i], treeHashes[i] = h.Index, h.Hash
	}
	cp := seal.Checkpoint
	var created any
	if !cp.CreatedAt.IsZero() {
		created = cp.CreatedAt
	}
	var sealed, moved int64
	note := cp.Note
	if note == nil {
		note = []byte{}
	}
	err = tx.QueryRow(ctx, sealWriteSQL, ids, seqs, prevs, hashes, idxs, treeHashes, int64(seal.Head.Size), seal.Head.Hash,
		int64(cp.Size), cp.RootHash, cp.HeadHash, note, created, int64(head.Size)).Scan(&sealed, &moved)
	if err != nil {
		return 0, mapErr("seal audit: store the seal", err)
	}
	if int(sealed) != n || moved != 1 {
		return 0, fmt.Errorf("postgres: seal audit: %d of %d events were pending still, head moved %d times: nothing sealed",
			sealed, n, moved)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, mapErr("seal audit: commit", err)
	}
	return n, nil
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

// readAuditHashesSQL answers the stored tree hashes at the indexes $1, in their order; NULL for
// an index not stored.
const readAuditHashesSQL = `SELECT h.hash FROM unnest($1::bigint[]) WITH ORDINALITY AS u(idx, n)
LEFT JOIN audit_tree_hashes h ON h.idx = u.idx ORDER BY u.n`

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

// listAuditEventsSQL answers sealed events after seq $1, by seq, at most $2. The condition on
// seq implies that of audit_events_seq, which it walks.
const listAuditEventsSQL = `SELECT id, seq, time, principal, holder, action, subject, details, prev_hash, hash
FROM audit_events WHERE seq > $1 ORDER BY seq LIMIT $2`

// ListAuditEvents answers sealed events after p.AfterSeq, by seq.
func (db *DB) ListAuditEvents(ctx context.Context, p store.ListAuditEventsParams) ([]store.AuditEvent, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, maxAuditPage)
	rows, err := db.pool.Query(ctx, listAuditEventsSQL, int64(min(p.AfterSeq, math.MaxInt64)), limit)
	if err != nil {
		return nil, mapErr("list audit events", err)
	}
	var out []store.AuditEvent
	var e store.AuditEvent
	var seq int64
	var det *string
	_, err = pgx.ForEachRow(rows, []any{&e.ID, &seq, &e.Time, &e.Principal, &e.Holder, &e.Action, &e.Subject, &det, &e.PrevHash, &e.Hash}, func() error {
		x := e
		x.Seq = uint64(seq)
		x.Time = x.Time.UTC()
		x.Details = bytesOrNil(det)
		out = append(out, x)
		e.PrevHash, e.Hash = nil, nil // the next row's get slices of their own
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
