package cli_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
	"github.com/ag-coord/ag/internal/cli"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// gitEntry is a path of a git tree: its mode and content (a link's target; a submodule's commit).
type gitEntry struct{ mode, content string }

func file(content string) gitEntry       { return gitEntry{repo.ModeFile, content} }
func executable(content string) gitEntry { return gitEntry{repo.ModeExecutable, content} }
func symlink(target string) gitEntry     { return gitEntry{repo.ModeSymlink, target} }
func gitlink(commit string) gitEntry     { return gitEntry{repo.ModeGitlink, commit} }

// newModesEnv is newCLIEnv of a repository imported from a git history whose one commit holds
// entries, each with its mode, as `git update-index --cacheinfo` writes them: a link's target
// need not exist anywhere.
func newModesEnv(t *testing.T, entries map[string]gitEntry) *cliEnv {
	t.Helper()
	e := &cliEnv{t: t, srv: agtest.Start(t, agtest.Options{})}
	dir := t.TempDir()
	gitIn(t, dir, "", "init", "-q", "-b", "main")
	for p, en := range entries {
		id := en.content
		if en.mode != repo.ModeGitlink {
			id = gitIn(t, dir, en.content, "hash-object", "-w", "--stdin")
		}
		gitIn(t, dir, "", "update-index", "--add", "--cacheinfo", en.mode+","+id+","+p)
	}
	tree := gitIn(t, dir, "", "write-tree")
	commit := gitIn(t, dir, "", "commit-tree", tree, "-m", "modes")
	gitIn(t, dir, "", "update-ref", "refs/heads/main", commit)
	e.admin("repo", "import", "app", dir)
	return e
}

// mainlineEntry answers the mainline's entry at path, nil when it has none.
func (e *cliEnv) mainlineEntry(path string) *agwpv1.TreeEntry {
	e.t.Helper()
	tree, err := e.srv.Admin.Repos.GetTree(context.Background(), &agwpv1.GetTreeRequest{Repository: "app"})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, en := range tree.GetEntries() {
		if en.GetPath() == path {
			return en
		}
	}
	return nil
}

// assertMainline fails the test unless the mainline has path with mode and content (a link's
// target).
func (e *cliEnv) assertMainline(path, mode, content string) {
	e.t.Helper()
	en := e.mainlineEntry(path)
	if en == nil {
		e.t.Errorf("the mainline has no %s, want it of mode %s", path, mode)
		return
	}
	blob, err := e.srv.Admin.Blob(context.Background(), en.GetDigest())
	if err != nil {
		e.t.Fatal(err)
	}
	if en.GetMode() != mode || string(blob) != content {
		e.t.Errorf("the mainline's %s: mode %s holding %q; want mode %s holding %q", path, en.GetMode(), blob, mode, content)
	}
}

// serverHolds reports whether the server holds a blob of content.
func (e *cliEnv) serverHolds(content string) bool {
	e.t.Helper()
	res, err := e.srv.Admin.Repos.FindMissingBlobs(context.Background(), &agwpv1.FindMissingBlobsRequest{Digests: []string{repo.Digest([]byte(content))}})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(res.GetMissing()) == 0
}

// perm answers the permission bits of a file of the checkout, not following a link.
func (a *agentCO) perm(path string) fs.FileMode {
	a.t.Helper()
	info, err := os.Lstat(filepath.Join(a.dir, filepath.FromSlash(path)))
	if err != nil {
		a.t.Fatal(err)
	}
	if !info.Mode().IsRegular() {
		a.t.Fatalf("%s is %v, not a regular file", path, info.Mode())
	}
	return info.Mode().Perm()
}

// link answers the target of a link of the checkout, failing the test when path is no link.
func (a *agentCO) link(path string) string {
	a.t.Helper()
	info, err := os.Lstat(filepath.Join(a.dir, filepath.FromSlash(path)))
	if err != nil || info.Mode()&fs.ModeSymlink == 0 {
		a.t.Fatalf("%s is %v (%v), want a symbolic link", path, info, err)
	}
	target, err := os.Readlink(filepath.Join(a.dir, filepath.FromSlash(path)))
	if err != nil {
		a.t.Fatal(err)
	}
	return target
}

func (a *agentCO) chmod(path string, perm fs.FileMode) {
	a.t.Helper()
	if err := os.Chmod(filepath.Join(a.dir, filepath.FromSlash(path)), perm); err != nil {
		a.t.Fatal(err)
	}
}

// symlink makes path a link to target, replacing what is there.
func (a *agentCO) symlink(target, path string) {
	a.t.Helper()
	full := filepath.Join(a.dir, filepath.FromSlash(path))
	if err := os.RemoveAll(full); err != nil {
		a.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		a.t.Fatal(err)
	}
	if err := os.Symlink(target, full); err != nil {
		a.t.Fatal(err)
	}
}

// modeEditOut is an edit of `ag status --json`, with its modes.
type modeEditOut struct {
	Path     string `json:"path"`
	Status   string `json:"status"`
	Mode     string `json:"mode"`
	BaseMode string `json:"baseMode"`
	Target   string `json:"target"`
}

