package store

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
)

// A repository's content is git's object model (ADR-0022): blobs are the stored blobs, found by
// their git id beside their sha256 digest; trees (one per directory) and commits are rows of a
// table of git objects. This file holds what both backends do with them, over the few reads
// and writes each backend answers in its own transaction (GitBackend).

// GitBackend is what the content layer needs of a backend, inside one transaction.
type GitBackend interface {
	// ReadGitObject answers the type and content of a tree or commit, or of a blob found by its
	// git id. An object the store does not hold: ErrNotFound.
	ReadGitObject(ctx context.Context, id plumbing.Hash) (plumbing.ObjectType, []byte, error)
	// PutGitObjects stores trees and commits; one already stored is left as it is.
	PutGitObjects(ctx context.Context, objects []GitObject) error
	// BlobGitIDs answers the git id of each stored blob among digests (sha256); a digest the
	// store does not hold is absent from the answer.
	BlobGitIDs(ctx context.Context, digests []string) (map[string]plumbing.Hash, error)
	// BlobsByGitID answers the sha256 digest and size of each stored blob among ids.
	BlobsByGitID(ctx context.Context, ids []plumbing.Hash) (map[plumbing.Hash]BlobRef, error)
}

// GitObject is one git object as stored: its id, type and content (without git's header).
// Delta, when set, is how a tree is kept (StoredDelta): its anchor's id, then git's delta.
type GitObject struct {
	ID    plumbing.Hash
	Type  plumbing.ObjectType
	Data  []byte
	Delta []byte
}

// GitAnchorReader is a GitBackend that tells, of stored trees, the tree each is kept whole as
// or against (StoredDelta): the tree itself when kept whole, its anchor when a delta. A
// backend that does not is written whole trees only.
type GitAnchorReader interface {
	GitAnchors(ctx context.Context, trees []plumbing.Hash) (map[plumbing.Hash]plumbing.Hash, error)
}

// deltaShare: a tree is kept as a delta when the delta (its anchor's id included) is at most
// 1/deltaShare of it; otherwise it is kept whole and becomes the anchor of the next versions.
// (A tree of a few entries never is: git's delta of one changed entry is already more than
// a quarter of it.)
const deltaShare = 4

// BlobRef is how ag names a blob: its sha256 digest and its size.
type BlobRef struct {
	Digest string
	Size   uint64
}

// DefaultGitEmailDomain is the domain of the e-mail addresses of the commits' authors and
// committer when the server sets none: .invalid (RFC 2606) says that nobody reads mail there.
const DefaultGitEmailDomain = "ag.invalid"

// GitObjects is a go-git object storer over a GitBackend inside one transaction. Objects
// written are kept in memory until Flush, so that the trees of one edit that a later step
// replaces are never stored. Trees are kept decoded for the whole process (TreeEntries): an
// id names one content whatever the database.
type GitObjects struct {
	ctx     context.Context
	backend GitBackend
	pending map[plumbing.Hash]plumbing.EncodedObject
	order   []plumbing.Hash
	// kept are pending trees as gitstore packed them (gitstore.PackedTreeReader): they go to
	// the decoded-tree cache once stored, without being parsed again.
	kept map[plumbing.Hash]*gitstore.PackedTree
	// replaced are the stored trees pending trees replaced at their paths
	// (gitstore.ReplacedNoter): the versions a new tree may be kept as a delta against.
	replaced map[plumbing.Hash]plumbing.Hash
}

// NoteReplaced implements gitstore.ReplacedNoter.
func (g *GitObjects) NoteReplaced(tree, old plumbing.Hash) {
	if g.replaced == nil {
		g.replaced = make(map[plumbing.Hash]plumbing.Hash)
	}
	g.replaced[tree] = old
}

// NewGitObjects answers an object storer reading and writing through b with ctx. With b nil,
// it only writes, and the caller stores what TakePending answers.
func NewGitObjects(ctx context.Context, b GitBackend) *GitObjects {
	return &GitObjects{ctx: ctx, backend: b, pending: make(map[plumbing.Hash]plumbing.EncodedObject)}
}

// Flush stores the objects written since the last Flush, in the order they were written.
func (g *GitObjects) Flush() error {
	objs, err := g.TakePending()
	if err != nil || len(objs) == 0 {
		return err
	}
	if err := g.backend.PutGitObjects(g.ctx, objs); err != nil {
		return fmt.Errorf("store git objects: %w", err)
	}
	// Stored in this transaction, which may yet roll back: a tree's id names its content
	// whatever becomes of the row, and only a committed revision's tree is ever looked up.
	g.KeepDecoded(objs)
	return nil
}

// TakePending answers the objects written since the last Flush, in the order they were
// written, and forgets them: the caller stores them.
func (g *GitObjects) TakePending() ([]GitObject, error) {
	objs := make([]GitObject, 0, len(g.order))
	for _, id := range g.order {
		o := g.pending[id]
		data, err := gitstore.ObjectData(o)
		if err != nil {
			return nil, err
		}
		objs = append(objs, GitObject{ID: id, Type: o.Type(), Data: data})
	}
	g.deltas(objs)
	g.pending = make(map[plumbing.Hash]plumbing.EncodedObject)
	g.order = g.order[:0]
	g.replaced = nil
	return objs, nil
}

