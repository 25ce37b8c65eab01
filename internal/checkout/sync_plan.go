package checkout

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/ag-coord/ag/client"
	"github.com/ag-coord/ag/internal/repo"
)

// syncPlan is what a sync will do. planSync decides it from the files alone, so that a sync
// refused for conflicts has touched neither the disk nor the network; readKept and mergeTexts
// then add what needs contents, and applySync carries it out.
type syncPlan struct {
	base, target map[string]treeFile // the base revision's files and the revision synced to
	whole        bool                // base and target are every file, not those filesSince named
	local        map[string]Edit     // the local edits, by path

	writes        []string          // files and links written, from the revision or from contents
	deletes       []string          // removed before any write
	submoduleDirs []string          // directories made for the revision's submodules
	modes         map[string]string // the mode each write gives its path
	drop          map[string]bool   // conflict records that go
	merges        []plannedMerge    // files both sides changed, both texts: for mergeTexts
	kept          map[string]string // files in conflict whose local content from before the merge comes back (--ours): the digest it is kept under

	// Known before fetching: merged contents and restored local contents.
	contents     map[string][]byte
	newConflicts map[string]conflictRecord // files written between conflict markers
	oursContent  map[string][]byte         // their local contents, kept for --ours

	updated, deleted, merged, keptEdits []string
	conflicts                           []SyncConflict
}

// plannedMerge is a file both sides changed whose modes merge to mode.
type plannedMerge struct {
	path, mode string
}

// planSync decides a sync from the base revision's files, the target revision's, the local
// edits, the files in conflict and opts' --ours and --theirs, touching neither disk nor network.
func planSync(base, target map[string]treeFile, edits []Edit, records map[string]conflictRecord, opts SyncOptions) *syncPlan {
	p := &syncPlan{base: base, target: target, local: map[string]Edit{},
		modes: map[string]string{}, drop: map[string]bool{}, kept: map[string]string{},
		contents: map[string][]byte{}, newConflicts: map[string]conflictRecord{}, oursContent: map[string][]byte{}}
	for _, e := range edits {
		p.local[e.Path] = e
	}
	paths := map[string]bool{}
	for path := range target {
		paths[path] = true
	}
	for path := range base {
		paths[path] = true
	}
	for path := range p.local {
		paths[path] = true
	}
	for path := range records {
		paths[path] = true
	}
	for _, path := range sortedKeys(paths) {
		p.consider(path, records, opts)
	}
	return p
}

// consider decides what becomes of one path.
func (p *syncPlan) consider(path string, records map[string]conflictRecord, opts SyncOptions) {
	want, inTarget := p.target[path]
	base, inBase := p.base[path]
	e, edited := p.local[path]
	upstream := inTarget != inBase || want != base
	if rec, ok := records[path]; ok {
		if !edited {
			p.drop[path] = true
		} else if UnderAny(path, opts.Ours) && !upstream {
			// Back to the local content from before the merge that wrote the markers.
			p.kept[path] = rec.Ours
			p.writes = append(p.writes, path)
			p.modes[path] = e.Mode
			p.keptEdits = append(p.keptEdits, path)
			p.drop[path] = true
			return
		}
	}
	switch {
	case UnderAny(path, opts.Theirs):
		p.drop[path] = true
		if edited || upstream {
			p.take(path)
		}
	case !upstream:
		// Unchanged in the revision: a local edit stays as it is.
	case !edited, !inTarget && e.Kind == "deleted":
		// Not edited, or deleted as the revision deletes it: taking it clobbers nothing.
		p.take(path)
	case inTarget && e.Kind != "deleted" && e.digest == want.digest && e.Mode == want.Mode:
		// Edited to what the revision has (an integrate's own edit, synced after it landed):
		// the file is the revision's already. Left as it is, it is neither fetched nor written,
		// nor, should it have changed since the scan, written over.
		p.updated = append(p.updated, path)
	case UnderAny(path, opts.Ours):
		p.drop[path] = true
		p.keptEdits = append(p.keptEdits, path)
	case e.Kind == "deleted":
		p.conflict(path, "deleted locally, changed in the mainline")
	case !inTarget:
		p.conflict(path, "changed locally, deleted in the mainline")
	default:
		if reason := unmergeable(base, inBase, e.Mode, want); reason != "" {
			p.conflict(path, reason)
			return
		}
		mode, ok := mergeModes(base.Mode, e.Mode, want.Mode)
		if !ok {
			p.conflict(path, fmt.Sprintf("the mode changed on both sides: %s here, %s in the mainline", e.Mode, want.Mode))
			return
		}
		p.merges = append(p.merges, plannedMerge{path: path, mode: mode})
	}
}

