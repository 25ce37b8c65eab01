package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/ag-coord/ag/internal/jsontext"
)

// Both stores keep the audit log in tables of appended rows (docs/adr/0015-audit-records.md):
//
//   - audit_records: one row per transaction that wrote events, holding all of them as a JSON
//     array (the record, written by AuditRecordBuilder or by SQL that writes the same form).
//     A seal gives it a SealedAuditRecord: its seq (the seq of its first event), prev_hash (the
//     chain's hash before its first event) and hashes (the chain hash of each event, HashSize
//     bytes each, in order). Both stores insert it as a row of audit_seals beside the
//     record, which is never rewritten (docs/adr/0016-seals-beside-records.md,
//     0017-postgres-seals-by-transaction.md).
//   - audit_tree_blocks: one row per seal, holding the Merkle tree hashes the seal stored
//     (tlog.StoredHashIndex numbering, contiguous) from index first on, HashSize bytes each.
//
// A transaction then costs its writer one row however many events it writes, and a seal one
// row per record plus one, not a row per event and two per tree hash.

// AuditHashSize is the size of every hash of the audit log: SHA-256.
const AuditHashSize = 32

// An event of a record is a JSON object with these members, in this order: "t" the time in unix
// microseconds, "p" the principal, "h" the holder, "a" the action, "s" the subject, and "d" the
// details as they were written (absent when there are none). After a record's first event,
// "t", "p", "h" and "a" are left out when they equal the event before's (an absent one is that
// event's): the events of one write most often share all four, and leaving them out makes a
// batch's record about 40% smaller (docs/adr/0018-compact-audit-records.md). Readers accept
// the members in any order, as JSON does.
type recordEvent struct {
	T *int64          `json:"t"`
	P *string         `json:"p"`
	H *string         `json:"h"`
	A *string         `json:"a"`
	S string          `json:"s"`
	D json.RawMessage `json:"d"`
}

// AuditRecordBuilder builds the JSON text of an audit record, event by event.
type AuditRecordBuilder struct {
	b    []byte
	n    int
	last sharedMembers
}

// sharedMembers are the members an event leaves out when they equal the event before's.
type sharedMembers struct {
	micros                    int64
	principal, holder, action string
}

// Add appends an event that happened at micros (unix microseconds). Details that are not valid
// JSON (no writer makes them) are kept as a JSON string, so that a record is always readable.
func (r *AuditRecordBuilder) Add(micros int64, a Actor, action, subject string, details []byte) {
	if details != nil && !json.Valid(details) {
		details = jsontext.AppendString(nil, string(details))
	}
	r.AddJSON(micros, a, action, subject, details)
}

// AddJSON is Add for details that are valid JSON or nil, which it does not check: a writer that
// builds its details as JSON saves the check on every event.
func (r *AuditRecordBuilder) AddJSON(micros int64, a Actor, action, subject string, details []byte) {
	first := r.n == 0
	if first {
		r.b = append(r.b[:0], '[', '{')
	} else {
		r.b = append(r.b, ',', '{')
	}
	r.n++
	if first || micros != r.last.micros {
		r.b = append(r.b, `"t":`...)
		r.b = strconv.AppendInt(r.b, micros, 10)
		r.b = append(r.b, ',')
	}
	if first || a.Principal != r.last.principal {
		r.b = append(r.b, `"p":`...)
		r.b = jsontext.AppendString(r.b, a.Principal)
		r.b = append(r.b, ',')
	}
	if first || a.Holder != r.last.holder {
		r.b = append(r.b, `"h":`...)
		r.b = jsontext.AppendString(r.b, a.Holder)
		r.b = append(r.b, ',')
	}
	if first || action != r.last.action {
		r.b = append(r.b, `"a":`...)
		r.b = jsontext.AppendString(r.b, action)
		r.b = append(r.b, ',')
	}
	r.last = sharedMembers{micros: micros, principal: a.Principal, holder: a.Holder, action: action}
	r.b = append(r.b, `"s":`...)
	r.b = jsontext.AppendString(r.b, subject)
	if details != nil {
		r.b = append(r.b, `,"d":`...)
		r.b = append(r.b, details...)
	}
	r.b = append(r.b, '}')
}

