package server

import (
	"slices"
	"testing"
)

// TestBlobReadsBoundWhatIsInMemory: a GetBlobs of many large blobs (a reader's or an agent's
// call) reads them from the store a few at a time, never more than the bound together unless
// one blob alone is larger, and in the order asked.
func TestBlobReadsBoundWhatIsInMemory(t *testing.T) {
	t.Parallel()
	digests := []string{"a", "b", "c", "d", "e", "f"}
	sizes := map[string]uint64{"a": 3, "b": 4, "c": 10, "d": 1, "e": 1, "f": 6}
	got := blobReads(digests, sizes, 8)
	want := [][]string{{"a", "b"}, {"c"}, {"d", "e", "f"}}
	if !slices.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Fatalf("blobReads = %v, want %v", got, want)
	}
	for _, read := range got {
		var total uint64
		for _, d := range read {
			total += sizes[d]
		}
		if total > 8 && len(read) > 1 {
			t.Fatalf("read %v holds %d bytes, more than the bound of 8", read, total)
		}
	}
	if got := blobReads(nil, nil, 8); len(got) != 0 {
		t.Fatalf("blobReads of nothing = %v", got)
	}
}
