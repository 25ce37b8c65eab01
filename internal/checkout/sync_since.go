package checkout

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/repo"
)

// A sync asks the server for the revision as its difference from the checkout's base
// (GetTreeRequest.since): the server then reads only the trees along the changed paths, and the
// sync plans over the paths the difference, the local edits and the files in conflict name.
// Every other path is the same in the base and the revision and not edited here, so a plan over
// the whole tree would leave it as it is: a sync after a one-file integrate costs what changed,
// not what the checkout holds. A server from before since answers the whole tree, and the sync
// plans over it as before.

// filesSince answers the base's and the revision's files a sync plans over, from d, the
// server's answer to a GetTree since the base (readDifference): the files of the paths the
// difference, edits and the conflicts name, each base file read from the index by its path.
// Each path the difference adds is checked against the rest of the tree: nothing of
// the checkout's files may lie above or under it; and where the file system folds names, no two
// names of the revision may be one.
func (c *Checkout) filesSince(root *os.Root, d *difference, edits []Edit) (base, target map[string]treeFile, err error) {
	changed, removed := d.changed, d.removed
	x, err := c.loadIndex(root)
	if err != nil {
		return nil, nil, err
	}
	// baseOf answers the base's file at p, checked as BaseFiles checks every one.
	baseOf := func(p string) (treeFile, bool, error) {
		i, ok := x.find(p)
		if !ok || !x.entries[i].inBase {
			return treeFile{}, false, nil
		}
		f := x.entries[i].baseFile()
		err := repo.ValidatePath(p, false)
		if err == nil {
			err = f.check()
		}
		if err != nil {
			return treeFile{}, false, c.indexDamaged(fmt.Errorf("file %q %v", ShortPath(p), err))
		}
		return f, true, nil
	}
	base = map[string]treeFile{}
	paths := d.paths(c.Conflicts)
	for _, e := range edits {
		paths = append(paths, e.Path)
	}
	for _, p := range paths {
		f, ok, err := baseOf(p)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			base[p] = f
		}
	}
	target = make(map[string]treeFile, len(base)+len(changed))
	for p, f := range base {
		if !removed[p] {
			target[p] = f
		}
	}
	for p, f := range changed {
		target[p] = f
	}

	for p := range changed {
		if _, inBase := base[p]; inBase {
			continue
		}
		if err := x.checkPlace(p, target, removed, baseOf); err != nil {
			return nil, nil, fmt.Errorf("refused the server's tree: %v. Nothing was written", err)
		}
	}
	// Two names one file is written for are found only among every name of the tree: looked
	// for where the file system folds names, as the probe tells (on Linux's, it does not).
	if how, err := foldsNames(root); err != nil {
		return nil, nil, err
	} else if how != "" {
		whole := make(map[string]treeFile, len(x.entries)+len(changed))
		for i := range x.entries {
			if e := &x.entries[i]; e.inBase && !removed[e.path] {
				whole[e.path] = treeFile{}
			}
		}
		for p := range changed {
			whole[p] = treeFile{}
		}
		if err := refuseFoldedNames(root, whole); err != nil {
			return nil, nil, &foldError{err}
		}
	}
	return base, target, nil
}

// difference is the server's answer to a GetTree since the base, checked: the files it
// changed or added, and the paths it removed.
type difference struct {
	changed map[string]treeFile
	removed map[string]bool
}

// readDifference checks tree, the server's answer to a GetTree since the base, as a whole tree
// is checked (TreeFiles), and each removed path by the same rules, before anything looks for
// its paths on disk.
func readDifference(tree *agwpv1.GetTreeResponse) (*difference, error) {
	changed, err := TreeFiles(tree.GetEntries())
	if err != nil {
		return nil, err
	}
	d := &difference{changed: changed, removed: map[string]bool{}}
	for _, p := range tree.GetRemoved() {
		if err := repo.ValidatePath(p, false); err != nil {
			return nil, fmt.Errorf("refused the server's tree: the removed path %q %v. Nothing was written; a server (or proxy) that sends such a path is broken or hostile: check --server", ShortPath(p), err)
		}
		if _, also := changed[p]; also {
			return nil, fmt.Errorf("refused the server's tree: it lists %q as both changed and removed. Nothing was written", ShortPath(p))
		}
		d.removed[p] = true
	}
	return d, nil
}

// paths answers the paths a sync over d plans over, besides its local edits: those d names,
// and the files in conflict.
func (d *difference) paths(conflicts map[string]conflictRecord) []string {
	paths := make([]string, 0, len(d.changed)+len(d.removed)+len(conflicts))
	for p := range d.changed {
		paths = append(paths, p)
	}
	for p := range d.removed {
		paths = append(paths, p)
	}
	for p := range conflicts {
		paths = append(paths, p)
	}
	return paths
}

// foldError is filesSince's refusal of names a file system would take for one.
type foldError struct{ error }

func (e *foldError) Unwrap() error { return e.error }

