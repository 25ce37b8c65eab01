// Package audit is the pure part of ag's tamper-evident audit log (docs/audit.md): the
// canonical form of an event, the hash chain, the Merkle tree's leaves and stored hashes
// (golang.org/x/mod/sumdb/tlog), signed checkpoints (C2SP signed notes,
// golang.org/x/mod/sumdb/note), sealing a batch of events, verifying a log against a
// checkpoint, inclusion and consistency proofs, and the export format. It touches no database:
// the store keeps what SealFunc answers, and the server and `ag audit` call the rest.
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/mod/sumdb/tlog"
)

// HashSize is the size of an event's hash and of a Merkle tree hash.
const HashSize = sha256.Size

// timeLayout is RFC 3339 in UTC with exactly six fractional digits.
const timeLayout = "2006-01-02T15:04:05.000000Z"

// Canonical answers the bytes an event's hashes cover (docs/audit.md): one JSON object without
// insignificant whitespace, keys seq, time, principal, holder, action, subject, details in that
// order; time in UTC with six fractional digits (finer digits are dropped: the store keeps
// microseconds); details with its keys sorted recursively and its numbers as written, or null;
// strings escaped as encoding/json does with HTML escaping off. Details that are not a JSON
// object (or null) are an error.
func Canonical(e Event) ([]byte, error) {
	// The form's fixed text is 81 bytes, the seq 20 at most and the time 27 (years 0 to 9999):
	// one allocation unless strings or details need escaping.
	size := 140 + len(e.Principal) + len(e.Holder) + len(e.Action) + len(e.Subject) + len(e.Details)
	return appendCanonical(make([]byte, 0, size), e)
}

// CanonicalDetails answers details as the canonical form writes them: compact, keys sorted
// recursively, numbers as written; "null" when there are none.
func CanonicalDetails(details []byte) ([]byte, error) {
	return appendDetails(make([]byte, 0, len(details)+4), details)
}

// canonicalDetails decodes details so that encoding/json writes them back canonically: maps
// (whose keys it sorts) and json.Number (which it writes as read). This decoding and
// encodeJSON define the canonical form of details; transcodeDetails only goes faster.
func canonicalDetails(raw []byte) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("details: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("details: data after the JSON object")
	}
	switch v.(type) {
	case nil, map[string]any:
		return v, nil
	}
	return nil, fmt.Errorf("details: a JSON %T, not an object", v)
}

// encodeJSON writes v as encoding/json does with HTML escaping off, without a final newline.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// ChainHash answers sha256(prev || canonical), the hash of an event whose predecessor's hash is
// prev; an empty prev (before event 1) stands for 32 zero bytes.
func ChainHash(prev, canonical []byte) []byte {
	if len(prev) == 0 {
		prev = make([]byte, HashSize)
	}
	h := sha256.New()
	h.Write(prev)
	h.Write(canonical)
	return h.Sum(nil)
}

// LeafHash answers the Merkle leaf hash of an event: sha256(0x00 || canonical), RFC 6962.
func LeafHash(canonical []byte) tlog.Hash {
	return tlog.RecordHash(canonical)
}

// zeroHash is event 1's prev_hash.
var zeroHash = make([]byte, HashSize)

// parseTime reads a time of the canonical form (any RFC 3339 time is accepted).
func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}
