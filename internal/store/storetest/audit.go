package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// The audit log's tests seal with testSeal, a stand-in for internal/audit's seal that a test
// can check by itself: the chain is sha256(prev_hash || testCanonical(event)), the Merkle tree
// is tlog's over testCanonical, and the checkpoint's note is plain text. The store only keeps
// what a seal answers, so any deterministic encoding serves.

// sealFunc is the type of store.SealAuditParams.Seal.
type sealFunc = func(head store.AuditHead, pending []store.AuditEvent, hashes func([]int64) ([][]byte, error)) (store.AuditSeal, error)

// testCanonical is the tests' canonical form of an event: every field the hashes cover, in a
// JSON array, the details as the store keeps them.
func testCanonical(e store.AuditEvent) []byte {
	b, err := json.Marshal([]any{e.Seq, e.Time.UTC().UnixMicro(), e.Principal, e.Holder, e.Action, e.Subject, string(e.Details)})
	if err != nil {
		panic(err) // numbers and strings
	}
	return b
}

// chainHash is sha256(prev || canonical), 32 zero bytes standing for an empty prev.
func chainHash(prev, canonical []byte) []byte {
	if len(prev) == 0 {
		prev = make([]byte, sha256.Size)
	}
	h := sha256.New()
	h.Write(prev)
	h.Write(canonical)
	return h.Sum(nil)
}

// testNote is the stand-in for a signed checkpoint note.
func testNote(size uint64, root, head []byte) []byte {
	return fmt.Appendf(nil, "storetest\n%d\n%x\nhead %x\n", size, root, head)
}

// testSeal answers a Seal that seals as docs/audit.md says, with testCanonical, and dates its
// checkpoints with clk.
func testSeal(clk clock.Clock) sealFunc {
	return func(head store.AuditHead, pending []store.AuditEvent, hashes func([]int64) ([][]byte, error)) (store.AuditSeal, error) {
		// The hashes this seal adds follow the stored ones: base is the first of them.
		base := tlog.StoredHashIndex(0, int64(head.Size))
		var added []tlog.Hash
		reader := tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
			out := make([]tlog.Hash, len(indexes))
			var (
				stored []int64
				at     []int
			)
			for i, idx := range indexes {
				switch {
				case idx >= base && idx-base < int64(len(added)):
					out[i] = added[idx-base]
				case idx >= base:
					return nil, fmt.Errorf("tree hash %d is neither stored nor added", idx)
				default:
					stored, at = append(stored, idx), append(at, i)
				}
			}
			if len(stored) > 0 {
				raw, err := hashes(stored)
				if err != nil {
					return nil, err
				}
				if len(raw) != len(stored) {
					return nil, fmt.Errorf("asked for %d stored tree hashes, got %d", len(stored), len(raw))
				}
				for j, h := range raw {
					if len(h) != tlog.HashSize {
						return nil, fmt.Errorf("stored tree hash %d has %d bytes", stored[j], len(h))
					}
					copy(out[at[j]][:], h)
				}
			}
			return out, nil
		})

		var seal store.AuditSeal
		prev := head.Hash
		if len(prev) == 0 {
			prev = make([]byte, sha256.Size)
		}
		for i, e := range pending {
			e.Seq = head.Size + uint64(i) + 1
			c := testCanonical(e)
			hash := chainHash(prev, c)
			hs, err := tlog.StoredHashes(int64(e.Seq-1), c, reader)
			if err != nil {
				return store.AuditSeal{}, fmt.Errorf("tree hashes of event %d: %w", e.Seq, err)
			}
			added = append(added, hs...)
			seal.Hashes = append(seal.Hashes, hash...)
			prev = hash
		}
		size := head.Size + uint64(len(pending))
		root, err := tlog.TreeHash(int64(size), reader)
		if err != nil {
			return store.AuditSeal{}, fmt.Errorf("tree hash of size %d: %w", size, err)
		}
		for _, h := range added {
			seal.TreeHashes = append(seal.TreeHashes, h[:]...)
		}
		seal.Head = store.AuditHead{Size: size, Hash: prev}
		seal.Checkpoint = store.AuditCheckpoint{Size: size, RootHash: slices.Clone(root[:]), HeadHash: prev,
			Note: testNote(size, root[:], prev), CreatedAt: clk.Now()}
		return seal, nil
	}
}

// noSeal is a Seal that must not be called: nothing is pending.
func noSeal(t *testing.T) sealFunc {
	return func(head store.AuditHead, pending []store.AuditEvent, _ func([]int64) ([][]byte, error)) (store.AuditSeal, error) {
		t.Errorf("Seal was called with head %d and %d pending events, want no call: nothing is pending", head.Size, len(pending))
		return store.AuditSeal{}, errors.New("nothing should be pending")
	}
}

// abundle is a bundle for the audit log's tests. Its ctx carries the actor ops, which a method
// records only when the contract says it records ActorOf(ctx): methods given a worker, holder
// or acting principal record that one instead.
type abundle struct {
	*rbundle
	mark uint64 // the size of the log when a case's change began
}

// ops is the actor of the tests' contexts.
var ops = store.Actor{Principal: "ops", Holder: "ops|console"}

func setupAudit(t *testing.T, newStore Factory) *abundle {
	t.Helper()
	b := setupRepos(t, newStore)
	b.ctx = store.WithActor(b.ctx, ops)
	return &abundle{rbundle: b}
}

// as answers the bundle's context acting as a.
func (b *abundle) as(a store.Actor) context.Context { return store.WithActor(b.ctx, a) }

// seal runs one SealAudit with testSeal.
func (b *abundle) seal(t *testing.T, limit int) int {
	t.Helper()
	n, err := b.st.SealAudit(b.ctx, store.SealAuditParams{Limit: limit, Seal: testSeal(b.clk)})
	if err != nil {
		t.Fatalf("SealAudit(limit %d): %v", limit, err)
	}
	return n
}

// sealAll seals every pending event and answers how many there were.
func (b *abundle) sealAll(t *testing.T) int {
	t.Helper()
	total := 0
	for {
		n := b.seal(t, 100)
		if n == 0 {
			return total
		}
		total += n
	}
}

// size answers the size of the newest checkpoint, 0 before the first.
func (b *abundle) size(t *testing.T) uint64 {
	t.Helper()
	cp, err := b.st.LatestAuditCheckpoint(b.ctx)
	if errors.Is(err, store.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatalf("LatestAuditCheckpoint: %v", err)
	}
	return cp.Size
}

// markLog seals what is pending, remembers the log's size and moves the clock on: the events
// after the mark are the case's own, and all carry the time of the change.
func (b *abundle) markLog(t *testing.T) {
	t.Helper()
	b.sealAll(t)
	b.mark = b.size(t)
	b.clk.Advance(time.Second)
}

// auditEvents answers every sealed event after seq, by seq.
func (b *abundle) auditEvents(t *testing.T, after uint64) []store.AuditEvent {
	t.Helper()
	var all []store.AuditEvent
	for {
		page, err := b.st.ListAuditEvents(b.ctx, store.ListAuditEventsParams{AfterSeq: after, Limit: 1000})
		if err != nil {
			t.Fatalf("ListAuditEvents(after %d): %v", after, err)
		}
		all = append(all, page...)
		if len(page) < 1000 {
			return all
		}
		after = page[len(page)-1].Seq
	}
}

// verifyLog checks the whole sealed log as an auditor would, with testCanonical: seqs 1, 2, 3,
// ... without a gap, each prev_hash the previous hash, each hash recomputed, and the newest
// checkpoint's size, head hash and Merkle root, the root computed both from the events and from
// the tree hashes the store keeps. It answers the events.
func (b *abundle) verifyLog(t *testing.T) []store.AuditEvent {
	t.Helper()
	events := b.auditEvents(t, 0)
	prev := make([]byte, sha256.Size)
	tree := &hashStore{}
	for i, e := range events {
		if want := uint64(i) + 1; e.Seq != want {
			t.Fatalf("event %d of the log has seq %d, want %d: a gap or a repeat", i, e.Seq, want)
		}
		if !bytes.Equal(e.PrevHash, prev) {
			t.Fatalf("event %d (%s %s) has prev_hash %x, want the previous event's hash %x", e.Seq, e.Action, e.Subject, e.PrevHash, prev)
		}
		c := testCanonical(e)
		if want := chainHash(prev, c); !bytes.Equal(e.Hash, want) {
			t.Fatalf("event %d (%s %s) has hash %x, want %x: the store answers other fields than it sealed", e.Seq, e.Action, e.Subject, e.Hash, want)
		}
		tree.add(t, c)
		prev = e.Hash
	}
	cp, err := b.st.LatestAuditCheckpoint(b.ctx)
	if len(events) == 0 {
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("LatestAuditCheckpoint of an empty log = %+v, %v; want %v", cp, err, store.ErrNotFound)
		}
		return events
	}
	if err != nil {
		t.Fatalf("LatestAuditCheckpoint: %v", err)
	}
	if cp.Size != uint64(len(events)) || !bytes.Equal(cp.HeadHash, prev) {
		t.Fatalf("the newest checkpoint has size %d and head %x, want %d and %x", cp.Size, cp.HeadHash, len(events), prev)
	}
	root, err := tlog.TreeHash(int64(len(events)), tree)
	if err != nil {
		t.Fatalf("the tree of the events: %v", err)
	}
	if !bytes.Equal(cp.RootHash, root[:]) {
		t.Fatalf("the newest checkpoint's root is %x, want %x (the tree of the events)", cp.RootHash, root)
	}
	if !bytes.Equal(cp.Note, testNote(cp.Size, root[:], prev)) {
		t.Fatalf("the newest checkpoint's note is %q, want the seal's %q", cp.Note, testNote(cp.Size, root[:], prev))
	}
	storedRoot, err := tlog.TreeHash(int64(len(events)), tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		raw, err := b.st.ReadAuditHashes(b.ctx, indexes)
		if err != nil {
			return nil, err
		}
		out := make([]tlog.Hash, len(raw))
		for i, h := range raw {
			if len(h) != tlog.HashSize {
				return nil, fmt.Errorf("tree hash %d has %d bytes", indexes[i], len(h))
			}
			copy(out[i][:], h)
		}
		return out, nil
	}))
	if err != nil {
		t.Fatalf("the tree from ReadAuditHashes: %v", err)
	}
	if storedRoot != root {
		t.Fatalf("the tree hashes the store keeps give the root %x, want %x", storedRoot, root)
	}
	return events
}

// hashStore is a Merkle tree kept in memory, its hashes numbered as tlog stores them.
type hashStore struct {
	records int64
	hashes  []tlog.Hash
}

// add appends a record to the tree.
func (s *hashStore) add(t *testing.T, record []byte) {
	t.Helper()
	hs, err := tlog.StoredHashes(s.records, record, s)
	if err != nil {
		t.Fatalf("tree hashes of record %d: %v", s.records, err)
	}
	s.hashes = append(s.hashes, hs...)
	s.records++
}

func (s *hashStore) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, idx := range indexes {
		if idx < 0 || idx >= int64(len(s.hashes)) {
			return nil, fmt.Errorf("tree hash %d is not stored", idx)
		}
		out[i] = s.hashes[idx]
	}
	return out, nil
}

