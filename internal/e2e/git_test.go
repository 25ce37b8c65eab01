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

// TestGitFollowsTheGatedMainline is the "done when" in small: a person clones the
// repository from ag with the real git client and a reader's token; agents integrate through
// leases and the gate; `git fetch` then fast-forwards by one commit per change, each naming its
// author, its change, the lease tokens it was integrated under and the attestation that
// validated exactly its tree, which `ag attestation verify` checks against
// `git rev-parse HEAD^{tree}`. A rejected change adds no commit, and the clone stays
// `git fsck --strict` clean.
func TestGitFollowsTheGatedMainline(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is not installed: %v", err)
	}
	forEachBackend(t, func(t *testing.T, backend string) {
		g := startGate(t, backend, gateFiles, "--timeout", "60s", "--", "sh", "check.sh")
		w := g.worker(t, "w1", 30*time.Second)
		reader := g.principal(t, "reviewer", agwpv1.Role_ROLE_READER)
		home := t.TempDir()
		git := func(dir string, args ...string) string {
			t.Helper()
			cmd := exec.Command("git", args...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
				"GIT_AUTHOR_NAME=x", "GIT_AUTHOR_EMAIL=x@example.com", "GIT_COMMITTER_NAME=x", "GIT_COMMITTER_EMAIL=x@example.com")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return string(out)
		}
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
