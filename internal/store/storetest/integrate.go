package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// fileEdit writes content to path, or deletes path.
type fileEdit struct {
	path    string
	content string
	delete  bool
}

func put(path, content string) fileEdit { return fileEdit{path: path, content: content} }
func del(path string) fileEdit          { return fileEdit{path: path, delete: true} }

// integrateParams builds an Integrate of edits on base, their contents sent inline, and the
// edits kept for a queue.
func integrateParams(repository, base, holder string, tokens []uint64, edits ...fileEdit) store.IntegrateParams {
	var (
		fe    []repo.FileEdit
		blobs []store.Blob
		paths []string
	)
	for _, e := range edits {
		paths = append(paths, e.path)
		if e.delete {
			fe = append(fe, repo.FileEdit{Path: e.path, Delete: true})
			continue
		}
		bl := blobOf(e.content)
		blobs = append(blobs, bl)
		fe = append(fe, repo.FileEdit{Path: e.path, Digest: bl.Digest, Size: uint64(len(e.content))})
	}
	slices.Sort(paths)
	return store.IntegrateParams{
		Repository:    repository,
		BaseRevision:  base,
		Holder:        holder,
		FencingTokens: tokens,
		Paths:         paths,
		Message:       "edit " + strings.Join(paths, ", "),
		Blobs:         blobs,
		Edits:         fe,
	}
}

func (b *rbundle) mustIntegrate(t *testing.T, p store.IntegrateParams) store.Change {
	t.Helper()
	c, err := b.rs.Integrate(b.ctx, p)
	if err != nil {
		t.Fatalf("Integrate(%s by %s, tokens %v, paths %v): %v", p.Repository, p.Holder, p.FencingTokens, p.Paths, err)
	}
	return c
}

// repoState is what a refused Integrate must leave as it was.
type repoState struct {
	repository store.Repository
	changes    []string
	missing    []string // digests of the blobs the refused request sends
}

func (b *rbundle) repoState(t *testing.T, name string, p store.IntegrateParams) repoState {
	t.Helper()
	s := repoState{repository: b.repository(t, name)}
	changes, _, err := b.rs.ListChanges(b.ctx, store.ListChangesParams{Repository: name, Limit: 1000})
	if err != nil {
		t.Fatalf("ListChanges: %v", err)
	}
	for _, c := range changes {
		s.changes = append(s.changes, c.ID)
	}
	var digests []string
	for _, bl := range p.Blobs {
		digests = append(digests, bl.Digest)
	}
	if s.missing, err = b.rs.MissingBlobs(b.ctx, digests); err != nil {
		t.Fatalf("MissingBlobs: %v", err)
	}
	return s
}

// refusedIntegrate runs an Integrate that must be refused and checks that it changed nothing:
// the mainline, the changes and the blobs it sent.
func (b *rbundle) refusedIntegrate(t *testing.T, what string, p store.IntegrateParams) error {
	t.Helper()
	before := b.repoState(t, p.Repository, p)
	c, err := b.rs.Integrate(b.ctx, p)
	if err == nil {
		t.Fatalf("Integrate %s = change %s (%s), want a refusal", what, c.ID, c.State)
	}
	after := b.repoState(t, p.Repository, p)
	if diff := diffFields(after.repository, before.repository); diff != "" {
		t.Fatalf("the repository changed after Integrate %s, which was refused (%v):\n%s", what, err, diff)
	}
	if !slices.Equal(after.changes, before.changes) {
		t.Fatalf("the changes are %v after Integrate %s, which was refused (%v); before: %v", after.changes, what, err, before.changes)
	}
	if !slices.Equal(after.missing, before.missing) {
		t.Fatalf("Integrate %s was refused (%v) but stored blobs: missing %v before, %v after", what, err, before.missing, after.missing)
	}
	return err
}

// wantRefusal fails the test unless err is a *store.IntegrateRefusal naming path, whose reason
// mentions each of mentions.
func wantRefusal(t *testing.T, what string, err error, path string, mentions ...string) {
	t.Helper()
	if !errors.Is(err, store.ErrFailedPrecondition) {
		t.Fatalf("%s: err = %v, want %v", what, err, store.ErrFailedPrecondition)
	}
	var r *store.IntegrateRefusal
	if !errors.As(err, &r) {
		t.Fatalf("%s: err = %v (%T), want a *store.IntegrateRefusal", what, err, err)
	}
	if r.Path != path {
		t.Fatalf("%s: the refusal names %q (%s), want %q", what, r.Path, r.Reason, path)
	}
	for _, m := range mentions {
		if !strings.Contains(r.Reason, m) {
			t.Fatalf("%s: the reason %q does not mention %q", what, r.Reason, m)
		}
	}
}

