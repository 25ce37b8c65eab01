package audit_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/ag-coord/ag/internal/audit"
)

// TestCanonical ensures the canonical form is byte for byte the one docs/audit.md gives: keys
// in order, time in UTC with six fractional digits, details sorted recursively with numbers as
// written and no HTML escaping, null without details; and that details which are not one JSON
// object are refused.
func TestCanonical(t *testing.T) {
	t.Parallel()
	paris := time.FixedZone("CET", 3600)
	for _, tc := range []struct {
		name string
		e    audit.Event
		want string
	}{
		{
			name: "the example of docs/audit.md",
			e: audit.Event{
				ID: 99, Seq: 12, Time: time.Date(2026, 11, 30, 18, 0, 0, 123456000, time.UTC), Principal: "ci", Holder: "ci|ci-1",
				Action: "job.completed", Subject: "job/job_...", Details: []byte(`{"claim":1,"attestation_digest":"sha256:..."}`),
				PrevHash: []byte("ignored"), Hash: []byte("ignored"),
			},
			want: `{"seq":12,"time":"2026-11-30T18:00:00.123456Z","principal":"ci","holder":"ci|ci-1","action":"job.completed","subject":"job/job_...","details":{"attestation_digest":"sha256:...","claim":1}}`,
		},
		{
			name: "nested details, numbers as written, strings escaped without HTML escaping",
			e: audit.Event{
				Seq: 1, Time: time.Date(2026, 11, 30, 19, 0, 0, 123456789, paris), Principal: "admin", Action: "lease.granted", Subject: "lease/l_1",
				Details: []byte(" {\"z\": {\"b\": [1.50, 1e3, -0, {\"y\": true, \"x\": null}], \"a\": \"<&>\\u00e9\u2028\\t\\u0001\"},\n \"big\": 12345678901234567890, \"claim\": 1} "),
			},
			want: `{"seq":1,"time":"2026-11-30T18:00:00.123456Z","principal":"admin","holder":"","action":"lease.granted","subject":"lease/l_1","details":{"big":12345678901234567890,"claim":1,"z":{"a":"<&>é\u2028\t\u0001","b":[1.50,1e3,-0,{"x":null,"y":true}]}}}`,
		},
		{
			name: "no details",
			e:    audit.Event{Seq: 3, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Principal: "ag", Action: "change.requeued", Subject: "change/c"},
			want: `{"seq":3,"time":"2026-01-02T03:04:05.000000Z","principal":"ag","holder":"","action":"change.requeued","subject":"change/c","details":null}`,
		},
		{
			name: "null details",
			e:    audit.Event{Seq: 3, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Principal: "ag", Action: "a", Subject: "s", Details: []byte("null")},
			want: `{"seq":3,"time":"2026-01-02T03:04:05.000000Z","principal":"ag","holder":"","action":"a","subject":"s","details":null}`,
		},
		{
			name: "empty details object",
			e:    audit.Event{Seq: 4, Time: time.Date(2026, 1, 2, 3, 4, 5, 999, time.UTC), Principal: "p", Action: "a", Subject: "s", Details: []byte("{}")},
			want: `{"seq":4,"time":"2026-01-02T03:04:05.000000Z","principal":"p","holder":"","action":"a","subject":"s","details":{}}`,
		},
	} {
		got, err := audit.Canonical(tc.e)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
	for _, details := range []string{`[1,2]`, `"x"`, `1`, `{"a":1} {"b":2}`, `{"a":1`, `{"a":1}x`} {
		if _, err := audit.Canonical(audit.Event{Seq: 1, Details: []byte(details)}); err == nil {
			t.Errorf("details %s: no error", details)
		}
	}
}

// TestHashes ensures the chain hash is sha256(prev || canonical) with 32 zero bytes before
// event 1, and the leaf hash RFC 6962's sha256(0x00 || canonical).
func TestHashes(t *testing.T) {
	t.Parallel()
	canonical := []byte(`{"seq":1}`)
	want := sha256.Sum256(append(make([]byte, 32), canonical...))
	if got := audit.ChainHash(nil, canonical); !bytes.Equal(got, want[:]) {
		t.Errorf("ChainHash(nil) = %x, want %x", got, want)
	}
	if got := audit.ChainHash(make([]byte, 32), canonical); !bytes.Equal(got, want[:]) {
		t.Errorf("ChainHash(zero) = %x, want %x", got, want)
	}
	prev := bytes.Repeat([]byte{7}, 32)
	want = sha256.Sum256(append(bytes.Clone(prev), canonical...))
	if got := audit.ChainHash(prev, canonical); !bytes.Equal(got, want[:]) {
		t.Errorf("ChainHash(prev) = %x, want %x", got, want)
	}
	leaf := sha256.Sum256(append([]byte{0}, canonical...))
	if got := audit.LeafHash(canonical); got != tlog.Hash(leaf) {
		t.Errorf("LeafHash = %x, want %x", got, leaf)
	}
}

// TestLoadOrCreateKey ensures the key is created once with mode 0600 and its verifier key
// beside it, read back the same later, the same for processes racing to create it, and that an
// existing key keeps its name.
func TestLoadOrCreateKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "audit.key")
	s, err := audit.LoadOrCreateKey(path, "ag.example/log")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v, want 0600", fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "PRIVATE+KEY+ag.example/log+") {
		t.Errorf("key file %q", data)
	}
	pub, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if string(pub) != s.VerifierKey()+"\n" {
		t.Errorf("%s.pub = %q, want %q", path, pub, s.VerifierKey())
	}
	if _, err := note.NewVerifier(s.VerifierKey()); err != nil {
		t.Errorf("verifier key %q: %v", s.VerifierKey(), err)
	}
	if s.Origin() != "ag.example/log" || !strings.HasPrefix(s.VerifierKey(), s.KeyID()+"+") || len(s.KeyID()) != len("ag.example/log+")+8 {
		t.Errorf("origin %q, key id %q, verifier key %q", s.Origin(), s.KeyID(), s.VerifierKey())
	}
	if id, err := audit.KeyIDOf(s.VerifierKey()); err != nil || id != s.KeyID() {
		t.Errorf("KeyIDOf = %q, %v; want %q", id, err, s.KeyID())
	}

	// Read back, under another origin (the key keeps its name), with a lost .pub rewritten.
	if err := os.Remove(path + ".pub"); err != nil {
		t.Fatal(err)
	}
	again, err := audit.LoadOrCreateKey(path, "other")
	if err != nil {
		t.Fatal(err)
	}
	if again.VerifierKey() != s.VerifierKey() || again.Origin() != "ag.example/log" {
		t.Errorf("reloaded key %q, want %q", again.VerifierKey(), s.VerifierKey())
	}
	if pub, err := os.ReadFile(path + ".pub"); err != nil || string(pub) != s.VerifierKey()+"\n" {
		t.Errorf("rewritten .pub = %q, %v", pub, err)
	}

	// Racing creators all end up with one key.
	race := filepath.Join(dir, "race.key")
	keys := make([]string, 16)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			s, err := audit.LoadOrCreateKey(race, "ag")
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = s.VerifierKey()
		})
	}
	wg.Wait()
	for _, k := range keys {
		if k != keys[0] {
			t.Fatalf("racing creators got different keys: %q", keys)
		}
	}

	for _, origin := range []string{"", "a b", "a+b"} {
		if _, err := audit.LoadOrCreateKey(filepath.Join(dir, "bad.key"), origin); err == nil {
			t.Errorf("origin %q: no error", origin)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "garbage.key"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.LoadOrCreateKey(filepath.Join(dir, "garbage.key"), "ag"); err == nil {
		t.Error("a garbage key file loaded")
	}
}

// TestSealFromScratch ensures that sealing in batches of many sizes gives every event its seq,
// prev hash and hash, and the tree the very stored hashes, root and head that computing it all
// at once with tlog gives; that each checkpoint verifies and states them; and that a seal reads
// the store's hashes at most once.
func TestSealFromScratch(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	l := newMemLog()
	now := baseTime.Add(time.Hour)
	seal := s.SealFunc(func() time.Time { return now })
	for _, b := range []int{1, 1, 2, 5, 8, 13, 31, 64, 100, 1, 257} {
		pending := pendingEvents(len(l.events), b)
		res := l.seal(t, seal, pending)
		if l.reads > 1 {
			t.Errorf("seal of %d after %d read stored hashes %d times", b, l.head.Size-uint64(b), l.reads)
		}
		if len(res.Hashes) != 32*b || !bytes.Equal(res.Head.Hash, res.Hashes[len(res.Hashes)-32:]) {
			t.Fatalf("seal of %d events answers %d bytes of hashes and head %x", b, len(res.Hashes), res.Head.Hash)
		}
		cp, err := audit.OpenCheckpoint(res.Checkpoint.Note, s.VerifierKey())
		if err != nil {
			t.Fatal(err)
		}
		if cp.Size != l.head.Size || cp.Origin != "ag-test" || !bytes.Equal(cp.Head, l.head.Hash) ||
			!bytes.Equal(res.Checkpoint.RootHash, cp.Root[:]) || !bytes.Equal(res.Checkpoint.HeadHash, cp.Head) ||
			res.Checkpoint.Size != cp.Size || !res.Checkpoint.CreatedAt.Equal(now) {
			t.Fatalf("checkpoint %+v of seal %+v", cp, res.Checkpoint)
		}
	}

	// From scratch: the chain, and the tree with tlog alone.
	var (
		prev   = make([]byte, 32)
		stored []tlog.Hash
	)
	reader := tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		for i, x := range indexes {
			out[i] = stored[x]
		}
		return out, nil
	})
	for i, e := range l.events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i+1, e.Seq)
		}
		canonical, err := audit.Canonical(e)
		if err != nil {
			t.Fatal(err)
		}
		want := sha256.Sum256(append(bytes.Clone(prev), canonical...))
		if !bytes.Equal(e.PrevHash, prev) || !bytes.Equal(e.Hash, want[:]) {
			t.Fatalf("event %d: prev %x hash %x, want %x %x", e.Seq, e.PrevHash, e.Hash, prev, want)
		}
		prev = e.Hash
		hs, err := tlog.StoredHashes(int64(i), canonical, reader)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, hs...)
	}
	if int64(len(l.hashes)) != tlog.StoredHashCount(int64(len(l.events))) || len(l.hashes) != len(stored) {
		t.Fatalf("%d tree hashes stored, want %d", len(l.hashes), len(stored))
	}
	for i, h := range stored {
		if !bytes.Equal(l.hashes[int64(i)], h[:]) {
			t.Fatalf("tree hash %d = %x, want %x", i, l.hashes[int64(i)], h)
		}
	}
	size := uint64(0)
	for _, c := range l.checkpoints {
		size = c.Size
		root, err := tlog.TreeHash(int64(size), reader)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(c.RootHash, root[:]) || !bytes.Equal(c.HeadHash, l.events[size-1].Hash) {
			t.Errorf("checkpoint of %d: root %x head %x, want %x %x", size, c.RootHash, c.HeadHash, root, l.events[size-1].Hash)
		}
		if root2, err := audit.RootAt(l.events, size); err != nil || root2 != root {
			t.Errorf("RootAt(%d) = %v, %v; want %v", size, root2, err, root)
		}
	}
	if size != uint64(len(l.events)) {
		t.Errorf("last checkpoint of %d events, log of %d", size, len(l.events))
	}
}

