package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/store"
)

// A store written before ADR-0037 keeps every version of every file whole, as one written since
// keeps the versions an integrate makes and those an import sent whole. KeepStoredBlobsAsDeltas
// is its migration in place: it walks each repository's mainline from its head down, and keeps
// each version a commit replaced as git's delta against the version that replaced it, as git's
// own repack does (the newer version whole, the older a delta against it). A walk that stops
// (the server stopped) is walked again at the next start, and what it kept stays kept.

// deltaPairsPerRead bounds the versions one read of contents asks for: each may be up to the
// size of a blob kept whole in a row (4 MiB).
const deltaPairsPerRead = 16

// blobPair is a file's version a commit replaced, and the version that replaced it.
type blobPair struct{ old, new plumbing.Hash }

// KeepStoredBlobsAsDeltas offers the blobs of every repository's mainline history not walked
// yet to be kept as deltas (store.ReplaceWithDeltas), and answers how many it rewrote. ag serve
// runs it at its start, after compressing what was stored before.
func (s *Server) KeepStoredBlobsAsDeltas(ctx context.Context) (int, error) {
	total := 0
	token := ""
	for {
		repos, next, err := s.store.ListRepositories(ctx, store.ListRepositoriesParams{Limit: 100, PageToken: token})
		if err != nil {
			return total, err
		}
		for _, r := range repos {
			n, err := s.keepRepositoryBlobsAsDeltas(ctx, r)
			total += n
			if err != nil {
				return total, fmt.Errorf("repository %s: %w", r.Name, err)
			}
		}
		if next == "" {
			return total, nil
		}
		token = next
	}
}

// keepRepositoryBlobsAsDeltas walks r's mainline from its head down to where the last walk
// started, or its root, offering each pair of versions it meets.
func (s *Server) keepRepositoryBlobsAsDeltas(ctx context.Context, r store.Repository) (int, error) {
	head, err := store.ParseGitID(r.MainlineCommit)
	if err != nil || head.IsZero() {
		return 0, nil // a repository without a commit has nothing to walk
	}
	walked, err := s.store.BlobDeltaWalk(ctx, r.Name)
	if err != nil || walked == head {
		return 0, err
	}
	objs := newGitObjects(ctx, s.store, s.log)
	var (
		pairs    []blobPair
		kept     int
		commits  int
		started  = time.Now()
		reported = started
		offered  = map[plumbing.Hash]bool{}
	)
	for id := head; !id.IsZero() && id != walked; {
		if err := ctx.Err(); err != nil {
			return kept, err
		}
		c, err := object.GetCommit(objs, id)
		if err != nil {
			return kept, fmt.Errorf("read commit %s: %w", id, err)
		}
		commits++
		parent := plumbing.ZeroHash
		if len(c.ParentHashes) > 0 {
			parent = c.ParentHashes[0]
			p, err := object.GetCommit(objs, parent)
			if errors.Is(err, plumbing.ErrObjectNotFound) {
				break // where a shallow history stops
			}
			if err != nil {
				return kept, fmt.Errorf("read commit %s: %w", parent, err)
			}
			if err := changedBlobs(objs, p.TreeHash, c.TreeHash, &pairs); err != nil {
				return kept, err
			}
		}
		if len(pairs) >= 256 || parent.IsZero() {
			n, err := s.offerDeltas(ctx, pairs, offered)
			kept += n
			if err != nil {
				return kept, err
			}
			pairs = pairs[:0]
		}
		if time.Since(reported) >= 10*time.Second {
			reported = time.Now()
			s.log.Info("keeping stored blobs as deltas", "repository", r.Name, "commits", commits, "rows", kept)
		}
		id = parent
	}
	n, err := s.offerDeltas(ctx, pairs, offered)
	kept += n
	if err != nil {
		return kept, err
	}
	if err := s.store.RecordBlobDeltaWalk(ctx, r.Name, head); err != nil {
		return kept, err
	}
	if kept > 0 {
		s.log.Info("kept stored blobs as deltas", "repository", r.Name, "commits", commits, "rows", kept, "took", time.Since(started).Round(time.Millisecond))
	}
	return kept, nil
}