// checkPlace refuses the path p the revision adds when a file of the revision lies above it or
// under it: target holds the revision's files among those a sync plans over, the rest of the
// revision is the base (baseOf) without what was removed.
func (x *index) checkPlace(p string, target map[string]treeFile, removed map[string]bool, baseOf func(string) (treeFile, bool, error)) error {
	for _, dir := range repo.Ancestors(p) {
		d := strings.TrimSuffix(dir, "/")
		if f, ok := target[d]; ok {
			return underError(p, d, f)
		}
		if removed[d] {
			continue
		}
		if f, ok, err := baseOf(d); err != nil {
			return err
		} else if ok {
			return underError(p, d, f)
		}
	}
	under := p + "/"
	i, _ := x.find(under)
	for ; i < len(x.entries) && strings.HasPrefix(x.entries[i].path, under); i++ {
		if e := &x.entries[i]; e.inBase && !removed[e.path] {
			return underError(e.path, p, target[p])
		}
	}
	return nil
}

// find answers the entry at path, by binary search (the entries are sorted by path), or where
// it would stand.
func (x *index) find(path string) (int, bool) { return findEntry(x.entries, path) }

// findEntry is index.find over entries sorted by path.
func findEntry(entries []indexEntry, path string) (int, bool) {
	return slices.BinarySearchFunc(entries, path, func(e indexEntry, p string) int { return strings.Compare(e.path, p) })
}

// moveBase moves the checkout's base to revision, whose files differ from the base's only
// among from (the base's files of some paths) and to (the revision's files of the same paths):
// the index is the base's, those paths changed, written at the next save. It is SetBase for a
// sync that planned over part of the tree.
func (c *Checkout) moveBase(root *os.Root, revision string, from, to map[string]treeFile) error {
	x, err := c.loadIndex(root)
	if err != nil {
		return err
	}
	paths := make([]string, 0, len(from)+len(to))
	for p := range from {
		paths = append(paths, p)
	}
	for p := range to {
		if _, ok := from[p]; !ok {
			paths = append(paths, p)
		}
	}
	// Every digest is read before the index is touched: the index is changed in place (a copy
	// of a large checkout's index is most of what moving its base would cost), so a refusal
	// must leave it as it was.
	sums := make([]sha256Sum, len(paths))
	for i, p := range paths {
		if f, ok := to[p]; ok {
			if sums[i], err = f.baseSum(); err != nil {
				return fmt.Errorf("file %q %v", ShortPath(p), err)
			}
		}
	}
	x.noteChanged(paths...)
	var added []indexEntry
	dropped := false
	for n, p := range paths {
		f, inTarget := to[p]
		i, ok := x.find(p)
		switch {
		case ok && inTarget:
			x.entries[i].inBase, x.entries[i].base, x.entries[i].baseMode = true, sums[n], f.Mode
		case ok:
			x.entries[i].inBase, x.entries[i].base, x.entries[i].baseMode = false, sha256Sum{}, ""
			dropped = dropped || !x.entries[i].hashed
		case inTarget:
			added = append(added, indexEntry{path: p, inBase: true, base: sums[n], baseMode: f.Mode})
		}
	}
	if dropped {
		// An entry neither in the base nor hashed tells nothing: baseIndex keeps none either.
		x.entries = slices.DeleteFunc(x.entries, func(e indexEntry) bool { return !e.inBase && !e.hashed })
	}
	if len(added) > 0 {
		x.entries = append(x.entries, added...)
		slices.SortFunc(x.entries, func(a, b indexEntry) int { return strings.Compare(a.path, b.path) })
	}
	c.BaseRevision, c.base, c.idx, c.baseChanged, c.baseInIndex = revision, nil, x, true, true
	return nil
}

// localEditsOf answers the local edits of paths (a path names a directory's files too), for
// a sync that plans over them alone: only they are looked at on disk, with the files the index
// cannot vouch for (never hashed, or racily clean), as a scan with a watcher's answer does.
// What it finds is not written to the index: the scan of a whole checkout does that.
func (c *Checkout) localEditsOf(paths []string) ([]Edit, error) {
	root, err := os.OpenRoot(c.root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	x, err := c.loadIndex(root)
	if err != nil {
		return nil, err
	}
	// A path under a link or a file is not on disk as a path, as a walk that follows no link
	// finds: what is looked at is the link or file (an edit itself), and everything under it
	// is gone.
	look := make([]string, 0, len(paths))
	named := map[string]bool{}
	for _, p := range paths {
		for _, dir := range repo.Ancestors(p) {
			d := strings.TrimSuffix(dir, "/")
			if info, err := root.Lstat(filepath.FromSlash(d)); err != nil || !info.IsDir() {
				p = d
				break
			}
		}
		if !named[p] {
			named[p] = true
			look = append(look, p)
		}
	}
	s, err := scanChanged(root, x, look)
	if err != nil {
		return nil, err
	}
	if s.contents, err = hashEntries(root, s.hash); err != nil {
		return nil, err
	}
	return s.edits(c)
}
