package server

import (
	"context"
	"fmt"
	"testing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/store"
)

// historyStore holds one repository whose one change was in many candidates, and many queued
// changes; it answers a listing of changes as a store does, at most p.Limit of them.
type historyStore struct {
	store.Store
	candidates int // of the change chg_1, oldest first
	queued     int
}

func (s *historyStore) GetRepository(context.Context, string) (store.Repository, error) {
	return store.Repository{Name: "web", Mainline: "rev_1"}, nil
}

func (s *historyStore) ListCandidates(_ context.Context, p store.ListCandidatesParams) ([]store.Candidate, error) {
	if p.ChangeID == "" {
		return nil, nil // no live candidate
	}
	var out []store.Candidate
	for i := range s.candidates {
		out = append(out, store.Candidate{ID: fmt.Sprintf("cand_%d", i+1), Repository: "web", State: store.CandidateRejected})
	}
	return out, nil
}

func (s *historyStore) ListChanges(_ context.Context, p store.ListChangesParams) ([]store.Change, string, error) {
	n := s.queued
	if p.Limit > 0 {
		n = min(n, p.Limit)
	}
	out := make([]store.Change, n)
	for i := range out {
		out[i] = store.Change{ID: fmt.Sprintf("chg_%d", i+2), Repository: "web", State: store.ChangeQueued}
	}
	return out, "", nil
}

// TestAnswersOfTheGateAreBounded holds SECURITY.md's bounds of what the gate answers, whatever
// the store holds: a change rebuilt again and again lists its newest 50 candidates, the last
// of them its candidate; a queue lists its first 1,000 waiting changes. Removing either bound
// makes the answer as long as what the store holds (60 candidates, 1,005 changes).
func TestAnswersOfTheGateAreBounded(t *testing.T) {
	t.Parallel()
	st := &historyStore{candidates: 60, queued: 1005}
	h := repoService{s: &Server{store: st}}
	ctx := t.Context()

	change := h.changeWithProgress(ctx, store.Change{ID: "chg_1", Repository: "web", State: store.ChangeRejected})
	if n := len(change.GetHistory()); n != 50 {
		t.Errorf("a change of 60 candidates lists %d, want the newest 50", n)
	} else if first, last := change.GetHistory()[0].GetId(), change.GetHistory()[49].GetId(); first != "cand_11" || last != "cand_60" {
		t.Errorf("the 50 candidates listed run from %s to %s, want cand_11 to cand_60", first, last)
	}
	if got := change.GetCandidate().GetId(); got != "cand_60" {
		t.Errorf("the change's candidate is %q, want the newest, cand_60", got)
	}
	few := &historyStore{candidates: 3}
	if n := len(repoService{s: &Server{store: few}}.changeWithProgress(ctx, store.Change{ID: "chg_1", Repository: "web"}).GetHistory()); n != 3 {
		t.Errorf("a change of 3 candidates lists %d", n)
	}

	queue, err := h.GetQueue(ctx, &agwpv1.GetQueueRequest{Repository: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(queue.GetWaiting()); n != 1000 {
		t.Errorf("a queue of 1,005 waiting changes lists %d, want the first 1,000", n)
	} else if first, last := queue.GetWaiting()[0], queue.GetWaiting()[999]; first.GetId() != "chg_2" || first.GetQueuePosition() != 0 || last.GetId() != "chg_1001" || last.GetQueuePosition() != 999 {
		t.Errorf("the waiting changes run from %s (at %d) to %s (at %d), want chg_2 at 0 to chg_1001 at 999",
			first.GetId(), first.GetQueuePosition(), last.GetId(), last.GetQueuePosition())
	}
}
