package importer_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/importer"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestImportAShallowCloneOfAForge ensures `ag repo import --depth N URL` makes a shallow clone
// of a forge that asks for a credential (given to git for the forge's host alone, never on its
// command line or in the log), reads its history to where it stops (a merge's two parents, at
// depth 2) without asking for what lies below, and starts a repository there, every id kept.
func TestImportAShallowCloneOfAForge(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := t.TempDir()
	work := filepath.Join(root, "work")
	git(t, root, "init", "-q", "-b", "main", work)
	commit := func(msg string) {
		if err := os.WriteFile(filepath.Join(work, msg+".txt"), []byte(msg+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		git(t, work, "add", "-A")
		git(t, work, "commit", "-q", "-m", msg)
	}
	commit("c1")
	commit("c2")
	git(t, work, "checkout", "-q", "-b", "side")
	commit("s1")
	git(t, work, "checkout", "-q", "main")
	commit("c3")
	git(t, work, "merge", "-q", "--no-edit", "side")
	head := git(t, work, "rev-parse", "HEAD")
	boundary := strings.Fields(git(t, work, "rev-parse", "HEAD^1", "HEAD^2"))
	slices.Sort(boundary)
	git(t, root, "clone", "-q", "--bare", work, filepath.Join(root, "app.git"))
	backendPath := filepath.Join(git(t, root, "--exec-path"), "git-http-backend")
	h := &cgi.Handler{Path: backendPath, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	forge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != "bot" || pass != "forge-secret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="forge"`)
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer forge.Close()

	ctx := context.Background()
	var log bytes.Buffer
	depth2 := importer.Shallow{Depth: 2}
	if _, _, err := importer.Fetch(ctx, forge.URL+"/app.git", nil, depth2, &log); err == nil {
		t.Fatal("a shallow clone without the credential succeeded")
	}
	dir, remove, err := importer.Fetch(ctx, forge.URL+"/app.git", []byte("bot:forge-secret\n"), depth2, &log)
	if err != nil {
		t.Fatalf("Fetch --depth 2: %v\n%s", err, log.String())
	}
	defer remove()
	if strings.Contains(log.String(), "forge-secret") {
		t.Fatalf("the clone's log holds the credential:\n%s", log.String())
	}
	st, err := importer.OpenGitStorage(dir)
	if err != nil {
		t.Fatal(err)
	}
	hist, err := importer.ReadGitHistory(ctx, st)
	if err != nil {
		t.Fatalf("ReadGitHistory of a shallow clone: %v", err)
	}
	if hist.Head.String() != head || len(hist.Commits) != 3 || !slices.Equal(hist.ShallowIDs(), boundary) {
		t.Fatalf("the shallow clone's history: head %s, %d commits, stopping at %v; want %s, 3, %v",
			hist.Head, len(hist.Commits), hist.ShallowIDs(), head, boundary)
	}

	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			gi, err := importer.PlanGit(ctx, srv.Admin, "app", dir, &log)
			if err != nil {
				t.Fatalf("PlanGit: %v", err)
			}
			r, err := gi.Start(ctx, srv.Admin, func(string, int, int64) *checkout.Progress { return nil })
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			if r.GetMainlineCommit() != head || !slices.Equal(r.GetShallow(), boundary) {
				t.Fatalf("the imported repository is at %s, shallow at %v; want %s, %v", r.GetMainlineCommit(), r.GetShallow(), head, boundary)
			}
		})
	}
	for _, bad := range []importer.Shallow{{Depth: -1}, {Depth: 2, Since: "2020-01-01"}} {
		var usage *checkout.UsageError
		if _, _, err := importer.Fetch(ctx, work, nil, bad, &log); !errors.As(err, &usage) {
			t.Errorf("Fetch with %+v = %v, want a usage error", bad, err)
		}
	}
}