// deltas sets the Delta of each tree among objs that replaced a stored tree (gitstore notes
// trees only) and differs from that tree's anchor by little: git's delta against the anchor,
// which the store keeps whole, so a tree is read with one other at most. Anything that fails
// here leaves the tree whole.
func (g *GitObjects) deltas(objs []GitObject) {
	anchors, ok := g.backend.(GitAnchorReader)
	if !ok || len(g.replaced) == 0 {
		return
	}
	var (
		candidates []int // of objs
		olds       []plumbing.Hash
	)
	for i, o := range objs {
		if old, ok := g.replaced[o.ID]; ok {
			candidates = append(candidates, i)
			olds = append(olds, old)
		}
	}
	if len(olds) == 0 {
		return
	}
	// A tree not stored (written in this same transaction) has no anchor to answer, and a
	// failure answers none: either way the tree is kept whole.
	anchorOf, _ := anchors.GitAnchors(g.ctx, olds)
	for n, i := range candidates {
		o := &objs[i]
		anchor, ok := anchorOf[olds[n]]
		if !ok {
			continue
		}
		base, err := g.tree(anchor)
		if err != nil {
			continue
		}
		delta := packfile.DiffDelta([]byte(base.Data()), o.Data)
		if len(anchor)+len(delta) <= len(o.Data)/deltaShare {
			o.Delta = append(anchor[:len(anchor):len(anchor)], delta...)
		}
	}
}

// KeepDecoded hands the trees among objs, stored by the caller, to the decoded-tree cache: the next
// Integrate reads the tree this one wrote.
func (g *GitObjects) KeepDecoded(objs []GitObject) {
	for _, o := range objs {
		if o.Type != plumbing.TreeObject {
			continue
		}
		if t, ok := g.kept[o.ID]; ok {
			decodedTrees.put(o.ID, t)
		} else if t, err := gitstore.PackTree(o.Data); err == nil {
			decodedTrees.put(o.ID, t)
		}
	}
	g.kept = nil
}

// PackedTree implements gitstore.PackedTreeReader.
func (g *GitObjects) PackedTree(id plumbing.Hash) (*gitstore.PackedTree, error) {
	if t, ok := g.kept[id]; ok {
		return t, nil
	}
	return g.tree(id)
}

// KeepPacked implements gitstore.PackedTreeReader.
func (g *GitObjects) KeepPacked(id plumbing.Hash, t *gitstore.PackedTree) {
	if g.kept == nil {
		g.kept = make(map[plumbing.Hash]*gitstore.PackedTree)
	}
	g.kept[id] = t
}

// NewEncodedObject implements storer.EncodedObjectStorer.
func (g *GitObjects) NewEncodedObject() plumbing.EncodedObject { return &plumbing.MemoryObject{} }

// SetEncodedObject keeps a tree or commit until Flush. Blobs are stored by PutBlobs, with
// their sha256 digest, never here.
func (g *GitObjects) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	if o.Type() != plumbing.TreeObject && o.Type() != plumbing.CommitObject {
		return plumbing.ZeroHash, fmt.Errorf("store git objects: a %s is not stored as a git object", o.Type())
	}
	id := o.Hash()
	if _, ok := g.pending[id]; !ok {
		g.pending[id] = o
		g.order = append(g.order, id)
	}
	return id, nil
}

// EncodedObject implements storer.EncodedObjectStorer.
func (g *GitObjects) EncodedObject(t plumbing.ObjectType, id plumbing.Hash) (plumbing.EncodedObject, error) {
	if o, ok := g.pending[id]; ok {
		if t != plumbing.AnyObject && o.Type() != t {
			return nil, plumbing.ErrObjectNotFound
		}
		return o, nil
	}
	if g.backend == nil {
		return nil, plumbing.ErrObjectNotFound
	}
	typ, data, err := g.backend.ReadGitObject(g.ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, plumbing.ErrObjectNotFound
	}
	if err != nil {
		return nil, err
	}
	if t != plumbing.AnyObject && typ != t {
		return nil, plumbing.ErrObjectNotFound
	}
	o := &plumbing.MemoryObject{}
	o.SetType(typ)
	o.SetSize(int64(len(data)))
	if _, err := o.Write(data); err != nil {
		return nil, err
	}
	return o, nil
}

// TreeEntries answers the tree id decoded, from a process-wide cache when another call decoded
// it (gitstore.TreeReader). The entries are not to be changed.
func (g *GitObjects) TreeEntries(id plumbing.Hash) ([]object.TreeEntry, error) {
	t, err := g.tree(id)
	if err != nil {
		return nil, err
	}
	return t.Entries(), nil
}

// tree answers the tree id decoded, with its index by name.
func (g *GitObjects) tree(id plumbing.Hash) (*gitstore.PackedTree, error) {
	if _, pending := g.pending[id]; !pending {
		if t, ok := decodedTrees.get(id); ok {
			return t, nil
		}
	}
	o, err := g.EncodedObject(plumbing.TreeObject, id)
	if err != nil {
		return nil, err
	}
	data, err := gitstore.ObjectData(o)
	if err != nil {
		return nil, err
	}
	t, err := gitstore.PackTree(data)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", id, err)
	}
	if _, pending := g.pending[id]; !pending {
		decodedTrees.put(id, t)
	}
	return t, nil
}

// decodedTrees keeps recently used trees decoded, for every store of the process, bounded in
// entries: a one-file Integrate at the top of a large repository reads the same large root
// tree as the one before it, which wrote it.
var decodedTrees = &treeLRU{maxEntries: 1 << 20, order: list.New(), byID: map[plumbing.Hash]*list.Element{}}

