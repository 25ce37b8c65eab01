package postgres

import (
	"container/list"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/ag-coord/ag/internal/repo"
)

// trees keeps recently used trees decoded, by digest. A digest names one tree whatever the
// database, so one cache serves every store of the process. Integrate reads the mainline's and
// the base revision's trees under the repository's lock: from here, it neither transfers nor
// decodes them again, and the tree it makes is the next one's mainline.
var trees = newTreeCache(32, 1<<18)

// treeCache is a least-recently-used cache of decoded trees, bounded in trees and in entries.
type treeCache struct {
	mu         sync.Mutex
	maxTrees   int
	maxEntries int
	entries    int
	order      *list.List // of *cachedTree, most recently used first
	byDigest   map[string]*list.Element
}

type cachedTree struct {
	digest string
	tree   repo.Tree
}

func newTreeCache(maxTrees, maxEntries int) *treeCache {
	return &treeCache{maxTrees: maxTrees, maxEntries: maxEntries, order: list.New(), byDigest: map[string]*list.Element{}}
}

// get answers a copy of the tree with this digest, if it is cached.
func (c *treeCache) get(digest string) (repo.Tree, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byDigest[digest]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return slices.Clone(e.Value.(*cachedTree).tree), true
}

// put caches a copy of t under digest.
func (c *treeCache) put(digest string, t repo.Tree) {
	if len(t) > c.maxEntries {
		return
	}
	t = slices.Clone(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byDigest[digest]; ok {
		c.order.MoveToFront(e)
		return
	}
	c.byDigest[digest] = c.order.PushFront(&cachedTree{digest: digest, tree: t})
	c.entries += len(t)
	for c.order.Len() > c.maxTrees || c.entries > c.maxEntries {
		last := c.order.Back()
		ct := last.Value.(*cachedTree)
		c.order.Remove(last)
		delete(c.byDigest, ct.digest)
		c.entries -= len(ct.tree)
	}
}

// digests answers the digests of the cached trees.
func (c *treeCache) digests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.byDigest))
	for d := range c.byDigest {
		out = append(out, d)
	}
	return out
}

// tree answers the tree with digest: decoded from enc when it is given, else from the cache,
// else read with qr.
func tree(ctx context.Context, qr querier, digest string, enc []byte) (repo.Tree, error) {
	if enc == nil {
		if t, ok := trees.get(digest); ok {
			return t, nil
		}
		if err := qr.QueryRow(ctx, `SELECT encoding FROM trees WHERE digest = $1`, digest).Scan(&enc); err != nil {
			return nil, mapErr("tree "+digest, err)
		}
	}
	t, err := repo.DecodeTree(enc)
	if err != nil {
		return nil, fmt.Errorf("postgres: tree %s: %w", digest, err)
	}
	trees.put(digest, t)
	return t, nil
}
