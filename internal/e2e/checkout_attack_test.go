//go:build unix

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// TestReservedPathsRefused ensures an agent cannot bring into a repository a path that would
// plant a server address for ag (.ag/checkout.json) or a command for git (.git/config, under
// any case) in whoever checks it out, nor one no file system holds (a 300-byte segment): the
// lease and the integration are both refused with invalid_argument naming the path and the
// rule, and the mainline does not move.
func TestReservedPathsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		ctx := context.Background()
		s := startServer(t, backend)
		if _, err := s.Admin.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "app"}); err != nil {
			t.Fatalf("create repository app: %v", err)
		}
		mallory := client.New(s.URL, s.principal(t, "mallory", agwpv1.Role_ROLE_AGENT), client.WithRetries(0, 0))
		mainline := s.mainline(t)
		// A lease on a path she may hold, whose token she sends along with each hostile edit.
		lease, err := mallory.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{"README.md"}, Holder: "m1"})
		if err != nil {
			t.Fatalf("lease README.md: %v", err)
		}
		long := "src/" + strings.Repeat("n", 300)
		for _, c := range []struct{ path, rule string }{
			{".ag/checkout.json", `has a segment ".ag", which names .ag`},
			{".git/config", `has a segment ".git", which names .git`},
			{".Git/config", `has a segment ".Git", which names .git`},
			{"docs/.git/hooks/post-checkout", `has a segment ".git", which names .git`},
			{long, "has a segment of 300 bytes, more than 255"},
		} {
			// The server cuts a long path in its message.
			named := c.path[:min(len(c.path), 200)]

			_, err := mallory.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{c.path}, Holder: "m1"})
			if !client.IsCode(err, connect.CodeInvalidArgument) || !containsAll(err.Error(), named, c.rule) {
				t.Errorf("lease %.40q: %v; want invalid_argument naming the path and %q", c.path, err, c.rule)
			}

			_, err = mallory.IntegrateFiles(ctx, client.IntegrateOptions{
				Repository: "app", BaseRevision: mainline, Holder: "m1", FencingTokens: []uint64{lease.GetFencingToken()},
				Message: "plant " + c.path[:min(len(c.path), 40)],
				Changes: []client.FileChange{
					{Path: "README.md", Content: []byte("# app\n")},
					{Path: c.path, Content: []byte("[core]\n\tfsmonitor = touch /tmp/pwned\n")},
				},
			})
			if !client.IsCode(err, connect.CodeInvalidArgument) || !containsAll(err.Error(), "edits[1].path", named, c.rule) {
				t.Errorf("integrate %.40q: %v; want invalid_argument naming edits[1].path, the path and %q", c.path, err, c.rule)
			}
		}
		if got := s.mainline(t); got != mainline {
			t.Errorf("after the refused integrations the mainline is %s, want %s", got, mainline)
		}
	})
}

// TestSyncAcrossFileDirectorySwap ensures a checkout made by `ag checkout` follows, with `ag
// sync`, a mainline on which files became directories (a → a/b/c, at the top; n/m → n/m/o,
// nested) and then back, and ends with no local edits each time.
func TestSyncAcrossFileDirectorySwap(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		ctx := context.Background()
		s := startServer(t, backend)
		admin := func(args ...string) []string { return append(args, "--server", s.URL, "--token", s.AdminToken) }
		files := map[string]string{"a": "a, a file\n", "n/m": "m, a file\n", "n/keep": "keep\n", "README.md": "# app\n"}
		dirs := map[string]string{"a/b/c": "c, under the directory a\n", "n/m/o": "o, under the directory n/m\n", "n/keep": "keep\n", "README.md": "# app\n"}
		src := t.TempDir()
		writeTree(t, src, files)
		mustAG(t, admin("repo", "import", "app", src)...)

		alice := &agentShell{s: s, holder: "alice|a1", dir: filepath.Join(t.TempDir(), "alice"), token: createAgent(t, s, "alice")}
		mustAG(t, "checkout", "app", alice.dir, "--holder", "a1", "--server", s.URL, "--token", alice.token)
		assertTree(t, alice.dir, files)

		bob := client.New(s.URL, s.principal(t, "bob", agwpv1.Role_ROLE_AGENT), client.WithRetries(0, 0))
		lease, err := bob.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{"a", "a/", "n/"}, Holder: "b1"})
		if err != nil {
			t.Fatalf("bob's lease on a, a/ and n/: %v", err)
		}
		// replace integrates, as bob, the mainline's move from one tree to the other.
		replace := func(from, to map[string]string) string {
			t.Helper()
			var changes []client.FileChange
			for p := range from {
				if _, ok := to[p]; !ok {
					changes = append(changes, client.FileChange{Path: p, Delete: true})
				}
			}
			for p, c := range to {
				if from[p] != c {
					changes = append(changes, client.FileChange{Path: p, Content: []byte(c)})
				}
			}
			change, err := bob.IntegrateFiles(ctx, client.IntegrateOptions{
				Repository: "app", BaseRevision: s.mainline(t), Holder: "b1", FencingTokens: []uint64{lease.GetFencingToken()},
				Message: "swap files and directories", Changes: changes,
			})
			if err != nil || change.GetState() != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED {
				t.Fatalf("bob's integration: %v (change %v)", err, change)
			}
			return change.GetIntegratedRevision()
		}
		for _, step := range []struct {
			name     string
			from, to map[string]string
		}{{"files to directories", files, dirs}, {"directories to files", dirs, files}} {
			rev := replace(step.from, step.to)
			if out := alice.must(t, "sync"); out != "synced to "+rev+": 4 files updated\n" {
				t.Errorf("ag sync (%s) printed %q, want \"synced to %s: 4 files updated\"", step.name, out, rev)
			}
			assertTree(t, alice.dir, step.to)
			if out := alice.must(t, "status"); !containsAll(out, "mainline "+rev+": up to date", "no local edits") {
				t.Errorf("ag status after the sync (%s):\n%s\nwant up to date with no local edits", step.name, out)
			}
		}
	})
}
