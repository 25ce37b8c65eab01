package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/filemode"

	"github.com/ag-coord/ag/client"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
)

// protectedOverlay is what a validation changes in its checkout so that it runs the mainline's
// copy of the policy's protected paths, not the candidate's (ADR-0031): the candidate's entries
// it removes, the mainline's it writes in their place.
type protectedOverlay struct {
	from   attest.Protected
	remove []repo.Entry
	add    repo.Tree
}

// overlayFor answers the overlay of the protected paths of p onto the candidate tree, taking
// them from the mainline tree. Under a protected path where the mainline holds nothing (a
// script not yet landed), the candidate's entries stay. The candidate's entries in the way of
// the mainline's go too: a file or link where the mainline has a directory that holds them
// ("ci" a link where "ci/test.sh" is protected), and what lies under a mainline file ("test.sh/x"
// where the mainline's test.sh is a file), so that nothing is written through a link.
func overlayFor(p *client.ProtectedFrom, candidate, mainline repo.Tree) (protectedOverlay, error) {
	o := protectedOverlay{from: attest.Protected{Revision: p.Revision, Paths: p.Paths}}
	removed := map[string]bool{}
	for _, pp := range p.Paths {
		var theirs repo.Tree
		files := map[string]bool{} // the mainline's paths under pp
		dirs := map[string]bool{}  // the directories that hold them
		for _, e := range mainline {
			if repo.Covers(pp, e.Path) {
				theirs = append(theirs, e)
				files[e.Path] = true
				for _, d := range repo.Ancestors(e.Path) {
					dirs[strings.TrimSuffix(d, "/")] = true
				}
			}
		}
		if len(theirs) == 0 {
			continue
		}
		for _, e := range candidate {
			if removed[e.Path] {
				continue
			}
			if repo.Covers(pp, e.Path) || dirs[e.Path] || underAny(files, e.Path) {
				removed[e.Path] = true
				o.remove = append(o.remove, e)
			}
		}
		o.add = append(o.add, theirs...)
	}
	// What the run sees must itself be a tree git could hold: nothing under a link or a file.
	if err := checkNothingUnder(o.over(candidate)); err != nil {
		return protectedOverlay{}, fmt.Errorf("the mainline's protected paths over the candidate: %w", err)
	}
	return o, nil
}

// underAny reports whether one of the directories that hold path is among files.
func underAny(files map[string]bool, path string) bool {
	for _, d := range repo.Ancestors(path) {
		if files[strings.TrimSuffix(d, "/")] {
			return true
		}
	}
	return false
}

// apply makes the checkout at root hold the mainline's protected entries in place of the
// candidate's, writing through root (os.Root) as materialize does.
func (o protectedOverlay) apply(v *Validator, root string) error {
	dir, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("protected paths: %w", err)
	}
	defer dir.Close()
	for _, e := range o.remove {
		name, err := checkoutName(e.Path)
		if err != nil {
			return err
		}
		if err := dir.RemoveAll(name); err != nil {
			return fmt.Errorf("protected paths: remove the candidate's %s: %w", e.Path, err)
		}
	}
	for _, e := range o.add {
		name, err := checkoutName(e.Path)
		if err != nil {
			return err
		}
		if parent := filepath.Dir(name); parent != "." {
			if err := dir.MkdirAll(parent, 0o755); err != nil {
				return fmt.Errorf("protected paths: write the mainline's %s: %w", e.Path, err)
			}
		}
		// A directory the candidate's removed entries left where the mainline has a file.
		if err := dir.RemoveAll(name); err != nil {
			return fmt.Errorf("protected paths: clear %s: %w", e.Path, err)
		}
		mode, err := gitstore.FileMode(e.Mode)
		if err != nil {
			return fmt.Errorf("protected paths: %s: %w", e.Path, err)
		}
		if mode == filemode.Submodule {
			err = dir.Mkdir(name, 0o755)
		} else {
			_, err = v.copyBlob(dir, name, e, mode)
		}
		if err != nil {
			return fmt.Errorf("protected paths: write the mainline's %s: %w", e.Path, err)
		}
	}
	return nil
}

// protectedOverlay fetches what a job with protected paths needs beside its candidate: the
// mainline revision's tree and the blobs of the entries the overlay writes.
func (v *Validator) protectedOverlay(ctx context.Context, p client.ValidatePayload, candidate repo.Tree) (*protectedOverlay, error) {
	if p.Protected == nil {
		return nil, nil
	}
	mainline, err := v.mainlineTree(ctx, p.Repository, p.Protected.Revision)
	if err != nil {
		return nil, err
	}
	o, err := overlayFor(p.Protected, candidate, mainline)
	if err != nil {
		return nil, Permanent(err)
	}
	if err := v.fetchBlobs(ctx, o.add); err != nil {
		return nil, err
	}
	return &o, nil
}

// over answers the tree a run sees: tree (the candidate) with the overlay's entries in place of
// those it removes, sorted by path.
func (o *protectedOverlay) over(tree repo.Tree) repo.Tree {
	if o == nil {
		return tree
	}
	removed := make(map[string]bool, len(o.remove))
	for _, e := range o.remove {
		removed[e.Path] = true
	}
	out := make(repo.Tree, 0, len(tree)+len(o.add))
	for _, e := range tree {
		if !removed[e.Path] {
			out = append(out, e)
		}
	}
	out = append(out, o.add...)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// mainlineTrees bounds the mainline trees a validator keeps: the candidates of a queue are built
// for the same mainline, and each would fetch its whole tree again.
const mainlineTrees = 4

// mainlineTree answers the tree of repository@revision, a mainline the protected paths come
// from, fetched once: a revision's tree never changes.
func (v *Validator) mainlineTree(ctx context.Context, repository, revision string) (repo.Tree, error) {
	key := repository + "@" + revision
	v.treesMu.Lock()
	tree, ok := v.trees[key]
	v.treesMu.Unlock()
	if ok {
		return tree, nil
	}
	tree, err := v.fetchRevisionTree(ctx, repository, revision, "")
	if err != nil {
		return nil, err
	}
	v.treesMu.Lock()
	if v.trees == nil || len(v.trees) >= mainlineTrees {
		v.trees = map[string]repo.Tree{}
	}
	v.trees[key] = tree
	v.treesMu.Unlock()
	return tree, nil
}