type treeLRU struct {
	mu                  sync.Mutex
	maxEntries, entries int
	order               *list.List // of *treeLRUItem, most recently used first
	byID                map[plumbing.Hash]*list.Element
}

type treeLRUItem struct {
	id   plumbing.Hash
	tree *gitstore.PackedTree
}

func (c *treeLRU) get(id plumbing.Hash) (*gitstore.PackedTree, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byID[id]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*treeLRUItem).tree, true
}

func (c *treeLRU) put(id plumbing.Hash, t *gitstore.PackedTree) {
	n := t.Len() + 1
	if n > c.maxEntries/8 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byID[id]; ok {
		return
	}
	c.byID[id] = c.order.PushFront(&treeLRUItem{id: id, tree: t})
	c.entries += n
	for c.entries > c.maxEntries {
		last := c.order.Back()
		it := last.Value.(*treeLRUItem)
		c.order.Remove(last)
		delete(c.byID, it.id)
		c.entries -= it.tree.Len() + 1
	}
}

// IterEncodedObjects is not offered: nothing walks a whole store.
func (g *GitObjects) IterEncodedObjects(plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return nil, errors.New("git objects: iteration over the whole store is not supported")
}

// HasEncodedObject implements storer.EncodedObjectStorer.
func (g *GitObjects) HasEncodedObject(id plumbing.Hash) error {
	_, err := g.EncodedObject(plumbing.AnyObject, id)
	return err
}

// EncodedObjectSize implements storer.EncodedObjectStorer.
func (g *GitObjects) EncodedObjectSize(id plumbing.Hash) (int64, error) {
	o, err := g.EncodedObject(plumbing.AnyObject, id)
	if err != nil {
		return 0, err
	}
	return o.Size(), nil
}

// AddAlternate implements storer.EncodedObjectStorer.
func (g *GitObjects) AddAlternate(string) error {
	return errors.New("git objects: alternates are not supported")
}

// treeIndex reads trees by id through the decoded-tree cache.
type treeIndex struct {
	s *GitObjects
}

func newTreeIndex(s *GitObjects) *treeIndex { return &treeIndex{s: s} }

// lookupFile answers the entry of the file or submodule at path in the tree root, with a zero
// Hash when there is none (nothing, or a directory). It reads the trees on path's spine only.
func (x *treeIndex) lookupFile(root plumbing.Hash, path string) (object.TreeEntry, error) {
	id := root
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		if id.IsZero() {
			return object.TreeEntry{}, nil
		}
		t, err := x.s.tree(id)
		if err != nil {
			return object.TreeEntry{}, fmt.Errorf("read tree %s: %w", id, err)
		}
		at, ok := t.Find(seg)
		if !ok {
			return object.TreeEntry{}, nil
		}
		found := t.Entry(at)
		last := i == len(segs)-1
		switch {
		case last && found.Mode != filemode.Dir:
			return object.TreeEntry{Mode: found.Mode, Hash: found.Hash}, nil
		case last, found.Mode != filemode.Dir:
			return object.TreeEntry{}, nil
		}
		id = found.Hash
	}
	return object.TreeEntry{}, nil
}

// RebaseGit applies edits made on the git tree base to the git tree mainline, path by path. An
// edited path whose file differs between base and mainline, in content or in mode, is a
// *repo.ConflictError; a file that would also be a directory a *repo.CollisionError; an edit no
// tree takes (a write or delete of a submodule, a new submodule, a symbolic link whose target
// no file system holds, a second spelling of a name: checkSecondSpellings) a
// *repo.InvalidEditError. A write without a mode keeps the path's mode
// in base. It reads and writes the trees on the edited paths' spines only, and answers the new
// root tree. The edits' blobs must be stored (in this transaction or before).
func RebaseGit(ctx context.Context, b GitBackend, s *GitObjects, base, mainline plumbing.Hash, edits []repo.FileEdit) (plumbing.Hash, error) {
	var digests []string
	for _, e := range edits {
		if e.WritesBlob() {
			digests = append(digests, e.Digest)
		}
	}
	ids, err := b.BlobGitIDs(ctx, digests)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	gitEdits := make([]gitstore.Edit, 0, len(edits))
	index := newTreeIndex(s)
	for _, e := range edits {
		inBase, err := index.lookupFile(base, e.Path)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		ge, err := gitEdit(ctx, b, e, inBase, ids)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		inMain := inBase
		if mainline != base {
			if inMain, err = index.lookupFile(mainline, e.Path); err != nil {
				return plumbing.ZeroHash, err
			}
		}
		if inBase != inMain {
			return plumbing.ZeroHash, &repo.ConflictError{Path: e.Path}
		}
		gitEdits = append(gitEdits, ge)
	}
	root, err := gitstore.UpdateTree(s, mainline, gitEdits)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if err := checkSecondSpellings(index, mainline, root, edits); err != nil {
		return plumbing.ZeroHash, err
	}
	return root, nil
}

