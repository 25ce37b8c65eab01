package worker

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/repo"
)

// modeFile is a file of a test's tree: its mode (repo.Entry.Mode) and content, a symbolic
// link's target, a submodule's commit.
type modeFile struct {
	mode, content string
}

// modeTreeOf answers the ag tree of files, each content put into v's blob cache.
func modeTreeOf(t *testing.T, v *Validator, files map[string]modeFile) repo.Tree {
	t.Helper()
	tree := make(repo.Tree, 0, len(files))
	for p, f := range files {
		if f.mode == repo.ModeGitlink {
			tree = append(tree, repo.Entry{Path: p, Mode: f.mode, GitlinkCommit: f.content})
			continue
		}
		tree = append(tree, repo.Entry{Path: p, Digest: cachedBlob(t, v, f.content), Size: uint64(len(f.content)), Mode: f.mode})
	}
	sort.Slice(tree, func(i, j int) bool { return tree[i].Path < tree[j].Path })
	return tree
}

// gitRun runs git in dir without any configuration of the machine's, and answers its output.
func gitRun(t *testing.T, dir string, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			out = append(out, exit.Stderr...)
		}
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func needGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("these tests compare with the git command line, which is not installed")
	}
}

// gitTreeOfModes answers the git tree id git computes for files, each put into an index with
// its mode.
func gitTreeOfModes(t *testing.T, files map[string]modeFile) string {
	t.Helper()
	dir := t.TempDir()
	gitRun(t, dir, "", "init", "-q")
	for p, f := range files {
		mode, id := f.mode, f.content
		if mode == "" {
			mode = repo.ModeFile
		}
		if f.mode != repo.ModeGitlink {
			id = gitRun(t, dir, f.content, "hash-object", "-w", "--stdin")
		}
		gitRun(t, dir, "", "update-index", "--add", "--cacheinfo", mode+","+id+","+p)
	}
	return gitRun(t, dir, "", "write-tree")
}

// hostileFiles holds a file of every mode and the links a hostile tree plants: to a file of
// the host, out of the checkout, into the .git a command may create, to itself.
var hostileFiles = map[string]modeFile{
	"README.md":      {"", "# app\n"},
	"run.sh":         {repo.ModeExecutable, "#!/bin/sh\necho run\n"},
	"docs/readme.md": {"", "# docs\n"},
	"docs/link.md":   {repo.ModeSymlink, "readme.md"},
	"bin/run":        {repo.ModeSymlink, "../run.sh"},
	"etc-passwd":     {repo.ModeSymlink, "/etc/passwd"},
	"outside":        {repo.ModeSymlink, "../../outside"},
	"gitconfig":      {repo.ModeSymlink, ".git/config"},
	"loop":           {repo.ModeSymlink, "loop"},
	"vendor/lib":     {repo.ModeGitlink, strings.Repeat("5e", 20)},
}

