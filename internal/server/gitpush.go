package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/ag-coord/ag/agwp"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/gitpush"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/termsafe"
)

// `git push` into the gate (docs/git.md, ADR-0029): a push to refs/for/main, or to main when it
// fast-forwards, becomes one change, made as an Integrate of the pushed tip's tree against the
// newest mainline revision its history holds, under the pusher's current leases. The push
// answers with the change's progress as "remote:" lines and its verdict as the ref's status.

const (
	// forMain is the ref a push to the gate names: git's client then never stands in the way
	// of a push while others land.
	forMain = "refs/for/main"
	// maxPushBytes bounds a push's pack as sent; maxPushObjects the objects it declares.
	maxPushBytes   = 256 << 20
	maxPushObjects = 200000
	// pushKeepAlive is how often a push waiting for its verdict says so, so that nothing on the
	// way takes the quiet connection for a dead one.
	pushKeepAlive = 20 * time.Second
)

// pushRequest is what a push asks, read from its commands and options.
type pushRequest struct {
	update gitstore.RefUpdate
	holder string   // the label of the pusher's holder (-o ag.holder=L)
	tokens []uint64 // -o ag.lease-token=N; none: the holder's current leases
	wait   bool     // -o ag.wait=false answers once queued
	// waitFor, from -o ag.wait=DURATION, bounds the wait for the verdict: the push then answers
	// the change as it stands, taken, so that a client with a timeout of its own keeps track.
	waitFor time.Duration
	// task and taskClaim, from -o ag.task=ID#N, are the task claim the change carries.
	task      string
	taskClaim uint64
}

// pushRefused is a push refused before a change was made: lines say why, one per reason,
// refusal is the ref's status.
type pushRefused struct {
	lines   []string
	refusal string
}

func (e *pushRefused) Error() string { return e.refusal }

func refusePush(refusal string, lines ...string) *pushRefused {
	return &pushRefused{lines: lines, refusal: refusal}
}

// advertisePush answers `GET info/refs?service=git-receive-pack`.
func (g *gitEndpoint) advertisePush(w http.ResponseWriter, r *http.Request, c caller, name string) {
	if !mayPush(c) {
		g.refusePusher(w, r, c)
		return
	}
	// The mainline as the fetches see it (the same store, behind the same reads).
	rep, err := g.s.git.objects.GetRepository(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		gitError(w, r, http.StatusNotFound, fmt.Sprintf("repository %q does not exist", name))
		return
	}
	if err != nil {
		logGitStoreError(r.Context(), g.s.log, "read the repository", err, "repository", name)
		gitError(w, r, http.StatusServiceUnavailable, errDatabaseUnavailable.Error())
		return
	}
	main, err := parseCommitID(g.s.git.mainlineCommit(rep))
	if err != nil {
		gitError(w, r, http.StatusInternalServerError, "the repository's mainline commit cannot be read")
		return
	}
	w.Header().Set("Content-Type", "application/x-git-receive-pack-advertisement")
	w.Header().Set("Cache-Control", "no-cache, max-age=0, must-revalidate")
	_ = gitstore.AdvertiseReceiveRefs(w, main, g.pushedHaves(r.Context(), name))
}

// mayPush reports whether the caller may push: agents and admins, who may integrate.
func mayPush(c caller) bool {
	return c.principal.Role == store.RoleAgent || c.principal.Role == store.RoleAdmin
}

func (g *gitEndpoint) refusePusher(w http.ResponseWriter, r *http.Request, c caller) {
	g.s.metrics.refusal(gitPathPrefix+"git-receive-pack", "permission_denied")
	gitError(w, r, http.StatusForbidden, fmt.Sprintf("principal %s has role %s, which may not push: agents and admins integrate changes",
		c.principal.Name, c.principal.Role))
}

