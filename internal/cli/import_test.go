package cli_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestImportMoreFilesThanOneChangeHolds ensures `ag repo import` of more files than one change
// may hold (client.MaxEditsPerChange) goes in as several changes, in path order, and leaves the
// mainline holding every file; that the import runs again over the same files (as after one
// that stopped half way); and that into a repository that validates every change it is refused
// before anything is sent, naming the limit.
func TestImportMoreFilesThanOneChangeHolds(t *testing.T) {
	t.Parallel()
	srv := agtest.Start(t, agtest.Options{})
	src := t.TempDir()
	n := client.MaxEditsPerChange + 150
	for d := range (n + 999) / 1000 {
		if err := os.Mkdir(filepath.Join(src, fmt.Sprintf("d%02d", d)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		// Some contents repeat: the import uploads each once.
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("d%02d", i/1000), fmt.Sprintf("f%05d", i)), []byte(fmt.Sprint(i%9000)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	admin := func(args ...string) (string, string, int) {
		return runCLI(append(args, "--server", srv.URL, "--token", srv.AdminToken)...)
	}
	for range 2 {
		out, errOut, code := admin("repo", "import", "big", src)
		if code != 0 || !strings.Contains(out, fmt.Sprintf("imported %d files into big in 2 changes", n)) {
			t.Fatalf("ag repo import of %d files: exit %d\n%s%s", n, code, out, errOut)
		}
	}
	tree, err := srv.Admin.Repos.GetTree(context.Background(), &agwpv1.GetTreeRequest{Repository: "big"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tree.GetEntries()) != n {
		t.Fatalf("the mainline holds %d files, want %d", len(tree.GetEntries()), n)
	}
	changes, err := srv.Admin.Repos.ListChanges(context.Background(), &agwpv1.ListChangesRequest{Repository: "big"})
	if err != nil {
		t.Fatal(err)
	}
	if len(changes.GetChanges()) != 4 {
		t.Errorf("two imports made %d changes, want 4 (two parts each)", len(changes.GetChanges()))
	}

	if out, errOut, code := runCLI("repo", "create", "checked", "--server", srv.URL, "--token", srv.AdminToken, "--", "true"); code != 0 {
		t.Fatalf("ag repo create: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code := admin("repo", "import", "checked", src)
	if code == 0 || !strings.Contains(errOut, fmt.Sprintf("more than the %d a server takes in one change", client.MaxEditsPerChange)) {
		t.Errorf("ag repo import of %d files into a validated repository: exit %d\n%s", n, code, errOut)
	}
}