func testIntegrate(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Minute, "src/a.go", "README.md")
	b.clk.Advance(time.Second)

	p := integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "package a\n"), put("README.md", "# web\n"))
	p.Message = "first files"
	c := b.mustIntegrate(t, p)
	if c.ID == "" || c.IntegratedRevision == "" || c.IntegratedRevision == r.Mainline {
		t.Fatalf("Integrate = %+v: no id or no new revision", c)
	}
	now := b.clk.Now()
	assertFields(t, "Integrate", c, store.Change{
		ID: c.ID, Repository: "web", State: store.ChangeIntegrated, BaseRevision: r.Mainline,
		CandidateRevision: c.IntegratedRevision, IntegratedRevision: c.IntegratedRevision, Holder: alice,
		Message: "first files", Paths: []string{"README.md", "src/a.go"}, CreatedAt: now, UpdatedAt: now,
	})
	got, err := b.rs.GetChange(b.ctx, c.ID)
	if err != nil {
		t.Fatalf("GetChange: %v", err)
	}
	assertFields(t, "GetChange", got, c)
	if m := b.repository(t, "web").Mainline; m != c.IntegratedRevision {
		t.Fatalf("the mainline is %s, want the integrated revision %s", m, c.IntegratedRevision)
	}
	files := map[string]string{"src/a.go": "package a\n", "README.md": "# web\n"}
	want := treeOf(files)
	rev := b.revision(t, "web", c.IntegratedRevision)
	assertFields(t, "the integrated revision", rev, store.Revision{
		ID: c.IntegratedRevision, Repository: "web", Parent: r.Mainline, ChangeID: c.ID, Holder: alice,
		Tree: want, TreeDigest: want.Digest(), GitTree: gitTreeOf(t, files), GitCommit: rev.GitCommit, CreatedAt: now,
	})
	commit := b.wantCommit(t, rev, "first files", tokensTrailer(p.FencingTokens...))
	if !commit.Author.When.Equal(now) || !commit.Committer.When.Equal(now) {
		t.Fatalf("the commit is authored at %s and committed at %s, want both at %s", commit.Author.When, commit.Committer.When, now)
	}
	if got := b.repository(t, "web").MainlineCommit; got != rev.GitCommit {
		t.Fatalf("the repository's mainline commit is %s, want the integrated revision's %s", got, rev.GitCommit)
	}
	// Many objects at once: the commit, its tree and a blob; an unknown id is left out.
	blobID := gitstore.BlobID([]byte("package a\n"))
	unknown := plumbing.NewHash(strings.Repeat("ab", 20))
	objs, err := b.rs.ReadGitObjects(b.ctx, []plumbing.Hash{plumbing.NewHash(rev.GitCommit), plumbing.NewHash(rev.GitTree), blobID, unknown})
	if err != nil || len(objs) != 3 {
		t.Fatalf("ReadGitObjects = %d objects, %v; want the commit, the tree and the blob", len(objs), err)
	}
	for _, o := range objs {
		if got := plumbing.ComputeHash(o.Type, o.Data); got != o.ID {
			t.Fatalf("ReadGitObjects answered %s %s whose content hashes to %s", o.Type, o.ID, got)
		}
	}
	for _, bl := range p.Blobs {
		if got, err := b.rs.GetBlob(b.ctx, bl.Digest); err != nil || string(got.Content) != string(bl.Content) {
			t.Fatalf("GetBlob(%s) = %q, %v; want %q", bl.Digest, got.Content, err, bl.Content)
		}
	}

	// A delete and a write, with blobs uploaded beforehand instead of inline.
	b.clk.Advance(time.Second)
	p = integrateParams("web", c.IntegratedRevision, alice, []uint64{l.FencingToken}, del("README.md"), put("src/a.go", "package a // 2\n"))
	if err := b.rs.PutBlobs(b.ctx, p.Blobs); err != nil {
		t.Fatalf("PutBlobs: %v", err)
	}
	p.Blobs = nil
	c2 := b.mustIntegrate(t, p)
	want = treeOf(map[string]string{"src/a.go": "package a // 2\n"})
	rev = b.revision(t, "web", c2.IntegratedRevision)
	assertTree(t, "the second revision", rev.Tree, want)
	if rev.Parent != c.IntegratedRevision || rev.TreeDigest != want.Digest() || c2.BaseRevision != c.IntegratedRevision {
		t.Fatalf("the second revision: parent %s, digest %s, base %s", rev.Parent, rev.TreeDigest, c2.BaseRevision)
	}

	// Unknown repository and base revisions.
	_, err = b.rs.Integrate(b.ctx, integrateParams("nope", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "x")))
	wantErr(t, "Integrate into an unknown repository", err, store.ErrNotFound)
	err = b.refusedIntegrate(t, "on an unknown base revision", integrateParams("web", "rev_unknown", alice, []uint64{l.FencingToken}, put("src/a.go", "y")))
	wantErr(t, "Integrate on an unknown base revision", err, store.ErrNotFound)
	api := b.createRepo(t, "api")
	err = b.refusedIntegrate(t, "on another repository's revision", integrateParams("web", api.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "z")))
	wantErr(t, "Integrate on another repository's revision", err, store.ErrNotFound)
}