// checkSecondSpellings refuses edits that give a name of the tree mainline a second spelling
// in root, the tree they make (repo.Fold: "Docs/a.txt" beside "docs/b.txt", "CAFÉ.txt" beside
// "café.txt"): a checkout on macOS or Windows would write both to one file, and the agent
// holding a lease on one would overwrite the other's. Git itself keeps them apart, so a
// history holding both is imported as it is, and an edit of a name that is already there is
// not refused: only a name new to its directory is compared with its siblings. It reads the
// directories along the written paths, as UpdateTree does, and each of them once.
func checkSecondSpellings(index *treeIndex, mainline, root plumbing.Hash, edits []repo.FileEdit) error {
	checked := map[string]bool{} // by directory path and new name
	// The names of each directory met, by fold: made once a directory, so that a change adding
	// many names to one directory costs a lookup a name, not a pass over the directory.
	byFold := map[plumbing.Hash]map[string][]string{}
	// Trees read once each: every edit of a directory of many new files walks the same ones.
	trees := map[plumbing.Hash]*gitstore.PackedTree{}
	tree := func(id plumbing.Hash) (*gitstore.PackedTree, error) {
		if t, ok := trees[id]; ok {
			return t, nil
		}
		t, err := index.s.tree(id)
		if err == nil {
			trees[id] = t
		}
		return t, err
	}
	spellings := func(tree plumbing.Hash, t *gitstore.PackedTree) map[string][]string {
		if m, ok := byFold[tree]; ok {
			return m
		}
		m := make(map[string][]string, t.Len())
		for i := range t.Len() {
			name := t.Entry(i).Name
			f := repo.Fold(name)
			m[f] = append(m[f], name)
		}
		byFold[tree] = m
		return m
	}
	for _, e := range edits {
		if e.Delete || e.GitlinkCommit != "" {
			continue
		}
		old, cur := mainline, root
		prefix := ""
		for rest := e.Path; ; {
			seg, tail, more := strings.Cut(rest, "/")
			rest = tail
			t, err := tree(cur)
			if err != nil {
				return fmt.Errorf("read tree %s: %w", cur, err)
			}
			at, ok := t.Find(seg)
			if !ok { // refused elsewhere (a file that is also a directory)
				break
			}
			existed := false
			var oldNext plumbing.Hash
			if !old.IsZero() {
				ot, err := tree(old)
				if err != nil {
					return fmt.Errorf("read tree %s: %w", old, err)
				}
				if oi, ok := ot.Find(seg); ok {
					existed = true
					if o := ot.Entry(oi); o.Mode == filemode.Dir {
						oldNext = o.Hash
					}
				}
			}
			name := prefix + seg
			if !existed && !checked[name] {
				checked[name] = true
				if other, ok := otherSpelling(spellings(cur, t), seg); ok {
					what, otherPath := name, prefix+other
					if more {
						what, otherPath = what+"/", otherPath+"/"
					}
					return &repo.InvalidEditError{Path: e.Path, Reason: fmt.Sprintf(
						"would add %q beside %q, which the tree holds: they differ only in case or Unicode normalization, "+
							"and a checkout on macOS or Windows would write both to one file; use the existing spelling", what, otherPath)}
				}
			}
			if !more {
				break
			}
			prefix = name + "/"
			old, cur = oldNext, t.Entry(at).Hash
		}
	}
	return nil
}

// otherSpelling answers the name of a directory's entry other than seg with seg's fold, from
// the directory's names by fold.
func otherSpelling(byFold map[string][]string, seg string) (string, bool) {
	for _, name := range byFold[repo.Fold(seg)] {
		if name != seg {
			return name, true
		}
	}
	return "", false
}

// gitEdit answers the git edit of e, whose path holds inBase in the base tree (a zero Hash:
// no file), with ids the git ids of the edits' blobs by digest.
func gitEdit(ctx context.Context, b GitBackend, e repo.FileEdit, inBase object.TreeEntry, ids map[string]plumbing.Hash) (gitstore.Edit, error) {
	submodule := !inBase.Hash.IsZero() && inBase.Mode == filemode.Submodule
	switch {
	case e.GitlinkCommit != "":
		if !submodule {
			return gitstore.Edit{}, &repo.InvalidEditError{Path: e.Path, Reason: "is no submodule in the base revision: " +
				"gitlink_commit moves an existing submodule to another commit, and ag creates no submodule"}
		}
		commit, err := ParseGitID(e.GitlinkCommit)
		if err != nil {
			return gitstore.Edit{}, &repo.InvalidEditError{Path: e.Path, Reason: "would be the submodule of a commit that is no git id: " + err.Error()}
		}
		return gitstore.Edit{Path: e.Path, Blob: commit, Mode: filemode.Submodule}, nil
	case submodule:
		return gitstore.Edit{}, &repo.InvalidEditError{Path: e.Path, Reason: "is a submodule: the one edit of a submodule is " +
			"gitlink_commit, which moves it to another commit; ag neither writes nor deletes one"}
	case e.Delete:
		return gitstore.Edit{Path: e.Path, Delete: true}, nil
	}
	id, ok := ids[e.Digest]
	if !ok {
		return gitstore.Edit{}, fmt.Errorf("%w: blob %s of %s is not stored", ErrNotFound, e.Digest, e.Path)
	}
	mode := filemode.Regular
	switch {
	case e.Mode != "":
		m, err := gitstore.FileMode(e.Mode)
		if err != nil || m == filemode.Submodule {
			return gitstore.Edit{}, &repo.InvalidEditError{Path: e.Path, Reason: fmt.Sprintf(
				"would have mode %q, but a write makes a file %s, %s or %s", e.Mode, repo.ModeFile, repo.ModeExecutable, repo.ModeSymlink)}
		}
		mode = m
	case !inBase.Hash.IsZero() && (inBase.Mode == filemode.Executable || inBase.Mode == filemode.Symlink):
		mode = inBase.Mode
	}
	if mode == filemode.Symlink {
		if err := checkSymlinkBlob(ctx, b, e, id); err != nil {
			return gitstore.Edit{}, err
		}
	}
	return gitstore.Edit{Path: e.Path, Blob: id, Mode: mode}, nil
}

