package server_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// A file's mode is part of its content, as in git: the tests here build histories and working
// trees with the git command line, import and integrate through the API, and compare what ag
// answers and serves with what git computes for the same files.

// submoduleCommit and movedCommit are commits of another repository that vendor/lib names.
var (
	submoduleCommit = strings.Repeat("5e", 20)
	movedCommit     = strings.Repeat("6f", 20)
)

// writeFile writes content at path under dir with perm, making its directories.
func writeFile(t *testing.T, dir, path, content string, perm os.FileMode) {
	t.Helper()
	full := filepath.Join(dir, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(full, perm); err != nil {
		t.Fatal(err)
	}
}

// symlink makes path under dir a symbolic link to target, replacing what is there.
func symlink(t *testing.T, dir, path, target string) {
	t.Helper()
	full := filepath.Join(dir, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(full); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.Symlink(target, full); err != nil {
		t.Fatal(err)
	}
}

// modesHistory makes a git repository of two commits whose HEAD holds a file of every mode: a
// script (100755), links inside the tree and one pointing outside it (120000), and a submodule
// (160000) added as `git submodule add` records it, without its .gitmodules. It answers the
// working tree, which the tests go on changing with git as they change ag.
func modesHistory(t *testing.T, git *gitRunner) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "app")
	git.must("", nil, "init", "-q", "-b", "main", dir)
	writeFile(t, dir, "README.md", "# app\n", 0o644)
	git.must(dir, nil, "add", "-A")
	git.must(dir, nil, "commit", "-q", "-m", "First")
	writeFile(t, dir, "run.sh", "#!/bin/sh\necho run\n", 0o755)
	writeFile(t, dir, "lib.sh", "helper() { :; }\n", 0o644)
	writeFile(t, dir, "docs/readme.md", "# docs\n", 0o644)
	symlink(t, dir, "docs/link.md", "readme.md")
	symlink(t, dir, "bin/run", "../run.sh")
	symlink(t, dir, "etc-passwd", "../../etc/passwd")
	git.must(dir, nil, "add", "-A")
	git.must(dir, nil, "update-index", "--add", "--cacheinfo", "160000,"+submoduleCommit+",vendor/lib")
	git.must(dir, nil, "commit", "-q", "-m", "Every mode")
	// As a clone without --recurse-submodules leaves it: an empty directory.
	if err := os.MkdirAll(filepath.Join(dir, "vendor", "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if st := git.must(dir, nil, "status", "--porcelain"); st != "" {
		t.Fatalf("the history's working tree is not clean:\n%s", st)
	}
	return dir
}

// uploadHistory uploads what HEAD of the git repository dir reaches, as `ag repo import`
// does: blobs, then trees from the leaves up, then commits from the oldest; a submodule's
// commit is another repository's and is not sent. It answers HEAD.
func uploadHistory(t *testing.T, c *client.Client, git *gitRunner, dir string) plumbing.Hash {
	t.Helper()
	ctx := context.Background()
	st := filesystem.NewStorage(osfs.New(filepath.Join(dir, ".git")), cache.NewObjectLRUDefault())
	raw := func(typ plumbing.ObjectType, id plumbing.Hash) []byte {
		o, err := st.EncodedObject(typ, id)
		if err != nil {
			t.Fatalf("read %s %s: %v", typ, id, err)
		}
		data, err := gitstore.ObjectData(o)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	var blobs [][]byte
	var trees, commits []*agwpv1.GitObject
	seen := map[plumbing.Hash]bool{}
	var walk func(id plumbing.Hash)
	walk = func(id plumbing.Hash) {
		if seen[id] {
			return
		}
		seen[id] = true
		tree, err := object.GetTree(st, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range tree.Entries {
			switch {
			case e.Mode == filemode.Dir:
				walk(e.Hash)
			case e.Mode == filemode.Submodule:
			case !seen[e.Hash]:
				seen[e.Hash] = true
				blobs = append(blobs, raw(plumbing.BlobObject, e.Hash))
			}
		}
		trees = append(trees, &agwpv1.GitObject{Type: "tree", Data: raw(plumbing.TreeObject, id)})
	}
	for _, id := range strings.Fields(git.must(dir, nil, "rev-list", "--reverse", "--topo-order", "HEAD")) {
		commit := plumbing.NewHash(id)
		c, err := object.GetCommit(st, commit)
		if err != nil {
			t.Fatal(err)
		}
		walk(c.TreeHash)
		commits = append(commits, &agwpv1.GitObject{Type: "commit", Data: raw(plumbing.CommitObject, commit)})
	}
	if _, err := c.Repos.UploadBlobs(ctx, &agwpv1.UploadBlobsRequest{Blobs: blobs}); err != nil {
		t.Fatalf("UploadBlobs: %v", err)
	}
	for _, objs := range [][]*agwpv1.GitObject{trees, commits} {
		if _, err := c.Repos.UploadGitObjects(ctx, &agwpv1.UploadGitObjectsRequest{Objects: objs}); err != nil {
			t.Fatalf("UploadGitObjects: %v", err)
		}
	}
	return git.head(dir, "HEAD")
}

// importModes starts a server of backend and imports the history of modesHistory into the
// repository app; it answers the server, the git runner and the history's working tree.
func importModes(t *testing.T, backend string) (*agtest.Server, *gitRunner, string) {
	t.Helper()
	srv := agtest.Start(t, agtest.Options{Backend: backend})
	git := &gitRunner{t: t, env: gitEnv(t)}
	dir := modesHistory(t, git)
	head := uploadHistory(t, srv.Admin, git, dir)
	res, err := srv.Admin.Repos.CreateRepository(context.Background(), &agwpv1.CreateRepositoryRequest{Name: "app", GitCommit: head.String()})
	if err != nil || res.GetRepository().GetMainlineCommit() != head.String() {
		t.Fatalf("CreateRepository at %s = %v, %v", head, res.GetRepository(), err)
	}
	return srv, git, dir
}

// entryModes answers what GetTree lists of a revision ("" for the mainline), by path: the mode,
// then the link target's digest or the submodule's commit.
func entryModes(t *testing.T, c *client.Client, revision string) (map[string][2]string, *agwpv1.GetTreeResponse) {
	t.Helper()
	tr, err := c.Repos.GetTree(context.Background(), &agwpv1.GetTreeRequest{Repository: "app", Revision: revision})
	if err != nil {
		t.Fatalf("GetTree: %v", err)
	}
	got := map[string][2]string{}
	var tree repo.Tree
	for _, e := range tr.GetEntries() {
		id := e.GetDigest()
		if e.GetMode() == repo.ModeGitlink {
			id = e.GetGitlinkCommit()
			if e.GetDigest() != "" || e.GetSize() != 0 {
				t.Errorf("the submodule %s has digest %q and size %d, want none", e.GetPath(), e.GetDigest(), e.GetSize())
			}
		}
		got[e.GetPath()] = [2]string{e.GetMode(), id}
		mode := e.GetMode()
		if mode == repo.ModeFile {
			mode = ""
		}
		tree = append(tree, repo.Entry{Path: e.GetPath(), Digest: e.GetDigest(), Size: e.GetSize(), Mode: mode, GitlinkCommit: e.GetGitlinkCommit()})
	}
	sort.Slice(tree, func(i, j int) bool { return tree[i].Path < tree[j].Path })
	if tree.Digest() != tr.GetTreeDigest() {
		t.Errorf("GetTree's entries hash to %s, but it names the tree %s", tree.Digest(), tr.GetTreeDigest())
	}
	return got, tr
}

func digestOf(content string) string { return repo.Digest([]byte(content)) }

// TestImportKeepsEveryMode: a git history whose HEAD holds an executable script, links inside
// and outside the tree and a submodule imports; GetTree lists each with its mode (a link by the
// digest of its target, the submodule by its commit), and `git clone` from ag gives the same
// commit and tree ids, every mode on disk, and a repository `git fsck --strict` finds clean.
func TestImportKeepsEveryMode(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			srv, git, dir := importModes(t, backend)
			got, tr := entryModes(t, srv.Admin, "")
			want := map[string][2]string{
				"README.md":      {repo.ModeFile, digestOf("# app\n")},
				"run.sh":         {repo.ModeExecutable, digestOf("#!/bin/sh\necho run\n")},
				"lib.sh":         {repo.ModeFile, digestOf("helper() { :; }\n")},
				"docs/readme.md": {repo.ModeFile, digestOf("# docs\n")},
				"docs/link.md":   {repo.ModeSymlink, digestOf("readme.md")},
				"bin/run":        {repo.ModeSymlink, digestOf("../run.sh")},
				"etc-passwd":     {repo.ModeSymlink, digestOf("../../etc/passwd")},
				"vendor/lib":     {repo.ModeGitlink, submoduleCommit},
			}
			if len(got) != len(want) {
				t.Errorf("GetTree lists %d entries, want %d: %v", len(got), len(want), got)
			}
			for path, w := range want {
				if got[path] != w {
					t.Errorf("GetTree lists %s as %v, want %v", path, got[path], w)
				}
			}
			head := git.head(dir, "HEAD")
			if tr.GetGitCommit() != head.String() || tr.GetGitTree() != git.head(dir, "HEAD^{tree}").String() {
				t.Errorf("GetTree: commit %s, git tree %s; want git's %s and %s", tr.GetGitCommit(), tr.GetGitTree(), head, git.head(dir, "HEAD^{tree}"))
			}
			if b, err := srv.Admin.Blob(context.Background(), digestOf("../../etc/passwd")); err != nil || string(b) != "../../etc/passwd" {
				t.Errorf("the blob of etc-passwd = %q, %v; want its target", b, err)
			}

			clone := filepath.Join(t.TempDir(), "clone")
			git.must("", nil, "-c", "http.extraHeader=Authorization: Bearer "+srv.AdminToken, "clone", "-q", srv.URL+"/git/app.git", clone)
			if got := git.head(clone, "HEAD"); got != head {
				t.Fatalf("the clone's HEAD is %s, want the imported %s", got, head)
			}
			if got, want := git.head(clone, "HEAD^{tree}").String(), tr.GetGitTree(); got != want {
				t.Fatalf("the clone's tree is %s, want %s", got, want)
			}
			git.must(clone, nil, "fsck", "--strict", "--no-dangling", "--full")
			if got, want := git.must(clone, nil, "ls-tree", "-r", "HEAD"), git.must(dir, nil, "ls-tree", "-r", "HEAD"); got != want {
				t.Errorf("the clone lists\n%s\nthe history lists\n%s", got, want)
			}
			wantOnDisk(t, clone, map[string]string{"run.sh": "executable", "lib.sh": "file", "etc-passwd": "link ../../etc/passwd",
				"docs/link.md": "link readme.md", "bin/run": "link ../run.sh", "vendor/lib": "directory"})
		})
	}
}