// auditWant is an event a change must write. Details' values are what the member must be: a
// string, an int (a JSON number), a time.Time (an RFC 3339 string in UTC, the same instant), a
// []string, a json.RawMessage (the same JSON value) or nil (JSON null); nil details: no
// member at all (null or {}).
type auditWant struct {
	action  string
	subject string
	actor   store.Actor
	details map[string]any
}

// system is the actor of what the server does by itself.
var system = store.Actor{Principal: store.SystemPrincipal}

// holderOf is the actor of a worker or holder "<principal>|<label>".
func holderOf(holder string) store.Actor {
	return store.Actor{Principal: store.PrincipalOf(holder), Holder: holder}
}

// wantAuditEvents fails the test unless the events sealed after the mark are exactly want, in
// any order, each at the time the clock shows now.
func (b *abundle) wantAuditEvents(t *testing.T, want []auditWant) {
	t.Helper()
	b.sealAll(t)
	got := b.auditEvents(t, b.mark)
	key := func(action, subject string) string { return action + " " + subject }
	slices.SortStableFunc(got, func(x, y store.AuditEvent) int {
		return strings.Compare(key(x.Action, x.Subject), key(y.Action, y.Subject))
	})
	want = slices.Clone(want)
	slices.SortStableFunc(want, func(x, y auditWant) int { return strings.Compare(key(x.action, x.subject), key(y.action, y.subject)) })
	var gotKeys, wantKeys []string
	for _, e := range got {
		gotKeys = append(gotKeys, key(e.Action, e.Subject))
	}
	for _, w := range want {
		wantKeys = append(wantKeys, key(w.action, w.subject))
	}
	if !slices.Equal(gotKeys, wantKeys) {
		t.Fatalf("the change wrote the events\n  %s\nwant\n  %s", strings.Join(gotKeys, "\n  "), strings.Join(wantKeys, "\n  "))
	}
	now := b.clk.Now()
	for i, e := range got {
		w := want[i]
		what := fmt.Sprintf("event %d (%s %s)", e.Seq, e.Action, e.Subject)
		if e.Principal != w.actor.Principal || e.Holder != w.actor.Holder {
			t.Errorf("%s: principal %q, holder %q; want %q, %q", what, e.Principal, e.Holder, w.actor.Principal, w.actor.Holder)
		}
		if !e.Time.Equal(now) {
			t.Errorf("%s: time %s, want the change's %s", what, e.Time, now)
		}
		if diff := diffDetails(e.Details, w.details); diff != "" {
			t.Errorf("%s: details %s:\n%s", what, e.Details, diff)
		}
	}
}

// diffDetails answers how details differ from want (see auditWant), one line each.
func diffDetails(details []byte, want map[string]any) string {
	var got map[string]any
	if len(details) > 0 {
		dec := json.NewDecoder(bytes.NewReader(details))
		dec.UseNumber()
		if err := dec.Decode(&got); err != nil {
			return fmt.Sprintf("  not a JSON object: %v\n", err)
		}
	}
	var b strings.Builder
	for k := range got {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(&b, "  member %q is not one of the action's\n", k)
		}
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			fmt.Fprintf(&b, "  member %q is missing\n", k)
			continue
		}
		if msg := diffMember(g, w); msg != "" {
			fmt.Fprintf(&b, "  member %q: %s\n", k, msg)
		}
	}
	return b.String()
}

func diffMember(got, want any) string {
	switch w := want.(type) {
	case nil:
		if got != nil {
			return fmt.Sprintf("%v, want null", got)
		}
	case string:
		if g, ok := got.(string); !ok || g != w {
			return fmt.Sprintf("%#v, want the string %q", got, w)
		}
	case int:
		if g, ok := got.(json.Number); !ok || g.String() != strconv.Itoa(w) {
			return fmt.Sprintf("%#v, want the number %d", got, w)
		}
	case time.Time:
		g, ok := got.(string)
		if !ok {
			return fmt.Sprintf("%#v, want the time %s", got, w.UTC().Format(time.RFC3339Nano))
		}
		at, err := time.Parse(time.RFC3339Nano, g)
		if err != nil || !strings.HasSuffix(g, "Z") || !at.Equal(w) {
			return fmt.Sprintf("%q, want the time %s in RFC 3339, UTC", g, w.UTC().Format(time.RFC3339Nano))
		}
	case []string:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%#v, want %q", got, w)
		}
		for i := range g {
			if s, ok := g[i].(string); !ok || s != w[i] {
				return fmt.Sprintf("%#v, want %q", got, w)
			}
		}
	case json.RawMessage:
		raw, err := json.Marshal(got)
		if err != nil || !jsonEqual(raw, w) {
			return fmt.Sprintf("%s, want %s", raw, w)
		}
	default:
		return fmt.Sprintf("the test wants a %T, which diffMember does not know", want)
	}
	return ""
}

// auditActions are the actions of the table in internal/store/audit.go.
var auditActions = []string{
	"principal.created", "principal.disabled", "token.created", "token.revoked", "worker_key.registered",
	"job.enqueued", "job.claimed", "job.completed", "job.failed", "job.cancelled", "job.cancel_requested", "job.expired",
	"lease.granted", "lease.renewed", "lease.released", "lease.broken",
	"repository.created", "repository.validation_set",
	"change.integrated", "change.queued", "change.validating", "change.rejected", "change.cancelled", "change.requeued",
	"change.awaiting_approval", "change.approved",
	"candidate.built", "candidate.passed", "candidate.failed", "candidate.superseded", "candidate.split",
	"task.created", "task.claimed", "task.renewed", "task.released", "task.done", "task.cancelled", "message.sent",
}

// auditCase is one state change of the contract's table: act arranges what it needs, calls
// b.markLog, makes the change, and answers the events the change must write.
type auditCase struct {
	name string
	act  func(t *testing.T, b *abundle) []auditWant
}