// checkSymlinkBlob checks that the blob id, which e writes as a symbolic link, is a target a
// file system holds (repo.CheckSymlinkTarget).
func checkSymlinkBlob(ctx context.Context, b GitBackend, e repo.FileEdit, id plumbing.Hash) error {
	if e.Size > repo.MaxSymlinkTarget { // not read: it may be large
		return &repo.InvalidEditError{Path: e.Path, Reason: fmt.Sprintf(
			"would be a symbolic link, and the link's target is %d bytes, more than %d", e.Size, repo.MaxSymlinkTarget)}
	}
	_, target, err := b.ReadGitObject(ctx, id)
	if err != nil {
		return fmt.Errorf("read the target of the symbolic link %s: %w", e.Path, err)
	}
	if err := repo.CheckSymlinkTarget(target); err != nil {
		return &repo.InvalidEditError{Path: e.Path, Reason: "would be a symbolic link, and " + err.Error()}
	}
	return nil
}

// FlattenTree answers the files of the tree root as ag lists them: every file with its path,
// sha256 digest and size, in path order.
func FlattenTree(ctx context.Context, b GitBackend, s storer.EncodedObjectStorer, root plumbing.Hash) (repo.Tree, error) {
	var l treeLister
	if err := l.list(ctx, s, root, ""); err != nil {
		return nil, err
	}
	out, err := l.resolve(ctx, b, root)
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = repo.Tree{}
	}
	return out, nil
}

// treeLister gathers the entries of git trees as ag lists them: a submodule as it is, a file by
// its blob, whose sha256 digest and size resolve answers from the store.
type treeLister struct {
	entries repo.Tree // the submodules, then the files resolve adds
	files   []listedFile
}

type listedFile struct {
	path string
	blob plumbing.Hash
	mode string
}

