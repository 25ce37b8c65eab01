package checkout

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/repo"
)

// The tests of this file check the checkout's path and link rules as a user meets them, one
// rule at a time, so that a change to one of them fails a test here (issue 41's mutation run,
// docs/testing.md#mutation-testing): the end-to-end tests of internal/cli and internal/e2e
// check the same rules through `ag`, but only this package's tests run on its mutants.

// openTestRoot answers an os.Root on a new temporary directory, and the directory.
func openTestRoot(t *testing.T) (*os.Root, string) {
	t.Helper()
	dir := t.TempDir()
	return rootAt(t, dir), dir
}

// rootAt answers an os.Root on dir, closed when the test ends.
func rootAt(t *testing.T, dir string) *os.Root {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root
}

// mkfile writes content at a slash path under dir, making its directories.
func mkfile(t *testing.T, dir, path, content string) {
	t.Helper()
	full := filepath.Join(dir, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mklink makes the symbolic link path (a slash path under dir) lead to target.
func mklink(t *testing.T, dir, path, target string) {
	t.Helper()
	full := filepath.Join(dir, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, full); err != nil {
		t.Fatal(err)
	}
}

// readBack answers what is at a slash path under dir, as the user would find it: "file
// CONTENT PERM", "link TARGET", "dir" or "none".
func readBack(t *testing.T, dir, path string) string {
	t.Helper()
	full := filepath.Join(dir, filepath.FromSlash(path))
	info, err := os.Lstat(full)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "none"
	case err != nil:
		t.Fatal(err)
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(full)
		if err != nil {
			t.Fatal(err)
		}
		return "link " + target
	case info.IsDir():
		return "dir"
	}
	content, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("file %s %o", content, info.Mode().Perm())
}

// umaskedPerm answers the permissions a file made with perm gets under the process's umask,
// as the test finds it.
func umaskedPerm(t *testing.T, perm fs.FileMode) fs.FileMode {
	t.Helper()
	p := filepath.Join(t.TempDir(), "probe")
	if err := os.WriteFile(p, nil, perm); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}

func wantErr(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want one saying %q", what, parts)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want it to say %q", what, err, p)
		}
	}
}

var (
	testDigest = "sha256:" + strings.Repeat("ab", 32)
	testCommit = strings.Repeat("c", 40)
)

// TestTreeFilesRefusesWhatNoCheckoutMayHold ensures a tree the server sends is refused, before
// anything is written, for each thing that would write where a checkout must not, or that no
// tree holds: a path out of the checkout or into .git or .ag, a path twice, a submodule that
// names a blob, a file that names a commit, a link whose target is empty or longer than any, a
// mode ag does not write, and a path under a file, a link or a submodule of the same tree;
// and that what is right passes, a link's target of 1 and of the most bytes among it.
func TestTreeFilesRefusesWhatNoCheckoutMayHold(t *testing.T) {
	t.Parallel()
	file := func(p string) *agwpv1.TreeEntry {
		return &agwpv1.TreeEntry{Path: p, Digest: testDigest, Size: 3, Mode: repo.ModeFile}
	}
	link := func(p string, size uint64) *agwpv1.TreeEntry {
		return &agwpv1.TreeEntry{Path: p, Digest: testDigest, Size: size, Mode: repo.ModeSymlink}
	}
	sub := func(p string) *agwpv1.TreeEntry {
		return &agwpv1.TreeEntry{Path: p, Mode: repo.ModeGitlink, GitlinkCommit: testCommit}
	}
	for _, c := range []struct {
		name    string
		entries []*agwpv1.TreeEntry
		want    []string // in the error; nil: accepted
	}{
		{"out of the checkout", []*agwpv1.TreeEntry{file("../x")}, []string{`the path "../x"`, "Nothing was written", "hostile"}},
		{"into .git", []*agwpv1.TreeEntry{file("a/.git/config")}, []string{`"a/.git/config"`, "Nothing was written"}},
		{"into .ag", []*agwpv1.TreeEntry{file(".ag/checkout.json")}, []string{`".ag/checkout.json"`}},
		{"a path twice", []*agwpv1.TreeEntry{file("a"), file("b"), file("a")}, []string{`lists the path "a" twice`, "Nothing was written"}},
		{"a submodule that names a blob", []*agwpv1.TreeEntry{{Path: "s", Mode: repo.ModeGitlink, GitlinkCommit: testCommit, Digest: testDigest}}, []string{`"s" is a submodule that names a blob too`}},
		{"a submodule that has a size", []*agwpv1.TreeEntry{{Path: "s", Mode: repo.ModeGitlink, GitlinkCommit: testCommit, Size: 1}}, []string{`"s" is a submodule that names a blob too`}},
		{"a submodule of no commit", []*agwpv1.TreeEntry{{Path: "s", Mode: repo.ModeGitlink, GitlinkCommit: "HEAD"}}, []string{`"s" is a submodule of commit "HEAD"`}},
		{"a file that names a commit", []*agwpv1.TreeEntry{{Path: "f", Mode: repo.ModeFile, Digest: testDigest, GitlinkCommit: testCommit}}, []string{`"f" names a submodule's commit`}},
		{"a file of no digest", []*agwpv1.TreeEntry{{Path: "f", Mode: repo.ModeFile, Digest: "../x"}}, []string{`"f" has "../x" for a digest`}},
		{"a mode ag does not write", []*agwpv1.TreeEntry{{Path: "f", Mode: "040000", Digest: testDigest}}, []string{`"f" has mode "040000"`}},
		{"a link to nothing", []*agwpv1.TreeEntry{link("l", 0)}, []string{`"l" is a symbolic link whose target is 0 bytes`}},
		{"a link past the longest", []*agwpv1.TreeEntry{link("l", repo.MaxSymlinkTarget+1)}, []string{fmt.Sprintf(`"l" is a symbolic link whose target is %d bytes`, repo.MaxSymlinkTarget+1)}},
		{"a file under a link", []*agwpv1.TreeEntry{link("a", 5), file("a/b")}, []string{`"a/b" lies under "a", a symbolic link of the same tree`, "Nothing was written"}},
		{"a file deep under a link", []*agwpv1.TreeEntry{file("a/b/c/d"), link("a/b", 5)}, []string{`"a/b/c/d" lies under "a/b", a symbolic link`}},
		{"a file under a submodule", []*agwpv1.TreeEntry{sub("s"), file("s/x")}, []string{`"s/x" lies under "s", a submodule of the same tree`}},
		{"a file under a file", []*agwpv1.TreeEntry{file("a"), file("a/b")}, []string{`"a" would be a file and also the directory of "a/b"`}},
		{"files, a link and a submodule", []*agwpv1.TreeEntry{file("a/b"), file("a/c"), link("l", 1), link("m", repo.MaxSymlinkTarget), sub("s"), file("sx/y"), {Path: "old", Digest: testDigest, Size: 2}}, nil},
	} {
		files, err := TreeFiles(c.entries)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v, want it accepted", c.name, err)
				continue
			}
			want := map[string]treeFile{
				"a/b": {digest: testDigest, Mode: repo.ModeFile}, "a/c": {digest: testDigest, Mode: repo.ModeFile},
				"l": {digest: testDigest, Mode: repo.ModeSymlink}, "m": {digest: testDigest, Mode: repo.ModeSymlink},
				"s": {Mode: repo.ModeGitlink, commit: testCommit}, "sx/y": {digest: testDigest, Mode: repo.ModeFile},
				// A server from before modes: a plain file.
				"old": {digest: testDigest, Mode: repo.ModeFile},
			}
			if fmt.Sprint(files) != fmt.Sprint(want) {
				t.Errorf("%s: %v, want %v", c.name, files, want)
			}
			continue
		}
		if files != nil {
			t.Errorf("%s: answered files %v beside the error", c.name, files)
		}
		wantErr(t, c.name, err, append([]string{"refused the server's tree"}, c.want...)...)
	}
}

// TestCheckBaseRefusesWhatNoAgWrote ensures the base files read back from a checkout's state
// are checked as the server's tree is: revert writes by these paths.
func TestCheckBaseRefusesWhatNoAgWrote(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		files map[string]treeFile
		want  string
	}{
		"into .git":         {map[string]treeFile{"x/.git/config": {digest: testDigest, Mode: repo.ModeFile}}, `file "x/.git/config"`},
		"a bad digest":      {map[string]treeFile{"x": {digest: "x", Mode: repo.ModeFile}}, `file "x" has "x" for a digest`},
		"under a link":      {map[string]treeFile{"l": {digest: testDigest, Mode: repo.ModeSymlink}, "l/x": {digest: testDigest, Mode: repo.ModeFile}}, `"l/x" lies under "l", a symbolic link`},
		"a bad submodule":   {map[string]treeFile{"s": {Mode: repo.ModeGitlink, commit: "x"}}, `file "s" is a submodule of commit "x"`},
		"a mode of no tree": {map[string]treeFile{"s": {Mode: "100600", digest: testDigest}}, `file "s" has mode "100600"`},
	} {
		wantErr(t, name, checkBase(c.files), c.want)
	}
	if err := checkBase(map[string]treeFile{"a/b": {digest: testDigest, Mode: repo.ModeExecutable}, "s": {Mode: repo.ModeGitlink, commit: testCommit}}); err != nil {
		t.Errorf("checkBase of an executable and a submodule: %v", err)
	}
}

