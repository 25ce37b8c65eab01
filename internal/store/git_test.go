package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// memoryGit is a store.GitBackend in memory: trees and commits, and blobs by digest.
type memoryGit struct {
	objects map[plumbing.Hash]store.GitObject
	blobs   map[string][]byte // by sha256 digest
}

func (m *memoryGit) ReadGitObject(_ context.Context, id plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	if o, ok := m.objects[id]; ok {
		return o.Type, o.Data, nil
	}
	for _, b := range m.blobs {
		if gitstore.BlobID(b) == id {
			return plumbing.BlobObject, b, nil
		}
	}
	return 0, nil, store.ErrNotFound
}

func (m *memoryGit) PutGitObjects(_ context.Context, objs []store.GitObject) error {
	for _, o := range objs {
		m.objects[o.ID] = o
	}
	return nil
}

func (m *memoryGit) BlobGitIDs(_ context.Context, digests []string) (map[string]plumbing.Hash, error) {
	out := map[string]plumbing.Hash{}
	for _, d := range digests {
		if b, ok := m.blobs[d]; ok {
			out[d] = gitstore.BlobID(b)
		}
	}
	return out, nil
}

func (m *memoryGit) BlobsByGitID(_ context.Context, ids []plumbing.Hash) (map[plumbing.Hash]store.BlobRef, error) {
	out := map[plumbing.Hash]store.BlobRef{}
	for d, b := range m.blobs {
		id := gitstore.BlobID(b)
		for _, want := range ids {
			if want == id {
				out[id] = store.BlobRef{Digest: d, Size: uint64(len(b))}
			}
		}
	}
	return out, nil
}

// TestRebaseGit ensures edits apply on top of a mainline that moved on elsewhere, and that an
// edited path that moved on is a conflict, a file under a file a collision.
func TestRebaseGit(t *testing.T) {
	ctx := context.Background()
	m := &memoryGit{objects: map[plumbing.Hash]store.GitObject{}, blobs: map[string][]byte{}}
	d := func(s string) string {
		m.blobs[repo.Digest([]byte(s))] = []byte(s)
		return repo.Digest([]byte(s))
	}
	put := func(path, content string) repo.FileEdit {
		return repo.FileEdit{Path: path, Digest: d(content), Size: uint64(len(content))}
	}
	objs := store.NewGitObjects(ctx, m)
	treeOf := func(t repo.Tree) plumbing.Hash {
		id, err := store.ImportFlatTree(ctx, m, objs, t)
		if err != nil {
			panic(err)
		}
		if err := objs.Flush(); err != nil {
			panic(err)
		}
		return id
	}
	entry := func(path, content string) repo.Entry {
		return repo.Entry{Path: path, Digest: d(content), Size: uint64(len(content))}
	}
	base := treeOf(repo.Tree{entry("a", "a1"), entry("b", "b1")})
	mainline := treeOf(repo.Tree{entry("a", "a1"), entry("b", "b2"), entry("c", "c1")})
	list := func(root plumbing.Hash) repo.Tree {
		t.Helper()
		if err := objs.Flush(); err != nil {
			t.Fatal(err)
		}
		got, err := store.FlattenTree(ctx, m, objs, root)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	got, err := store.RebaseGit(ctx, m, objs, base, mainline, []repo.FileEdit{put("a", "a2"), put("new/x", "x")})
	if err != nil {
		t.Fatal(err)
	}
	want := repo.Tree{entry("a", "a2"), entry("b", "b2"), entry("c", "c1"), entry("new/x", "x")}
	if l := list(got); l.Digest() != want.Digest() {
		t.Fatalf("rebase = %v, want %v", l, want)
	}
	got, err = store.RebaseGit(ctx, m, objs, base, mainline, []repo.FileEdit{{Path: "a", Delete: true}})
	if err != nil || len(list(got)) != 2 {
		t.Fatalf("delete a = %v, %v", got, err)
	}
	var conflict *repo.ConflictError
	if _, err := store.RebaseGit(ctx, m, objs, base, mainline, []repo.FileEdit{put("b", "b3")}); !errors.As(err, &conflict) || conflict.Path != "b" {
		t.Fatalf("edit of a path that moved on = %v, want a conflict on b", err)
	}
	if _, err := store.RebaseGit(ctx, m, objs, base, mainline, []repo.FileEdit{{Path: "c", Delete: true}}); !errors.As(err, &conflict) {
		t.Fatalf("edit of a path added in the mainline = %v, want a conflict", err)
	}
	var collision *repo.CollisionError
	if _, err := store.RebaseGit(ctx, m, objs, base, mainline, []repo.FileEdit{put("a/inner", "i")}); !errors.As(err, &collision) {
		t.Fatalf("a file under the file a = %v, want a collision", err)
	}
	if _, err := store.RebaseGit(ctx, m, objs, base, mainline, []repo.FileEdit{{Path: "z", Digest: repo.Digest([]byte("never stored")), Size: 12}}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an edit whose blob is not stored = %v, want not found", err)
	}
}
