package importer_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/importer"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@a",
		"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@a")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestImportFromAForge ensures `ag repo import NAME URL` starts a repository from a history
// fetched over git's protocol from a forge that asks for a credential: the repository's
// mainline is the forge's HEAD commit, its every id kept, and the credential is needed.
func TestImportFromAForge(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			work := filepath.Join(root, "work")
			git(t, root, "init", "-q", "-b", "main", work)
			for i, f := range []string{"README.md", "src/main.go", "run.sh"} {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(work, f)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(work, f), []byte(strings.Repeat("x", i+1)+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				git(t, work, "add", f)
				git(t, work, "commit", "-q", "-m", "Add "+f)
			}
			head := git(t, work, "rev-parse", "HEAD")
			git(t, root, "clone", "-q", "--bare", work, filepath.Join(root, "app.git"))
			backendPath := filepath.Join(git(t, root, "--exec-path"), "git-http-backend")
			h := &cgi.Handler{Path: backendPath, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
			forge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, pass, ok := r.BasicAuth(); !ok || pass != "forge-secret" {
					w.Header().Set("WWW-Authenticate", `Basic realm="forge"`)
					http.Error(w, "who are you", http.StatusUnauthorized)
					return
				}
				h.ServeHTTP(w, r)
			}))
			defer forge.Close()

			ctx := context.Background()
			var log bytes.Buffer
			if _, _, err := importer.FetchRemote(ctx, forge.URL+"/app.git", nil, &log); err == nil {
				t.Fatal("a fetch without the credential succeeded")
			}
			dir, remove, err := importer.FetchRemote(ctx, forge.URL+"/app.git", []byte("bot:forge-secret"), &log)
			if err != nil {
				t.Fatalf("FetchRemote: %v\n%s", err, log.String())
			}
			defer remove()
			if strings.Contains(log.String(), "forge-secret") {
				t.Fatalf("the fetch's log holds the credential:\n%s", log.String())
			}
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			gi, err := importer.PlanGit(ctx, srv.Admin, "app", dir, &log)
			if err != nil {
				t.Fatalf("PlanGit: %v", err)
			}
			r, err := gi.Start(ctx, srv.Admin, func(string, int, int64) *checkout.Progress { return nil })
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			if r.GetMainlineCommit() != head {
				t.Fatalf("the imported mainline is %s, want the forge's HEAD %s", r.GetMainlineCommit(), head)
			}
			remove()
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("the fetched repository %s is left behind: %v", dir, err)
			}
		})
	}
}
