package checkout

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/repo"
)

// IntegrateRequest is what Integrate sends and how it follows it.
type IntegrateRequest struct {
	Message string
	// Only selects the edits at or under these repository paths ("a/" for a directory); none
	// selects every local edit.
	Only []string
	// Moves are submodules moved to other commits, path → commit, in the same change.
	Moves map[string]string
	// Follow, when set, waits for a change not yet final, showing its progress on FollowTo (nil:
	// nowhere).
	Follow   bool
	FollowTo io.Writer
	// FollowFor, when not 0, bounds the follow: the change is then answered as it stands, not
	// final, so that a caller with a timeout of its own (an MCP host's) keeps track of it.
	FollowFor time.Duration
	// Lock, when set, is held while the checkout is synced to the integrated revision: the MCP
	// server serializes the calls that rewrite the checkout's state.
	Lock sync.Locker
	// Task, when set, is the task claim the change carries and finishes when it lands: "tsk_…"
	// for the claim of that task the checkout recorded (ag task claim), or "tsk_…#3" for that
	// claim. The server refuses the change unless the claim is current and the holder's; once
	// the change lands, the checkout forgets the claim.
	Task string
}

// IntegrateResult is a change Integrate sent, and what became of the checkout.
type IntegrateResult struct {
	Change *agwpv1.Change
	// SyncErr is why the checkout could not be brought to the integrated revision: the change
	// is in the mainline all the same.
	SyncErr error
}

// NothingError is an Integrate with no edit to send: none at all, or none under Only.
type NothingError struct {
	All  []Edit // every local edit of the checkout
	Only []string
}

func (e *NothingError) Error() string { return "nothing to integrate: no local edits" }

// NoLeasesError is an Integrate refused because the checkout holds no lease: the server would
// refuse every path.
type NoLeasesError struct {
	Edits []Edit
	Moves map[string]string
}

func (e *NoLeasesError) Error() string {
	return "no leases held in this checkout: lease the files you edited (" + e.Paths() + ")"
}

// Paths names what the change would have sent: the edits, then the submodules moved.
func (e *NoLeasesError) Paths() string {
	paths := slices.Sorted(maps.Keys(e.Moves))
	if len(e.Edits) > 0 {
		paths = append([]string{EditPaths(e.Edits)}, paths...)
	}
	return strings.Join(paths, ", ")
}

// FollowError is a change that was sent but could not be followed to its outcome.
type FollowError struct {
	Change *agwpv1.Change // as sent
	Err    error
}

func (e *FollowError) Error() string { return e.Err.Error() }
func (e *FollowError) Unwrap() error { return e.Err }

// Integrate is the one integrate flow of ag integrate and the MCP tool integrate: the local edits
// selected, refused while any holds conflict markers or the checkout holds no lease, sent as one
// change under the checkout's leases, followed when asked, and, once integrated, the checkout
// brought to the new mainline (the edited paths already match it). A refusal of the server is
// answered as its error; the edges word it for their readers.
func (ws *Workspace) Integrate(ctx context.Context, req IntegrateRequest) (*IntegrateResult, error) {
	// What an integrate allocates is nearly all alive until it ends, as a scan's is (holdGC):
	// the index its two scans share, the contents it sends, the files the sync writes. At
	// 17,839 files a collection between the two scans marked the index's entries again, a
	// sixth of the command's CPU.
	defer holdGC()()
	var claim TaskClaim
	if req.Task != "" {
		var err error
		if claim, err = ws.Checkout.TaskClaimOf(req.Task); err != nil {
			return nil, err
		}
	}
	all, err := ws.Checkout.LocalEdits()
	if err != nil {
		return nil, err
	}
	edits := all
	if len(req.Only) > 0 {
		edits = slices.DeleteFunc(slices.Clone(all), func(e Edit) bool {
			return !slices.ContainsFunc(req.Only, func(p string) bool { return repo.Covers(p, e.Path) })
		})
	}
	if len(edits) == 0 && len(req.Moves) == 0 {
		return nil, &NothingError{All: all, Only: req.Only}
	}
	if err := ws.Checkout.Unresolved(edits); err != nil {
		return nil, err
	}
	if len(ws.Checkout.Leases) == 0 {
		return nil, &LeaseError{&NoLeasesError{Edits: edits, Moves: req.Moves}}
	}
	change, err := ws.send(ctx, edits, req.Moves, req.Message, claim)
	if err != nil {
		if claim.TaskID != "" && strings.Contains(err.Error(), claim.TaskID) {
			return nil, fmt.Errorf("task claim %s: %w", claim, err)
		}
		return nil, err
	}
	if req.Follow && !FinalChange(change.GetState()) {
		followed, err := ws.follow(ctx, req, change)
		if err != nil {
			return nil, &FollowError{Change: change, Err: err}
		}
		change = followed
	}
	res := &IntegrateResult{Change: change}
	if change.GetState() == agwpv1.ChangeState_CHANGE_STATE_INTEGRATED {
		res.SyncErr = ws.syncAfter(ctx, req.Lock, change.GetIntegratedRevision())
		if claim.TaskID != "" {
			// The task is done: its claim fences nothing any more. Forgetting it is tidying, and
			// a record left behind is dropped by the next renewal or release the server refuses.
			_ = ws.Checkout.UpdateTasks(func(s *TaskState) { s.Forget(claim.TaskID) })
		}
	}
	return res, nil
}

// follow follows change until it is final, or for req.FollowFor when set: then it answers the
// change as it stands.
func (ws *Workspace) follow(ctx context.Context, req IntegrateRequest, change *agwpv1.Change) (*agwpv1.Change, error) {
	if req.FollowFor <= 0 {
		return FollowChange(ctx, req.FollowTo, ws.Client, change)
	}
	bounded, cancel := context.WithTimeout(ctx, req.FollowFor)
	followed, err := FollowChange(bounded, req.FollowTo, ws.Client, change)
	cancel()
	if err == nil || ctx.Err() != nil || bounded.Err() == nil {
		return followed, err
	}
	got, err := ws.Client.Repos.GetChange(ctx, &agwpv1.GetChangeRequest{ChangeId: change.GetId()})
	if err != nil {
		return nil, err
	}
	return got.GetChange(), nil
}

// syncAfter brings the checkout, read afresh, to revision under lock (when set).
func (ws *Workspace) syncAfter(ctx context.Context, lock sync.Locker, revision string) error {
	if lock != nil {
		lock.Lock()
		defer lock.Unlock()
	}
	fresh, err := Open(ctx, ws.Checkout.Root(), ws.Client)
	if err != nil {
		return err
	}
	fresh.Checkout.takeIndexOf(ws.Checkout)
	_, err = SyncTo(ctx, fresh, revision)
	return err
}
