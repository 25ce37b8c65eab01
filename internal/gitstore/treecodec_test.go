package gitstore

import (
	"bytes"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// TestTreeCodecIsGoGits ensures the tree codec orders, encodes and decodes exactly as go-git
// does (whose ids git itself agrees with: uploadpack_test.go), on names where git's order is
// subtle: a directory "a" sorts as "a/", after "a.b" and "a-b" but before "a0".
func TestTreeCodecIsGoGits(t *testing.T) {
	t.Parallel()
	names := []string{"a", "a.b", "a-b", "a0", "b", "a b", "é", "A", "z.txt", "a~1"}
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		var entries []object.TreeEntry
		for i, n := range names {
			mode := filemode.Regular
			switch r.IntN(3) {
			case 0:
				mode = filemode.Dir
			case 1:
				mode = filemode.Executable
			}
			var id plumbing.Hash
			id[0], id[19] = byte(i), byte(round)
			entries = append(entries, object.TreeEntry{Name: n, Mode: mode, Hash: id})
		}
		r.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
		ours := slices.Clone(entries)
		SortTreeEntries(ours)
		theirs := slices.Clone(entries)
		sort.Sort(object.TreeEntrySorter(theirs))
		if !slices.Equal(ours, theirs) {
			t.Fatalf("round %d: our order %v, go-git's %v", round, ours, theirs)
		}
		o := &plumbing.MemoryObject{}
		if err := (&object.Tree{Entries: theirs}).Encode(o); err != nil {
			t.Fatal(err)
		}
		rd, _ := o.Reader()
		want, _ := io.ReadAll(rd)
		if got := EncodeTree(ours); !bytes.Equal(got, want) {
			t.Fatalf("round %d: EncodeTree = %q, go-git %q", round, got, want)
		}
		back, err := DecodeTree(want)
		if err != nil || !slices.Equal(back, theirs) {
			t.Fatalf("round %d: DecodeTree = %v, %v; want %v", round, back, err, theirs)
		}
	}
	for _, bad := range [][]byte{[]byte("100644"), []byte("100644 a\x00short"), []byte("x a\x00" + string(make([]byte, 20)))} {
		if _, err := DecodeTree(bad); err == nil {
			t.Errorf("DecodeTree(%q) took a malformed tree", bad)
		}
	}
}
