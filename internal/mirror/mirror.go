// Package mirror keeps each repository's forge mirror (GitHub, GitLab, Gitea: wherever the team
// reviews, releases and runs its other CI) current: after every landing, and at once when set,
// it pushes the mainline commit to the forge's branch, never forcing. A forge branch that holds
// a commit the mainline does not has diverged: it is left as it is, said so (the store's state,
// an audit event, a metric), and ag keeps landing. A forge that cannot be reached is tried
// again on every sweep. It owns the push over git's smart HTTP protocol (go-git, from the
// store's git objects) and the loop every replica runs; it imports the store and gitstore, never
// the server or the SDK.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/ag-coord/ag/internal/gitcredential"
	"github.com/ag-coord/ag/internal/store"
)

// pushTimeout bounds one push to a forge.
const pushTimeout = 5 * time.Minute

// Mirrors pushes repositories' mainlines to their forges.
type Mirrors struct {
	store   store.Store
	objects func(ctx context.Context) storer.EncodedObjectStorer
	log     *slog.Logger
	sweep   time.Duration
	kicks   chan string
	// OnState, when set, is told each mirror's state after each attempt (a metric).
	OnState func(repository string, state store.MirrorState)
}

// New answers the mirrors of st, whose git objects objects reads, swept every sweep (default
// 10s) for mirrors behind.
func New(st store.Store, objects func(ctx context.Context) storer.EncodedObjectStorer, log *slog.Logger, sweep time.Duration) *Mirrors {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if sweep <= 0 {
		sweep = 10 * time.Second
	}
	return &Mirrors{store: st, objects: objects, log: log, sweep: sweep, kicks: make(chan string, 256)}
}

// Kick asks for repository's mirror to be brought up to date soon: its mainline moved, or the
// mirror was set. It never blocks.
func (m *Mirrors) Kick(repository string) {
	select {
	case m.kicks <- repository:
	default:
	}
}

// Run brings mirrors up to date until ctx ends: the kicked ones at once, every one behind each
// sweep.
func (m *Mirrors) Run(ctx context.Context) {
	t := time.NewTicker(m.sweep)
	defer t.Stop()
	m.sweepAll(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case name := <-m.kicks:
			m.syncLogged(ctx, name)
		case <-t.C:
			m.sweepAll(ctx)
		}
	}
}

func (m *Mirrors) sweepAll(ctx context.Context) {
	all, err := m.store.ListMirrors(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("list mirrors", "err", err)
		}
		return
	}
	for _, mr := range all {
		m.syncLogged(ctx, mr.Repository)
	}
}

func (m *Mirrors) syncLogged(ctx context.Context, repository string) {
	if err := m.Sync(ctx, repository); err != nil && ctx.Err() == nil {
		m.log.Warn("mirror", "repository", repository, "err", err)
	}
}

// Sync pushes repository's mainline to its mirror if the mirror is behind, and records the
// outcome. A repository without a mirror is nothing to do. It answers the store's errors; the
// forge's are the mirror's state.
func (m *Mirrors) Sync(ctx context.Context, repository string) error {
	mr, err := m.store.GetMirror(ctx, repository)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	r, err := m.store.GetRepository(ctx, repository)
	if err != nil {
		return err
	}
	if r.MainlineCommit == "" || (mr.State == store.MirrorCurrent && mr.PushedCommit == r.MainlineCommit) {
		return nil
	}
	if mr.State == store.MirrorDiverged && mr.PushedCommit == r.MainlineCommit {
		return nil // nothing new to try against a forge that went its own way
	}
	outcome := m.push(ctx, mr, r)
	if m.OnState != nil {
		m.OnState(repository, outcome.State)
	}
	if outcome.State != store.MirrorCurrent {
		m.log.Info("mirror not current", "repository", repository, "state", outcome.State, "reason", outcome.LastError)
	}
	return m.store.RecordMirrorPush(ctx, outcome)
}

