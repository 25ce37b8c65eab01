package mcp_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	agmcp "github.com/ag-coord/ag/internal/mcp"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// gitTreeAgent makes the agent principal name, clones app for it with `ag clone` (this test
// binary as ag, which git then runs as its credential helper) under holder, and answers its
// MCP session in that git working tree.
func gitTreeAgent(t *testing.T, srv *agtest.Server, name, holder string) *mcpAgentSession {
	t.Helper()
	res, err := srv.Admin.Admin.CreatePrincipal(context.Background(), &agwpv1.CreatePrincipalRequest{Name: name, Role: agwpv1.Role_ROLE_AGENT})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	agRun(t, srv.URL, res.GetToken(), "clone", "app", dir, "--holder", holder)
	return startMCPAgent(t, srv.URL, res.GetToken(), dir)
}

// gitHead answers the commit HEAD is at in the git working tree dir.
func gitHead(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// TestMCPGitTree ensures `ag mcp` works in a git working tree from ag clone as in a checkout:
// an agent leases a file, edits it and integrates it over MCP, and it lands (the mainline holds
// the edit, the tree is at the mainline's commit); integrating a path it does not lease is
// refused in the server's words, nothing integrated; status lists the lease and the local
// change, diff shows it, revert drops it; another agent's sync brings the landed change in; the
// checkout's sync options are refused; and the token is in no answer. On both stores.
func TestMCPGitTree(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	// git runs as a process, with the helper it runs: the machine's git configuration is kept
	// out, and this binary acts as ag there.
	t.Setenv(runAsAg, "1")
	t.Setenv("GIT_CONFIG_GLOBAL", os.DevNull)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	// Built with -race, each run of it as ag would otherwise wait a second on its way out.
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			src := t.TempDir()
			for p, content := range map[string]string{"src/a.go": "package a\n", "src/b.go": "package b\n", "README": "app\n"} {
				writeTestFile(t, filepath.Join(src, filepath.FromSlash(p)), content)
			}
			agRun(t, srv.URL, srv.AdminToken, "repo", "import", "app", src)
			alice, bob := gitTreeAgent(t, srv, "alice", "a1"), gitTreeAgent(t, srv, "bob", "b1")

			var st agmcp.StatusOut
			alice.ok("status", nil, &st)
			if st.Holder != "a1" || st.Behind || st.BaseRevision != gitHead(t, alice.dir) || st.MainlineCommit != st.BaseRevision || len(st.Edits) != 0 {
				t.Errorf("status of a fresh clone: %+v, want no edits at the mainline's commit", st)
			}
			writeTestFile(t, filepath.Join(alice.dir, "src", "a.go"), "package a\n\n// A is alice's.\nconst A = 1\n")
			// The server's line alone, not git's words around it.
			refusal := repo.LeaseRefusal("src/a.go", "", time.Time{})
			if text := alice.refused("integrate", map[string]any{"message": "unleased"}, refusal); text != refusal {
				t.Errorf("integrate of an unleased path: %q, want the server's refusal %q alone", text, refusal)
			}
			checkGitTreeLocal(t, alice, st.BaseRevision)

			var in agmcp.IntegrateOut
			alice.ok("integrate", map[string]any{"message": "alice's A", "wait": true}, &in)
			main := gitHead(t, alice.dir)
			if in.Change.State != "integrated" || !in.Synced || !slices.Equal(in.Change.Paths, []string{"src/a.go"}) ||
				in.Change.Author != "alice|a1" || in.Commit == "" || !strings.Contains(in.Next, "landed as "+main) {
				t.Fatalf("integrate answered %+v, want src/a.go landed and the tree at the mainline", in)
			}
			alice.ok("status", nil, &st)
			if st.Behind || len(st.Edits) != 0 || st.MainlineCommit != main || st.Mainline != in.Change.IntegratedRevision || len(st.Unpushed) != 0 {
				t.Errorf("status after integrate: %+v, want no edits, at the mainline %s", st, main)
			}
			if text, err := bob.read("ag://app/mainline/src/a.go"); err != nil || !strings.Contains(text, "const A = 1") {
				t.Errorf("the mainline's src/a.go: %q, %v; want alice's edit", text, err)
			}

			bob.ok("status", nil, &st)
			if !st.Behind || st.MainlineCommit != main {
				t.Errorf("bob's status: %+v, want behind the mainline %s", st, main)
			}
			bob.refused("sync", map[string]any{"theirs": []string{"src/a.go"}}, "an ag checkout's", "git rebase --continue")
			var synced agmcp.SyncOut
			bob.ok("sync", nil, &synced)
			if !synced.Applied || synced.Revision != main || gitHead(t, bob.dir) != main ||
				!slices.Equal(synced.Updated, []agmcp.FileView{{Path: "src/a.go", Kind: "modified", Mode: "100644", BaseMode: "100644"}}) {
				t.Errorf("bob's sync answered %+v, want src/a.go updated to %s", synced, main)
			}
			if got := readTestFile(t, filepath.Join(bob.dir, "src", "a.go")); !strings.Contains(got, "alice's") {
				t.Errorf("bob's src/a.go after sync: %q", got)
			}

			// Tasks and messages in a git working tree, which keeps no state of ag's: ag mcp
			// remembers the claim and the inbox's last message itself, and integrate pushes the
			// claim (-o ag.task): the change lands and finishes the task; the claim of a done task
			// is refused, and nothing lands.
			var claimed agmcp.TaskClaimOut
			bob.ok("task_create", map[string]any{"title": "B"}, &agmcp.TaskCreateOut{})
			bob.ok("task_claim", nil, &claimed)
			bob.ok("lease_acquire", map[string]any{"paths": []string{"src/b.go", "src/c.go"}}, &agmcp.LeaseAcquireOut{})
			writeTestFile(t, filepath.Join(bob.dir, "src", "b.go"), "package b // bob's\n")
			var forTask agmcp.IntegrateOut
			bob.ok("integrate", map[string]any{"message": "B", "task": claimed.Task.ID, "wait": true}, &forTask)
			if forTask.Change.State != "integrated" || forTask.Change.Task != claimed.Claim {
				t.Fatalf("integrate with the task claim in a git working tree: %+v, want integrated carrying %s", forTask.Change, claimed.Claim)
			}
			writeTestFile(t, filepath.Join(bob.dir, "src", "c.go"), "package b // more\n")
			bob.refused("integrate", map[string]any{"message": "C", "task": claimed.Claim}, "is done: change", "finished it", "do not push for that task")
			alice.ok("message_send", map[string]any{"to_holder": "bob|b1", "text": "B is yours"}, &agmcp.MessageSendOut{})
			var inbox agmcp.InboxOut
			bob.ok("inbox", nil, &inbox)
			if len(inbox.Messages) != 1 || inbox.Messages[0].From != "alice|a1" {
				t.Errorf("bob's inbox: %+v, want alice's message", inbox.Messages)
			}
			bob.ok("inbox", nil, &inbox)
			if len(inbox.Messages) != 0 {
				t.Errorf("bob's inbox again: %+v, want nothing new", inbox.Messages)
			}

			var rel agmcp.LeaseReleaseOut
			alice.ok("lease_release", nil, &rel)
			if len(rel.Released) != 1 || !slices.Equal(rel.Released[0].Paths, []string{"src/a.go"}) {
				t.Errorf("lease_release answered %+v, want the lease of src/a.go", rel)
			}
			alice.assertNoToken()
			bob.assertNoToken()
		})
	}
}

