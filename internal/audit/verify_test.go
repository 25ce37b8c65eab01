package audit_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/audit"
)

// rechain recomputes the prev hashes and hashes of events from index from on, as someone
// rewriting the log would.
func rechain(t *testing.T, events []audit.Event, from int) {
	t.Helper()
	for i := from; i < len(events); i++ {
		prev := make([]byte, 32)
		if i > 0 {
			prev = events[i-1].Hash
		}
		canonical, err := audit.Canonical(events[i])
		if err != nil {
			t.Fatal(err)
		}
		events[i].PrevHash, events[i].Hash = prev, audit.ChainHash(prev, canonical)
	}
}

// TestVerify ensures Verify accepts an untouched log, with events after the checkpoint counted
// apart, and names the first event that does not verify for every way of tampering with it.
func TestVerify(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	l := sealedLog(t, s, 40, 3, 7, 10)
	cps := l.checkpoints
	var cp audit.Checkpoint
	for _, c := range cps {
		if c.Size < 40 {
			var err error
			if cp, err = audit.OpenCheckpoint(c.Note, s.VerifierKey()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if cp.Size != 30 {
		t.Fatalf("checkpoint of %d events, want 30", cp.Size)
	}

	res, err := audit.Verify(l.events, cp)
	if err != nil {
		t.Fatalf("an untouched log: %v", err)
	}
	if res.Events != 40 || res.Covered != 30 || res.Uncovered() != 10 || res.Root != cp.Root || !bytes.Equal(res.Head, cp.Head) {
		t.Errorf("result %+v", res)
	}
	if res, err := audit.Verify(l.events[:30], cp); err != nil || res.Uncovered() != 0 {
		t.Errorf("the covered events only: %+v, %v", res, err)
	}

	const k = 10 // the event tampered with
	forged := audit.Event{Seq: k, Time: baseTime, Principal: "mallory", Action: "principal.created", Subject: "principal/mallory", Details: []byte(`{"role":"admin"}`)}
	for _, tc := range []struct {
		name    string
		tamper  func(es []audit.Event) []audit.Event
		seq     uint64
		because string
	}{
		{"time", func(es []audit.Event) []audit.Event {
			es[k-1].Time = es[k-1].Time.Add(time.Microsecond)
			return es
		}, k, "hash does not match"},
		// The report names the event as it was signed: its holder, the principal without one.
		{"principal", func(es []audit.Event) []audit.Event { es[k-1].Principal = "mallory"; return es }, k,
			"hash does not match the event's content: the event was changed (job.claimed job/job_8 by ci|w1)"},
		{"an event without holder", func(es []audit.Event) []audit.Event { es[12].Subject = "job/other"; return es }, 13,
			"the event was changed (job.enqueued job/other by alice)"},
		{"holder", func(es []audit.Event) []audit.Event { es[k-1].Holder = "ci|w2"; return es }, k, "hash does not match"},
		{"action", func(es []audit.Event) []audit.Event { es[k-1].Action = "job.failed"; return es }, k, "hash does not match"},
		{"subject", func(es []audit.Event) []audit.Event { es[k-1].Subject = "job/other"; return es }, k, "hash does not match"},
		{"details", func(es []audit.Event) []audit.Event {
			es[k-1].Details = bytes.Replace(es[k-1].Details, []byte(`"claim":1`), []byte(`"claim":2`), 1)
			return es
		}, k, "hash does not match"},
		{"details removed", func(es []audit.Event) []audit.Event { es[k-1].Details = nil; return es }, k, "hash does not match"},
		{"hash", func(es []audit.Event) []audit.Event { es[k-1].Hash[0] ^= 1; return es }, k, "hash does not match"},
		{"prev hash", func(es []audit.Event) []audit.Event { es[k-1].PrevHash[0] ^= 1; return es }, k, "prev_hash is not the hash of event 9"},
		{"first prev hash", func(es []audit.Event) []audit.Event { es[0].PrevHash[31] = 1; return es }, 1, "not zero"},
		{"a short prev hash", func(es []audit.Event) []audit.Event { es[k-1].PrevHash = es[k-1].PrevHash[:31]; return es }, k, "prev_hash has 31 bytes, want 32"},
		{"an event and its hash", func(es []audit.Event) []audit.Event {
			es[k-1].Principal = "mallory"
			canonical, _ := audit.Canonical(es[k-1])
			es[k-1].Hash = audit.ChainHash(es[k-1].PrevHash, canonical)
			return es
		}, k + 1, "prev_hash is not the hash of event 10"},
		{"deleted", func(es []audit.Event) []audit.Event { return slices.Delete(es, k-1, k) }, k, "missing: the log goes on with event 11, so this event was deleted"},
		{"the first deleted", func(es []audit.Event) []audit.Event { return es[1:] }, 1, "missing: the log goes on with event 2, so this event was deleted"},
		{"deleted two", func(es []audit.Event) []audit.Event { return slices.Delete(es, k-1, k+1) }, k, "events 10 to 11 were deleted"},
		{"deleted and renumbered", func(es []audit.Event) []audit.Event {
			es = slices.Delete(es, k-1, k)
			for i := k - 1; i < len(es); i++ {
				es[i].Seq--
			}
			return es
		}, k, "prev_hash is not the hash of event 9"},
		{"deleted, the chain rebuilt", func(es []audit.Event) []audit.Event {
			es = slices.Delete(es, k-1, k)
			for i := k - 1; i < len(es); i++ {
				es[i].Seq--
			}
			rechain(t, es, k-1)
			return es
		}, 30, "head"},
		{"inserted", func(es []audit.Event) []audit.Event {
			f := forged
			canonical, _ := audit.Canonical(f)
			f.PrevHash, f.Hash = es[k-2].Hash, audit.ChainHash(es[k-2].Hash, canonical)
			return slices.Insert(es, k-1, f)
		}, k + 1, "has seq 10: an event was inserted before it"},
		{"inserted and renumbered", func(es []audit.Event) []audit.Event {
			f := forged
			canonical, _ := audit.Canonical(f)
			f.PrevHash, f.Hash = es[k-2].Hash, audit.ChainHash(es[k-2].Hash, canonical)
			es = slices.Insert(es, k-1, f)
			for i := k; i < len(es); i++ {
				es[i].Seq++
			}
			return es
		}, k + 1, "prev_hash is not the hash of event 10"},
		{"inserted, the chain rebuilt", func(es []audit.Event) []audit.Event {
			es = slices.Insert(es, k-1, forged)
			for i := k; i < len(es); i++ {
				es[i].Seq++
			}
			rechain(t, es, k-1)
			return es
		}, 30, "head"},
		{"swapped", func(es []audit.Event) []audit.Event { es[k-1], es[k] = es[k], es[k-1]; return es }, k, "reordered"},
		{"swapped and renumbered", func(es []audit.Event) []audit.Event {
			es[k-1], es[k] = es[k], es[k-1]
			es[k-1].Seq, es[k].Seq = k, k+1
			return es
		}, k, "prev_hash is not the hash of event 9"},
		{"truncated", func(es []audit.Event) []audit.Event { return es[:27] }, 28, "checkpoint covers 30 events, the log ends after 27"},
		{"empty", func(es []audit.Event) []audit.Event { return nil }, 1, "the log ends after 0"},
		{"an event after the checkpoint", func(es []audit.Event) []audit.Event { es[35].Action = "x"; return es }, 36, "hash does not match"},
	} {
		_, err := audit.Verify(tc.tamper(clone(l.events)), cp)
		var ve *audit.VerifyError
		if !errors.As(err, &ve) || ve.Seq != tc.seq || !strings.Contains(ve.Reason, tc.because) {
			t.Errorf("%s: %v; want event %d: ...%s...", tc.name, err, tc.seq, tc.because)
		}
	}

	// A checkpoint that another log's key signed does not open; one whose root is wrong (the
	// right key, the wrong tree) does not verify.
	if _, err := audit.OpenCheckpoint(cps[len(cps)-1].Note, newSigner(t).VerifierKey()); !errors.Is(err, audit.ErrSignature) {
		t.Errorf("another key: %v", err)
	}
	wrong := cp
	wrong.Root[0] ^= 1
	msg, err := s.SignCheckpoint(wrong)
	if err != nil {
		t.Fatal(err)
	}
	wrong, err = audit.OpenCheckpoint(msg, s.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	var ve *audit.VerifyError
	if _, err := audit.Verify(l.events, wrong); !errors.As(err, &ve) || ve.Seq != 30 || !strings.Contains(ve.Reason, "Merkle") {
		t.Errorf("a wrong root: %v", err)
	}
}

// TestConsistent ensures a log is consistent with each of its earlier checkpoints, and not when
// it was truncated below one or rewritten before its end.
func TestConsistent(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	l := sealedLog(t, s, 50, 1, 4, 9)
	for _, c := range l.checkpoints {
		old, err := audit.OpenCheckpoint(c.Note, s.VerifierKey())
		if err != nil {
			t.Fatal(err)
		}
		if err := audit.Consistent(l.events, old); err != nil {
			t.Errorf("consistent with the checkpoint of %d: %v", old.Size, err)
		}
	}
	old, err := audit.OpenCheckpoint(l.checkpoints[3].Note, s.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	var ve *audit.VerifyError
	if err := audit.Consistent(l.events[:old.Size-1], old); !errors.As(err, &ve) || ve.Seq != old.Size || !strings.Contains(ve.Reason, "truncated") {
		t.Errorf("truncated below the old checkpoint: %v", err)
	}
	rewritten := clone(l.events)
	rewritten[2].Subject = "job/forged"
	rechain(t, rewritten, 2)
	if err := audit.Consistent(rewritten, old); !errors.As(err, &ve) || ve.Seq != old.Size || !strings.Contains(ve.Reason, "verified before") {
		t.Errorf("rewritten before the old checkpoint: %v", err)
	}
	rewritten = clone(l.events)
	rewritten[old.Size].Subject = "job/forged"
	rechain(t, rewritten, int(old.Size))
	if err := audit.Consistent(rewritten, old); err != nil {
		t.Errorf("rewritten after the old checkpoint only (Verify's to catch): %v", err)
	}
}

// TestProofs ensures inclusion and consistency proofs read from stored hashes check for every
// event and every pair of sizes, and fail when a hash of the proof, the event, the root or the
// sizes are not the ones proved.
func TestProofs(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	l := sealedLog(t, s, 21, 4, 1, 6)
	roots := make(map[uint64][32]byte)
	for size := uint64(1); size <= 21; size++ {
		r, err := audit.RootAt(l.events, size)
		if err != nil {
			t.Fatal(err)
		}
		roots[size] = r
	}
	for _, size := range []uint64{1, 2, 7, 8, 13, 21} {
		root := roots[size]
		for seq := uint64(1); seq <= size; seq++ {
			proof, err := audit.InclusionProof(seq, size, l.readHashes)
			if err != nil {
				t.Fatal(err)
			}
			canonical, err := audit.Canonical(l.events[seq-1])
			if err != nil {
				t.Fatal(err)
			}
			if err := audit.CheckInclusion(proof, size, root, seq, canonical); err != nil {
				t.Errorf("inclusion of %d in %d: %v", seq, size, err)
			}
			other, _ := audit.Canonical(l.events[seq%size])
			if size > 1 && audit.CheckInclusion(proof, size, root, seq, other) == nil {
				t.Errorf("inclusion of %d in %d checks for event %d", seq, size, seq%size+1)
			}
			if len(proof) > 0 {
				bad := slices.Clone(proof)
				bad[0] = bytes.Clone(bad[0])
				bad[0][0] ^= 1
				if err := audit.CheckInclusion(bad, size, root, seq, canonical); !errors.Is(err, audit.ErrProof) {
					t.Errorf("a tampered inclusion proof of %d in %d: %v", seq, size, err)
				}
				if err := audit.CheckInclusion(proof[1:], size, root, seq, canonical); err == nil {
					t.Errorf("a short inclusion proof of %d in %d checks", seq, size)
				}
			}
			wrongRoot := root
			wrongRoot[5] ^= 1
			if audit.CheckInclusion(proof, size, wrongRoot, seq, canonical) == nil {
				t.Errorf("inclusion of %d in %d checks with another root", seq, size)
			}
		}
		for old := uint64(1); old <= size; old++ {
			proof, err := audit.ConsistencyProof(old, size, l.readHashes)
			if err != nil {
				t.Fatal(err)
			}
			if err := audit.CheckConsistency(proof, old, roots[old], size, root); err != nil {
				t.Errorf("consistency %d→%d: %v", old, size, err)
			}
			if old < size {
				if err := audit.CheckConsistency(proof, old, roots[old+1], size, root); err == nil {
					t.Errorf("consistency %d→%d checks with the root of %d", old, size, old+1)
				}
				bad := slices.Clone(proof)
				bad[len(bad)-1] = bytes.Clone(bad[len(bad)-1])
				bad[len(bad)-1][3] ^= 1
				if err := audit.CheckConsistency(bad, old, roots[old], size, root); !errors.Is(err, audit.ErrProof) {
					t.Errorf("a tampered consistency proof %d→%d: %v", old, size, err)
				}
			}
		}
	}
	if _, err := audit.InclusionProof(0, 5, l.readHashes); err == nil {
		t.Error("inclusion proof of event 0")
	}
	if _, err := audit.InclusionProof(6, 5, l.readHashes); err == nil {
		t.Error("inclusion proof of an event beyond the tree")
	}
	if _, err := audit.ConsistencyProof(6, 5, l.readHashes); err == nil {
		t.Error("consistency proof from a larger tree")
	}
	if _, err := audit.InclusionProof(1, 30, l.readHashes); err == nil {
		t.Error("inclusion proof in a tree larger than the log")
	}
	if err := audit.CheckInclusion([][]byte{{1}}, 2, roots[2], 1, nil); err == nil {
		t.Error("a proof hash of one byte checks")
	}
}

// TestExport ensures an export reads back as the events and note written, verifies, is the
// documented JSON lines, and that malformed exports are refused naming the line.
func TestExport(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	l := sealedLog(t, s, 12, 12)
	msg := l.checkpoints[0].Note
	var buf bytes.Buffer
	if err := audit.WriteExport(&buf, l.events, msg); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 13 || !strings.HasPrefix(lines[0], `{"seq":1,"time":"2026-11-30T18:00:00.123456Z","principal":"alice","holder":"","action":"job.enqueued","subject":"job/job_0","details":{"kind":"build","max_attempts":5,"priority":0},"prev_hash":"0000000000000000000000000000000000000000000000000000000000000000","hash":"`) ||
		!strings.HasPrefix(lines[12], `{"checkpoint":"ag-test\n12\n`) {
		t.Errorf("export:\n%s", buf.String())
	}
	events, note, err := audit.ReadExport(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(note, msg) || len(events) != len(l.events) {
		t.Fatalf("read %d events and note %q", len(events), note)
	}
	for i, e := range events {
		want, _ := audit.Canonical(l.events[i])
		got, _ := audit.Canonical(e)
		if !bytes.Equal(got, want) || !bytes.Equal(e.Hash, l.events[i].Hash) || !bytes.Equal(e.PrevHash, l.events[i].PrevHash) {
			t.Errorf("event %d read back as %s", i+1, got)
		}
		// "details":null is an event without details, as the store holds it, not the text null.
		if (e.Details == nil) != (l.events[i].Details == nil) {
			t.Errorf("event %d read back with details %q, want %q", i+1, e.Details, l.events[i].Details)
		}
	}
	cp, err := audit.OpenCheckpoint(note, s.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := audit.Verify(events, cp); err != nil {
		t.Errorf("a read export does not verify: %v", err)
	}
	// Details as written keep their numbers; CRLF line ends and blank lines are fine.
	crlf := strings.ReplaceAll(buf.String(), "\n", "\r\n\r\n")
	crlf = strings.ReplaceAll(crlf, `\r\n\r\n`, `\n`) // only the line ends, not the note's escapes
	if events, _, err := audit.ReadExport(strings.NewReader(crlf)); err != nil || len(events) != 12 {
		t.Errorf("CRLF export: %d events, %v", len(events), err)
	}

	for name, tc := range map[string]struct{ text, want string }{
		"no checkpoint":         {strings.Join(lines[:12], "\n"), "no checkpoint line"},
		"after the checkpoint":  {strings.Join(append(slices.Clone(lines), lines[0]), "\n"), "line 14: after the checkpoint"},
		"not JSON":              {lines[0] + "\nnot json\n" + lines[12], "line 2"},
		"unknown field":         {strings.Replace(lines[0], `"holder"`, `"holdr"`, 1) + "\n" + lines[12], "line 1"},
		"bad hash":              {strings.Replace(lines[0], `"hash":"`, `"hash":"zz`, 1) + "\n" + lines[12], "line 1: event 1: hash"},
		"bad time":              {strings.Replace(lines[0], `2026-11-30T`, `2026-13-30T`, 1) + "\n" + lines[12], "line 1: event 1: time"},
		"no seq":                {strings.Replace(lines[0], `"seq":1,`, ``, 1) + "\n" + lines[12], "line 1: an event without seq"},
		"empty checkpoint note": {lines[0] + "\n" + `{"checkpoint":""}`, "line 2: checkpoint line: empty note"},
	} {
		if _, _, err := audit.ReadExport(strings.NewReader(tc.text)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ...%s...", name, err, tc.want)
		}
	}
}

// BenchmarkSeal measures SealFunc in batches of 1000 over a log held in memory (the store's
// share of a seal left out), in events/s.
func BenchmarkSeal(b *testing.B) {
	s := newSigner(b)
	l := newMemLog()
	seal := s.SealFunc(time.Now)
	const batch = 1000
	batches := make([][]audit.Event, 16)
	for i := range batches {
		batches[i] = pendingEvents(i*batch, batch)
	}
	b.ReportAllocs()
	b.ResetTimer()
	sealed := 0
	for i := 0; b.Loop(); i++ {
		sealed += len(l.seal(b, seal, batches[i%len(batches)]).Hashes) / 32
		l.events = l.events[:0] // the log's growth is the store's cost, not the seal's
	}
	b.ReportMetric(float64(sealed)/b.Elapsed().Seconds(), "events/s")
}

// TestProofsRefuseSizesThatAreNoTree ensures a proof is asked for, and checked, only for an
// event of the tree and a tree that extends the other: the answer then says which event or
// sizes are wrong, and is never ErrProof, which says that a proof did not check (a log that
// was changed), not that the question named no event.
func TestProofsRefuseSizesThatAreNoTree(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	l := sealedLog(t, s, 5, 5)
	root, err := audit.RootAt(l.events, 5)
	if err != nil {
		t.Fatal(err)
	}
	canonical, err := audit.Canonical(l.events[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{0, 6} {
		want := fmt.Sprintf("event %d is not in a tree of 5 events", seq)
		if _, err := audit.InclusionProof(seq, 5, l.readHashes); err == nil || err.Error() != want {
			t.Errorf("InclusionProof(%d, 5): %v, want %q", seq, err, want)
		}
		if err := audit.CheckInclusion(nil, 5, root, seq, canonical); err == nil || errors.Is(err, audit.ErrProof) || err.Error() != want {
			t.Errorf("CheckInclusion of event %d in 5: %v, want %q", seq, err, want)
		}
	}
	for _, old := range []uint64{0, 6} {
		if _, err := audit.ConsistencyProof(old, 5, l.readHashes); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("no consistency proof from %d to 5 events", old)) {
			t.Errorf("ConsistencyProof(%d, 5): %v", old, err)
		}
		if err := audit.CheckConsistency(nil, old, root, 5, root); err == nil || errors.Is(err, audit.ErrProof) || !strings.Contains(err.Error(), fmt.Sprintf("no consistency from %d to 5 events", old)) {
			t.Errorf("CheckConsistency from %d to 5: %v", old, err)
		}
	}
}
