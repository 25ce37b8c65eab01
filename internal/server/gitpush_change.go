package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/gitpush"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/termsafe"
)

// maxListedCommits bounds the other commits' subjects a pushed change's message lists.
const maxListedCommits = 50

// integrateRequest answers the Integrate a push makes: the tip's edits against base, their
// contents inline while they fit one request and stored beforehand past that (the leases were
// checked first, so a push refused for them stores nothing).
func (p *push) integrateRequest(objs *gitpush.Objects, pr pushRequest, base gitpush.Base, tokens []uint64,
	tip *object.Commit, edits []gitpush.Edit) (*agwpv1.IntegrateRequest, *pushRefused) {
	req := &agwpv1.IntegrateRequest{Repository: p.name, BaseRevision: base.Revision, FencingTokens: tokens,
		Holder: pr.holder, Message: pushMessage(objs, tip, base.Commit), TaskId: pr.task, TaskClaimNumber: pr.taskClaim}
	inline := 0
	for _, e := range edits {
		edit := &agwpv1.Edit{Path: e.Path}
		switch {
		case e.Delete:
			edit.Action = &agwpv1.Edit_Delete{Delete: true}
		case e.Mode == filemode.Submodule:
			edit.Action = &agwpv1.Edit_GitlinkCommit{GitlinkCommit: e.ID.String()}
		default:
			mode, perr := pushedMode(e)
			if perr != nil {
				return nil, perr
			}
			content, err := blobContent(objs, e.ID)
			if err != nil {
				return nil, p.refusal("the pushed files cannot be read", err)
			}
			edit.Mode = mode
			if inline+len(content) <= maxContentBytes {
				inline += len(content)
				edit.Action = &agwpv1.Edit_Content{Content: content}
				break
			}
			digest := repo.Digest(content)
			if err := p.g.s.store.PutBlobs(p.ctx, []store.Blob{{Digest: digest, Content: content}}); err != nil {
				return nil, p.refusal("the pushed files cannot be stored", err)
			}
			edit.Action = &agwpv1.Edit_BlobDigest{BlobDigest: digest}
		}
		req.Edits = append(req.Edits, edit)
	}
	return req, nil
}

// pushedMode answers the mode an Integrate gives a pushed file: always said, so that a push
// that makes an executable a plain file does so.
func pushedMode(e gitpush.Edit) (string, *pushRefused) {
	switch e.Mode {
	case filemode.Regular:
		return repo.ModeFile, nil
	case filemode.Executable:
		return repo.ModeExecutable, nil
	case filemode.Symlink:
		return repo.ModeSymlink, nil
	case filemode.Deprecated:
		return "", refusePush("a mode git no longer writes", e.Path+": mode 100664, which git wrote before 2005: "+
			"`git update-index --chmod=-x "+e.Path+"`, commit, and push again")
	}
	return "", refusePush("a mode ag does not take", fmt.Sprintf("%s: mode %o: ag takes files, executable files, symbolic links and submodules", e.Path, uint32(e.Mode)))
}

func blobContent(objs *gitpush.Objects, id plumbing.Hash) ([]byte, error) {
	o, err := objs.EncodedObject(plumbing.BlobObject, id)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", id, err)
	}
	return gitstore.ObjectData(o)
}

// pushMessage answers a pushed change's message: the tip's, with the subjects of the other
// commits it brings (first parents, back to base) listed under it.
func pushMessage(objs *gitpush.Objects, tip *object.Commit, base plumbing.Hash) string {
	msg := strings.TrimRight(tip.Message, "\n")
	var subjects []string
	for c := tip; len(c.ParentHashes) > 0 && len(subjects) < maxListedCommits; {
		parent, err := object.GetCommit(objs, c.ParentHashes[0])
		if err != nil || parent.Hash == base {
			break
		}
		subject, _, _ := strings.Cut(strings.TrimSpace(parent.Message), "\n")
		subjects = append(subjects, "- "+subject)
		c = parent
	}
	if len(subjects) > 0 {
		msg += "\n\nPushed with:\n" + strings.Join(subjects, "\n")
	}
	return msg
}

