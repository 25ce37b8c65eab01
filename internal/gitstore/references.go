package gitstore

import (
	"errors"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Reference is an object's reference to another: a commit's tree or parent, a tree's entry.
type Reference struct {
	From plumbing.Hash // the object that names it
	What string        // "tree", "parent commit", "blob of NAME", ...
	ID   plumbing.Hash
}

// References decodes a tree or commit (o, whose content is data) and answers what it names. A
// tree must be canonical, as git's fsck on every clone would require: in git's order, each name
// once, modes as git writes them. Its entries must be ones ag takes (EntryProblem:
// names ag could write, modes git writes): the history is served to every clone.
// A submodule (gitlink) names a commit of another repository, which ag does not hold and git
// does not look for: it is no reference here, as it is none to git's connectivity check.
func References(o plumbing.EncodedObject, data []byte) ([]Reference, error) {
	id := o.Hash()
	switch o.Type() {
	case plumbing.TreeObject:
		entries, err := DecodeCanonicalTree(data)
		if err != nil {
			return nil, err
		}
		refs := make([]Reference, 0, len(entries))
		for _, e := range entries {
			if problem := EntryProblem(e.Name, e.Mode); problem != "" {
				return nil, fmt.Errorf("entry %q: %s", truncateText(e.Name, 80), problem)
			}
			switch e.Mode {
			case filemode.Dir:
				refs = append(refs, Reference{From: id, What: "tree " + e.Name, ID: e.Hash})
			case filemode.Submodule:
				if e.Hash.IsZero() { // nothing else would refuse it, and git's fsck does
					return nil, fmt.Errorf("entry %q: a submodule of the null commit", truncateText(e.Name, 80))
				}
			default:
				refs = append(refs, Reference{From: id, What: "blob of " + e.Name, ID: e.Hash})
			}
		}
		return refs, nil
	case plumbing.CommitObject:
		var c object.Commit
		if err := c.Decode(o); err != nil {
			return nil, err
		}
		if c.TreeHash.IsZero() {
			return nil, errors.New("no tree")
		}
		refs := []Reference{{From: id, What: "tree", ID: c.TreeHash}}
		for _, p := range c.ParentHashes {
			refs = append(refs, Reference{From: id, What: "parent commit", ID: p})
		}
		return refs, nil
	}
	return nil, fmt.Errorf("a %s is not uploaded here", o.Type())
}