func (a *agentCO) edits() []modeEditOut {
	a.t.Helper()
	var st struct {
		Edits      []modeEditOut `json:"edits"`
		Submodules []struct {
			Path, Commit string
		} `json:"submodules"`
	}
	decode(a.t, "ag status --json", a.must("status", "--json"), &st)
	return st.Edits
}

// TestChmodIsAnEdit ensures the execute bit is part of what a file holds, end to end: a
// checkout writes a 100755 file 0755 and a 100644 one 0644; `chmod +x` alone and `chmod -x`
// alone are edits that status names by their modes and diff prints as git does; integrate
// lands them (GetTree says the new mode, the content unchanged) and another checkout, and a
// sync of another's, have the bit; a write of an executable file keeps it executable; revert
// puts a mode back.
func TestChmodIsAnEdit(t *testing.T) {
	t.Parallel()
	e := newModesEnv(t, map[string]gitEntry{"run.sh": file("#!/bin/sh\necho run\n"), "tool.sh": executable("#!/bin/sh\necho tool\n"), "a.txt": file("a\n")})
	alice, bob := e.agent("alice"), e.agent("bob")
	if got := alice.perm("tool.sh"); got != 0o755 {
		t.Errorf("a checkout wrote tool.sh (100755) %v, want 0755", got)
	}
	if got := alice.perm("run.sh"); got != 0o644 {
		t.Errorf("a checkout wrote run.sh (100644) %v, want 0644", got)
	}
	if out := alice.must("status"); !strings.Contains(out, "no local edits") {
		t.Errorf("ag status right after the checkout:\n%s\nwant no local edits", out)
	}

	alice.chmod("run.sh", 0o755)
	if out := alice.must("status"); !strings.Contains(out, "  modified  run.sh (mode 100644 → 100755)\n") {
		t.Errorf("ag status after chmod +x run.sh:\n%s\nwant run.sh modified, mode 100644 → 100755", out)
	}
	if got := alice.edits(); !slices.Equal(got, []modeEditOut{{Path: "run.sh", Status: "modified", Mode: "100755", BaseMode: "100644"}}) {
		t.Errorf("ag status --json after chmod +x run.sh: %+v", got)
	}
	if out := alice.must("diff"); out != "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n" {
		t.Errorf("ag diff after chmod +x run.sh printed %q, want git's old mode and new mode lines alone", out)
	}
	alice.integrate("run.sh runs", "run.sh")
	e.assertMainline("run.sh", "100755", "#!/bin/sh\necho run\n")
	if out := alice.must("status"); !strings.Contains(out, "no local edits") {
		t.Errorf("ag status after integrating the chmod:\n%s\nwant no local edits", out)
	}
	carol := e.agent("carol")
	if got := carol.perm("run.sh"); got != 0o755 {
		t.Errorf("a checkout after the chmod wrote run.sh %v, want 0755", got)
	}

	// chmod -x alone, the other way.
	alice.chmod("tool.sh", 0o644)
	if out := alice.must("status"); !strings.Contains(out, "  modified  tool.sh (mode 100755 → 100644)\n") {
		t.Errorf("ag status after chmod -x tool.sh:\n%s\nwant tool.sh modified, mode 100755 → 100644", out)
	}
	alice.integrate("tool.sh is no program", "tool.sh")
	e.assertMainline("tool.sh", "100644", "#!/bin/sh\necho tool\n")

	// A sync brings another's chmods in, each way.
	out := bob.must("sync")
	if !strings.Contains(out, "2 files updated") || bob.perm("run.sh") != 0o755 || bob.perm("tool.sh") != 0o644 {
		t.Errorf("bob's sync over alice's chmods printed %q: run.sh %v, tool.sh %v; want 0755 and 0644", out, bob.perm("run.sh"), bob.perm("tool.sh"))
	}
	if got := bob.edits(); len(got) != 0 {
		t.Errorf("bob's edits after his sync: %+v, want none", got)
	}

	// A write of an executable file keeps it executable, in the mainline and in a sync.
	bob.write("run.sh", "#!/bin/sh\necho run faster\n")
	if got := bob.edits(); !slices.Equal(got, []modeEditOut{{Path: "run.sh", Status: "modified", Mode: "100755", BaseMode: "100755"}}) {
		t.Errorf("ag status --json after a write of the executable run.sh: %+v, want its content modified, its mode kept", got)
	}
	if out := bob.must("diff"); !strings.HasPrefix(out, "diff --git a/run.sh b/run.sh\n--- a/run.sh\n+++ b/run.sh\n") || strings.Contains(out, "mode") {
		t.Errorf("ag diff of an edit of an executable's content printed:\n%s\nwant the content's diff and no mode lines", out)
	}
	bob.integrate("run faster", "run.sh")
	e.assertMainline("run.sh", "100755", "#!/bin/sh\necho run faster\n")
	carol.must("sync")
	if carol.read("run.sh") != "#!/bin/sh\necho run faster\n" || carol.perm("run.sh") != 0o755 {
		t.Errorf("carol's run.sh after her sync: %q, %v; want bob's content, 0755", carol.read("run.sh"), carol.perm("run.sh"))
	}

	// Revert puts the base's mode back.
	carol.chmod("a.txt", 0o755)
	carol.must("revert", "a.txt")
	if got := carol.perm("a.txt"); got != 0o644 {
		t.Errorf("a.txt after chmod +x and ag revert: %v, want 0644", got)
	}
	if got := carol.edits(); len(got) != 0 {
		t.Errorf("carol's edits after the revert: %+v, want none", got)
	}
}