func testIntegrateUncovered(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Minute, "src/a.go", "lib/")
	tokens := []uint64{l.FencingToken}

	err := b.refusedIntegrate(t, "with an unleased path",
		integrateParams("web", r.Mainline, alice, tokens, put("src/a.go", "a"), put("src/b.go", "b")))
	wantRefusal(t, "Integrate with an unleased path", err, "src/b.go", "not leased")
	err = b.refusedIntegrate(t, "of a sibling with a longer name",
		integrateParams("web", r.Mainline, alice, tokens, put("src/a.go", "a"), put("src/a.gox", "b")))
	wantRefusal(t, "Integrate of src/a.gox", err, "src/a.gox", "not leased")
	err = b.refusedIntegrate(t, "beside a leased directory",
		integrateParams("web", r.Mainline, alice, tokens, put("lib/x.go", "a"), put("libs/x.go", "b")))
	wantRefusal(t, "Integrate of libs/x.go", err, "libs/x.go", "not leased")
	err = b.refusedIntegrate(t, "without tokens", integrateParams("web", r.Mainline, alice, nil, put("src/a.go", "a")))
	wantRefusal(t, "Integrate without tokens", err, "src/a.go", "not leased")
	err = b.refusedIntegrate(t, "with a token nobody was granted",
		integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken + 1000}, put("src/a.go", "a")))
	wantRefusal(t, "Integrate with an unknown token", err, "src/a.go", "not leased")

	// A lease's token in another repository covers nothing here.
	b.createRepo(t, "api")
	other := b.acquire(t, "api", alice, time.Minute, "docs/")
	err = b.refusedIntegrate(t, "with another repository's token",
		integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken, other.FencingToken}, put("docs/a.md", "a")))
	wantRefusal(t, "Integrate with another repository's token", err, "docs/a.md", "not leased")

	// Both leased: accepted, directory lease included.
	b.mustIntegrate(t, integrateParams("web", r.Mainline, alice, tokens, put("src/a.go", "a"), put("lib/deep/x.go", "x")))
}

func testIntegrateReleased(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Minute, "src/")
	if _, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: l.ID, Principal: "alice"}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	err := b.refusedIntegrate(t, "with a released lease",
		integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "a")))
	wantRefusal(t, "Integrate with a released lease", err, "src/a.go", "released")

	broken := b.acquire(t, "web", alice, time.Minute, "lib/")
	if _, err := b.rs.BreakLease(b.ctx, broken.ID); err != nil {
		t.Fatalf("BreakLease: %v", err)
	}
	err = b.refusedIntegrate(t, "with a broken lease",
		integrateParams("web", r.Mainline, alice, []uint64{broken.FencingToken}, put("lib/a.go", "a")))
	wantRefusal(t, "Integrate with a broken lease", err, "lib/a.go", "broken")
}

