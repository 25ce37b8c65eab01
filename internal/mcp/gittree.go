package mcp

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/gitwork"
)

// The tools in a git working tree set up by ag clone or ag init: git keeps the files, their
// base (HEAD) and what changed, so status, integrate, sync, diff and revert ask git (through
// internal/gitwork) where a checkout asks its index. Their answers have the checkout's shapes.

func (a *agent) gitStatus(ctx context.Context, t *gitwork.Tree) (*mcp.CallToolResult, statusOut, error) {
	var out statusOut
	ws, err := t.Workspace(ctx, a.c)
	if err != nil {
		return nil, out, err
	}
	st, err := t.Status(ctx, ws)
	if err != nil {
		return nil, out, err
	}
	changes, err := t.LocalChanges(ctx)
	if err != nil {
		return nil, out, err
	}
	submodules, err := t.Submodules(ctx)
	if err != nil {
		return nil, out, err
	}
	unpushed, err := t.Unpushed(ctx)
	if err != nil {
		return nil, out, err
	}
	r, err := a.c.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: t.Repository})
	if err != nil {
		return nil, out, err
	}
	out = statusOut{Repository: t.Repository, Holder: t.Holder, BaseRevision: t.Head(ctx), Mainline: r.GetRepository().GetMainline(),
		MainlineCommit: r.GetRepository().GetMainlineCommit(), Edits: []fileView{}, Submodules: submodules, Leases: []leaseView{},
		Unleased: []string{}, Unpushed: unpushed, GitStatus: st.Changes}
	out.Behind = !t.Has(ctx, out.MainlineCommit)
	for _, l := range st.Leases {
		out.Leases = append(out.Leases, newLeaseView(l, true))
	}
	for _, c := range changes {
		out.Edits = append(out.Edits, fileView{Path: c.Path, Kind: c.Kind, Mode: c.Mode, BaseMode: c.BaseMode})
		if !coveredBy(c.Path, out.Leases) {
			out.Unleased = append(out.Unleased, c.Path)
		}
	}
	return nil, out, nil
}

// gitIntegrate commits the local changes only selects and pushes them to refs/for/main: the
// change the push made is answered as integrate answers it in a checkout.
// claim, when set, is the task claim the change carries (tsk_…#N).
func (a *agent) gitIntegrate(ctx context.Context, req *mcp.CallToolRequest, t *gitwork.Tree, message string, only []string, wait bool, claim string) (*mcp.CallToolResult, integrateOut, error) {
	var out integrateOut
	res, err := t.Push(ctx, a.token, gitwork.PushRequest{Message: message, Paths: only, Wait: wait, WaitFor: a.toolWait,
		Progress: progressWriter(ctx, req), Lock: &a.mu, Task: claim})
	var nothing *checkout.NothingError
	switch {
	case errors.As(err, &nothing) && len(nothing.Only) > 0:
		return nil, out, fmt.Errorf("none of the local edits is in %s, and HEAD has no commit the mainline lacks: nothing was integrated (local edits: %s)",
			strings.Join(nothing.Only, ", "), orNone(checkout.EditPaths(nothing.All)))
	case errors.As(err, &nothing):
		return nil, out, errors.New("nothing to integrate: the working tree has no local edits, and HEAD no commit the mainline lacks. Edit the files on disk first")
	case err != nil:
		// A refusal before a change was made is the server's lines, as they are.
		return nil, out, err
	}
	out.Commit = res.Commit
	got, err := a.c.Repos.GetChange(ctx, &agwpv1.GetChangeRequest{ChangeId: res.ChangeID})
	if err != nil {
		return nil, out, fmt.Errorf("the push made the change %s, but reading it failed: %w (follow it with change_show)", res.ChangeID, err)
	}
	change := got.GetChange()
	out.Change = newChangeView(change)
	switch change.GetState() {
	case agwpv1.ChangeState_CHANGE_STATE_INTEGRATED:
		switch {
		case res.Sync == nil:
			out.Next = "integrated: call sync to bring the working tree to it, then release the leases you no longer need (lease_release)"
		case res.SyncErr != nil:
			out.Next = fmt.Sprintf("landed as %s, but bringing the working tree to it failed: %s. Call sync", res.Landed, agentError(res.SyncErr))
		default:
			out.Synced = true
			out.Next = "landed as " + res.Landed + ", and the working tree is at it. Release the leases you no longer need (lease_release)"
		}
	case agwpv1.ChangeState_CHANGE_STATE_REJECTED, agwpv1.ChangeState_CHANGE_STATE_CANCELLED:
		out.Next = "the mainline did not move and your commits are still in the working tree: fix them and integrate again"
		if res.TakenBack {
			out.Next = "the mainline did not move and your edits are local edits again (the commit was taken back): fix them and integrate again"
		}
		text := fmt.Sprintf("change %s was %s: %s; %s", change.GetId(), checkout.ChangeStateName(change.GetState()), out.Change.Reason, out.Next)
		if out.Change.OutputTail != "" {
			text += "\n\n" + out.Change.OutputTail
		}
		return toolFailure(text), out, nil
	default:
		out.Next = stillWaiting(wait, a.toolWait, "keep your leases until it is integrated, then sync")
	}
	return nil, out, nil
}

