package gitstore

import (
	"fmt"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/ag-coord/ag/internal/repo"
)

// Edit writes a file (Blob, already stored) or deletes one (Delete). Mode is what the file is
// afterwards: filemode.Regular, Executable or Symlink, or Submodule with Blob the submodule's
// commit; zero keeps the mode of the file the edit replaces (filemode.Regular for a new one), so
// that a script whose content changes stays executable.
type Edit struct {
	Path   string
	Blob   plumbing.Hash
	Delete bool
	Mode   filemode.FileMode
}

// modeAfter answers the mode a write of e gives a path whose entry was old (exists false: none).
func (e *Edit) modeAfter(old object.TreeEntry, exists bool) filemode.FileMode {
	if e.Mode != 0 {
		return e.Mode
	}
	if exists && (old.Mode == filemode.Executable || old.Mode == filemode.Symlink) {
		return old.Mode
	}
	return filemode.Regular
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
		switch e.Mode {
		case 0, filemode.Regular, filemode.Executable, filemode.Symlink, filemode.Submodule:
		default:
			return plumbing.ZeroHash, fmt.Errorf("edit of %s: mode %o is no file's", e.Path, uint32(e.Mode))
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
	var subs map[string]plumbing.Hash // subdirectories spliceDir updated before it gave up
	if r, ok := s.(PackedTreeReader); ok && !id.IsZero() {
		nid, changed, done, updated, err := spliceDir(s, r, id, n, prefix)
		if done || err != nil {
			return nid, changed, err
		}
		subs = updated
	}
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
	type replacement struct {
		at    int
		entry object.TreeEntry
	}
	var replaced []replacement
	for name, c := range n.children {
		path := prefix + name
		// Each name is one child: a name appended below is not looked up again.
		i, exists := FindTreeEntry(entries[:sorted], name)
		var old object.TreeEntry
		if exists {
			old = entries[i]
		}
		next, err := entryAfter(s, c, name, path, old, exists, subs)
		if err != nil {
			return plumbing.ZeroHash, false, err
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
				// Replaced below, once every name is looked up: a file that becomes a
				// directory changes its place in git's order, which the search relies on.
				replaced = append(replaced, replacement{at: i, entry: next})
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
	for _, r := range replaced {
		entries[r.at] = r.entry
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
	noteReplaced(s, nid, id)
	return nid, true, nil
}

// ReplacedNoter is a storer told which tree each new tree replaced at its path: a store may keep
// the new one as a delta against the old, as git's packs keep a tree's versions.
type ReplacedNoter interface {
	NoteReplaced(tree, replaced plumbing.Hash)
}

// noteReplaced tells s, when it asks, that tree replaced old (zero: a new directory).
func noteReplaced(s storer.EncodedObjectStorer, tree, old plumbing.Hash) {
	if n, ok := s.(ReplacedNoter); ok && !old.IsZero() {
		n.NoteReplaced(tree, old)
	}
}

// entryAfter answers the entry named name in the directory after the edits in c are applied
// (Name empty: no entry), where old is the entry before (when exists) and subs the
// subdirectories spliceDir already updated.
func entryAfter(s storer.EncodedObjectStorer, c *editNode, name, path string, old object.TreeEntry, exists bool, subs map[string]plumbing.Hash) (object.TreeEntry, error) {
	isDir := exists && old.Mode == filemode.Dir

	// The directory under this name afterwards: the old one (if it was a directory)
	// with the edits below applied.
	var sub plumbing.Hash
	if len(c.children) > 0 {
		var base plumbing.Hash
		if isDir {
			base = old.Hash
		}
		if updated, ok := subs[name]; ok {
			sub = updated
		} else {
			var err error
			if sub, _, err = updateDir(s, base, c, path+"/"); err != nil {
				return object.TreeEntry{}, err
			}
		}
	} else if isDir {
		sub = old.Hash
	}

	var next object.TreeEntry // Name empty: no entry
	switch {
	case c.edit != nil && !c.edit.Delete: // a file afterwards
		if !sub.IsZero() {
			return object.TreeEntry{}, &repo.CollisionError{File: path, Under: path + "/"}
		}
		next = object.TreeEntry{Name: name, Mode: c.edit.modeAfter(old, exists), Hash: c.edit.Blob}
	case c.edit != nil || isDir || !exists: // the file, if any, is deleted
		if !sub.IsZero() {
			next = object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: sub}
		}
	default: // a file not edited, with edits below its name
		if old.Mode == filemode.Submodule && len(c.children) > 0 {
			return object.TreeEntry{}, &repo.InvalidEditError{Path: path,
				Reason: "is a submodule, whose files are another repository's: ag writes nothing into it"}
		}
		if !sub.IsZero() {
			return object.TreeEntry{}, &repo.CollisionError{File: path, Under: path + "/"}
		}
		next = old
	}
	return next, nil
}

// spliceDir is updateDir for the common case of edits that only change what existing entries
// point to: a file's new content or mode, a subdirectory's new tree. Those change 20 bytes of an
// entry (and a file's mode, among 100644, 100755, 120000 and 160000, all of one length) in the
// tree's encoding, which is changed in place: a one-file change under a directory of a thousand
// entries then neither decodes nor encodes the thousand. Anything else (an entry added or
// removed, a file becoming a directory) answers done false, with the subdirectories it updated
// on the way, and updateDir takes the general way.
func spliceDir(s storer.EncodedObjectStorer, r PackedTreeReader, id plumbing.Hash, n *editNode, prefix string) (nid plumbing.Hash, changed, done bool, subs map[string]plumbing.Hash, err error) {
	old, err := r.PackedTree(id)
	if err != nil {
		return plumbing.ZeroHash, false, false, nil, fmt.Errorf("read tree %s of %q: %w", id, prefix, err)
	}
	type replacement struct {
		at   int
		mode filemode.FileMode
		hash plumbing.Hash
	}
	var repl []replacement
	var dirs []string
	// Whether every edit is a replacement, before any subdirectory is updated.
	for name, c := range n.children {
		at, found := old.Find(name)
		if !found {
			return plumbing.ZeroHash, false, false, nil, nil
		}
		e := old.Entry(at)
		switch {
		case c.edit != nil && !c.edit.Delete && len(c.children) == 0 && e.Mode != filemode.Dir:
			mode := c.edit.modeAfter(e, true)
			if len(modeText(e.Mode)) != len(modeRegular) || len(modeText(mode)) != len(modeRegular) {
				return plumbing.ZeroHash, false, false, nil, nil
			}
			repl = append(repl, replacement{at: at, mode: mode, hash: c.edit.Blob})
		case c.edit == nil && len(c.children) > 0 && e.Mode == filemode.Dir:
			dirs = append(dirs, name)
		default:
			return plumbing.ZeroHash, false, false, nil, nil
		}
	}
	for _, name := range dirs {
		at, _ := old.Find(name)
		sub, _, err := updateDir(s, old.Entry(at).Hash, n.children[name], prefix+name+"/")
		if err != nil {
			return plumbing.ZeroHash, false, false, nil, err
		}
		if subs == nil {
			subs = make(map[string]plumbing.Hash, len(dirs))
		}
		subs[name] = sub
		repl = append(repl, replacement{at: at, mode: filemode.Dir, hash: sub})
	}
	for _, x := range repl {
		if x.hash.IsZero() {
			return plumbing.ZeroHash, false, false, subs, nil // a directory emptied goes
		}
	}
	data := []byte(old.data)
	entries := slices.Clone(old.entries)
	for _, x := range repl {
		e := &entries[x.at]
		if e.mode == x.mode && e.hash == x.hash {
			continue
		}
		changed = true
		copy(data[old.modeStart(x.at):], modeText(x.mode))
		copy(data[e.nameEnd+1:], x.hash[:])
		e.mode, e.hash = x.mode, x.hash
	}
	if !changed {
		return id, false, true, nil, nil
	}
	if nid, err = writeTreeData(s, data); err != nil {
		return plumbing.ZeroHash, false, false, nil, fmt.Errorf("write tree %q: %w", prefix, err)
	}
	r.KeepPacked(nid, &PackedTree{data: string(data), entries: entries})
	noteReplaced(s, nid, id)
	return nid, true, true, nil, nil
}