// TestSealRemembersTheTreesEdge ensures that a seal after the head the seal function last
// computed reads no tree hash from the store, and answers what a seal function without memory
// answers; that a head it did not compute (another log of the same size, a seal that was never
// stored) is read from the store; and that either way the seals are the same.
func TestSealRemembersTheTreesEdge(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	now := func() time.Time { return baseTime }
	seal := s.SealFunc(now)
	same := func(t *testing.T, what string, got, want audit.Seal) {
		t.Helper()
		if got.Head.Size != want.Head.Size || !bytes.Equal(got.Head.Hash, want.Head.Hash) ||
			!bytes.Equal(got.Checkpoint.RootHash, want.Checkpoint.RootHash) || len(got.TreeHashes) != len(want.TreeHashes) {
			t.Fatalf("%s: seal of size %d root %x, want size %d root %x", what, got.Head.Size, got.Checkpoint.RootHash,
				want.Head.Size, want.Checkpoint.RootHash)
		}
		if !bytes.Equal(got.TreeHashes, want.TreeHashes) || !bytes.Equal(got.Hashes, want.Hashes) {
			t.Fatalf("%s: the seals' hashes differ", what)
		}
	}

	l := newMemLog()
	for i, b := range []int{3, 1, 7, 16, 1, 100, 33} {
		head := l.head
		pending := pendingEvents(len(l.events), b)
		fresh, err := s.SealFunc(now)(head, pending, l.readHashes)
		if err != nil {
			t.Fatal(err)
		}
		got := l.seal(t, seal, pending)
		if i > 0 && l.reads != 0 {
			t.Errorf("seal of %d after %d, the head last computed, read stored hashes %d times", b, head.Size, l.reads)
		}
		same(t, fmt.Sprintf("seal of %d after %d", b, head.Size), got, fresh)
	}

	// Another log of the same size: its head has another hash, and its tree is read.
	other := newMemLog()
	for len(other.events) < len(l.events) {
		pending := pendingEvents(len(other.events), 20)
		for i := range pending {
			pending[i].Subject += "-other"
		}
		other.seal(t, s.SealFunc(now), pending[:min(20, len(l.events)-len(other.events))])
	}
	if other.head.Size != l.head.Size || bytes.Equal(other.head.Hash, l.head.Hash) {
		t.Fatalf("the other log's head %d %x", other.head.Size, other.head.Hash)
	}
	pending := pendingEvents(len(other.events), 5)
	fresh, err := s.SealFunc(now)(other.head, pending, other.readHashes)
	if err != nil {
		t.Fatal(err)
	}
	got := other.seal(t, seal, pending)
	if other.reads == 0 {
		t.Error("a seal after another log's head of the same size read no stored hash")
	}
	same(t, "seal after the other log's head", got, fresh)

	// A seal computed but never stored: the next seal is of the head before it, which is read.
	head := l.head
	if _, err := seal(head, pendingEvents(len(l.events), 4), l.readHashes); err != nil {
		t.Fatal(err)
	}
	pending = pendingEvents(len(l.events), 9)
	fresh, err = s.SealFunc(now)(head, pending, l.readHashes)
	if err != nil {
		t.Fatal(err)
	}
	got = l.seal(t, seal, pending)
	if l.reads == 0 {
		t.Error("a seal after a head whose next seal was never stored read no stored hash")
	}
	same(t, "seal after an unstored seal", got, fresh)
}