func testIntegrateSuperseded(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Minute, "src/a.go")
	// Alice pauses past her lease's expiry; bob is granted a directory that covers her file.
	b.clk.Advance(2 * time.Minute)
	newer := b.acquire(t, "web", bob, time.Minute, "src/")
	p := integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "late"))
	err := b.refusedIntegrate(t, "with a superseded token", p)
	wantRefusal(t, "Integrate with a superseded token", err, "src/a.go", "stale", fmt.Sprintf("token %d", newer.FencingToken), bob)

	// The newer grant keeps the old token stale after it ends.
	if _, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: newer.ID, Principal: "bob"}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	err = b.refusedIntegrate(t, "with a token superseded by a released lease", p)
	wantRefusal(t, "Integrate with a token superseded by a released lease", err, "src/a.go", "stale", fmt.Sprintf("token %d", newer.FencingToken))

	// Of two later grants, on the directory and on the file itself, the refusal names the newer.
	newest := b.acquire(t, "web", bob, time.Minute, "src/a.go")
	if _, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: newest.ID, Principal: "bob"}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	err = b.refusedIntegrate(t, "with a token superseded twice", p)
	wantRefusal(t, "Integrate with a token superseded twice", err, "src/a.go", "stale", fmt.Sprintf("superseded by token %d granted to %s", newest.FencingToken, bob))
	outer := b.acquire(t, "web", bob, time.Minute, "src/")
	if _, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: outer.ID, Principal: "bob"}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	err = b.refusedIntegrate(t, "with a token superseded on the file, then on the directory", p)
	wantRefusal(t, "Integrate with a token superseded on the file, then on the directory", err, "src/a.go", "stale", fmt.Sprintf("superseded by token %d granted", outer.FencingToken))

	// A later grant on an unrelated path supersedes nothing.
	b.clk.Advance(time.Minute)
	mine := b.acquire(t, "web", alice, time.Minute, "docs/")
	b.clk.Advance(2 * time.Minute)
	b.acquire(t, "web", bob, time.Minute, "docsx/", "doc")
	b.mustIntegrate(t, integrateParams("web", r.Mainline, alice, []uint64{mine.FencingToken}, put("docs/a.md", "a")))
}

// testIntegrateLargestToken: among the given tokens, the lease that counts for a path is the
// holder's covering lease with the largest token; a later grant of the same holder also makes
// an older token stale.
func testIntegrateLargestToken(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	old := b.acquire(t, "web", alice, time.Minute, "src/a.go")
	if _, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: old.ID, Principal: "alice"}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	dir := b.acquire(t, "web", alice, time.Minute, "src/")
	// The released lease alone refuses; with the newer directory lease the newer one counts.
	err := b.refusedIntegrate(t, "with the released token alone",
		integrateParams("web", r.Mainline, alice, []uint64{old.FencingToken}, put("src/a.go", "a")))
	wantRefusal(t, "Integrate with the released token alone", err, "src/a.go", "released")
	c := b.mustIntegrate(t, integrateParams("web", r.Mainline, alice, []uint64{old.FencingToken, dir.FencingToken}, put("src/a.go", "a")))

	file := b.acquire(t, "web", alice, time.Minute, "src/b.go")
	later := b.acquire(t, "web", alice, time.Minute, "src/b.go")
	err = b.refusedIntegrate(t, "with a token the holder's own later grant superseded",
		integrateParams("web", c.IntegratedRevision, alice, []uint64{file.FencingToken}, put("src/b.go", "b")))
	wantRefusal(t, "Integrate with an older token of the same holder", err, "src/b.go", "stale", fmt.Sprintf("token %d", later.FencingToken))
	b.mustIntegrate(t, integrateParams("web", c.IntegratedRevision, alice, []uint64{later.FencingToken, file.FencingToken}, put("src/b.go", "b")))
}

func testIntegrateOtherHolder(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	theirs := b.acquire(t, "web", bob, time.Minute, "src/a.go")
	mine := b.acquire(t, "web", alice, time.Minute, "src/b.go")
	err := b.refusedIntegrate(t, "with another holder's token",
		integrateParams("web", r.Mainline, alice, []uint64{theirs.FencingToken}, put("src/a.go", "a")))
	wantRefusal(t, "Integrate with another holder's token", err, "src/a.go", "not leased", alice)
	err = b.refusedIntegrate(t, "with its own and another holder's token",
		integrateParams("web", r.Mainline, alice, []uint64{mine.FencingToken, theirs.FencingToken}, put("src/a.go", "a"), put("src/b.go", "b")))
	wantRefusal(t, "Integrate with its own and another holder's token", err, "src/a.go", "not leased")
	// Another label of the same principal is another holder.
	err = b.refusedIntegrate(t, "as another label of the holder's principal",
		integrateParams("web", r.Mainline, alice2, []uint64{mine.FencingToken}, put("src/b.go", "b")))
	wantRefusal(t, "Integrate as alice|w2 with alice|w1's token", err, "src/b.go", "not leased")
}

func testIntegrateExpiredNobodyTook(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Minute, "src/a.go")
	b.clk.Advance(time.Hour)
	b.acquire(t, "web", bob, time.Minute, "src/ab.go") // no overlap
	if got := b.lease(t, l.ID); got.State != store.LeaseExpired {
		t.Fatalf("the lease is %s, want %s", got.State, store.LeaseExpired)
	}
	c := b.mustIntegrate(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "late but fine")))
	if c.State != store.ChangeIntegrated || b.repository(t, "web").Mainline != c.IntegratedRevision {
		t.Fatalf("Integrate with an expired lease nobody took = %+v, want it integrated", c)
	}
}

