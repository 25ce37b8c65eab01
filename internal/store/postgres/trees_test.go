package postgres

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

func treeOfSize(n int) repo.Tree {
	t := make(repo.Tree, n)
	for i := range t {
		t[i] = repo.Entry{Path: fmt.Sprintf("f%04d", i), Digest: repo.Digest([]byte{byte(i)}), Size: 1}
	}
	return t
}

// TestTreeCache ensures that the cache of decoded trees answers copies, forgets the least
// recently used trees first, and keeps within its bounds in trees and in entries.
func TestTreeCache(t *testing.T) {
	c := newTreeCache(3, 10)
	a, b, d := treeOfSize(2), treeOfSize(3), treeOfSize(4)
	c.put("a", a)
	c.put("b", b)
	c.put("d", d)

	got, ok := c.get("a")
	if !ok || !slices.Equal(got, a) {
		t.Fatalf("get(a) = %v, %v; want the tree put", got, ok)
	}
	got[0].Path = "changed"
	if again, _ := c.get("a"); again[0].Path != a[0].Path {
		t.Fatalf("a change to a tree that get answered reached the cache")
	}

	// b is now the least recently used: a fourth tree evicts it.
	c.put("e", treeOfSize(1))
	if _, ok := c.get("b"); ok {
		t.Errorf("b is still cached after a fourth tree, want it evicted (3 trees at most)")
	}
	for _, k := range []string{"a", "d", "e"} {
		if _, ok := c.get(k); !ok {
			t.Errorf("%s was evicted, want it cached", k)
		}
	}
	// 2 + 4 + 1 entries; 5 more are over 10: the least recently used go until it fits.
	c.put("f", treeOfSize(5))
	if c.entries > 10 {
		t.Errorf("the cache holds %d entries, more than its bound 10", c.entries)
	}
	if _, ok := c.get("f"); !ok {
		t.Errorf("f, the tree just put, is not cached")
	}
	// A tree larger than the bound is not cached at all.
	c.put("big", treeOfSize(11))
	if _, ok := c.get("big"); ok {
		t.Errorf("a tree of 11 entries is cached, over the bound of 10")
	}
	if got := len(c.digests()); got != c.order.Len() || got > 3 {
		t.Errorf("digests() answers %d digests for %d cached trees", got, c.order.Len())
	}
}

// TestTreeReadsWhatTheCacheLacks ensures that a tree whose encoding a query left out (as when
// it was cached then) is read from the database when the cache no longer has it.
func TestTreeReadsWhatTheCacheLacks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := Open(ctx, pgtest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	want := treeOfSize(7)
	want[len(want)-1].Path = "only-" + store.NewID("here") // a digest no other test makes
	enc := want.Encode()
	digest := repo.Digest(enc)
	if _, err := db.pool.Exec(ctx, `INSERT INTO trees (digest, encoding) VALUES ($1, $2)`, digest, enc); err != nil {
		t.Fatal(err)
	}
	got, err := tree(ctx, db.pool, digest, nil)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("tree(%s) = %v, %v; want %v", digest, got, err, want)
	}
	if cached, ok := trees.get(digest); !ok || !slices.Equal(cached, want) {
		t.Fatalf("the tree read is not cached")
	}
	if _, err := tree(ctx, db.pool, "sha256:none", nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("tree of an unknown digest: err = %v, want %v", err, store.ErrNotFound)
	}
}
