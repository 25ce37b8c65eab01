//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// linkCheck is the project's check: it runs as `./check.sh`, so only when the tree has it
// executable, and when the tree has a `current` it must be a symbolic link (what the worker
// wrote of it), which it reads through as any program would.
const linkCheck = "#!/bin/sh\n" + `if [ -e current ] || [ -L current ]; then
	if [ ! -L current ]; then echo "FAIL: current is no symbolic link"; exit 1; fi
	echo "current -> $(readlink current): $(cat current)"
fi
` + checkScript

// TestModesAnAgentsChmodAndLinkThroughTheGate: an agent's checkout of a project whose check
// `./check.sh` (which the policy's command, the protected gate.sh, runs) is not executable yet
// cannot get an edit through the gate (the sandbox cannot run it); the agent does `chmod +x check.sh` and `ln -s a.txt current` in its checkout, and
// ag status, ag diff and ag integrate carry them: the change is validated (the worker runs the
// script and finds the link a link), lands with check.sh 100755 and current 120000, another
// agent's checkout and a sync have them, and a `git clone` from ag shows the mode and the link,
// `git fsck --strict` clean.
func TestModesAnAgentsChmodAndLinkThroughTheGate(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("bwrap is not on PATH: install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap) to run the sandbox tests: %v", err)
	}
	forEachBackend(t, func(t *testing.T, backend string) {
		s := startServer(t, backend)
		git := gitRunner(t)
		history := filepath.Join(t.TempDir(), "app")
		git(filepath.Dir(history), "init", "-q", history)
		files := map[string]string{"gate.sh": "exec ./check.sh\n", "check.sh": linkCheck, "a.txt": "a is fine\n", "b.txt": "b is fine\n"}
		writeTree(t, history, files)
		git(history, "add", "-A")
		git(history, "commit", "-q", "-m", "A project whose check is not executable yet")
		admin := []string{"--server", s.URL, "--token", s.AdminToken}
		mustAG(t, append([]string{"repo", "import", "app", history}, admin...)...)
		mustAG(t, append(append([]string{"repo", "set-validation", "app"}, admin...), "--timeout", "30s", "--", "sh", "gate.sh")...)
		g := &gateEnv{server: s, files: files, imported: s.mainline(t), workerToken: s.principal(t, "ci", roleWorker)}
		g.sandboxWorker(t, "w1")
		bob := g.agent(t, "bob")

		alice := g.agent(t, "alice")
		edit(t, alice, "a.txt", "a is better\n")
		stdout, stderr, code := alice.ag(t, "integrate", "-m", "alice: a is better")
		rejected(t, "alice", stdout, stderr, code, "validation failed: `sh gate.sh` exited with status 126", "Permission denied")

		// chmod +x and ln -s in the checkout, as a person or an agent's shell does them.
		if err := os.Chmod(filepath.Join(alice.dir, "check.sh"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("a.txt", filepath.Join(alice.dir, "current")); err != nil {
			t.Fatal(err)
		}
		status := alice.must(t, "status")
		for _, want := range []string{"  modified  a.txt\n", "  modified  check.sh (mode 100644 → 100755)\n", "  added     current (link → a.txt)\n"} {
			if !strings.Contains(status, want) {
				t.Errorf("ag status after chmod +x and ln -s:\n%s\nwant %q", status, want)
			}
		}
		diff := alice.must(t, "diff", "check.sh", "current")
		if want := "diff --git a/check.sh b/check.sh\nold mode 100644\nnew mode 100755\n" +
			"diff --git a/current b/current\nnew file mode 120000\n--- /dev/null\n+++ b/current\n@@ -0,0 +1 @@\n+a.txt\n\\ No newline at end of file\n"; diff != want {
			t.Errorf("ag diff check.sh current printed:\n%s\nwant:\n%s", diff, want)
		}
		alice.must(t, "lease", "acquire", "check.sh", "current")
		stdout, stderr, code = alice.ag(t, "integrate", "-m", "alice: a is better, and the check runs")
		m := integratedOut.FindStringSubmatch(stdout)
		if code != 0 || m == nil || m[2] != "3" {
			t.Fatalf("ag integrate of a.txt, chmod +x check.sh and ln -s current: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 3 paths integrated and validated", code, stdout, stderr)
		}
		if out := g.jobOutput(t, m[1]); !strings.Contains(out, "current -> a.txt: a is better") || !strings.Contains(out, "ok: nothing broken") {
			t.Errorf("the validation's output:\n%s\nwant the link read as a link by ./check.sh", out)
		}
		if mode := g.mode(t, m[3], "check.sh"); mode != "100755" {
			t.Errorf("GetTree lists check.sh with mode %q, want 100755", mode)
		}
		if mode := g.mode(t, m[3], "current"); mode != "120000" {
			t.Errorf("GetTree lists current with mode %q, want 120000", mode)
		}
		if out := alice.must(t, "status"); !strings.Contains(out, "no local edits") {
			t.Errorf("alice's ag status after the integration:\n%s\nwant no local edits", out)
		}

		carol := g.agent(t, "carol")
		bob.must(t, "sync")
		for _, a := range []*agentShell{bob, carol} {
			if fi, err := os.Lstat(filepath.Join(a.dir, "check.sh")); err != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("%s's check.sh: %v (%v), want 0755", a.holder, fi.Mode(), err)
			}
			if target, err := os.Readlink(filepath.Join(a.dir, "current")); err != nil || target != "a.txt" {
				t.Errorf("%s's current: %q (%v), want a link to a.txt", a.holder, target, err)
			}
		}

		clone := filepath.Join(t.TempDir(), "clone")
		git(filepath.Dir(clone), "-c", "http.extraHeader=Authorization: Bearer "+s.AdminToken, "clone", "-q", s.URL+"/git/app.git", clone)
		git(clone, "fsck", "--strict")
		tree := git(clone, "ls-tree", "HEAD")
		for _, want := range []string{"100755 blob ", "\tcheck.sh\n", "120000 blob ", "\tcurrent\n"} {
			if !strings.Contains(tree, want) {
				t.Errorf("git ls-tree HEAD of the clone:\n%s\nwant %q", tree, want)
			}
		}
		if fi, err := os.Lstat(filepath.Join(clone, "check.sh")); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("check.sh in the clone: %v, %v; want mode 0755", fi.Mode(), err)
		}
		if target, err := os.Readlink(filepath.Join(clone, "current")); err != nil || target != "a.txt" {
			t.Errorf("current in the clone: %q (%v), want a link to a.txt", target, err)
		}
	})
}
