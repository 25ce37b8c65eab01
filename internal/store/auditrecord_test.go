package store_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

// TestAuditRecordRoundTrip ensures that what a builder writes reads back field for field, with
// details byte for byte, and that a write rolled back leaves no event behind.
func TestAuditRecordRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 18, 0, 0, 123456000, time.UTC)
	type ev struct {
		actor           store.Actor
		action, subject string
		details         []byte
	}
	kept := []ev{
		{store.Actor{Principal: "alice", Holder: "alice|w1"}, "job.claimed", "job/j1", []byte(`{ "claim" : 1e2 }`)},
		{store.Actor{Principal: "ag"}, "job.expired", "job/\"quoted\"\n", nil},
		{store.Actor{Principal: "bob"}, "principal.disabled", "principal/bob", []byte(`{}`)},
	}
	var b store.AuditRecordBuilder
	if b.Text() != "" {
		t.Fatalf("an empty builder's Text is not nil")
	}
	b.Add(at.UnixMicro(), kept[0].actor, kept[0].action, kept[0].subject, kept[0].details)
	mark := b.Mark()
	b.Add(at.UnixMicro(), store.Actor{Principal: "mallory"}, "job.failed", "job/rolled-back", []byte(`{"x":1}`))
	b.Reset(mark)
	for _, e := range kept[1:] {
		b.Add(at.UnixMicro(), e.actor, e.action, e.subject, e.details)
	}
	if b.Len() != 3 {
		t.Fatalf("Len = %d, want 3", b.Len())
	}
	text := []byte(b.Text())
	if b.Len() != 0 || b.Text() != "" {
		t.Fatalf("Text did not empty the builder")
	}
	got, err := store.DecodeAuditRecord(7, text)
	if err != nil {
		t.Fatalf("DecodeAuditRecord(%s): %v", text, err)
	}
	if len(got) != len(kept) {
		t.Fatalf("DecodeAuditRecord answered %d events, want %d: %s", len(got), len(kept), text)
	}
	for i, e := range got {
		w := kept[i]
		if e.ID != 7 || !e.Time.Equal(at) || e.Principal != w.actor.Principal || e.Holder != w.actor.Holder ||
			e.Action != w.action || e.Subject != w.subject || !bytes.Equal(e.Details, w.details) || (e.Details == nil) != (w.details == nil) {
			t.Fatalf("event %d reads back as %+v, want %+v (record %s)", i, e, w, text)
		}
	}
}

// TestAuditRecordLeavesOutSharedMembers ensures that the events of one write, which share their
// time, actor and action, write those once per record, and still read back in full, whichever
// decoder reads them.
func TestAuditRecordLeavesOutSharedMembers(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC).UnixMicro()
	worker := store.Actor{Principal: "alice", Holder: "alice|w1"}
	var b store.AuditRecordBuilder
	for _, subject := range []string{"job/j1", "job/j2", "job/j3"} {
		b.Add(at, worker, "job.claimed", subject, []byte(`{"claim":1}`))
	}
	b.Add(at+1, worker, "job.completed", "job/j0", nil)
	text := b.Text()
	for member, want := range map[string]int{`"t":`: 2, `"p":`: 1, `"h":`: 1, `"a":`: 2, `"s":`: 4} {
		if got := strings.Count(text, member); got != want {
			t.Errorf("the record holds %s %d times, want %d: %s", member, got, want, text)
		}
	}
	// Escapes make the record one that encoding/json reads: both decoders must agree.
	escaped := strings.ReplaceAll(text, "job/j2", `job\/j2`)
	for _, text := range []string{text, escaped} {
		got, err := store.DecodeAuditRecord(1, []byte(text))
		if err != nil || len(got) != 4 {
			t.Fatalf("DecodeAuditRecord(%s) = %d events, %v; want 4", text, len(got), err)
		}
		for i, e := range got {
			wantAction, wantMicros := "job.claimed", at
			if i == 3 {
				wantAction, wantMicros = "job.completed", at+1
			}
			if e.Principal != "alice" || e.Holder != "alice|w1" || e.Action != wantAction || e.Time.UnixMicro() != wantMicros {
				t.Errorf("event %d of %s reads back as %+v", i, text, e)
			}
		}
		if got[1].Subject != "job/j2" {
			t.Errorf("event 1 of %s has subject %q, want job/j2", text, got[1].Subject)
		}
	}
}

// TestAuditRecordKeepsInvalidDetailsReadable ensures that details which are not JSON (no
// writer makes them) are kept as a JSON string rather than making the record unreadable.
func TestAuditRecordKeepsInvalidDetailsReadable(t *testing.T) {
	t.Parallel()
	var b store.AuditRecordBuilder
	b.Add(0, store.Actor{Principal: "alice"}, "job.failed", "job/j1", []byte(`{"unterminated`))
	got, err := store.DecodeAuditRecord(1, []byte(b.Text()))
	if err != nil || len(got) != 1 || string(got[0].Details) != `"{\"unterminated"` {
		t.Fatalf("DecodeAuditRecord = %+v, %v; want the details as a JSON string", got, err)
	}
}

