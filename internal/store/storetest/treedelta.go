package storetest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/ag-coord/ag/internal/store"
)

// testTreeDeltas: a tree an integrate writes in place of a stored one is kept as a delta
// against that one's anchor (a tree kept whole), and every tree of every revision reads back
// whole, by ReadGitObject and ReadGitObjects, as its id says. A delta that would make another
// tree than its id, and one whose anchor is a delta itself, are read as errors, never as a
// tree.
func testTreeDeltas(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	anchors, ok := b.rs.(store.GitAnchorReader)
	if !ok {
		t.Fatalf("the store tells no tree's anchor (store.GitAnchorReader)")
	}
	files := map[string]modeFile{}
	for i := range 30 {
		files[fmt.Sprintf("file-%02d.txt", i)] = modeFile{"", fmt.Sprintf("%d\n", i)}
		files[fmt.Sprintf("dir/sub-%02d.txt", i)] = modeFile{"", fmt.Sprintf("sub %d\n", i)}
	}
	r := b.importModes(t, "web", nil, files)
	l := b.acquire(t, "web", alice, time.Hour, "dir/", "file-00.txt")
	revisions := []string{r.Mainline}
	for i := range 5 {
		p := integrateParams("web", revisions[len(revisions)-1], alice, []uint64{l.FencingToken}, put("dir/sub-07.txt", fmt.Sprintf("version %d\n", i)))
		if i == 2 {
			p = integrateParams("web", revisions[len(revisions)-1], alice, []uint64{l.FencingToken}, put("dir/sub-07.txt", "version 2\n"), put("file-00.txt", "zero, 2\n"))
		}
		revisions = append(revisions, b.mustIntegrate(t, p).IntegratedRevision)
	}
	var roots, all []plumbing.Hash
	for _, id := range revisions {
		root, err := store.ParseGitID(b.revision(t, "web", id).GitTree)
		if err != nil {
			t.Fatal(err)
		}
		roots = append(roots, root)
		all = append(all, root)
		typ, data, err := b.rs.ReadGitObject(b.ctx, root)
		if err != nil || typ != plumbing.TreeObject || plumbing.ComputeHash(typ, data) != root {
			t.Fatalf("ReadGitObject of the root tree %s of %s: %s, %v; want the tree its id names", root, id, typ, err)
		}
		tree := &object.Tree{}
		o := &plumbing.MemoryObject{}
		o.SetType(plumbing.TreeObject)
		_, _ = o.Write(data)
		if err := tree.Decode(o); err != nil {
			t.Fatal(err)
		}
		for _, e := range tree.Entries {
			if e.Name == "dir" {
				all = append(all, e.Hash)
			}
		}
	}
	objs, err := b.rs.ReadGitObjects(b.ctx, all)
	if err != nil {
		t.Fatalf("ReadGitObjects of every tree: %v", err)
	}
	if len(objs) != len(uniq(all)) {
		t.Fatalf("ReadGitObjects answered %d trees, want %d", len(objs), len(uniq(all)))
	}
	for _, o := range objs {
		if plumbing.ComputeHash(o.Type, o.Data) != o.ID {
			t.Fatalf("ReadGitObjects answered %s with data whose id is %s", o.ID, plumbing.ComputeHash(o.Type, o.Data))
		}
	}
	got, err := anchors.GitAnchors(b.ctx, roots)
	if err != nil {
		t.Fatalf("GitAnchors: %v", err)
	}
	if got[roots[0]] != roots[0] {
		t.Fatalf("the imported root tree's anchor is %s, want itself: kept whole", got[roots[0]])
	}
	for i, root := range roots[1:] {
		if got[root] != roots[0] {
			t.Fatalf("root tree %d is kept against %s, want a delta against the imported one %s", i+1, got[root], roots[0])
		}
	}

	// A delta that makes another tree than its id, and one against an anchor that is a delta.
	_, whole, err := b.rs.ReadGitObject(b.ctx, roots[0])
	if err != nil {
		t.Fatal(err)
	}
	_, second, err := b.rs.ReadGitObject(b.ctx, roots[1])
	if err != nil {
		t.Fatal(err)
	}
	other := bytes.Replace(second, []byte("file-01.txt"), []byte("file-99.txt"), 1)
	lying := plumbing.ComputeHash(plumbing.TreeObject, append([]byte("100644 lie\x00"), make([]byte, 20)...))
	onDelta := plumbing.ComputeHash(plumbing.TreeObject, other)
	if err := b.rs.PutGitObjects(b.ctx, []store.GitObject{
		{ID: lying, Type: plumbing.TreeObject, Data: other, Delta: append(roots[0][:], packfile.DiffDelta(whole, other)...)},
		{ID: onDelta, Type: plumbing.TreeObject, Data: other, Delta: append(roots[1][:], packfile.DiffDelta(second, other)...)},
	}); err != nil {
		t.Fatalf("PutGitObjects of deltas: %v", err)
	}
	for what, id := range map[string]plumbing.Hash{"a delta making another tree": lying, "a delta against a delta": onDelta} {
		if typ, data, err := b.rs.ReadGitObject(b.ctx, id); err == nil {
			t.Fatalf("%s: ReadGitObject answered a %s of %d bytes, want an error", what, typ, len(data))
		}
		if objs, err := b.rs.ReadGitObjects(b.ctx, []plumbing.Hash{id}); err == nil {
			t.Fatalf("%s: ReadGitObjects answered %d objects, want an error", what, len(objs))
		}
	}
}

func uniq(ids []plumbing.Hash) map[plumbing.Hash]bool {
	out := map[plumbing.Hash]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out
}
