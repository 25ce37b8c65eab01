package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// The test of the migration to the git content store is the same for every backend but for
// the SQL that writes the old layout: a backend's test writes NewLegacyContent with the
// statements of its last schema before the migration, opens the store, which migrates it, and
// checks the result with CheckGitMigration, AdvanceMigratedQueue and IntegrateOnMigrated.

// LegacyContent is what a build before the git content store wrote: two repositories, their
// revisions and changes, and the blobs they name. A backend writes Repositories, Revisions,
// Changes and Blobs as its old schema kept them.
type LegacyContent struct {
	Revisions []LegacyRevision // in the order written
	Changes   []LegacyChange   // in the order written (seq)

	plain, gated LegacyRepository
	queued       LegacyChange   // the gated repository's QUEUED change
	side         LegacyRevision // the candidate of the REJECTED change, not on the mainline
}

// Repositories answers the content's repositories, in the order written.
func (lc LegacyContent) Repositories() []LegacyRepository {
	return []LegacyRepository{lc.plain, lc.gated}
}

// LegacyRepository is a repository and its mainline.
type LegacyRepository struct {
	Name       string
	Validation []byte // the policy, nil for none
	CreatedAt  time.Time
	Mainline   []LegacyRevision // newest first: Mainline[0] is the head
}

// LegacyRevision is a revision and its files.
type LegacyRevision struct {
	ID, Repository, Parent, ChangeID, Author string
	CreatedAt                                time.Time

	files map[string]string // path: content
}

// Tree answers the revision's files as the old build listed and encoded them.
func (r LegacyRevision) Tree() repo.Tree {
	t := repo.Tree{}
	for p, c := range r.files {
		t = append(t, repo.Entry{Path: p, Digest: repo.Digest([]byte(c)), Size: uint64(len(c))})
	}
	slices.SortFunc(t, func(a, b repo.Entry) int { return strings.Compare(a.Path, b.Path) })
	return t
}

// LegacyChange is a change and, for one that went through a queue, its edits.
type LegacyChange struct {
	store.Change
	edits []legacyEdit // nil: integrated directly, edits NULL
}

type legacyEdit struct {
	path, content string
	delete        bool
}

// EditsJSON answers the change's edits as changes.edits kept them, or nil (SQL NULL) for a
// change integrated directly.
func (c LegacyChange) EditsJSON() []byte {
	if c.edits == nil {
		return nil
	}
	edits := make([]repo.FileEdit, 0, len(c.edits))
	for _, e := range c.edits {
		if e.delete {
			edits = append(edits, repo.FileEdit{Path: e.path, Delete: true})
			continue
		}
		edits = append(edits, repo.FileEdit{Path: e.path, Digest: repo.Digest([]byte(e.content)), Size: uint64(len(e.content))})
	}
	b, err := json.Marshal(edits)
	if err != nil {
		panic(err) // a slice of plain structs
	}
	return b
}