// TestWriteEntryReplacesWhatStandsThereAndGoesThroughNoLink ensures each mode is written as git
// has it, that a link or file standing at the path is replaced (never written through), and
// that a write whose parent is a link or a file is refused, writing nothing where the link
// leads.
func TestWriteEntryReplacesWhatStandsThereAndGoesThroughNoLink(t *testing.T) {
	t.Parallel()
	root, dir := openTestRoot(t)
	outside := t.TempDir()
	mkfile(t, outside, "victim", "precious\n")

	plain, exec := umaskedPerm(t, 0o644), umaskedPerm(t, 0o755)
	for _, c := range []struct {
		path, content, mode, want string
	}{
		{"a/b/file.txt", "text\n", repo.ModeFile, fmt.Sprintf("file text\n %o", plain)},
		{"run.sh", "#!/bin/sh\n", repo.ModeExecutable, fmt.Sprintf("file #!/bin/sh\n %o", exec)},
		{"a/link", "b/file.txt", repo.ModeSymlink, "link b/file.txt"},
		{"deps/sub", "", repo.ModeGitlink, "dir"},
	} {
		if err := writeEntry(root, c.path, []byte(c.content), c.mode); err != nil {
			t.Fatalf("write %s: %v", c.path, err)
		}
		if got := readBack(t, dir, c.path); got != c.want {
			t.Errorf("%s written as %s: %q, want %q", c.path, c.mode, got, c.want)
		}
	}

	// A link standing where a file goes is replaced, and what it leads to is left as it was.
	mklink(t, dir, "to-victim", filepath.Join(outside, "victim"))
	if err := writeEntry(root, "to-victim", []byte("mine\n"), repo.ModeFile); err != nil {
		t.Fatal(err)
	}
	if got := readBack(t, dir, "to-victim"); got != fmt.Sprintf("file mine\n %o", plain) {
		t.Errorf("a file written over a link: %q", got)
	}
	mklink(t, dir, "link2", filepath.Join(outside, "victim"))
	if err := writeEntry(root, "link2", []byte("elsewhere"), repo.ModeSymlink); err != nil {
		t.Fatal(err)
	}
	if got := readBack(t, dir, "link2"); got != "link elsewhere" {
		t.Errorf("a link written over a link: %q", got)
	}
	// A file standing where a link goes is replaced by the link.
	if err := writeEntry(root, "a/b/file.txt", []byte("../../run.sh"), repo.ModeSymlink); err != nil {
		t.Fatal(err)
	}
	if got := readBack(t, dir, "a/b/file.txt"); got != "link ../../run.sh" {
		t.Errorf("a link written over a file: %q", got)
	}
	if got := readBack(t, outside, "victim"); got != fmt.Sprintf("file precious\n %o", plain) {
		t.Errorf("the file a link led to: %q, want it untouched", got)
	}

	// Nothing is written through a parent that is a link, in the checkout or out of it, nor
	// under a file.
	mklink(t, dir, "out", outside)
	mklink(t, dir, "in", "a")
	for _, c := range []struct{ path, mode, stands string }{
		{"out/new.txt", repo.ModeFile, "out is a symbolic link, not a directory"},
		{"out/new-link", repo.ModeSymlink, "out is a symbolic link, not a directory"},
		{"out/sub", repo.ModeGitlink, "out is a symbolic link, not a directory"},
		{"in/b/new.txt", repo.ModeExecutable, "in is a symbolic link, not a directory"},
		{"run.sh/x", repo.ModeFile, "run.sh is a file, not a directory"},
	} {
		err := writeEntry(root, c.path, []byte("x"), c.mode)
		wantErr(t, "write "+c.path, err, "write "+c.path, c.stands, "ag writes no file through it")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("writes through a link out of the checkout left %d entries there, want the victim alone", len(entries))
	}
	if got := readBack(t, dir, "a/b/new.txt"); got != "none" {
		t.Errorf("a write through a link in the checkout: a/b/new.txt is %q", got)
	}

	// A link's target is checked before anything is made.
	for _, target := range []string{"", "a\x00b", strings.Repeat("x", repo.MaxSymlinkTarget+1)} {
		err := writeEntry(root, "bad/link", []byte(target), repo.ModeSymlink)
		wantErr(t, fmt.Sprintf("a link to %.10q", target), err, "write the link bad/link")
	}
	if got := readBack(t, dir, "bad"); got != "none" {
		t.Errorf("refused links left %q", got)
	}
	if err := writeEntry(root, "long", []byte(strings.Repeat("x", 255)), repo.ModeSymlink); err != nil {
		t.Errorf("a link of a long target: %v", err)
	}

	// A submodule's directory is made once, and refused where a file stands.
	if err := writeEntry(root, "deps/sub", nil, repo.ModeGitlink); err != nil {
		t.Errorf("a submodule's directory made again: %v", err)
	}
	wantErr(t, "a submodule where a file stands", writeEntry(root, "run.sh", nil, repo.ModeGitlink), "make the submodule's directory run.sh: a file stands there")
	wantErr(t, "a submodule where a link stands", writeEntry(root, "link2", nil, repo.ModeGitlink), "make the submodule's directory link2: a symbolic link stands there")

	// No temporary file is left beside what was written.
	var left []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".ag-write-") {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("temporary files left: %q", left)
	}
}

