//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportedShallowHistory: a team starts from a shallow clone of its history (depth 3 of ten
// commits, a merge below where it stops). `ag repo import` keeps every commit id and the
// repository says where its history starts; an agent's `ag clone` is shallow at the same commit,
// `git fsck --strict` clean, and its `git push` lands, `git pull --rebase` bringing the commit
// back; the clone imported from and the whole history it was cut from both fast-forward to
// ag's mainline. A clone shallow elsewhere may not push, and `git clone --depth` is refused,
// each saying why.
func TestImportedShallowHistory(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		s := startServer(t, backend)
		git := gitRunner(t)
		root := t.TempDir()
		src := filepath.Join(root, "src")
		git(root, "init", "-q", "-b", "main", src)
		commit := func(msg, path string) {
			writeFile(t, src, path, msg+"\n")
			git(src, "add", "-A")
			git(src, "commit", "-q", "-m", msg)
		}
		commit("c1", "a.txt")
		commit("c2", "a.txt")
		git(src, "checkout", "-q", "-b", "side")
		commit("s1", "side.txt")
		git(src, "checkout", "-q", "main")
		commit("c3", "a.txt")
		git(src, "merge", "-q", "--no-edit", "side")
		for _, m := range []string{"c4", "c5", "c6", "c7", "c8"} {
			commit(m, "a.txt")
		}
		shallow := filepath.Join(root, "shallow")
		git(root, "clone", "-q", "--depth", "3", "file://"+src, shallow)
		boundary := readShallow(t, shallow)
		head := strings.TrimSpace(git(shallow, "rev-parse", "HEAD"))
		commits := git(shallow, "rev-list", "HEAD")
		if boundary != strings.TrimSpace(git(src, "rev-parse", "HEAD~2")) || len(strings.Fields(commits)) != 3 {
			t.Fatalf("git clone --depth 3 stops at %q with the commits\n%s", boundary, commits)
		}

		admin := []string{"--server", s.URL, "--token", s.AdminToken}
		out := mustAG(t, append([]string{"repo", "import", "app", shallow}, admin...)...)
		if !strings.Contains(out, "3 commits, 2 files at "+head+" (history from "+boundary+" on)") {
			t.Fatalf("ag repo import of a shallow clone says:\n%s", out)
		}
		if show := mustAG(t, append([]string{"repo", "show", "app"}, admin...)...); !strings.Contains(show, "(history from "+boundary+" on)") {
			t.Fatalf("ag repo show of the imported repository:\n%s", show)
		}

		// An agent that knows git.
		token := createAgent(t, s, "alice")
		dir := filepath.Join(root, "alice")
		mustAG(t, "clone", "app", dir, "--holder", "alice", "--server", s.URL, "--token", token)
		home := t.TempDir()
		agent := func(args ...string) string {
			t.Helper()
			cmd := gitCmd(home, dir, args...)
			cmd.Env = append(cmd.Env, "AG_TOKEN="+token, "AG_SERVER="+s.URL)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("alice: git %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return string(out)
		}
		if got := readShallow(t, dir); got != boundary {
			t.Fatalf("ag clone is shallow at %q, want %s", got, boundary)
		}
		if got := agent("rev-list", "HEAD"); got != commits {
			t.Fatalf("ag clone holds the commits\n%s\nwant the imported ones\n%s", got, commits)
		}
		agent("fsck", "--strict")
		mustAG(t, "lease", "acquire", "b.txt", "-C", dir, "--server", s.URL, "--token", token)
		writeFile(t, dir, "b.txt", "alice\n")
		agent("add", "b.txt")
		agent("commit", "-q", "-m", "Alice adds b")
		if out := agent("push"); !strings.Contains(out, "landed as") {
			t.Fatalf("git push from the shallow clone of ag:\n%s", out)
		}
		agent("pull", "-q", "--rebase")
		landed := strings.TrimSpace(agent("rev-parse", "HEAD"))
		if parent := strings.TrimSpace(agent("rev-parse", "HEAD^")); parent != head {
			t.Fatalf("after git pull --rebase, HEAD's parent is %s, want the imported head %s", parent, head)
		}
		if got := readShallow(t, dir); got != boundary {
			t.Fatalf("after the push and pull the clone is shallow at %q, want %s", got, boundary)
		}
		agent("fsck", "--strict")

		// The clone imported from, and the whole history it was cut from, fast-forward.
		auth := "http.extraHeader=Authorization: Bearer " + s.AdminToken
		for _, d := range []string{shallow, src} {
			git(d, "-c", auth, "pull", "-q", "--ff-only", s.URL+"/git/app.git", "main")
			if got := strings.TrimSpace(git(d, "rev-parse", "HEAD")); got != landed {
				t.Fatalf("%s after git pull from ag is at %s, want %s", d, got, landed)
			}
			git(d, "fsck", "--strict")
		}
		if _, err := os.Stat(filepath.Join(src, ".git", "shallow")); !os.IsNotExist(err) {
			t.Fatalf("a pull from ag made the whole history shallow: %v", err)
		}

		// A clone shallow at another commit may not push; git clone --depth is refused.
		other := filepath.Join(root, "other")
		git(root, "clone", "-q", "--depth", "1", "file://"+src, other)
		writeFile(t, other, "c.txt", "c\n")
		git(other, "add", "c.txt")
		git(other, "commit", "-q", "-m", "From elsewhere")
		push := gitCmd(t.TempDir(), other, "-c", "http.extraHeader=Authorization: Bearer "+token,
			"push", "-o", "ag.holder=alice", s.URL+"/git/app.git", "HEAD:refs/for/main")
		if out, err := push.CombinedOutput(); err == nil || !strings.Contains(string(out), "a push from a shallow clone") {
			t.Errorf("git push from a clone shallow at %s: %v, want a refusal naming the shallow clone:\n%s", landed, err, out)
		}
		clone := gitCmd(t.TempDir(), root, "-c", auth, "clone", "--depth", "1", s.URL+"/git/app.git", filepath.Join(root, "depth"))
		if out, err := clone.CombinedOutput(); err == nil || !strings.Contains(string(out), "ag serves no shallow fetch") {
			t.Errorf("git clone --depth 1 from ag: %v, want a refusal saying ag serves no shallow fetch:\n%s", err, out)
		}
	})
}

// readShallow answers what a clone's .git/shallow holds, "" when it has none.
func readShallow(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ".git", "shallow"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