// Blobs answers every content the old build stored, once each, sorted.
func (lc LegacyContent) Blobs() []string {
	seen := map[string]bool{}
	var out []string
	add := func(c string) {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	for _, r := range lc.Revisions {
		for _, c := range r.files {
			add(c)
		}
	}
	for _, c := range lc.Changes {
		for _, e := range c.edits {
			if !e.delete {
				add(e.content)
			}
		}
	}
	slices.Sort(out)
	return out
}

// NewLegacyContent answers the content of the migration test, written from start on, a minute
// apart:
//
//   - plain, without a policy: a first revision with no files, then three changes integrated
//     directly, which write files (one empty, one in a nested directory, two with the same
//     content), delete one and rewrite another, the last made on an older base revision.
//   - gated, with a policy: a change queued, validated and integrated with an attestation; a
//     change rejected after validation, whose candidate stays off the mainline; and a change
//     still QUEUED with its edits (a write, a new file in a new directory, a delete).
func NewLegacyContent(start time.Time) LegacyContent {
	at := func(minute int) time.Time { return start.Add(time.Duration(minute) * time.Minute) }
	const (
		readme  = "# plain\n"
		oldTxt  = "to be deleted\n"
		main1   = "package main\n\nfunc main() {}\n"
		main2   = "package main\n\nfunc main() { println(\"hello\") }\n"
		strs    = "package util\n\nfunc Upper(s string) string { return s }\n"
		config  = "name: gated\nreplicas: 2\n"
		app1    = "package app\n\nconst Version = 1\n"
		app2    = "package app\n\nconst Version = 2\n"
		broken  = "package app\n\nconst Version = \n"
		helper  = "package lib\n\nfunc Help() {}\n"
		message = "Drop old.txt and say hello\n\nmain prints a greeting now."
	)
	var lc LegacyContent
	rev := func(repository string, parent *LegacyRevision, c *LegacyChange, author string, files map[string]string, t time.Time) LegacyRevision {
		r := LegacyRevision{ID: store.NewID("rev"), Repository: repository, Author: author, files: files, CreatedAt: t}
		if parent != nil {
			r.Parent = parent.ID
		}
		if c != nil {
			r.ChangeID = c.ID
		}
		lc.Revisions = append(lc.Revisions, r)
		return r
	}
	change := func(repository string, state store.ChangeState, base LegacyRevision, author, msg string, paths []string, created, updated time.Time) LegacyChange {
		return LegacyChange{Change: store.Change{ID: store.NewID("chg"), Repository: repository, State: state,
			BaseRevision: base.ID, Holder: author, Message: msg, Paths: paths, CreatedAt: created, UpdatedAt: updated}}
	}

	// plain: every change integrated directly, its revision written at the same instant.
	p0 := rev("plain", nil, nil, "admin", nil, at(0))
	c1 := change("plain", store.ChangeIntegrated, p0, "alice|w1", "Add the first files",
		[]string{"README.md", "empty.txt", "old.txt", "src/main.go", "src/util/strings.go"}, at(1), at(1))
	p1 := rev("plain", &p0, &c1, c1.Holder, map[string]string{"README.md": readme, "empty.txt": "", "old.txt": oldTxt,
		"src/main.go": main1, "src/util/strings.go": strs}, at(1))
	c2 := change("plain", store.ChangeIntegrated, p1, "bob|w2", message, []string{"old.txt", "src/main.go"}, at(2), at(2))
	p2 := rev("plain", &p1, &c2, c2.Holder, map[string]string{"README.md": readme, "empty.txt": "", "src/main.go": main2,
		"src/util/strings.go": strs}, at(2))
	c3 := change("plain", store.ChangeIntegrated, p1, "alice|w1", "Add the guide", []string{"docs/guide/intro.md"}, at(3), at(3))
	p3 := rev("plain", &p2, &c3, c3.Holder, map[string]string{"README.md": readme, "docs/guide/intro.md": readme,
		"empty.txt": "", "src/main.go": main2, "src/util/strings.go": strs}, at(3))
	c1.CandidateRevision, c1.IntegratedRevision = p1.ID, p1.ID
	c2.CandidateRevision, c2.IntegratedRevision = p2.ID, p2.ID
	c3.CandidateRevision, c3.IntegratedRevision = p3.ID, p3.ID
	lc.Changes = append(lc.Changes, c1, c2, c3)
	lc.plain = LegacyRepository{Name: "plain", CreatedAt: at(0), Mainline: []LegacyRevision{p3, p2, p1, p0}}

	// gated: queued at one time, its candidate built later, then settled later still.
	g0 := rev("gated", nil, nil, "admin", nil, at(4))
	gc1 := change("gated", store.ChangeIntegrated, g0, "carol|ci", "Configure the app",
		[]string{"app/config.yaml", "app/main.go"}, at(5), at(7))
	gc1.edits = []legacyEdit{{path: "app/config.yaml", content: config}, {path: "app/main.go", content: app1}}
	g1 := rev("gated", &g0, &gc1, gc1.Holder, map[string]string{"app/config.yaml": config, "app/main.go": app1}, at(6))
	gc1.CandidateRevision, gc1.IntegratedRevision, gc1.JobID = g1.ID, g1.ID, store.NewID("job")
	gc1.AttestationDigest = repo.Digest([]byte("the attestation of " + g1.ID))

	gc2 := change("gated", store.ChangeRejected, g1, "dave|w3", "Break the build", []string{"app/main.go"}, at(8), at(10))
	gc2.edits = []legacyEdit{{path: "app/main.go", content: broken}}
	g2 := rev("gated", &g1, &gc2, gc2.Holder, map[string]string{"app/config.yaml": config, "app/main.go": broken}, at(9))
	gc2.CandidateRevision, gc2.JobID, gc2.Reason = g2.ID, store.NewID("job"), "validate job failed"

	gc3 := change("gated", store.ChangeQueued, g1, "carol|w1", "Move the app on",
		[]string{"app/config.yaml", "app/lib/helper.go", "app/main.go"}, at(11), at(11))
	gc3.edits = []legacyEdit{{path: "app/config.yaml", delete: true}, {path: "app/lib/helper.go", content: helper},
		{path: "app/main.go", content: app2}}
	lc.Changes = append(lc.Changes, gc1, gc2, gc3)
	lc.queued, lc.side = gc3, g2
	lc.gated = LegacyRepository{Name: "gated", Validation: []byte(`{"command": ["make", "test"], "timeout": "600s"}`),
		CreatedAt: at(4), Mainline: []LegacyRevision{g1, g0}}
	return lc
}

// CheckGitMigration checks, through the store's API, that s holds lc as it was, in git's object
// model too, and answers the git tree and commit of every revision and the mainline commit of
// each repository ("<id> tree", "<id> commit", "<name> mainline").
func CheckGitMigration(t *testing.T, s store.Store, lc LegacyContent) map[string]string {
	t.Helper()
	ctx := context.Background()
	ids := map[string]string{}
	onMainline := map[string]bool{}
	for _, r := range lc.Repositories() {
		for _, rev := range r.Mainline {
			onMainline[rev.ID] = true
		}
	}
	for _, want := range lc.Revisions {
		got := checkRevision(t, s, want)
		ids[want.ID+" tree"], ids[want.ID+" commit"] = got.GitTree, got.GitCommit
		if onMainline[want.ID] != (got.GitCommit != "") {
			t.Errorf("revision %s has the commit %q; want one exactly when it is on the mainline (%t)",
				want.ID, got.GitCommit, onMainline[want.ID])
		}
	}
	if ids[lc.side.ID+" tree"] == "" || ids[lc.side.ID+" commit"] != "" {
		t.Errorf("the rejected candidate %s has the git tree %q and the commit %q; want a tree and no commit",
			lc.side.ID, ids[lc.side.ID+" tree"], ids[lc.side.ID+" commit"])
	}
	for _, want := range lc.Changes {
		got, err := s.GetChange(ctx, want.ID)
		if err != nil {
			t.Fatalf("GetChange(%s) after the migration: %v", want.ID, err)
		}
		got.CreatedAt, got.UpdatedAt = got.CreatedAt.UTC(), got.UpdatedAt.UTC()
		if !sameChange(got, want.Change) {
			t.Errorf("change %s after the migration is\n  %+v\nwant\n  %+v", want.ID, got, want.Change)
		}
	}
	changes := map[string]store.Change{}
	for _, c := range lc.Changes {
		changes[c.ID] = c.Change
	}
	for _, r := range lc.Repositories() {
		ids[r.Name+" mainline"] = checkMainline(t, s, r, changes)
	}
	return ids
}

// sameChange reports whether got is want, field for field.
func sameChange(got, want store.Change) bool {
	return got.ID == want.ID && got.Repository == want.Repository && got.State == want.State &&
		got.BaseRevision == want.BaseRevision && got.CandidateRevision == want.CandidateRevision &&
		got.IntegratedRevision == want.IntegratedRevision && got.Holder == want.Holder && got.Message == want.Message &&
		slices.Equal(got.Paths, want.Paths) && got.JobID == want.JobID && got.AttestationDigest == want.AttestationDigest &&
		got.Reason == want.Reason && got.CreatedAt.Equal(want.CreatedAt) && got.UpdatedAt.Equal(want.UpdatedAt) &&
		got.QueuePosition == want.QueuePosition
}

// checkRevision checks that the revision want answers as it did, and that its git tree is the
// tree of its files computed by go-git alone, every object of which the store holds.
func checkRevision(t *testing.T, s store.Store, want LegacyRevision) store.Revision {
	t.Helper()
	got, err := s.GetRevision(context.Background(), want.Repository, want.ID)
	if err != nil {
		t.Fatalf("GetRevision(%s, %s) after the migration: %v", want.Repository, want.ID, err)
	}
	if got.ID != want.ID || got.Repository != want.Repository || got.Parent != want.Parent ||
		got.ChangeID != want.ChangeID || got.Holder != want.Author || !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("revision %s after the migration is %s %q parent %q change %q author %q at %s; want %s %q %q %q %q %s",
			want.ID, got.ID, got.Repository, got.Parent, got.ChangeID, got.Holder, got.CreatedAt,
			want.ID, want.Repository, want.Parent, want.ChangeID, want.Author, want.CreatedAt)
	}
	if tree := want.Tree(); !slices.Equal(got.Tree, tree) || got.TreeDigest != tree.Digest() {
		t.Errorf("revision %s lists %v (%s); want its old files %v (%s)", want.ID, got.Tree, got.TreeDigest, tree, tree.Digest())
	}
	checkGitTree(t, s, want.ID, got.GitTree, want.files)
	return got
}

