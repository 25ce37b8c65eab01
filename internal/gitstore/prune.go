package gitstore

import (
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// Prune answers the tree root without the paths (lease paths: "dir/" drops a directory and
// everything in it, "a/file" a file; a path the tree does not hold is left alone). Directories
// left empty disappear, as git has no empty directories. It reads and writes only the trees on
// the paths' spines and shares every other subtree with root, so it costs the paths, not the
// repository.
func Prune(s storer.EncodedObjectStorer, root plumbing.Hash, paths []string) (plumbing.Hash, error) {
	if len(paths) == 0 {
		return root, nil
	}
	top := &pruneNode{}
	for _, p := range paths {
		dir := strings.HasSuffix(p, "/")
		segs := strings.Split(strings.TrimSuffix(p, "/"), "/")
		n, covered := top, false
		for k, seg := range segs {
			if n.children == nil {
				n.children = make(map[string]*pruneNode)
			}
			c := n.children[seg]
			if c == nil {
				c = &pruneNode{}
				n.children[seg] = c
			}
			n = c
			if n.all && k < len(segs)-1 {
				covered = true // an enclosing directory goes already
				break
			}
		}
		switch {
		case covered:
		case dir:
			n.all = true
		default:
			n.file = true
		}
	}
	if root.IsZero() || root == EmptyTree {
		return EmptyTree, nil
	}
	id, _, err := pruneDir(s, root, top, "")
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if id.IsZero() {
		return writeTreeObject(s, nil)
	}
	return id, nil
}

// pruneNode is what goes under one name: the directory of that name with everything in it (all),
// the file of that name, and, when the directory stays, what goes below it.
type pruneNode struct {
	all      bool
	file     bool
	children map[string]*pruneNode
}

// pruneDir answers the tree id without what n drops (zero when nothing is left) and whether it
// changed.
func pruneDir(s storer.EncodedObjectStorer, id plumbing.Hash, n *pruneNode, prefix string) (plumbing.Hash, bool, error) {
	entries, err := TreeEntries(s, id)
	if err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("read tree %s of %q: %w", id, prefix, err)
	}
	kept := make([]object.TreeEntry, 0, len(entries))
	changed := false
	for _, e := range entries {
		c := n.children[e.Name]
		if c == nil {
			kept = append(kept, e)
			continue
		}
		isDir := e.Mode == filemode.Dir
		switch {
		case isDir && c.all, !isDir && c.file:
			changed = true
			continue
		case isDir && !c.all && len(c.children) > 0:
			sub, subChanged, err := pruneDir(s, e.Hash, c, prefix+e.Name+"/")
			if err != nil {
				return plumbing.ZeroHash, false, err
			}
			if subChanged {
				changed = true
				if sub.IsZero() {
					continue
				}
				e.Hash = sub
			}
		}
		kept = append(kept, e)
	}
	if !changed {
		return id, false, nil
	}
	if len(kept) == 0 {
		return plumbing.ZeroHash, true, nil
	}
	nid, err := writeTreeObject(s, kept)
	return nid, true, err
}