// TestSealRefuses ensures a seal fails, storing nothing, on a head that does not make sense, a
// store that answers no hashes, and details that are not an object.
func TestSealRefuses(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	l := sealedLog(t, s, 5, 5)
	seal := s.SealFunc(time.Now)
	if _, err := seal(audit.Head{Size: 5}, pendingEvents(5, 1), l.readHashes); err == nil {
		t.Error("a head without its hash sealed")
	}
	if _, err := seal(l.head, nil, l.readHashes); err == nil {
		t.Error("sealed nothing")
	}
	broken := func([]int64) ([][]byte, error) { return [][]byte{{1, 2}}, nil }
	if _, err := seal(l.head, pendingEvents(5, 3), broken); err == nil {
		t.Error("sealed with a store answering a short hash")
	}
	failing := func([]int64) ([][]byte, error) { return nil, errors.New("database is gone") }
	if _, err := seal(l.head, pendingEvents(5, 3), failing); err == nil || !strings.Contains(err.Error(), "database is gone") {
		t.Errorf("seal with a failing store: %v", err)
	}
	bad := pendingEvents(5, 2)
	bad[1].Details = []byte(`[1]`)
	if _, err := seal(l.head, bad, l.readHashes); err == nil {
		t.Error("sealed details that are not an object")
	}
}

