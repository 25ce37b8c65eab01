package storetest

import (
	"bytes"
	"slices"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/store"
)

// shallowHistory is a history as a shallow clone holds it: two commits whose parents are
// absent (the boundary), and head, a merge of both.
type shallowHistory struct {
	head     plumbing.Hash
	boundary []plumbing.Hash // sorted
}

// storeShallowHistory stores a shallow history as an import uploads one: its blob, its trees,
// and its commits, the boundary recorded as stored without their parents.
func (b *rbundle) storeShallowHistory(t *testing.T) shallowHistory {
	t.Helper()
	if err := b.rs.PutBlobs(b.ctx, []store.Blob{blobOf("a\n")}); err != nil {
		t.Fatalf("PutBlobs: %v", err)
	}
	objs := store.NewGitObjects(b.ctx, nil)
	root, err := gitstore.WriteTree(objs, []gitstore.File{{Path: "a.txt", Blob: gitstore.BlobID([]byte("a\n"))}})
	if err != nil {
		t.Fatal(err)
	}
	sig := object.Signature{Name: "Dev", Email: "dev@example.com", When: b.clk.Now()}
	var h shallowHistory
	for _, absent := range []string{"1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"} {
		c, err := gitstore.WriteCommit(objs, gitstore.Commit{Tree: root, Parents: []plumbing.Hash{plumbing.NewHash(absent)},
			Author: sig, Committer: sig, Message: "Below it, the history was not cloned"})
		if err != nil {
			t.Fatal(err)
		}
		h.boundary = append(h.boundary, c)
	}
	if h.head, err = gitstore.WriteCommit(objs, gitstore.Commit{Tree: root, Parents: h.boundary, Author: sig, Committer: sig, Message: "Merge"}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(h.boundary, func(x, y plumbing.Hash) int { return bytes.Compare(x[:], y[:]) })
	pending, err := objs.TakePending()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.rs.RecordShallowCommits(b.ctx, h.boundary); err != nil {
		t.Fatalf("RecordShallowCommits: %v", err)
	}
	if err := b.rs.PutGitObjects(b.ctx, pending); err != nil {
		t.Fatalf("PutGitObjects: %v", err)
	}
	return h
}

// testShallowHistory: a repository started at a shallow history keeps where its history stops,
// sorted, in every answer that carries the repository; the store tells whether any commit was
// ever stored without its parents.
func testShallowHistory(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	whole := b.createRepo(t, "whole")
	if whole.Shallow != nil {
		t.Fatalf("a repository created empty has the shallow commits %v", whole.Shallow)
	}
	if held, err := b.rs.HasShallowCommits(b.ctx); err != nil || held {
		t.Fatalf("HasShallowCommits of a store that never recorded one = %v, %v; want false", held, err)
	}
	if err := b.rs.RecordShallowCommits(b.ctx, nil); err != nil {
		t.Fatalf("RecordShallowCommits of none: %v", err)
	}
	h := b.storeShallowHistory(t)
	if err := b.rs.RecordShallowCommits(b.ctx, h.boundary); err != nil {
		t.Fatalf("RecordShallowCommits of commits recorded already: %v", err)
	}
	if held, err := b.rs.HasShallowCommits(b.ctx); err != nil || !held {
		t.Fatalf("HasShallowCommits after a record = %v, %v; want true", held, err)
	}

	// Given out of order, kept sorted.
	r, err := b.rs.CreateRepository(b.ctx, store.CreateRepositoryParams{Name: "shallow", CreatedBy: "admin",
		GitCommit: h.head, Shallow: []plumbing.Hash{h.boundary[1], h.boundary[0]}})
	if err != nil {
		t.Fatalf("CreateRepository at a shallow history: %v", err)
	}
	want := store.Repository{Name: "shallow", Mainline: r.Mainline, MainlineCommit: h.head.String(), CreatedAt: epoch, Shallow: h.boundary}
	assertFields(t, "CreateRepository at a shallow history", r, want)
	assertFields(t, "GetRepository of it", b.repository(t, "shallow"), want)
	first := b.revision(t, "shallow", r.Mainline)
	if first.GitCommit != h.head.String() {
		t.Fatalf("the first revision's commit is %s, want the history's head %s", first.GitCommit, h.head)
	}
	listed, _, err := b.rs.ListRepositories(b.ctx, store.ListRepositoriesParams{Limit: 10})
	if err != nil || len(listed) != 2 {
		t.Fatalf("ListRepositories = %v, %v", listed, err)
	}
	assertFields(t, "ListRepositories' shallow repository", listed[0], want)
	assertFields(t, "ListRepositories' whole repository", listed[1], whole)
	set := b.setValidation(t, "shallow", []byte(`{"command": ["true"]}`))
	if !slices.Equal(set.Shallow, h.boundary) {
		t.Fatalf("SetValidation answered the shallow commits %v, want %v", set.Shallow, h.boundary)
	}
}
