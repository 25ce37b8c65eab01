package cli_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// gitIn runs git in dir with a fixed identity and dates, stdin as given, and answers its
// output without the trailing newline.
func gitIn(t *testing.T, dir, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=a",
		"GIT_COMMITTER_EMAIL=a@example.com", "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestImportTellsEveryRefusedPathBeforeUploading ensures `ag repo import` of a git history
// whose trees hold names ag refuses (a control character, bytes that are not UTF-8, a .git
// look-alike), even in a commit whose successor removed them, lists every one of them, quoted,
// with its rule and the commit that brought it in, and uploads nothing, with --dry-run or
// without; and that --dry-run of a history ag takes says what it would upload and uploads
// nothing either.
func TestImportTellsEveryRefusedPathBeforeUploading(t *testing.T) {
	t.Parallel()
	srv := agtest.Start(t, agtest.Options{})
	admin := func(args ...string) (string, string, int) {
		return runCLI(append(args, "--server", srv.URL, "--token", srv.AdminToken)...)
	}
	missing := func(ids ...string) int {
		res, err := srv.Admin.Repos.FindMissingGitObjects(context.Background(), &agwpv1.FindMissingGitObjectsRequest{Ids: ids})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.GetMissingIds())
	}

	dir := t.TempDir()
	gitIn(t, dir, "", "init", "-q", "-b", "main")
	blob := gitIn(t, dir, "hello\n", "hash-object", "-w", "--stdin")
	good := gitIn(t, dir, "100644 blob "+blob+"\ta.txt\n", "mktree")
	first := gitIn(t, dir, "", "commit-tree", good, "-m", "first")
	inner := gitIn(t, dir, "100644 blob "+blob+"\tconfig\n", "mktree")
	bad := gitIn(t, dir, "040000 tree "+inner+"\t.GIT\n"+
		"100644 blob "+blob+"\ta.txt\n"+
		"100644 blob "+blob+"\tbad\x1b[2Jname\n"+
		"100644 blob "+blob+"\tcaf\xe9.txt\n", "mktree")
	second := gitIn(t, dir, "", "commit-tree", bad, "-p", first, "-m", "second")
	third := gitIn(t, dir, "", "commit-tree", good, "-p", second, "-m", "third: the names are gone from HEAD, not from the history")
	gitIn(t, dir, "", "update-ref", "refs/heads/main", third)

	for _, dry := range []bool{true, false} {
		args := []string{"repo", "import", "app", dir}
		if dry {
			args = append(args, "--dry-run")
		}
		out, errOut, code := admin(args...)
		for _, want := range []string{
			"the history of " + dir + " holds 3 paths ag refuses; nothing was uploaded:",
			`".GIT" has a segment ".GIT", which names .git: no repository may hold a .git directory (commit ` + second + ")",
			`"bad\x1b[2Jname"`, "(commit " + second + ")",
			`"caf\xe9.txt" is not valid UTF-8 (commit ` + second + ")",
			"rewrite the history without them",
		} {
			if !strings.Contains(errOut, want) {
				t.Errorf("ag %s: exit %d, stderr lacks %q:\n%s%s", strings.Join(args, " "), code, want, out, errOut)
			}
		}
		if code != 2 || strings.Contains(errOut, "\x1b") || strings.Contains(errOut, "\xe9") {
			t.Errorf("ag %s: exit %d, want 2, with the names escaped:\n%q", strings.Join(args, " "), code, errOut)
		}
		if n := missing(blob, good, first, second, third); n != 5 {
			t.Errorf("after ag %s, the server holds %d of the history's objects, want none", strings.Join(args, " "), 5-n)
		}
	}

	// A history ag takes: an executable script, a symbolic link, a submodule.
	ok := t.TempDir()
	gitIn(t, ok, "", "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(ok, "run.sh"), []byte("#!/bin/sh\necho ok\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("run.sh", filepath.Join(ok, "link")); err != nil {
		t.Fatal(err)
	}
	gitIn(t, ok, "", "add", "run.sh", "link")
	gitIn(t, ok, "", "update-index", "--add", "--cacheinfo", "160000,0123456789abcdef0123456789abcdef01234567,vendor/lib")
	gitIn(t, ok, "", "commit", "-q", "-m", "modes")
	head := gitIn(t, ok, "", "rev-parse", "HEAD")
	out, errOut, code := admin("repo", "import", "modes", ok, "--dry-run")
	if code != 0 || !strings.Contains(out, "the import of "+ok+" into modes would upload 2 blobs, 2 trees and 1 commits the server lacks (of 2, 2, 1), and start modes at "+head+"; nothing was uploaded") {
		t.Errorf("ag repo import --dry-run of a history ag takes: exit %d\n%s%s", code, out, errOut)
	}
	if missing(head) != 1 {
		t.Error("ag repo import --dry-run uploaded the head commit")
	}
	if _, err := srv.Admin.Repos.GetRepository(context.Background(), &agwpv1.GetRepositoryRequest{Name: "modes"}); err == nil {
		t.Error("ag repo import --dry-run created the repository")
	}
	out, errOut, code = admin("repo", "import", "modes", ok)
	if code != 0 || !strings.Contains(out, "imported the git history of "+ok+" into modes: 1 commits, 3 files at "+head) {
		t.Fatalf("ag repo import of a history with an executable, a link and a submodule: exit %d\n%s%s", code, out, errOut)
	}
}