// TestRemoveFileRemovesTheLinkNeverWhatItLeadsTo ensures a removal removes the file or the
// link itself and the directories it leaves empty, and nothing reached through a parent that
// is a link, nor a directory standing at the path.
func TestRemoveFileRemovesTheLinkNeverWhatItLeadsTo(t *testing.T) {
	t.Parallel()
	root, dir := openTestRoot(t)
	outside := t.TempDir()
	mkfile(t, outside, "victim", "precious\n")
	mkfile(t, outside, "d/x", "x\n")
	mkfile(t, dir, "a/b/c/file", "f\n")
	mkfile(t, dir, "a/keep", "k\n")
	mklink(t, dir, "a/b/l", filepath.Join(outside, "victim"))
	mklink(t, dir, "out", filepath.Join(outside, "d"))
	mkfile(t, dir, "in/real", "r\n")
	mklink(t, dir, "inlink", "in")
	if err := os.MkdirAll(filepath.Join(dir, "emptydir", "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}

	for _, p := range []string{"a/b/l", "a/b/c/file", "out/x", "inlink/real", "emptydir", "emptydir/deeper", "missing/x", "a/keep/x"} {
		if err := removeFile(root, p); err != nil {
			t.Errorf("remove %s: %v", p, err)
		}
	}
	for p, want := range map[string]string{
		"a/b": "none", "a": "dir", "a/keep": "file k\n", "out": "link " + filepath.Join(outside, "d"),
		"in/real": "file r\n", "inlink": "link in", "emptydir/deeper": "dir",
	} {
		if got := readBack(t, dir, p); !strings.HasPrefix(got, want) {
			t.Errorf("after the removals, %s is %q, want %q", p, got, want)
		}
	}
	for p, want := range map[string]string{"victim": "file precious\n", "d/x": "file x\n"} {
		if got := readBack(t, outside, p); !strings.HasPrefix(got, want) {
			t.Errorf("after the removals, %s out of the checkout is %q, want %q", p, got, want)
		}
	}

	// A submodule's directory goes only when empty, and the directories it leaves empty with it.
	for _, d := range []string{"x/y/sub", "p/q/sub"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(d)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mkfile(t, dir, "x/other", "o\n")
	mkfile(t, dir, "full/sub/theirs", "t\n")
	mklink(t, dir, "linked", "full")
	for _, p := range []string{"x/y/sub", "p/q/sub", "full/sub", "linked/sub", "x/other", "nothing"} {
		if err := removeSubmoduleDir(root, p); err != nil {
			t.Errorf("remove the submodule %s: %v", p, err)
		}
	}
	for p, want := range map[string]string{"x/y": "none", "p": "none", "x/other": "file o\n", "full/sub/theirs": "file t\n", "linked": "link full"} {
		if got := readBack(t, dir, p); !strings.HasPrefix(got, want) {
			t.Errorf("after the submodules' removal, %s is %q, want %q", p, got, want)
		}
	}
}

// TestLstatThroughDirs ensures what is at a path is answered only when every parent is a real
// directory.
func TestLstatThroughDirs(t *testing.T) {
	t.Parallel()
	root, dir := openTestRoot(t)
	mkfile(t, dir, "a/b/f", "f\n")
	mklink(t, dir, "a/l", "b")
	mklink(t, dir, "top", "a")
	for p, want := range map[string]string{
		"a": "d", "a/b": "d", "a/b/f": "-", "a/l": "L", "top": "L",
		"a/l/f": "", "top/b/f": "", "a/b/f/g": "", "x/y": "", "a/x": "",
	} {
		info, err := lstatThroughDirs(root, p)
		if err != nil {
			t.Errorf("lstatThroughDirs(%s): %v", p, err)
			continue
		}
		got := ""
		if info != nil {
			got = info.Mode().String()[:1]
		}
		if got != want {
			t.Errorf("lstatThroughDirs(%s) = %q, want %q", p, got, want)
		}
	}
}

// TestInTheWayNamesWhatAgWouldNotRemove ensures a sync or a revert is refused, naming each
// thing of the user's on the way, before anything is written: a link or a file where a
// directory goes, a special file, something left in a directory where a file goes (a nested
// .git among them), a file where a submodule's directory goes; and not for what the plan
// replaces or deletes.
func TestInTheWayNamesWhatAgWouldNotRemove(t *testing.T) {
	t.Parallel()
	root, dir := openTestRoot(t)
	mklink(t, dir, "l", t.TempDir())
	mkfile(t, dir, "f", "mine\n")
	mkfile(t, dir, "replaced", "old\n")
	mklink(t, dir, "relinked", "x")
	mkfile(t, dir, "d/deleted", "old\n")
	mklink(t, dir, "d/deleted-link", "x")
	mkfile(t, dir, "d/sub/deleted", "old\n")
	mkfile(t, dir, "e/added", "mine\n")
	mkfile(t, dir, "g/.git/config", "[core]\n")
	mkfile(t, dir, "gone/file", "old\n")
	mkfile(t, dir, "s/file", "mine\n")
	if err := os.MkdirAll(filepath.Join(dir, "emptyd", "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	writes := []string{"l/x", "f/x", "replaced", "relinked", "d", "e", "g", "gone/file/x", "emptyd", "fifo/x", "new/file", "fifo"}
	deleting := map[string]bool{"d/deleted": true, "d/deleted-link": true, "d/sub/deleted": true, "gone/file": true}
	blocked, err := inTheWay(root, writes, []string{"s/file", "subdir", "newsub"}, deleting)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(blocked)
	want := []string{
		"e/added (a file of yours, where the mainline now has the file e)",
		"f (a file of yours where the mainline now has a directory)",
		"fifo (a special file, which ag neither writes through nor replaces)",
		"g/.git (a directory no repository may hold, where the mainline now has the file g)",
		"l (a symbolic link, which ag neither writes through nor replaces)",
		"s/file (a file of yours where the mainline now has a directory)",
	}
	if !slices.Equal(blocked, want) {
		t.Errorf("inTheWay =\n%s\nwant\n%s", strings.Join(blocked, "\n"), strings.Join(want, "\n"))
	}
	// Nothing on the way: nothing named.
	if blocked, err := inTheWay(root, []string{"replaced", "d/deleted", "new/x"}, []string{"subdir"}, map[string]bool{}); err != nil || len(blocked) != 0 {
		t.Errorf("inTheWay of what may be replaced: %q, %v", blocked, err)
	}
	// A file the plan deletes is no file on the way to a directory.
	if blocked, err := inTheWay(root, []string{"f/x"}, nil, map[string]bool{"f": true}); err != nil || len(blocked) != 0 {
		t.Errorf("inTheWay of a directory where a deleted file stands: %q, %v", blocked, err)
	}
	// Everything left in a directory where a file goes is named, in every subdirectory, each
	// directory no repository may hold too.
	for _, d := range []string{"h/.git", "h/.ag", "h/s1", "h/s2"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(d)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mkfile(t, dir, "h/s1/x", "mine\n")
	mkfile(t, dir, "h/s2/y", "mine\n")
	blocked, err = inTheWay(root, []string{"h"}, nil, map[string]bool{})
	sort.Strings(blocked)
	if want := []string{
		"h/.ag (a directory no repository may hold, where the mainline now has the file h)",
		"h/.git (a directory no repository may hold, where the mainline now has the file h)",
		"h/s1/x (a file of yours, where the mainline now has the file h)",
		"h/s2/y (a file of yours, where the mainline now has the file h)",
	}; err != nil || !slices.Equal(blocked, want) {
		t.Errorf("inTheWay of a directory holding two of each where a file goes: %q, %v; want %q", blocked, err, want)
	}
	// A special file in a directory where a file goes.
	if err := unix.Mkfifo(filepath.Join(dir, "emptyd", "deeper", "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	blocked, err = inTheWay(root, []string{"emptyd"}, nil, map[string]bool{"emptyd/deeper/pipe": true})
	if err != nil || !slices.Equal(blocked, []string{"emptyd/deeper/pipe (a special file, where the mainline now has the file emptyd)"}) {
		t.Errorf("inTheWay of a FIFO in a directory where a file goes: %q, %v", blocked, err)
	}
}

// TestRepoPathRefusesWhatIsNotInTheCheckout ensures a path given on the command line is taken
// relative to the directory the command works in, refused out of the checkout, at its top or
// into .ag or .git, and a directory's keeps its '/', but not a link's to a directory: a link
// is a path of its own.
func TestRepoPathRefusesWhatIsNotInTheCheckout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	co := &Checkout{root: dir}
	mkfile(t, dir, "src/a.go", "package a\n")
	mklink(t, dir, "srclink", "src")
	for _, c := range []struct{ base, arg, want string }{
		{dir, "src/a.go", "src/a.go"},
		{dir, "src", "src/"},
		{dir, "src/", "src/"},
		{dir, "new/", "new/"},
		{dir, "new", "new"},
		{dir, "srclink", "srclink"},
		{filepath.Join(dir, "src"), "a.go", "src/a.go"},
		{filepath.Join(dir, "src"), "../srclink", "srclink"},
		{t.TempDir(), filepath.Join(dir, "src", "a.go"), "src/a.go"},
		{dir, "..x", "..x"}, // a name that starts with two dots is a file of the checkout
		{filepath.Join(dir, "src"), "..notes", "src/..notes"},
	} {
		got, err := co.repoPath(c.base, c.arg)
		if err != nil || got != c.want {
			t.Errorf("repoPath(%s, %s) = %q, %v; want %q", c.base, c.arg, got, err, c.want)
		}
	}
	for _, c := range []struct{ base, arg, want string }{
		{dir, "..", "is not inside the checkout"},
		{dir, ".", "is not inside the checkout"},
		{dir, "../x", "is not inside the checkout"},
		{filepath.Join(dir, "src"), "../..", "is not inside the checkout"},
		{dir, filepath.Join(filepath.Dir(dir), "other"), "is not inside the checkout"},
		{dir, ".ag/checkout.json", `".ag/checkout.json"`},
		{dir, "a/.git/", `"a/.git/"`},
	} {
		got, err := co.repoPath(c.base, c.arg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("repoPath(%s, %s) = %q, %v; want an error saying %q", c.base, c.arg, got, err, c.want)
		}
	}
	paths, err := co.RepoPaths(dir, []string{"src", "x/../src/a.go"})
	if err != nil || !slices.Equal(paths, []string{"src/", "src/a.go"}) {
		t.Errorf("RepoPaths = %q, %v", paths, err)
	}
	_, err = co.RepoPaths(dir, []string{"src", "../out"})
	var usage *UsageError
	if !errors.As(err, &usage) {
		t.Errorf("RepoPaths of a path out of the checkout: %v, want a usage error", err)
	}
}

// TestTheReaderFollowsNoLink ensures the checkout's reader reads a link's target and a file's
// content, and refuses to read a file through a link (at the path or on the way) or a link
// that is none, whether openat2 is there or not.
func TestTheReaderFollowsNoLink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mkfile(t, dir, "a/file", "content\n")
	mkfile(t, dir, "a/.git/config", "[core]\n")
	mklink(t, dir, "a/link", "file")
	mklink(t, dir, "a/gitconfig", ".git/config")
	mklink(t, dir, "up", "a")
	mklink(t, dir, "long", strings.Repeat("x/", 1000)+"y")
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := openCheckoutReader(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	readers := map[string]*checkoutReader{"openat2": r}
	if r.fd < 0 {
		t.Log("no openat2 here: the reader checks each parent")
		readers = map[string]*checkoutReader{"without openat2": r}
	} else {
		readers["without openat2"] = &checkoutReader{root: r.root, fd: -1}
	}
	for how, r := range readers {
		if b, err := r.readEntry("a/file", repo.ModeFile); err != nil || string(b) != "content\n" {
			t.Errorf("%s: read a/file = %q, %v", how, b, err)
		}
		if b, err := r.readEntry("a/gitconfig", repo.ModeSymlink); err != nil || string(b) != ".git/config" {
			t.Errorf("%s: read the link a/gitconfig = %q, %v", how, b, err)
		}
		if target, err := r.readLink("long"); err != nil || len(target) != 2001 {
			t.Errorf("%s: read the link long = %d bytes, %v", how, len(target), err)
		}
		for _, p := range []string{"a/link", "a/gitconfig", "up/file", "fifo", "a", "missing"} {
			if b, err := r.readFile(p); err == nil {
				t.Errorf("%s: read %s as a file = %q, want it refused", how, p, b)
			} else if !strings.Contains(err.Error(), p) {
				t.Errorf("%s: read %s: %v, want it named", how, p, err)
			}
		}
		for _, p := range []string{"a/file", "up/link", "fifo", "missing"} {
			if target, err := r.readLink(p); err == nil {
				t.Errorf("%s: read %s as a link = %q, want it refused", how, p, target)
			}
		}
		// hash takes what the scan found: a link's target, a file's bytes.
		h, err := r.hash("a/link", fileStat{mode: statSymlink | 0o777})
		if err != nil || h.digest != repo.Digest([]byte("file")) || h.size != 4 {
			t.Errorf("%s: hash of the link a/link = %+v, %v; want its target's", how, h, err)
		}
		h, err = r.hash("a/file", fileStat{mode: statRegular | 0o644})
		if err != nil || h.digest != repo.Digest([]byte("content\n")) || h.size != 8 {
			t.Errorf("%s: hash of a/file = %+v, %v", how, h, err)
		}
		if _, err := r.hash("a/link", fileStat{mode: statRegular | 0o644}); err == nil {
			t.Errorf("%s: hash of a link the scan found a file: no error", how)
		}
		if _, err := r.hash("a/file", fileStat{mode: statSymlink | 0o777}); err == nil {
			t.Errorf("%s: hash of a file the scan found a link: no error", how)
		}
	}
	if haveOpenat2() {
		// A link on the way, and a link at the path, say so.
		_, err := r.readFile("up/file")
		wantErr(t, "read through a link", err, "read up/file", "a symbolic link stands on the way or there")
		_, err = r.readLink("up/.git/config")
		wantErr(t, "read a link through a link", err, "read the link up/.git/config", "a symbolic link stands on the way")
		_, err = r.readLink("a/file")
		wantErr(t, "read a file as a link", err, "read the link a/file", "not a symbolic link")
		_, err = r.readFile("fifo")
		wantErr(t, "read a FIFO", err, "read fifo", "neither a regular file nor a symbolic link")
	}
}

// TestAFreshCheckoutWritesEachModeAndNothingThrough ensures the writer of a new checkout
// makes files of their modes, links as links (their targets checked) and the directories of
// paths, keeping at most freshWriterDirs directories open, and refuses to write where
// something stands.
func TestAFreshCheckoutWritesEachModeAndNothingThrough(t *testing.T) {
	t.Parallel()
	root, dir := openTestRoot(t)
	tree := map[string]treeFile{
		"top.txt": {Mode: repo.ModeFile}, "bin/run": {Mode: repo.ModeExecutable},
		"bin/link": {Mode: repo.ModeSymlink}, "a/b/c/deep.txt": {Mode: repo.ModeFile},
		"bad/empty": {Mode: repo.ModeSymlink}, "bad/nul": {Mode: repo.ModeSymlink},
	}
	const many = freshWriterDirs + 6
	for i := range many {
		tree[fmt.Sprintf("d%03d/f", i)] = treeFile{Mode: repo.ModeFile}
	}
	w := &freshWriter{root: root, tree: tree, made: map[string]bool{}, dirs: map[string]*openDir{}, written: map[string]fileStat{}}
	defer w.close()
	for _, c := range []struct{ path, content string }{
		{"top.txt", "top\n"}, {"bin/run", "#!/bin/sh\n"}, {"bin/link", "../top.txt"}, {"a/b/c/deep.txt", "deep\n"},
	} {
		if err := w.write(c.path, []byte(c.content)); err != nil {
			t.Fatalf("write %s: %v", c.path, err)
		}
	}
	for i := range many {
		p := fmt.Sprintf("d%03d/f", i)
		if err := w.writeFrom(p, nil, func(out io.Writer) error { _, err := out.Write([]byte(p)); return err }); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
	// The first directories were closed as the later ones opened: writing there again opens
	// them again.
	if len(w.dirs) > freshWriterDirs || len(w.order) != len(w.dirs) {
		t.Errorf("%d directories open, %d in order; want at most %d", len(w.dirs), len(w.order), freshWriterDirs)
	}
	plain, exec := umaskedPerm(t, 0o644), umaskedPerm(t, 0o755)
	for p, want := range map[string]string{
		"top.txt": fmt.Sprintf("file top\n %o", plain), "bin/run": fmt.Sprintf("file #!/bin/sh\n %o", exec),
		"bin/link": "link ../top.txt", "a/b/c/deep.txt": fmt.Sprintf("file deep\n %o", plain),
		"d000/f": fmt.Sprintf("file d000/f %o", plain), fmt.Sprintf("d%03d/f", many-1): fmt.Sprintf("file d%03d/f %o", many-1, plain),
	} {
		if got := readBack(t, dir, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	// Each file written has its stat recorded, as the index takes it.
	if len(w.written) != 4+many {
		t.Errorf("%d stats recorded, want %d", len(w.written), 4+many)
	}
	for p, st := range w.written {
		info, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		if now := statOfInfo(info); now != st {
			t.Errorf("%s: recorded stat %+v, the file has %+v", p, st, now)
		}
	}
	if gitModeOfStat(w.written["bin/run"].mode) != repo.ModeExecutable || gitModeOfStat(w.written["bin/link"].mode) != repo.ModeSymlink {
		t.Errorf("recorded modes: run %o, link %o", w.written["bin/run"].mode, w.written["bin/link"].mode)
	}
	// A link's target is checked; nothing is written where something stands, nor through it.
	wantErr(t, "a link to nothing", w.write("bad/empty", nil), "write the link bad/empty", "empty")
	wantErr(t, "a link to NUL", w.write("bad/nul", []byte("a\x00")), "write the link bad/nul", "NUL")
	wantErr(t, "a file written twice", w.write("top.txt", []byte("again")), "write top.txt")
	wantErr(t, "a link written twice", w.write("bin/link", []byte("again")), "write the link bin/link")
	if got := readBack(t, dir, "top.txt"); got != fmt.Sprintf("file top\n %o", plain) {
		t.Errorf("top.txt after a second write: %q", got)
	}
	wantErr(t, "a file under a file", w.write("top.txt/x", []byte("x")), "write top.txt/x")
	// Closing the writer closes the directories it opened, not the checkout's root, which the
	// checkout's state is written through next.
	w.close()
	if _, err := root.Stat("."); err != nil {
		t.Errorf("the checkout's root after the writer closed: %v", err)
	}
}

// TestFoldedPairsNamesEverySpellingOfOneName ensures the names a folding file system would
// take for one are found, files and directories, and that the checkout refuses them only
// where the file system folds.
func TestFoldedPairsNamesEverySpellingOfOneName(t *testing.T) {
	t.Parallel()
	pairs := foldedPairs([]string{"README.md", "Readme.md", "docs/a", "Docs/b", "x/café.txt", "x/cafe\u0301.txt", "same", "other/deep/f", "OTHER/deep/g", "z"})
	// Each directory of the two spellings is a pair, the ones under them too.
	want := [][2]string{{"Docs/", "docs/"}, {"OTHER/", "other/"}, {"OTHER/deep/", "other/deep/"}, {"README.md", "Readme.md"}, {"x/café.txt", "x/cafe\u0301.txt"}}
	for i := range want {
		if want[i][0] > want[i][1] {
			want[i][0], want[i][1] = want[i][1], want[i][0]
		}
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i][0] < pairs[j][0] })
	sort.Slice(want, func(i, j int) bool { return want[i][0] < want[j][0] })
	if fmt.Sprint(pairs) != fmt.Sprint(want) {
		t.Errorf("foldedPairs = %q, want %q", pairs, want)
	}
	if pairs := foldedPairs([]string{"a/b", "a/c", "a", "b/a/b"}); len(pairs) != 0 {
		t.Errorf("foldedPairs of names apart = %q", pairs)
	}
	if got := nextSlash("a/b/c", 1); got != 3 {
		t.Errorf("nextSlash(a/b/c, 1) = %d", got)
	}
	if got := nextSlash("a/b", 1); got != -1 {
		t.Errorf("nextSlash(a/b, 1) = %d", got)
	}

	// This machine's file system keeps names apart, and the probe leaves nothing behind.
	root, dir := openTestRoot(t)
	how, err := foldsNames(root)
	if err != nil {
		t.Fatal(err)
	}
	if how != "" {
		t.Skipf("the test machine's file system folds %s", how)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the probe left %d files", len(entries))
	}
	files := map[string]treeFile{"README.md": {}, "Readme.md": {}}
	if err := refuseFoldedNames(root, files); err != nil {
		t.Errorf("refuseFoldedNames where names stay apart: %v", err)
	}
}

// TestFoldedNamesAreRefusedNamingBoth is TestFoldedPairsNamesEverySpellingOfOneName on a file
// system that folds; it is not parallel, as PretendNamesFold says.
func TestFoldedNamesAreRefusedNamingBoth(t *testing.T) {
	restore := PretendNamesFold("case")
	defer restore()
	root, _ := openTestRoot(t)
	err := refuseFoldedNames(root, map[string]treeFile{"README.md": {}, "Readme.md": {}, "x/café.txt": {}, "x/cafe\u0301.txt": {}, "other": {}})
	wantErr(t, "names that fold", err, "this file system folds case in names",
		"the tree holds 2 pairs of names", `"README.md" and "Readme.md"`, `"x/cafe\u0301.txt" and "x/caf\u00e9.txt"`, "check out on a file system that keeps them apart")
	if err := refuseFoldedNames(root, map[string]treeFile{"a": {}, "b": {}}); err != nil {
		t.Errorf("names apart on a folding file system: %v", err)
	}
}

// reCRC answers an index's encoding changed by change, its CRC-32C made whole again: what a
// damaged or hand-made index whose checksum still holds looks like.
func reCRC(encoded []byte, change func(b []byte) []byte) []byte {
	b := change(slices.Clone(encoded[:len(encoded)-4]))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// TestAnIndexIsReadOnlyWhole ensures an index whose checksum holds but whose records do not
// fit together is refused as damaged, each rule alone: ag writes and removes files by its
// paths, so a record must not give a path of no bytes, one past the names, one that overlaps
// another or leaves bytes over, a flag no ag writes, two modes at once, or a mode for a file
// that is not in the base; nor may the count promise more records than there are, nor a file
// shorter than the header pass. An index of no files is whole.
func TestAnIndexIsReadOnlyWhole(t *testing.T) {
	t.Parallel()
	const head = len(indexMagic) + 36
	entry := func(p string, inBase bool, mode string) indexEntry {
		e := indexEntry{path: p, inBase: inBase, hashed: true, stat: fileStat{size: 1, mtime: 2, ctime: 3, ino: 4, mode: 0o100644}}
		e.local = sha256Sum{1}
		if inBase {
			e.base, e.baseMode = sha256Sum{2}, mode
		}
		return e
	}
	two := (&index{stamp: 5, entries: []indexEntry{entry("ab", true, repo.ModeFile), entry("cd", false, "")}}).encode()
	// Paths of more bytes than a record less the header: the count must be checked against
	// what follows the header, not against more.
	long := (&index{entries: []indexEntry{entry(strings.Repeat("a", 40), true, repo.ModeFile), entry(strings.Repeat("b", 40), false, "")}}).encode()
	one := (&index{stamp: 5, entries: []indexEntry{entry("a", true, repo.ModeFile)}}).encode()
	u32 := binary.LittleEndian.PutUint32
	rec := func(i, field int) int { return head + i*indexRecord + field } // field: 0 offset, 4 length, 8 flags
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"a count of one record more", reCRC(two, func(b []byte) []byte { u32(b[len(indexMagic)+8:], 3); return b })},
		{"a path that starts past the one before", reCRC(two, func(b []byte) []byte { u32(b[rec(1, 0):], 3); return b })},
		{"a path that starts before its place", reCRC(two, func(b []byte) []byte { u32(b[rec(1, 0):], 1); return b })},
		{"a path of no bytes", reCRC(one, func(b []byte) []byte { u32(b[rec(0, 4):], 0); return b[:len(b)-1] })},
		{"a path past the names", reCRC(two, func(b []byte) []byte { u32(b[rec(1, 4):], 3); return b })},
		{"a path of the first past the names", reCRC(one, func(b []byte) []byte { u32(b[rec(0, 4):], 2); return b })},
		{"names left over", reCRC(one, func(b []byte) []byte { return append(b, 'x') })},
		{"a flag no ag writes", reCRC(two, func(b []byte) []byte { u32(b[rec(0, 8):], entryInBase|entryHashed|1<<5); return b })},
		{"two modes at once", reCRC(two, func(b []byte) []byte {
			u32(b[rec(0, 8):], entryInBase|entryHashed|entryBaseExecutable|entryBaseSymlink)
			return b
		})},
		{"a mode out of the base", reCRC(two, func(b []byte) []byte { u32(b[rec(1, 8):], entryHashed|entryBaseExecutable); return b })},
		{"a link out of the base", reCRC(two, func(b []byte) []byte { u32(b[rec(1, 8):], entryBaseSymlink); return b })},
		{"a path twice", reCRC(two, func(b []byte) []byte { copy(b[len(b)-2:], "ab"); return b })},
		{"a count of one record more, the paths long", reCRC(long, func(b []byte) []byte { u32(b[len(indexMagic)+8:], 3); return b })},
		{"a header cut short", reCRC(two, func(b []byte) []byte { u32(b[len(indexMagic)+8:], 0); return b[:head-1] })},
		{"a header cut shorter", reCRC(two, func(b []byte) []byte { u32(b[len(indexMagic)+8:], 0); return b[:head-4] })},
		{"the magic alone", []byte(indexMagic)},
		{"a checksum that does not hold", func() []byte { b := slices.Clone(two); b[len(b)-1] ^= 1; return b }()},
	} {
		if x, err := decodeIndex(c.data); !errors.Is(err, errIndexDamaged) {
			t.Errorf("%s: decoded %+v, %v; want it refused as damaged", c.name, x, err)
		}
	}
	for name, x := range map[string]*index{
		"no files":    {stamp: 7},
		"a link":      {entries: []indexEntry{entry("l", true, repo.ModeSymlink)}},
		"a submodule": {entries: []indexEntry{entry("a", false, ""), entry("s", true, repo.ModeGitlink), entry("x", true, repo.ModeExecutable)}},
	} {
		got, err := decodeIndex(x.encode())
		if err != nil || got.stamp != x.stamp || !slices.Equal(got.entries, x.entries) {
			t.Errorf("an index of %s read back %+v, %v; want %+v", name, got, err, x)
		}
	}
}

// TestParseSumTakesOnlyAWholeDigest ensures a digest is "sha256:" and 64 hex digits, nothing
// shorter, longer or without its prefix.
func TestParseSumTakesOnlyAWholeDigest(t *testing.T) {
	t.Parallel()
	hex64 := strings.Repeat("0f", 32)
	if d, ok := parseSum("sha256:" + hex64); !ok || d.String() != "sha256:"+hex64 {
		t.Errorf("parseSum of a digest = %v, %v", d, ok)
	}
	for _, s := range []string{hex64, "sha256:" + hex64[:62], "sha256:" + hex64 + "00", "sha256:" + hex64[:63] + "g", "sha512:" + hex64, ""} {
		if d, ok := parseSum(s); ok {
			t.Errorf("parseSum(%q) = %v, want it refused", s, d)
		}
	}
}

// TestTheIndexTrustsOnlyStatsOlderThanItsWindow ensures an entry is trusted only when its
// stat is the one found and its mtime at least the window older than the scan that recorded
// it: a file written within the window may have been written again since, the mtime unmoved.
func TestTheIndexTrustsOnlyStatsOlderThanItsWindow(t *testing.T) {
	t.Parallel()
	x := &index{stamp: 10_000_000_000, window: fineRacyWindow}
	edge := x.stamp - fineRacyWindow.Nanoseconds()
	for _, c := range []struct {
		mtime  int64
		hashed bool
		same   bool
		want   bool
	}{
		{edge - 1, true, true, true},
		{edge, true, true, false},
		{edge + 1, true, true, false},
		{edge - 1, false, true, false},
		{edge - 1, true, false, false},
	} {
		e := &indexEntry{hashed: c.hashed, stat: fileStat{size: 3, mtime: c.mtime}, local: sha256Sum{9}}
		now := e.stat
		if !c.same {
			now.ino++
		}
		sum, ok := x.trusted(e, now)
		if ok != c.want || ok && sum != e.local {
			t.Errorf("trusted(mtime %d, window edge %d, hashed %v, same stat %v) = %v, want %v", c.mtime, edge, c.hashed, c.same, ok, c.want)
		}
	}
}

// TestProgressCounts ensures the progress line shows a total of bytes only when there is one,
// and bytes in binary units from 1 KiB on.
func TestProgressCounts(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 1024*1024 - 1: "1024.0 KiB", 1024 * 1024: "1.0 MiB", 5 << 30: "5.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
	var buf strings.Builder
	p := &Progress{w: &buf, verb: "fetched", totalFiles: 2}
	p.Add(1, 10)
	p.Done()
	if got := buf.String(); !strings.Contains(got, "fetched 1/2 files, 10 B\x1b[K") || strings.Contains(got, "/0 B") {
		t.Errorf("a progress line without a total of bytes: %q", got)
	}
}

// TestTheIndexIsNamedAndReadAsAgWroteIt ensures checkout.json may name as its index only a
// name ag gives one ("index-" and up to 64 of A-Z and 0-9), that a file that merely begins
// as an old index's version byte is damaged rather than old, and that an index file's own
// mtime sets the racy window: whole seconds (a file system that stamps no finer) the wide one.
func TestTheIndexIsNamedAndReadAsAgWroteIt(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"index-A": true, "index-Z": true, "index-0": true, "index-9": true, "index-" + strings.Repeat("Q", 64): true,
		"index-" + strings.Repeat("Q", 65): false, "index-": false, "index-a": false, "index-@": false, "index-[": false,
		"index-/": false, "index-:": false, "index-A/../x": false, "Index-A": false, "x-index-A": false,
	} {
		if got := validIndexName(name); got != want {
			t.Errorf("validIndexName(%q) = %v, want %v", name, got, want)
		}
	}
	for _, data := range [][]byte{{2, 0, 0}, {3}, []byte(indexMagicPrefix), []byte("ag-index\x01\x02"), []byte("xg-index\x00\x03")} {
		if _, err := decodeIndex(data); !errors.Is(err, errIndexDamaged) {
			t.Errorf("decodeIndex(%q) = %v, want it refused as damaged", data, err)
		}
	}

	root, dir := openTestRoot(t)
	if err := os.Mkdir(filepath.Join(dir, StateDir), 0o755); err != nil {
		t.Fatal(err)
	}
	stamp := time.Now().Add(time.Hour).UnixNano()
	if err := saveIndex(root, "index-A", &index{stamp: stamp}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mtime  time.Time
		window time.Duration
	}{
		{time.Unix(1_700_000_000, 0), racyWindow},
		{time.Unix(1_700_000_000, 5_000_000), fineRacyWindow},
	} {
		if err := os.Chtimes(filepath.Join(dir, StateDir, "index-A"), c.mtime, c.mtime); err != nil {
			t.Fatal(err)
		}
		x, err := readIndex(root, "index-A")
		if err != nil {
			t.Fatal(err)
		}
		if x.window != c.window || x.stamp != c.mtime.UnixNano() {
			t.Errorf("an index of mtime %v: window %v, stamp %d; want %v and the mtime, earlier than its own stamp", c.mtime, x.window, x.stamp, c.window)
		}
	}
	mklink(t, dir, StateDir+"/index-B", "index-A")
	_, err := readIndex(root, "index-B")
	wantErr(t, "an index that is a link", err, ".ag/index-B is not a regular file")
}

// TestOnlyStaleIndexesAreRemoved ensures the clean-up after a new base removes only index
// files checkout.json does not name and that are old (a crash's leftovers, or earlier bases'),
// and the stat cache from before the index: never checkout.json, the index it names, another
// ag's young index, nor anything else under .ag.
func TestOnlyStaleIndexesAreRemoved(t *testing.T) {
	t.Parallel()
	root, dir := openTestRoot(t)
	old := time.Now().Add(-time.Hour)
	for _, name := range []string{"checkout.json", "index-KEEP", "index-OLD", "index-YOUNG", "stat", "tasks.json", "other"} {
		mkfile(t, dir, StateDir+"/"+name, name)
		if name != "index-YOUNG" {
			if err := os.Chtimes(filepath.Join(dir, StateDir, name), old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	removeStaleIndexes(root, "index-KEEP")
	entries, err := os.ReadDir(filepath.Join(dir, StateDir))
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{"checkout.json", "index-KEEP", "index-YOUNG", "other", "tasks.json"}; !slices.Equal(left, want) {
		t.Errorf("after the clean-up .ag holds %q, want %q", left, want)
	}
}

// TestMerge3KeepsEveryChange ensures a three-way merge loses no line either side added,
// changed or removed, at the start, in the middle and at the end, and marks what both changed
// differently, an empty base among them.
func TestMerge3KeepsEveryChange(t *testing.T) {
	t.Parallel()
	base := "a\nb\nc\n"
	for _, c := range []struct {
		name, base, ours, theirs, want string
		conflicts                      int
	}{
		{"ours appends", base, base + "x\n", base, base + "x\n", 0},
		{"theirs appends", base, base, base + "y\n", base + "y\n", 0},
		{"ours prepends, theirs appends", base, "x\n" + base, base + "y\n", "x\n" + base + "y\n", 0},
		{"ours deletes the end", base, "a\nb\n", base, "a\nb\n", 0},
		{"theirs deletes the end, ours changes the start", base, "A\nb\nc\n", "a\nb\n", "A\nb\n", 0},
		{"ours empties it", base, "", base, "", 0},
		{"theirs deletes the second line", base, base, "a\nc\n", "a\nc\n", 0},
		{"ours deletes the second line", base, "a\nc\n", base, "a\nc\n", 0},
		{"ours deletes the first, theirs appends", "x\na\n", "a\n", "x\na\nz\n", "a\nz\n", 0},
		{"theirs deletes the first, ours appends", "x\na\n", "x\na\nz\n", "a\n", "a\nz\n", 0},
		{"both add to nothing, alike", "", "x\n", "x\n", "x\n", 0},
		{"both add to nothing, apart", "", "x\n", "y\n", "<<<<<<< ours\nx\n||||||| base\n=======\ny\n>>>>>>> theirs\n", 1},
		{"two conflicts", "a\nb\nc\nd\ne\n", "A\nb\nc\nd\nE\n", "1\nb\nc\nd\n5\n",
			"<<<<<<< ours\nA\n||||||| base\na\n=======\n1\n>>>>>>> theirs\nb\nc\nd\n<<<<<<< ours\nE\n||||||| base\ne\n=======\n5\n>>>>>>> theirs\n", 2},
	} {
		got, n := merge3([]byte(c.base), []byte(c.ours), []byte(c.theirs))
		if string(got) != c.want || n != c.conflicts {
			t.Errorf("%s: merge3 =\n%s(%d conflicts)\nwant:\n%s(%d conflicts)", c.name, got, n, c.want, c.conflicts)
		}
	}
}

// TestMergeTellsApartEveryLineOfALongFile ensures the line diff under a merge tells every two
// lines apart in a file of more distinct lines than there are runes below the surrogates: each
// line is one rune to the diff, and two lines whose runes print alike (a surrogate half, or
// none, prints as U+FFFD) would be taken for one, losing the edit.
func TestMergeTellsApartEveryLineOfALongFile(t *testing.T) {
	t.Parallel()
	const n = 63_500
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf("line %d\n", i)
	}
	base := strings.Join(lines, "")
	// Line at is replaced by a copy of line from: the diff's rune of each is the line's number
	// plus 1, past the surrogates 0x800 more.
	for _, c := range []struct{ at, from int }{{0, 0xFFFD - 0x800 + 1}, {0xD800 - 1, 0xD800}, {0xD800 - 1, 0xFFFD - 0x800 - 1}} {
		edited := slices.Clone(lines)
		edited[c.at] = lines[c.from]
		ours := strings.Join(edited, "")
		got, conflicts := merge3([]byte(base), []byte(ours), []byte(base))
		if string(got) != ours || conflicts != 0 {
			t.Errorf("line %d made a copy of line %d on one side: the merge lost it (%d conflicts)", c.at, c.from, conflicts)
		}
	}
}

// TestIsBinaryLooksAtTheFirst8000Bytes ensures a NUL byte makes a file binary anywhere in its
// first 8000 bytes, the first among them, as git decides.
func TestIsBinaryLooksAtTheFirst8000Bytes(t *testing.T) {
	t.Parallel()
	for at, want := range map[int]bool{0: true, 1: true, 7999: true, 8000: false} {
		b := bytes.Repeat([]byte("x"), 9000)
		b[at] = 0
		if got := isBinary(b); got != want {
			t.Errorf("isBinary of a NUL at %d = %v, want %v", at, got, want)
		}
	}
	if isBinary(nil) || isBinary([]byte("text\n")) {
		t.Error("isBinary of text")
	}
}

// TestConflictMarkersAreAnOpeningAndAClosingLine ensures a file holds conflict markers only
// with both a line that opens one and a line that closes one.
func TestConflictMarkersAreAnOpeningAndAClosingLine(t *testing.T) {
	t.Parallel()
	for content, want := range map[string]bool{
		markerOurs + "\nx\n" + markerSep + "\ny\n" + markerTheirs + "\n": true,
		"a\n" + markerOurs + "\nx\n" + markerTheirs + "\nb\n":            true,
		markerOurs + "\nx\n":                           false,
		"x\n" + markerTheirs + "\n":                    false,
		"a " + markerOurs + "\n" + markerTheirs + "\n": false,
		"": false,
	} {
		if got := hasConflictMarkers([]byte(content)); got != want {
			t.Errorf("hasConflictMarkers(%q) = %v, want %v", content, got, want)
		}
	}
}

// TestUnifiedDiffCutsHunksAsDiffU ensures ag's unified diff joins two changes into one hunk
// when at most twice the context lies between them, and cuts it otherwise, as `diff -u` does;
// and that a binary file on either side is said to differ, not diffed.
func TestUnifiedDiffCutsHunksAsDiffU(t *testing.T) {
	t.Parallel()
	for _, side := range [][2]string{{"a\x00b\n", "text\n"}, {"text\n", "a\x00b\n"}} {
		want := "--- a/f\n+++ b/f\nBinary files a/f and b/f differ\n"
		if got := unifiedDiff("a/f", "b/f", []byte(side[0]), []byte(side[1])); got != want {
			t.Errorf("unifiedDiff(%q, %q) = %q, want %q", side[0], side[1], got, want)
		}
	}
	if _, err := exec.LookPath("diff"); err != nil {
		t.Skip("no diff(1) to compare with")
	}
	for gap := 5; gap <= 8; gap++ {
		var a, b []string
		for i := range gap + 8 {
			a = append(a, fmt.Sprintf("line %d\n", i))
		}
		b = slices.Clone(a)
		b[3] = "changed\n"
		b[4+gap] = "changed too\n"
		dir := t.TempDir()
		pa, pb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		if err := os.WriteFile(pa, []byte(strings.Join(a, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pb, []byte(strings.Join(b, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		out, _ := exec.Command("diff", "-u", "--label", "a/f", "--label", "b/f", pa, pb).Output()
		if got := unifiedDiff("a/f", "b/f", []byte(strings.Join(a, "")), []byte(strings.Join(b, ""))); got != string(out) {
			t.Errorf("two changes %d lines apart: unifiedDiff\n%s\ndiff -u:\n%s", gap, got, out)
		}
	}
}

// TestUnderAnyTakesADirectoryOnlyWithItsSlash ensures a selection (--ours, --theirs, revert's
// paths) takes a file by its path alone, and what is under a directory only when the
// selection names it with its '/': "a" is not "ab", nor the directory "a/".
func TestUnderAnyTakesADirectoryOnlyWithItsSlash(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p    string
		sel  []string
		want bool
	}{
		{"a", []string{"a"}, true},
		{"a/b", []string{"x", "a/"}, true},
		{"a/b/c", []string{"a/"}, true},
		{"ab", []string{"a"}, false},
		{"ab", []string{"a/"}, false},
		{"a/b", []string{"a"}, false},
		{"x", []string{"a/"}, false},
		{"a", nil, false},
	} {
		if got := UnderAny(c.p, c.sel); got != c.want {
			t.Errorf("UnderAny(%q, %q) = %v, want %v", c.p, c.sel, got, c.want)
		}
	}
	edits := []Edit{{Path: "a"}, {Path: "ab"}, {Path: "d/x"}, {Path: "dx"}}
	if got := EditsUnder(edits, []string{"a", "d/"}); len(got) != 2 || got[0].Path != "a" || got[1].Path != "d/x" {
		t.Errorf("EditsUnder = %v, want a and d/x", got)
	}
}

// TestTheReaderClosesWhatItOpened ensures a reader of a checkout lets go of the descriptors it
// holds when closed: the MCP server opens one for every status and integrate.
func TestTheReaderClosesWhatItOpened(t *testing.T) {
	t.Parallel()
	r, err := openCheckoutReader(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir, root := r.dir, r.root
	r.close()
	if dir != nil && dir.Fd() != ^uintptr(0) {
		t.Error("the reader's directory is still open after close")
	}
	if _, err := root.Stat("."); err == nil {
		t.Error("the reader's root is still open after close")
	}
}

// TestPlanSyncKeepsAResolvedEditAndTakesTheirsWhenAsked ensures a sync leaves alone a file the
// user resolved after a sync --merge when the mainline did not change it again and --ours was
// not asked for (bringing back the content from before the merge would undo the resolution),
// and that --theirs drops a local edit of a file the mainline did not change.
func TestPlanSyncKeepsAResolvedEditAndTakesTheirsWhenAsked(t *testing.T) {
	t.Parallel()
	f := treeFile{digest: "sha256:x", Mode: repo.ModeFile}
	files := map[string]treeFile{"f": f}
	edit := []Edit{{Path: "f", Kind: "modified", digest: "sha256:resolved", Mode: repo.ModeFile}}
	records := map[string]conflictRecord{"f": {Ours: "sha256:before"}}
	p := planSync(files, files, edit, records, SyncOptions{Ours: []string{"other"}})
	if len(p.writes) != 0 || len(p.kept) != 0 || len(p.keptEdits) != 0 {
		t.Errorf("a resolved file the mainline left alone: writes %q, restored %v, kept %q; want it left as the user made it", p.writes, p.kept, p.keptEdits)
	}
	p = planSync(files, files, edit, nil, SyncOptions{Theirs: []string{"f"}})
	if !slices.Equal(p.writes, []string{"f"}) || !slices.Equal(p.updated, []string{"f"}) || p.modes["f"] != repo.ModeFile {
		t.Errorf("--theirs on a local edit the mainline did not change: writes %q, updated %q; want f taken from the revision", p.writes, p.updated)
	}
	p = planSync(files, files, nil, nil, SyncOptions{Theirs: []string{"f"}})
	if len(p.writes) != 0 || len(p.updated) != 0 {
		t.Errorf("--theirs on a file nobody changed: writes %q, updated %q; want nothing", p.writes, p.updated)
	}
}

// TestTaskStateKeepsEachHoldersCursorAndRefusesLongIDs ensures the inbox cursors of two
// holders of one repository are kept apart, and that a task claim whose ID is over 64 bytes is
// refused as one no ag wrote.
func TestTaskStateKeepsEachHoldersCursorAndRefusesLongIDs(t *testing.T) {
	t.Parallel()
	var s TaskState
	s.SetInboxSeq("app", "alice", 3)
	s.SetInboxSeq("app", "bob", 5)
	s.SetInboxSeq("lib", "alice", 7)
	s.SetInboxSeq("app", "alice", 4)
	for _, c := range []struct {
		repo, holder string
		want         uint64
	}{{"app", "alice", 4}, {"app", "bob", 5}, {"lib", "alice", 7}, {"lib", "bob", 0}} {
		if got := s.InboxSeq(c.repo, c.holder); got != c.want {
			t.Errorf("InboxSeq(%s, %s) = %d, want %d", c.repo, c.holder, got, c.want)
		}
	}
	for id, ok := range map[string]bool{"tsk_" + strings.Repeat("a", 60): true, "tsk_" + strings.Repeat("a", 61): false, "task_1": false} {
		s := TaskState{Claims: []TaskClaim{{TaskID: id, Number: 1}}}
		if err := s.check(); (err == nil) != ok {
			t.Errorf("a claim of task %q: %v, want accepted %v", id, err, ok)
		}
	}
}

// TestTheWalkStatsEachLinkAsALink ensures the scan's walk records each file and link with its
// own stat, taken without following it: a link with a file's stat would be read as a file.
func TestTheWalkStatsEachLinkAsALink(t *testing.T) {
	t.Parallel()
	root, dir := openTestRoot(t)
	mkfile(t, dir, "a", "a\n")
	mklink(t, dir, "l1", "a")
	mkfile(t, dir, "b", "bb\n")
	mklink(t, dir, "l2", "/etc/passwd")
	mkfile(t, dir, "d/c", "ccc\n")
	mklink(t, dir, "d/l3", "c")
	parts, err := statWalk(dir, root)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]fileStat{}
	for _, part := range parts {
		for i := range part.len() {
			found[string(part.path(i))] = part.stats[i]
		}
	}
	if len(found) != 6 {
		t.Errorf("the walk found %d paths, want 6: %v", len(found), found)
	}
	for p, st := range found {
		info, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		if want := statOfInfo(info); st != want {
			t.Errorf("%s: the walk recorded %+v, lstat says %+v", p, st, want)
		}
	}
}

// TestAWalkThatCannotReadADirectoryFails ensures a scan that cannot read a directory of the
// checkout fails rather than answer without its files, which would pass for their deletion.
func TestAWalkThatCannotReadADirectoryFails(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("root reads a directory whatever its mode")
	}
	root, dir := openTestRoot(t)
	mkfile(t, dir, "locked/secret", "x\n")
	mkfile(t, dir, "open/file", "y\n")
	if err := os.Chmod(filepath.Join(dir, "locked"), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(dir, "locked"), 0o755) })
	if parts, err := statWalk(dir, root); err == nil {
		t.Errorf("a walk of a checkout with a directory it cannot read: %d parts, no error", len(parts))
	}
}

// TestWatcherWatchesADirectoryMadeSinceItStarted ensures the watcher watches a directory made
// while it runs, so that a file written in it after the scan that found the directory is still
// an edit the next scan finds through the watcher.
func TestWatcherWatchesADirectoryMadeSinceItStarted(t *testing.T) {
	if !WatchSupported {
		t.Skip("ag watch is Linux's only")
	}
	t.Parallel()
	co := statTestCheckout(t, map[string]string{"a.txt": "a\n"})
	stop, log := startTestWatch(t, co.root)
	defer stop()
	for i := range 2 {
		if edits, _ := watchedEditsOf(t, co); len(edits) != 0 {
			t.Fatalf("scan %d: edits %q, want none", i, edits)
		}
	}
	// The directory, and an edit beside it: the scan that finds them records the watcher's
	// token of after the directory was made, so the next asks only what changed since.
	if err := os.Mkdir(filepath.Join(co.root, "fresh"), 0o755); err != nil {
		t.Fatal(err)
	}
	mkfile(t, co.root, "a.txt", "edited\n")
	if edits, watched := watchedEditsOf(t, co); !slices.Equal(edits, []string{"modified a.txt"}) || !watched {
		t.Fatalf("after a new directory: edits %q (watched %v), want a.txt's through the watcher\n%s", edits, watched, log)
	}
	mkfile(t, co.root, "fresh/f.txt", "f\n")
	if edits, watched := watchedEditsOf(t, co); !slices.Equal(edits, []string{"modified a.txt", "added fresh/f.txt"}) || !watched {
		t.Errorf("a file in a directory made since the watcher started: edits %q (watched %v), want it added through the watcher\n%s", edits, watched, log)
	}
}

// TestAWatcherSocketPathTooLongIsRefusedSayingSo ensures `ag watch` in a checkout whose socket
// path is over the 107 bytes a Unix socket's path holds says so, from 108 bytes on.
func TestAWatcherSocketPathTooLongIsRefusedSayingSo(t *testing.T) {
	t.Parallel()
	base := socketTempDir(t)
	pad := 108 - len(filepath.Join(base, "x", WatchSocket))
	if pad < 0 {
		t.Fatalf("the temporary directory %s is too long a path already: set TMPDIR to a shorter one", base)
	}
	root := filepath.Join(base, strings.Repeat("x", pad+1))
	if err := os.MkdirAll(filepath.Join(root, StateDir), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := listenWatch(root)
	if err == nil {
		l.Close()
	}
	wantErr(t, "a socket path of 108 bytes", err, "too long a path for a socket")
	if _, ok := AskWatcher(root, WatchToken{}); ok {
		t.Error("AskWatcher answered for a socket path of 108 bytes")
	}
}

// TestScanTreeReadsRegularFilesOnly ensures a scan of a directory tree (an import) takes its
// regular files, lists a link as skipped rather than read through it, and refuses a name ag
// refuses at any depth, an empty directory's too.
func TestScanTreeReadsRegularFilesOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mkfile(t, dir, "a.txt", "a\n")
	mkfile(t, dir, "d/b.txt", "b\n")
	mklink(t, dir, "d/link", "b.txt")
	files, skipped, err := ScanTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files["d/b.txt"].digest != repo.Digest([]byte("b\n")) || !slices.Equal(skipped, []string{"d/link"}) {
		t.Errorf("ScanTree = %v, skipped %q; want a.txt and d/b.txt, d/link skipped", files, skipped)
	}
	if err := os.MkdirAll(filepath.Join(dir, "d", "bad\x01name"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, _, err = ScanTree(dir)
	wantErr(t, "an empty directory of a name ag refuses", err, `"d/bad\x01name/"`)
}

// TestAWatchedScanFindsALinkInANewDirectory ensures a scan through the watcher finds a link
// made in a directory made since the last scan, as a link, and nothing else of what is there.
func TestAWatchedScanFindsALinkInANewDirectory(t *testing.T) {
	if !WatchSupported {
		t.Skip("ag watch is Linux's only")
	}
	t.Parallel()
	co := statTestCheckout(t, map[string]string{"a.txt": "a\n"})
	stop, log := startTestWatch(t, co.root)
	defer stop()
	scanned := func() ([]Edit, bool) {
		t.Helper()
		fresh, err := Find(co.root)
		if err != nil {
			t.Fatal(err)
		}
		s, err := fresh.scan()
		if err != nil {
			t.Fatal(err)
		}
		edits, err := s.edits(fresh)
		if err != nil {
			t.Fatal(err)
		}
		return edits, s.watched
	}
	scanned()
	if edits, watched := scanned(); len(edits) != 0 || !watched {
		t.Fatalf("second scan: %v (watched %v), want none through the watcher", edits, watched)
	}
	mkfile(t, co.root, "new/f.txt", "f\n")
	mklink(t, co.root, "new/l", "f.txt")
	if err := unix.Mkfifo(filepath.Join(co.root, "new", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	edits, watched := scanned()
	var got []string
	for _, e := range edits {
		got = append(got, e.Kind+" "+e.Path+" "+e.Mode)
	}
	if want := []string{"added new/f.txt " + repo.ModeFile, "added new/l " + repo.ModeSymlink}; !slices.Equal(got, want) || !watched {
		t.Errorf("a file, a link and a FIFO in a new directory: %q (watched %v), want %q through the watcher\n%s", got, watched, want, log)
	}
}

// TestNothingInASubmoduleIsAnEdit ensures what stands in a submodule's directory is another
// repository's, never an edit of the checkout: ag neither reads nor sends it. A file beside it
// is the checkout's, in another directory or named with the submodule's name as its start.
func TestNothingInASubmoduleIsAnEdit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mkfile(t, dir, "a.txt", "a\n")
	mkfile(t, dir, "deps/sub/README", "theirs\n")
	mkfile(t, dir, "deps/sub/src/x.go", "package x\n")
	mkfile(t, dir, "deps/subway.txt", "ours\n")
	mkfile(t, dir, "src/new.go", "package src\n")
	co := &Checkout{Repository: "app", root: dir}
	co.SetBase("rev_1", map[string]treeFile{
		"a.txt":    {digest: repo.Digest([]byte("a\n")), Mode: repo.ModeFile},
		"deps/sub": {Mode: repo.ModeGitlink, commit: testCommit},
	})
	if err := co.Save(); err != nil {
		t.Fatal(err)
	}
	fresh, err := Find(dir)
	if err != nil {
		t.Fatal(err)
	}
	edits, err := fresh.LocalEdits()
	var got []string
	for _, e := range edits {
		got = append(got, e.Kind+" "+e.Path)
	}
	if want := []string{"added deps/subway.txt", "added src/new.go"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("a checkout with files in its submodule's directory and beside it: edits %q, %v; want %q", got, err, want)
	}
}

// TestAScanGivesTheCollectorBack ensures the garbage collector, held off while a scan runs, is
// given back as it was once the last scan ends: the MCP server scans again and again. Not
// parallel: the collector's setting is the process's.
func TestAScanGivesTheCollectorBack(t *testing.T) {
	before := debug.SetGCPercent(77)
	defer debug.SetGCPercent(before)
	const limit = 64 << 30
	beforeLimit := debug.SetMemoryLimit(limit)
	defer debug.SetMemoryLimit(beforeLimit)
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	release := holdGC()
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Errorf("while a scan runs the collector's percent is %d, want -1 (off)", got)
	}
	inner := holdGC()
	inner()
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Errorf("while a scan still runs the collector's percent is %d, want -1 (off)", got)
	}
	// The heap moves a little between the two reads of it.
	if got, want := debug.SetMemoryLimit(-1), int64(m.HeapAlloc)+1<<30; got < want-64<<20 || got > want+64<<20 {
		t.Errorf("while a scan runs the memory limit is %d, want about the heap and 1 GiB, %d", got, want)
	}
	release()
	if got := debug.SetGCPercent(before); got != 77 {
		t.Errorf("after the scans the collector's percent is %d, want 77 as it was", got)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("after the scans the memory limit is %d, want %d as it was", got, limit)
	}
	// A limit tighter than the heap and 1 GiB is kept.
	debug.SetMemoryLimit(int64(m.HeapAlloc) + 256<<20)
	release = holdGC()
	if got := debug.SetMemoryLimit(-1); got != int64(m.HeapAlloc)+256<<20 {
		t.Errorf("with a limit of the heap and 256 MiB a scan set it to %d", got)
	}
	release()
}

// TestShortPathCutsOnlyWhatIsLong ensures a path in a message is cut after 512 bytes, and not at
// 512.
func TestShortPathCutsOnlyWhatIsLong(t *testing.T) {
	t.Parallel()
	p512 := strings.Repeat("x", 512)
	if got := ShortPath(p512); got != p512 {
		t.Errorf("ShortPath of 512 bytes = %d bytes, want it whole", len(got))
	}
	if got := ShortPath(p512 + "y"); got != p512+"..." {
		t.Errorf("ShortPath of 513 bytes = %q, want 512 and ...", got)
	}
}

// TestTheFreshWritersDirectoriesCloseOnceNoWriteUsesThem holds the writer's count of open
// directories: it keeps freshWriterDirs open and no more; one pushed out while a write still
// uses it (another fetch writes in it) stays open until that write is done, and then closes;
// the checkout's root, which the checkout's state is written through next, is never closed.
func TestTheFreshWritersDirectoriesCloseOnceNoWriteUsesThem(t *testing.T) {
	t.Parallel()
	root, _ := openTestRoot(t)
	w := &freshWriter{root: root, made: map[string]bool{}, dirs: map[string]*openDir{}}
	defer w.close()
	open := func(d *openDir) bool {
		_, err := d.root.Stat(".")
		if err != nil && !errors.Is(err, os.ErrClosed) {
			t.Fatal(err)
		}
		return err == nil
	}
	acquire := func(path string) *openDir {
		t.Helper()
		d, err := w.acquire(path)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	top := acquire("")
	busy := acquire("busy")
	if again := acquire("busy"); again != busy {
		t.Fatalf("a directory acquired twice was opened twice")
	}
	w.release(busy) // one of its two writes is done
	done := acquire("done")
	w.release(done)
	var rest []*openDir
	for i := 3; i < freshWriterDirs; i++ {
		d := acquire(fmt.Sprintf("d%02d", i))
		w.release(d)
		rest = append(rest, d)
	}
	if len(w.dirs) != freshWriterDirs || !open(top) || !open(busy) || !open(done) {
		t.Fatalf("at %d directories: %d kept, root open %v, busy open %v, done open %v; want all kept open",
			freshWriterDirs, len(w.dirs), open(top), open(busy), open(done))
	}
	// One more pushes out the root (which stays open), then busy (a write is on it) and done.
	acquire("next1")
	acquire("next2")
	acquire("next3")
	if len(w.dirs) != freshWriterDirs {
		t.Errorf("%d directories kept, want %d", len(w.dirs), freshWriterDirs)
	}
	if !open(top) {
		t.Errorf("the checkout's root was closed when pushed out")
	}
	if !open(busy) {
		t.Errorf("a directory pushed out while a write used it was closed under that write")
	}
	if open(done) {
		t.Errorf("a directory pushed out that no write used was left open")
	}
	w.release(top)
	if !open(top) {
		t.Errorf("the checkout's root was closed when its last write was done")
	}
	w.release(busy)
	if open(busy) {
		t.Errorf("a directory pushed out was left open once its last write was done")
	}
	for _, d := range rest {
		if !open(d) {
			t.Errorf("a directory still kept was closed")
		}
	}
}