// receivePack answers `POST git-receive-pack`: one push, to its verdict.
func (g *gitEndpoint) receivePack(w http.ResponseWriter, r *http.Request, c caller, name string) {
	if !mayPush(c) {
		g.refusePusher(w, r, c)
		return
	}
	if r.ContentLength > maxPushBytes {
		g.s.metrics.refusal(gitPathPrefix+"git-receive-pack", "too_large")
		gitError(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"the push declares %d MiB, more than the %d MiB one push may carry: integrate in several pushes", r.ContentLength>>20, maxPushBytes>>20))
		return
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		gitError(w, r, http.StatusUnsupportedMediaType, "a push's body is sent as it is, not "+truncate(enc, 20))
		return
	}
	body := g.edge.paced(w, r, maxPushBytes)
	req, err := gitstore.ReadReceiveRequest(body)
	if err != nil {
		gitError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx := store.WithActor(context.WithValue(r.Context(), callerKey{}, c), store.Actor{Principal: c.principal.Name})
	w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
	w.Header().Set("Cache-Control", "no-cache, max-age=0, must-revalidate")
	rep := gitstore.NewReceiveReporter(w, req)
	p := &push{g: g, ctx: ctx, name: name, caller: c, rep: rep, flush: func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}}
	statuses := make([]gitstore.RefStatus, len(req.Updates))
	for i, u := range req.Updates {
		statuses[i].Name = u.Name
	}
	unpack, refusal := p.run(req, body, func() {
		// The pack is read: nothing more comes, and the body's deadline must not cut the
		// connection while the push waits for its verdict.
		if pb, ok := body.(*pacedBody); ok && !pb.done {
			pb.finish()
		}
	})
	for i := range statuses {
		statuses[i].Refusal = refusal
	}
	_ = rep.Report(unpack, statuses)
}

// push is one push under way.
type push struct {
	g      *gitEndpoint
	ctx    context.Context
	name   string
	caller caller
	rep    *gitstore.ReceiveReporter
	flush  func()
}

// say writes lines git shows as "remote: ...", made safe for the pusher's terminal.
func (p *push) say(lines ...string) {
	for _, l := range lines {
		_ = p.rep.Message(termsafe.Line(l))
	}
	p.flush()
}

// run takes the push to its verdict and answers the unpack's refusal (git's "unpack" status) and
// the ref's ("" for ok).
func (p *push) run(req *gitstore.ReceiveRequest, pack io.Reader, packRead func()) (unpack, refusal string) {
	pr, perr := p.request(req)
	if perr != nil {
		// git sends the whole pack before it reads the answer: it is read to its end, so
		// that git reads the refusal rather than a connection cut under it.
		_, _ = io.Copy(io.Discard, pack)
		packRead()
		p.say(perr.lines...)
		return "", perr.refusal
	}
	objs, err := gitpush.ReadPack(pack, newGitObjects(p.ctx, p.g.s.store, p.g.s.log),
		gitpush.Limits{PackBytes: maxPushBytes, ObjectBytes: maxContentBytes, Objects: maxPushObjects})
	packRead()
	var refused *gitpush.RefusalError
	if errors.As(err, &refused) {
		p.g.s.metrics.refusal(gitPathPrefix+"git-receive-pack", "pack")
		p.say(refused.Msg)
		return refused.Msg, "the pack was refused"
	}
	if err != nil {
		logGitStoreError(p.ctx, p.g.s.log, "read a pushed pack", err, "repository", p.name)
		return "the server could not read the pack", "the server could not read the pack"
	}
	change, perr := p.integrate(pr, objs)
	if perr != nil {
		p.say(perr.lines...)
		return "", perr.refusal
	}
	p.keep(objs, pr.update.New)
	return "", p.follow(pr, change)
}