// auditCases are a representative change of each kind the table lists.
var auditCases = []auditCase{
	// principals, tokens, worker keys
	{"create_principal", func(t *testing.T, b *abundle) []auditWant {
		b.markLog(t)
		_, tok, _ := b.createPrincipal(t, "alice", store.RoleAgent)
		return []auditWant{
			{"principal.created", "principal/alice", ops, map[string]any{"role": "agent"}},
			{"token.created", "token/" + tok.ID, ops, map[string]any{"principal": "alice"}},
		}
	}},
	{"bootstrap_admin_by_the_server", func(t *testing.T, b *abundle) []auditWant {
		b.markLog(t)
		id, hash := newToken("root")
		// ag serve bootstraps its admin on start: no caller, so the server is the actor.
		created, err := b.st.BootstrapAdmin(t.Context(), store.CreatePrincipalParams{
			Name: "root", Role: store.RoleAdmin, TokenID: id, TokenHash: hash})
		if err != nil || !created {
			t.Fatalf("BootstrapAdmin = %v, %v; want created", created, err)
		}
		return []auditWant{
			{"principal.created", "principal/root", system, map[string]any{"role": "admin"}},
			{"token.created", "token/" + id, system, map[string]any{"principal": "root"}},
		}
	}},
	{"disable_principal", func(t *testing.T, b *abundle) []auditWant {
		b.createPrincipal(t, "alice", store.RoleAgent)
		b.markLog(t)
		if _, err := b.st.DisablePrincipal(b.ctx, "alice"); err != nil {
			t.Fatalf("DisablePrincipal: %v", err)
		}
		return []auditWant{{"principal.disabled", "principal/alice", ops, nil}}
	}},
	{"create_token", func(t *testing.T, b *abundle) []auditWant {
		b.createPrincipal(t, "alice", store.RoleAgent)
		b.markLog(t)
		id, hash := newToken("second")
		if _, err := b.st.CreateToken(b.ctx, store.CreateTokenParams{Principal: "alice", TokenID: id, TokenHash: hash}); err != nil {
			t.Fatalf("CreateToken: %v", err)
		}
		return []auditWant{{"token.created", "token/" + id, ops, map[string]any{"principal": "alice"}}}
	}},
	{"revoke_token", func(t *testing.T, b *abundle) []auditWant {
		_, tok, _ := b.createPrincipal(t, "alice", store.RoleAgent)
		b.markLog(t)
		if _, err := b.st.RevokeToken(b.ctx, tok.ID); err != nil {
			t.Fatalf("RevokeToken: %v", err)
		}
		return []auditWant{{"token.revoked", "token/" + tok.ID, ops, map[string]any{"principal": "alice"}}}
	}},
	{"register_worker_key", func(t *testing.T, b *abundle) []auditWant {
		b.createPrincipal(t, "runner", store.RoleWorker)
		b.markLog(t)
		runner := store.Actor{Principal: "runner"}
		if _, err := b.st.RegisterWorkerKey(b.as(runner), store.RegisterWorkerKeyParams{KeyID: "sha256:k1", Principal: "runner",
			PublicKey: []byte("k1")}); err != nil {
			t.Fatalf("RegisterWorkerKey: %v", err)
		}
		return []auditWant{{"worker_key.registered", "worker_key/sha256:k1", runner, map[string]any{"principal": "runner"}}}
	}},
	// jobs
	{"enqueue_job", func(t *testing.T, b *abundle) []auditWant {
		b.markLog(t)
		job := b.enqueue(t, store.EnqueueJobParams{Kind: "build", Payload: []byte(`{"a":1}`), Priority: -3, MaxAttempts: 4,
			UniqueKey: "build:1", EnqueuedBy: "alice"})
		return []auditWant{{"job.enqueued", "job/" + job.ID, store.Actor{Principal: "alice"},
			map[string]any{"kind": "build", "priority": -3, "max_attempts": 4, "unique_key": "build:1"}}}
	}},
	{"enqueue_job_without_a_unique_key", func(t *testing.T, b *abundle) []auditWant {
		b.markLog(t)
		job := b.enqueue(t, store.EnqueueJobParams{Kind: "build", MaxAttempts: 1, EnqueuedBy: "alice"})
		return []auditWant{{"job.enqueued", "job/" + job.ID, store.Actor{Principal: "alice"},
			map[string]any{"kind": "build", "priority": 0, "max_attempts": 1}}}
	}},
	{"claim_job", func(t *testing.T, b *abundle) []auditWant {
		job := b.enqueue(t, store.EnqueueJobParams{})
		b.markLog(t)
		b.mustClaim(t, "runner|w1", 30*time.Second)
		return []auditWant{{"job.claimed", "job/" + job.ID, holderOf("runner|w1"),
			map[string]any{"claim": 1, "lease_expires_at": b.clk.Now().Add(30 * time.Second)}}}
	}},
	{"complete_job", func(t *testing.T, b *abundle) []auditWant {
		b.enqueue(t, store.EnqueueJobParams{})
		job := b.mustClaim(t, "runner|w1", time.Minute)
		b.markLog(t)
		if _, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: job.ID, Holder: "runner|w1", ClaimNumber: 1,
			Result: []byte(`{"ok":true}`), Output: "done", OutputDigest: "sha256:out"}); err != nil {
			t.Fatalf("CompleteJob: %v", err)
		}
		return []auditWant{{"job.completed", "job/" + job.ID, holderOf("runner|w1"),
			map[string]any{"claim": 1, "output_digest": "sha256:out"}}}
	}},
	{"complete_job_with_an_attestation", func(t *testing.T, b *abundle) []auditWant {
		b.enqueue(t, store.EnqueueJobParams{Kind: store.KindValidate, MaxAttempts: 3})
		first := b.mustClaim(t, "runner|w1", time.Minute)
		b.clk.Advance(2 * time.Minute)
		job := b.mustClaim(t, "runner|w2", time.Minute) // claim 2: the first expired
		if job.ID != first.ID || job.ClaimNumber != 2 {
			t.Fatalf("the second claim is %s, claim %d; want %s, claim 2", job.ID, job.ClaimNumber, first.ID)
		}
		b.markLog(t)
		att := attestation(job.ID, "passed")
		if _, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: job.ID, Holder: "runner|w2", ClaimNumber: 2,
			OutputDigest: "sha256:out", Attestation: att}); err != nil {
			t.Fatalf("CompleteJob: %v", err)
		}
		return []auditWant{{"job.completed", "job/" + job.ID, holderOf("runner|w2"),
			map[string]any{"claim": 2, "output_digest": "sha256:out", "attestation_digest": att.Digest}}}
	}},
	{"fail_job_to_retry", func(t *testing.T, b *abundle) []auditWant {
		b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 3})
		job := b.mustClaim(t, "runner|w1", time.Minute)
		b.markLog(t)
		if _, err := b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: "runner|w1", ClaimNumber: 1,
			Error: `exit status 2: "make" <failed> & stopped`}); err != nil {
			t.Fatalf("FailJob: %v", err)
		}
		return []auditWant{{"job.failed", "job/" + job.ID, holderOf("runner|w1"),
			map[string]any{"claim": 1, "error": `exit status 2: "make" <failed> & stopped`, "state": "queued"}}}
	}},
	{"fail_job_for_good", func(t *testing.T, b *abundle) []auditWant {
		b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 3})
		job := b.mustClaim(t, "runner|w1", time.Minute)
		b.markLog(t)
		if _, err := b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: "runner|w1", Error: "bad input", Final: true}); err != nil {
			t.Fatalf("FailJob: %v", err)
		}
		return []auditWant{{"job.failed", "job/" + job.ID, holderOf("runner|w1"),
			map[string]any{"claim": 1, "error": "bad input", "state": "failed"}}}
	}},
	{"fail_job_that_was_asked_to_stop", func(t *testing.T, b *abundle) []auditWant {
		b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 3})
		job := b.mustClaim(t, "runner|w1", time.Minute)
		if _, err := b.st.CancelJob(b.ctx, job.ID); err != nil {
			t.Fatalf("CancelJob: %v", err)
		}
		b.markLog(t)
		if _, err := b.st.FailJob(b.ctx, store.FailJobParams{JobID: job.ID, Holder: "runner|w1", Error: "stopped"}); err != nil {
			t.Fatalf("FailJob: %v", err)
		}
		return []auditWant{{"job.failed", "job/" + job.ID, holderOf("runner|w1"),
			map[string]any{"claim": 1, "error": "stopped", "state": "cancelled"}}}
	}},
	{"cancel_a_queued_job", func(t *testing.T, b *abundle) []auditWant {
		job := b.enqueue(t, store.EnqueueJobParams{})
		b.markLog(t)
		if _, err := b.st.CancelJob(b.ctx, job.ID); err != nil {
			t.Fatalf("CancelJob: %v", err)
		}
		return []auditWant{{"job.cancelled", "job/" + job.ID, ops, nil}}
	}},
	{"cancel_a_claimed_job", func(t *testing.T, b *abundle) []auditWant {
		b.enqueue(t, store.EnqueueJobParams{})
		job := b.mustClaim(t, "runner|w1", time.Minute)
		b.markLog(t)
		if _, err := b.st.CancelJob(b.ctx, job.ID); err != nil {
			t.Fatalf("CancelJob: %v", err)
		}
		return []auditWant{{"job.cancel_requested", "job/" + job.ID, ops, nil}}
	}},
	{"expire_jobs", func(t *testing.T, b *abundle) []auditWant {
		failed := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 1})
		b.mustClaim(t, "runner|w1", time.Minute)
		cancelled := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 3})
		b.mustClaim(t, "runner|w2", time.Minute)
		if _, err := b.st.CancelJob(b.ctx, cancelled.ID); err != nil {
			t.Fatalf("CancelJob: %v", err)
		}
		b.markLog(t)
		b.clk.Advance(2 * time.Minute)
		if n, err := b.st.ExpireJobs(b.ctx); err != nil || n != 2 {
			t.Fatalf("ExpireJobs = %d, %v; want 2", n, err)
		}
		return []auditWant{
			{"job.expired", "job/" + failed.ID, system, map[string]any{"claim": 1, "state": "failed"}},
			{"job.expired", "job/" + cancelled.ID, system, map[string]any{"claim": 1, "state": "cancelled"}},
		}
	}},
	{"claim_job_settles_an_expired_claim_first", func(t *testing.T, b *abundle) []auditWant {
		expired := b.enqueue(t, store.EnqueueJobParams{MaxAttempts: 1})
		b.mustClaim(t, "runner|w1", time.Minute)
		next := b.enqueue(t, store.EnqueueJobParams{})
		b.markLog(t)
		b.clk.Advance(2 * time.Minute)
		if got := b.mustClaim(t, "runner|w2", time.Minute); got.ID != next.ID {
			t.Fatalf("ClaimJob claimed %s, want %s", got.ID, next.ID)
		}
		return []auditWant{
			{"job.expired", "job/" + expired.ID, system, map[string]any{"claim": 1, "state": "failed"}},
			{"job.claimed", "job/" + next.ID, holderOf("runner|w2"),
				map[string]any{"claim": 1, "lease_expires_at": b.clk.Now().Add(time.Minute)}},
		}
	}},
	{"claim_jobs", func(t *testing.T, b *abundle) []auditWant {
		spent := b.enqueue(t, store.EnqueueJobParams{Priority: 9, MaxAttempts: 1})
		again := b.enqueue(t, store.EnqueueJobParams{Priority: 5, MaxAttempts: 3})
		b.mustClaim(t, "runner|w1", time.Minute)
		b.mustClaim(t, "runner|w1", time.Minute)
		first := b.enqueue(t, store.EnqueueJobParams{Priority: 2})
		second := b.enqueue(t, store.EnqueueJobParams{Priority: 1})
		left := b.enqueue(t, store.EnqueueJobParams{Priority: 0})
		b.markLog(t)
		b.clk.Advance(2 * time.Minute)
		// One job.claimed per job claimed, each with its claim number; the expired claim on its
		// last attempt is settled as ClaimJob settles it; left is not claimed: no event.
		got := b.claimJobs(t, "runner|w2", 30*time.Second, 3)
		wantJobIDs(t, "ClaimJobs(max 3)", got, again, first, second)
		if b.get(t, left.ID).State != store.JobQueued {
			t.Fatalf("ClaimJobs(max 3) took a fourth job")
		}
		expires := b.clk.Now().Add(30 * time.Second)
		return []auditWant{
			{"job.expired", "job/" + spent.ID, system, map[string]any{"claim": 1, "state": "failed"}},
			{"job.claimed", "job/" + again.ID, holderOf("runner|w2"), map[string]any{"claim": 2, "lease_expires_at": expires}},
			{"job.claimed", "job/" + first.ID, holderOf("runner|w2"), map[string]any{"claim": 1, "lease_expires_at": expires}},
			{"job.claimed", "job/" + second.ID, holderOf("runner|w2"), map[string]any{"claim": 1, "lease_expires_at": expires}},
		}
	}},
	{"complete_jobs", func(t *testing.T, b *abundle) []auditWant {
		b.enqueue(t, store.EnqueueJobParams{Kind: "build", Priority: 4})
		b.enqueue(t, store.EnqueueJobParams{Kind: store.KindValidate, Priority: 3})
		b.enqueue(t, store.EnqueueJobParams{Kind: store.KindValidate, Priority: 2})
		b.enqueue(t, store.EnqueueJobParams{Kind: "build", Priority: 1})
		built := b.mustClaim(t, "runner|w1", time.Minute)
		attested := b.mustClaim(t, "runner|w2", time.Minute)
		unattested := b.mustClaim(t, "runner|w1", time.Minute)
		others := b.mustClaim(t, "runner|w3", time.Minute)
		b.markLog(t)
		att := attestation(attested.ID, "passed")
		outs := b.completeJobs(t, []store.CompleteJobParams{
			{JobID: built.ID, Holder: "runner|w1", ClaimNumber: 1, Result: []byte(`{"ok":true}`), OutputDigest: "sha256:out1"},
			{JobID: unattested.ID, Holder: "runner|w1", ClaimNumber: 1, OutputDigest: "sha256:out3"},
			{JobID: others.ID, Holder: "runner|w1", ClaimNumber: 1, OutputDigest: "sha256:out4"},
			{JobID: store.NewID("job"), Holder: "runner|w1", ClaimNumber: 1, OutputDigest: "sha256:out5"},
			{JobID: attested.ID, Holder: "runner|w2", ClaimNumber: 1, OutputDigest: "sha256:out2", Attestation: att},
		})
		for i, want := range []error{nil, store.ErrAttestationRequired, store.ErrLostClaim, store.ErrNotFound, nil} {
			if want == nil && outs[i].Err != nil || want != nil && !errors.Is(outs[i].Err, want) {
				t.Fatalf("CompleteJobs: outcome %d: err = %v, want %v", i, outs[i].Err, want)
			}
		}
		// One job.completed per job completed, with its own worker; none for the refusals.
		return []auditWant{
			{"job.completed", "job/" + built.ID, holderOf("runner|w1"), map[string]any{"claim": 1, "output_digest": "sha256:out1"}},
			{"job.completed", "job/" + attested.ID, holderOf("runner|w2"),
				map[string]any{"claim": 1, "output_digest": "sha256:out2", "attestation_digest": att.Digest}},
		}
	}},
	// leases
	{"acquire_lease", func(t *testing.T, b *abundle) []auditWant {
		b.createRepo(t, "web")
		b.markLog(t)
		l := b.acquire(t, "web", alice, 5*time.Minute, "src/a.go", "docs/")
		return []auditWant{{"lease.granted", "lease/" + l.ID, holderOf(alice), map[string]any{
			"repository": "web", "paths": []string{"src/a.go", "docs/"}, "token": 1, "expires_at": b.clk.Now().Add(5 * time.Minute)}}}
	}},
	{"renew_lease", func(t *testing.T, b *abundle) []auditWant {
		b.createRepo(t, "web")
		b.acquire(t, "web", bob, time.Minute, "README")
		l := b.acquire(t, "web", alice, time.Minute, "src/")
		b.markLog(t)
		if _, err := b.rs.RenewLease(b.as(holderOf(alice)), store.RenewLeaseParams{LeaseID: l.ID, Principal: "alice",
			FencingToken: l.FencingToken, TTL: 10 * time.Minute}); err != nil {
			t.Fatalf("RenewLease: %v", err)
		}
		return []auditWant{{"lease.renewed", "lease/" + l.ID, holderOf(alice),
			map[string]any{"token": 2, "expires_at": b.clk.Now().Add(10 * time.Minute)}}}
	}},
	{"release_lease", func(t *testing.T, b *abundle) []auditWant {
		b.createRepo(t, "web")
		l := b.acquire(t, "web", alice, time.Minute, "src/")
		b.markLog(t)
		if _, err := b.rs.ReleaseLease(b.as(holderOf(alice)), store.ReleaseLeaseParams{LeaseID: l.ID, Principal: "alice"}); err != nil {
			t.Fatalf("ReleaseLease: %v", err)
		}
		return []auditWant{{"lease.released", "lease/" + l.ID, holderOf(alice), map[string]any{"token": 1}}}
	}},
	{"break_lease", func(t *testing.T, b *abundle) []auditWant {
		b.createRepo(t, "web")
		l := b.acquire(t, "web", alice, time.Minute, "src/")
		b.markLog(t)
		if _, err := b.rs.BreakLease(b.ctx, l.ID); err != nil {
			t.Fatalf("BreakLease: %v", err)
		}
		return []auditWant{{"lease.broken", "lease/" + l.ID, ops, map[string]any{"token": 1}}}
	}},
	// repositories
	{"create_repository", func(t *testing.T, b *abundle) []auditWant {
		b.markLog(t)
		b.createRepo(t, "web")
		return []auditWant{{"repository.created", "repository/web", store.Actor{Principal: "admin"}, nil}}
	}},
	{"create_repository_with_a_policy", func(t *testing.T, b *abundle) []auditWant {
		b.markLog(t)
		b.createPolicyRepo(t, "web")
		return []auditWant{{"repository.created", "repository/web", store.Actor{Principal: "admin"},
			map[string]any{"validation": json.RawMessage(policy)}}}
	}},
	{"create_repository_at_a_shallow_history", func(t *testing.T, b *abundle) []auditWant {
		h := b.storeShallowHistory(t)
		b.markLog(t)
		if _, err := b.rs.CreateRepository(b.ctx, store.CreateRepositoryParams{Name: "web", CreatedBy: "admin", GitCommit: h.head, Shallow: h.boundary}); err != nil {
			t.Fatalf("CreateRepository: %v", err)
		}
		return []auditWant{{"repository.created", "repository/web", store.Actor{Principal: "admin"},
			map[string]any{"git_commit": h.head.String(), "shallow": []string{h.boundary[0].String(), h.boundary[1].String()}}}}
	}},
	{"set_validation", func(t *testing.T, b *abundle) []auditWant {
		b.createRepo(t, "web")
		b.markLog(t)
		b.setValidation(t, "web", policy2)
		return []auditWant{{"repository.validation_set", "repository/web", ops, map[string]any{"validation": json.RawMessage(policy2)}}}
	}},
	{"remove_validation", func(t *testing.T, b *abundle) []auditWant {
		b.createPolicyRepo(t, "web")
		b.markLog(t)
		b.setValidation(t, "web", nil)
		return []auditWant{{"repository.validation_set", "repository/web", ops, map[string]any{"validation": nil}}}
	}},
	// integrate
	{"integrate", func(t *testing.T, b *abundle) []auditWant {
		r := b.createRepo(t, "web")
		l := b.acquire(t, "web", alice, time.Hour, "src/")
		b.markLog(t)
		c := b.mustIntegrate(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/b.go", "b"), put("src/a.go", "a")))
		return []auditWant{{"change.integrated", "change/" + c.ID, holderOf(alice),
			map[string]any{"repository": "web", "revision": c.IntegratedRevision, "paths": []string{"src/a.go", "src/b.go"}}}}
	}},
	{"integrate_into_a_repository_with_a_policy", func(t *testing.T, b *abundle) []auditWant {
		r := b.createPolicyRepo(t, "web")
		l := b.acquire(t, "web", alice, time.Hour, "src/")
		b.markLog(t)
		c := b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "a")))
		return []auditWant{{"change.queued", "change/" + c.ID, holderOf(alice),
			map[string]any{"repository": "web", "paths": []string{"src/a.go"}}}}
	}},
	// tasks and messages
	{"create_task", func(t *testing.T, b *abundle) []auditWant {
		b.createRepo(t, "web")
		b.markLog(t)
		dep := b.createTask(t, "web", "first", 0)
		task := b.createTask(t, "web", "second", 4, dep.ID)
		return []auditWant{
			{"task.created", "task/" + dep.ID, store.Actor{Principal: "alice"}, map[string]any{"priority": 0, "repository": "web"}},
			{"task.created", "task/" + task.ID, store.Actor{Principal: "alice"},
				map[string]any{"depends_on": []string{dep.ID}, "priority": 4, "repository": "web"}},
		}
	}},
	{"claim_task", func(t *testing.T, b *abundle) []auditWant {
		b.createRepo(t, "web")
		task := b.createTask(t, "web", "work", 0)
		b.markLog(t)
		b.claimTask(t, "web", "", alice, 5*time.Minute)
		return []auditWant{{"task.claimed", "task/" + task.ID, holderOf(alice),
			map[string]any{"claim": 1, "expires_at": b.clk.Now().Add(5 * time.Minute), "holder": alice}}}
	}},
	{"renew_task_claim", func(t *testing.T, b *abundle) []auditWant {
		b.createRepo(t, "web")
		task := b.createTask(t, "web", "work", 0)
		b.claimTask(t, "web", task.ID, bob, time.Minute)
		b.clk.Advance(2 * time.Minute)
		c := b.claimTask(t, "web", task.ID, alice, time.Minute)
		b.markLog(t)
		if _, err := b.st.RenewTaskClaim(b.as(holderOf(alice)), store.TaskClaimParams{TaskID: task.ID, ClaimNumber: c.ClaimNumber(),
			Principal: "alice", TTL: 10 * time.Minute}); err != nil {
			t.Fatalf("RenewTaskClaim: %v", err)
		}
		return []auditWant{{"task.renewed", "task/" + task.ID, holderOf(alice),
			map[string]any{"claim": 2, "expires_at": b.clk.Now().Add(10 * time.Minute)}}}
	}},
	{"release_task_claim", func(t *testing.T, b *abundle) []auditWant {
		b.createRepo(t, "web")
		task := b.createTask(t, "web", "work", 0)
		c := b.claimTask(t, "web", task.ID, alice, time.Minute)
		b.markLog(t)
		if _, err := b.st.ReleaseTaskClaim(b.as(holderOf(alice)), store.TaskClaimParams{TaskID: task.ID, ClaimNumber: c.ClaimNumber(),
			Principal: "alice"}); err != nil {
			t.Fatalf("ReleaseTaskClaim: %v", err)
		}
		return []auditWant{{"task.released", "task/" + task.ID, holderOf(alice), map[string]any{"claim": 1}}}
	}},
	{"release_task_claim_as_done", func(t *testing.T, b *abundle) []auditWant {
		b.createRepo(t, "web")
		task := b.createTask(t, "web", "work", 0)
		c := b.claimTask(t, "web", task.ID, alice, time.Minute)
		b.markLog(t)
		if _, err := b.st.ReleaseTaskClaim(b.ctx, store.TaskClaimParams{TaskID: task.ID, ClaimNumber: c.ClaimNumber(),
			Principal: "ops", Admin: true, Done: true}); err != nil {
			t.Fatalf("ReleaseTaskClaim(done): %v", err)
		}
		return []auditWant{{"task.done", "task/" + task.ID, ops, map[string]any{"claim": 1}}}
	}},
	{"cancel_task", func(t *testing.T, b *abundle) []auditWant {
		b.createRepo(t, "web")
		task := b.createTask(t, "web", "work", 0)
		b.markLog(t)
		if _, err := b.st.CancelTask(b.ctx, task.ID, "ops", true, "not needed"); err != nil {
			t.Fatalf("CancelTask: %v", err)
		}
		return []auditWant{{"task.cancelled", "task/" + task.ID, ops, map[string]any{"reason": "not needed"}}}
	}},
	{"integrate_finishes_a_task", func(t *testing.T, b *abundle) []auditWant {
		r := b.createRepo(t, "web")
		task := b.createTask(t, "web", "work", 0)
		l := b.acquire(t, "web", alice, time.Hour, "src/")
		c := b.claimTask(t, "web", task.ID, alice, time.Hour)
		b.markLog(t)
		change := b.mustIntegrate(t, taskIntegrate(r, alice, l, "a.go", task, c.ClaimNumber()))
		return []auditWant{
			{"change.integrated", "change/" + change.ID, holderOf(alice),
				map[string]any{"repository": "web", "revision": change.IntegratedRevision, "paths": []string{"src/a.go"}}},
			{"task.done", "task/" + task.ID, holderOf(alice), map[string]any{"change": change.ID, "claim": 1}},
		}
	}},
	{"queue_finishes_a_task", func(t *testing.T, b *abundle) []auditWant {
		g := b.createPolicyRepo(t, "gated")
		task := b.createTask(t, "gated", "work", 0)
		l := b.acquire(t, "gated", alice, time.Hour, "src/")
		c := b.claimTask(t, "gated", task.ID, alice, time.Hour)
		queued := b.queue(t, taskIntegrate(g, alice, l, "a.go", task, c.ClaimNumber()))
		b.markLog(t)
		if err := b.rs.InQueue(b.ctx, "gated", func(q store.QueueTx) error { return q.FinishTask(task.ID, queued.ID) }); err != nil {
			t.Fatalf("InQueue: %v", err)
		}
		return []auditWant{{"task.done", "task/" + task.ID, system, map[string]any{"change": queued.ID, "claim": 1}}}
	}},
	{"send_message", func(t *testing.T, b *abundle) []auditWant {
		b.createRepo(t, "web")
		task := b.createTask(t, "web", "work", 0)
		b.claimTask(t, "web", task.ID, bob, time.Hour)
		b.markLog(t)
		m := b.send(t, store.SendMessageParams{Repository: "web", Author: alice, Text: "Are you on it? ünïcode", TaskID: task.ID})
		return []auditWant{{"message.sent", "message/" + m.ID, holderOf(alice), map[string]any{
			"address": "task/" + task.ID, "recipient": bob, "repository": "web", "size": len("Are you on it? ünïcode")}}}
	}},
	{"send_message_without_a_label", func(t *testing.T, b *abundle) []auditWant {
		b.createRepo(t, "web")
		b.markLog(t)
		m := b.send(t, store.SendMessageParams{Repository: "web", Author: "carol", Text: "Freeze at noon.", ToAll: true})
		return []auditWant{{"message.sent", "message/" + m.ID, store.Actor{Principal: "carol"}, map[string]any{
			"address": "all", "recipient": "", "repository": "web", "size": len("Freeze at noon.")}}}
	}},
	{"send_message_to_a_holder_and_on_a_change", func(t *testing.T, b *abundle) []auditWant {
		c := b.queuedChange(t)
		b.markLog(t)
		toBob := b.send(t, store.SendMessageParams{Repository: "web", Author: alice, Text: "Yours?", ToHolder: bob})
		onChange := b.send(t, store.SendMessageParams{Repository: "web", Author: bob, Text: "Rebase it.", ChangeID: c.ID})
		return []auditWant{
			{"message.sent", "message/" + toBob.ID, holderOf(alice), map[string]any{
				"address": "holder/" + bob, "recipient": bob, "repository": "web", "size": len("Yours?")}},
			{"message.sent", "message/" + onChange.ID, holderOf(bob), map[string]any{
				"address": "change/" + c.ID, "recipient": alice, "repository": "web", "size": len("Rebase it.")}},
		}
	}},
	// the integration queue
	{"advance_queue_validates_a_change", func(t *testing.T, b *abundle) []auditWant {
		c := b.queuedChange(t)
		b.markLog(t)
		v := b.advance(t, newGate(), "web", step{c.ID, store.ChangeValidating})[0]
		return []auditWant{
			{"job.enqueued", "job/" + v.JobID, system, map[string]any{"kind": "validate", "priority": 10, "max_attempts": 2,
				"unique_key": "validate:" + v.CandidateRevision}},
			{"candidate.built", "candidate/" + v.CandidateID, system, map[string]any{"changes": []string{c.ID}, "job": v.JobID,
				"parent_revision": c.BaseRevision, "revision": v.CandidateRevision}},
			{"change.validating", "change/" + c.ID, system, map[string]any{"candidate_revision": v.CandidateRevision, "job": v.JobID}},
		}
	}},
	{"advance_queue_integrates_a_pass", func(t *testing.T, b *abundle) []auditWant {
		c := b.queuedChange(t)
		g := newGate()
		v := b.advance(t, g, "web", step{c.ID, store.ChangeValidating})[0]
		att := b.passJob(t, v.JobID)
		g.setVerdict(passWhenAttested)
		b.markLog(t)
		b.advance(t, g, "web", step{c.ID, store.ChangeIntegrated})
		return []auditWant{
			{"candidate.passed", "candidate/" + v.CandidateID, system, map[string]any{"attestation_digest": att.Digest, "job": v.JobID}},
			{"change.integrated", "change/" + c.ID, system, map[string]any{"repository": "web",
				"revision": v.CandidateRevision, "paths": []string{"src/a.go"}, "attestation_digest": att.Digest}},
		}
	}},
	{"advance_queue_requeues_a_pass_on_a_mainline_that_moved", func(t *testing.T, b *abundle) []auditWant {
		c := b.queuedChange(t)
		g := newGate()
		v1 := b.advance(t, g, "web", step{c.ID, store.ChangeValidating})[0]
		b.setValidation(t, "web", nil)
		lb := b.acquire(t, "web", bob, time.Hour, "README")
		b.mustIntegrate(t, integrateParams("web", c.BaseRevision, bob, []uint64{lb.FencingToken}, put("README", "hi")))
		b.setValidation(t, "web", policy)
		b.passJob(t, v1.JobID)
		g.setVerdict(passWhenAttested)
		b.markLog(t)
		v2 := b.advance(t, g, "web", step{c.ID, store.ChangeQueued}, step{c.ID, store.ChangeValidating})[1]
		why := "it was built on revision " + c.BaseRevision + ", which is no longer what is ahead of it"
		return []auditWant{
			{"candidate.superseded", "candidate/" + v1.CandidateID, system, map[string]any{"job": v1.JobID, "reason": why}},
			{"change.requeued", "change/" + c.ID, system, map[string]any{"reason": why}},
			{"job.enqueued", "job/" + v2.JobID, system, map[string]any{"kind": "validate", "priority": 10, "max_attempts": 2,
				"unique_key": "validate:" + v2.CandidateRevision}},
			{"candidate.built", "candidate/" + v2.CandidateID, system, map[string]any{"changes": []string{c.ID}, "job": v2.JobID,
				"parent_revision": b.repository(t, "web").Mainline, "revision": v2.CandidateRevision}},
			{"change.validating", "change/" + c.ID, system, map[string]any{"candidate_revision": v2.CandidateRevision, "job": v2.JobID}},
		}
	}},
	{"advance_queue_parks_a_pass_that_touches_a_protected_path", func(t *testing.T, b *abundle) []auditWant {
		c := b.queuedChange(t)
		g := newGate()
		g.protected = []string{"src/a.go"}
		v := b.advance(t, g, "web", step{c.ID, store.ChangeValidating})[0]
		att := b.passJob(t, v.JobID)
		g.setVerdict(passWhenAttested)
		b.markLog(t)
		parked := b.advance(t, g, "web", step{c.ID, store.ChangeQueued}, step{c.ID, store.ChangeAwaitingApproval})[1]
		why := "it passed, but " + c.ID + " touches protected paths and waits for an approval"
		if !strings.Contains(parked.Reason, "ag change approve "+c.ID) {
			t.Fatalf("the parked change's reason %q does not say how to approve it", parked.Reason)
		}
		return []auditWant{
			{"candidate.passed", "candidate/" + v.CandidateID, system, map[string]any{"attestation_digest": att.Digest, "job": v.JobID}},
			{"candidate.superseded", "candidate/" + v.CandidateID, system, map[string]any{"job": v.JobID, "reason": why}},
			{"change.requeued", "change/" + c.ID, system, map[string]any{"reason": why}},
			{"change.awaiting_approval", "change/" + c.ID, system, map[string]any{"attestation_digest": att.Digest,
				"candidate": v.CandidateID, "protected_paths": []string{"src/a.go"}}},
		}
	}},
	{"approve_change_queues_a_change_that_waited", func(t *testing.T, b *abundle) []auditWant {
		c := b.queuedChange(t)
		g := newGate()
		g.protected = []string{"src/"}
		v := b.advance(t, g, "web", step{c.ID, store.ChangeValidating})[0]
		b.passJob(t, v.JobID)
		g.setVerdict(passWhenAttested)
		b.advance(t, g, "web", step{c.ID, store.ChangeQueued}, step{c.ID, store.ChangeAwaitingApproval})
		b.markLog(t)
		approved, err := b.rs.ApproveChange(b.as(store.Actor{Principal: "carol", Holder: "carol|console"}), c.ID, "carol")
		if err != nil || approved.State != store.ChangeQueued || approved.ApprovedBy != "carol" {
			t.Fatalf("ApproveChange = %s approved by %q, %v; want queued, approved by carol", approved.State, approved.ApprovedBy, err)
		}
		// A second approval changes nothing, and writes nothing.
		if again, err := b.rs.ApproveChange(b.ctx, c.ID, "ops"); err != nil || again.ApprovedBy != "carol" {
			t.Fatalf("ApproveChange again = approved by %q, %v; want carol's approval kept", again.ApprovedBy, err)
		}
		return []auditWant{{"change.approved", "change/" + c.ID, store.Actor{Principal: "carol", Holder: "carol|console"},
			map[string]any{"approved_by": "carol", "state": "queued"}}}
	}},
	{"advance_queue_rejects_a_change", func(t *testing.T, b *abundle) []auditWant {
		c := b.queuedChange(t)
		g := newGate()
		v := b.advance(t, g, "web", step{c.ID, store.ChangeValidating})[0]
		g.setVerdict(verdictOf(gate.VerdictReject, "tests failed: 3 of 120"))
		b.markLog(t)
		b.advance(t, g, "web", step{c.ID, store.ChangeRejected})
		return []auditWant{
			{"candidate.failed", "candidate/" + v.CandidateID, system, map[string]any{"job": v.JobID, "reason": "tests failed: 3 of 120"}},
			{"change.rejected", "change/" + c.ID, system, map[string]any{"reason": "tests failed: 3 of 120"}},
		}
	}},
	{"advance_queue_cancels_a_change", func(t *testing.T, b *abundle) []auditWant {
		c := b.queuedChange(t)
		g := newGate()
		b.advance(t, g, "web", step{c.ID, store.ChangeValidating})
		g.setVerdict(verdictOf(gate.VerdictCancel, "validate job cancelled"))
		b.markLog(t)
		b.advance(t, g, "web", step{c.ID, store.ChangeCancelled})
		return []auditWant{{"change.cancelled", "change/" + c.ID, system, map[string]any{"reason": "validate job cancelled"}}}
	}},
	{"advance_queue_rejects_a_change_that_does_not_build", func(t *testing.T, b *abundle) []auditWant {
		r := b.createPolicyRepo(t, "web")
		l := b.acquire(t, "web", alice, time.Hour, "src/")
		// Both edit src/a.go on the same mainline: once the first lands, the second conflicts.
		first := b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "a")))
		second := b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "b")))
		b.setValidation(t, "web", nil)
		b.markLog(t)
		got := b.advance(t, newGate(), "web", step{first.ID, store.ChangeIntegrated}, step{second.ID, store.ChangeRejected})
		reason := (&repo.ConflictError{Path: "src/a.go"}).Error()
		return []auditWant{
			{"change.integrated", "change/" + first.ID, system,
				map[string]any{"repository": "web", "revision": got[0].IntegratedRevision, "paths": []string{"src/a.go"}}},
			{"change.rejected", "change/" + second.ID, system, map[string]any{"reason": reason}},
		}
	}},
	{"advance_queue_splits_a_failed_batch", func(t *testing.T, b *abundle) []auditWant {
		r := b.createPolicyRepo(t, "web")
		l := b.acquire(t, "web", alice, time.Hour, "src/")
		first := b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "a")))
		second := b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/b.go", "b")))
		g := newGate()
		g.depth, g.batch = 2, 2
		batch := b.advance(t, g, "web", step{first.ID, store.ChangeValidating}, step{second.ID, store.ChangeValidating})[0]
		g.setVerdict(verdictOf(gate.VerdictReject, "tests failed"))
		b.markLog(t)
		got := b.advance(t, g, "web", step{first.ID, store.ChangeQueued}, step{second.ID, store.ChangeQueued},
			step{first.ID, store.ChangeValidating}, step{second.ID, store.ChangeValidating})
		why := "its batch " + batch.CandidateID + " of 2 changes failed: validating parts of at most 1"
		a, c := got[2], got[3]
		return []auditWant{
			{"candidate.failed", "candidate/" + batch.CandidateID, system, map[string]any{"job": batch.JobID, "reason": "tests failed"}},
			{"candidate.split", "candidate/" + batch.CandidateID, system, map[string]any{"changes": []string{first.ID, second.ID}, "into": 1}},
			{"change.requeued", "change/" + first.ID, system, map[string]any{"reason": why}},
			{"change.requeued", "change/" + second.ID, system, map[string]any{"reason": why}},
			{"job.enqueued", "job/" + a.JobID, system, map[string]any{"kind": "validate", "priority": 10, "max_attempts": 2,
				"unique_key": "validate:" + a.CandidateRevision}},
			{"candidate.built", "candidate/" + a.CandidateID, system, map[string]any{"changes": []string{first.ID}, "job": a.JobID,
				"parent_revision": r.Mainline, "revision": a.CandidateRevision}},
			{"change.validating", "change/" + first.ID, system, map[string]any{"candidate_revision": a.CandidateRevision, "job": a.JobID}},
			{"job.enqueued", "job/" + c.JobID, system, map[string]any{"kind": "validate", "priority": 10, "max_attempts": 2,
				"unique_key": "validate:" + c.CandidateRevision}},
			{"candidate.built", "candidate/" + c.CandidateID, system, map[string]any{"changes": []string{second.ID}, "job": c.JobID,
				"parent_revision": a.CandidateRevision, "revision": c.CandidateRevision}},
			{"change.validating", "change/" + second.ID, system, map[string]any{"candidate_revision": c.CandidateRevision, "job": c.JobID}},
		}
	}},
	{"advance_queue_integrates_directly_once_the_policy_is_removed", func(t *testing.T, b *abundle) []auditWant {
		c := b.queuedChange(t)
		b.setValidation(t, "web", nil)
		b.markLog(t)
		got := b.advance(t, newGate(), "web", step{c.ID, store.ChangeIntegrated})[0]
		return []auditWant{{"change.integrated", "change/" + c.ID, system,
			map[string]any{"repository": "web", "revision": got.IntegratedRevision, "paths": []string{"src/a.go"}}}}
	}},
}