// integrateRefusal words Integrate's refusal of a push.
func (p *push) integrateRefusal(err error) *pushRefused {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return p.refusal("the change could not be made", err)
	}
	switch ce.Code() {
	case connect.CodeAborted:
		return refusePush("a conflict with the mainline", ce.Message(), "`git pull --rebase`, then push")
	case connect.CodeFailedPrecondition:
		var task *store.TaskStateError
		if errors.As(err, &task) {
			return refusePush("its task claim is not current", ce.Message(), "do not push for that task: `ag task show TASK` says who holds it now")
		}
		return refusePush("refused under the leases", ce.Message(), "`ag lease list` shows your leases; `ag lease acquire PATH` takes one")
	case connect.CodeInvalidArgument, connect.CodeResourceExhausted, connect.CodeNotFound:
		return refusePush("the change was refused", ce.Message())
	}
	return p.refusal("the change could not be made", err)
}

// follow answers the pushed change's verdict, saying its progress meanwhile: "" once it landed
// (or, without waiting, once queued), the ref's refusal otherwise.
func (p *push) follow(pr pushRequest, change *agwpv1.Change) string {
	id := change.GetId()
	if change.GetState() == agwpv1.ChangeState_CHANGE_STATE_QUEUED && !pr.wait {
		p.say(fmt.Sprintf("queued as %s at position %d: `ag change show %s --wait` follows it", id, change.GetQueuePosition(), id))
		return ""
	}
	h := repoService{p.g.s}
	var last *agwpv1.Change
	start := time.Now()
	quiet := start
	for {
		changed := p.g.s.gate.Changed()
		c, err := p.g.s.store.GetChange(p.ctx, id)
		if err != nil {
			logGitStoreError(p.ctx, p.g.s.log, "push: follow the change", err, "change", id)
			return "the server lost sight of " + id + ": `ag change show " + id + "`"
		}
		out := h.changeWithProgress(p.ctx, c)
		if last.GetState() == agwpv1.ChangeState_CHANGE_STATE_QUEUED && out.GetState() != agwpv1.ChangeState_CHANGE_STATE_VALIDATING &&
			out.GetState() != agwpv1.ChangeState_CHANGE_STATE_QUEUED && out.GetJobId() != "" {
			// It was validated between two looks: the pusher still learns which job judged it.
			p.say(fmt.Sprintf("%s validating (job %s)", id, out.GetJobId()))
		}
		if line := progressLine(last, out); line != "" {
			p.say(line)
			quiet = time.Now()
		}
		last = out
		if c.State.Terminal() {
			return p.verdict(c)
		}
		if pr.waitFor > 0 && time.Since(start) >= pr.waitFor {
			state := strings.ToLower(strings.TrimPrefix(out.GetState().String(), "CHANGE_STATE_"))
			p.say(fmt.Sprintf("%s is still %s after %s: `ag change show %s --wait` follows it", id, state, pr.waitFor, id))
			return ""
		}
		if time.Since(quiet) >= pushKeepAlive {
			p.say(fmt.Sprintf("%s is still %s", id, strings.ToLower(strings.TrimPrefix(out.GetState().String(), "CHANGE_STATE_"))))
			quiet = time.Now()
		}
		next := min(pushKeepAlive, p.g.s.pollInterval)
		if pr.waitFor > 0 {
			next = max(min(next, pr.waitFor-time.Since(start)), time.Millisecond)
		}
		if !p.g.s.await(p.ctx, changed, next) {
			return "the push's connection ended before the verdict: `ag change show " + id + "`"
		}
	}
}

// progressLine says what moved since last: the queue position, the state, the worker's line.
func progressLine(last, now *agwpv1.Change) string {
	state := strings.ToLower(strings.TrimPrefix(now.GetState().String(), "CHANGE_STATE_"))
	switch {
	case last == nil && now.GetState() == agwpv1.ChangeState_CHANGE_STATE_QUEUED:
		return fmt.Sprintf("%s queued at position %d", now.GetId(), now.GetQueuePosition())
	case last == nil || last.GetState() != now.GetState():
		if now.GetState() == agwpv1.ChangeState_CHANGE_STATE_VALIDATING {
			return fmt.Sprintf("%s validating (job %s)", now.GetId(), now.GetJobId())
		}
		return now.GetId() + " " + state
	case now.GetQueuePosition() != last.GetQueuePosition():
		return fmt.Sprintf("%s at position %d", now.GetId(), now.GetQueuePosition())
	case now.GetProgress() != "" && now.GetProgress() != last.GetProgress():
		return now.GetId() + ": " + now.GetProgress()
	}
	return ""
}