// push pushes r's mainline commit to mr's branch, only where it moves the branch forward.
func (m *Mirrors) push(ctx context.Context, mr store.Mirror, r store.Repository) store.MirrorPushParams {
	out := store.MirrorPushParams{Repository: r.Name, URL: mr.URL}
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	commit, err := store.ParseGitID(r.MainlineCommit)
	if err != nil {
		out.State, out.LastError = store.MirrorFailing, err.Error()
		return out
	}
	branch := plumbing.NewBranchReferenceName(mr.Branch)
	st := &pushStorage{Storage: memory.NewStorage(), objects: m.objects(ctx)}
	remote := git.NewRemote(st, &config.RemoteConfig{Name: "forge", URLs: []string{mr.URL}})
	auth := gitcredential.ForgeAuth(mr.Credential)
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: auth})
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		out.State, out.LastError = store.MirrorFailing, forgeError("read the forge's branches", err)
		return out
	}
	var forge plumbing.Hash
	for _, ref := range refs {
		if ref.Name() == branch {
			forge = ref.Hash()
		}
	}
	switch {
	case forge == commit:
		out.State, out.PushedCommit = store.MirrorCurrent, commit.String()
		return out
	case !forge.IsZero():
		// The mainline only moves forward: a forge branch at a mainline commit is behind it, at
		// anything else it went its own way.
		if _, err := m.store.RevisionByCommit(ctx, r.Name, forge.String()); errors.Is(err, store.ErrNotFound) {
			out.State = store.MirrorDiverged
			out.LastError = fmt.Sprintf("the forge's %s is at %s, which is not on ag's mainline: ag does not overwrite it", mr.Branch, forge)
			return out
		} else if err != nil {
			out.State, out.LastError = store.MirrorFailing, "the store: "+err.Error()
			return out
		}
	}
	// The push names what the forge's branch must still be, so that a commit pushed to it
	// meanwhile is refused rather than overwritten.
	if err := st.SetReference(plumbing.NewHashReference(branch, commit)); err != nil {
		out.State, out.LastError = store.MirrorFailing, err.Error()
		return out
	}
	opts := &git.PushOptions{RemoteName: "forge", Auth: auth,
		RefSpecs: []config.RefSpec{config.RefSpec(branch.String() + ":" + branch.String())}}
	if !forge.IsZero() {
		tracking := plumbing.NewRemoteReferenceName("forge", mr.Branch)
		if err := st.SetReference(plumbing.NewHashReference(tracking, forge)); err != nil {
			out.State, out.LastError = store.MirrorFailing, err.Error()
			return out
		}
		opts.ForceWithLease = &git.ForceWithLease{RefName: branch, Hash: forge}
	}
	err = remote.PushContext(ctx, opts)
	switch {
	case err == nil, errors.Is(err, git.NoErrAlreadyUpToDate):
		out.State, out.PushedCommit = store.MirrorCurrent, commit.String()
	case strings.Contains(err.Error(), "non-fast-forward"), strings.Contains(err.Error(), "stale info"):
		out.State, out.LastError = store.MirrorDiverged, "the forge's "+mr.Branch+" moved while ag pushed to it: ag does not overwrite it"
	case len(r.Shallow) > 0 && errors.Is(err, plumbing.ErrObjectNotFound):
		// The push reached below where the repository's history starts: the forge lacks
		// what ag never held.
		out.State, out.LastError = store.MirrorFailing, fmt.Sprintf("push: the forge's %s holds no commit of ag's mainline, "+
			"and ag holds the history only from %s on (imported from a shallow clone): push the history it was imported from to the forge once; ag then pushes what lands",
			mr.Branch, r.Shallow[0])
	default:
		out.State, out.LastError = store.MirrorFailing, forgeError("push", err)
	}
	return out
}

// forgeError words a forge's failure for the mirror's state: never the credential (go-git's
// errors name the URL, which holds none).
func forgeError(what string, err error) string {
	msg := err.Error()
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return what + ": " + msg
}

// pushStorage is what go-git pushes from: references in memory, objects the store's.
type pushStorage struct {
	*memory.Storage
	objects storer.EncodedObjectStorer
}

func (s *pushStorage) NewEncodedObject() plumbing.EncodedObject { return s.objects.NewEncodedObject() }

func (s *pushStorage) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	return plumbing.ZeroHash, errors.New("mirror: the store's objects are read-only here")
}

func (s *pushStorage) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	return s.objects.EncodedObject(t, h)
}

func (s *pushStorage) IterEncodedObjects(t plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return s.objects.IterEncodedObjects(t)
}

func (s *pushStorage) HasEncodedObject(h plumbing.Hash) error { return s.objects.HasEncodedObject(h) }

func (s *pushStorage) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	return s.objects.EncodedObjectSize(h)
}

func (s *pushStorage) AddAlternate(string) error { return errors.New("mirror: no alternates") }