// queuedChange answers a change queued in the new repository "web", which has a policy.
func (b *abundle) queuedChange(t *testing.T) store.Change {
	t.Helper()
	r := b.createPolicyRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	return b.queue(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "a")))
}

// testAuditEventsOfEachChange makes a representative change of each kind the contract lists and
// checks that it wrote exactly its events: action, subject, principal, holder, time and
// details.
func testAuditEventsOfEachChange(t *testing.T, newStore Factory) {
	covered := map[string]bool{}
	for _, c := range auditCases {
		t.Run(c.name, func(t *testing.T) {
			b := setupAudit(t, newStore)
			want := c.act(t, b)
			for _, w := range want {
				covered[w.action] = true
			}
			b.wantAuditEvents(t, want)
			b.verifyLog(t)
		})
	}
	if t.Failed() {
		return
	}
	for _, a := range auditActions {
		if !covered[a] {
			t.Errorf("no case of the suite writes %s, an action of the contract's table", a)
		}
	}
}

// testAuditRefusalsWriteNothing makes requests that are refused, or that change nothing, and
// checks that none of them wrote an event.
func testAuditRefusalsWriteNothing(t *testing.T, newStore Factory) {
	b := setupAudit(t, newStore)
	f := setupRefusals(t, b)
	b.markLog(t)

	refused := slices.Concat(accountRefusals(b, f), jobRefusals(b, f), repoRefusals(b, f))
	for _, r := range refused {
		if err := r.do(); err != nil {
			t.Fatalf("%s: %v", r.what, err)
		}
		if n, err := b.st.SealAudit(b.ctx, store.SealAuditParams{Limit: 100, Seal: noSeal(t)}); err != nil || n != 0 {
			t.Fatalf("%s wrote audit events: SealAudit sealed %d, %v; want 0", r.what, n, err)
		}
	}
	if events := b.auditEvents(t, b.mark); len(events) != 0 {
		t.Fatalf("refused requests left %d events, the first %s %s", len(events), events[0].Action, events[0].Subject)
	}
	b.verifyLog(t)
}

