package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"

	"github.com/ag-coord/ag/internal/store"
)

// anchoredGit is memoryGit telling each stored tree's anchor, as the backends do.
type anchoredGit struct {
	*memoryGit
	anchors map[plumbing.Hash]plumbing.Hash
	err     error
}

func (a *anchoredGit) GitAnchors(_ context.Context, trees []plumbing.Hash) (map[plumbing.Hash]plumbing.Hash, error) {
	if a.err != nil {
		return nil, a.err
	}
	out := map[plumbing.Hash]plumbing.Hash{}
	for _, id := range trees {
		if anchor, ok := a.anchors[id]; ok {
			out[id] = anchor
		}
	}
	return out, nil
}

// wideTree answers the encoding of a tree of n files whose ids are made from salt, but the
// file at changed, whose id is made from other.
func wideTree(n int, salt string, changed int, other string) []byte {
	var b bytes.Buffer
	for i := range n {
		seed := salt
		if i == changed {
			seed = other
		}
		id := plumbing.ComputeHash(plumbing.BlobObject, []byte(fmt.Sprintf("%s %d", seed, i)))
		fmt.Fprintf(&b, "100644 file-%03d.txt\x00", i)
		b.Write(id[:])
	}
	return b.Bytes()
}

// takeTree answers what TakePending makes of the tree data when it replaced the stored tree
// old: its Delta, nil when kept whole.
func takeTree(t *testing.T, backend store.GitBackend, data []byte, old plumbing.Hash) store.GitObject {
	t.Helper()
	objs := store.NewGitObjects(context.Background(), backend)
	o := &plumbing.MemoryObject{}
	o.SetType(plumbing.TreeObject)
	_, _ = o.Write(data)
	id, err := objs.SetEncodedObject(o)
	if err != nil {
		t.Fatal(err)
	}
	objs.NoteReplaced(id, old)
	pending, err := objs.TakePending()
	if err != nil || len(pending) != 1 {
		t.Fatalf("TakePending: %v, %v", pending, err)
	}
	return pending[0]
}

// TestAReplacedTreeIsKeptAsADeltaAgainstItsAnchor ensures a tree that replaced a stored one is
// kept as a delta against that tree's anchor (the tree itself when whole, its anchor when a
// delta), which patches back to the tree; and that it is kept whole when it is small, when
// the delta would be more than a quarter of it, when what it replaced is not stored, and when
// the backend cannot tell anchors.
func TestAReplacedTreeIsKeptAsADeltaAgainstItsAnchor(t *testing.T) {
	t.Parallel()
	m := &memoryGit{objects: map[plumbing.Hash]store.GitObject{}, blobs: map[string][]byte{}}
	anchor := wideTree(40, "a", -1, "")
	anchorID := plumbing.ComputeHash(plumbing.TreeObject, anchor)
	second := wideTree(40, "a", 3, "b")
	secondID := plumbing.ComputeHash(plumbing.TreeObject, second)
	m.objects[anchorID] = store.GitObject{ID: anchorID, Type: plumbing.TreeObject, Data: anchor}
	m.objects[secondID] = store.GitObject{ID: secondID, Type: plumbing.TreeObject, Data: second}
	backend := &anchoredGit{memoryGit: m, anchors: map[plumbing.Hash]plumbing.Hash{anchorID: anchorID, secondID: anchorID}}
	read := func(id plumbing.Hash) ([]byte, error) { return m.objects[id].Data, nil }

	third := wideTree(40, "a", 5, "c")
	thirdID := plumbing.ComputeHash(plumbing.TreeObject, third)
	for what, old := range map[string]plumbing.Hash{"a tree kept whole": anchorID, "a tree kept as a delta": secondID} {
		got := takeTree(t, backend, third, old)
		if from, ok := store.DeltaAnchor(got.Delta); !ok || from != anchorID {
			t.Fatalf("replacing %s: kept against %v (%d bytes), want a delta against the anchor", what, from, len(got.Delta))
		}
		if len(got.Delta) > len(third)/4 {
			t.Fatalf("replacing %s: a delta of %d bytes for a tree of %d", what, len(got.Delta), len(third))
		}
		patched, err := store.PatchStoredDelta(thirdID, got.Delta, read)
		if err != nil || !bytes.Equal(patched, third) {
			t.Fatalf("replacing %s: the delta patches to %d bytes, %v; want the tree", what, len(patched), err)
		}
	}

	// Kept whole: a tree of a few entries, one that differs from its anchor in most entries,
	// one that replaced what is not stored, and any when the backend cannot tell anchors.
	small := wideTree(6, "a", 1, "b")
	smallAnchor := wideTree(6, "a", -1, "")
	smallID := plumbing.ComputeHash(plumbing.TreeObject, smallAnchor)
	m.objects[smallID] = store.GitObject{ID: smallID, Type: plumbing.TreeObject, Data: smallAnchor}
	backend.anchors[smallID] = smallID
	if got := takeTree(t, backend, small, smallID); got.Delta != nil {
		t.Errorf("a tree of %d bytes was kept as a delta", len(small))
	}
	var far []byte
	for i := range 40 {
		if i%3 != 0 {
			far = append(far, wideTree(1, fmt.Sprintf("x%d", i), 0, "")...)
		} else {
			far = append(far, anchor[i*(len(anchor)/40):(i+1)*(len(anchor)/40)]...)
		}
	}
	if got := takeTree(t, backend, far, anchorID); got.Delta != nil {
		t.Errorf("a tree two thirds of whose entries differ from its anchor was kept as a delta of %d bytes", len(got.Delta))
	}
	if got := takeTree(t, backend, third, plumbing.ComputeHash(plumbing.TreeObject, []byte("not stored"))); got.Delta != nil {
		t.Errorf("a tree replacing one not stored was kept as a delta")
	}
	if got := takeTree(t, m, third, anchorID); got.Delta != nil {
		t.Errorf("a tree was kept as a delta by a backend that tells no anchors")
	}
	backend.err = errors.New("no anchors today")
	if got := takeTree(t, backend, third, anchorID); got.Delta != nil {
		t.Errorf("a tree was kept as a delta when the anchors could not be read")
	}
}