// list adds the entries of the tree id, whose path is prefix ("" for a root, else ending in
// "/"), and of every tree under it.
func (l *treeLister) list(ctx context.Context, s storer.EncodedObjectStorer, id plumbing.Hash, prefix string) error {
	if id.IsZero() || id == gitstore.EmptyTree {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	entries, err := gitstore.TreeEntries(s, id)
	if err != nil {
		return fmt.Errorf("read tree %s of %q: %w", id, prefix, err)
	}
	for _, e := range entries {
		if e.Mode == filemode.Dir {
			if err := l.list(ctx, s, e.Hash, prefix+e.Name+"/"); err != nil {
				return err
			}
			continue
		}
		l.add(prefix+e.Name, e)
	}
	return nil
}

// add adds the entry e, no tree, at path.
func (l *treeLister) add(path string, e object.TreeEntry) {
	mode, isFile := gitstore.EntryMode(e.Mode)
	switch {
	case mode == repo.ModeGitlink: // another repository's commit: no blob to name
		l.entries = append(l.entries, repo.Entry{Path: path, Mode: mode, GitlinkCommit: e.Hash.String()})
	case isFile:
		l.files = append(l.files, listedFile{path, e.Hash, mode})
	}
}

// resolve answers the entries listed, the files' blobs named by their sha256 digest and size,
// in path order; root names the tree in errors.
func (l *treeLister) resolve(ctx context.Context, b GitBackend, root plumbing.Hash) (repo.Tree, error) {
	refs := make(map[plumbing.Hash]BlobRef, len(l.files))
	const batch = 500
	for i := 0; i < len(l.files); i += batch {
		var ids []plumbing.Hash
		for _, f := range l.files[i:min(i+batch, len(l.files))] {
			if _, ok := refs[f.blob]; !ok {
				ids = append(ids, f.blob)
			}
		}
		got, err := b.BlobsByGitID(ctx, ids)
		if err != nil {
			return nil, err
		}
		for id, r := range got {
			refs[id] = r
		}
	}
	out := slices.Grow(l.entries, len(l.files))
	for _, f := range l.files {
		r, ok := refs[f.blob]
		if !ok {
			return nil, fmt.Errorf("tree %s: the blob %s of %s is not stored", root, f.blob, f.path)
		}
		out = append(out, repo.Entry{Path: f.path, Digest: r.Digest, Size: r.Size, Mode: f.mode})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// TreeDiff is what changed from one tree to another, as ag lists trees.
type TreeDiff struct {
	Changed repo.Tree // the entries the second tree has that the first has not, or has otherwise, in path order
	Removed []string  // the paths the first tree has and the second has not, in path order
}

// DiffTrees answers what changed from the tree from to the tree to, reading only the trees
// along the paths that differ: a subtree with the same id on both sides is the same subtree,
// so a one-file change reads as many trees as the file is deep, whatever the size of the rest.
func DiffTrees(ctx context.Context, b GitBackend, s storer.EncodedObjectStorer, from, to plumbing.Hash) (TreeDiff, error) {
	var added, removed treeLister
	var diff func(from, to plumbing.Hash, prefix string) error
	diff = func(from, to plumbing.Hash, prefix string) error {
		if from == to {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var old, cur []object.TreeEntry
		var err error
		if !from.IsZero() && from != gitstore.EmptyTree {
			if old, err = gitstore.TreeEntries(s, from); err != nil {
				return fmt.Errorf("read tree %s of %q: %w", from, prefix, err)
			}
		}
		if !to.IsZero() && to != gitstore.EmptyTree {
			if cur, err = gitstore.TreeEntries(s, to); err != nil {
				return fmt.Errorf("read tree %s of %q: %w", to, prefix, err)
			}
		}
		before := make(map[string]object.TreeEntry, len(old))
		for _, e := range old {
			before[e.Name] = e
		}
		for _, e := range cur {
			o, had := before[e.Name]
			delete(before, e.Name)
			path := prefix + e.Name
			oldDir, newDir := had && o.Mode == filemode.Dir, e.Mode == filemode.Dir
			switch {
			case oldDir || newDir:
				var oldTree, newTree plumbing.Hash
				if oldDir {
					oldTree = o.Hash
				} else if had {
					removed.add(path, o)
				}
				if newDir {
					newTree = e.Hash
				} else {
					added.add(path, e)
				}
				if err := diff(oldTree, newTree, path+"/"); err != nil {
					return err
				}
			case !had:
				added.add(path, e)
			default:
				oldMode, _ := gitstore.EntryMode(o.Mode)
				newMode, _ := gitstore.EntryMode(e.Mode)
				if o.Hash != e.Hash || oldMode != newMode {
					added.add(path, e)
					if _, listed := gitstore.EntryMode(e.Mode); !listed {
						removed.add(path, o) // what takes its place is nothing ag lists
					}
				}
			}
		}
		for _, o := range old {
			if _, gone := before[o.Name]; !gone {
				continue
			}
			if o.Mode == filemode.Dir {
				if err := diff(o.Hash, plumbing.ZeroHash, prefix+o.Name+"/"); err != nil {
					return err
				}
				continue
			}
			removed.add(prefix+o.Name, o)
		}
		return nil
	}
	if err := diff(from, to, ""); err != nil {
		return TreeDiff{}, err
	}
	changed, err := added.resolve(ctx, b, to)
	if err != nil {
		return TreeDiff{}, err
	}
	d := TreeDiff{Changed: changed, Removed: make([]string, 0, len(removed.entries)+len(removed.files))}
	for _, e := range removed.entries {
		d.Removed = append(d.Removed, e.Path)
	}
	for _, f := range removed.files {
		d.Removed = append(d.Removed, f.path)
	}
	slices.Sort(d.Removed)
	return d, nil
}

// DiffRevisionTrees answers what changed from the tree of the revision since to rev's: the
// DiffRevisions of both stores, once each has read the two revisions.
func DiffRevisionTrees(ctx context.Context, b GitBackend, since, rev Revision) (TreeDiff, error) {
	from, err := ParseGitID(since.GitTree)
	if err != nil {
		return TreeDiff{}, fmt.Errorf("revision %s: git tree: %w", since.ID, err)
	}
	to, err := ParseGitID(rev.GitTree)
	if err != nil {
		return TreeDiff{}, fmt.Errorf("revision %s: git tree: %w", rev.ID, err)
	}
	diff, err := DiffTrees(ctx, b, NewGitObjects(ctx, b), from, to)
	if err != nil {
		return TreeDiff{}, fmt.Errorf("revision %s since %s: %w", rev.ID, since.ID, err)
	}
	return diff, nil
}

// ImportFlatTree stores an ag tree, whose blobs are stored, as git trees and answers the root.
func ImportFlatTree(ctx context.Context, b GitBackend, s *GitObjects, t repo.Tree) (plumbing.Hash, error) {
	digests := make([]string, 0, len(t))
	for _, e := range t {
		if e.GitMode() != repo.ModeGitlink {
			digests = append(digests, e.Digest)
		}
	}
	ids := make(map[string]plumbing.Hash, len(t))
	const batch = 500
	for i := 0; i < len(digests); i += batch {
		got, err := b.BlobGitIDs(ctx, digests[i:min(i+batch, len(digests))])
		if err != nil {
			return plumbing.ZeroHash, err
		}
		for d, id := range got {
			ids[d] = id
		}
	}
	files := make([]gitstore.File, 0, len(t))
	for _, e := range t {
		mode, err := gitstore.FileMode(e.Mode)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("%s: %w", e.Path, err)
		}
		if mode == filemode.Submodule {
			commit, err := ParseGitID(e.GitlinkCommit)
			if err != nil {
				return plumbing.ZeroHash, fmt.Errorf("submodule %s: %w", e.Path, err)
			}
			files = append(files, gitstore.File{Path: e.Path, Blob: commit, Mode: mode})
			continue
		}
		id, ok := ids[e.Digest]
		if !ok {
			return plumbing.ZeroHash, fmt.Errorf("blob %s of %s is not stored", e.Digest, e.Path)
		}
		files = append(files, gitstore.File{Path: e.Path, Blob: id, Mode: mode})
	}
	return gitstore.WriteTree(s, files)
}

// CommitInfo is what a mainline commit says beyond its tree and parent.
type CommitInfo struct {
	Repository    string
	RevisionID    string
	ChangeID      string // "" for a repository's first commit
	Holder        string // "<principal>|<label>"
	Message       string
	FencingTokens []uint64
	Attestation   string // digest of the attestation that validated the tree, if any
	AuthoredAt    time.Time
	CommittedAt   time.Time
	EmailDomain   string // DefaultGitEmailDomain when empty
	// Batch, for a tree validated as a batch of changes, names each of them in its order: the
	// commit then has an Ag-Change and an Ag-Author trailer per change.
	Batch []BatchedChange
	// Lane, for a tree whose attestation is of a lane's view (ADR-0024), names the lane, and
	// LaneExcluded the paths its view leaves out: the attested tree is this commit's tree
	// without them. The commit has an Ag-Lane trailer and an Ag-Lane-Excluded one per path.
	Lane         string
	LaneExcluded []string
	// ApprovedBy names the principals who approved the commit's changes (a change to a protected
	// path lands only approved), one Ag-Approved-By trailer each.
	ApprovedBy []string
	// Tasks names the task claims the commit's changes finish ("tsk_…#3"), one Ag-Task trailer
	// each.
	Tasks []string
}

// BatchedChange is one change of a batch commit.
type BatchedChange struct {
	ID     string
	Holder string // "<principal>|<label>"
}

// WriteMainlineCommit stores the commit that makes tree the mainline after parent (zero for
// the first) and answers its id. The author is the agent, the committer ag; the message ends
// with trailers naming the change, the revision, the exact holder, the lease tokens and the
// attestation, which `git log` and `git interpret-trailers` read back.
func WriteMainlineCommit(s storer.EncodedObjectStorer, tree, parent plumbing.Hash, c CommitInfo) (plumbing.Hash, error) {
	domain := c.EmailDomain
	if domain == "" {
		domain = DefaultGitEmailDomain
	}
	author, _ := ParseHolder(c.Holder)
	principal, label := author.Principal, author.Label
	name := identName(principal)
	local := emailLocal(principal)
	if label != "" {
		name = identName(label) + " (" + name + ")"
		local += "+" + emailLocal(label)
	}
	msg := c.Message
	if strings.TrimSpace(msg) == "" {
		if c.ChangeID == "" {
			msg = "Create repository " + c.Repository
		} else {
			msg = "Change " + c.ChangeID
		}
	}
	var trailers []gitstore.Trailer
	add := func(k, v string) {
		if v = strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(v, "\r", " "), "\n", " ")); v != "" {
			trailers = append(trailers, gitstore.Trailer{Key: k, Value: v})
		}
	}
	if len(c.Batch) > 0 {
		for _, b := range c.Batch {
			add("Ag-Change", b.ID)
		}
		add("Ag-Revision", c.RevisionID)
		for _, b := range c.Batch {
			add("Ag-Author", b.Holder)
		}
	} else {
		add("Ag-Change", c.ChangeID)
		add("Ag-Revision", c.RevisionID)
		add("Ag-Author", c.Holder)
	}
	if len(c.FencingTokens) > 0 {
		tokens := slices.Clone(c.FencingTokens)
		slices.Sort(tokens)
		strs := make([]string, 0, len(tokens))
		for _, t := range slices.Compact(tokens) {
			strs = append(strs, strconv.FormatUint(t, 10))
		}
		add("Ag-Lease-Tokens", strings.Join(strs, ", "))
	}
	add("Ag-Attestation", c.Attestation)
	for _, p := range slices.Compact(slices.Clone(c.ApprovedBy)) {
		add("Ag-Approved-By", p)
	}
	for _, t := range c.Tasks {
		add("Ag-Task", t)
	}
	if c.Lane != "" {
		add("Ag-Lane", c.Lane)
		for _, p := range c.LaneExcluded {
			add("Ag-Lane-Excluded", p)
		}
	}
	var parents []plumbing.Hash
	if !parent.IsZero() {
		parents = []plumbing.Hash{parent}
	}
	return gitstore.WriteCommit(s, gitstore.Commit{
		Tree:      tree,
		Parents:   parents,
		Author:    object.Signature{Name: name, Email: local + "@" + domain, When: c.AuthoredAt.UTC()},
		Committer: object.Signature{Name: "ag", Email: "ag@" + domain, When: c.CommittedAt.UTC()},
		Message:   msg,
		Trailers:  trailers,
	})
}

// WriteRevisionCommit writes the mainline commit of rev, on top of the commit parent (40 hex),
// and answers its id. c holds what the change says (Message, FencingTokens, Attestation,
// AuthoredAt, CommittedAt, EmailDomain); the rest comes from rev.
func WriteRevisionCommit(s storer.EncodedObjectStorer, rev Revision, parent string, c CommitInfo) (string, error) {
	tree, err := ParseGitID(rev.GitTree)
	if err != nil {
		return "", fmt.Errorf("revision %s: git tree: %w", rev.ID, err)
	}
	parentID, err := ParseGitID(parent)
	if err != nil {
		return "", fmt.Errorf("revision %s: parent commit: %w", rev.ID, err)
	}
	c.Repository, c.RevisionID, c.ChangeID, c.Holder = rev.Repository, rev.ID, rev.ChangeID, rev.Holder
	id, err := WriteMainlineCommit(s, tree, parentID, c)
	if err != nil {
		return "", fmt.Errorf("revision %s: commit: %w", rev.ID, err)
	}
	return id.String(), nil
}

// FirstRevision answers the git tree and commit of a new repository's first revision, and its
// tree digest when it is known without listing the tree: the empty tree with a root commit of
// its own (written to s), or, with p.GitCommit, that commit, which s must hold (ErrNotFound
// otherwise), and its tree.
func FirstRevision(s storer.EncodedObjectStorer, p CreateRepositoryParams, revisionID string, now time.Time, emailDomain string) (tree, commit plumbing.Hash, treeDigest string, err error) {
	if !p.GitCommit.IsZero() {
		c, err := object.GetCommit(s, p.GitCommit)
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return tree, commit, "", fmt.Errorf("commit %s: %w", p.GitCommit, ErrNotFound)
		}
		if err != nil {
			return tree, commit, "", fmt.Errorf("commit %s: %w", p.GitCommit, err)
		}
		return c.TreeHash, p.GitCommit, "", nil
	}
	if tree, err = gitstore.WriteTree(s, nil); err != nil {
		return tree, commit, "", err
	}
	commit, err = WriteMainlineCommit(s, tree, plumbing.ZeroHash, CommitInfo{
		Repository: p.Name, RevisionID: revisionID, Holder: p.CreatedBy,
		AuthoredAt: now, CommittedAt: now, EmailDomain: emailDomain,
	})
	return tree, commit, repo.Tree{}.Digest(), err
}