// checkGitTreeLocal checks, after an integrate refused for want of a lease, that the edit is
// still a local change on HEAD (base), that lease_acquire and status show the lease and the
// edit, that diff shows it, and that revert drops other edits (a changed file, a new one) and
// leaves it. The edit of src/a.go is then leased, and what remains.
func checkGitTreeLocal(t *testing.T, alice *mcpAgentSession, base string) {
	t.Helper()
	var got agmcp.LeaseAcquireOut
	alice.ok("lease_acquire", map[string]any{"paths": []string{"src/a.go"}, "ttl": "5m"}, &got)
	if got.Lease.Holder != "alice|a1" || !got.Lease.Mine {
		t.Errorf("lease_acquire answered %+v, want a lease of alice|a1", got.Lease)
	}
	writeTestFile(t, filepath.Join(alice.dir, "src", "b.go"), "package b // not to keep\n")
	writeTestFile(t, filepath.Join(alice.dir, "src", "new", "c.go"), "package c\n")

	var st agmcp.StatusOut
	alice.ok("status", nil, &st)
	wantEdits := []agmcp.FileView{{Path: "src/a.go", Kind: "modified", Mode: "100644", BaseMode: "100644"},
		{Path: "src/b.go", Kind: "modified", Mode: "100644", BaseMode: "100644"}, {Path: "src/new/c.go", Kind: "added", Mode: "100644"}}
	if st.BaseRevision != base || st.Behind || !slices.Equal(st.Edits, wantEdits) || len(st.Leases) != 1 || st.Leases[0].ID != got.Lease.ID ||
		st.Leases[0].SecondsLeft <= 0 || !slices.Equal(st.Unleased, []string{"src/b.go", "src/new/c.go"}) || len(st.GitStatus) != 3 {
		t.Errorf("status: %+v, want the three edits on %s, src/a.go under the one lease", st, base)
	}

	var diff agmcp.DiffOut
	alice.ok("diff", map[string]any{"paths": []string{"src/a.go", "src/new/"}}, &diff)
	if diff.BaseRevision != base || len(diff.Files) != 2 || diff.Files[0].Path != "src/a.go" || !strings.Contains(diff.Files[0].Diff, "+const A = 1") ||
		diff.Files[1].Status != "added" || !strings.Contains(diff.Files[1].Diff, "+package c") {
		t.Errorf("diff answered %+v, want src/a.go's edit and src/new/c.go added, against %s", diff, base)
	}

	var reverted agmcp.RevertOut
	alice.ok("revert", map[string]any{"paths": []string{"src/b.go", "src/new/"}}, &reverted)
	if !slices.Equal(reverted.Reverted, []agmcp.FileView{{Path: "src/b.go", Kind: "modified"}, {Path: "src/new/c.go", Kind: "added"}}) {
		t.Errorf("revert answered %+v", reverted)
	}
	if got := readTestFile(t, filepath.Join(alice.dir, "src", "b.go")); got != "package b\n" {
		t.Errorf("src/b.go after revert: %q, want HEAD's", got)
	}
	if _, err := os.Stat(filepath.Join(alice.dir, "src", "new")); !os.IsNotExist(err) {
		t.Errorf("src/new after revert: %v, want it gone", err)
	}
	alice.ok("diff", nil, &diff)
	if len(diff.Files) != 1 || diff.Files[0].Path != "src/a.go" {
		t.Errorf("diff after revert: %+v, want src/a.go's edit alone", diff.Files)
	}
}
