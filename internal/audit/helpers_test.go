package audit_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/storetest"
)

// memLog is a store's part of the audit log held in memory: the sealed events, the tree's
// stored hashes, the head and the checkpoints, updated from what a seal answers as a store would.
type memLog struct {
	events      []audit.Event
	hashes      map[int64][]byte
	head        audit.Head
	checkpoints []audit.StoredCheckpoint
	reads       int // calls of the hashes reader during the last seal
}

func newMemLog() *memLog { return &memLog{hashes: map[int64][]byte{}} }

func (l *memLog) readHashes(indexes []int64) ([][]byte, error) {
	l.reads++
	out := make([][]byte, len(indexes))
	for i, x := range indexes {
		h, ok := l.hashes[x]
		if !ok {
			return nil, fmt.Errorf("tree hash %d not stored", x)
		}
		out[i] = h
	}
	return out, nil
}

// seal seals pending with seal and stores the result.
func (l *memLog) seal(t testing.TB, seal func(audit.Head, []audit.Event, func([]int64) ([][]byte, error)) (audit.Seal, error), pending []audit.Event) audit.Seal {
	t.Helper()
	l.reads = 0
	s, err := seal(l.head, pending, l.readHashes)
	if err != nil {
		t.Fatalf("seal %d events after %d: %v", len(pending), l.head.Size, err)
	}
	for idx, h := range storetest.SealTreeHashes(l.head, s) {
		if _, ok := l.hashes[idx]; ok {
			t.Fatalf("seal rewrites tree hash %d", idx)
		}
		l.hashes[idx] = h
	}
	l.events = append(l.events, storetest.SealedEvents(l.head, pending, s)...)
	l.head = s.Head
	l.checkpoints = append(l.checkpoints, s.Checkpoint)
	return s
}

var baseTime = time.Date(2026, 11, 30, 18, 0, 0, 123456000, time.UTC)

// pendingEvents answers n unsealed events, numbered from first, of the kinds the store writes.
func pendingEvents(first, n int) []audit.Event {
	out := make([]audit.Event, n)
	for i := range out {
		k := first + i
		e := audit.Event{ID: int64(k), Time: baseTime.Add(time.Duration(k) * 1500 * time.Microsecond)}
		var details map[string]any
		switch k % 4 {
		case 0:
			e.Principal, e.Action, e.Subject = "alice", "job.enqueued", fmt.Sprintf("job/job_%d", k)
			details = map[string]any{"kind": "build", "priority": k % 7, "max_attempts": 5}
		case 1:
			e.Principal, e.Holder, e.Action, e.Subject = "ci", "ci|w1", "job.claimed", fmt.Sprintf("job/job_%d", k-1)
			details = map[string]any{"claim": 1, "lease_expires_at": baseTime.Add(time.Minute).Format(time.RFC3339Nano)}
		case 2:
			e.Principal, e.Action, e.Subject = store.SystemPrincipal, "change.requeued", fmt.Sprintf("change/ch_%d", k)
		case 3:
			e.Principal, e.Holder, e.Action, e.Subject = "bob", "bob|agent-2", "lease.granted", fmt.Sprintf("lease/l_%d", k)
			details = map[string]any{"repository": "shop", "paths": []string{"src/<a>&b", "docs/ü"}, "token": k, "nested": map[string]any{"z": 1.5, "a": nil}}
		}
		if details != nil {
			b, err := json.Marshal(details)
			if err != nil {
				panic(err)
			}
			e.Details = b
		}
		out[i] = e
	}
	return out
}

// newSigner answers a signer with a fresh key of origin "ag-test".
func newSigner(t testing.TB) *audit.Signer {
	t.Helper()
	s, err := audit.LoadOrCreateKey(filepath.Join(t.TempDir(), "audit.key"), "ag-test")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sealedLog answers a log of n events sealed by s in batches of the given sizes (the last
// repeated), and the log's state.
func sealedLog(t testing.TB, s *audit.Signer, n int, batches ...int) *memLog {
	t.Helper()
	l := newMemLog()
	seal := s.SealFunc(func() time.Time { return baseTime })
	for i := 0; len(l.events) < n; i++ {
		b := batches[min(i, len(batches)-1)]
		l.seal(t, seal, pendingEvents(len(l.events), min(b, n-len(l.events))))
	}
	return l
}

// clone answers a deep copy of events, to tamper with.
func clone(events []audit.Event) []audit.Event {
	out := make([]audit.Event, len(events))
	for i, e := range events {
		e.Details = append([]byte(nil), e.Details...)
		e.PrevHash = append([]byte(nil), e.PrevHash...)
		e.Hash = append([]byte(nil), e.Hash...)
		out[i] = e
	}
	return out
}
