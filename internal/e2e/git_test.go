//go:build unix

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// gitRunner answers a function that runs the real git client in a directory, with a home of
// its own and no system configuration, so that the machine's settings play no part, and fails
// the test when git fails.
func gitRunner(t *testing.T) func(dir string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is not installed: %v", err)
	}
	home := t.TempDir()
	return func(dir string, args ...string) string {
		t.Helper()
		out, err := gitCmd(home, dir, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
}

func gitCmd(home, dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Dev", "GIT_AUTHOR_EMAIL=dev@example.com", "GIT_COMMITTER_NAME=Dev", "GIT_COMMITTER_EMAIL=dev@example.com")
	return cmd
}

// TestGitFollowsTheGatedMainline is the "done when" in small: a person clones the
// repository from ag with the real git client and a reader's token; agents integrate through
// leases and the gate; `git fetch` then fast-forwards by one commit per change, each naming its
// author, its change, the lease tokens it was integrated under and the attestation that
// validated exactly its tree, which `ag attestation verify` checks against
// `git rev-parse HEAD^{tree}`. A rejected change adds no commit, and the clone stays
// `git fsck --strict` clean.
func TestGitFollowsTheGatedMainline(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		g := startGate(t, backend, gateFiles, "--timeout", "60s", "--", "sh", "check.sh")
		w := g.worker(t, "w1", 30*time.Second)
		reader := g.principal(t, "reviewer", agwpv1.Role_ROLE_READER)
		git := gitRunner(t)
		clone := filepath.Join(t.TempDir(), "app")
		git(filepath.Dir(clone), "-c", "http.extraHeader=Authorization: Bearer "+reader,
			"clone", g.URL+"/git/app.git", clone)
		git(clone, "config", "http.extraHeader", "Authorization: Bearer "+reader)
		for path, content := range gateFiles {
			got, err := os.ReadFile(filepath.Join(clone, path))
			if err != nil || string(got) != content {
				t.Fatalf("the clone's %s = %q, %v; want %q", path, got, err, content)
			}
		}
		before := strings.TrimSpace(git(clone, "rev-parse", "HEAD"))

		alice := g.agent(t, "alice")
		edit(t, alice, "a.txt", "a is better\n")
		out, errOut, code := alice.ag(t, "integrate", "-m", "Make a better")
		change, _, digest := integrated(t, "alice", out, errOut, code)

		bob := g.agent(t, "bob")
		edit(t, bob, "b.txt", "b is broken\n")
		out, errOut, code = bob.ag(t, "integrate", "-m", "Break b")
		rejected(t, "bob", out, errOut, code, "b.txt is broken")

		git(clone, "fetch", "origin")
		if out := git(clone, "merge", "--ff-only", "origin/main"); !strings.Contains(out, "Fast-forward") {
			t.Fatalf("git merge --ff-only origin/main printed %q, want a fast-forward", out)
		}
		if got := strings.Fields(git(clone, "rev-list", before+"..HEAD")); len(got) != 1 {
			t.Fatalf("the fetch brought %d commits (%v), want one: alice's; bob's was rejected", len(got), got)
		}
		if got, _ := os.ReadFile(filepath.Join(clone, "a.txt")); string(got) != "a is better\n" {
			t.Fatalf("a.txt in the clone = %q after the fetch, want alice's edit", got)
		}
		log := git(clone, "log", "-1", "--format=%an <%ae>%n%cn%n%s%n%(trailers:only,unfold)")
		for _, want := range []string{"alice (alice) <alice+alice@ag.invalid>", "\nag\n", "Make a better",
			"Ag-Change: " + change, "Ag-Author: alice|alice", "Ag-Lease-Tokens: ", "Ag-Attestation: " + digest} {
			if !strings.Contains(log, want) {
				t.Fatalf("git log -1 shows:\n%s\nwant it to contain %q", log, want)
			}
		}

		// The attestation names exactly the commit's tree.
		tree := strings.TrimSpace(git(clone, "rev-parse", "HEAD^{tree}"))
		file := g.attestationFile(t, digest)
		v, vout, verr, vcode := verify(t, file, w.pub, tree)
		if vcode != 0 || v.result != "PASSED" {
			t.Fatalf("ag attestation verify --subject-digest %s: exit %d, result %q\n%s%s", tree, vcode, v.result, vout, verr)
		}
		if _, _, code := runAG(t, "attestation", "verify", file, "--key", w.pub, "--subject-digest",
			strings.TrimSpace(git(clone, "rev-parse", before+"^{tree}"))); code == 0 {
			t.Fatalf("ag attestation verify accepted the tree of the commit before")
		}

		git(clone, "fsck", "--strict")
		res, err := g.Admin.Repos.GetRepository(context.Background(), &agwpv1.GetRepositoryRequest{Name: "app"})
		if err != nil {
			t.Fatal(err)
		}
		if head := strings.TrimSpace(git(clone, "rev-parse", "HEAD")); head != res.GetRepository().GetMainlineCommit() {
			t.Fatalf("the clone's HEAD is %s, the repository's mainline commit %s", head, res.GetRepository().GetMainlineCommit())
		}
	})
}

