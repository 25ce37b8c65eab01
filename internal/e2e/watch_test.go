package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// TestWatchedCheckout ensures that with `ag watch --background` running, `ag status` sees
// every local edit and a sync's writes as it does without, and that `ag watch --stop` stops it
// and takes its socket away.
func TestWatchedCheckout(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		ctx := context.Background()
		s := startServer(t, backend)
		files := map[string]string{"README.md": "# app\n", "src/a.go": "package src\n", "src/b.go": "package src // b\n", "docs/x.md": "x\n"}
		src := t.TempDir()
		writeTree(t, src, files)
		mustAG(t, "repo", "import", "app", src, "--server", s.URL, "--token", s.AdminToken)
		alice := &agentShell{s: s, holder: "alice|a1", dir: filepath.Join(t.TempDir(), "alice"), token: createAgent(t, s, "alice")}
		mustAG(t, "checkout", "app", alice.dir, "--holder", "a1", "--server", s.URL, "--token", alice.token)

		if out := alice.must(t, "watch", "--background"); !strings.HasPrefix(out, "watching "+alice.dir) {
			t.Fatalf("ag watch --background printed %q", out)
		}
		t.Cleanup(func() { runAG(t, alice.args([]string{"watch", "--stop"})...) })
		if out := alice.must(t, "watch", "--background"); !strings.HasPrefix(out, "a watcher already watches") {
			t.Errorf("a second ag watch --background printed %q, want it to find the first", out)
		}
		edits := func() []string {
			t.Helper()
			var st struct {
				Edits []struct {
					Path, Status string
				} `json:"edits"`
			}
			if err := json.Unmarshal([]byte(alice.must(t, "status", "--json")), &st); err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, e := range st.Edits {
				out = append(out, e.Status+" "+e.Path)
			}
			return out
		}
		if got := edits(); len(got) != 0 {
			t.Fatalf("edits right after the checkout: %q", got)
		}
		write := func(p, content string) {
			t.Helper()
			full := filepath.Join(alice.dir, filepath.FromSlash(p))
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write("src/a.go", "package src // edited\n")
		write("new/dir/n.go", "package dir\n")
		if err := os.Remove(filepath.Join(alice.dir, "docs", "x.md")); err != nil {
			t.Fatal(err)
		}
		want := []string{"deleted docs/x.md", "added new/dir/n.go", "modified src/a.go"}
		if got := edits(); !slices.Equal(got, want) {
			t.Errorf("edits with the watcher: %q, want %q", got, want)
		}

		// Bob changes src/b.go in the mainline; alice's sync writes it, and it is no edit of hers.
		bob := client.New(s.URL, s.principal(t, "bob", agwpv1.Role_ROLE_AGENT), client.WithRetries(0, 0))
		lease, err := bob.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{"src/b.go"}, Holder: "b1"})
		if err != nil {
			t.Fatal(err)
		}
		change, err := bob.IntegrateFiles(ctx, client.IntegrateOptions{
			Repository: "app", BaseRevision: s.mainline(t), Holder: "b1", FencingTokens: []uint64{lease.GetFencingToken()},
			Message: "b", Changes: []client.FileChange{{Path: "src/b.go", Content: []byte("package src // b, by bob\n")}},
		})
		if err != nil || change.GetState() != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED {
			t.Fatalf("bob's integration: %v (change %v)", err, change)
		}
		alice.must(t, "sync")
		if got := edits(); !slices.Equal(got, want) {
			t.Errorf("edits after the sync, with the watcher: %q, want %q", got, want)
		}

		if out := alice.must(t, "watch", "--stop"); !strings.HasPrefix(out, "stopped the watcher of "+alice.dir) {
			t.Errorf("ag watch --stop printed %q", out)
		}
		eventually(t, "the watcher's socket goes", func() (bool, string) {
			_, err := os.Lstat(filepath.Join(alice.dir, ".ag", "watch.sock"))
			return os.IsNotExist(err), "socket still there"
		})
		if got := edits(); !slices.Equal(got, want) {
			t.Errorf("edits after the watcher stopped: %q, want %q", got, want)
		}
	})
}