// gitSync is git pull --rebase from ag's remote: git resolves what does not rebase cleanly, so
// the checkout's ways on (theirs, ours, merge) are refused.
func (a *agent) gitSync(ctx context.Context, t *gitwork.Tree, opts checkout.SyncOptions) (*mcp.CallToolResult, syncOut, error) {
	out := syncOut{Updated: []fileView{}, Merged: []string{}, Kept: []string{}, Conflicts: []syncConflictView{}, Blocked: []string{}}
	if len(opts.Theirs) > 0 || len(opts.Ours) > 0 || opts.Merge {
		return nil, out, errors.New("theirs, ours and merge are an ag checkout's: in a git working tree sync is git pull --rebase, " +
			"and a conflict is resolved as git resolves one (edit the files, git add them, git rebase --continue; or git rebase --abort)")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	res, syncErr := t.Sync(ctx, a.token)
	if res == nil {
		return nil, out, syncErr
	}
	out.From, out.Revision, out.Applied = res.From, res.To, syncErr == nil
	for _, p := range res.Conflicts {
		out.Conflicts = append(out.Conflicts, syncConflictView{Path: p, Reason: "your commits and the mainline both changed it", Markers: true})
	}
	if syncErr != nil {
		return toolFailure(agentError(syncErr)), out, nil
	}
	changed, err := t.Changed(ctx, res.From, res.To)
	if err != nil {
		return nil, out, err
	}
	for _, c := range changed {
		out.Updated = append(out.Updated, fileView{Path: c.Path, Kind: c.Kind, Mode: c.Mode, BaseMode: c.BaseMode})
	}
	return nil, out, nil
}

func (a *agent) gitDiff(ctx context.Context, t *gitwork.Tree, sel []string) (*mcp.CallToolResult, diffOut, error) {
	out := diffOut{Files: []diffFileView{}}
	a.mu.Lock()
	defer a.mu.Unlock()
	head, files, err := t.Diff(ctx, sel)
	if err != nil {
		return nil, out, err
	}
	out.BaseRevision = head
	for _, f := range files {
		out.Files = append(out.Files, diffFileView{Path: f.Path, Status: f.Kind, Mode: f.Mode, BaseMode: f.BaseMode, Conflict: f.Conflict, Binary: f.Binary, Diff: f.Diff})
	}
	return nil, out, nil
}

func (a *agent) gitRevert(ctx context.Context, t *gitwork.Tree, sel []string) (*mcp.CallToolResult, revertOut, error) {
	out := revertOut{Reverted: []fileView{}}
	a.mu.Lock()
	defer a.mu.Unlock()
	reverted, err := t.Revert(ctx, sel)
	for _, c := range reverted {
		out.Reverted = append(out.Reverted, fileView{Path: c.Path, Kind: c.Kind})
	}
	return nil, out, err
}