// TestExpandAuditRecordAnswersWhatIsStored ensures that a sealed record's events get their
// seqs and hashes in order, and that a record with fewer hashes than events answers the events
// without a hash as such, for verification to name.
func TestExpandAuditRecordAnswersWhatIsStored(t *testing.T) {
	t.Parallel()
	var b store.AuditRecordBuilder
	for range 3 {
		b.Add(0, store.Actor{Principal: "alice"}, "job.claimed", "job/j", nil)
	}
	text := []byte(b.Text())
	prev := bytes.Repeat([]byte{9}, 32)
	hashes := append(bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)...)
	events, err := store.ExpandAuditRecord(4, 10, text, prev, hashes)
	if err != nil || len(events) != 3 {
		t.Fatalf("ExpandAuditRecord = %d events, %v; want 3", len(events), err)
	}
	for i, e := range events {
		if e.Seq != uint64(10+i) {
			t.Fatalf("event %d has seq %d, want %d", i, e.Seq, 10+i)
		}
	}
	if !bytes.Equal(events[0].PrevHash, prev) || !bytes.Equal(events[1].PrevHash, hashes[:32]) || !bytes.Equal(events[1].Hash, hashes[32:]) {
		t.Fatalf("the hashes are not chained in order: %+v", events)
	}
	if events[2].Hash != nil || !bytes.Equal(events[2].PrevHash, hashes[32:]) {
		t.Fatalf("the event without a stored hash has hash %x, prev %x; want none, and the hash before it", events[2].Hash, events[2].PrevHash)
	}
	if _, err := store.ExpandAuditRecord(4, 10, []byte(`[]`), prev, nil); err == nil || !strings.Contains(err.Error(), "event 10") {
		t.Fatalf("ExpandAuditRecord of an empty record = %v, want an error naming event 10", err)
	}
}

// TestAuditSealRowsRefusesWhatDoesNotContinueTheHead ensures that a seal is stored only when it
// gives a hash to each pending event, a head that ends with the last of them, and the tree
// hashes that follow the head's; and that it is stored as whole records, in the places that
// follow the head, each chained to the one before.
func TestAuditSealRowsRefusesWhatDoesNotContinueTheHead(t *testing.T) {
	t.Parallel()
	h := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	pending := []store.AuditEvent{{ID: 5}, {ID: 5}, {ID: 6}}
	good := func() store.AuditSeal {
		return store.AuditSeal{
			Hashes: bytes.Join([][]byte{h(3), h(4), h(5)}, nil),
			// A tree of 2 records stores 3 hashes; of 5, 8: five new ones from index 3.
			TreeHashes: bytes.Join([][]byte{h(10), h(11), h(12), h(13), h(14)}, nil),
			Head:       store.AuditHead{Size: 5, Hash: h(5)},
			Checkpoint: store.AuditCheckpoint{Size: 5},
		}
	}
	head := store.AuditHead{Size: 2, Hash: h(2)}
	records, first, block, err := store.AuditSealRows(head, pending, good())
	if err != nil {
		t.Fatalf("AuditSealRows of a good seal: %v", err)
	}
	if len(records) != 2 || records[0].ID != 5 || records[0].Seq != 3 || !bytes.Equal(records[0].PrevHash, h(2)) ||
		!bytes.Equal(records[0].Hashes, append(h(3), h(4)...)) || records[1].ID != 6 || records[1].Seq != 5 ||
		!bytes.Equal(records[1].PrevHash, h(4)) || !bytes.Equal(records[1].Hashes, h(5)) {
		t.Fatalf("AuditSealRows records = %+v", records)
	}
	if first != 3 || len(block) != 5*32 || !bytes.Equal(block[:32], h(10)) {
		t.Fatalf("AuditSealRows block starts at %d with %d bytes, want 3 and 160", first, len(block))
	}
	if got, ok := store.AuditBlockHash(first, block, 7); !ok || !bytes.Equal(got, h(14)) {
		t.Fatalf("AuditBlockHash(7) = %x, %v; want the block's last hash", got, ok)
	}
	if _, ok := store.AuditBlockHash(first, block, 8); ok {
		t.Fatalf("AuditBlockHash answered index 8, past the block")
	}

	bad := map[string]func(s *store.AuditSeal){
		"a hash missing":               func(s *store.AuditSeal) { s.Hashes = s.Hashes[:64] },
		"a hash cut short":             func(s *store.AuditSeal) { s.Hashes = s.Hashes[:95] },
		"a hash too many":              func(s *store.AuditSeal) { s.Hashes = append(s.Hashes, h(6)...) },
		"a head of another size":       func(s *store.AuditSeal) { s.Head.Size = 6 },
		"a checkpoint of another size": func(s *store.AuditSeal) { s.Checkpoint.Size = 4 },
		"a head not the last hash":     func(s *store.AuditSeal) { s.Head.Hash = h(4) },
		"a tree hash missing":          func(s *store.AuditSeal) { s.TreeHashes = s.TreeHashes[:4*32] },
		"a tree hash too many":         func(s *store.AuditSeal) { s.TreeHashes = append(s.TreeHashes, h(15)...) },
	}
	for name, edit := range bad {
		s := good()
		edit(&s)
		if _, _, _, err := store.AuditSealRows(head, pending, s); err == nil {
			t.Errorf("AuditSealRows of a seal with %s = nil, want an error", name)
		}
	}
}