// TestImportGitHistoryKeepsCommitIDs: a team starts from the history it has. `ag repo import` of
// a git working tree makes its HEAD the mainline, commit ids kept; an agent integrates; the
// team's own clone fetches from ag and fast-forwards by exactly that commit, and stays
// `git fsck --strict` clean. A history ag cannot check out is refused, naming the path.
func TestImportGitHistoryKeepsCommitIDs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		s := startServer(t, backend)
		git := gitRunner(t)
		dir := filepath.Join(t.TempDir(), "proj")
		git(filepath.Dir(dir), "init", "-q", "-b", "trunk", dir)
		writeTree(t, dir, map[string]string{"README.md": "# proj\n", "src/a.go": "package src\n", "old.txt": "old\n"})
		git(dir, "add", "-A")
		git(dir, "commit", "-q", "-m", "First")
		git(dir, "checkout", "-q", "-b", "side")
		writeFile(t, dir, "src/side.go", "package src // side\n")
		git(dir, "add", "-A")
		git(dir, "commit", "-q", "-m", "Side work")
		git(dir, "checkout", "-q", "trunk")
		git(dir, "rm", "-q", "old.txt")
		writeFile(t, dir, "tools/run.sh", "#!/bin/sh\necho run\n")
		if err := os.Chmod(filepath.Join(dir, "tools/run.sh"), 0o755); err != nil {
			t.Fatal(err)
		}
		git(dir, "add", "-A")
		git(dir, "commit", "-q", "-m", "Trunk work")
		git(dir, "merge", "-q", "--no-edit", "side")
		head := strings.TrimSpace(git(dir, "rev-parse", "HEAD"))
		commits := strings.Fields(git(dir, "rev-list", "HEAD"))

		out, errOut, code := runAG(t, "repo", "import", "proj", dir, "--server", s.URL, "--token", s.AdminToken)
		if code != 0 || !strings.HasPrefix(out, "imported the git history of "+dir+" into proj: 4 commits, 4 files at "+head+"; mainline ") {
			t.Fatalf("ag repo import of a git repository: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		if !strings.Contains(out, "git remote add ag "+s.URL+"/git/proj.git") {
			t.Errorf("ag repo import does not say how to fetch from ag:\n%s", out)
		}
		res, err := s.Admin.Repos.GetRepository(context.Background(), &agwpv1.GetRepositoryRequest{Name: "proj"})
		if err != nil || res.GetRepository().GetMainlineCommit() != head {
			t.Fatalf("the mainline commit of proj is %q (%v), want the imported HEAD %s", res.GetRepository().GetMainlineCommit(), err, head)
		}
		if _, _, code := runAG(t, "repo", "import", "proj", dir, "--server", s.URL, "--token", s.AdminToken); code != 2 {
			t.Errorf("a second git import into proj exited %d, want 2: a history starts a new repository", code)
		}

		// An agent works on it through ag.
		alice := &agentShell{s: s, holder: "alice|alice", dir: filepath.Join(t.TempDir(), "alice"), token: createAgent(t, s, "alice")}
		mustAG(t, "checkout", "proj", alice.dir, "--server", s.URL, "--token", alice.token)
		assertTree(t, alice.dir, map[string]string{"README.md": "# proj\n", "src/a.go": "package src\n",
			"src/side.go": "package src // side\n", "tools/run.sh": "#!/bin/sh\necho run\n"})
		alice.must(t, "lease", "acquire", "src/a.go")
		writeFile(t, alice.dir, "src/a.go", "package src // by alice\n")
		alice.integrated(t, "Alice edits a", 1)

		// The team's clone fetches from ag and fast-forwards by that one commit.
		git(dir, "remote", "add", "ag", s.URL+"/git/proj.git")
		git(dir, "-c", "http.extraHeader=Authorization: Bearer "+s.AdminToken, "fetch", "-q", "ag")
		if out := git(dir, "merge", "--ff-only", "ag/main"); !strings.Contains(out, "Fast-forward") {
			t.Fatalf("git merge --ff-only ag/main printed %q, want a fast-forward", out)
		}
		after := strings.Fields(git(dir, "rev-list", "HEAD"))
		if len(after) != len(commits)+1 || after[1] != head {
			t.Fatalf("after the fetch the history has %d commits (head's parent %s), want %d, on top of %s",
				len(after), after[1], len(commits)+1, head)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "src/a.go")); string(got) != "package src // by alice\n" {
			t.Fatalf("src/a.go after the fast-forward = %q, want alice's edit", got)
		}
		if mode := strings.Fields(git(dir, "ls-tree", "HEAD", "tools/run.sh"))[0]; mode != "100755" {
			t.Errorf("tools/run.sh has mode %s after ag's commit, want 100755 kept", mode)
		}
		git(dir, "fsck", "--strict")

		// HEAD with a symbolic link no file system makes (its target empty, which only git's
		// plumbing writes): refused, naming it, and no repository made.
		bad := filepath.Join(t.TempDir(), "bad")
		git(filepath.Dir(bad), "init", "-q", bad)
		writeFile(t, bad, "a.txt", "a\n")
		git(bad, "add", "-A")
		empty := strings.TrimSpace(git(bad, "hash-object", "-w", "/dev/null"))
		git(bad, "update-index", "--add", "--cacheinfo", "120000,"+empty+",link")
		git(bad, "commit", "-q", "-m", "With a link to nothing")
		out, errOut, code = runAG(t, "repo", "import", "bad", bad, "--server", s.URL, "--token", s.AdminToken)
		if code == 0 || !strings.Contains(errOut, `"link"`) || !strings.Contains(errOut, "target is empty") {
			t.Fatalf("ag repo import of a HEAD with a link to nothing: exit %d\nstdout:\n%s\nstderr:\n%s\nwant a refusal naming link", code, out, errOut)
		}
		if _, err := s.Admin.Repos.GetRepository(context.Background(), &agwpv1.GetRepositoryRequest{Name: "bad"}); err == nil {
			t.Fatalf("a refused import created the repository")
		}
	})
}
