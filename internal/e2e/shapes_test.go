//go:build linux

package e2e

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Every shape a real repository has, through everything a user does with it: a git history
// built by git, imported, checked out by an agent, edited in each shape, integrated through a
// gated validation in the sandbox that runs the repository's executable script, and cloned
// back with git, whose trees must be the ones git computes itself for the same files.

const (
	nfcName = "caf\u00e9.txt"  // é as one code point
	nfdName = "cafe\u0301.txt" // e and a combining acute accent: another name to git, and to ag
	bigSize = 20 << 20
)

// shapesCheck is the repository's own validation, run as ./run.sh: it fails unless every
// shape is there as git has it, and on any .txt saying broken.
const shapesCheck = "#!/bin/sh\n" + `fail() { echo "FAIL: $*"; exit 1; }
[ -x run.sh ] || fail "run.sh is not executable"
[ -L docs/README.md ] && { [ "$(cat docs/README.md)" = "the project" ] || [ "$(cat docs/README.md)" = "a is fine" ]; } || fail "docs/README.md is no link to the readme, or to a.txt"
[ -L escape ] && [ "$(readlink escape)" = "../../outside" ] || fail "escape is no link to ../../outside"
[ -d vendor/lib ] && [ -z "$(ls -A vendor/lib)" ] || fail "the submodule is no empty directory"
[ "$(wc -c < big.bin)" -eq ` + "20971520" + ` ] || fail "big.bin is not 20 MiB"
[ -f empty.txt ] && [ ! -s empty.txt ] || [ ! -e empty.txt ] || fail "empty.txt is not empty"
[ "$(cat d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/d11/d12/d13/d14/d15/d16/d17/d18/d19/d20/d21/d22/d23/d24/d25/d26/d27/d28/d29/d30/d31/d32/d33/d34/d35/d36/d37/d38/d39/d40/deep.txt)" = "deep" ] || fail "the deep file"
printf 'one\r\ntwo\r\n' | cmp -s - crlf.txt || fail "crlf.txt lost its CRLF"
printf 'no newline' | cmp -s - nonl.txt || fail "nonl.txt gained a newline"
ls *.txt | grep -q "caf" || fail "the accented names"
if grep -l broken *.txt; then fail "a file says broken"; fi
echo "every shape is there"
`

// deepDir is the 40-level directory of the fixture.
func deepDir() string {
	parts := make([]string, 40)
	for i := range parts {
		parts[i] = "d" + strconv.Itoa(i+1)
	}
	return strings.Join(parts, "/")
}

// TestEveryShapeThroughImportTheGateAndClone: a history holding an executable script the
// validation runs, a symbolic link inside the tree and one pointing outside it, a submodule,
// NFC and NFD names, a 40-level deep tree, a 20 MiB binary, an empty file, CRLF and
// no-final-newline files is imported with its commit ids; an agent's checkout holds every
// shape; an edit of each shape (chmod, a retarget, a delete, an add) lands through the
// sandboxed gate, which runs ./run.sh; a `git clone` from ag is fsck-clean and every commit's
// tree is the one git writes for the same working tree.
func TestEveryShapeThroughImportTheGateAndClone(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("bwrap is not on PATH: %v", err)
	}
	forEachBackend(t, func(t *testing.T, backend string) { everyShape(t, backend) })
}