// TestOpenCheckpoint ensures a checkpoint opens with its key only: another key, a changed text,
// a changed signature are refused with ErrSignature, and texts that are not a checkpoint are
// refused even when signed.
func TestOpenCheckpoint(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	l := sealedLog(t, s, 3, 3)
	msg := l.checkpoints[0].Note
	cp, err := audit.OpenCheckpoint(msg, s.VerifierKey()+"\n")
	if err != nil {
		t.Fatal(err)
	}
	if cp.Size != 3 || !bytes.Equal(cp.Head, l.events[2].Hash) {
		t.Fatalf("checkpoint %+v", cp)
	}
	if got := audit.FormatCheckpoint(cp); !bytes.HasPrefix(msg, append(got, '\n')) {
		t.Errorf("FormatCheckpoint = %q, note %q", got, msg)
	}
	lines := strings.Split(string(msg), "\n")
	if len(lines) != 7 || lines[0] != "ag-test" || lines[1] != "3" || !strings.HasPrefix(lines[3], "head ") || lines[4] != "" || !strings.HasPrefix(lines[5], "— ag-test ") {
		t.Errorf("note %q", msg)
	}

	other := newSigner(t)
	_, err = audit.OpenCheckpoint(msg, other.VerifierKey())
	if !errors.Is(err, audit.ErrSignature) || !strings.Contains(err.Error(), s.KeyID()) || !strings.Contains(err.Error(), other.KeyID()) {
		t.Errorf("open with another key: %v", err)
	}
	changed := bytes.Replace(msg, []byte("\n3\n"), []byte("\n2\n"), 1)
	if _, err := audit.OpenCheckpoint(changed, s.VerifierKey()); !errors.Is(err, audit.ErrSignature) {
		t.Errorf("open a changed note: %v", err)
	}
	i := bytes.LastIndex(msg, []byte(" ")) + 10
	flipped := bytes.Clone(msg)
	flipped[i] ^= 'A' ^ 'B'
	if flipped[i] == msg[i] {
		t.Fatal("nothing flipped")
	}
	if _, err := audit.OpenCheckpoint(flipped, s.VerifierKey()); err == nil {
		t.Error("a changed signature opened")
	}
	if _, err := audit.OpenCheckpoint(msg, "not a key"); err == nil {
		t.Error("opened with a malformed key")
	}

	// Signed texts that are not a checkpoint.
	skey, vkey, err := note.GenerateKey(rand.Reader, "ag-test")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	root := strings.Repeat("A", 43) + "="
	// 32 bytes in another spelling (the last character's unused bits set), and no base64
	otherSpelling, notBase64 := strings.Repeat("A", 42)+"B=", strings.Repeat("!", 43)+"="
	for _, text := range []string{
		"ag-test\n3\n" + root + "\n",                                       // no head
		"ag-test\n3\n" + root + "\nhead " + root + "\nextra\n",             // extension line
		"ag-test\n03\n" + root + "\nhead " + root + "\n",                   // non-canonical size
		"ag-test\n0\n" + root + "\nhead " + root + "\n",                    // empty
		"ag-test\n-1\n" + root + "\nhead " + root + "\n",                   // negative
		"ag-test\n3\n" + root + "\nhead AAAA\n",                            // short head
		"ag-test\n3\n" + root + "\nhead:" + root + "\n",                    // not "head "
		"ag-test\n3\n" + strings.Repeat("A", 44) + "\nhead " + root + "\n", // not base64 of 32 bytes
		"other\n3\n" + root + "\nhead " + root + "\n",                      // another origin
		"ag-test\n3\n" + otherSpelling + "\nhead " + root + "\n",
		"ag-test\n3\n" + notBase64 + "\nhead " + root + "\n",
	} {
		msg, err := note.Sign(&note.Note{Text: text}, signer)
		if err != nil {
			t.Fatal(err)
		}
		if cp, err := audit.OpenCheckpoint(msg, vkey); err == nil {
			t.Errorf("text %q opened: %+v", text, cp)
		}
	}
	good, err := note.Sign(&note.Note{Text: "ag-test\n3\n" + root + "\nhead " + root + "\n"}, signer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := audit.OpenCheckpoint(good, vkey); err != nil {
		t.Errorf("a well-formed checkpoint: %v", err)
	}
	if _, err := s.SignCheckpoint(audit.Checkpoint{Origin: "other", Size: 1, Head: make([]byte, 32)}); err == nil {
		t.Error("signed a checkpoint of another origin")
	}
}

// TestParseCheckpointRefusesAnOriginThatIsNoName ensures the origin line is read strictly
// before any key is asked about it: present, and without control characters (a terminal
// escape would reach whoever reads the verification's report).
func TestParseCheckpointRefusesAnOriginThatIsNoName(t *testing.T) {
	t.Parallel()
	root := strings.Repeat("A", 43) + "="
	for _, origin := range []string{"", "ag\x1b[2Jtest", "ag\ttest", "ag\rtest"} {
		if cp, err := audit.ParseCheckpoint([]byte(origin + "\n3\n" + root + "\nhead " + root + "\n")); err == nil {
			t.Errorf("origin %q parsed: %+v", origin, cp)
		}
	}
	if _, err := audit.ParseCheckpoint([]byte("ag.example/log\n3\n" + root + "\nhead " + root + "\n")); err != nil {
		t.Errorf("origin ag.example/log: %v", err)
	}
}

// TestSignCheckpointRefusesNoEventsAndAShortHead ensures the server signs no checkpoint that
// verifiers would refuse to read: none of zero events, none whose head is not a hash.
func TestSignCheckpointRefusesNoEventsAndAShortHead(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	for name, c := range map[string]audit.Checkpoint{
		"no event":     {Size: 0, Head: make([]byte, audit.HashSize)},
		"a short head": {Size: 1, Head: make([]byte, audit.HashSize-1)},
	} {
		if msg, err := s.SignCheckpoint(c); err == nil {
			t.Errorf("%s: signed %q", name, msg)
		}
	}
	if _, err := s.SignCheckpoint(audit.Checkpoint{Size: 1, Head: make([]byte, audit.HashSize)}); err != nil {
		t.Errorf("one event: %v", err)
	}
}

// TestLoadOrCreateKeyRewritesAStaleVerifierKey ensures the .pub beside the key, which auditors
// are handed, is replaced when it holds another key (a key file restored from a backup, say),
// and left as it is when it holds this one: a server writes it at every start.
func TestLoadOrCreateKeyRewritesAStaleVerifierKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.key")
	other := newSigner(t)
	if err := os.WriteFile(path+".pub", []byte(other.VerifierKey()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := audit.LoadOrCreateKey(path, "ag-test")
	if err != nil {
		t.Fatal(err)
	}
	if pub, err := os.ReadFile(path + ".pub"); err != nil || string(pub) != s.VerifierKey()+"\n" {
		t.Fatalf(".pub = %q, %v; want this key's %q", pub, err, s.VerifierKey())
	}
	written, err := os.Stat(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if got := written.Mode().Perm(); got != 0o644 {
		t.Errorf(".pub mode %v, want 0644", got)
	}
	if _, err := audit.LoadOrCreateKey(path, "ag-test"); err != nil {
		t.Fatal(err)
	}
	again, err := os.Stat(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(written, again) {
		t.Error("loading the key again replaced a .pub that already held it")
	}
}

// TestSealHoldsItsHashesAtTheirSize ensures a seal's chain hashes and tree hashes, which the
// store keeps until it has written them, are allocated at their exact size, whatever the head
// and the batch: grown by append instead, a seal of 1,000 events held three times the memory.
func TestSealHoldsItsHashesAtTheirSize(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	l := newMemLog()
	seal := s.SealFunc(func() time.Time { return baseTime })
	for _, n := range []int{1, 1, 2, 5, 8, 64, 3} {
		got := l.seal(t, seal, pendingEvents(len(l.events), n))
		if len(got.Hashes) != n*audit.HashSize || cap(got.Hashes) != len(got.Hashes) {
			t.Errorf("a seal of %d events after %d: chain hashes of %d bytes in %d", n, len(l.events)-n, len(got.Hashes), cap(got.Hashes))
		}
		if cap(got.TreeHashes) != len(got.TreeHashes) {
			t.Errorf("a seal of %d events after %d: tree hashes of %d bytes in %d", n, len(l.events)-n, len(got.TreeHashes), cap(got.TreeHashes))
		}
	}
}

// TestNoteSignature ensures the key id and signature shown beside a checkpoint are those of its
// signer: the id names the key, and the signature verifies the note's text with it; a note
// without a signature has none to show.
func TestNoteSignature(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	msg, err := s.SignCheckpoint(audit.Checkpoint{Size: 1, Head: make([]byte, audit.HashSize)})
	if err != nil {
		t.Fatal(err)
	}
	id, sig, err := audit.NoteSignature(msg)
	if err != nil || id != s.KeyID() || len(sig) != 64 {
		t.Fatalf("NoteSignature = %q, %d bytes, %v; want %q and 64 bytes", id, len(sig), err, s.KeyID())
	}
	v, err := note.NewVerifier(s.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	text, _, _ := bytes.Cut(msg, []byte("\n\n"))
	if !v.Verify(append(text, '\n'), sig) {
		t.Error("the signature shown does not verify the checkpoint's text")
	}
	for name, bad := range map[string][]byte{
		"no signature":          append(bytes.Clone(text), "\n\n"...),
		"a signature too short": append(append(bytes.Clone(text), "\n\n— ag-test "...), "AAAA\n"...),
	} {
		if id, sig, err := audit.NoteSignature(bad); err == nil {
			t.Errorf("%s: %q, %x", name, id, sig)
		}
	}
}