// wantOnDisk fails the test unless each path under dir is what kinds says: "file" (0644),
// "executable" (0755), "link TARGET", "directory".
func wantOnDisk(t *testing.T, dir string, kinds map[string]string) {
	t.Helper()
	for path, want := range kinds {
		full := filepath.Join(dir, filepath.FromSlash(path))
		fi, err := os.Lstat(full)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		var got string
		switch m := fi.Mode(); {
		case m&os.ModeSymlink != 0:
			target, _ := os.Readlink(full)
			got = "link " + target
		case m.IsDir():
			got = "directory"
		case m.IsRegular() && m.Perm()&0o111 != 0:
			got = "executable"
		case m.IsRegular():
			got = "file"
		default:
			got = m.String()
		}
		if got != want {
			t.Errorf("%s is %s on disk, want %s", path, got, want)
		}
	}
}

// TestIntegrateSetsAndKeepsModes: Integrate's edits give a mode (chmod +x or -x alone, a new
// link, a link made a file), keep the path's when they give none (a script written stays
// executable, a link written stays a link), and move a submodule; after each, the mainline's
// git tree is the one `git write-tree` computes for a working tree changed the same way, and a
// clone is `git fsck --strict` clean. A mode changed since the base is a conflict, and edits no
// tree takes are refused with invalid_argument saying what is allowed, changing nothing.
func TestIntegrateSetsAndKeepsModes(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv, git, dir := importModes(t, backend)
			alice := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
			l := acquire(t, alice, "app", "w1", time.Hour, "README.md", "run.sh", "lib.sh", "docs/", "bin/", "etc-passwd", "vendor/")
			first, err := srv.Admin.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: "app"})
			if err != nil {
				t.Fatal(err)
			}
			base := first.GetRepository().GetMainline()
			integrate := func(edits ...*agwpv1.Edit) (string, error) {
				res, err := alice.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{Repository: "app", BaseRevision: base, Holder: "w1",
					FencingTokens: []uint64{l.GetFencingToken()}, Edits: edits})
				return res.GetChange().GetIntegratedRevision(), err
			}
			withMode := func(e *agwpv1.Edit, mode string) *agwpv1.Edit { e.Mode = mode; return e }
			blob := func(path, digest, mode string) *agwpv1.Edit {
				return &agwpv1.Edit{Path: path, Action: &agwpv1.Edit_BlobDigest{BlobDigest: digest}, Mode: mode}
			}
			gitlink := func(path, commit string) *agwpv1.Edit {
				return &agwpv1.Edit{Path: path, Action: &agwpv1.Edit_GitlinkCommit{GitlinkCommit: commit}}
			}

			for _, step := range []struct {
				what  string
				edits []*agwpv1.Edit
				git   func()               // the same change, in the history's working tree
				want  map[string][2]string // what GetTree lists of these paths afterwards
			}{
				{"chmod +x alone", []*agwpv1.Edit{blob("lib.sh", digestOf("helper() { :; }\n"), repo.ModeExecutable)},
					func() { writeFile(t, dir, "lib.sh", "helper() { :; }\n", 0o755) },
					map[string][2]string{"lib.sh": {repo.ModeExecutable, digestOf("helper() { :; }\n")}}},
				{"chmod -x alone", []*agwpv1.Edit{withMode(write("run.sh", "#!/bin/sh\necho run\n"), repo.ModeFile)},
					func() { writeFile(t, dir, "run.sh", "#!/bin/sh\necho run\n", 0o644) },
					map[string][2]string{"run.sh": {repo.ModeFile, digestOf("#!/bin/sh\necho run\n")}}},
				{"a write without a mode keeps +x", []*agwpv1.Edit{write("lib.sh", "helper() { echo; }\n")},
					func() { writeFile(t, dir, "lib.sh", "helper() { echo; }\n", 0o755) },
					map[string][2]string{"lib.sh": {repo.ModeExecutable, digestOf("helper() { echo; }\n")}}},
				{"a new link", []*agwpv1.Edit{withMode(write("docs/latest", "readme.md"), repo.ModeSymlink)},
					func() { symlink(t, dir, "docs/latest", "readme.md") },
					map[string][2]string{"docs/latest": {repo.ModeSymlink, digestOf("readme.md")}}},
				{"links retargeted, with and without a mode", []*agwpv1.Edit{write("etc-passwd", "../../etc/shadow"),
					withMode(write("bin/run", "../lib.sh"), repo.ModeSymlink)},
					func() { symlink(t, dir, "etc-passwd", "../../etc/shadow"); symlink(t, dir, "bin/run", "../lib.sh") },
					map[string][2]string{"etc-passwd": {repo.ModeSymlink, digestOf("../../etc/shadow")}, "bin/run": {repo.ModeSymlink, digestOf("../lib.sh")}}},
				{"the submodule moved on", []*agwpv1.Edit{gitlink("vendor/lib", movedCommit)},
					func() { git.must(dir, nil, "update-index", "--cacheinfo", "160000,"+movedCommit+",vendor/lib") },
					map[string][2]string{"vendor/lib": {repo.ModeGitlink, movedCommit}}},
				{"a link made a file", []*agwpv1.Edit{withMode(write("docs/link.md", "now a file\n"), repo.ModeFile)},
					func() {
						if err := os.Remove(filepath.Join(dir, "docs", "link.md")); err != nil {
							t.Fatal(err)
						}
						writeFile(t, dir, "docs/link.md", "now a file\n", 0o644)
					},
					map[string][2]string{"docs/link.md": {repo.ModeFile, digestOf("now a file\n")}}},
			} {
				rev, err := integrate(step.edits...)
				if err != nil {
					t.Fatalf("%s: Integrate: %v", step.what, err)
				}
				step.git()
				git.must(dir, nil, "add", "-A")
				want := strings.TrimSpace(git.must(dir, nil, "write-tree"))
				got, tr := entryModes(t, alice, rev)
				if tr.GetGitTree() != want {
					t.Fatalf("%s: the mainline's git tree is %s, git write-tree says %s\n%s", step.what, tr.GetGitTree(), want,
						git.must(dir, nil, "ls-files", "-s"))
				}
				for path, w := range step.want {
					if got[path] != w {
						t.Errorf("%s: GetTree lists %s as %v, want %v", step.what, path, got[path], w)
					}
				}
				before := base
				base = rev
				if step.what == "chmod +x alone" {
					if _, old := entryModes(t, alice, before); old.GetTreeDigest() == tr.GetTreeDigest() {
						t.Errorf("chmod +x alone left the tree digest %s", tr.GetTreeDigest())
					}
				}
			}

			// From the imported revision lib.sh moved on in mode and content: a chmod is a conflict.
			stale := first.GetRepository().GetMainline()
			_, err = alice.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{Repository: "app", BaseRevision: stale, Holder: "w1",
				FencingTokens: []uint64{l.GetFencingToken()}, Edits: []*agwpv1.Edit{blob("run.sh", digestOf("#!/bin/sh\necho run\n"), repo.ModeExecutable)}})
			wantCode(t, "a chmod of a path whose mode changed since the base", err, connect.CodeAborted)
			if err != nil && !strings.Contains(err.Error(), "run.sh changed in the mainline") {
				t.Errorf("the conflict %q does not name run.sh", err)
			}

			big := strings.Repeat("x", repo.MaxSymlinkTarget+1)
			if _, err := alice.Repos.UploadBlobs(ctx, &agwpv1.UploadBlobsRequest{Blobs: [][]byte{[]byte(big)}}); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				what string
				edit *agwpv1.Edit
				says []string
			}{
				{"a mode no file has", withMode(write("README.md", "x\n"), "100644x"), []string{"edits[0].mode", "100755", "120000"}},
				{"a write of mode 160000", withMode(write("README.md", "x\n"), repo.ModeGitlink), []string{"edits[0].mode", "gitlink_commit"}},
				{"a mode on a delete", withMode(&agwpv1.Edit{Path: "README.md", Action: &agwpv1.Edit_Delete{Delete: true}}, repo.ModeExecutable), []string{"edits[0].mode", "write"}},
				{"a gitlink that is no commit id", gitlink("vendor/lib", "HEAD"), []string{"edits[0].gitlink_commit", "40 lowercase hex"}},
				{"a gitlink of zeros", gitlink("vendor/lib", strings.Repeat("0", 40)), []string{"edits[0].gitlink_commit"}},
				{"a gitlink on a file", gitlink("README.md", movedCommit), []string{"README.md is no submodule", "creates no submodule"}},
				{"a new submodule", gitlink("vendor/other", movedCommit), []string{"vendor/other is no submodule", "creates no submodule"}},
				{"a write of the submodule", write("vendor/lib", "files\n"), []string{"vendor/lib is a submodule", "gitlink_commit"}},
				{"a delete of the submodule", &agwpv1.Edit{Path: "vendor/lib", Action: &agwpv1.Edit_Delete{Delete: true}}, []string{"vendor/lib is a submodule"}},
				{"a write into the submodule", write("vendor/lib/x.go", "package x\n"), []string{"vendor/lib is a submodule"}},
				{"a link to nothing", withMode(write("docs/empty", ""), repo.ModeSymlink), []string{"edits[0].content", "empty"}},
				{"a link to a NUL", withMode(write("docs/nul", "a\x00b"), repo.ModeSymlink), []string{"edits[0].content", "NUL"}},
				{"a link of 4097 bytes", withMode(write("docs/long", big), repo.ModeSymlink), []string{"edits[0].content", "more than 4096"}},
				{"a link of an uploaded 4097 bytes", blob("docs/long", digestOf(big), repo.ModeSymlink), []string{"edits[0].blob_digest", "1 to 4096"}},
				{"a link retargeted to nothing, its mode kept", write("etc-passwd", ""), []string{"etc-passwd would be a symbolic link", "empty"}},
				{"a link retargeted to a NUL, its mode kept", write("bin/run", "a\x00b"), []string{"bin/run would be a symbolic link", "NUL"}},
			} {
				_, err := integrate(c.edit)
				wantCode(t, c.what, err, connect.CodeInvalidArgument)
				for _, s := range c.says {
					if err != nil && !strings.Contains(err.Error(), s) {
						t.Errorf("%s: the refusal %q does not say %q", c.what, err, s)
					}
				}
			}
			if r, err := srv.Admin.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: "app"}); err != nil || r.GetRepository().GetMainline() != base {
				t.Fatalf("the refusals moved the mainline to %s (%v), want %s", r.GetRepository().GetMainline(), err, base)
			}

			clone := filepath.Join(t.TempDir(), "clone")
			git.must("", nil, "-c", "http.extraHeader=Authorization: Bearer "+srv.AdminToken, "clone", "-q", srv.URL+"/git/app.git", clone)
			git.must(clone, nil, "fsck", "--strict", "--no-dangling", "--full")
			if got, want := git.head(clone, "HEAD^{tree}").String(), strings.TrimSpace(git.must(dir, nil, "write-tree")); got != want {
				t.Fatalf("the clone's tree is %s, the history's working tree's %s", got, want)
			}
			wantOnDisk(t, clone, map[string]string{"run.sh": "file", "lib.sh": "executable", "etc-passwd": "link ../../etc/shadow",
				"docs/latest": "link readme.md", "docs/link.md": "file", "bin/run": "link ../lib.sh", "vendor/lib": "directory"})
		})
	}
}
