package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/store"
)

// gitTreeOf answers the git tree id of files (path → content), as git computes it.
func gitTreeOf(t *testing.T, files map[string]string) string {
	t.Helper()
	contents := make(map[string][]byte, len(files))
	for p, c := range files {
		contents[p] = []byte(c)
	}
	id, err := gitstore.WriteFiles(memory.NewStorage(), contents)
	if err != nil {
		t.Fatalf("git tree of %v: %v", files, err)
	}
	return id.String()
}

// commitOf reads a commit the store holds.
func (b *rbundle) commitOf(t *testing.T, id string) *object.Commit {
	t.Helper()
	typ, data, err := b.rs.ReadGitObject(b.ctx, plumbing.NewHash(id))
	if err != nil || typ != plumbing.CommitObject {
		t.Fatalf("ReadGitObject(%s) = %s, %v; want a commit", id, typ, err)
	}
	o := &plumbing.MemoryObject{}
	o.SetType(typ)
	if _, err := o.Write(data); err != nil {
		t.Fatal(err)
	}
	if o.Hash().String() != id {
		t.Fatalf("ReadGitObject(%s) answered an object whose id is %s", id, o.Hash())
	}
	c := &object.Commit{}
	if err := c.Decode(o); err != nil {
		t.Fatalf("decode commit %s: %v", id, err)
	}
	return c
}

// wantCommit checks rev's mainline commit: its tree is rev's, its parent the commit of rev's
// parent, its author the revision's, and its trailers name the revision, the change, the
// author and each of trailers ("Key: value").
func (b *rbundle) wantCommit(t *testing.T, rev store.Revision, message string, trailers ...string) *object.Commit {
	t.Helper()
	if rev.GitCommit == "" {
		t.Fatalf("revision %s has no commit", rev.ID)
	}
	c := b.commitOf(t, rev.GitCommit)
	if c.TreeHash.String() != rev.GitTree {
		t.Fatalf("commit %s has tree %s, want the revision's %s", rev.GitCommit, c.TreeHash, rev.GitTree)
	}
	var wantParents []string
	if rev.Parent != "" {
		parent := b.revision(t, rev.Repository, rev.Parent)
		wantParents = []string{parent.GitCommit}
	}
	var parents []string
	for _, p := range c.ParentHashes {
		parents = append(parents, p.String())
	}
	if !slices.Equal(parents, wantParents) {
		t.Fatalf("commit %s has parents %v, want %v", rev.GitCommit, parents, wantParents)
	}
	principal, label, _ := strings.Cut(rev.Holder, "|")
	wantEmail := principal
	if label != "" {
		wantEmail += "+" + label
	}
	wantEmail += "@" + store.DefaultGitEmailDomain
	if c.Author.Email != wantEmail || c.Committer.Name != "ag" {
		t.Fatalf("commit %s: author %s <%s>, committer %s; want the author's address %s and committer ag",
			rev.GitCommit, c.Author.Name, c.Author.Email, c.Committer.Name, wantEmail)
	}
	if !strings.HasPrefix(c.Message, message+"\n") {
		t.Fatalf("commit %s: message %q, want it to start with %q", rev.GitCommit, c.Message, message)
	}
	want := append([]string{"Ag-Revision: " + rev.ID, "Ag-Author: " + rev.Holder}, trailers...)
	if rev.ChangeID != "" {
		want = append(want, "Ag-Change: "+rev.ChangeID)
	}
	lines := strings.Split(c.Message, "\n")
	for _, w := range want {
		if !slices.Contains(lines, w) {
			t.Fatalf("commit %s: message %q lacks the trailer %q", rev.GitCommit, c.Message, w)
		}
	}
	return c
}

// tokensTrailer is the trailer naming lease tokens.
func tokensTrailer(tokens ...uint64) string {
	s := make([]string, len(tokens))
	for i, t := range tokens {
		s[i] = fmt.Sprint(t)
	}
	return "Ag-Lease-Tokens: " + strings.Join(s, ", ")
}