// TestSymlinksLandAsLinks ensures a symbolic link is integrated as a link, never as what it
// points to: a new one and a retarget each land with mode 120000 and their target as the blob,
// check out and sync as links; status and diff say so; a link to a secret outside the checkout
// sends the secret's path, never the secret; a link made a file, and back, are edits too; revert
// puts a link back; a lease on a link to a directory leases the link.
func TestSymlinksLandAsLinks(t *testing.T) {
	t.Parallel()
	e := newModesEnv(t, map[string]gitEntry{"run.sh": executable("#!/bin/sh\n"), "docs/a.md": file("a\n"), "old": symlink("run.sh")})
	alice, bob := e.agent("alice"), e.agent("bob")
	if got := alice.link("old"); got != "run.sh" {
		t.Errorf("the checkout's link old leads to %q, want run.sh", got)
	}

	alice.symlink("run.sh", "new")
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("the key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	alice.symlink(secret, "key")
	alice.symlink("docs", "docs-link") // to a directory of the checkout
	out := alice.must("status")
	for _, want := range []string{"  added     new (link → run.sh)\n", "  added     key (link → " + secret + ")\n", "  added     docs-link (link → docs)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("ag status after ln -s:\n%s\nwant %q", out, want)
		}
	}
	if strings.Contains(out, "docs-link/") {
		t.Errorf("ag status listed files under the link docs-link:\n%s", out)
	}
	want := "diff --git a/new b/new\nnew file mode 120000\n--- /dev/null\n+++ b/new\n@@ -0,0 +1 @@\n+run.sh\n\\ No newline at end of file\n"
	if out := alice.must("diff", "new"); out != want {
		t.Errorf("ag diff new printed:\n%s\nwant:\n%s", out, want)
	}
	// A lease on the link to a directory is a lease on the link's path, not on docs/.
	var l leaseOut
	decode(t, "ag lease acquire docs-link --json", alice.must("lease", "acquire", "docs-link", "new", "key", "--json"), &l)
	if !slices.Equal(l.Paths, []string{"docs-link", "key", "new"}) {
		t.Errorf("ag lease acquire of links leased %q, want the links' paths", l.Paths)
	}
	alice.must("integrate", "-m", "links")
	alice.must("lease", "release")
	e.assertMainline("new", "120000", "run.sh")
	e.assertMainline("key", "120000", secret)
	e.assertMainline("docs-link", "120000", "docs")
	if e.serverHolds("the key\n") {
		t.Error("the server holds the secret a link pointed to: integrate read through the link")
	}
	if e.mainlineEntry("docs-link/a.md") != nil {
		t.Error("the mainline has docs-link/a.md: the link to a directory was integrated as the directory")
	}

	// Retarget, and a link made a file.
	alice.symlink("docs/a.md", "new")
	if err := os.Remove(filepath.Join(alice.dir, "old")); err != nil {
		t.Fatal(err)
	}
	alice.write("old", "run.sh")
	out = alice.must("status")
	for _, want := range []string{"  modified  new (link → docs/a.md)\n", "  modified  old (mode 120000 → 100644)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("ag status after a retarget and a link made a file:\n%s\nwant %q", out, want)
		}
	}
	want = "diff --git a/old b/old\ndeleted file mode 120000\n--- a/old\n+++ /dev/null\n@@ -1 +0,0 @@\n-run.sh\n\\ No newline at end of file\n" +
		"--- /dev/null\n+++ b/old\n@@ -0,0 +1 @@\n+run.sh\n\\ No newline at end of file\n"
	if out := alice.must("diff", "old"); out != want {
		t.Errorf("ag diff of a link made a file printed:\n%s\nwant the link deleted and the file added, as git shows it:\n%s", out, want)
	}
	alice.integrate("retarget", "new", "old")
	e.assertMainline("new", "120000", "docs/a.md")
	e.assertMainline("old", "100644", "run.sh")

	// Another checkout, and a sync, have links.
	carol := e.agent("carol")
	for p, target := range map[string]string{"new": "docs/a.md", "key": secret, "docs-link": "docs"} {
		if got := carol.link(p); got != target {
			t.Errorf("carol's checkout has %s leading to %q, want %q", p, got, target)
		}
	}
	bob.must("sync")
	if got := bob.link("new"); got != "docs/a.md" {
		t.Errorf("bob's new after his sync leads to %q, want docs/a.md", got)
	}
	if got := bob.perm("old"); got != 0o644 || bob.read("old") != "run.sh" {
		t.Errorf("bob's old after his sync: %v holding %q, want the file alice made", got, bob.read("old"))
	}
	if got := bob.edits(); len(got) != 0 {
		t.Errorf("bob's edits after his sync: %+v, want none", got)
	}

	// Revert puts a link back as the link it was, and removes a new one.
	bob.symlink("elsewhere", "new")
	bob.symlink("run.sh", "another")
	bob.must("revert", "new", "another")
	if got := bob.link("new"); got != "docs/a.md" {
		t.Errorf("bob's new after ag revert leads to %q, want docs/a.md", got)
	}
	if _, err := os.Lstat(filepath.Join(bob.dir, "another")); !os.IsNotExist(err) {
		t.Errorf("the new link another is still there after ag revert: %v", err)
	}
	if got := bob.edits(); len(got) != 0 {
		t.Errorf("bob's edits after his revert: %+v, want none", got)
	}
}

