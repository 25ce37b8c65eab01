//go:build linux

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/attest"
)

// The case: a project whose check is an executable script, run as the repository has
// it (`./check.sh`, no `sh` in front), which a worker that checked every file out as 0644
// could never run, nor attest the tree of.

// executableCheck is checkScript with the line that makes it a program of its own.
const executableCheck = "#!/bin/sh\n" + checkScript

// TestModesExecutableCheckGatesChanges: a git history with an executable check.sh is imported
// with `ag repo import` and gated by the policy `./check.sh`; in the sandbox an honest change
// lands, attested with the git tree of the candidate (check.sh 100755 in it), and a broken one
// is rejected with the script's output. A clone from ag has check.sh executable, `git fsck
// --strict` clean.
func TestModesExecutableCheckGatesChanges(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("bwrap is not on PATH: install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap) to run the sandbox tests: %v", err)
	}
	forEachBackend(t, func(t *testing.T, backend string) {
		s := startServer(t, backend)
		git := gitRunner(t)
		history := filepath.Join(t.TempDir(), "app")
		git(filepath.Dir(history), "init", "-q", history)
		files := map[string]string{"check.sh": executableCheck, "a.txt": "a is fine\n", "b.txt": "b is fine\n"}
		writeTree(t, history, files)
		if err := os.Chmod(filepath.Join(history, "check.sh"), 0o755); err != nil {
			t.Fatal(err)
		}
		git(history, "add", "-A")
		git(history, "commit", "-q", "-m", "A project checked by an executable script")
		admin := []string{"--server", s.URL, "--token", s.AdminToken}
		if out := mustAG(t, append([]string{"repo", "import", "app", history}, admin...)...); !strings.HasPrefix(out, "imported the git history of "+history+" into app") {
			t.Fatalf("ag repo import printed %q", out)
		}
		out := mustAG(t, append(append([]string{"repo", "set-validation", "app"}, admin...), "--timeout", "30s", "--", "./check.sh")...)
		if !strings.HasPrefix(out, "repository app: validation `./check.sh`") {
			t.Fatalf("ag repo set-validation printed %q, want \"repository app: validation `./check.sh` ...\"", out)
		}
		g := &gateEnv{server: s, files: files, imported: s.mainline(t), workerToken: s.principal(t, "ci", roleWorker)}
		w := g.sandboxWorker(t, "w1")
		if mode := g.mode(t, "", "check.sh"); mode != "100755" {
			t.Fatalf("GetTree lists check.sh with mode %q after the import, want 100755", mode)
		}

		alice := g.agent(t, "alice")
		edit(t, alice, "a.txt", "a is better\n")
		stdout, stderr, code := alice.ag(t, "integrate", "-m", "alice: a is better")
		id, rev, _ := integrated(t, "alice", stdout, stderr, code)
		good := with(files, map[string]string{"a.txt": "a is better\n"})
		g.assertMainline(t, rev, good)
		if mode := g.mode(t, rev, "check.sh"); mode != "100755" {
			t.Errorf("GetTree lists check.sh with mode %q after alice's change, want 100755 kept", mode)
		}
		tree, err := g.Admin.Repos.GetTree(context.Background(), &agwpv1.GetTreeRequest{Repository: "app", Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		v := w.attestation(t, g, g.job(t, g.change(t, id).GetJobId()))
		if v.Result != attest.ResultPassed || v.GitTree != tree.GetGitTree() || v.TreeDigest != tree.GetTreeDigest() {
			t.Errorf("the honest change's attestation: %s of git tree %s, tree %s; want PASSED of the mainline's %s, %s",
				v.Result, v.GitTree, v.TreeDigest, tree.GetGitTree(), tree.GetTreeDigest())
		}

		edit(t, alice, "b.txt", "b is fine\nb is broken now\n")
		stdout, stderr, code = alice.ag(t, "integrate", "-m", "alice: break b")
		rejected(t, "alice", stdout, stderr, code,
			"reason: validation failed: `./check.sh` exited with status 1 (worker "+w.holder+")",
			"\n2:b is broken now\nFAIL: b.txt is broken\n")
		g.assertMainline(t, rev, good)

		clone := filepath.Join(t.TempDir(), "clone")
		git(filepath.Dir(clone), "-c", "http.extraHeader=Authorization: Bearer "+s.AdminToken, "clone", "-q", s.URL+"/git/app.git", clone)
		git(clone, "fsck", "--strict")
		if got := strings.TrimSpace(git(clone, "rev-parse", "HEAD^{tree}")); got != tree.GetGitTree() {
			t.Errorf("the clone's tree is %s, the mainline's %s", got, tree.GetGitTree())
		}
		if fi, err := os.Lstat(filepath.Join(clone, "check.sh")); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("check.sh in the clone: %v, %v; want mode 0755", fi.Mode(), err)
		}
	})
}

// mode answers the mode GetTree lists for path in app's revision rev ("" for the mainline).
func (g *gateEnv) mode(t *testing.T, rev, path string) string {
	t.Helper()
	tree, err := g.Admin.Repos.GetTree(context.Background(), &agwpv1.GetTreeRequest{Repository: "app", Revision: rev})
	if err != nil {
		t.Fatalf("get the tree of app@%s: %v", rev, err)
	}
	for _, e := range tree.GetEntries() {
		if e.GetPath() == path {
			return e.GetMode()
		}
	}
	t.Fatalf("the tree of app@%s has no %s", rev, path)
	return ""
}
