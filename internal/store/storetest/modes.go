package storetest

import (
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// modeFile is a file of a test's tree with its mode (repo.Entry.Mode): the content of a
// symbolic link is its target, that of a submodule its commit.
type modeFile struct {
	mode, content string
}

// modeTree answers ag's tree of files.
func modeTree(files map[string]modeFile) repo.Tree {
	t := repo.Tree{}
	for path, f := range files {
		if f.mode == repo.ModeGitlink {
			t = append(t, repo.Entry{Path: path, Mode: f.mode, GitlinkCommit: f.content})
			continue
		}
		t = append(t, repo.Entry{Path: path, Digest: repo.Digest([]byte(f.content)), Size: uint64(len(f.content)), Mode: f.mode})
	}
	sort.Slice(t, func(i, j int) bool { return t[i].Path < t[j].Path })
	return t
}

// modeGitTree answers the git tree id of files as git computes it.
func modeGitTree(t *testing.T, files map[string]modeFile) plumbing.Hash {
	t.Helper()
	mem := memory.NewStorage()
	var list []gitstore.File
	for path, f := range files {
		mode, err := gitstore.FileMode(f.mode)
		if err != nil {
			t.Fatal(err)
		}
		id := plumbing.NewHash(f.content)
		if f.mode != repo.ModeGitlink {
			if id, err = gitstore.WriteBlob(mem, []byte(f.content)); err != nil {
				t.Fatal(err)
			}
		}
		list = append(list, gitstore.File{Path: path, Blob: id, Mode: mode})
	}
	root, err := gitstore.WriteTree(mem, list)
	if err != nil {
		t.Fatalf("git tree of %v: %v", files, err)
	}
	return root
}

// importModes stores files as the tree of a git commit, as an import uploads a history, and
// creates the repository name at that commit, with validation (nil for none).
func (b *rbundle) importModes(t *testing.T, name string, validation []byte, files map[string]modeFile) store.Repository {
	t.Helper()
	var blobs []store.Blob
	var list []gitstore.File
	for path, f := range files {
		mode, err := gitstore.FileMode(f.mode)
		if err != nil {
			t.Fatal(err)
		}
		id := plumbing.NewHash(f.content)
		if f.mode != repo.ModeGitlink {
			blobs = append(blobs, blobOf(f.content))
			id = gitstore.BlobID([]byte(f.content))
		}
		list = append(list, gitstore.File{Path: path, Blob: id, Mode: mode})
	}
	if err := b.rs.PutBlobs(b.ctx, blobs); err != nil {
		t.Fatalf("PutBlobs: %v", err)
	}
	objs := store.NewGitObjects(b.ctx, nil)
	root, err := gitstore.WriteTree(objs, list)
	if err != nil {
		t.Fatal(err)
	}
	sig := object.Signature{Name: "Dev", Email: "dev@example.com", When: b.clk.Now()}
	commit, err := gitstore.WriteCommit(objs, gitstore.Commit{Tree: root, Author: sig, Committer: sig, Message: "Import"})
	if err != nil {
		t.Fatal(err)
	}
	pending, err := objs.TakePending()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.rs.PutGitObjects(b.ctx, pending); err != nil {
		t.Fatalf("PutGitObjects: %v", err)
	}
	r, err := b.rs.CreateRepository(b.ctx, store.CreateRepositoryParams{Name: name, Validation: validation, CreatedBy: "admin", GitCommit: commit})
	if err != nil {
		t.Fatalf("CreateRepository(%s at %s): %v", name, commit, err)
	}
	return r
}

// wantModes fails the test unless revision id of repository holds files, each with its mode,
// in its flat tree, its tree digest and its git tree.
func (b *rbundle) wantModes(t *testing.T, what, repository, id string, files map[string]modeFile) {
	t.Helper()
	rev := b.revision(t, repository, id)
	want := modeTree(files)
	assertTree(t, what+": the tree", rev.Tree, want)
	if rev.TreeDigest != want.Digest() {
		t.Fatalf("%s: the tree digest is %s, want %s", what, rev.TreeDigest, want.Digest())
	}
	if got := modeGitTree(t, files); rev.GitTree != got.String() {
		t.Fatalf("%s: the git tree is %s, want %s, git's for the same files and modes", what, rev.GitTree, got)
	}
}

// withMode answers p with the mode of its edit of path set.
func withMode(p store.IntegrateParams, path, mode string) store.IntegrateParams {
	for i := range p.Edits {
		if p.Edits[i].Path == path {
			p.Edits[i].Mode = mode
		}
	}
	return p
}

// withGitlink answers p with an edit moving the submodule path to commit.
func withGitlink(p store.IntegrateParams, path, commit string) store.IntegrateParams {
	p.Edits = append(p.Edits, repo.FileEdit{Path: path, GitlinkCommit: commit})
	p.Paths = append(p.Paths, path)
	sort.Strings(p.Paths)
	return p
}

// testModes: a file's mode is part of its content. A repository imported with executable
// files, symbolic links and a submodule lists them with their modes; an Integrate sets a mode
// (chmod alone is a change), keeps the path's when it gives none, makes and retargets links and
// moves the submodule, each tree what git makes of the same files; a mode changed since the
// base is a conflict, directly and in the queue; and a write or delete of a submodule, a new
// one, a link to nothing are refused, storing nothing.
func testModes(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	commitA, commitB := strings.Repeat("5e", 20), strings.Repeat("6f", 20)
	start := map[string]modeFile{
		"README.md":   {"", "# web\n"},
		"run.sh":      {repo.ModeExecutable, "#!/bin/sh\necho run\n"},
		"lib.sh":      {"", "helper() { :; }\n"},
		"docs/readme": {repo.ModeSymlink, "../README.md"},
		"etc-passwd":  {repo.ModeSymlink, "../../etc/passwd"},
		"vendor/lib":  {repo.ModeGitlink, commitA},
	}
	files := make(map[string]modeFile, len(start))
	for p, f := range start {
		files[p] = f
	}
	r := b.importModes(t, "web", nil, files)
	b.wantModes(t, "the imported revision", "web", r.Mainline, files)
	l := b.acquire(t, "web", alice, time.Hour, "README.md", "run.sh", "lib.sh", "docs/", "etc-passwd", "vendor/")
	tokens := []uint64{l.FencingToken}
	edit := func(base string, edits ...fileEdit) store.IntegrateParams {
		return integrateParams("web", base, alice, tokens, edits...)
	}

	// chmod +x alone, and a script written without a mode, which stays executable.
	c1 := b.mustIntegrate(t, withMode(edit(r.Mainline, put("lib.sh", "helper() { :; }\n"), put("run.sh", "#!/bin/sh\necho run2\n")),
		"lib.sh", repo.ModeExecutable))
	files["lib.sh"] = modeFile{repo.ModeExecutable, "helper() { :; }\n"}
	files["run.sh"] = modeFile{repo.ModeExecutable, "#!/bin/sh\necho run2\n"}
	b.wantModes(t, "after chmod +x", "web", c1.IntegratedRevision, files)
	if b.revision(t, "web", c1.IntegratedRevision).TreeDigest == b.revision(t, "web", r.Mainline).TreeDigest {
		t.Fatal("chmod +x left the tree digest as it was")
	}

	// A new link, a link retargeted without a mode (it stays one), the submodule moved on.
	c2 := b.mustIntegrate(t, withGitlink(withMode(edit(c1.IntegratedRevision, put("docs/latest", "../run.sh"), put("docs/readme", "../lib.sh")),
		"docs/latest", repo.ModeSymlink), "vendor/lib", commitB))
	files["docs/latest"] = modeFile{repo.ModeSymlink, "../run.sh"}
	files["docs/readme"] = modeFile{repo.ModeSymlink, "../lib.sh"}
	files["vendor/lib"] = modeFile{repo.ModeGitlink, commitB}
	b.wantModes(t, "after the links and the submodule", "web", c2.IntegratedRevision, files)

	// chmod -x alone; a link made a file.
	c3 := b.mustIntegrate(t, withMode(withMode(edit(c2.IntegratedRevision, put("run.sh", "#!/bin/sh\necho run2\n"), put("etc-passwd", "../../etc/passwd")),
		"run.sh", repo.ModeFile), "etc-passwd", repo.ModeFile))
	files["run.sh"] = modeFile{"", "#!/bin/sh\necho run2\n"}
	files["etc-passwd"] = modeFile{"", "../../etc/passwd"}
	b.wantModes(t, "after chmod -x", "web", c3.IntegratedRevision, files)

	// From the imported revision, lib.sh (made executable since) and docs/readme (retargeted
	// since) moved on: a change of either is a conflict, its content the same or not.
	for what, p := range map[string]store.IntegrateParams{
		"chmod -x of a file made executable since": withMode(edit(r.Mainline, put("lib.sh", "helper() { :; }\n")), "lib.sh", repo.ModeFile),
		"a link retargeted since":                  edit(r.Mainline, put("docs/readme", "../lib.sh")),
		"chmod +x of a file made -x since":         withMode(edit(c2.IntegratedRevision, put("run.sh", "#!/bin/sh\necho run2\n")), "run.sh", repo.ModeExecutable),
	} {
		err := b.refusedIntegrate(t, what, p)
		var conflict *repo.ConflictError
		if !errors.As(err, &conflict) || conflict.Path != p.Edits[0].Path {
			t.Fatalf("Integrate of %s: err = %v (%T), want a *repo.ConflictError on %s", what, err, err, p.Edits[0].Path)
		}
	}

	// Edits no tree takes.
	head := c3.IntegratedRevision
	for _, c := range []struct {
		what, path string
		p          store.IntegrateParams
	}{
		{"a write of the submodule", "vendor/lib", edit(head, put("vendor/lib", "files\n"))},
		{"a delete of the submodule", "vendor/lib", edit(head, del("vendor/lib"))},
		{"a write into the submodule", "vendor/lib", edit(head, put("vendor/lib/x.go", "package x\n"))},
		{"a new submodule", "vendor/other", withGitlink(edit(head), "vendor/other", commitA)},
		{"a file moved as a submodule", "README.md", withGitlink(edit(head), "README.md", commitA)},
		{"a link retargeted to nothing", "docs/readme", edit(head, put("docs/readme", ""))},
		{"a link to a NUL", "docs/new", withMode(edit(head, put("docs/new", "a\x00b")), "docs/new", repo.ModeSymlink)},
		{"a link of 4097 bytes", "docs/new", withMode(edit(head, put("docs/new", strings.Repeat("x", repo.MaxSymlinkTarget+1))), "docs/new", repo.ModeSymlink)},
		{"a write of mode 160000", "README.md", withMode(edit(head, put("README.md", "x\n")), "README.md", repo.ModeGitlink)},
	} {
		err := b.refusedIntegrate(t, c.what, c.p)
		var invalid *repo.InvalidEditError
		if !errors.As(err, &invalid) || invalid.Path != c.path || !repo.DoesNotApply(err) {
			t.Fatalf("Integrate of %s: err = %v (%T), want a *repo.InvalidEditError on %s", c.what, err, err, c.path)
		}
	}
	b.wantModes(t, "after the refusals", "web", b.repository(t, "web").Mainline, files)

	// Through the queue: a chmod lands as the candidate the worker validated; a change from the
	// same base of the path whose mode that chmod changed is then a conflict, and rejected.
	g := newGate()
	rg := b.importModes(t, "gated", policy, start)
	lg := b.acquire(t, "gated", alice, time.Hour, "lib.sh", "run.sh")
	gated := func(edits ...fileEdit) store.IntegrateParams {
		return integrateParams("gated", rg.Mainline, alice, []uint64{lg.FencingToken}, edits...)
	}
	chmod := b.queue(t, withMode(gated(put("lib.sh", "helper() { :; }\n"), put("run.sh", "#!/bin/sh\necho gated\n")), "lib.sh", repo.ModeExecutable))
	late := b.queue(t, gated(put("lib.sh", "helper() { echo; }\n")))
	v := b.advance(t, g, "gated", step{chmod.ID, store.ChangeValidating})[0]
	want := map[string]modeFile{}
	for p, f := range start {
		want[p] = f
	}
	want["lib.sh"] = modeFile{repo.ModeExecutable, "helper() { :; }\n"}
	want["run.sh"] = modeFile{repo.ModeExecutable, "#!/bin/sh\necho gated\n"}
	b.wantModes(t, "the candidate", "gated", v.CandidateRevision, want)
	b.passJob(t, v.JobID)
	b.clk.Advance(time.Minute)
	g.setVerdict(passWhenAttested)
	got := b.advance(t, g, "gated", step{chmod.ID, store.ChangeIntegrated}, step{late.ID, store.ChangeRejected})
	if m := b.repository(t, "gated").Mainline; m != v.CandidateRevision {
		t.Fatalf("the mainline is %s after the pass, want the candidate %s", m, v.CandidateRevision)
	}
	if !strings.Contains(got[1].Reason, "lib.sh changed in the mainline") {
		t.Fatalf("the late change was rejected because %q, want lib.sh's conflict", got[1].Reason)
	}
}