// TestDiffAppliesWithGit ensures what `ag diff` prints of a chmod and of a new link is a patch
// git applies: the base files with the patch applied are the checkout's.
func TestDiffAppliesWithGit(t *testing.T) {
	t.Parallel()
	e := newModesEnv(t, map[string]gitEntry{"run.sh": file("#!/bin/sh\n"), "a.txt": file("a\n")})
	alice := e.agent("alice")
	alice.chmod("run.sh", 0o755)
	alice.symlink("run.sh", "link")
	alice.write("a.txt", "a, edited\n")
	patch := alice.must("diff")

	dir := t.TempDir()
	gitIn(t, dir, "", "init", "-q")
	mkfile(t, filepath.Join(dir, "run.sh"), "#!/bin/sh\n")
	mkfile(t, filepath.Join(dir, "a.txt"), "a\n")
	gitIn(t, dir, patch, "apply", "-")
	if info, err := os.Lstat(filepath.Join(dir, "run.sh")); err != nil || info.Mode().Perm()&0o100 == 0 {
		t.Errorf("git apply of ag diff left run.sh %v (%v), want it executable\n%s", info.Mode(), err, patch)
	}
	if target, err := os.Readlink(filepath.Join(dir, "link")); err != nil || target != "run.sh" {
		t.Errorf("git apply of ag diff made link %q (%v), want a link to run.sh\n%s", target, err, patch)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "a, edited\n" {
		t.Errorf("git apply of ag diff left a.txt %q\n%s", b, patch)
	}
}

// TestHostileLinksAreWrittenAsLinks ensures a tree's links, wherever they point (to
// /etc/passwd, out of the checkout, to .git/config, to themselves), are written as links by a
// checkout and never followed by status, integrate or sync: nothing outside the checkout is
// read or written, a sync replaces a link the mainline made a file rather than writing through
// it, and removes a link the mainline deleted rather than what it points to.
func TestHostileLinksAreWrittenAsLinks(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	victim := filepath.Join(parent, "victim.txt")
	if err := os.WriteFile(victim, []byte("the victim's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	victimDir := filepath.Join(parent, "victim")
	if err := os.Mkdir(victimDir, 0o755); err != nil {
		t.Fatal(err)
	}
	mkfile(t, filepath.Join(victimDir, "f"), "the victim's f\n")
	links := map[string]string{
		"passwd":      "/etc/passwd",
		"outside":     "../../outside",
		"gitconfig":   ".git/config",
		"sub/loop":    "loop",
		"abs":         victim,
		"rel":         "../victim.txt",
		"dir":         victimDir,
		"sub/cycle-a": "cycle-b",
		"sub/cycle-b": "cycle-a",
	}
	entries := map[string]gitEntry{"a.txt": file("a\n")}
	for p, target := range links {
		entries[p] = symlink(target)
	}
	e := newModesEnv(t, entries)
	alice := e.agent("alice")
	// The checkout at PARENT/co: "../victim.txt" leads to the victim.
	co := filepath.Join(parent, "co")
	if out, errOut, code := runCLI("checkout", "app", co, "--server", e.srv.URL, "--token", alice.token); code != 0 {
		t.Fatalf("ag checkout of a tree of hostile links: exit %d\n%s%s", code, out, errOut)
	}
	alice.dir = co
	for p, target := range links {
		if got := alice.link(p); got != target {
			t.Errorf("the checkout's %s leads to %q, want %q", p, got, target)
		}
	}
	outside := filepath.Join(filepath.Dir(filepath.Dir(co)), "outside")
	if _, err := os.Lstat(outside); !os.IsNotExist(err) {
		t.Errorf("%s exists after the checkout (%v): written through ../../outside", outside, err)
	}
	if out := alice.must("status"); !strings.Contains(out, "no local edits") {
		t.Errorf("ag status in a checkout of hostile links:\n%s\nwant no local edits", out)
	}

	// A new link to the victim is integrated as its path, the victim's content never read.
	alice.symlink("../victim.txt", "new")
	alice.integrate("a link out", "new")
	e.assertMainline("new", "120000", "../victim.txt")
	if e.serverHolds("the victim's\n") {
		t.Error("the server holds the victim's content: integrate read through a link")
	}

	// The mainline makes links files, retargets one, and deletes others: each link is replaced
	// or removed as a link.
	bob := e.agent("bob")
	// Leased while they are links: a lease of dir is of the link, not of where it leads.
	bob.must("lease", "acquire", "abs", "rel", "sub/", "dir", "passwd")
	for _, p := range []string{"abs", "rel"} {
		if err := os.Remove(filepath.Join(bob.dir, p)); err != nil {
			t.Fatal(err)
		}
		bob.write(p, "written by sync\n")
	}
	bob.symlink("a.txt", "sub/loop")
	for _, p := range []string{"dir", "passwd", "sub/cycle-a"} {
		if err := os.Remove(filepath.Join(bob.dir, filepath.FromSlash(p))); err != nil {
			t.Fatal(err)
		}
	}
	bob.write("dir/f", "a directory now\n")
	bob.integrate("links made files", "dir/")
	if out, errOut, code := alice.run("sync"); code != 0 {
		t.Fatalf("alice's sync over links made files: exit %d\n%s%s", code, out, errOut)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "the victim's\n" {
		t.Errorf("the victim holds %q (%v) after the sync, want it untouched", b, err)
	}
	if got := listTree(t, victimDir); !slices.Equal(got, []string{"f"}) {
		t.Errorf("the victim directory holds %q after the sync, want f alone", got)
	}
	if b, err := os.ReadFile(filepath.Join(victimDir, "f")); err != nil || string(b) != "the victim's f\n" {
		t.Errorf("the victim directory's f holds %q (%v) after the sync", b, err)
	}
	for _, p := range []string{"abs", "rel"} {
		if got := alice.perm(p); got != 0o644 || alice.read(p) != "written by sync\n" {
			t.Errorf("alice's %s after the sync: %v holding %q, want the file bob made", p, got, alice.read(p))
		}
	}
	if got := alice.link("sub/loop"); got != "a.txt" {
		t.Errorf("alice's sub/loop after the sync leads to %q, want a.txt", got)
	}
	if alice.read("dir/f") != "a directory now\n" {
		t.Errorf("alice's dir/f after the sync: %q", alice.read("dir/f"))
	}
	for _, p := range []string{"passwd", "sub/cycle-a"} {
		if _, err := os.Lstat(filepath.Join(co, filepath.FromSlash(p))); !os.IsNotExist(err) {
			t.Errorf("alice's %s is still there after the mainline deleted it: %v", p, err)
		}
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Errorf("/etc/passwd: %v", err)
	}
	if out := alice.must("status"); !strings.Contains(out, "no local edits") {
		t.Errorf("ag status after the sync:\n%s\nwant no local edits", out)
	}
}

// TestALinkReplacedByADirectoryAndBack ensures a link the mainline replaces by a directory, and
// the directory it replaces by a link again, go through a sync each way; and that a link the
// user replaces by a directory is the link deleted and the directory's files added.
func TestALinkReplacedByADirectoryAndBack(t *testing.T) {
	t.Parallel()
	e := newModesEnv(t, map[string]gitEntry{"x/f": file("f\n"), "d": symlink("x")})
	alice, bob := e.agent("alice"), e.agent("bob")

	bob.must("lease", "acquire", "d")
	if err := os.Remove(filepath.Join(bob.dir, "d")); err != nil {
		t.Fatal(err)
	}
	bob.write("d/g", "g\n")
	if got := bob.edits(); !slices.Equal(got, []modeEditOut{{Path: "d", Status: "deleted", BaseMode: "120000"}, {Path: "d/g", Status: "added", Mode: "100644"}}) {
		t.Errorf("bob's edits after replacing the link d by a directory: %+v", got)
	}
	bob.integrate("d a directory", "d/")
	alice.must("sync")
	if info, err := os.Lstat(filepath.Join(alice.dir, "d")); err != nil || !info.IsDir() || alice.read("d/g") != "g\n" {
		t.Fatalf("alice's d after the sync: %v (%v), d/g %q; want a directory holding g", info, err, alice.read("d/g"))
	}
	if got := listTree(t, filepath.Join(alice.dir, "x")); !slices.Equal(got, []string{"f"}) {
		t.Errorf("alice's x, where the link d led, holds %q after the sync, want f alone", got)
	}

	bob.must("lease", "acquire", "d/")
	bob.symlink("x", "d")
	bob.integrate("d a link again", "d")
	alice.must("sync")
	if got := alice.link("d"); got != "x" {
		t.Errorf("alice's d after the second sync leads to %q, want x", got)
	}
	if got := listTree(t, filepath.Join(alice.dir, "x")); !slices.Equal(got, []string{"f"}) {
		t.Errorf("alice's x holds %q after the second sync, want f alone", got)
	}
	if got := alice.edits(); len(got) != 0 {
		t.Errorf("alice's edits after the syncs: %+v, want none", got)
	}
}

// TestSubmodulesCheckOutEmpty ensures a submodule checks out as an empty directory, as git
// clone without --recurse-submodules leaves it, shows in status as a submodule at its commit
// and never as an edit: what someone puts in its directory is not the checkout's, and a sync
// leaves it there.
func TestSubmodulesCheckOutEmpty(t *testing.T) {
	t.Parallel()
	commit := strings.Repeat("5e", 20)
	e := newModesEnv(t, map[string]gitEntry{"a.txt": file("a\n"), "vendor/lib": gitlink(commit)})
	alice, bob := e.agent("alice"), e.agent("bob")
	if got := listTree(t, filepath.Join(alice.dir, "vendor")); !slices.Equal(got, []string{"lib/"}) {
		t.Errorf("the checkout's vendor/ holds %q, want the submodule's empty directory lib/", got)
	}
	out := alice.must("status")
	if !strings.Contains(out, "no local edits") || !strings.Contains(out, "  vendor/lib: submodule at "+commit+"\n") {
		t.Errorf("ag status of a checkout with a submodule:\n%s\nwant no local edits and vendor/lib a submodule at %s", out, commit)
	}
	var st struct {
		Submodules []struct{ Path, Commit string } `json:"submodules"`
	}
	decode(t, "ag status --json", alice.must("status", "--json"), &st)
	if len(st.Submodules) != 1 || st.Submodules[0].Path != "vendor/lib" || st.Submodules[0].Commit != commit {
		t.Errorf("ag status --json: submodules %+v, want vendor/lib at %s", st.Submodules, commit)
	}

	// The submodule's own files, cloned into its directory by hand, are another repository's.
	alice.write("vendor/lib/lib.go", "package lib\n")
	if got := alice.edits(); len(got) != 0 {
		t.Errorf("edits with files in the submodule's directory: %+v, want none", got)
	}
	if out := alice.must("integrate", "-m", "nothing"); !strings.Contains(out, "nothing to integrate") {
		t.Errorf("ag integrate with files in the submodule's directory printed %q, want nothing to integrate", out)
	}
	bob.write("a.txt", "a, bob's\n")
	bob.integrate("a, bob's", "a.txt")
	alice.must("sync")
	if alice.read("vendor/lib/lib.go") != "package lib\n" || alice.read("a.txt") != "a, bob's\n" {
		t.Errorf("after alice's sync: vendor/lib/lib.go %q, a.txt %q", alice.read("vendor/lib/lib.go"), alice.read("a.txt"))
	}

	// Moving the submodule to another commit is a change of its own, under its lease; what is
	// not a submodule, or not a commit id, is refused saying what --submodule does.
	moved := strings.Repeat("7a", 20)
	for _, bad := range []struct{ flag, want string }{
		{"a.txt=" + moved, "a.txt is not a submodule"},
		{"vendor/lib=HEAD", "HEAD is not a commit id"},
		{"vendor/lib", "want PATH=COMMIT"},
	} {
		_, errOut, code := bob.run("integrate", "-m", "move", "--submodule", bad.flag)
		if code != cli.ExitUsage || !strings.Contains(errOut, bad.want) {
			t.Errorf("ag integrate --submodule %s: exit %d, %q; want exit %d saying %q", bad.flag, code, errOut, cli.ExitUsage, bad.want)
		}
	}
	_, errOut, code := bob.run("integrate", "-m", "move lib", "--submodule", "vendor/lib="+moved)
	if code != cli.ExitLease || !strings.Contains(errOut, "vendor/lib") {
		t.Errorf("ag integrate --submodule without a lease: exit %d, %q; want exit %d naming vendor/lib", code, errOut, cli.ExitLease)
	}
	bob.must("lease", "acquire", "vendor/lib")
	if out := bob.must("integrate", "-m", "move lib", "--submodule", "vendor/lib="+strings.ToUpper(moved)); !strings.Contains(out, "integrated: 1 paths") {
		t.Errorf("ag integrate --submodule printed %q, want the change integrated", out)
	}
	if en := e.mainlineEntry("vendor/lib"); en == nil || en.GetMode() != repo.ModeGitlink || en.GetGitlinkCommit() != moved {
		t.Errorf("the mainline's vendor/lib after the move: %v, want a submodule at %s", en, moved)
	}
	if out := bob.must("status"); !strings.Contains(out, "  vendor/lib: submodule at "+moved+"\n") || !strings.Contains(out, "no local edits") {
		t.Errorf("bob's status after the move:\n%s\nwant vendor/lib at %s and no local edits", out, moved)
	}
	alice.must("sync")
	if out := alice.must("status"); !strings.Contains(out, "  vendor/lib: submodule at "+moved+"\n") {
		t.Errorf("alice's status after a sync over the move:\n%s\nwant vendor/lib at %s", out, moved)
	}
}

// TestModesMergeInASync ensures a sync merges modes as git does: another's chmod of a file
// edited here lands with the local content still an edit; the same file added on both sides
// with the same bytes but different modes, a link made here where the mainline changed the
// file, refuse the sync, naming the modes, until --theirs or --ours says which.
func TestModesMergeInASync(t *testing.T) {
	t.Parallel()
	e := newModesEnv(t, map[string]gitEntry{"run.sh": file("#!/bin/sh\necho one\n"), "x": file("x\n")})
	alice, bob := e.agent("alice"), e.agent("bob")

	bob.chmod("run.sh", 0o755)
	bob.integrate("run.sh runs", "run.sh")
	alice.write("run.sh", "#!/bin/sh\necho one\necho two\n")
	out := alice.must("sync")
	if !strings.Contains(out, "merged with your edits, still local edits: run.sh") {
		t.Errorf("alice's sync over her edit and bob's chmod printed %q, want run.sh merged", out)
	}
	if alice.perm("run.sh") != 0o755 || alice.read("run.sh") != "#!/bin/sh\necho one\necho two\n" {
		t.Errorf("alice's run.sh after the sync: %v holding %q, want bob's mode with her content", alice.perm("run.sh"), alice.read("run.sh"))
	}
	if got := alice.edits(); !slices.Equal(got, []modeEditOut{{Path: "run.sh", Status: "modified", Mode: "100755", BaseMode: "100755"}}) {
		t.Errorf("alice's edits after the sync: %+v, want run.sh's content alone", got)
	}
	alice.integrate("two", "run.sh")
	e.assertMainline("run.sh", "100755", "#!/bin/sh\necho one\necho two\n")

	// The same new file on both sides, of different modes.
	bob.must("sync")
	bob.write("new.sh", "#!/bin/sh\n")
	bob.integrate("new.sh", "new.sh")
	alice.write("new.sh", "#!/bin/sh\n")
	alice.chmod("new.sh", 0o755)
	// A link here where the mainline changed the file.
	bob.write("x", "x, bob's\n")
	bob.integrate("x", "x")
	alice.symlink("run.sh", "x")
	out, errOut, code := alice.run("sync")
	if code != cli.ExitConflict || !strings.Contains(errOut, "new.sh (the mode changed on both sides: 100755 here, 100644 in the mainline)") ||
		!strings.Contains(errOut, "x (a symbolic link here, a file in the mainline)") {
		t.Errorf("alice's sync over modes changed on both sides: exit %d\n%s%s\nwant exit 4 naming new.sh's modes and x's link", code, out, errOut)
	}
	if alice.perm("new.sh") != 0o755 || alice.link("x") != "run.sh" {
		t.Error("the refused sync changed alice's new.sh or x")
	}
	alice.must("sync", "--theirs", "new.sh", "--ours", "x")
	if alice.perm("new.sh") != 0o644 || alice.link("x") != "run.sh" {
		t.Errorf("after sync --theirs new.sh --ours x: new.sh %v, x %q; want the mainline's 0644 and alice's link", alice.perm("new.sh"), alice.link("x"))
	}
	got := alice.edits()
	sort.Slice(got, func(i, j int) bool { return got[i].Path < got[j].Path })
	if !slices.Equal(got, []modeEditOut{{Path: "x", Status: "modified", Mode: "120000", BaseMode: "100644", Target: "run.sh"}}) {
		t.Errorf("alice's edits after the sync: %+v, want x made a link", got)
	}
	alice.integrate("x a link", "x")
	e.assertMainline("x", "120000", "run.sh")
}

// modeRepos is fakeRepos answering modes: a server, or anything between the client and the
// server, sending whatever tree it likes.
type modeRepos struct {
	*fakeRepos
	modes map[string]string // path → mode; 100644 when not named
}

func (f *modeRepos) GetTree(ctx context.Context, req *agwpv1.GetTreeRequest) (*agwpv1.GetTreeResponse, error) {
	res, err := f.fakeRepos.GetTree(ctx, req)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, en := range res.GetEntries() {
		en.Mode = f.modes[en.GetPath()]
	}
	return res, err
}

func serveModeRepos(t *testing.T, f *modeRepos) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(agwpv1connect.NewRepositoryServiceHandler(f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestATreeWithAPathUnderALinkIsRefused ensures a tree one of whose paths lies under one of its
// links (a/ a link out of the checkout, a/b a file), which a checkout writing as it reads would
// write through the link, is refused by ag checkout and by ag sync before anything is written,
// naming both paths; and so are a link whose target no file system holds and a mode ag does not
// know.
func TestATreeWithAPathUnderALinkIsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		files map[string]string
		modes map[string]string
		want  string
	}{
		{"under a link", map[string]string{"a.txt": "a\n", "a": "../victim", "a/b": "written through\n"},
			map[string]string{"a": repo.ModeSymlink}, `"a/b" lies under "a", a symbolic link of the same tree: ag writes nothing through a link`},
		{"under a link, deeper", map[string]string{"a.txt": "a\n", "d/l": "/tmp", "d/l/x/y": "written through\n"},
			map[string]string{"d/l": repo.ModeSymlink}, `"d/l/x/y" lies under "d/l", a symbolic link`},
		{"an empty target", map[string]string{"a.txt": "a\n", "l": ""},
			map[string]string{"l": repo.ModeSymlink}, `"l" is a symbolic link whose target is 0 bytes`},
		{"an unknown mode", map[string]string{"a.txt": "a\n", "f": "f\n"},
			map[string]string{"f": "100664"}, `"f" has mode "100664", which ag does not write`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := &modeRepos{fakeRepos: &fakeRepos{}, modes: map[string]string{}}
			f.set("rev_1", c.files)
			f.modes = c.modes
			url := serveModeRepos(t, f)
			parent := t.TempDir()
			target := filepath.Join(parent, "co")
			out, err := runAg("checkout", "app", target, "--server", url, "--token", "t")
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "Nothing was written") {
				t.Fatalf("ag checkout of a tree holding %v: %v\n%s\nwant a refusal saying %q", c.files, err, out, c.want)
			}
			if got := listTree(t, parent); len(got) != 0 {
				t.Errorf("after the refused checkout, %s holds %q, want nothing", parent, got)
			}

			// A sync to such a tree changes nothing.
			f.set("rev_1", map[string]string{"a.txt": "a\n"})
			f.modes = map[string]string{}
			if out, err := runAg("checkout", "app", target, "--server", url, "--token", "t"); err != nil {
				t.Fatalf("ag checkout: %v\n%s", err, out)
			}
			f.set("rev_2", c.files)
			f.modes = c.modes
			out, err = runAg("sync", "-C", target, "--server", url, "--token", "t")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ag sync to a tree holding %v: %v\n%s\nwant a refusal saying %q", c.files, err, out, c.want)
			}
			want := []string{"co/", "co/.ag/", "co/.ag/checkout.json", "co/.ag/index-*", "co/a.txt"}
			if got := listTree(t, parent); !slices.Equal(got, want) {
				t.Errorf("after the refused sync, %s holds %q, want the checkout as it was: %q", parent, got, want)
			}
		})
	}
}

// TestAnIndexFromBeforeModesIsRebuilt ensures a checkout whose index an ag that knew no modes
// wrote (version 3), or whose checkout.json holds its base files (before there was an index), is
// not read as a base of plain files, which would make every executable and link an edit: the
// first command rebuilds the base from the server's tree of the base revision.
func TestAnIndexFromBeforeModesIsRebuilt(t *testing.T) {
	t.Parallel()
	e := newModesEnv(t, map[string]gitEntry{"tool.sh": executable("#!/bin/sh\n"), "a.txt": file("a\n"), "l": symlink("a.txt")})
	alice := e.agent("alice")
	if err := cli.DowngradeIndex(alice.dir); err != nil {
		t.Fatal(err)
	}
	if out := alice.must("status"); !strings.Contains(out, "no local edits") {
		t.Errorf("ag status over an index of version 3:\n%s\nwant no local edits", out)
	}
	alice.chmod("tool.sh", 0o644)
	if got := alice.edits(); !slices.Equal(got, []modeEditOut{{Path: "tool.sh", Status: "modified", Mode: "100644", BaseMode: "100755"}}) {
		t.Errorf("edits after chmod -x, over the rebuilt index: %+v", got)
	}
	alice.chmod("tool.sh", 0o755)

	// Base files in checkout.json, as an ag before the index kept them.
	state := filepath.Join(alice.dir, ".ag", "checkout.json")
	var st map[string]any
	data, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	decode(t, "checkout.json", string(data), &st)
	delete(st, "index")
	files := map[string]string{}
	for _, p := range []string{"tool.sh", "a.txt", "l"} {
		files[p] = e.mainlineEntry(p).GetDigest()
	}
	st["files"] = files
	data, err = json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out := alice.must("status"); !strings.Contains(out, "no local edits") {
		t.Errorf("ag status over base files in checkout.json:\n%s\nwant no local edits", out)
	}
	if data, err := os.ReadFile(state); err != nil || strings.Contains(string(data), `"files"`) {
		t.Errorf("checkout.json after the rebuild:\n%s\nwant the files moved into an index", data)
	}
}

// TestCheckoutRecordsModesItWrote ensures the index of a new checkout records the executables
// and links it wrote as they ended up (the bit set, the link made), so that the first status
// after it reads none of them and finds no edit; and that a chmod is found after.
func TestCheckoutRecordsModesItWrote(t *testing.T) {
	t.Parallel()
	for _, inside := range []bool{false, true} {
		f := &modeRepos{fakeRepos: &fakeRepos{}}
		f.set("rev_1", map[string]string{"a.txt": "a\n", "bin/run": "#!/bin/sh\n", "bin/link": "run", "top": "a.txt"})
		f.modes = map[string]string{"bin/run": repo.ModeExecutable, "bin/link": repo.ModeSymlink, "top": repo.ModeSymlink}
		url := serveModeRepos(t, f)
		dir := filepath.Join(t.TempDir(), "co")
		if inside {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := runAg("checkout", "app", dir, "--server", url, "--token", "t"); err != nil {
			t.Fatalf("ag checkout: %v\n%s", err, out)
		}
		if got := listTree(t, dir); !slices.Equal(got, []string{".ag/", ".ag/checkout.json", ".ag/index-*", "a.txt", "bin/", "bin/link -> run", "bin/run", "top -> a.txt"}) {
			t.Errorf("the checkout (into an existing directory: %v) holds %q", inside, got)
		}
		if info, err := os.Lstat(filepath.Join(dir, "bin", "run")); err != nil || info.Mode().Perm() != 0o755 {
			t.Errorf("bin/run: %v (%v), want 0755", info.Mode(), err)
		}
		if err := cli.AgeCheckout(dir, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		mostHashed := 0
		if inside {
			mostHashed = 3 // the top-level entries moved up from staging get a new ctime
		}
		if edits, hashed, err := cli.ScanCheckout(dir); err != nil || len(edits) != 0 || hashed > mostHashed {
			t.Errorf("the first scan (into an existing directory: %v): edits %q, %d read, %v; want none, at most %d read", inside, edits, hashed, err, mostHashed)
		}
		if err := os.Chmod(filepath.Join(dir, "bin", "run"), 0o644); err != nil {
			t.Fatal(err)
		}
		if edits, _, err := cli.ScanCheckout(dir); err != nil || !slices.Equal(edits, []string{"modified bin/run"}) {
			t.Errorf("after chmod -x: %q, %v; want bin/run modified", edits, err)
		}
	}
}
