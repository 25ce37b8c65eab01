package gitstore

import (
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/ag-coord/ag/internal/repo"
)

// Edit writes a file (Blob, already stored) or deletes one (Delete).
type Edit struct {
	Path   string
	Blob   plumbing.Hash
	Delete bool
}

// editNode is the edits under one directory: the edit of the entry of that name, if any, and
// the edits below it.
type editNode struct {
	edit     *Edit
	children map[string]*editNode
}

// UpdateTree applies edits to the tree root (zero or EmptyTree for none) and answers the new
// root tree's id. It reads and writes only the trees on the edited paths' spines, so its cost
// follows the change, not the repository.
//
// The edits say what the files are afterwards, as on a flat list of paths: deleting a path
// that holds no file changes nothing; a directory left without files disappears; a file may
// replace a directory whose files are all deleted in the same edits, and the other way round.
// A path that would be both a file and a directory is a *repo.CollisionError; a path edited
// twice is an error.
func UpdateTree(s storer.EncodedObjectStorer, root plumbing.Hash, edits []Edit) (plumbing.Hash, error) {
	top := &editNode{}
	for i := range edits {
		e := &edits[i]
		if err := repo.ValidatePath(e.Path, false); err != nil {
			return plumbing.ZeroHash, fmt.Errorf("path %q %w", e.Path, err)
		}
		if !e.Delete && e.Blob.IsZero() {
			return plumbing.ZeroHash, fmt.Errorf("edit of %s: no blob and not a delete", e.Path)
		}
		n := top
		for _, seg := range strings.Split(e.Path, "/") {
			if n.children == nil {
				n.children = make(map[string]*editNode)
			}
			c := n.children[seg]
			if c == nil {
				c = &editNode{}
				n.children[seg] = c
			}
			n = c
		}
		if n.edit != nil {
			return plumbing.ZeroHash, fmt.Errorf("path %s is edited twice", e.Path)
		}
		n.edit = e
	}
	if root == EmptyTree {
		root = plumbing.ZeroHash
	}
	id, _, err := updateDir(s, root, top, "")
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if id.IsZero() {
		return writeTreeObject(s, nil)
	}
	return id, nil
}

// updateDir applies the edits under n to the tree id (zero: no directory yet) at prefix, and
// answers the new tree's id (zero when it holds nothing) and whether it changed. Unchanged and
// empty trees are not written.
func updateDir(s storer.EncodedObjectStorer, id plumbing.Hash, n *editNode, prefix string) (plumbing.Hash, bool, error) {
	var entries []object.TreeEntry
	if !id.IsZero() {
		old, err := TreeEntries(s, id)
		if err != nil {
			return plumbing.ZeroHash, false, fmt.Errorf("read tree %s of %q: %w", id, prefix, err)
		}
		entries = append(make([]object.TreeEntry, 0, len(old)+len(n.children)), old...)
	}
	sorted := len(entries) // entries[:sorted] are the old tree's, in git's order
	changed := false
	var removed []bool // by position in entries[:sorted], allocated at the first removal
	for name, c := range n.children {
		path := prefix + name
		// Each name is one child: a name appended below is not looked up again.
		i, exists := FindTreeEntry(entries[:sorted], name)
		var old object.TreeEntry
		if exists {
			old = entries[i]
		}
		isDir := exists && old.Mode == filemode.Dir

		// The directory under this name afterwards: the old one (if it was a directory)
		// with the edits below applied.
		var sub plumbing.Hash
		if len(c.children) > 0 {
			var base plumbing.Hash
			if isDir {
				base = old.Hash
			}
			var err error
			if sub, _, err = updateDir(s, base, c, path+"/"); err != nil {
				return plumbing.ZeroHash, false, err
			}
		} else if isDir {
			sub = old.Hash
		}

		var next object.TreeEntry // Name empty: no entry
		switch {
		case c.edit != nil && !c.edit.Delete: // a file afterwards
			if !sub.IsZero() {
				return plumbing.ZeroHash, false, &repo.CollisionError{File: path, Under: path + "/"}
			}
			next = object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: c.edit.Blob}
		case c.edit != nil || isDir || !exists: // the file, if any, is deleted
			if !sub.IsZero() {
				next = object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: sub}
			}
		default: // a file not edited, with edits below its name
			if !sub.IsZero() {
				return plumbing.ZeroHash, false, &repo.CollisionError{File: path, Under: path + "/"}
			}
			next = old
		}
		switch {
		case next.Name == "" && exists:
			// Removed below, once every name is looked up: the search needs the names in place.
			if removed == nil {
				removed = make([]bool, sorted)
			}
			removed[i] = true
			changed = true
		case next.Name == "":
		case exists:
			if next != old {
				entries[i] = next
				changed = true
			}
		default:
			entries = append(entries, next)
			changed = true
		}
	}
	if !changed {
		return id, false, nil
	}
	if removed != nil {
		kept := entries[:0]
		for i, e := range entries {
			if i >= sorted || !removed[i] {
				kept = append(kept, e)
			}
		}
		entries = kept
	}
	if len(entries) == 0 {
		return plumbing.ZeroHash, true, nil
	}
	nid, err := writeTreeObject(s, entries)
	if err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("write tree %q: %w", prefix, err)
	}
	return nid, true, nil
}