// TestADeltaReadsBackOnlyAsTheTreeItNames ensures a stored delta is patched with its anchor
// read once per batch, and that a delta too short to name an anchor, one whose anchor cannot
// be read, and one that patches to another tree than its id are errors.
func TestADeltaReadsBackOnlyAsTheTreeItNames(t *testing.T) {
	t.Parallel()
	anchor := wideTree(40, "a", -1, "")
	anchorID := plumbing.ComputeHash(plumbing.TreeObject, anchor)
	var objs []store.GitObject
	var want [][]byte
	for i := range 3 {
		tree := wideTree(40, "a", i, "b")
		want = append(want, tree)
		id := plumbing.ComputeHash(plumbing.TreeObject, tree)
		objs = append(objs, store.GitObject{ID: id, Type: plumbing.TreeObject, Data: append(anchorID[:len(anchorID):len(anchorID)], packfile.DiffDelta(anchor, tree)...)})
	}
	reads := 0
	read := func(id plumbing.Hash) ([]byte, error) {
		reads++
		if id != anchorID {
			return nil, store.ErrNotFound
		}
		return anchor, nil
	}
	if err := store.PatchDeltas(objs, []int{0, 1, 2}, read); err != nil {
		t.Fatalf("PatchDeltas: %v", err)
	}
	for i, o := range objs {
		if !bytes.Equal(o.Data, want[i]) {
			t.Errorf("delta %d patched to %d bytes, not its tree", i, len(o.Data))
		}
	}
	if reads != 1 {
		t.Errorf("three deltas of one anchor read it %d times, want once", reads)
	}

	tree := want[0]
	id := plumbing.ComputeHash(plumbing.TreeObject, tree)
	delta := append(anchorID[:len(anchorID):len(anchorID)], packfile.DiffDelta(anchor, tree)...)
	other := plumbing.ComputeHash(plumbing.TreeObject, want[1])
	missing := plumbing.ComputeHash(plumbing.TreeObject, []byte("missing"))
	readAny := func(plumbing.Hash) ([]byte, error) { return anchor, nil }
	if got, err := store.PatchStoredDelta(id, anchorID[:19], readAny); err == nil {
		t.Errorf("a delta too short to name an anchor patched to %d bytes without an error", len(got))
	}
	for what, c := range map[string]struct {
		id   plumbing.Hash
		data []byte
	}{
		"an anchor not stored":     {id, append(missing[:len(missing):len(missing)], delta[20:]...)},
		"another tree than its id": {other, delta},
		"a damaged delta":          {id, append(bytes.Clone(delta[:20]), 0xff, 0xff, 0xff)},
	} {
		if got, err := store.PatchStoredDelta(c.id, c.data, read); err == nil {
			t.Errorf("%s: patched to %d bytes without an error", what, len(got))
		}
	}
	if _, ok := store.DeltaAnchor(anchorID[:19]); ok {
		t.Error("19 bytes named an anchor")
	}
}