// Len answers how many events the record holds.
func (r *AuditRecordBuilder) Len() int { return r.n }

// AuditRecordMark is a point to which a builder can be reset.
type AuditRecordMark struct {
	size, n int
	last    sharedMembers
}

// Mark answers the builder's present point.
func (r *AuditRecordBuilder) Mark() AuditRecordMark {
	return AuditRecordMark{size: len(r.b), n: r.n, last: r.last}
}

// Reset drops the events added after m (those of a write that was rolled back).
func (r *AuditRecordBuilder) Reset(m AuditRecordMark) { r.b, r.n, r.last = r.b[:m.size], m.n, m.last }

// Text answers the record's JSON text and empties the builder, keeping its buffer for the next
// record; "" when it holds no event. A string, as the stores bind it: one copy per record.
func (r *AuditRecordBuilder) Text() string {
	if r.n == 0 {
		return ""
	}
	out := string(append(r.b, ']'))
	r.b, r.n = r.b[:0], 0
	return out
}

// DecodeAuditRecord answers the events of the record id, whose JSON text is text, in order,
// with ID id and without their places in the chain.
func DecodeAuditRecord(id int64, text []byte) ([]AuditEvent, error) {
	return AppendAuditRecord(nil, id, text)
}

// AppendAuditRecord is DecodeAuditRecord appending to dst: a seal reads many records into one
// slice.
func AppendAuditRecord(dst []AuditEvent, id int64, text []byte) ([]AuditEvent, error) {
	if out, ok := appendRecordAsWritten(dst, id, text); ok {
		return out, nil
	}
	events, err := decodeRecordJSON(id, text)
	if err != nil {
		return dst, err
	}
	return append(dst, events...), nil
}