// verdict says a settled change's outcome and answers the ref's refusal ("" for landed).
func (p *push) verdict(c store.Change) string {
	switch c.State {
	case store.ChangeIntegrated:
		commit := c.IntegratedRevision
		if rev, err := p.g.s.store.GetRevision(p.ctx, p.name, c.IntegratedRevision); err == nil && rev.GitCommit != "" {
			commit = rev.GitCommit
		}
		p.say(fmt.Sprintf("landed as %s (%s): `git pull --rebase` to have it", commit, c.ID))
		return ""
	case store.ChangeRejected:
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(c.Reason, "\n"), "\n") {
			lines = append(lines, termsafe.Line(l))
		}
		if len(lines) > 60 {
			lines = append([]string{"..."}, lines[len(lines)-60:]...)
		}
		p.say(lines...)
		p.say(fmt.Sprintf("rejected by the gate: %s (`ag change show %s`)", c.ID, c.ID))
		return "rejected by the gate (" + c.ID + ")"
	}
	p.say(fmt.Sprintf("%s was %s: %s", c.ID, c.State, termsafe.FirstLine(c.Reason, 200)))
	return string(c.State) + " (" + c.ID + ")"
}

// maxAdvertisedPushes bounds the commits of earlier pushes a push's advertisement offers as
// ".have": a working tree that pushed without pulling builds on its own last few.
const maxAdvertisedPushes = 32

// keep stores what the push carried that its tip reaches, so that the server holds the pushed
// commit whole and can offer it to the next push as one git need not send again. It is an
// economy, not a promise: a push whose objects are not kept is taken all the same, and sends
// them again next time.
func (p *push) keep(objs *gitpush.Objects, tip plumbing.Hash) {
	closure, ok, err := objs.Closure(tip, func(ids []plumbing.Hash) ([]plumbing.Hash, error) {
		return p.g.s.store.MissingGitObjects(p.ctx, ids)
	})
	if err != nil || !ok {
		if err != nil {
			logGitStoreError(p.ctx, p.g.s.log, "push: keep the pushed objects", err, "repository", p.name)
		}
		return
	}
	var blobs []store.Blob
	var others []store.GitObject
	size := 0
	flush := func() error {
		err := p.g.s.store.PutBlobs(p.ctx, blobs)
		blobs, size = nil, 0
		return err
	}
	for _, o := range closure {
		data, err := gitstore.ObjectData(o)
		if err != nil {
			return
		}
		if o.Type() != plumbing.BlobObject {
			others = append(others, store.GitObject{ID: o.Hash(), Type: o.Type(), Data: data})
			continue
		}
		if size+len(data) > maxContentBytes && len(blobs) > 0 {
			if err := flush(); err != nil {
				logGitStoreError(p.ctx, p.g.s.log, "push: keep the pushed blobs", err, "repository", p.name)
				return
			}
		}
		blobs = append(blobs, store.Blob{Digest: repo.Digest(data), Content: data})
		size += len(data)
	}
	if err := flush(); err != nil {
		logGitStoreError(p.ctx, p.g.s.log, "push: keep the pushed blobs", err, "repository", p.name)
		return
	}
	// Trees and commits after the blobs they name, all in one call: the store then never holds
	// one whose references it lacks.
	if err := p.g.s.store.PutGitObjects(p.ctx, others); err != nil {
		logGitStoreError(p.ctx, p.g.s.log, "push: keep the pushed trees and commits", err, "repository", p.name)
	}
}

// pushedHaves answers the commits of earlier pushes the server holds whole, for a push's
// advertisement.
func (g *gitEndpoint) pushedHaves(ctx context.Context, name string) []plumbing.Hash {
	commits, err := g.s.store.PushedCommits(ctx, name, maxAdvertisedPushes)
	if err != nil || len(commits) == 0 {
		return nil
	}
	ids := make([]plumbing.Hash, 0, len(commits))
	for _, c := range commits {
		if id, err := store.ParseGitID(c); err == nil {
			ids = append(ids, id)
		}
	}
	missing, err := g.s.store.MissingGitObjects(ctx, ids)
	if err != nil {
		return nil
	}
	return slices.DeleteFunc(ids, func(id plumbing.Hash) bool { return slices.Contains(missing, id) })
}