// request reads the push's one ref update and its options.
func (p *push) request(req *gitstore.ReceiveRequest) (pushRequest, *pushRefused) {
	pr := pushRequest{update: req.Updates[0], wait: true}
	u := pr.update
	if perr := p.shallowClone(req.Shallow); perr != nil {
		return pr, perr
	}
	switch {
	case len(req.Updates) > 1:
		// One push is one change: taking one ref of several would land part of what was meant.
		return pr, refusePush("ag takes one ref per push",
			fmt.Sprintf("the push names %d refs; ag takes one per push: `git push origin HEAD:%s`", len(req.Updates), forMain))
	case u.New.IsZero():
		return pr, refusePush("ag deletes no ref", "ag takes pushes to "+forMain+" (or main when it fast-forwards): `git push origin HEAD:"+forMain+"`")
	case u.Name == forMain:
	case u.Name == string(gitstore.MainBranch):
		rep, err := p.g.s.git.objects.GetRepository(p.ctx, p.name)
		if err != nil {
			return pr, refusePush("the repository cannot be read")
		}
		if main := p.g.s.git.mainlineCommit(rep); u.Old.String() != main {
			return pr, refusePush("fetch first: main has moved on", "the mainline is at "+main+
				": push to "+forMain+" instead, which ag rebases for you, or `git pull --rebase` first")
		}
	default:
		return pr, refusePush("ag takes pushes to "+forMain+" (or main when it fast-forwards)",
			"ag takes pushes to "+forMain+" (or main when it fast-forwards), not "+truncate(u.Name, 100)+": `git push origin HEAD:"+forMain+"`")
	}
	for _, o := range req.Options {
		key, value, _ := strings.Cut(o, "=")
		switch key {
		case "ag.holder":
			if err := validateLabel("ag.holder", value); err != nil {
				return pr, refusePush("a bad holder", "-o ag.holder="+truncate(value, 60)+": "+connectMessage(err))
			}
			pr.holder = value
		case "ag.lease-token":
			n, err := strconv.ParseUint(value, 10, 64)
			if err != nil || n == 0 {
				return pr, refusePush("a bad lease token", "-o ag.lease-token="+truncate(value, 30)+": a lease token is a positive number (`ag lease list`)")
			}
			pr.tokens = append(pr.tokens, n)
		case "ag.task":
			id, claim, err := agwp.ParseTaskClaim(value)
			if err != nil {
				return pr, refusePush("a bad task claim", "-o ag.task="+truncate(value, 60)+": "+err.Error())
			}
			pr.task, pr.taskClaim = id, claim
		case "ag.wait":
			if w, err := strconv.ParseBool(value); err == nil {
				pr.wait = w
				break
			}
			d, err := time.ParseDuration(value)
			if err != nil || d < time.Second || d > 24*time.Hour {
				return pr, refusePush("a bad wait", "-o ag.wait="+truncate(value, 30)+": true, false, or how long to wait for the verdict (1s to 24h, such as 45s)")
			}
			pr.wait, pr.waitFor = true, d
		default:
			if strings.HasPrefix(key, "ag.") {
				return pr, refusePush("an unknown push option", "-o "+truncate(o, 60)+": ag takes ag.holder, ag.lease-token, ag.task and ag.wait")
			}
		}
	}
	if pr.holder == "" {
		return pr, refusePush("no holder", "say which holder pushes: `git push -o ag.holder=LABEL` (`ag clone` and `ag init` set it in push.pushOption)")
	}
	return pr, nil
}

// shallowClone refuses a push from a shallow clone (its "shallow" lines, shallow) unless its
// history stops where the repository's does: a clone of a repository imported from a shallow
// clone is shallow at the same commits, and its pushes are taken. Any other shallow clone's
// history ends where git cannot tell what the server holds.
func (p *push) shallowClone(shallow []plumbing.Hash) *pushRefused {
	if len(shallow) == 0 {
		return nil
	}
	rep, err := p.g.s.git.objects.GetRepository(p.ctx, p.name)
	if err != nil {
		return refusePush("the repository cannot be read")
	}
	for _, h := range shallow {
		if !slices.Contains(rep.Shallow, h) {
			return refusePush("a push from a shallow clone",
				"the pushing clone's history stops at "+h.String()+" (its .git/shallow), where "+p.name+"'s does not: "+
					"ag takes a push from a shallow clone only when it stops where the repository does; push from a clone of ag's repository (`ag clone`)")
		}
	}
	return nil
}

