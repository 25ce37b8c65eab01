package cli_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// commitOn commits everything in dir as message, on day (of January 2026), as git's author and
// committer.
func commitOn(t *testing.T, dir string, day int, message string) string {
	t.Helper()
	date := fmt.Sprintf("2026-01-%02dT00:00:00Z", day)
	cmd := exec.Command("git", "commit", "-q", "--allow-empty", "-a", "-m", message)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=a",
		"GIT_COMMITTER_EMAIL=a@example.com", "GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date,
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git commit: %v\n%s", err, out)
	}
	return gitIn(t, dir, "", "rev-parse", "HEAD")
}

// TestImportShallowClone is the contract on both stores: `ag repo import` of a shallow
// clone (depth 3 of ten commits, a merge below where it stops) keeps every commit id, and the
// repository knows where its history starts: `ag repo show` says "history from COMMIT on",
// --json carries it; `git clone` from ag is shallow at the same commit, with the same commits,
// `git fsck --strict` clean; a change integrated after the import reaches it with `git pull`,
// and the clone imported from fast-forwards to it. --depth and --since make the shallow clone of
// a local repository themselves. A history with a hole its shallow file does not declare is
// refused, uploading nothing.
func TestImportShallowClone(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := &cliEnv{t: t, srv: agtest.Start(t, agtest.Options{Backend: backend})}
			root := t.TempDir()
			src := filepath.Join(root, "src")
			gitIn(t, root, "", "init", "-q", "-b", "main", src)
			ids := map[string]string{}
			step := func(day int, name, file string) {
				mkfile(t, filepath.Join(src, file), name+"\n")
				gitIn(t, src, "", "add", "-A")
				ids[name] = commitOn(t, src, day, name)
			}
			step(1, "c1", "a.txt")
			step(2, "c2", "a.txt")
			gitIn(t, src, "", "checkout", "-q", "-b", "side")
			step(3, "s1", "side.txt")
			gitIn(t, src, "", "checkout", "-q", "main")
			step(4, "c3", "a.txt")
			gitIn(t, src, "", "merge", "-q", "--no-commit", "side")
			ids["merge"] = commitOn(t, src, 5, "Merge side")
			for i, name := range []string{"c4", "c5", "c6", "c7", "c8"} {
				step(6+i, name, "a.txt")
			}
			if n := len(strings.Fields(gitIn(t, src, "", "rev-list", "HEAD"))); n != 10 {
				t.Fatalf("the source history has %d commits, want 10", n)
			}
			shallow := filepath.Join(root, "shallow")
			gitIn(t, root, "", "clone", "-q", "--depth", "3", "file://"+src, shallow)
			if got := gitIn(t, shallow, "", "rev-parse", "--is-shallow-repository"); got != "true" {
				t.Fatalf("git clone --depth 3 made no shallow clone: %s", got)
			}

			out := e.admin("repo", "import", "app", shallow)
			if !strings.Contains(out, "3 commits, 2 files at "+ids["c8"]+" (history from "+ids["c6"]+" on)") {
				t.Fatalf("ag repo import of a shallow clone says:\n%s", out)
			}
			r, err := e.srv.Admin.Repos.GetRepository(context.Background(), &agwpv1.GetRepositoryRequest{Name: "app"})
			if err != nil || r.GetRepository().GetMainlineCommit() != ids["c8"] || !slices.Equal(r.GetRepository().GetShallow(), []string{ids["c6"]}) {
				t.Fatalf("the imported repository = %v, %v; want its mainline at %s, shallow at %s", r, err, ids["c8"], ids["c6"])
			}
			if show := e.admin("repo", "show", "app"); !strings.Contains(show, "(history from "+ids["c6"]+" on)") {
				t.Errorf("ag repo show does not say where the history starts:\n%s", show)
			}
			var shown struct {
				Repository struct{ Shallow []string } `json:"repository"`
			}
			decode(t, "ag repo show --json", e.admin("repo", "show", "app", "--json"), &shown)
			if !slices.Equal(shown.Repository.Shallow, []string{ids["c6"]}) {
				t.Errorf("ag repo show --json carries the shallow commits %v, want %s", shown.Repository.Shallow, ids["c6"])
			}

			// git clone from ag: the same commits, shallow at the same commit.
			auth := "http.extraHeader=Authorization: Bearer " + e.srv.AdminToken
			clone := filepath.Join(root, "clone")
			gitIn(t, root, "", "-c", auth, "clone", "-q", e.srv.URL+"/git/app.git", clone)
			if got, want := gitIn(t, clone, "", "rev-list", "HEAD"), gitIn(t, shallow, "", "rev-list", "HEAD"); got != want {
				t.Fatalf("the clone from ag holds the commits\n%s\nwant the shallow clone's\n%s", got, want)
			}
			if got, err := os.ReadFile(filepath.Join(clone, ".git", "shallow")); err != nil || strings.TrimSpace(string(got)) != ids["c6"] {
				t.Fatalf("the clone from ag has .git/shallow %q (%v), want %s", got, err, ids["c6"])
			}
			gitIn(t, clone, "", "fsck", "--strict")

			// A change lands; git pull brings it, to the clone from ag and to the one imported.
			alice := e.agent("alice")
			alice.write("b.txt", "alice\n")
			alice.integrate("Alice adds b", "b.txt")
			gitIn(t, clone, "", "-c", auth, "pull", "-q", "--ff-only")
			if got := gitIn(t, clone, "", "rev-parse", "HEAD^"); got != ids["c8"] {
				t.Fatalf("after git pull HEAD's parent is %s, want the imported head %s", got, ids["c8"])
			}
			if got, _ := os.ReadFile(filepath.Join(clone, "b.txt")); string(got) != "alice\n" {
				t.Fatalf("b.txt after git pull = %q", got)
			}
			gitIn(t, clone, "", "fsck", "--strict")
			gitIn(t, shallow, "", "-c", auth, "pull", "-q", "--ff-only", e.srv.URL+"/git/app.git", "main")
			gitIn(t, shallow, "", "fsck", "--strict")

			// --depth and --since clone the local source themselves.
			for _, c := range []struct {
				flag, value string
				commits     int
				from        string
			}{{"--depth", "4", 4, "c5"}, {"--since", "2026-01-08", 2, "c7"}} {
				name := "app" + strings.TrimPrefix(c.flag, "--")
				out := e.admin("repo", "import", name, src, c.flag, c.value)
				if !strings.Contains(out, fmt.Sprintf("%d commits, 2 files at %s (history from %s on)", c.commits, ids["c8"], ids[c.from])) {
					t.Errorf("ag repo import %s %s %s says:\n%s", name, c.flag, c.value, out)
				}
			}
			for _, args := range [][]string{
				{"repo", "import", "x", src, "--depth", "2", "--since", "2026-01-08"},
				{"repo", "import", "x", src, "--depth", "2", "--files"},
				{"repo", "import", "x", root, "--depth", "2"},
			} {
				if out, errOut, code := runCLI(append(args, "--server", e.srv.URL, "--token", e.srv.AdminToken)...); code != 2 {
					t.Errorf("ag %s: exit %d, want 2\n%s%s", strings.Join(args, " "), code, out, errOut)
				}
			}

			// A hole its shallow file does not declare: refused, naming it, nothing uploaded.
			hole := filepath.Join(root, "hole")
			gitIn(t, root, "", "clone", "-q", "--depth", "2", "file://"+src, hole)
			if err := os.Remove(filepath.Join(hole, ".git", "shallow")); err != nil {
				t.Fatal(err)
			}
			_, errOut, code := runCLI("repo", "import", "holey", hole, "--server", e.srv.URL, "--token", e.srv.AdminToken)
			if code != 2 || !strings.Contains(errOut, "reaches commit "+ids["c6"]+", a parent of "+ids["c7"]) ||
				!strings.Contains(errOut, "not where a shallow clone's history stops") {
				t.Errorf("ag repo import of a history with a hole: exit %d\n%s", code, errOut)
			}
			if _, err := e.srv.Admin.Repos.GetRepository(context.Background(), &agwpv1.GetRepositoryRequest{Name: "holey"}); err == nil {
				t.Error("a refused import created the repository")
			}
		})
	}
}
