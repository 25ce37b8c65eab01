package server

import (
	"context"
	"fmt"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/store"
)

// A store written before ADR-0037 keeps every version of every file whole, as one written since
// keeps the versions an integrate makes and those an import sent whole. KeepStoredBlobsAsDeltas
// is its migration in place: it walks each repository's mainline history, and keeps each
// version a commit replaced as git's delta against the version that replaced it, as git's own
// repack does (the newer version whole, the older a delta against it), the pairs a whole
// clone's pack proposes as its own deltas (gitstore.NewerVersions). A walk that stops (the
// server stopped) is walked again at the next start, and what it kept stays kept.

// deltaPairsPerRead bounds the versions one read of contents asks for: each may be up to the
// size of a blob kept whole in a row (4 MiB).
const deltaPairsPerRead = 16

// deltaPairsPerBatch is how many versions one look at their rows asks about.
const deltaPairsPerBatch = 256

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

// keepRepositoryBlobsAsDeltas offers the versions r's mainline replaced since the head the
// last walk started from (or in its whole history), newest first: a version is then made a
// delta before the older one against it, which would keep it whole (ReplaceWithDeltas).
func (s *Server) keepRepositoryBlobsAsDeltas(ctx context.Context, r store.Repository) (int, error) {
	head, err := store.ParseGitID(r.MainlineCommit)
	if err != nil || head.IsZero() {
		return 0, nil // a repository without a commit has nothing to walk
	}
	walked, err := s.store.BlobDeltaWalk(ctx, r.Name)
	if err != nil || walked == head {
		return 0, err
	}
	started := time.Now()
	stops := make(map[plumbing.Hash]bool, len(r.Shallow))
	for _, id := range r.Shallow {
		stops[id] = true
	}
	pairs, err := gitstore.NewerVersions(ctx, newGitObjects(ctx, s.store, s.log), head, walked, stops)
	if err != nil {
		return 0, fmt.Errorf("walk the history: %w", err)
	}
	var (
		kept     int
		reported = time.Now()
		offered  = map[plumbing.Hash]bool{}
	)
	for start := 0; start < len(pairs); start += deltaPairsPerBatch {
		n, err := s.offerDeltas(ctx, pairs[start:min(len(pairs), start+deltaPairsPerBatch)], offered)
		kept += n
		if err != nil {
			return kept, err
		}
		if time.Since(reported) >= 10*time.Second {
			reported = time.Now()
			s.log.Info("keeping stored blobs as deltas", "repository", r.Name, "versions", min(len(pairs), start+deltaPairsPerBatch), "of", len(pairs), "rows", kept)
		}
	}
	if err := s.store.RecordBlobDeltaWalk(ctx, r.Name, head); err != nil {
		return kept, err
	}
	if kept > 0 {
		s.log.Info("kept stored blobs as deltas", "repository", r.Name, "versions", len(pairs), "rows", kept, "took", time.Since(started).Round(time.Millisecond))
	}
	return kept, nil
}

// offerDeltas makes the delta of each old version against its new one, and offers those worth
// keeping (at most a quarter of the version) to the store. A version already offered, kept as
// a delta, or stored in parts is not read.
func (s *Server) offerDeltas(ctx context.Context, pairs []gitstore.VersionPair, offered map[plumbing.Hash]bool) (int, error) {
	var ids []plumbing.Hash
	for _, p := range pairs {
		ids = append(ids, p.Old, p.New)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	depths, err := s.store.BlobDepths(ctx, ids)
	if err != nil {
		return 0, err
	}
	var todo []gitstore.VersionPair
	for _, p := range pairs {
		oldDepth, oldHeld := depths[p.Old]
		newDepth, newHeld := depths[p.New]
		if offered[p.Old] || !oldHeld || oldDepth != 0 || !newHeld || newDepth >= store.MaxBlobDeltaDepth {
			continue
		}
		offered[p.Old] = true
		todo = append(todo, p)
	}
	kept := 0
	for start := 0; start < len(todo); start += deltaPairsPerRead {
		group := todo[start:min(len(todo), start+deltaPairsPerRead)]
		var read []plumbing.Hash
		for _, p := range group {
			read = append(read, p.Old, p.New)
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
			oldContent, newContent := content[p.Old], content[p.New]
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
			rewrites = append(rewrites, store.BlobRewrite{Blob: p.Old, Base: p.New, Len: len(delta), Deflated: deflated})
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