// refusalFixture is what the refused requests of testAuditRefusalsWriteNothing are about.
type refusalFixture struct {
	tok                    store.Token // alice's, revoked
	unique, validate, done store.Job   // claimed with a unique key; claimed and asked to stop; cancelled
	r                      store.Repository
	held, ended            store.Lease // alice's on src/ of r; bob's on docs/, broken
	g                      *testGate   // its verdict on the validating change of "gated" is pending
}

// setupRefusals makes what the refused requests are about, every event of it written before
// the log is marked.
func setupRefusals(t *testing.T, b *abundle) refusalFixture {
	var f refusalFixture
	_, f.tok, _ = b.createPrincipal(t, "alice", store.RoleAgent)
	b.createPrincipal(t, "runner", store.RoleWorker)
	if _, err := b.st.DisablePrincipal(b.ctx, "runner"); err != nil {
		t.Fatalf("DisablePrincipal: %v", err)
	}
	if _, err := b.st.RevokeToken(b.ctx, f.tok.ID); err != nil {
		t.Fatalf("RevokeToken: %v", err)
	}
	if _, err := b.st.RegisterWorkerKey(b.ctx, store.RegisterWorkerKeyParams{KeyID: "sha256:k1", Principal: "runner", PublicKey: []byte("k1")}); err != nil {
		t.Fatalf("RegisterWorkerKey: %v", err)
	}
	f.unique = b.enqueue(t, store.EnqueueJobParams{UniqueKey: "u1"})
	claimed := b.mustClaim(t, "runner|w1", time.Minute)
	if claimed.ID != f.unique.ID {
		t.Fatalf("claimed %s, want %s", claimed.ID, f.unique.ID)
	}
	f.validate = b.enqueue(t, store.EnqueueJobParams{Kind: store.KindValidate})
	b.mustClaim(t, "runner|w2", time.Minute, store.KindValidate)
	f.done = b.enqueue(t, store.EnqueueJobParams{Kind: "other"})
	if _, err := b.st.CancelJob(b.ctx, f.done.ID); err != nil {
		t.Fatalf("CancelJob: %v", err)
	}
	if _, err := b.st.CancelJob(b.ctx, f.validate.ID); err != nil {
		t.Fatalf("CancelJob: %v", err)
	}
	f.r = b.createRepo(t, "web")
	f.held = b.acquire(t, "web", alice, time.Hour, "src/")
	f.ended = b.acquire(t, "web", bob, time.Hour, "docs/")
	if _, err := b.rs.BreakLease(b.ctx, f.ended.ID); err != nil {
		t.Fatalf("BreakLease: %v", err)
	}
	policyRepo := b.createPolicyRepo(t, "gated")
	gl := b.acquire(t, "gated", alice, time.Hour, "src/")
	queued := b.queue(t, integrateParams("gated", policyRepo.Mainline, alice, []uint64{gl.FencingToken}, put("src/a.go", "a")))
	f.g = newGate()
	b.advance(t, f.g, "gated", step{queued.ID, store.ChangeValidating})
	return f
}

