package audit

import (
	"fmt"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// TestSealReaderAnswersTheTreesHashes ensures the reader a seal computes its tree with answers
// each index with the tree's hash there, never a zero hash: from the batch for what the batch
// computed, from the store for what came before (read once, then remembered), and an error for
// an index the batch has not computed yet.
func TestSealReaderAnswersTheTreesHashes(t *testing.T) {
	t.Parallel()
	const before, after = 5, 7
	tree := &memTree{}
	for i := range after {
		if err := tree.add([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	base, end := tlog.StoredHashCount(before), tlog.StoredHashCount(after)
	var batch []byte
	for _, h := range tree.hashes[base:end] {
		batch = append(batch, h[:]...)
	}
	var reads [][]int64
	r := &sealReader{base: base, batch: batch, stored: map[int64]tlog.Hash{}, read: func(indexes []int64) ([][]byte, error) {
		reads = append(reads, indexes)
		out := make([][]byte, len(indexes))
		for i, x := range indexes {
			out[i] = tree.hashes[x][:]
		}
		return out, nil
	}}

	indexes := []int64{0, base, 2, end - 1, base - 1}
	got, err := r.ReadHashes(indexes)
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range indexes {
		if got[i] != tree.hashes[x] {
			t.Errorf("ReadHashes: index %d answers %v, want %v", x, got[i], tree.hashes[x])
		}
	}
	if len(reads) != 1 || len(reads[0]) != 3 {
		t.Errorf("the store was asked for %v, want the three indexes before the batch, once", reads)
	}
	for _, x := range []int64{1, 2, base + 1} {
		h, err := r.hash(x)
		if err != nil || h != tree.hashes[x] {
			t.Errorf("hash(%d) = %v, %v; want %v", x, h, err, tree.hashes[x])
		}
	}
	if len(reads) != 2 || len(reads[1]) != 1 || reads[1][0] != 1 {
		t.Errorf("the store was asked for %v, want index 1 alone the second time", reads)
	}
	want := fmt.Sprintf("tree hash %d is not computed yet (%d known)", end, end)
	if _, err := r.ReadHashes([]int64{end}); err == nil || err.Error() != want {
		t.Errorf("ReadHashes of an index the batch has not computed: %v, want %q", err, want)
	}
	if h, err := r.hash(end); err == nil {
		t.Errorf("hash of an index the batch has not computed: %v", h)
	}
	// Before the batch computed anything, its first index is not the store's either.
	empty := &sealReader{base: base, stored: map[int64]tlog.Hash{}, read: r.read}
	if _, err := empty.ReadHashes([]int64{base}); err == nil || !strings.Contains(err.Error(), "not computed yet") {
		t.Errorf("ReadHashes of the batch's first index before it is computed: %v", err)
	}
}

// TestMemTreeReadsOnlyItsHashes ensures the tree a verification builds answers the hashes it
// holds and refuses an index it does not hold, rather than reading past its ends.
func TestMemTreeReadsOnlyItsHashes(t *testing.T) {
	t.Parallel()
	tree := &memTree{}
	for i := range 3 {
		if err := tree.add([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	n := int64(len(tree.hashes))
	if got, err := tree.ReadHashes([]int64{0, n - 1}); err != nil || got[0] != tree.hashes[0] || got[1] != tree.hashes[n-1] {
		t.Errorf("ReadHashes(0, %d) = %v, %v", n-1, got, err)
	}
	for _, x := range []int64{-1, n} {
		if got, err := tree.ReadHashes([]int64{x}); err == nil {
			t.Errorf("ReadHashes(%d) of a tree of %d hashes = %v", x, n, got)
		}
	}
}