func testIntegrateConflict(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	la := b.acquire(t, "web", alice, time.Minute, "src/a.go")
	b.mustIntegrate(t, integrateParams("web", r.Mainline, alice, []uint64{la.FencingToken}, put("src/a.go", "alice's")))
	if _, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: la.ID, Principal: "alice"}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	// Bob's checkout is older than alice's change to the file he edits.
	lb := b.acquire(t, "web", bob, time.Minute, "src/")
	p := integrateParams("web", r.Mainline, bob, []uint64{lb.FencingToken}, put("src/a.go", "bob's"), put("src/b.go", "bob's b"))
	err := b.refusedIntegrate(t, "on a base where an edited path moved on", p)
	var ce *repo.ConflictError
	if !errors.As(err, &ce) || ce.Path != "src/a.go" {
		t.Fatalf("Integrate of a moved path: err = %v (%T), want the Rebase's *repo.ConflictError on src/a.go", err, err)
	}
	var refusal *store.IntegrateRefusal
	if errors.As(err, &refusal) {
		t.Fatalf("Integrate of a moved path answered a lease refusal %v, want the conflict", err)
	}
	// Deleting it is a conflict as well.
	err = b.refusedIntegrate(t, "deleting a path that moved on",
		integrateParams("web", r.Mainline, bob, []uint64{lb.FencingToken}, del("src/a.go")))
	if !errors.As(err, &ce) || ce.Path != "src/a.go" {
		t.Fatalf("Integrate deleting a moved path: err = %v, want a *repo.ConflictError", err)
	}
}

