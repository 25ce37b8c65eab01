package cli_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestImportKeepsThePacksDeltas: `ag repo import` of a history git packed with deltas (a file
// that changes a line a commit, an executable script, and a commit made after the repack, so
// loose objects too) sends the pack's deltas as they are, and the store keeps them as deltas,
// also when the run finishes an import that stopped after sending the deltas' bases; `git
// clone` from ag then holds the same commits and files, `git fsck --strict` clean.
func TestImportKeepsThePacksDeltas(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := &cliEnv{t: t, srv: agtest.Start(t, agtest.Options{Backend: backend})}
			root := t.TempDir()
			src := filepath.Join(root, "src")
			gitIn(t, root, "", "init", "-q", "-b", "main", src)
			var lines []string
			for i := range 300 {
				lines = append(lines, fmt.Sprintf("line %d of a file that changes a line at a time", i))
			}
			mkfile(t, filepath.Join(src, "run.sh"), "#!/bin/sh\necho run\n")
			if err := os.Chmod(filepath.Join(src, "run.sh"), 0o755); err != nil {
				t.Fatal(err)
			}
			for i := range 12 {
				lines[i*20] = fmt.Sprintf("line %d, changed in commit %d", i*20, i)
				mkfile(t, filepath.Join(src, "notes.txt"), strings.Join(lines, "\n")+"\n")
				gitIn(t, src, "", "add", "-A")
				commitOn(t, src, i+1, fmt.Sprintf("change %d", i))
			}
			gitIn(t, src, "", "repack", "-adf", "-q")
			lines[7] = "a change after the repack"
			mkfile(t, filepath.Join(src, "notes.txt"), strings.Join(lines, "\n")+"\n")
			head := commitOn(t, src, 20, "after the repack")

			// The blobs of notes.txt git keeps as deltas in its pack.
			var versions []plumbing.Hash
			for _, c := range strings.Fields(gitIn(t, src, "", "rev-list", "HEAD")) {
				versions = append(versions, plumbing.NewHash(gitIn(t, src, "", "rev-parse", c+":notes.txt")))
			}
			idx, err := filepath.Glob(filepath.Join(src, ".git", "objects", "pack", "*.idx"))
			if err != nil || len(idx) != 1 {
				t.Fatalf("the repacked source has the packs %v (%v)", idx, err)
			}
			packed := 0
			var bases []string // the blobs the pack keeps whole
			for _, line := range strings.Split(gitIn(t, src, "", "verify-pack", "-v", idx[0]), "\n") {
				f := strings.Fields(line)
				switch {
				case len(f) == 7 && f[1] == "blob":
					packed++
				case len(f) == 5 && f[1] == "blob":
					bases = append(bases, f[0])
				}
			}
			if packed < 5 {
				t.Fatalf("git's pack keeps %d blobs as deltas; the test wants a history it deltifies", packed)
			}

			// An import that stopped after sending the pack's whole blobs: the next run sends
			// the deltas against them, which the server holds.
			var sent []*agwpv1.GitObject
			for _, id := range bases {
				sent = append(sent, &agwpv1.GitObject{Type: "blob", Data: []byte(gitIn(t, src, "", "cat-file", "blob", id) + "\n")})
			}
			res, err := e.srv.Admin.Repos.UploadGitObjects(context.Background(), &agwpv1.UploadGitObjectsRequest{Objects: sent})
			if err != nil || !slices.Equal(res.GetIds(), bases) {
				t.Fatalf("upload the pack's whole blobs: %v, %v; want %v", res.GetIds(), err, bases)
			}
			e.admin("repo", "import", "app", src)
			kept, err := e.srv.Store.ReadStoredDeltas(context.Background(), versions)
			if err != nil {
				t.Fatal(err)
			}
			if len(kept) < packed {
				t.Fatalf("the store keeps %d versions of notes.txt as deltas; git's pack kept %d blobs so", len(kept), packed)
			}

			auth := "http.extraHeader=Authorization: Bearer " + e.srv.AdminToken
			clone := filepath.Join(root, "clone")
			gitIn(t, root, "", "-c", auth, "clone", "-q", e.srv.URL+"/git/app.git", clone)
			gitIn(t, clone, "", "fsck", "--strict")
			if got := gitIn(t, clone, "", "rev-parse", "HEAD"); got != head {
				t.Fatalf("the clone from ag is at %s, want %s", got, head)
			}
			for _, c := range strings.Fields(gitIn(t, src, "", "rev-list", "HEAD")) {
				if got, want := gitIn(t, clone, "", "rev-parse", c+"^{tree}"), gitIn(t, src, "", "rev-parse", c+"^{tree}"); got != want {
					t.Fatalf("commit %s has the tree %s in the clone, %s in the source", c, got, want)
				}
			}
			got, err := os.ReadFile(filepath.Join(clone, "notes.txt"))
			if err != nil || string(got) != strings.Join(lines, "\n")+"\n" {
				t.Fatalf("notes.txt in the clone differs from the source's (%v)", err)
			}
			if fi, err := os.Stat(filepath.Join(clone, "run.sh")); err != nil || fi.Mode()&0o111 == 0 {
				t.Fatalf("run.sh in the clone: %v, %v; want it executable", fi, err)
			}
		})
	}
}