// identName keeps a name to what git's ident line can hold.
func identName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '<' || r == '>' || r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
	if s = strings.TrimSpace(s); s == "" {
		return "unknown"
	}
	return s
}

// emailLocal keeps a name to the characters an e-mail address's local part takes unquoted.
func emailLocal(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '-'
	}, s)
	if s == "" {
		return "unknown"
	}
	return s
}

// ParseGitID answers the id of a 40-hex git id, or an error.
func ParseGitID(s string) (plumbing.Hash, error) {
	if !plumbing.IsHash(s) || strings.ToLower(s) != s {
		return plumbing.ZeroHash, fmt.Errorf("%q is not a git object id (40 lowercase hex)", s)
	}
	return plumbing.NewHash(s), nil
}

// flatTrees keeps the file lists of recently listed trees, by git tree id: checkouts and
// workers list the same mainline again and again.
var flatTrees = struct {
	sync.Mutex
	maxEntries, entries int
	order               *list.List // of flatTree, most recently used first
	byID                map[plumbing.Hash]*list.Element
}{maxEntries: 1 << 19, order: list.New(), byID: map[plumbing.Hash]*list.Element{}}

type flatTree struct {
	id   plumbing.Hash
	tree repo.Tree
}

// ListTree is FlattenTree through a process-wide cache. The answer is the caller's to change.
func ListTree(ctx context.Context, b GitBackend, s storer.EncodedObjectStorer, root plumbing.Hash) (repo.Tree, error) {
	flatTrees.Lock()
	if e, ok := flatTrees.byID[root]; ok {
		flatTrees.order.MoveToFront(e)
		t := slices.Clone(e.Value.(*flatTree).tree)
		flatTrees.Unlock()
		return t, nil
	}
	flatTrees.Unlock()
	t, err := FlattenTree(ctx, b, s, root)
	if err != nil || len(t) > flatTrees.maxEntries/4 {
		return t, err
	}
	flatTrees.Lock()
	defer flatTrees.Unlock()
	if _, ok := flatTrees.byID[root]; !ok {
		flatTrees.byID[root] = flatTrees.order.PushFront(&flatTree{id: root, tree: slices.Clone(t)})
		flatTrees.entries += len(t)
		for flatTrees.entries > flatTrees.maxEntries {
			last := flatTrees.order.Back()
			ft := last.Value.(*flatTree)
			flatTrees.order.Remove(last)
			delete(flatTrees.byID, ft.id)
			flatTrees.entries -= len(ft.tree)
		}
	}
	return t, nil
}