// decodeRecordJSON is DecodeAuditRecord with encoding/json, for any JSON text. A shared member
// that is absent or null is the event before's; the first event's is the zero value.
func decodeRecordJSON(id int64, text []byte) ([]AuditEvent, error) {
	var raw []recordEvent
	if err := json.Unmarshal(text, &raw); err != nil {
		return nil, fmt.Errorf("audit record %d is not a JSON array of events: %w", id, err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("audit record %d holds no event", id)
	}
	out := make([]AuditEvent, len(raw))
	var micros int64
	for i, e := range raw {
		if i > 0 {
			out[i] = AuditEvent{Principal: out[i-1].Principal, Holder: out[i-1].Holder, Action: out[i-1].Action}
		}
		if e.T != nil {
			micros = *e.T
		}
		for _, m := range [...]struct {
			src *string
			dst *string
		}{{e.P, &out[i].Principal}, {e.H, &out[i].Holder}, {e.A, &out[i].Action}} {
			if m.src != nil {
				*m.dst = *m.src
			}
		}
		out[i].ID, out[i].Time, out[i].Subject = id, time.UnixMicro(micros).UTC(), e.S
		if len(e.D) > 0 && string(e.D) != "null" {
			out[i].Details = e.D
		}
	}
	return out, nil
}

// ExpandAuditRecord answers the events of a sealed record as ListAuditEvents answers them: the
// i-th event is seq+i, with prevHash before it and the i-th hash of hashes after it. A record
// whose hashes do not match its events (a tampered file) is answered as it is stored: an event
// without a hash of its own gets none, so verification names it.
func ExpandAuditRecord(id int64, seq uint64, text, prevHash, hashes []byte) ([]AuditEvent, error) {
	if seq == 0 {
		return nil, fmt.Errorf("audit record %d is not sealed", id)
	}
	events, err := DecodeAuditRecord(id, text)
	if err != nil {
		return nil, fmt.Errorf("the audit record of event %d: %w", seq, err)
	}
	prev := prevHash
	for i := range events {
		events[i].Seq = seq + uint64(i)
		events[i].PrevHash = prev
		var h []byte
		if lo := i * AuditHashSize; lo+AuditHashSize <= len(hashes) {
			h = hashes[lo : lo+AuditHashSize : lo+AuditHashSize]
		}
		events[i].Hash = h
		prev = h
	}
	return events, nil
}

// SealedAuditRecord is what a seal stores in one record.
type SealedAuditRecord struct {
	ID       int64
	Seq      uint64 // of its first event
	PrevHash []byte
	Hashes   []byte // AuditHashSize bytes per event
}

// AuditSealRows checks that seal holds a hash for each pending event, a head that ends with the
// last of them and the tree hashes of exactly those events, and answers what a store writes for
// it: each record's row and the seal's block of tree hashes, which starts at first, where
// head's tree ends. The rows' hashes share seal's memory.
func AuditSealRows(head AuditHead, pending []AuditEvent, seal AuditSeal) (records []SealedAuditRecord, first int64, block []byte, err error) {
	if len(pending) == 0 || len(seal.Hashes) != AuditHashSize*len(pending) {
		return nil, 0, nil, fmt.Errorf("%d events pending, %d bytes of hashes sealed", len(pending), len(seal.Hashes))
	}
	n := head.Size + uint64(len(pending))
	if n > math.MaxInt64 {
		return nil, 0, nil, fmt.Errorf("log size %d is out of range", n)
	}
	if seal.Head.Size != n || seal.Checkpoint.Size != n {
		return nil, 0, nil, fmt.Errorf("head size %d and checkpoint size %d, want %d", seal.Head.Size, seal.Checkpoint.Size, n)
	}
	if !bytes.Equal(seal.Head.Hash, seal.Hashes[len(seal.Hashes)-AuditHashSize:]) {
		return nil, 0, nil, errors.New("the head's hash is not the last sealed event's")
	}
	prev := head.Hash
	if head.Size == 0 {
		prev = make([]byte, AuditHashSize)
	}
	for i := 0; i < len(pending); {
		end := i + countRecord(pending[i:])
		records = append(records, SealedAuditRecord{ID: pending[i].ID, Seq: head.Size + uint64(i) + 1, PrevHash: prev,
			Hashes: seal.Hashes[i*AuditHashSize : end*AuditHashSize : end*AuditHashSize]})
		prev = seal.Hashes[(end-1)*AuditHashSize : end*AuditHashSize : end*AuditHashSize]
		i = end
	}
	first = tlog.StoredHashCount(int64(head.Size))
	if want := tlog.StoredHashCount(int64(n)) - first; int64(len(seal.TreeHashes)) != want*AuditHashSize {
		return nil, 0, nil, fmt.Errorf("%d bytes of tree hashes for events %d to %d, want %d hashes", len(seal.TreeHashes), head.Size+1, n, want)
	}
	return records, first, seal.TreeHashes, nil
}

// countRecord answers how many of events, from the first on, are of the first's record.
func countRecord(events []AuditEvent) int {
	n := 1
	for n < len(events) && events[n].ID == events[0].ID {
		n++
	}
	return n
}

// AuditBlockHash answers the tree hash at index idx from the block of hashes that starts at
// first, or false when the block does not hold it.
func AuditBlockHash(first int64, block []byte, idx int64) ([]byte, bool) {
	if idx < first || (idx-first) >= int64(len(block)/AuditHashSize) {
		return nil, false
	}
	lo := (idx - first) * AuditHashSize
	return bytes.Clone(block[lo : lo+AuditHashSize]), true
}

// appendRecordAsWritten reads a record in the exact form its writers give it (members in the
// order t, p, h, a, s, d, the first four left out when shared; no whitespace; strings without
// escapes; details an object), several times faster than encoding/json, which costs a seal
// about as much as hashing the events does. It appends the events to dst. Anything else answers
// dst as it was and false, and AppendAuditRecord reads it with encoding/json.
func appendRecordAsWritten(dst []AuditEvent, id int64, text []byte) ([]AuditEvent, bool) {
	r := recordReader{b: text}
	if !r.lit("[") {
		return dst, false
	}
	start := len(dst)
	events := slices.Grow(dst, bytes.Count(text, []byte(`"s":`)))
	for {
		first := len(events) == start
		e := AuditEvent{ID: id}
		if !first {
			// Shared members left out are the event before's; equal strings are shared too.
			last := events[len(events)-1]
			e.Time, e.Principal, e.Holder, e.Action, e.Subject = last.Time, last.Principal, last.Holder, last.Action, last.Subject
		}
		if !r.lit("{") {
			return dst, false
		}
		if r.lit(`"t":`) {
			t, ok := r.int()
			if !ok || !r.lit(",") {
				return dst, false
			}
			e.Time = time.UnixMicro(t).UTC()
		} else if first {
			return dst, false
		}
		for _, f := range [...]struct {
			key string
			dst *string
		}{{`"p":`, &e.Principal}, {`"h":`, &e.Holder}, {`"a":`, &e.Action}} {
			if !r.lit(f.key) {
				if first {
					return dst, false
				}
				continue
			}
			var ok bool
			if *f.dst, ok = r.str(*f.dst); !ok || !r.lit(",") {
				return dst, false
			}
		}
		if !r.lit(`"s":`) {
			return dst, false
		}
		var ok bool
		if e.Subject, ok = r.str(e.Subject); !ok {
			return dst, false
		}
		if r.lit(`,"d":`) {
			if e.Details, ok = r.object(); !ok {
				return dst, false
			}
		}
		if !r.lit("}") {
			return dst, false
		}
		events = append(events, e)
		if r.lit("]") {
			if r.i != len(r.b) {
				return dst, false
			}
			return events, true
		}
		if !r.lit(",") {
			return dst, false
		}
	}
}

// recordReader reads a record's text from b[i:].
type recordReader struct {
	b []byte
	i int
}

// lit reads s if it comes next.
func (r *recordReader) lit(s string) bool {
	if len(r.b)-r.i < len(s) || string(r.b[r.i:r.i+len(s)]) != s {
		return false
	}
	r.i += len(s)
	return true
}

// int reads an integer of at most 18 digits, which cannot overflow.
func (r *recordReader) int() (int64, bool) {
	neg := r.lit("-")
	start := r.i
	if len(r.b)-r.i > 1 && r.b[r.i] == '0' && r.b[r.i+1] >= '0' && r.b[r.i+1] <= '9' {
		return 0, false // a leading zero, which JSON has not
	}
	var n int64
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' && r.i-start < 18 {
		n = n*10 + int64(r.b[r.i]-'0')
		r.i++
	}
	if r.i == start || r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// str reads a string without escapes or control characters, valid UTF-8; when it equals like,
// it answers like rather than a copy.
func (r *recordReader) str(like string) (string, bool) {
	if !r.lit(`"`) {
		return "", false
	}
	start := r.i
	for r.i < len(r.b) && r.b[r.i] != '"' {
		if c := r.b[r.i]; c == '\\' || c < 0x20 {
			return "", false
		}
		r.i++
	}
	if r.i == len(r.b) || !utf8.Valid(r.b[start:r.i]) {
		return "", false
	}
	r.i++
	if string(r.b[start:r.i-1]) == like {
		return like, true
	}
	return string(r.b[start : r.i-1]), true
}

// object reads a JSON object, nested values and escaped strings included, and answers its text
// as it is. It checks only the nesting: the canonical form parses the details, and refuses
// details that are not JSON.
func (r *recordReader) object() ([]byte, bool) {
	if r.i >= len(r.b) || r.b[r.i] != '{' {
		return nil, false
	}
	start, depth := r.i, 0
	for ; r.i < len(r.b); r.i++ {
		switch r.b[r.i] {
		case '"':
			for r.i++; r.i < len(r.b) && r.b[r.i] != '"'; r.i++ {
				if r.b[r.i] == '\\' {
					r.i++
				}
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				r.i++
				return r.b[start:r.i:r.i], true
			}
		}
	}
	return nil, false
}