func everyShape(t *testing.T, backend string) {
	s := startServer(t, backend)
	git := gitRunner(t)
	history := filepath.Join(t.TempDir(), "app")
	git(filepath.Dir(history), "init", "-q", history)
	writeTree(t, history, map[string]string{
		"run.sh": shapesCheck, "README.md": "the project", "a.txt": "a is fine\n", "empty.txt": "",
		"crlf.txt": "one\r\ntwo\r\n", "nonl.txt": "no newline", nfcName: "composed\n", nfdName: "decomposed\n",
		deepDir() + "/deep.txt": "deep", "tool.sh": "#!/bin/sh\necho tool\n",
	})
	big := make([]byte, bigSize)
	r := rand.NewChaCha8([32]byte{1})
	_, _ = r.Read(big)
	if err := os.WriteFile(filepath.Join(history, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(history, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(history, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"docs/README.md": "../README.md", "escape": "../../outside"} {
		if err := os.Symlink(target, filepath.Join(history, link)); err != nil {
			t.Fatal(err)
		}
	}
	git(history, "add", "-A")
	git(history, "update-index", "--add", "--cacheinfo", "160000,0123456789abcdef0123456789abcdef01234567,vendor/lib")
	git(history, "commit", "-q", "-m", "every shape")
	// The submodule as a clone without --recurse-submodules has it: an empty directory, which
	// `git add -A` below keeps as the submodule it is.
	if err := os.MkdirAll(filepath.Join(history, "vendor", "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	head := strings.TrimSpace(git(history, "rev-parse", "HEAD"))

	admin := []string{"--server", s.URL, "--token", s.AdminToken}
	mustAG(t, append([]string{"repo", "import", "app", history}, admin...)...)
	mustAG(t, append(append([]string{"repo", "set-validation", "app"}, admin...), "--timeout", "60s", "--", "./run.sh")...)
	g := &gateEnv{server: s, imported: s.mainline(t), workerToken: s.principal(t, "ci", roleWorker)}
	g.sandboxWorker(t, "w1")
	if got := g.commitOf(t, g.imported); got != head {
		t.Fatalf("the imported mainline is commit %s, want git's %s", got, head)
	}

	alice := g.agent(t, "alice")
	for path, want := range map[string]os.FileMode{"run.sh": 0o755, "tool.sh": 0o644, "big.bin": 0o644, nfcName: 0o644, nfdName: 0o644} {
		if fi, err := os.Lstat(filepath.Join(alice.dir, path)); err != nil || fi.Mode().Perm() != want || !fi.Mode().IsRegular() {
			t.Errorf("the checkout's %q: %v (%v), want a file of mode %v", path, fi.Mode(), err, want)
		}
	}
	if fi, err := os.Lstat(filepath.Join(alice.dir, "vendor", "lib")); err != nil || !fi.IsDir() {
		t.Errorf("the checkout's submodule: %v (%v), want an empty directory", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(alice.dir, "escape")); err != nil || target != "../../outside" {
		t.Errorf("the checkout's escape: %q (%v), want the link to ../../outside as a link", target, err)
	}

	// An edit of each shape, in the checkout and in the git working tree alike.
	for _, dir := range []string{alice.dir, history} {
		if err := os.Chmod(filepath.Join(dir, "tool.sh"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, "docs", "README.md")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../a.txt", filepath.Join(dir, "docs", "README.md")); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, "empty.txt")); err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, deepDir()+"/added.txt", "added\n")
	}
	// run.sh is the policy's command, protected: the change leaves it, and the mainline's copy
	// takes docs/README.md pointing at the readme or at a.txt.
	alice.must(t, "lease", "acquire", "tool.sh", "docs/", "empty.txt", "d1/")
	stdout, stderr, code := alice.ag(t, "integrate", "-m", "alice: an edit of each shape")
	m := integratedOut.FindStringSubmatch(stdout)
	if code != 0 || m == nil {
		t.Fatalf("ag integrate of an edit of each shape: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if out := g.jobOutput(t, m[1]); !strings.Contains(out, "every shape is there") {
		t.Errorf("the validation's output:\n%s\nwant ./run.sh to find every shape", out)
	}
	show := mustAG(t, append([]string{"repo", "show", "app"}, admin...)...)
	for _, want := range []string{"(11 files, 2 executable, 2 symbolic links, 1 submodule)\n", "submodule    vendor/lib at 0123456789abcdef0123456789abcdef01234567\n"} {
		if !strings.Contains(show, want) {
			t.Errorf("ag repo show app:\n%s\nwant %q", show, want)
		}
	}
	git(history, "add", "-A")
	wantTree := strings.TrimSpace(git(history, "write-tree"))

	clone := filepath.Join(t.TempDir(), "clone")
	git(filepath.Dir(clone), "-c", "http.extraHeader=Authorization: Bearer "+s.AdminToken, "clone", "-q", s.URL+"/git/app.git", clone)
	git(clone, "fsck", "--strict")
	if got := strings.TrimSpace(git(clone, "rev-parse", "HEAD^{tree}")); got != wantTree {
		t.Errorf("the clone's tree is %s, git's for the same working tree %s:\n%s", got, wantTree, git(clone, "ls-tree", "-r", "HEAD"))
	}
	if got := strings.TrimSpace(git(clone, "rev-parse", "HEAD^")); got != head {
		t.Errorf("the clone's HEAD^ is %s, want the imported %s", got, head)
	}
	for _, name := range []string{nfcName, nfdName} {
		if _, err := os.Lstat(filepath.Join(clone, name)); err != nil {
			t.Errorf("the clone lacks %q byte for byte: %v", name, err)
		}
	}
}