// refusal is a request that must be refused or change nothing: do answers what went otherwise.
type refusal struct {
	what string
	do   func() error
}

// accountRefusals are the refused requests about principals, tokens and worker keys.
func accountRefusals(b *abundle, f refusalFixture) []refusal {
	return []refusal{
		{"CreatePrincipal of a taken name", func() error {
			id, hash := newToken("again")
			_, _, err := b.st.CreatePrincipal(b.ctx, store.CreatePrincipalParams{Name: "alice", Role: store.RoleAgent, TokenID: id, TokenHash: hash})
			return wantIs(err, store.ErrAlreadyExists)
		}},
		{"BootstrapAdmin once a principal exists", func() error {
			id, hash := newToken("bootstrap")
			created, err := b.st.BootstrapAdmin(b.ctx, store.CreatePrincipalParams{Name: "root", Role: store.RoleAdmin, TokenID: id, TokenHash: hash})
			if err == nil && created {
				return errors.New("created an admin")
			}
			return err
		}},
		{"DisablePrincipal of a disabled principal", func() error {
			_, err := b.st.DisablePrincipal(b.ctx, "runner")
			return err
		}},
		{"DisablePrincipal of an unknown principal", func() error {
			_, err := b.st.DisablePrincipal(b.ctx, "nobody")
			return wantIs(err, store.ErrNotFound)
		}},
		{"CreateToken of an unknown principal", func() error {
			id, hash := newToken("nobody's")
			_, err := b.st.CreateToken(b.ctx, store.CreateTokenParams{Principal: "nobody", TokenID: id, TokenHash: hash})
			return wantIs(err, store.ErrNotFound)
		}},
		{"RevokeToken of a revoked token", func() error {
			_, err := b.st.RevokeToken(b.ctx, f.tok.ID)
			return err
		}},
		{"RevokeToken of an unknown token", func() error {
			_, err := b.st.RevokeToken(b.ctx, "tok_unknown")
			return wantIs(err, store.ErrNotFound)
		}},
		{"RegisterWorkerKey of a registered key", func() error {
			_, err := b.st.RegisterWorkerKey(b.ctx, store.RegisterWorkerKeyParams{KeyID: "sha256:k1", Principal: "runner", PublicKey: []byte("k1")})
			return err
		}},
		{"RegisterWorkerKey of another principal's key", func() error {
			_, err := b.st.RegisterWorkerKey(b.ctx, store.RegisterWorkerKeyParams{KeyID: "sha256:k1", Principal: "alice", PublicKey: []byte("k1")})
			return wantIs(err, store.ErrAlreadyExists)
		}},
	}
}

// jobRefusals are the refused requests about jobs.
func jobRefusals(b *abundle, f refusalFixture) []refusal {
	return []refusal{
		{"EnqueueJob of a live unique key", func() error {
			_, existing, err := b.st.EnqueueJob(b.ctx, store.EnqueueJobParams{Kind: "test", MaxAttempts: 1, UniqueKey: "u1"})
			if err == nil && !existing {
				return errors.New("enqueued a new job")
			}
			return err
		}},
		{"ClaimJob with nothing claimable", func() error {
			job, err := b.st.ClaimJob(b.ctx, store.ClaimJobParams{Holder: "runner|w3", Kinds: []string{"nothing"}, Lease: time.Minute})
			if err == nil && job != nil {
				return fmt.Errorf("claimed %s", job.ID)
			}
			return err
		}},
		{"ClaimJobs with nothing claimable", func() error {
			jobs, err := b.st.ClaimJobs(b.ctx, store.ClaimJobParams{Holder: "runner|w3", Kinds: []string{"nothing"}, Lease: time.Minute, Max: 5})
			if err == nil && len(jobs) != 0 {
				return fmt.Errorf("claimed %d jobs, the first %s", len(jobs), jobs[0].ID)
			}
			return err
		}},
		{"CompleteJobs of no completion", func() error {
			outs, err := b.st.CompleteJobs(b.ctx, []store.CompleteJobParams{})
			if err == nil && len(outs) != 0 {
				return fmt.Errorf("answered %d outcomes", len(outs))
			}
			return err
		}},
		{"CompleteJobs whose every completion is refused", func() error {
			ps := []store.CompleteJobParams{
				{JobID: f.unique.ID, Holder: "runner|w9", OutputDigest: "sha256:x"},
				{JobID: f.validate.ID, Holder: "runner|w2", ClaimNumber: 1},
				{JobID: "job_unknown", Holder: "runner|w1", ClaimNumber: 1},
				{JobID: f.done.ID, Holder: "runner|w1"},
			}
			outs, err := b.st.CompleteJobs(b.ctx, ps)
			if err != nil {
				return err
			}
			if len(outs) != len(ps) {
				return fmt.Errorf("answered %d outcomes for %d completions", len(outs), len(ps))
			}
			for i, want := range []error{store.ErrLostClaim, store.ErrAttestationRequired, store.ErrNotFound, store.ErrLostClaim} {
				if err := wantIs(outs[i].Err, want); err != nil {
					return fmt.Errorf("completion %d: %w", i, err)
				}
			}
			return nil
		}},
		{"HeartbeatJob (heartbeats are not audited)", func() error {
			_, err := b.st.HeartbeatJob(b.ctx, store.HeartbeatJobParams{JobID: f.unique.ID, Holder: "runner|w1", ClaimNumber: 1, Progress: "half"})
			return err
		}},
		{"CompleteJob by another worker", func() error {
			_, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: f.unique.ID, Holder: "runner|w9", OutputDigest: "sha256:x"})
			return wantIs(err, store.ErrLostClaim)
		}},
		{"CompleteJob with a stale claim number", func() error {
			_, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: f.unique.ID, Holder: "runner|w1", ClaimNumber: 7})
			return wantIs(err, store.ErrLostClaim)
		}},
		{"CompleteJob of a validate job without an attestation", func() error {
			_, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: f.validate.ID, Holder: "runner|w2", ClaimNumber: 1})
			return wantIs(err, store.ErrAttestationRequired)
		}},
		{"FailJob by another worker", func() error {
			_, err := b.st.FailJob(b.ctx, store.FailJobParams{JobID: f.unique.ID, Holder: "runner|w9", Error: "x"})
			return wantIs(err, store.ErrLostClaim)
		}},
		{"CancelJob of a finished job", func() error {
			_, err := b.st.CancelJob(b.ctx, f.done.ID)
			return wantIs(err, store.ErrFailedPrecondition)
		}},
		{"CancelJob of a job asked to stop already", func() error {
			_, err := b.st.CancelJob(b.ctx, f.validate.ID)
			return err
		}},
		{"CancelJob of an unknown job", func() error {
			_, err := b.st.CancelJob(b.ctx, "job_unknown")
			return wantIs(err, store.ErrNotFound)
		}},
		{"ExpireJobs with nothing expired", func() error {
			n, err := b.st.ExpireJobs(b.ctx)
			if err == nil && n != 0 {
				return fmt.Errorf("expired %d jobs", n)
			}
			return err
		}},
	}
}

