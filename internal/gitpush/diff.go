package gitpush

import (
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/ag-coord/ag/internal/gitstore"
)

// Edit is one path's change from one tree to another: its new entry, or its deletion.
type Edit struct {
	Path   string
	Delete bool
	Mode   filemode.FileMode // of the new entry: a file, an executable, a link or a submodule
	ID     plumbing.Hash     // the new entry's blob, or its submodule's commit
}

// Diff answers the edits that make the tree from into the tree to, by path in git's order of
// the paths' components. A directory that becomes a file is its files' deletions and the
// file's write, as ag's trees hold files only.
func Diff(s storer.EncodedObjectStorer, from, to plumbing.Hash) ([]Edit, error) {
	var out []Edit
	err := diffTrees(s, "", from, to, &out)
	return out, err
}

func diffTrees(s storer.EncodedObjectStorer, prefix string, from, to plumbing.Hash, out *[]Edit) error {
	if from == to {
		return nil
	}
	a, err := entries(s, from)
	if err != nil {
		return err
	}
	b, err := entries(s, to)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for _, e := range a {
		names[e.Name] = true
	}
	for _, e := range b {
		names[e.Name] = true
	}
	byName := func(es []object.TreeEntry) map[string]object.TreeEntry {
		m := make(map[string]object.TreeEntry, len(es))
		for _, e := range es {
			m[e.Name] = e
		}
		return m
	}
	am, bm := byName(a), byName(b)
	ordered := make([]object.TreeEntry, 0, len(names))
	for n := range names {
		e, ok := bm[n]
		if !ok {
			e = am[n]
		}
		ordered = append(ordered, object.TreeEntry{Name: n, Mode: e.Mode})
	}
	gitstore.SortTreeEntries(ordered)
	for _, o := range ordered {
		old, hadOld := am[o.Name]
		now, hasNow := bm[o.Name]
		path := prefix + o.Name
		oldDir, nowDir := hadOld && old.Mode == filemode.Dir, hasNow && now.Mode == filemode.Dir
		switch {
		case hadOld && hasNow && old.Mode == now.Mode && old.Hash == now.Hash:
			continue
		case oldDir || nowDir:
			// A directory on either side: what is under it changes file by file.
			var fromTree, toTree plumbing.Hash
			if oldDir {
				fromTree = old.Hash
			} else if hadOld {
				*out = append(*out, Edit{Path: path, Delete: true})
			}
			if nowDir {
				toTree = now.Hash
			}
			if err := diffTrees(s, path+"/", fromTree, toTree, out); err != nil {
				return err
			}
			if hasNow && !nowDir {
				*out = append(*out, Edit{Path: path, Mode: now.Mode, ID: now.Hash})
			}
		case hasNow:
			*out = append(*out, Edit{Path: path, Mode: now.Mode, ID: now.Hash})
		default:
			*out = append(*out, Edit{Path: path, Delete: true})
		}
	}
	return nil
}

// entries answers a tree's entries; the zero hash is the empty tree.
func entries(s storer.EncodedObjectStorer, id plumbing.Hash) ([]object.TreeEntry, error) {
	if id.IsZero() {
		return nil, nil
	}
	es, err := gitstore.TreeEntries(s, id)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", id, err)
	}
	return es, nil
}

// EntryAt answers the entry at path (a file's, never a directory's) in the tree root, and
// whether there is one.
func EntryAt(s storer.EncodedObjectStorer, root plumbing.Hash, path string) (object.TreeEntry, bool, error) {
	tree := root
	parts := strings.Split(path, "/")
	for i, name := range parts {
		es, err := entries(s, tree)
		if err != nil {
			return object.TreeEntry{}, false, err
		}
		j, ok := gitstore.FindTreeEntry(es, name)
		if !ok {
			return object.TreeEntry{}, false, nil
		}
		e := es[j]
		if i == len(parts)-1 {
			return e, e.Mode != filemode.Dir, nil
		}
		if e.Mode != filemode.Dir {
			return object.TreeEntry{}, false, nil
		}
		tree = e.Hash
	}
	return object.TreeEntry{}, false, nil
}