// checkGitTree checks that id is the git tree of files (path: content) as go-git writes it, and
// that the store answers each of its trees and blobs byte for byte.
func checkGitTree(t *testing.T, s store.Store, what, id string, files map[string]string) {
	t.Helper()
	mem := memory.NewStorage()
	contents := make(map[string][]byte, len(files))
	for p, c := range files {
		contents[p] = []byte(c)
	}
	want, err := gitstore.WriteFiles(mem, contents)
	if err != nil {
		t.Fatal(err)
	}
	if id != want.String() {
		t.Errorf("%s has the git tree %q; want %s, the tree of its files", what, id, want)
		return
	}
	var walk func(id plumbing.Hash)
	walk = func(id plumbing.Hash) {
		o, err := mem.EncodedObject(plumbing.AnyObject, id)
		if err != nil {
			t.Fatal(err)
		}
		wantData := readObject(t, o)
		typ, data, err := s.ReadGitObject(context.Background(), id)
		if err != nil || typ != o.Type() || !bytes.Equal(data, wantData) {
			t.Errorf("ReadGitObject(%s) of %s = %s %q, %v; want the %s %q", id, what, typ, data, err, o.Type(), wantData)
			return
		}
		if typ != plumbing.TreeObject {
			return
		}
		tree, err := object.DecodeTree(mem, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range tree.Entries {
			walk(e.Hash)
		}
	}
	walk(want)
}

func readObject(t *testing.T, o plumbing.EncodedObject) []byte {
	t.Helper()
	data, err := gitstore.ObjectData(o)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// readCommit answers the commit id as the store holds it, decoded by go-git.
func readCommit(t *testing.T, s store.Store, id plumbing.Hash) *object.Commit {
	t.Helper()
	typ, data, err := s.ReadGitObject(context.Background(), id)
	if err != nil || typ != plumbing.CommitObject {
		t.Fatalf("ReadGitObject(%s) = %s, %v; want a commit", id, typ, err)
	}
	o := &plumbing.MemoryObject{}
	o.SetType(typ)
	if _, err := o.Write(data); err != nil {
		t.Fatal(err)
	}
	var c object.Commit
	if err := c.Decode(o); err != nil {
		t.Fatalf("decode commit %s: %v", id, err)
	}
	if c.Hash != id {
		t.Fatalf("the commit stored as %s hashes to %s", id, c.Hash)
	}
	return &c
}

// commitMessage answers a commit message's text before its trailer block, and the trailers.
func commitMessage(t *testing.T, msg string) (string, map[string]string) {
	t.Helper()
	i := strings.LastIndex(msg, "\n\n")
	if i < 0 {
		t.Fatalf("commit message %q has no trailer block", msg)
	}
	trailers := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(msg[i+2:], "\n"), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if _, dup := trailers[k]; !ok || dup {
			t.Fatalf("commit message %q: %q is not a trailer, or a second one", msg, line)
		}
		trailers[k] = v
	}
	return msg[:i], trailers
}

// checkMainline walks r's commits from its mainline commit and checks that there is one per
// mainline revision, newest first, each naming its revision's tree, change and attestation.
// It answers the mainline commit.
func checkMainline(t *testing.T, s store.Store, r LegacyRepository, changes map[string]store.Change) string {
	t.Helper()
	ctx := context.Background()
	got, err := s.GetRepository(ctx, r.Name)
	if err != nil {
		t.Fatalf("GetRepository(%s) after the migration: %v", r.Name, err)
	}
	if got.Mainline != r.Mainline[0].ID || !bytes.Equal(got.Validation, r.Validation) || !got.CreatedAt.Equal(r.CreatedAt) {
		t.Errorf("repository %s after the migration is at %s, policy %s, created %s; want %s, %s, %s",
			r.Name, got.Mainline, got.Validation, got.CreatedAt, r.Mainline[0].ID, r.Validation, r.CreatedAt)
	}
	id, err := store.ParseGitID(got.MainlineCommit)
	if err != nil {
		t.Fatalf("repository %s: mainline commit: %v", r.Name, err)
	}
	var walked []string
	for n := 0; ; n++ {
		c := readCommit(t, s, id)
		walked = append(walked, id.String())
		if n >= len(r.Mainline) {
			t.Fatalf("the commits of %s from %s are %v; want one per mainline revision (%d)", r.Name, got.MainlineCommit, walked, len(r.Mainline))
		}
		want := r.Mainline[n]
		rev, err := s.GetRevision(ctx, r.Name, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rev.GitCommit != id.String() || c.TreeHash.String() != rev.GitTree {
			t.Errorf("commit %d of %s is %s of the tree %s; want revision %s's commit %q of its tree %s",
				n, r.Name, id, c.TreeHash, want.ID, rev.GitCommit, rev.GitTree)
		}
		// What the commit says, as this build writes it: the change's message and the trailers
		// naming change, revision, holder and attestation; authored when the change was made,
		// committed when the mainline moved to it.
		subject := "Create repository " + r.Name
		trailers := map[string]string{"Ag-Revision": want.ID, "Ag-Author": want.Author}
		authored, committed := want.CreatedAt, want.CreatedAt
		if ch, ok := changes[want.ChangeID]; ok {
			subject, trailers["Ag-Change"] = ch.Message, ch.ID
			if ch.AttestationDigest != "" {
				trailers["Ag-Attestation"] = ch.AttestationDigest
			}
			authored, committed = ch.CreatedAt, ch.UpdatedAt
		}
		body, gotTrailers := commitMessage(t, c.Message)
		if body != subject || !maps.Equal(gotTrailers, trailers) {
			t.Errorf("commit of revision %s says %q with the trailers %v; want %q with %v", want.ID, body, gotTrailers, subject, trailers)
		}
		if c.Author.When.Unix() != authored.Unix() {
			t.Errorf("commit of revision %s is authored at %s; want %s, when its change was made", want.ID, c.Author.When, authored)
		}
		if c.Committer.When.Unix() != committed.Unix() {
			t.Errorf("commit of revision %s is committed at %s; want %s, when the mainline moved to it (as AdvanceQueue dates it)",
				want.ID, c.Committer.When, committed)
		}
		if len(c.ParentHashes) == 0 {
			break
		}
		if len(c.ParentHashes) != 1 {
			t.Fatalf("commit of revision %s has the parents %v; want one", want.ID, c.ParentHashes)
		}
		id = c.ParentHashes[0]
	}
	if len(walked) != len(r.Mainline) {
		t.Errorf("the commits of %s from %s are %v; want one per mainline revision (%d)", r.Name, got.MainlineCommit, walked, len(r.Mainline))
	}
	return got.MainlineCommit
}

// AdvanceMigratedQueue checks that the QUEUED change of the old build gets its turn: its
// candidate is the migrated mainline with its edits, validated under the policy as stored.
func AdvanceMigratedQueue(t *testing.T, s store.Store, lc LegacyContent) {
	t.Helper()
	ctx := context.Background()
	var validation []byte
	changed, err := gate.AdvanceWith(ctx, s, lc.gated.Name, func(v []byte) gate.Rules {
		return gate.Rules{
			Decide: func(store.Change, store.Revision, store.Job, *store.Attestation) gate.Verdict {
				return gate.Verdict{Outcome: gate.VerdictPending}
			},
			Job: func(c store.Change, candidate store.Revision, _ string, _ store.Revision) store.EnqueueJobParams {
				validation = bytes.Clone(v)
				payload, err := json.Marshal(map[string]string{"change_id": c.ID, "revision": candidate.ID, "git_tree": candidate.GitTree})
				if err != nil {
					panic(err)
				}
				return store.EnqueueJobParams{Kind: "validate", Payload: payload, Priority: 10, MaxAttempts: 2,
					UniqueKey: "validate:" + candidate.ID, EnqueuedBy: "gate"}
			},
		}
	})
	if err != nil {
		t.Fatalf("AdvanceQueue(%s) after the migration: %v", lc.gated.Name, err)
	}
	if len(changed) != 1 || changed[0].ID != lc.queued.ID || changed[0].State != store.ChangeValidating ||
		changed[0].CandidateRevision == "" || changed[0].JobID == "" {
		t.Fatalf("AdvanceQueue(%s) after the migration changed %+v; want the queued change %s VALIDATING with a candidate and a job",
			lc.gated.Name, changed, lc.queued.ID)
	}
	if !bytes.Equal(validation, lc.gated.Validation) {
		t.Errorf("the gate's Job rule got the policy %s; want %s, as stored", validation, lc.gated.Validation)
	}
	head := lc.gated.Mainline[0]
	files := maps.Clone(head.files)
	for _, e := range lc.queued.edits {
		if e.delete {
			delete(files, e.path)
		} else {
			files[e.path] = e.content
		}
	}
	checkRevision(t, s, LegacyRevision{ID: changed[0].CandidateRevision, Repository: lc.gated.Name, Parent: head.ID,
		ChangeID: lc.queued.ID, Author: lc.queued.Holder, files: files, CreatedAt: changed[0].UpdatedAt})
	if c, err := s.GetChange(ctx, lc.queued.ID); err != nil || c.State != store.ChangeValidating {
		t.Fatalf("GetChange(%s) after AdvanceQueue = %s, %v; want it VALIDATING", lc.queued.ID, c.State, err)
	}
}

// IntegrateOnMigrated checks that a change integrated into the migrated plain repository lands
// on its mainline, its commit's parent the migrated head commit; migrated is what
// CheckGitMigration answered.
func IntegrateOnMigrated(t *testing.T, s store.Store, lc LegacyContent, migrated map[string]string) {
	t.Helper()
	ctx := context.Background()
	const holder, path, content = "alice|w1", "src/main.go", "package main\n\nfunc main() { println(\"hello, world\") }\n"
	lease, err := s.AcquireLease(ctx, store.AcquireLeaseParams{Repository: lc.plain.Name, Paths: []string{path}, Holder: holder, TTL: time.Hour})
	if err != nil {
		t.Fatalf("AcquireLease after the migration: %v", err)
	}
	head := lc.plain.Mainline[0]
	digest := repo.Digest([]byte(content))
	c, err := s.Integrate(ctx, store.IntegrateParams{Repository: lc.plain.Name, BaseRevision: head.ID, Holder: holder,
		FencingTokens: []uint64{lease.FencingToken}, Paths: []string{path}, Message: "Greet the world",
		Blobs: []store.Blob{{Digest: digest, Content: []byte(content)}},
		Edits: []repo.FileEdit{{Path: path, Digest: digest, Size: uint64(len(content))}}})
	if err != nil || c.State != store.ChangeIntegrated {
		t.Fatalf("Integrate after the migration = %s, %v; want it INTEGRATED", c.State, err)
	}
	files := maps.Clone(head.files)
	files[path] = content
	rev := checkRevision(t, s, LegacyRevision{ID: c.IntegratedRevision, Repository: lc.plain.Name, Parent: head.ID,
		ChangeID: c.ID, Author: holder, files: files, CreatedAt: c.UpdatedAt})
	r, err := s.GetRepository(ctx, lc.plain.Name)
	if err != nil || r.Mainline != rev.ID || r.MainlineCommit != rev.GitCommit || rev.GitCommit == "" {
		t.Fatalf("GetRepository(%s) after Integrate = %s %q, %v; want the new revision %s and its commit %q",
			lc.plain.Name, r.Mainline, r.MainlineCommit, err, rev.ID, rev.GitCommit)
	}
	commit := readCommit(t, s, plumbing.NewHash(rev.GitCommit))
	if parent := migrated[head.ID+" commit"]; len(commit.ParentHashes) != 1 || commit.ParentHashes[0].String() != parent {
		t.Errorf("the commit integrated after the migration has the parents %v; want the migrated head's commit %s",
			commit.ParentHashes, parent)
	}
	if commit.TreeHash.String() != rev.GitTree {
		t.Errorf("the commit integrated after the migration names the tree %s; want its revision's %s", commit.TreeHash, rev.GitTree)
	}
}

// CompactMigrated compresses what a build before compressed contents wrote, in small batches
// as the server does, and checks that the store then reads as it did: every revision's git
// ids are want's (CheckGitMigration's answer before).
func CompactMigrated(t *testing.T, st store.Store, lc LegacyContent, want map[string]string) {
	t.Helper()
	ctx := context.Background()
	total := 0
	for batches := 0; ; batches++ {
		n, err := st.CompactStored(ctx, 2)
		if err != nil {
			t.Fatalf("CompactStored after %d rows: %v", total, err)
		}
		if n == 0 {
			break
		}
		if n > 2 || batches > 1000 {
			t.Fatalf("CompactStored(2) rewrote %d rows in batch %d", n, batches)
		}
		total += n
	}
	if total < len(lc.Blobs()) {
		t.Fatalf("CompactStored rewrote %d rows of a store an old build wrote with %d blobs", total, len(lc.Blobs()))
	}
	if got := CheckGitMigration(t, st, lc); !maps.Equal(got, want) {
		t.Fatalf("the git ids after compaction are\n  %v\nwant\n  %v", got, want)
	}
}