// repoRefusals are the refused requests about repositories, leases and changes.
func repoRefusals(b *abundle, f refusalFixture) []refusal {
	return []refusal{
		{"CreateRepository of a taken name", func() error {
			_, err := b.rs.CreateRepository(b.ctx, store.CreateRepositoryParams{Name: "web", CreatedBy: "admin"})
			return wantIs(err, store.ErrAlreadyExists)
		}},
		{"SetValidation of an unknown repository", func() error {
			_, err := b.rs.SetValidation(b.ctx, "nowhere", policy)
			return wantIs(err, store.ErrNotFound)
		}},
		{"PutBlobs (content is not audited)", func() error {
			return b.rs.PutBlobs(b.ctx, []store.Blob{blobOf("content")})
		}},
		{"AcquireLease of a leased path", func() error {
			_, err := b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: "web", Paths: []string{"src/a.go"}, Holder: bob, TTL: time.Minute})
			return wantIs(err, store.ErrLeaseConflict)
		}},
		{"AcquireLease in an unknown repository", func() error {
			_, err := b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: "nowhere", Paths: []string{"a"}, Holder: bob, TTL: time.Minute})
			return wantIs(err, store.ErrNotFound)
		}},
		{"RenewLease by another principal", func() error {
			_, err := b.rs.RenewLease(b.ctx, store.RenewLeaseParams{LeaseID: f.held.ID, Principal: "bob", TTL: time.Hour})
			return wantIs(err, store.ErrFailedPrecondition)
		}},
		{"RenewLease of a broken lease", func() error {
			_, err := b.rs.RenewLease(b.ctx, store.RenewLeaseParams{LeaseID: f.ended.ID, Principal: "bob", TTL: time.Hour})
			return wantIs(err, store.ErrFailedPrecondition)
		}},
		{"ReleaseLease with a wrong token", func() error {
			_, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: f.held.ID, Principal: "alice", FencingToken: 99})
			return wantIs(err, store.ErrFailedPrecondition)
		}},
		{"BreakLease of a broken lease", func() error {
			_, err := b.rs.BreakLease(b.ctx, f.ended.ID)
			return wantIs(err, store.ErrFailedPrecondition)
		}},
		{"Integrate of an unleased path", func() error {
			_, err := b.rs.Integrate(b.ctx, integrateParams("web", f.r.Mainline, bob, nil, put("src/a.go", "x")))
			return wantIs(err, store.ErrFailedPrecondition)
		}},
		{"Integrate of a blob that was never stored", func() error {
			p := integrateParams("web", f.r.Mainline, alice, []uint64{f.held.FencingToken}, put("src/a.go", "never stored"))
			p.Blobs = nil
			_, err := b.rs.Integrate(b.ctx, p)
			return wantIs(err, store.ErrNotFound)
		}},
		{"AdvanceQueue while the verdict is pending", func() error {
			changed, err := f.g.run(b.ctx, b.rs, "gated")
			if err == nil && len(changed) > 0 {
				return fmt.Errorf("changed %d changes", len(changed))
			}
			return err
		}},
		{"AdvanceQueue of an unknown repository", func() error {
			_, err := f.g.run(b.ctx, b.rs, "nowhere")
			return wantIs(err, store.ErrNotFound)
		}},
	}
}

// wantIs answers nil when errors.Is(err, target), else an error saying what err was.
func wantIs(err, target error) error {
	if errors.Is(err, target) {
		return nil
	}
	return fmt.Errorf("err = %v, want %v", err, target)
}

// testAuditSealing checks that a seal gives the pending events seq 1, 2, ... in insertion order
// once, links each to the one before, stores a checkpoint, and that the next seal continues
// from the head the previous one left.
func testAuditSealing(t *testing.T, newStore Factory) {
	b := setupAudit(t, newStore)
	if n, err := b.st.SealAudit(b.ctx, store.SealAuditParams{Limit: 100, Seal: noSeal(t)}); err != nil || n != 0 {
		t.Fatalf("SealAudit of an empty log = %d, %v; want 0 without calling Seal", n, err)
	}
	if events := b.auditEvents(t, 0); len(events) != 0 {
		t.Fatalf("ListAuditEvents of an empty log answered %d events", len(events))
	}

	var jobs []string
	for i := range 5 {
		jobs = append(jobs, "job/"+b.enqueue(t, store.EnqueueJobParams{Priority: int32(i)}).ID)
	}
	if events := b.auditEvents(t, 0); len(events) != 0 {
		t.Fatalf("ListAuditEvents answered %d events before any seal, want none: it lists sealed events only", len(events))
	}

	// The first seal: Seal sees the empty head and the pending events, oldest first.
	var calls int
	seal := func(want store.AuditHead, subjects []string) sealFunc {
		inner := testSeal(b.clk)
		return func(head store.AuditHead, pending []store.AuditEvent, hashes func([]int64) ([][]byte, error)) (store.AuditSeal, error) {
			calls++
			if head.Size != want.Size || !bytes.Equal(head.Hash, want.Hash) {
				t.Errorf("Seal got the head %d %x, want %d %x", head.Size, head.Hash, want.Size, want.Hash)
			}
			var got []string
			for i, e := range pending {
				got = append(got, e.Subject)
				if e.Seq != 0 || e.PrevHash != nil || e.Hash != nil {
					t.Errorf("pending event %s has seq %d and hashes %x %x, want none", e.Subject, e.Seq, e.PrevHash, e.Hash)
				}
				if i > 0 && e.ID < pending[i-1].ID {
					t.Errorf("pending events are not in insertion order: id %d after %d", e.ID, pending[i-1].ID)
				}
			}
			if !slices.Equal(got, subjects) {
				t.Errorf("Seal got the pending events %v, want %v", got, subjects)
			}
			return inner(head, pending, hashes)
		}
	}
	b.clk.Advance(time.Minute)
	n, err := b.st.SealAudit(b.ctx, store.SealAuditParams{Limit: 100, Seal: seal(store.AuditHead{}, jobs)})
	if err != nil || n != 5 || calls != 1 {
		t.Fatalf("SealAudit = %d, %v (Seal called %d times); want 5, one call", n, err, calls)
	}
	first := b.verifyLog(t)
	for i, e := range first {
		if e.Subject != jobs[i] || e.Action != "job.enqueued" {
			t.Fatalf("event %d is %s %s, want job.enqueued %s: seal order is insertion order", e.Seq, e.Action, e.Subject, jobs[i])
		}
	}
	if !bytes.Equal(first[0].PrevHash, make([]byte, sha256.Size)) {
		t.Fatalf("event 1 has prev_hash %x, want 32 zero bytes", first[0].PrevHash)
	}
	cp, err := b.st.LatestAuditCheckpoint(b.ctx)
	if err != nil || cp.Size != 5 || !cp.CreatedAt.Equal(b.clk.Now()) {
		t.Fatalf("LatestAuditCheckpoint = size %d created %s, %v; want size 5 created %s", cp.Size, cp.CreatedAt, err, b.clk.Now())
	}

	// Nothing pending: Seal is not called and nothing changes.
	if n, err := b.st.SealAudit(b.ctx, store.SealAuditParams{Limit: 100, Seal: noSeal(t)}); err != nil || n != 0 {
		t.Fatalf("SealAudit with nothing pending = %d, %v; want 0", n, err)
	}

	// A seal that fails stores nothing: the events stay pending, and the next seal takes them.
	var more []string
	for range 3 {
		more = append(more, "job/"+b.enqueue(t, store.EnqueueJobParams{}).ID)
	}
	failing := func(store.AuditHead, []store.AuditEvent, func([]int64) ([][]byte, error)) (store.AuditSeal, error) {
		return store.AuditSeal{}, errors.New("the signer is away")
	}
	if n, err := b.st.SealAudit(b.ctx, store.SealAuditParams{Limit: 100, Seal: failing}); err == nil || n != 0 {
		t.Fatalf("SealAudit with a failing Seal = %d, %v; want 0 and its error", n, err)
	}
	if events := b.auditEvents(t, 5); len(events) != 0 {
		t.Fatalf("a failed seal sealed %d events", len(events))
	}
	b.clk.Advance(time.Minute)
	calls = 0
	last := first[len(first)-1]
	n, err = b.st.SealAudit(b.ctx, store.SealAuditParams{Limit: 100, Seal: seal(store.AuditHead{Size: 5, Hash: last.Hash}, more)})
	if err != nil || n != 3 || calls != 1 {
		t.Fatalf("the second SealAudit = %d, %v (Seal called %d times); want 3, one call", n, err, calls)
	}
	all := b.verifyLog(t)
	if len(all) != 8 {
		t.Fatalf("the log holds %d events, want 8", len(all))
	}
	for i, e := range all[:5] {
		if e.ID != first[i].ID || !bytes.Equal(e.Hash, first[i].Hash) || !bytes.Equal(e.PrevHash, first[i].PrevHash) {
			t.Fatalf("event %d changed after a later seal: %+v, was %+v", e.Seq, e, first[i])
		}
	}
	for i, e := range all[5:] {
		if e.Subject != more[i] {
			t.Fatalf("event %d is %s, want %s", e.Seq, e.Subject, more[i])
		}
	}
}

// testAuditSealBatches checks that a seal takes its limit, the oldest pending events first (each
// enqueue is a transaction of one event), and that events written between seals come after
// those written before.
func testAuditSealBatches(t *testing.T, newStore Factory) {
	b := setupAudit(t, newStore)
	var subjects []string
	write := func(n int) {
		for range n {
			subjects = append(subjects, "job/"+b.enqueue(t, store.EnqueueJobParams{}).ID)
		}
	}
	write(10)
	var sizes []uint64
	for _, step := range []struct{ write, want int }{{0, 3}, {2, 3}, {0, 3}, {0, 3}, {0, 0}, {1, 1}, {0, 0}} {
		write(step.write)
		if n := b.seal(t, 3); n != step.want {
			t.Fatalf("SealAudit(limit 3) sealed %d, want %d", n, step.want)
		}
		if step.want > 0 {
			sizes = append(sizes, b.size(t))
		}
	}
	if want := []uint64{3, 6, 9, 12, 13}; !slices.Equal(sizes, want) {
		t.Fatalf("the checkpoints after each seal have sizes %v, want %v", sizes, want)
	}
	events := b.verifyLog(t)
	var got []string
	for _, e := range events {
		got = append(got, e.Subject)
	}
	if !slices.Equal(got, subjects) {
		t.Fatalf("the log holds\n  %v\nwant the insertion order\n  %v", got, subjects)
	}
}

