package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// testDiffRevisions: what DiffRevisions answers between any two revisions of a history, in
// either direction, is what the two whole trees differ by: the entries the second has that the
// first has not or has otherwise (content, mode, a submodule's commit), and the paths only the
// first has. The history moves a file into a new directory, makes a file a directory and a
// directory a file, deletes a whole directory, changes modes and moves a submodule.
func testDiffRevisions(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	commitA, commitB := strings.Repeat("5e", 20), strings.Repeat("6f", 20)
	r := b.importModes(t, "web", nil, map[string]modeFile{
		"README.md":       {"", "# web\n"},
		"run.sh":          {repo.ModeExecutable, "#!/bin/sh\necho run\n"},
		"docs/readme":     {repo.ModeSymlink, "../README.md"},
		"src/a.go":        {"", "package a\n"},
		"src/deep/x/y.go": {"", "package y\n"},
		"vendor/lib":      {repo.ModeGitlink, commitA},
		"old/one":         {"", "1\n"},
		"old/two/three":   {"", "3\n"},
	})
	l := b.acquire(t, "web", alice, time.Hour, "README.md", "run.sh", "docs/", "src/", "vendor/", "old/", "new/", "tool")
	edit := func(base string, edits ...fileEdit) store.IntegrateParams {
		return integrateParams("web", base, alice, []uint64{l.FencingToken}, edits...)
	}
	chain := []string{r.Mainline}
	land := func(p store.IntegrateParams) {
		t.Helper()
		chain = append(chain, b.mustIntegrate(t, p).IntegratedRevision)
	}
	head := func() string { return chain[len(chain)-1] }
	// One file deep in the tree; chmod -x alone; a link retargeted; the submodule moved.
	land(withGitlink(withMode(edit(head(), put("src/deep/x/y.go", "package y // 2\n"), put("run.sh", "#!/bin/sh\necho run\n"),
		put("docs/readme", "../run.sh")), "run.sh", repo.ModeFile), "vendor/lib", commitB))
	// A whole directory deleted, a file made into a new directory's file.
	land(edit(head(), del("old/one"), del("old/two/three"), put("new/dir/file", "n\n"), del("README.md")))
	// A file made a directory, and a directory made a file.
	land(edit(head(), put("old/one/inside", "i\n"), del("src/deep/x/y.go"), put("tool", "t\n")))
	land(edit(head(), put("src/deep", "now a file\n"), put("run.sh", "#!/bin/sh\necho run\n")))
	// Nothing but a message: the same tree.
	land(edit(head(), put("tool", "t\n")))

	for i, since := range chain {
		for j, rev := range chain {
			what := fmt.Sprintf("DiffRevisions from revision %d to %d", i, j)
			got, diff, err := b.rs.DiffRevisions(b.ctx, "web", since, rev)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			whole := b.revision(t, "web", rev)
			if got.ID != rev || got.Parent != whole.Parent || got.GitTree != whole.GitTree || got.GitCommit != whole.GitCommit || got.Tree != nil {
				t.Fatalf("%s: the revision is %+v, want %+v without its tree", what, got, whole)
			}
			wantChanged, wantRemoved := treeDifference(b.revision(t, "web", since).Tree, whole.Tree)
			assertTree(t, what+": changed", diff.Changed, wantChanged)
			if !slices.Equal(diff.Removed, wantRemoved) {
				t.Fatalf("%s: removed %q, want %q", what, diff.Removed, wantRemoved)
			}
			if i != j && i+1 == j && len(diff.Changed)+len(diff.Removed) == 0 && j != len(chain)-1 {
				t.Fatalf("%s: nothing changed, but the change did", what)
			}
		}
	}

	other := b.createRepo(t, "api")
	_, _, err := b.rs.DiffRevisions(b.ctx, "web", other.Mainline, head())
	wantErr(t, "DiffRevisions since another repository's revision", err, store.ErrNotFound)
	_, _, err = b.rs.DiffRevisions(b.ctx, "web", head(), other.Mainline)
	wantErr(t, "DiffRevisions to another repository's revision", err, store.ErrNotFound)
	_, _, err = b.rs.DiffRevisions(b.ctx, "web", "rev_unknown", head())
	wantErr(t, "DiffRevisions since an unknown revision", err, store.ErrNotFound)
}

// treeDifference answers what to has that from has not, or has otherwise, and the paths only
// from has, from the two whole trees.
func treeDifference(from, to repo.Tree) (changed repo.Tree, removed []string) {
	before := map[string]repo.Entry{}
	for _, e := range from {
		before[e.Path] = e
	}
	changed, removed = repo.Tree{}, []string{}
	for _, e := range to {
		if o, ok := before[e.Path]; !ok || o != e {
			changed = append(changed, e)
		}
		delete(before, e.Path)
	}
	for p := range before {
		removed = append(removed, p)
	}
	slices.Sort(removed)
	return changed, removed
}
