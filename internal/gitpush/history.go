package gitpush

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// maxWalk bounds the commits a push's history is walked through to meet the mainline: a push
// of more commits than that since the last pull is refused, asking for a pull first.
const maxWalk = 10000

// Meeting is what a commit of the pushed history is to the mainline, as the caller knows it.
type Meeting struct {
	// Revision is the mainline revision the commit stands for: its own commit, or the one a
	// change pushed from that commit landed as. "" when the commit stands for none.
	Revision string
	// Pushed is set when the commit stands for Revision as a pushed commit that landed, not as
	// the revision's own commit: the revision's tree may differ from the commit's where others'
	// changes landed meanwhile.
	Pushed bool
}

// Base is where a pushed history meets the mainline: the commit whose tree the push is diffed
// against, and the revision its edits are based on.
type Base struct {
	Commit plumbing.Hash
	Tree   plumbing.Hash
	Meeting
}

// FindBase walks the history of tip (newest first, each commit's parents in order) to the first
// commit meet says stands for a mainline revision. meet answers an error for a commit that
// makes the push wrong to take (a push of it still in the queue), which FindBase answers as it
// is. A history that never meets the mainline is refused.
func FindBase(ctx context.Context, objs *Objects, tip plumbing.Hash, meet func(commit plumbing.Hash) (Meeting, error)) (Base, error) {
	queue := []plumbing.Hash{tip}
	seen := map[plumbing.Hash]bool{tip: true}
	for len(queue) > 0 {
		if err := ctx.Err(); err != nil {
			return Base{}, err
		}
		if len(seen) > maxWalk {
			return Base{}, refuse("the push holds more than %d commits the mainline does not: `git pull --rebase`, then push", maxWalk)
		}
		id := queue[0]
		queue = queue[1:]
		m, err := meet(id)
		if err != nil {
			return Base{}, err
		}
		c, err := object.GetCommit(objs, id)
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return Base{}, refuse("the push names the commit %s, which it does not carry and the server does not hold: fetch first", id)
		}
		if err != nil {
			return Base{}, fmt.Errorf("commit %s: %w", id, err)
		}
		if m.Revision != "" {
			return Base{Commit: id, Tree: c.TreeHash, Meeting: m}, nil
		}
		for _, p := range c.ParentHashes {
			if !seen[p] {
				seen[p] = true
				queue = append(queue, p)
			}
		}
	}
	return Base{}, refuse("the pushed history shares no commit with the mainline: `git pull --rebase` from ag, then push")
}
