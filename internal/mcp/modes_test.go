package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	agmcp "github.com/ag-coord/ag/internal/mcp"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestMCPShowsModes ensures the MCP tools and resources say what a path's mode is: status names
// a chmod and a new link by their modes (and the link's target) and lists the submodules;
// integrate lands them as they are on disk; the mainline listing gives every path's mode, and
// a submodule's resource says it is one.
func TestMCPShowsModes(t *testing.T) {
	t.Parallel()
	srv := agtest.Start(t, agtest.Options{})
	history := t.TempDir()
	commit := strings.Repeat("5e", 20)
	git := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Stdin = history, strings.NewReader(stdin)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=a",
			"GIT_COMMITTER_EMAIL=a@example.com", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("", "init", "-q", "-b", "main")
	for _, e := range []struct{ mode, path, content string }{
		{repo.ModeFile, "run.sh", "#!/bin/sh\n"}, {repo.ModeExecutable, "tool.sh", "#!/bin/sh\n"}, {repo.ModeSymlink, "l", "run.sh"},
	} {
		blob := git(e.content, "hash-object", "-w", "--stdin")
		git("", "update-index", "--add", "--cacheinfo", e.mode+","+blob+","+e.path)
	}
	git("", "update-index", "--add", "--cacheinfo", repo.ModeGitlink+","+commit+",vendor/lib")
	git("", "update-ref", "refs/heads/main", git("", "commit-tree", git("", "write-tree"), "-m", "modes"))
	agRun(t, srv.URL, srv.AdminToken, "repo", "import", "app", history)
	res, err := srv.Admin.Admin.CreatePrincipal(context.Background(), &agwpv1.CreatePrincipalRequest{Name: "alice", Role: agwpv1.Role_ROLE_AGENT})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "alice")
	agRun(t, srv.URL, res.GetToken(), "checkout", "app", dir)
	alice := startMCPAgent(t, srv.URL, res.GetToken(), dir)

	if err := os.Chmod(filepath.Join(dir, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("tool.sh", filepath.Join(dir, "new")); err != nil {
		t.Fatal(err)
	}
	var st agmcp.StatusOut
	alice.ok("status", nil, &st)
	want := []agmcp.FileView{{Path: "new", Kind: "added", Mode: "120000", Target: "tool.sh"}, {Path: "run.sh", Kind: "modified", Mode: "100755", BaseMode: "100644"}}
	if !slices.Equal(st.Edits, want) || !slices.Equal(st.Submodules, []checkout.Submodule{{Path: "vendor/lib", Commit: commit}}) {
		t.Errorf("status: edits %+v, submodules %+v; want %+v and vendor/lib at %s", st.Edits, st.Submodules, want, commit)
	}
	var acquired agmcp.LeaseAcquireOut
	alice.ok("lease_acquire", map[string]any{"paths": []string{"run.sh", "new"}}, &acquired)
	var in agmcp.IntegrateOut
	alice.ok("integrate", map[string]any{"message": "modes"}, &in)
	if in.Change.State != "integrated" {
		t.Fatalf("integrate: %+v", in)
	}

	text, err := alice.read("ag://app/mainline")
	if err != nil {
		t.Fatal(err)
	}
	var listing agmcp.MainlineListing
	if err := json.Unmarshal([]byte(text), &listing); err != nil {
		t.Fatal(err)
	}
	modes := map[string]string{}
	for _, f := range listing.Files {
		modes[f.Path] = f.Mode + f.Commit
	}
	wantModes := map[string]string{"run.sh": "100755", "tool.sh": "100755", "l": "120000", "new": "120000", "vendor/lib": "160000" + commit}
	for p, m := range wantModes {
		if modes[p] != m {
			t.Errorf("the mainline listing gives %s mode %q, want %q (all: %v)", p, modes[p], m, modes)
		}
	}
	if target, err := alice.read("ag://app/mainline/new"); err != nil || target != "tool.sh" {
		t.Errorf("the resource of the link new: %q, %v; want its target", target, err)
	}
	if _, err := alice.read("ag://app/mainline/vendor/lib"); err == nil || !strings.Contains(err.Error(), "is a submodule at commit "+commit) {
		t.Errorf("the resource of the submodule vendor/lib: %v, want an error saying it is a submodule", err)
	}
}