// TestMaterializeWritesEveryMode ensures a checkout is what git checks out: 100644 files as
// 0644, 100755 as 0755, links as links to their targets, however hostile (none is followed,
// nothing lands outside the checkout), a submodule as an empty directory; and that the git tree
// id answered is git's for the same files, and what `git add -A` makes of the files on disk.
func TestMaterializeWritesEveryMode(t *testing.T) {
	t.Parallel()
	needUnix(t)
	needGit(t)
	v := &Validator{CacheDir: t.TempDir()}
	top := t.TempDir()
	root := filepath.Join(top, "run", "tree") // "../../outside" is top/outside
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := v.materialize(context.Background(), root, modeTreeOf(t, v, hostileFiles))
	if err != nil {
		t.Fatalf("materialize: %v", err)
	}
	for path, f := range hostileFiles {
		full := filepath.Join(root, filepath.FromSlash(path))
		fi, err := os.Lstat(full)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		switch f.mode {
		case "", repo.ModeExecutable:
			perm := os.FileMode(0o644)
			if f.mode == repo.ModeExecutable {
				perm = 0o755
			}
			b, _ := os.ReadFile(full)
			if !fi.Mode().IsRegular() || fi.Mode().Perm() != perm || string(b) != f.content {
				t.Errorf("%s: %v holding %q, want a file of mode %v holding %q", path, fi.Mode(), b, perm, f.content)
			}
		case repo.ModeSymlink:
			target, err := os.Readlink(full)
			if fi.Mode()&os.ModeSymlink == 0 || err != nil || target != f.content {
				t.Errorf("%s: %v to %q (%v), want a link to %q", path, fi.Mode(), target, err, f.content)
			}
		case repo.ModeGitlink:
			entries, err := os.ReadDir(full)
			if !fi.IsDir() || err != nil || len(entries) != 0 {
				t.Errorf("%s: %v holding %d entries (%v), want an empty directory", path, fi.Mode(), len(entries), err)
			}
		}
	}
	if entries, err := os.ReadDir(top); err != nil || len(entries) != 1 {
		t.Errorf("materialize wrote beside the checkout: %v (%v)", entries, err)
	}
	if want := gitTreeOfModes(t, hostileFiles); got != want {
		t.Errorf("materialize answered git tree %s, git computes %s for the same files", got, want)
	}
	// git reads the checkout as materialize wrote it; the submodule, an empty directory on
	// disk, is in git's index only.
	gitRun(t, root, "", "init", "-q")
	gitRun(t, root, "", "add", "-A")
	gitRun(t, root, "", "update-index", "--add", "--cacheinfo", repo.ModeGitlink+","+hostileFiles["vendor/lib"].content+",vendor/lib")
	if want := gitRun(t, root, "", "write-tree"); got != want {
		t.Errorf("materialize answered git tree %s, git add -A of its checkout makes %s", got, want)
	}
}

// TestMaterializeRefusesAPathUnderALink ensures a tree that would write through one of its own
// links (a/ a link, a/b a file), or under one of its files or submodules, or a path twice, is
// refused, and that nothing is written where any link points.
func TestMaterializeRefusesAPathUnderALink(t *testing.T) {
	t.Parallel()
	needUnix(t)
	type entry struct{ path, mode, content string }
	const elsewhere = "ELSEWHERE" // an absolute directory outside the checkout, made by each case
	for name, c := range map[string]struct {
		tree []entry // in the order the tree lists them
		says string
	}{
		"a file under a link out of the checkout": {[]entry{{"a", repo.ModeSymlink, "../victim"}, {"a/b", "", "pwned"}}, "under a, which is a symbolic link"},
		"a file under a link into the checkout":   {[]entry{{"a", repo.ModeSymlink, "d"}, {"a/b", "", "pwned"}, {"d/x", "", "x"}}, "under a, which is a symbolic link"},
		"a file under an absolute link":           {[]entry{{"a", repo.ModeSymlink, elsewhere}, {"a/victim", "", "pwned"}}, "under a, which is a symbolic link"},
		"a file under a file":                     {[]entry{{"a", "", "a"}, {"a/b", "", "pwned"}}, "under a, which is a file"},
		"a file under a submodule":                {[]entry{{"m", repo.ModeGitlink, strings.Repeat("5e", 20)}, {"m/b", "", "pwned"}}, "under m, which is a submodule"},
		"a link and then a file at its path":      {[]entry{{"x", repo.ModeSymlink, "../victim"}, {"x", "", "pwned"}}, "file exists"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := &Validator{CacheDir: t.TempDir()}
			top, other := t.TempDir(), t.TempDir()
			root := filepath.Join(top, "tree")
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
			var tree repo.Tree
			for _, e := range c.tree {
				content := strings.ReplaceAll(e.content, elsewhere, other)
				entry := repo.Entry{Path: e.path, Mode: e.mode}
				if e.mode == repo.ModeGitlink {
					entry.GitlinkCommit = content
				} else {
					entry.Digest, entry.Size = cachedBlob(t, v, content), uint64(len(content))
				}
				tree = append(tree, entry)
			}
			_, err := v.materialize(context.Background(), root, tree)
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("materialize = %v, want a refusal saying %q", err, c.says)
			}
			if _, err := os.Lstat(filepath.Join(top, "victim")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("materialize wrote through a link out of the checkout: %v", err)
			}
			if entries, _ := os.ReadDir(other); len(entries) > 0 {
				t.Errorf("materialize wrote through an absolute link: %v", entries)
			}
			if _, err := os.Lstat(filepath.Join(root, "d", "b")); err == nil {
				t.Error("materialize wrote through a link into the checkout")
			}
		})
	}
}

