// Command auditfixture writes a signed audit export of events whose details are hard to put in
// canonical form (unsorted and repeated keys, numbers as written, escapes, U+2028, emoji, deep
// nesting), hashed and signed by the audit package itself, and its verifier key: the console's
// tests check that the verifier in the browser agrees with it (console/test/verify.test.mjs).
//
//	go run ./internal/tools/auditfixture -out DIR [-events 300] [-seed 1]
//
// It writes DIR/export.jsonl, DIR/key.pub, and DIR/raw.jsonl: the same events with their details
// as written (keys out of order and repeated, spaces, escapes), as the API's details_json
// answers stored details, which a verifier must put in canonical form itself.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/ag-coord/ag/internal/audit"
)

func main() {
	out := flag.String("out", "", "the directory to write export.jsonl and key.pub into (required)")
	n := flag.Int("events", 300, "events")
	seed := flag.Uint64("seed", 1, "the seed of the details")
	flag.Parse()
	if *out == "" || *n < 1 {
		fmt.Fprintln(os.Stderr, "auditfixture: -out DIR is required, -events at least 1")
		os.Exit(2)
	}
	if err := run(*out, *n, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "auditfixture:", err)
		os.Exit(1)
	}
}

func run(dir string, n int, seed uint64) error {
	skey, vkey, err := note.GenerateKey(rand.Reader, "ag-fixture")
	if err != nil {
		return err
	}
	signer, err := audit.NewSigner(skey)
	if err != nil {
		return err
	}
	r := mrand.New(mrand.NewPCG(seed, 9))
	prev := make([]byte, audit.HashSize)
	events := make([]audit.Event, n)
	t0 := time.Date(2026, 12, 2, 9, 0, 0, 123456789, time.UTC)
	for i := range events {
		e := audit.Event{Seq: uint64(i + 1), Time: t0.Add(time.Duration(r.Int64N(int64(time.Hour)))),
			Principal: pick(r, []string{"admin", "ci", "agent-ü", "a\"b"}), Action: pick(r, []string{"job.claimed", "lease.granted", "change.integrated"}),
			Subject: "job/job_" + fmt.Sprint(i)}
		if r.IntN(2) == 0 {
			e.Holder = e.Principal + "|" + pick(r, []string{"w1", "label with space", "\u2028", "😀"})
		}
		if r.IntN(8) > 0 {
			var b bytes.Buffer
			object(r, &b, 0)
			e.Details = b.Bytes()
		}
		canonical, err := audit.Canonical(e)
		if err != nil {
			return fmt.Errorf("event %d (%s): %w", e.Seq, e.Details, err)
		}
		e.PrevHash, e.Hash = prev, audit.ChainHash(prev, canonical)
		prev = e.Hash
		events[i] = e
	}
	size := uint64(n - n/10) // the checkpoint covers most, not all, as a live log's does
	root, err := audit.RootAt(events, size)
	if err != nil {
		return err
	}
	msg, err := signer.SignCheckpoint(audit.Checkpoint{Size: size, Root: root, Head: events[size-1].Hash})
	if err != nil {
		return err
	}
	var export bytes.Buffer
	if err := audit.WriteExport(&export, events, msg); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "export.jsonl"), export.Bytes(), 0o644); err != nil {
		return err
	}
	var raw bytes.Buffer
	for _, e := range events {
		line, err := json.Marshal(map[string]any{"seq": e.Seq, "time": e.Time.Format(time.RFC3339Nano), "principal": e.Principal,
			"holder": e.Holder, "action": e.Action, "subject": e.Subject, "details_json": string(e.Details),
			"prev_hash": hex.EncodeToString(e.PrevHash), "hash": hex.EncodeToString(e.Hash)})
		if err != nil {
			return err
		}
		raw.Write(append(line, '\n'))
	}
	if err := os.WriteFile(filepath.Join(dir, "raw.jsonl"), raw.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "key.pub"), []byte(vkey+"\n"), 0o644)
}

func pick(r *mrand.Rand, s []string) string { return s[r.IntN(len(s))] }

var keys = []string{"b", "a", "é", "z", "A", "aa", "😀", "\u2028", "k\"q", "claim", "a"}

// object writes a JSON object with keys out of order, sometimes repeated.
func object(r *mrand.Rand, b *bytes.Buffer, depth int) {
	b.WriteString("{")
	for i := range r.IntN(5) {
		if i > 0 {
			b.WriteString(pick(r, []string{",", " , ", ",\n"}))
		}
		b.WriteString(quote(pick(r, keys)))
		b.WriteString(pick(r, []string{":", " : "}))
		value(r, b, depth+1)
	}
	b.WriteString("}")
}

func value(r *mrand.Rand, b *bytes.Buffer, depth int) {
	switch k := r.IntN(8); {
	case k == 0 && depth < 4:
		object(r, b, depth)
	case k == 1 && depth < 4:
		b.WriteString("[")
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteString(",")
			}
			value(r, b, depth+1)
		}
		b.WriteString("]")
	case k == 2:
		b.WriteString(pick(r, []string{"0", "-0", "1.0", "1e5", "1E-7", "12345678901234567890123", "3.14159265358979323846", "-12.50"}))
	case k == 3:
		b.WriteString(pick(r, []string{"true", "false", "null"}))
	default:
		b.WriteString(quote(pick(r, []string{"plain", "tab\there", "nl\nx", "quote\"s", "back\\slash", "\u2028\u2029", "😀 emoji", "ctl\x01\x1f",
			"<html>&amp;", "é composed", "e\u0301 decomposed", "\u007f del", "/slash"})))
	}
}

// quote writes s as a JSON string escaped the many ways JSON allows, so that the verifier must
// decode it before writing it again.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c < 0x20 || c == '/' && len(s)%2 == 0:
			fmt.Fprintf(&b, `\u%04X`, c)
		case c == 'é':
			b.WriteString(`\u00e9`)
		case c > 0xffff:
			c -= 0x10000
			fmt.Fprintf(&b, `\ud%03x\ud%03x`, 0x800+(c>>10), 0xc00+(c&0x3ff))
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
