package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/cli"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestCheckoutRefusesNamesItsFileSystemWouldMerge ensures a repository holding names that
// differ only in case or normalization (git allows them, and an import keeps them) checks out
// byte for byte where the file system keeps them apart, and is refused, naming every pair and
// writing nothing, where it would take them for one (a macOS or Windows volume, stood in for
// here: this machine's file systems keep names apart, as the probe finds).
func TestCheckoutRefusesNamesItsFileSystemWouldMerge(t *testing.T) {
	srv := agtest.Start(t, agtest.Options{})
	admin := func(args ...string) (string, string, int) {
		return runCLI(append(args, "--server", srv.URL, "--token", srv.AdminToken)...)
	}
	dir := t.TempDir()
	gitIn(t, dir, "", "init", "-q", "-b", "main")
	names := []string{"README.md", "Readme.md", "caf\u00e9.txt", "cafe\u0301.txt", "docs/a.txt", "Docs/b.txt", "plain.txt"}
	for _, n := range names {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, n)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitIn(t, dir, "", "add", "-A")
	gitIn(t, dir, "", "commit", "-q", "-m", "two spellings of three names")
	if out, errOut, code := admin("repo", "import", "app", dir); code != 0 {
		t.Fatalf("ag repo import: exit %d\n%s%s", code, out, errOut)
	}

	if how, err := cli.FoldsNames(t.TempDir()); err != nil || how != "" {
		t.Fatalf("this machine's temporary directory folds %q (%v): the test needs one that does not", how, err)
	}
	keeps := filepath.Join(t.TempDir(), "keeps")
	if out, errOut, code := admin("checkout", "app", keeps); code != 0 {
		t.Fatalf("ag checkout where names are kept apart: exit %d\n%s%s", code, out, errOut)
	}
	for _, n := range names {
		if b, err := os.ReadFile(filepath.Join(keeps, n)); err != nil || string(b) != n+"\n" {
			t.Errorf("the checkout's %q: %q, %v", n, b, err)
		}
	}

	restore := cli.PretendNamesFold("case")
	defer restore()
	folds := filepath.Join(t.TempDir(), "folds")
	out, errOut, code := admin("checkout", "app", folds)
	for _, want := range []string{
		"this file system folds case in names, and the tree holds 3 pairs of names it would take for one",
		`"Docs/" and "docs/"`, `"README.md" and "Readme.md"`, `"cafe\u0301.txt" and "caf\u00e9.txt"`,
	} {
		if code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("ag checkout where names fold: exit %d, stderr lacks %q:\n%s%s", code, want, out, errOut)
		}
	}
	if _, err := os.Lstat(folds); err == nil {
		t.Errorf("the refused checkout left %s behind", folds)
	}
}

// TestSyncRefusesNamesItsFileSystemWouldMerge ensures ag sync, as ag checkout, refuses to
// write a revision holding two names that the checkout's file system would take for one,
// naming them and changing nothing: a checkout made where names are kept apart, then used
// where they fold (stood in for), would otherwise write one file over the other.
func TestSyncRefusesNamesItsFileSystemWouldMerge(t *testing.T) {
	e := newModesEnv(t, map[string]gitEntry{"README.md": file("upper\n"), "Readme.md": file("mixed\n"), "plain.txt": file("p\n")})
	alice, bob := e.agent("alice"), e.agent("bob")
	bob.write("plain.txt", "p, bob's\n")
	bob.integrate("bob's plain", "plain.txt")

	restore := cli.PretendNamesFold("case")
	_, errOut, code := alice.run("sync")
	restore()
	if code == 0 || !strings.Contains(errOut, "nothing was changed") || !strings.Contains(errOut, `"README.md" and "Readme.md"`) {
		t.Errorf("ag sync where names fold: exit %d, %q; want a refusal naming README.md and Readme.md", code, errOut)
	}
	if got := alice.read("plain.txt"); got != "p\n" {
		t.Errorf("the refused sync wrote plain.txt: %q", got)
	}
	alice.must("sync")
	if got := alice.read("plain.txt"); got != "p, bob's\n" {
		t.Errorf("plain.txt after a sync where names are kept apart: %q", got)
	}
}