// TestTreeEntryTakesTheModesOfTheContract ensures a worker takes what GetTree answers of each
// mode (no mode: a server before modes, a regular file) and refuses anything else for good.
func TestTreeEntryTakesTheModesOfTheContract(t *testing.T) {
	t.Parallel()
	d := digestOf([]byte("x"))
	commit := strings.Repeat("5e", 20)
	for _, c := range []struct {
		in   *agwpv1.TreeEntry
		want repo.Entry
	}{
		{&agwpv1.TreeEntry{Path: "a", Digest: d, Size: 1}, repo.Entry{Path: "a", Digest: d, Size: 1}},
		{&agwpv1.TreeEntry{Path: "a", Digest: d, Size: 1, Mode: "100644"}, repo.Entry{Path: "a", Digest: d, Size: 1}},
		{&agwpv1.TreeEntry{Path: "a", Digest: d, Size: 1, Mode: "100755"}, repo.Entry{Path: "a", Digest: d, Size: 1, Mode: repo.ModeExecutable}},
		{&agwpv1.TreeEntry{Path: "a", Digest: d, Size: 1, Mode: "120000"}, repo.Entry{Path: "a", Digest: d, Size: 1, Mode: repo.ModeSymlink}},
		{&agwpv1.TreeEntry{Path: "a", Mode: "160000", GitlinkCommit: commit}, repo.Entry{Path: "a", Mode: repo.ModeGitlink, GitlinkCommit: commit}},
	} {
		if got, err := treeEntry(c.in); err != nil || got != c.want {
			t.Errorf("treeEntry(%v) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for what, in := range map[string]*agwpv1.TreeEntry{
		"git's old 100664":            {Path: "a", Digest: d, Size: 1, Mode: "100664"},
		"a directory":                 {Path: "a", Digest: d, Size: 1, Mode: "040000"},
		"a submodule with a blob":     {Path: "a", Digest: d, Size: 1, Mode: "160000", GitlinkCommit: commit},
		"a submodule of no commit":    {Path: "a", Mode: "160000", GitlinkCommit: "HEAD"},
		"a file naming a commit":      {Path: "a", Digest: d, Size: 1, GitlinkCommit: commit},
		"a link without a digest":     {Path: "a", Mode: "120000"},
		"an upper-case submodule sha": {Path: "a", Mode: "160000", GitlinkCommit: strings.ToUpper(commit)},
	} {
		if got, err := treeEntry(in); err == nil {
			t.Errorf("treeEntry of %s = %+v, want a refusal", what, got)
		}
	}
}

// modeRepos is fakeRepos answering the modes of its tree's entries, as a server with modes does.
type modeRepos struct {
	*fakeRepos
}

func (f modeRepos) GetTree(_ context.Context, req *agwpv1.GetTreeRequest) (*agwpv1.GetTreeResponse, error) {
	if req.GetRevision() != f.revision {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such revision"))
	}
	res := &agwpv1.GetTreeResponse{Revision: f.revision, TreeDigest: f.treeDigest}
	for _, e := range f.tree {
		res.Entries = append(res.Entries, &agwpv1.TreeEntry{Path: e.Path, Digest: e.Digest, Size: e.Size, Mode: e.GitMode(), GitlinkCommit: e.GitlinkCommit})
	}
	return res, nil
}

// TestHandleRunsTheScriptAsTheRepositoryHasIt is the case: a candidate holding an
// executable script, a link and a submodule is validated by running `./check.sh` directly in
// its checkout, and attested by git's tree id of it; a job naming the tree as it would be with
// every file 100644 (what a worker without modes computed) is refused for good, running nothing.
func TestHandleRunsTheScriptAsTheRepositoryHasIt(t *testing.T) {
	t.Parallel()
	needUnix(t)
	needGit(t)
	files := map[string]modeFile{
		"check.sh":   {repo.ModeExecutable, "#!/bin/sh\ntest -L latest && test \"$(cat latest)\" = data && test -d vendor/lib && touch \"$MARKER\"\n"},
		"data.txt":   {"", "data"},
		"latest":     {repo.ModeSymlink, "data.txt"},
		"vendor/lib": {repo.ModeGitlink, strings.Repeat("5e", 20)},
	}
	flat := map[string]modeFile{}
	for p, f := range files {
		if f.mode != repo.ModeGitlink {
			flat[p] = modeFile{"", f.content}
		}
	}
	repos := &fakeRepos{revision: "rev_1", blobs: map[string][]byte{}}
	for p, f := range files {
		e := repo.Entry{Path: p, Mode: f.mode}
		if f.mode == repo.ModeGitlink {
			e.GitlinkCommit = f.content
		} else {
			e.Digest, e.Size = digestOf([]byte(f.content)), uint64(len(f.content))
			repos.blobs[e.Digest] = []byte(f.content)
		}
		repos.tree = append(repos.tree, e)
	}
	sort.Slice(repos.tree, func(i, j int) bool { return repos.tree[i].Path < repos.tree[j].Path })
	repos.treeDigest = repos.tree.Digest()
	gitTree := gitTreeOfModes(t, files)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(agwpv1connect.NewRepositoryServiceHandler(modeRepos{repos}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	for _, c := range []struct {
		name, gitTree, wantErr string
	}{
		{"the candidate's git tree", gitTree, ""},
		{"the git tree without modes", gitTreeOfModes(t, flat), "but the job validates git tree"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v := &Validator{Client: client.New(srv.URL, "t"), Signer: attest.NewSigner(priv), CacheDir: t.TempDir(), WorkDir: t.TempDir(), Unsandboxed: true}
			marker := filepath.Join(t.TempDir(), "ran")
			payload, err := structpb.NewStruct(map[string]any{
				"repository": "app", "change": "chg_1", "candidate_revision": "rev_1", "git_tree": c.gitTree,
				"tree_digest": repos.treeDigest, "command": []any{"./check.sh"}, "timeout": "1m", "env": map[string]any{"MARKER": marker},
			})
			if err != nil {
				t.Fatal(err)
			}
			out, err := v.Handle(context.Background(), &Job{Job: &agwpv1.Job{Id: "job_1", Kind: client.KindValidate, Payload: payload, Attempts: 1, ClaimedBy: "ci|w1"}})
			_, ran := os.Stat(marker)
			if c.wantErr != "" {
				var perm permanentError
				if !errors.As(err, &perm) || !strings.Contains(err.Error(), c.wantErr) || ran == nil {
					t.Fatalf("Handle = %v (the command ran: %v), want a permanent refusal saying %q, running nothing", err, ran == nil, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Handle: %v", err)
			}
			got, _, err := attest.VerifyValidation(context.Background(), attest.FromProto(out.Attestation), [][]byte{pub})
			if err != nil {
				t.Fatal(err)
			}
			if !got.Passed() || got.GitTree != gitTree || got.TreeDigest != repos.treeDigest || ran != nil {
				t.Fatalf("attestation: passed %v, git tree %s, tree %s (the script left its marker: %v); want a pass of %s, %s\n%s",
					got.Passed(), got.GitTree, got.TreeDigest, ran == nil, gitTree, repos.treeDigest, fmt.Sprint(out.Output))
			}
		})
	}
}