// testAuditSealTakesWholeRecords checks that the events one call writes in one transaction (a
// ClaimJobs of three jobs) are sealed together, even past a seal's limit, and that
// ListAuditEvents pages through them one by one.
func testAuditSealTakesWholeRecords(t *testing.T, newStore Factory) {
	b := setupAudit(t, newStore)
	var jobs []string
	for range 3 {
		jobs = append(jobs, "job/"+b.enqueue(t, store.EnqueueJobParams{}).ID)
	}
	claimed, err := b.st.ClaimJobs(b.ctx, store.ClaimJobParams{Holder: "runner|w1", Lease: time.Minute, Max: 3})
	if err != nil || len(claimed) != 3 {
		t.Fatalf("ClaimJobs = %d jobs, %v; want 3", len(claimed), err)
	}
	if n := b.seal(t, 2); n != 2 {
		t.Fatalf("SealAudit(limit 2) of 3 enqueues and a claim of 3 sealed %d, want 2", n)
	}
	// One enqueue is left, then the claim's three events: the seal reaches its limit with the
	// claim's first event and takes the other two with it.
	if n := b.seal(t, 2); n != 4 {
		t.Fatalf("the second SealAudit(limit 2) sealed %d, want 4: the claim's three events together", n)
	}
	if n := b.seal(t, 2); n != 0 {
		t.Fatalf("the third SealAudit(limit 2) sealed %d, want 0", n)
	}
	events := b.verifyLog(t)
	var got []string
	for _, e := range events {
		got = append(got, e.Action+" "+e.Subject)
	}
	var want []string
	for _, j := range jobs {
		want = append(want, "job.enqueued "+j)
	}
	for _, j := range claimed {
		want = append(want, "job.claimed job/"+j.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the log holds\n  %v\nwant\n  %v", got, want)
	}
	for after := uint64(0); after < 6; after++ {
		page, err := b.st.ListAuditEvents(b.ctx, store.ListAuditEventsParams{AfterSeq: after, Limit: 1})
		if err != nil || len(page) != 1 || page[0].Seq != after+1 || !bytes.Equal(page[0].Hash, events[after].Hash) ||
			!bytes.Equal(page[0].PrevHash, events[after].PrevHash) {
			t.Fatalf("ListAuditEvents(after %d, limit 1) = %+v, %v; want event %d as the whole log has it", after, page, err, after+1)
		}
	}
}

// testAuditConcurrentWritersAndSealers runs 8 writers and 2 sealers at once: every event must be
// sealed exactly once, seqs must run 1..N without a gap, each writer's events must keep their
// order, and the chain and the checkpoint must verify.
func testAuditConcurrentWritersAndSealers(t *testing.T, newStore Factory) {
	const (
		writers = 8
		rounds  = 20
	)
	b := setupAudit(t, newStore)
	var (
		writing sync.WaitGroup
		sealing sync.WaitGroup
		done    atomic.Bool
		sealed  atomic.Int64
		mu      sync.Mutex
		jobs    = map[string]int{} // job subject → writer
	)
	for w := range writers {
		writing.Go(func() {
			worker := fmt.Sprintf("w%d|l", w)
			kind := fmt.Sprintf("k%d", w)
			for range rounds {
				job, _, err := b.st.EnqueueJob(b.ctx, store.EnqueueJobParams{Kind: kind, MaxAttempts: 1, EnqueuedBy: "alice"})
				if err != nil {
					t.Errorf("EnqueueJob: %v", err)
					return
				}
				mu.Lock()
				jobs["job/"+job.ID] = w
				mu.Unlock()
				claimed, err := b.st.ClaimJob(b.ctx, store.ClaimJobParams{Holder: worker, Kinds: []string{kind}, Lease: time.Hour})
				if err != nil || claimed == nil || claimed.ID != job.ID {
					t.Errorf("ClaimJob(%s) = %v, %v; want %s", kind, claimed, err, job.ID)
					return
				}
				if _, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: job.ID, Holder: worker, ClaimNumber: 1, OutputDigest: "sha256:o"}); err != nil {
					t.Errorf("CompleteJob: %v", err)
					return
				}
			}
		})
	}
	for range 2 {
		sealing.Go(func() {
			for {
				finished := done.Load()
				n, err := b.st.SealAudit(b.ctx, store.SealAuditParams{Limit: 7, Seal: testSeal(b.clk)})
				if err != nil {
					t.Errorf("SealAudit: %v", err)
					return
				}
				sealed.Add(int64(n))
				if finished && n == 0 {
					return
				}
			}
		})
	}
	writing.Wait()
	done.Store(true)
	sealing.Wait()
	if t.Failed() {
		return
	}

	const want = writers * rounds * 3
	if n := sealed.Load(); n != want {
		t.Fatalf("the sealers sealed %d events, want %d: each exactly once", n, want)
	}
	events := b.verifyLog(t)
	if len(events) != want {
		t.Fatalf("the log holds %d events, want %d", len(events), want)
	}
	// Each job's events are one writer's, in the order it wrote them.
	order := map[string][]string{}
	for _, e := range events {
		order[e.Subject] = append(order[e.Subject], e.Action)
	}
	for subject, w := range jobs {
		if got := order[subject]; !slices.Equal(got, []string{"job.enqueued", "job.claimed", "job.completed"}) {
			t.Fatalf("%s (writer %d) has the events %v, want enqueued, claimed, completed, once each, in order", subject, w, got)
		}
	}
}

// testAuditListPages checks ListAuditEvents' paging by seq and that it lists sealed events only.
func testAuditListPages(t *testing.T, newStore Factory) {
	b := setupAudit(t, newStore)
	for range 25 {
		b.enqueue(t, store.EnqueueJobParams{})
	}
	b.sealAll(t)
	b.enqueue(t, store.EnqueueJobParams{}) // pending: never listed
	seqs := func(p store.ListAuditEventsParams) []uint64 {
		t.Helper()
		events, err := b.st.ListAuditEvents(b.ctx, p)
		if err != nil {
			t.Fatalf("ListAuditEvents(%+v): %v", p, err)
		}
		var out []uint64
		for _, e := range events {
			out = append(out, e.Seq)
		}
		return out
	}
	span := func(from, to uint64) []uint64 {
		var out []uint64
		for s := from; s <= to; s++ {
			out = append(out, s)
		}
		return out
	}
	for _, c := range []struct {
		p    store.ListAuditEventsParams
		want []uint64
	}{
		{store.ListAuditEventsParams{Limit: 10}, span(1, 10)},
		{store.ListAuditEventsParams{AfterSeq: 10, Limit: 10}, span(11, 20)},
		{store.ListAuditEventsParams{AfterSeq: 20, Limit: 10}, span(21, 25)},
		{store.ListAuditEventsParams{AfterSeq: 25, Limit: 10}, nil},
		{store.ListAuditEventsParams{AfterSeq: 3, Limit: 1}, []uint64{4}},
		{store.ListAuditEventsParams{AfterSeq: 1 << 40, Limit: 10}, nil},
		{store.ListAuditEventsParams{AfterSeq: 0, Limit: 10000}, span(1, 25)},
	} {
		if got := seqs(c.p); !slices.Equal(got, c.want) {
			t.Fatalf("ListAuditEvents(after %d, limit %d) = seqs %v, want %v", c.p.AfterSeq, c.p.Limit, got, c.want)
		}
	}
}

// testAuditCheckpoints checks LatestAuditCheckpoint before the first seal and after each, and
// ReadAuditHashes of hashes not stored.
func testAuditCheckpoints(t *testing.T, newStore Factory) {
	b := setupAudit(t, newStore)
	if cp, err := b.st.LatestAuditCheckpoint(b.ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("LatestAuditCheckpoint before any seal = %+v, %v; want %v", cp, err, store.ErrNotFound)
	}
	if _, err := b.st.ReadAuditHashes(b.ctx, []int64{0}); err == nil {
		t.Fatalf("ReadAuditHashes of an empty tree answered a hash, want an error")
	}
	b.enqueue(t, store.EnqueueJobParams{})
	b.clk.Advance(time.Minute)
	b.sealAll(t)
	b.verifyLog(t)
	cp1, err := b.st.LatestAuditCheckpoint(b.ctx)
	if err != nil || cp1.Size != 1 || !cp1.CreatedAt.Equal(b.clk.Now()) {
		t.Fatalf("LatestAuditCheckpoint after the first seal = size %d created %s, %v; want 1, %s", cp1.Size, cp1.CreatedAt, err, b.clk.Now())
	}
	for range 4 {
		b.enqueue(t, store.EnqueueJobParams{})
	}
	b.clk.Advance(time.Minute)
	b.sealAll(t)
	events := b.verifyLog(t)
	cp2, err := b.st.LatestAuditCheckpoint(b.ctx)
	if err != nil || cp2.Size != 5 || !bytes.Equal(cp2.HeadHash, events[4].Hash) || !cp2.CreatedAt.Equal(b.clk.Now()) {
		t.Fatalf("LatestAuditCheckpoint after the second seal = size %d head %x created %s, %v; want 5, %x, %s",
			cp2.Size, cp2.HeadHash, cp2.CreatedAt, err, events[4].Hash, b.clk.Now())
	}
	if bytes.Equal(cp1.RootHash, cp2.RootHash) {
		t.Fatalf("the checkpoints of sizes 1 and 5 have the same root")
	}
	stored := tlog.StoredHashIndex(0, 5) // the first index after the tree of 5 events
	if _, err := b.st.ReadAuditHashes(b.ctx, []int64{0, stored}); err == nil {
		t.Fatalf("ReadAuditHashes of index %d, not stored, answered a hash, want an error", stored)
	}
	hs, err := b.st.ReadAuditHashes(b.ctx, []int64{stored - 1, 0})
	if err != nil || len(hs) != 2 || len(hs[0]) != tlog.HashSize || len(hs[1]) != tlog.HashSize {
		t.Fatalf("ReadAuditHashes(%d, 0) = %d hashes, %v; want 2 of %d bytes", stored-1, len(hs), err, tlog.HashSize)
	}
	leaf := tlog.RecordHash(testCanonical(events[0]))
	if !bytes.Equal(hs[1], leaf[:]) {
		t.Fatalf("tree hash 0 is %x, want the leaf hash of event 1 %x, in the order asked", hs[1], leaf)
	}
}

// testAuditSignal checks that the audit signal fires after a commit that wrote events.
func testAuditSignal(t *testing.T, newStore Factory) {
	b := setupAudit(t, newStore)
	ch := b.st.AuditSignal()
	b.enqueue(t, store.EnqueueJobParams{})
	select {
	case <-ch:
	case <-time.After(signalDeadline):
		t.Fatalf("the audit signal taken before an enqueue did not fire after it")
	}
	b.createRepo(t, "web")
	ch = b.st.AuditSignal()
	b.acquire(t, "web", alice, time.Minute, "src/")
	select {
	case <-ch:
	case <-time.After(signalDeadline):
		t.Fatalf("the audit signal taken before a lease grant did not fire after it")
	}
}