// connectMessage answers a Connect error's message without its code.
func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// integrate makes the pushed tip one change: its tree against the mainline revision its history
// meets, under the holder's leases.
func (p *push) integrate(pr pushRequest, objs *gitpush.Objects) (*agwpv1.Change, *pushRefused) {
	tip, err := object.GetCommit(objs, pr.update.New)
	if err != nil {
		return nil, refusePush("the pushed commit is missing", "the push names the commit "+pr.update.New.String()+", which its pack does not carry")
	}
	base, err := gitpush.FindBase(p.ctx, objs, tip.Hash, p.meet)
	if err != nil {
		return nil, p.refusal("the history was refused", err)
	}
	rev, err := p.g.s.store.GetRevision(p.ctx, p.name, base.Revision)
	if err != nil {
		return nil, p.refusal("the mainline cannot be read", err)
	}
	edits, err := gitpush.Diff(objs, base.Tree, tip.TreeHash)
	if err != nil {
		return nil, p.refusal("the pushed trees cannot be read", err)
	}
	if len(edits) == 0 {
		return nil, refusePush("nothing to integrate", "the pushed tree is what the mainline had at "+base.Revision+": nothing to integrate")
	}
	if base.Pushed {
		if perr := p.unchangedSince(objs, base, rev, edits); perr != nil {
			return nil, perr
		}
	}
	tokens, perr := p.leases(pr, edits)
	if perr != nil {
		return nil, perr
	}
	req, perr := p.integrateRequest(objs, pr, base, tokens, tip, edits)
	if perr != nil {
		return nil, perr
	}
	res, err := repoService{p.g.s}.integrate(p.ctx, req, pr.update.New.String())
	if err != nil {
		return nil, p.integrateRefusal(err)
	}
	return res.GetChange(), nil
}

// refusal words an error met while making the change: a push's own fault is told as it is, the
// server's is logged and told as the server's.
func (p *push) refusal(what string, err error) *pushRefused {
	var refused *gitpush.RefusalError
	var pushErr *pushRefused
	switch {
	case errors.As(err, &pushErr):
		return pushErr
	case errors.As(err, &refused):
		return refusePush(what, refused.Msg)
	case errors.Is(err, plumbing.ErrObjectNotFound):
		// The push's own objects are all in hand: what is missing, it named without sending.
		return refusePush("the push is incomplete", "the pushed commits name objects the push does not carry and the server does not hold: "+
			"push from a complete clone (`git fsck`), without --thin tricks")
	}
	logGitStoreError(p.ctx, p.g.s.log, "push: "+what, err, "repository", p.name)
	return refusePush(what + ": the server could not finish the push; try again")
}

// meet answers what a commit of the pushed history is to the mainline: a mainline commit, or a
// commit pushed before whose change landed.
func (p *push) meet(commit plumbing.Hash) (gitpush.Meeting, error) {
	rev, err := p.g.s.store.RevisionByCommit(p.ctx, p.name, commit.String())
	if err == nil {
		return gitpush.Meeting{Revision: rev.ID}, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return gitpush.Meeting{}, err
	}
	c, err := p.g.s.store.PushedChange(p.ctx, p.name, commit.String())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return gitpush.Meeting{}, nil
	case err != nil:
		return gitpush.Meeting{}, err
	case c.State == store.ChangeIntegrated:
		return gitpush.Meeting{Revision: c.IntegratedRevision, Pushed: true}, nil
	case c.State == store.ChangeQueued || c.State == store.ChangeValidating:
		return gitpush.Meeting{}, refusePush("an earlier push is still in the queue",
			fmt.Sprintf("the commit %s was pushed as %s, which is still %s: wait for its verdict (`ag change show %s --wait`), then push",
				commit.String()[:12], c.ID, c.State, c.ID))
	}
	return gitpush.Meeting{}, nil // rejected or cancelled: its edits are the push's again
}