// testIntegrateRebase: edits made on an old revision apply on top of a mainline that moved on
// other paths.
func testIntegrateRebase(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	seed := b.acquire(t, "web", "seed|w", time.Minute, "src/")
	m1 := b.mustIntegrate(t, integrateParams("web", r.Mainline, "seed|w", []uint64{seed.FencingToken},
		put("src/a.go", "a0"), put("src/b.go", "b0"), put("src/c.go", "c0")))
	if _, err := b.rs.ReleaseLease(b.ctx, store.ReleaseLeaseParams{LeaseID: seed.ID, Principal: "seed"}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	la := b.acquire(t, "web", alice, time.Minute, "src/a.go")
	lb := b.acquire(t, "web", bob, time.Minute, "src/b.go", "src/c.go", "src/d/")
	m2 := b.mustIntegrate(t, integrateParams("web", m1.IntegratedRevision, alice, []uint64{la.FencingToken}, put("src/a.go", "a1")))
	// Bob's edits are based on m1 too.
	m3 := b.mustIntegrate(t, integrateParams("web", m1.IntegratedRevision, bob, []uint64{lb.FencingToken},
		put("src/b.go", "b1"), del("src/c.go"), put("src/d/e.go", "e1")))
	if m3.BaseRevision != m1.IntegratedRevision {
		t.Fatalf("bob's change has base %s, want %s", m3.BaseRevision, m1.IntegratedRevision)
	}
	rev := b.revision(t, "web", m3.IntegratedRevision)
	want := treeOf(map[string]string{"src/a.go": "a1", "src/b.go": "b1", "src/d/e.go": "e1"})
	assertTree(t, "the rebased revision", rev.Tree, want)
	if rev.Parent != m2.IntegratedRevision || rev.TreeDigest != want.Digest() {
		t.Fatalf("the rebased revision: parent %s (want %s), digest %s (want %s)", rev.Parent, m2.IntegratedRevision, rev.TreeDigest, want.Digest())
	}
	if b.repository(t, "web").Mainline != m3.IntegratedRevision {
		t.Fatalf("the mainline is not bob's revision")
	}
}

func testChanges(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	web := b.createRepo(t, "web")
	api := b.createRepo(t, "api")
	lw := b.acquire(t, "web", alice, time.Hour, "f")
	la := b.acquire(t, "api", alice, time.Hour, "f")
	var want []store.Change
	base := web.Mainline
	for i := range 5 {
		b.clk.Advance(time.Second)
		c := b.mustIntegrate(t, integrateParams("web", base, alice, []uint64{lw.FencingToken}, put("f", fmt.Sprint(i))))
		base = c.IntegratedRevision
		want = append(want, c)
		if i == 2 {
			b.mustIntegrate(t, integrateParams("api", api.Mainline, alice, []uint64{la.FencingToken}, put("f", "api")))
		}
	}
	slices.Reverse(want)

	var got []store.Change
	p := store.ListChangesParams{Repository: "web", Limit: 2}
	for pages := 1; ; pages++ {
		page, next, err := b.rs.ListChanges(b.ctx, p)
		if err != nil {
			t.Fatalf("ListChanges(%+v): %v", p, err)
		}
		if len(page) > 2 || (next != "" && len(page) == 0) || pages > 10 {
			t.Fatalf("ListChanges page %d: %d changes, next %q", pages, len(page), next)
		}
		got = append(got, page...)
		if next == "" {
			break
		}
		p.PageToken = next
	}
	if len(got) != len(want) {
		t.Fatalf("ListChanges answered %d changes, want %d", len(got), len(want))
	}
	if page, next, err := b.rs.ListChanges(b.ctx, store.ListChangesParams{Repository: "web", Limit: len(want)}); err != nil || len(page) != len(want) || next != "" {
		t.Fatalf("ListChanges of a page that holds them all: %d changes, next %q, %v; want all %d, and no next page", len(page), next, err, len(want))
	}
	for i := range want {
		assertFields(t, fmt.Sprintf("ListChanges[%d]", i), got[i], want[i])
		g, err := b.rs.GetChange(b.ctx, want[i].ID)
		if err != nil {
			t.Fatalf("GetChange(%s): %v", want[i].ID, err)
		}
		assertFields(t, "GetChange "+want[i].ID, g, want[i])
	}
	apiChanges, _, err := b.rs.ListChanges(b.ctx, store.ListChangesParams{Repository: "api"})
	if err != nil || len(apiChanges) != 1 || apiChanges[0].Repository != "api" {
		t.Fatalf("ListChanges(api) = %+v, %v; want its one change", apiChanges, err)
	}
	_, err = b.rs.GetChange(b.ctx, "chg_unknown")
	wantErr(t, "GetChange of an unknown change", err, store.ErrNotFound)
	_, _, err = b.rs.ListChanges(b.ctx, store.ListChangesParams{Repository: "web", PageToken: "!!!"})
	wantErr(t, "ListChanges(malformed page token)", err, store.ErrInvalidPageToken)
}

// testConcurrentDisjointIntegrates: 16 agents lease a file each and integrate concurrently,
// each on the revision of its own previous change (the mainline moved on other paths since):
// every change is integrated, the mainline holds every agent's last edit, and the revisions
// form one chain through every change.
func testConcurrentDisjointIntegrates(t *testing.T, newStore Factory) {
	const (
		agents = 16
		rounds = 4
	)
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	var (
		mu       sync.Mutex
		accepted = map[string]bool{} // change ids
		wg       sync.WaitGroup
	)
	for g := range agents {
		holder := fmt.Sprintf("agent%02d|w", g)
		path := fmt.Sprintf("agents/%02d.txt", g)
		wg.Go(func() {
			l, err := b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: "web", Paths: []string{path}, Holder: holder, TTL: time.Hour})
			if err != nil {
				t.Errorf("AcquireLease(%s): %v", path, err)
				return
			}
			base := r.Mainline
			for round := range rounds {
				c, err := b.rs.Integrate(b.ctx, integrateParams("web", base, holder, []uint64{l.FencingToken},
					put(path, fmt.Sprintf("agent %d round %d\n", g, round))))
				if err != nil {
					t.Errorf("Integrate(%s, round %d): %v", path, round, err)
					return
				}
				if c.State != store.ChangeIntegrated {
					t.Errorf("Integrate(%s) = %s, want integrated", path, c.State)
				}
				base = c.IntegratedRevision
				mu.Lock()
				accepted[c.ID] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	want := map[string]string{}
	for g := range agents {
		want[fmt.Sprintf("agents/%02d.txt", g)] = fmt.Sprintf("agent %d round %d\n", g, rounds-1)
	}
	assertTree(t, "the final mainline", b.mainlineTree(t, "web"), treeOf(want))

	// One chain from the mainline to the first revision, through every change once.
	seen := map[string]bool{}
	id := b.repository(t, "web").Mainline
	for id != r.Mainline {
		rev := b.revision(t, "web", id)
		if !accepted[rev.ChangeID] || seen[rev.ChangeID] {
			t.Fatalf("revision %s has change %q: not an accepted change, or seen twice", rev.ID, rev.ChangeID)
		}
		seen[rev.ChangeID] = true
		id = rev.Parent
	}
	if len(seen) != agents*rounds {
		t.Fatalf("the mainline's history has %d changes, want %d", len(seen), agents*rounds)
	}
}

// testConcurrentContention: 16 agents take turns on one file: acquire (waiting while another
// holds it), integrate on the current mainline, release. The test's logical clock shows that
// no two held the lease at once, and the mainline ends with the content of the last accepted
// change.
func testConcurrentContention(t *testing.T, newStore Factory) {
	const (
		agents = 16
		rounds = 3
		path   = "shared.txt"
	)
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	type turn struct {
		token             uint64
		holder            string
		answered, release int64
	}
	var (
		seq     atomic.Int64
		holders atomic.Int64
		mu      sync.Mutex
		turns   []turn
		written = map[string]string{} // change id → the content it wrote
		wg      sync.WaitGroup
	)
	// The first failure ends every agent's turn: one that fails holding the lease would keep the
	// others waiting for it until the test's deadline, a hang where a failure is due.
	ctx, stop := context.WithCancel(b.ctx)
	defer stop()
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		stop()
	}
	for g := range agents {
		principal := fmt.Sprintf("agent%02d", g)
		holder := principal + "|w"
		wg.Go(func() {
			for round := range rounds {
				var l store.Lease
				for {
					ch := b.rs.LeaseSignal()
					var err error
					l, err = b.rs.AcquireLease(ctx, store.AcquireLeaseParams{Repository: "web", Paths: []string{path}, Holder: holder, TTL: time.Hour})
					if err == nil {
						break
					}
					if ctx.Err() != nil {
						return // another agent failed
					}
					if !errors.Is(err, store.ErrLeaseConflict) {
						fail("AcquireLease(%s): %v", holder, err)
						return
					}
					select {
					case <-ch:
					case <-time.After(pollFallback):
					case <-ctx.Done():
						return
					}
				}
				answered := seq.Add(1)
				if n := holders.Add(1); n != 1 {
					fail("%d holders of %s at once", n, path)
				}
				content := fmt.Sprintf("%s round %d\n", holder, round)
				base, err := b.rs.GetRepository(ctx, "web")
				if err != nil {
					fail("GetRepository: %v", err)
					return
				}
				c, err := b.rs.Integrate(ctx, integrateParams("web", base.Mainline, holder, []uint64{l.FencingToken}, put(path, content)))
				if err != nil {
					fail("Integrate by %s: %v", holder, err)
					return
				}
				holders.Add(-1)
				release := seq.Add(1)
				if _, err := b.rs.ReleaseLease(ctx, store.ReleaseLeaseParams{LeaseID: l.ID, Principal: principal, FencingToken: l.FencingToken}); err != nil {
					fail("ReleaseLease: %v", err)
					return
				}
				mu.Lock()
				turns = append(turns, turn{l.FencingToken, holder, answered, release})
				written[c.ID] = content
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	sort.Slice(turns, func(i, j int) bool { return turns[i].answered < turns[j].answered })
	for i := 1; i < len(turns); i++ {
		prev, cur := turns[i-1], turns[i]
		if cur.answered < prev.release {
			t.Fatalf("%s held the lease (token %d) before %s released token %d", cur.holder, cur.token, prev.holder, prev.token)
		}
		if cur.token <= prev.token {
			t.Fatalf("token %d of %s follows token %d of %s", cur.token, cur.holder, prev.token, prev.holder)
		}
	}
	changes, _, err := b.rs.ListChanges(b.ctx, store.ListChangesParams{Repository: "web", Limit: 1000})
	if err != nil || len(changes) != agents*rounds {
		t.Fatalf("ListChanges = %d changes, %v; want %d", len(changes), err, agents*rounds)
	}
	last := changes[0]
	content, ok := written[last.ID]
	if !ok {
		t.Fatalf("the newest change %s is not one an accepted Integrate answered", last.ID)
	}
	repository := b.repository(t, "web")
	if repository.Mainline != last.IntegratedRevision {
		t.Fatalf("the mainline %s is not the newest change's revision %s", repository.Mainline, last.IntegratedRevision)
	}
	assertTree(t, "the final mainline", b.mainlineTree(t, "web"), treeOf(map[string]string{path: content}))
}

// BenchmarkIntegrate measures integrations from 16 agents on disjoint leases, each on the
// revision of its own previous change; it reports integrations/s.
func BenchmarkIntegrate(b *testing.B, newStore Factory) {
	const agents = 16
	st := newStore(b, clock.NewFake(epoch))
	rs := st
	ctx := b.Context()
	r, err := rs.CreateRepository(ctx, store.CreateRepositoryParams{Name: "bench", CreatedBy: "admin"})
	if err != nil {
		b.Fatalf("CreateRepository: %v", err)
	}
	leases := make([]store.Lease, agents)
	for g := range agents {
		if leases[g], err = rs.AcquireLease(ctx, store.AcquireLeaseParams{Repository: "bench",
			Paths: []string{fmt.Sprintf("agents/%02d/", g)}, Holder: fmt.Sprintf("agent%02d|w", g), TTL: time.Hour}); err != nil {
			b.Fatalf("AcquireLease: %v", err)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for g := range agents {
		wg.Go(func() {
			base := r.Mainline
			l := leases[g]
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				c, err := rs.Integrate(ctx, integrateParams("bench", base, l.Holder, []uint64{l.FencingToken},
					put(fmt.Sprintf("agents/%02d/file.txt", g), fmt.Sprintf("edit %d\n", i))))
				if err != nil {
					b.Errorf("Integrate: %v", err)
					return
				}
				base = c.IntegratedRevision
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "integrations/s")
}

// testPushedCommits checks what `git push` leans on: a change remembers the commit it was
// pushed as, the newest change of a commit pushed twice is the one found, and a mainline
// revision is found by its commit, a candidate's revision never.
func testPushedCommits(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	gated := b.createPolicyRepo(t, "gated")
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	gl := b.acquire(t, "gated", alice, time.Hour, "src/")
	const pushed = "0123456789abcdef0123456789abcdef01234567"

	_, err := b.rs.PushedChange(b.ctx, "web", pushed)
	wantErr(t, "PushedChange of a commit never pushed", err, store.ErrNotFound)
	p := integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "a"))
	p.PushedCommit = pushed
	first := b.mustIntegrate(t, p)
	if got, err := b.rs.PushedChange(b.ctx, "web", pushed); err != nil || got.ID != first.ID {
		t.Fatalf("PushedChange(%s) = %s, %v; want the change %s", pushed, got.ID, err, first.ID)
	}
	_, err = b.rs.PushedChange(b.ctx, "gated", pushed)
	wantErr(t, "PushedChange of another repository's pushed commit", err, store.ErrNotFound)

	p = integrateParams("web", first.IntegratedRevision, alice, []uint64{l.FencingToken}, put("src/b.go", "b"))
	p.PushedCommit = pushed
	second := b.mustIntegrate(t, p)
	got, err := b.rs.PushedChange(b.ctx, "web", pushed)
	if err != nil || got.ID != second.ID {
		t.Fatalf("PushedChange(%s) pushed twice = %s, %v; want the newer change %s", pushed, got.ID, err, second.ID)
	}
	assertFields(t, "PushedChange", got, b.change(t, second.ID))

	other := integrateParams("web", second.IntegratedRevision, alice, []uint64{l.FencingToken}, put("src/c.go", "c"))
	other.PushedCommit = strings.Repeat("ab", 20)
	third := b.mustIntegrate(t, other)
	if got, err := b.rs.PushedCommits(b.ctx, "web", 10); err != nil || !slices.Equal(got, []string{other.PushedCommit, pushed}) {
		t.Fatalf("PushedCommits = %v, %v; want the newest pushed commit first, each once", got, err)
	}
	if got, err := b.rs.PushedCommits(b.ctx, "web", 1); err != nil || len(got) != 1 {
		t.Fatalf("PushedCommits(limit 1) = %v, %v", got, err)
	}
	if got, err := b.rs.PushedCommits(b.ctx, "gated", 10); err != nil || len(got) != 0 {
		t.Fatalf("PushedCommits of a repository without pushes = %v, %v", got, err)
	}

	head := b.revision(t, "web", third.IntegratedRevision)
	rev, err := b.rs.RevisionByCommit(b.ctx, "web", head.GitCommit)
	if err != nil {
		t.Fatalf("RevisionByCommit(%s): %v", head.GitCommit, err)
	}
	want := head
	want.Tree, want.TreeDigest = nil, ""
	assertFields(t, "RevisionByCommit", rev, want)
	_, err = b.rs.RevisionByCommit(b.ctx, "gated", head.GitCommit)
	wantErr(t, "RevisionByCommit of another repository's commit", err, store.ErrNotFound)

	// A candidate's revision has no commit of its own: no commit finds it.
	queued := b.queue(t, integrateParams("gated", gated.Mainline, alice, []uint64{gl.FencingToken}, put("src/a.go", "a")))
	v := b.advance(t, newGate(), "gated", step{queued.ID, store.ChangeValidating})[0]
	if cand := b.revision(t, "gated", v.CandidateRevision); cand.GitCommit != "" {
		t.Fatalf("the candidate revision %s has the commit %s, want none", cand.ID, cand.GitCommit)
	}
	_, err = b.rs.RevisionByCommit(b.ctx, "gated", "")
	wantErr(t, "RevisionByCommit of no commit", err, store.ErrNotFound)
}
