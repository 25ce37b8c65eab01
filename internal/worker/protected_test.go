package worker

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
	"github.com/ag-coord/ag/internal/repo"
)

// TestProtectedPathsAreTheMainlines ensures the checkout a validation runs holds the mainline's
// copy of every protected path whatever the candidate did to it: rewrote the script, replaced
// the protected directory with a link out of the checkout, put a directory where the protected
// file is, or added a file under the protected directory; and that a protected path the
// mainline does not have yet, and everything unprotected, stay the candidate's.
func TestProtectedPathsAreTheMainlines(t *testing.T) {
	t.Parallel()
	needUnix(t)
	v := &Validator{CacheDir: t.TempDir()}
	mainline := modeTreeOf(t, v, map[string]modeFile{
		"test.sh":      {repo.ModeExecutable, "grep -q broken *.txt && exit 1; exit 0\n"},
		"ci/check.sh":  {"", "echo checking\n"},
		"ci/lib/x.sh":  {"", "echo lib\n"},
		"a.txt":        {"", "fine\n"},
		"tools/run.sh": {"", "echo run\n"},
	})
	candidate := modeTreeOf(t, v, map[string]modeFile{
		"test.sh/x":    {"", "a directory where the script was\n"},
		"ci":           {repo.ModeSymlink, "../../victim"},
		"a.txt":        {"", "broken\n"},
		"new.sh":       {"", "echo new\n"},
		"tools/run.sh": {"", "exit 0\n"},
		"tools/evil":   {"", "added beside\n"},
	})
	top := t.TempDir()
	root := filepath.Join(top, "run", "tree")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := v.materialize(context.Background(), root, candidate); err != nil {
		t.Fatalf("materialize the candidate: %v", err)
	}
	o, err := overlayFor(&client.ProtectedFrom{Revision: "rev_1", Paths: []string{"ci/", "new.sh", "test.sh", "tools/"}}, candidate, mainline)
	if err != nil {
		t.Fatalf("overlayFor: %v", err)
	}
	if err := o.apply(v, root); err != nil {
		t.Fatalf("apply: %v", err)
	}
	for path, want := range map[string]string{
		"test.sh":      "grep -q broken *.txt && exit 1; exit 0\n",
		"ci/check.sh":  "echo checking\n",
		"ci/lib/x.sh":  "echo lib\n",
		"a.txt":        "broken\n",
		"new.sh":       "echo new\n",
		"tools/run.sh": "echo run\n",
	} {
		full := filepath.Join(root, filepath.FromSlash(path))
		fi, err := os.Lstat(full)
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: %v, %v; want a file", path, fi, err)
			continue
		}
		if got, _ := os.ReadFile(full); string(got) != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "test.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("test.sh: %v, %v; want the mainline's executable file", fi, err)
	}
	for _, gone := range []string{"tools/evil", "test.sh/x"} {
		if _, err := os.Lstat(filepath.Join(root, filepath.FromSlash(gone))); err == nil {
			t.Errorf("%s, which the candidate added under a protected path, is still in the checkout", gone)
		}
	}
	if _, err := os.Lstat(filepath.Join(top, "victim")); err == nil {
		t.Error("the overlay wrote through the candidate's link out of the checkout")
	}
	if got := strings.Join(o.from.Paths, ","); o.from.Revision != "rev_1" || got != "ci/,new.sh,test.sh,tools/" {
		t.Errorf("the overlay says it took %q from %s, want every protected path from rev_1", got, o.from.Revision)
	}
}

// countingRepos counts the GetTree calls fakeRepos answers.
type countingRepos struct {
	*fakeRepos
	calls atomic.Int32
}

func (c *countingRepos) GetTree(ctx context.Context, req *agwpv1.GetTreeRequest) (*agwpv1.GetTreeResponse, error) {
	c.calls.Add(1)
	return c.fakeRepos.GetTree(ctx, req)
}

// TestAMainlineTreeIsFetchedOnce ensures the candidates validated for one mainline fetch its
// tree, which their protected paths come from, once: a revision's tree never changes.
func TestAMainlineTreeIsFetchedOnce(t *testing.T) {
	t.Parallel()
	repos := &countingRepos{fakeRepos: &fakeRepos{revision: "rev_1", tree: repo.Tree{{Path: "test.sh", Digest: digestOf([]byte("exit 0\n")), Size: 7}}}}
	repos.treeDigest = repos.tree.Digest()
	mux := http.NewServeMux()
	mux.Handle(agwpv1connect.NewRepositoryServiceHandler(repos))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	v := &Validator{Client: client.New(srv.URL, "t"), CacheDir: t.TempDir()}
	for range 3 {
		tree, err := v.mainlineTree(context.Background(), "app", "rev_1")
		if err != nil || len(tree) != 1 || tree[0].Path != "test.sh" {
			t.Fatalf("mainlineTree = %v, %v; want the one file", tree, err)
		}
	}
	if n := repos.calls.Load(); n != 1 {
		t.Errorf("three validations of one mainline fetched its tree %d times, want once", n)
	}
}