// changedBlobs appends to pairs the files whose version differs between the trees from and to,
// at the same path, each with its old version and its new.
func changedBlobs(s storer.EncodedObjectStorer, from, to plumbing.Hash, pairs *[]blobPair) error {
	if from == to {
		return nil
	}
	ft, err := object.GetTree(s, from)
	if err != nil {
		return fmt.Errorf("read tree %s: %w", from, err)
	}
	tt, err := object.GetTree(s, to)
	if err != nil {
		return fmt.Errorf("read tree %s: %w", to, err)
	}
	old := make(map[string]object.TreeEntry, len(ft.Entries))
	for _, e := range ft.Entries {
		old[e.Name] = e
	}
	for _, e := range tt.Entries {
		o, ok := old[e.Name]
		if !ok || o.Hash == e.Hash {
			continue
		}
		switch {
		case o.Mode == filemode.Dir && e.Mode == filemode.Dir:
			if err := changedBlobs(s, o.Hash, e.Hash, pairs); err != nil {
				return err
			}
		case o.Mode.IsFile() && e.Mode.IsFile():
			*pairs = append(*pairs, blobPair{old: o.Hash, new: e.Hash})
		}
	}
	return nil
}

// offerDeltas makes the delta of each old version against its new one, and offers those worth
// keeping (at most a quarter of the version) to the store. A version already offered, kept as
// a delta, or stored in parts is not read.
func (s *Server) offerDeltas(ctx context.Context, pairs []blobPair, offered map[plumbing.Hash]bool) (int, error) {
	var ids []plumbing.Hash
	for _, p := range pairs {
		ids = append(ids, p.old, p.new)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	depths, err := s.store.BlobDepths(ctx, ids)
	if err != nil {
		return 0, err
	}
	var todo []blobPair
	for _, p := range pairs {
		oldDepth, oldHeld := depths[p.old]
		newDepth, newHeld := depths[p.new]
		if offered[p.old] || !oldHeld || oldDepth != 0 || !newHeld || newDepth >= store.MaxBlobDeltaDepth {
			continue
		}
		offered[p.old] = true
		todo = append(todo, p)
	}
	kept := 0
	for start := 0; start < len(todo); start += deltaPairsPerRead {
		group := todo[start:min(len(todo), start+deltaPairsPerRead)]
		var read []plumbing.Hash
		for _, p := range group {
			read = append(read, p.old, p.new)
		}
		objs, err := s.store.ReadGitObjects(ctx, read)
		if err != nil {
			return kept, err
		}
		content := make(map[plumbing.Hash][]byte, len(objs))
		for _, o := range objs {
			content[o.ID] = o.Data
		}
		var rewrites []store.BlobRewrite
		for _, p := range group {
			oldContent, newContent := content[p.old], content[p.new]
			if len(oldContent) < 64 || newContent == nil {
				continue
			}
			delta := packfile.DiffDelta(newContent, oldContent)
			if len(delta) > len(oldContent)/4 {
				continue
			}
			deflated, err := gitstore.Deflate(delta)
			if err != nil {
				return kept, err
			}
			rewrites = append(rewrites, store.BlobRewrite{Blob: p.old, Base: p.new, Len: len(delta), Deflated: deflated})
		}
		if len(rewrites) == 0 {
			continue
		}
		n, err := s.store.ReplaceWithDeltas(ctx, rewrites)
		kept += n
		if err != nil {
			return kept, err
		}
	}
	return kept, nil
}

// keepBlobsAsDeltas runs KeepStoredBlobsAsDeltas, logging how it ended.
func (s *Server) keepBlobsAsDeltas(ctx context.Context) {
	if _, err := s.KeepStoredBlobsAsDeltas(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("keep stored blobs as deltas: stopped; the next start goes on", "err", err)
	}
}