// LegacyRevision is a mainline revision written before the git content store, as the
// migration that gives it a commit reads it.
type LegacyRevision struct {
	ID, Parent, ChangeID, Author string
	GitTree                      string // filled in by the migration already
	GitCommit                    string // "" unless an earlier run gave it one
	Message, Attestation         string // of its change, if any
	AuthoredAt, CommittedAt      time.Time
}

// LegacyCommits writes the commits of a mainline written before the git content store: chain
// is the mainline from its head back to its first revision, or to the first that has a
// commit already. It answers each written revision's commit.
func LegacyCommits(s storer.EncodedObjectStorer, repository string, chain []LegacyRevision, emailDomain string) (map[string]plumbing.Hash, error) {
	out := make(map[string]plumbing.Hash, len(chain))
	var parent plumbing.Hash
	for i := len(chain) - 1; i >= 0; i-- {
		r := chain[i]
		if r.GitCommit != "" {
			id, err := ParseGitID(r.GitCommit)
			if err != nil {
				return nil, fmt.Errorf("revision %s: %w", r.ID, err)
			}
			parent = id
			continue
		}
		tree, err := ParseGitID(r.GitTree)
		if err != nil {
			return nil, fmt.Errorf("revision %s: tree: %w", r.ID, err)
		}
		id, err := WriteMainlineCommit(s, tree, parent, CommitInfo{
			Repository: repository, RevisionID: r.ID, ChangeID: r.ChangeID, Holder: r.Author, Message: r.Message,
			Attestation: r.Attestation, AuthoredAt: r.AuthoredAt, CommittedAt: r.CommittedAt, EmailDomain: emailDomain,
		})
		if err != nil {
			return nil, fmt.Errorf("revision %s: %w", r.ID, err)
		}
		out[r.ID] = id
		parent = id
	}
	return out, nil
}