// unchangedSince refuses edits of paths the mainline changed since the pushed commit base
// landed: base's tree is the pusher's, rev's the mainline's, and only where they agree are the
// pusher's edits made on what the mainline holds.
func (p *push) unchangedSince(objs *gitpush.Objects, base gitpush.Base, rev store.Revision, edits []gitpush.Edit) *pushRefused {
	mainTree, err := store.ParseGitID(rev.GitTree)
	if err != nil {
		return p.refusal("the mainline cannot be read", err)
	}
	held := newGitObjects(p.ctx, p.g.s.store, p.g.s.log)
	var moved []string
	for _, e := range edits {
		mine, hadMine, err := gitpush.EntryAt(objs, base.Tree, e.Path)
		if err != nil {
			return p.refusal("the pushed trees cannot be read", err)
		}
		theirs, hadTheirs, err := gitpush.EntryAt(held, mainTree, e.Path)
		if err != nil {
			return p.refusal("the mainline cannot be read", err)
		}
		if hadMine != hadTheirs || mine.Hash != theirs.Hash || mine.Mode != theirs.Mode {
			moved = append(moved, e.Path+": changed on the mainline since your last pull; `git pull --rebase`, then push")
		}
	}
	if len(moved) > 0 {
		return refusePush("the mainline moved under the push", moved...)
	}
	return nil
}

// leases answers the lease tokens the push integrates under: those given, or the holder's
// current leases covering the edited paths. A path no lease of the holder covers is refused
// here, in the words the working tree's hooks use (repo.LeaseRefusal); Integrate checks again,
// in its own transaction, which is what counts.
func (p *push) leases(pr pushRequest, edits []gitpush.Edit) ([]uint64, *pushRefused) {
	holder := p.caller.holder(pr.holder)
	// Every current lease, and the holder's own expired ones, which still integrate while
	// nobody else took their paths.
	all, err := p.listLeases(store.ListLeasesParams{Repository: p.name})
	if err != nil {
		return nil, p.refusal("the leases cannot be read", err)
	}
	mineEnded, err := p.listLeases(store.ListLeasesParams{Repository: p.name, Holder: holder, IncludeEnded: true})
	if err != nil {
		return nil, p.refusal("the leases cannot be read", err)
	}
	for _, l := range mineEnded {
		if l.State == store.LeaseExpired {
			all = append(all, l)
		}
	}
	var tokens []uint64
	var lines []string
	for _, e := range edits {
		var mine, other *store.Lease
		for i := range all {
			l := &all[i]
			if !slices.ContainsFunc(l.Paths, func(lp string) bool { return repo.FoldCovers(lp, e.Path) }) {
				continue
			}
			switch {
			case l.Holder == holder && (len(pr.tokens) == 0 || slices.Contains(pr.tokens, l.FencingToken)):
				if mine == nil || l.FencingToken > mine.FencingToken {
					mine = l
				}
			case l.Holder != holder && l.State == store.LeaseActive:
				other = l
			}
		}
		switch {
		case mine != nil && (other == nil || other.FencingToken < mine.FencingToken):
			if !slices.Contains(tokens, mine.FencingToken) {
				tokens = append(tokens, mine.FencingToken)
			}
		case other != nil:
			lines = append(lines, repo.LeaseRefusal(e.Path, other.Holder, other.ExpiresAt))
		default:
			lines = append(lines, repo.LeaseRefusal(e.Path, "", time.Time{}))
		}
	}
	if len(lines) > 0 {
		p.g.s.metrics.refusal(gitPathPrefix+"git-receive-pack", "lease")
		return nil, refusePush("not under "+holder+"'s leases", lines...)
	}
	return tokens, nil
}

// listLeases answers every lease q lists, page by page.
func (p *push) listLeases(q store.ListLeasesParams) ([]store.Lease, error) {
	var all []store.Lease
	q.Limit = 1000
	for {
		ls, next, err := p.g.s.store.ListLeases(p.ctx, q)
		if err != nil {
			return nil, err
		}
		all = append(all, ls...)
		if next == "" {
			return all, nil
		}
		q.PageToken = next
	}
}