// take gives path the revision's version, whatever is there now.
func (p *syncPlan) take(path string) {
	want, inTarget := p.target[path]
	_, inBase := p.base[path]
	e, edited := p.local[path]
	there := (edited && e.Kind != "deleted") || (!edited && inBase)
	if there && (!inTarget || want.Gitlink()) {
		// What is there goes: the revision has nothing there, or a submodule's directory.
		p.deletes = append(p.deletes, path)
	}
	switch {
	case inTarget && want.Gitlink():
		p.submoduleDirs = append(p.submoduleDirs, path)
		p.updated = append(p.updated, path)
	case inTarget:
		p.writes = append(p.writes, path)
		p.modes[path] = want.Mode
		p.updated = append(p.updated, path)
	case there:
		p.deleted = append(p.deleted, path)
	}
}

func (p *syncPlan) conflict(path, reason string) {
	p.conflicts = append(p.conflicts, SyncConflict{Path: path, Reason: reason})
}

// readKept reads the local contents from before a merge that --ours brings back, in path order.
func (p *syncPlan) readKept(root *os.Root) error {
	paths := make([]string, 0, len(p.kept))
	for path := range p.kept {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	for _, path := range paths {
		content, err := root.ReadFile(filepath.FromSlash(oursPath(p.kept[path])))
		if err != nil {
			return fmt.Errorf("%s: the local content from before the merge is gone from %s: %w", path, conflictsDir, err)
		}
		p.contents[path] = content
	}
	return nil
}

// mergeTexts merges three ways, line by line, the files both sides changed: a clean merge, or
// one with conflicts written between markers (merge), becomes a write; the rest are conflicts.
func (p *syncPlan) mergeTexts(ctx context.Context, c *client.Client, reader *checkoutReader, merge bool) error {
	for _, m := range p.merges {
		base, inBase := p.base[m.path]
		want, e := p.target[m.path], p.local[m.path]
		ours, err := reader.readFile(m.path)
		if err != nil {
			return err
		}
		var merged []byte
		n := 0
		switch {
		case e.digest == want.digest:
			merged = ours
		case inBase && want.digest == base.digest:
			// Only the mode changed in the mainline.
			merged = ours
		default:
			theirs, err := c.Blob(ctx, want.digest)
			if err != nil {
				return fmt.Errorf("fetch %s: %w", m.path, err)
			}
			if inBase && e.digest == base.digest {
				// Only the mode changed here.
				merged = theirs
				break
			}
			var baseContent []byte
			if inBase {
				if baseContent, err = c.Blob(ctx, base.digest); err != nil {
					return fmt.Errorf("fetch the base of %s: %w", m.path, err)
				}
			}
			if isBinary(baseContent) || isBinary(ours) || isBinary(theirs) {
				p.conflict(m.path, "a binary file changed on both sides")
				continue
			}
			merged, n = merge3(baseContent, ours, theirs)
		}
		switch {
		case n == 0:
			p.merged = append(p.merged, m.path)
		case merge:
			p.conflicts = append(p.conflicts, SyncConflict{Path: m.path, Reason: fmt.Sprintf("%d conflicting changes", n), Markers: true})
			p.newConflicts[m.path] = conflictRecord{Ours: repo.Digest(ours)}
			p.oursContent[m.path] = ours
		default:
			p.conflict(m.path, fmt.Sprintf("%d conflicting changes", n))
			continue
		}
		p.contents[m.path] = merged
		p.writes = append(p.writes, m.path)
		p.modes[m.path] = m.mode
		p.drop[m.path] = true
	}
	return nil
}

// report puts what the sync does, or would do, into res, in path order.
func (p *syncPlan) report(res *SyncResult) {
	res.Updated = append(res.Updated, p.updated...)
	res.Deleted = append(res.Deleted, p.deleted...)
	res.Merged = append(res.Merged, p.merged...)
	res.Kept = append(res.Kept, p.keptEdits...)
	res.Conflicts = append(res.Conflicts, p.conflicts...)
	sort.Slice(res.Conflicts, func(i, j int) bool { return res.Conflicts[i].Path < res.Conflicts[j].Path })
	sort.Strings(res.Merged)
	sort.Strings(res.Updated)
}

// sortChanges puts the writes and deletes in path order, parents before what is under them.
func (p *syncPlan) sortChanges() {
	sort.Strings(p.writes)
	sort.Strings(p.deletes)
}

// deleting answers the deletes as a set.
func (p *syncPlan) deleting() map[string]bool {
	out := make(map[string]bool, len(p.deletes))
	for _, path := range p.deletes {
		out[path] = true
	}
	return out
}