// TestFilesImportTellsEveryRefusedName ensures `ag repo import --files` of a directory whose
// names ag refuses (a control character, bytes that are not UTF-8, in a file's name or a
// directory's) lists every one of them, quoted, with its rule, and sends nothing, with
// --dry-run or without; and that --dry-run of a directory ag takes says what it would send.
func TestFilesImportTellsEveryRefusedName(t *testing.T) {
	t.Parallel()
	srv := agtest.Start(t, agtest.Options{})
	admin := func(args ...string) (string, string, int) {
		return runCLI(append(args, "--server", srv.URL, "--token", srv.AdminToken)...)
	}
	dir := t.TempDir()
	for _, p := range []string{"ok.txt", "bad\x1b[2Jname", "caf\xe9.txt", "sub\a/inner.txt", "fine/deeper\x7f.txt"} {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, dry := range []bool{true, false} {
		args := []string{"repo", "import", "--files", "app", dir}
		if dry {
			args = append(args, "--dry-run")
		}
		out, errOut, code := admin(args...)
		for _, want := range []string{
			"4 names ag refuses:",
			`"bad\x1b[2Jname" contains the control character U+001B`,
			`"caf\xe9.txt" is not valid UTF-8`,
			`"fine/deeper\x7f.txt" contains the control character U+007F`,
			`"sub\a/" contains the control character U+0007`,
		} {
			if !strings.Contains(errOut, want) {
				t.Errorf("ag %s: exit %d, stderr lacks %q:\n%s%s", strings.Join(args, " "), code, want, out, errOut)
			}
		}
		if code == 0 || strings.Contains(errOut, "inner.txt") {
			t.Errorf("ag %s: exit %d, want a refusal that names the directory, not what is in it:\n%s", strings.Join(args, " "), code, errOut)
		}
		if _, err := srv.Admin.Repos.GetRepository(context.Background(), &agwpv1.GetRepositoryRequest{Name: "app"}); err == nil {
			t.Errorf("ag %s created the repository", strings.Join(args, " "))
		}
	}
	clean := t.TempDir()
	for _, p := range []string{"a.txt", "d/b.txt"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(clean, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(clean, p), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := admin("repo", "import", "--files", "app", clean, "--dry-run")
	if code != 0 || out != "the import of "+clean+" into app would send 2 files; nothing was sent\n" {
		t.Errorf("ag repo import --files --dry-run of a clean directory: exit %d\n%s%s", code, out, errOut)
	}
}
