package gitstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"

	"github.com/ag-coord/ag/internal/repo"
)

// gitIndex is a git repository whose index the test edits as UpdateTree's edits say, so that
// `git write-tree` answers the tree git makes of the same files.
type gitIndex struct {
	t   *testing.T
	env []string
	dir string
}

func newGitIndex(t *testing.T) *gitIndex {
	needGit(t)
	x := &gitIndex{t: t, env: gitEnv(t), dir: t.TempDir()}
	git(t, x.env, x.dir, nil, "init", "-q")
	return x
}

// set puts path into the index with mode and the blob of content, or the commit id of a
// submodule.
func (x *gitIndex) set(path string, mode filemode.FileMode, content string) {
	id := content
	if mode != filemode.Submodule {
		id = strings.TrimSpace(git(x.t, x.env, x.dir, []byte(content), "hash-object", "-w", "--stdin"))
	}
	git(x.t, x.env, x.dir, nil, "update-index", "--add", "--cacheinfo", fmt.Sprintf("%o,%s,%s", uint32(mode), id, path))
}

func (x *gitIndex) remove(path string) {
	git(x.t, x.env, x.dir, nil, "update-index", "--force-remove", path)
}

func (x *gitIndex) writeTree() plumbing.Hash {
	return plumbing.NewHash(strings.TrimSpace(git(x.t, x.env, x.dir, nil, "write-tree")))
}

// change is one edit of a test, as UpdateTree takes it (mode zero: keep the path's), and the
// mode git has for the path afterwards.
type change struct {
	path       string
	mode, want filemode.FileMode
	content    string // a submodule's: its commit
	delete     bool
}

// TestTreesKeepModesAsGitDoes ensures WriteTree and UpdateTree write what git writes for files of
// every mode: executable files, symbolic links and submodules, written whole, then changed by
// edits that give a mode, take the path's (a script edited stays executable, a link retargeted
// stays a link), or move a submodule, through the general path and through the splice of a
// storer that keeps trees packed.
func TestTreesKeepModesAsGitDoes(t *testing.T) {
	files := []change{
		{path: "README.md", want: filemode.Regular, content: "# app\n"},
		{path: "bin/run", want: filemode.Symlink, content: "../scripts/run.sh"},
		{path: "etc-passwd", want: filemode.Symlink, content: "../../etc/passwd"},
		{path: "scripts/run.sh", want: filemode.Executable, content: "#!/bin/sh\necho run\n"},
		{path: "scripts/lib.sh", want: filemode.Regular, content: "helper() { :; }\n"},
		{path: "vendor/lib", want: filemode.Submodule, content: strings.Repeat("5e", 20)},
		{path: "vendor/lib.txt", want: filemode.Regular, content: "beside the submodule\n"},
	}
	steps := []struct {
		what    string
		changes []change
	}{
		{"chmod +x alone", []change{{path: "scripts/lib.sh", mode: filemode.Executable, want: filemode.Executable, content: "helper() { :; }\n"}}},
		{"a script edited without a mode stays executable", []change{{path: "scripts/run.sh", want: filemode.Executable, content: "#!/bin/sh\necho run2\n"}}},
		{"chmod -x alone", []change{{path: "scripts/run.sh", mode: filemode.Regular, want: filemode.Regular, content: "#!/bin/sh\necho run2\n"}}},
		{"a link retargeted without a mode stays a link", []change{{path: "bin/run", want: filemode.Symlink, content: "../scripts/lib.sh"}}},
		{"a new link", []change{{path: "docs/readme", mode: filemode.Symlink, want: filemode.Symlink, content: "../README.md"}}},
		{"a link made a file", []change{{path: "etc-passwd", mode: filemode.Regular, want: filemode.Regular, content: "../../etc/passwd"}}},
		{"a submodule moved on", []change{{path: "vendor/lib", mode: filemode.Submodule, want: filemode.Submodule, content: strings.Repeat("6f", 20)}}},
		{"a link deleted and a file written beside it", []change{{path: "bin/run", delete: true}, {path: "bin/tool", want: filemode.Regular, content: "tool\n"}}},
	}
	for _, packed := range []bool{false, true} {
		t.Run(fmt.Sprintf("packed=%v", packed), func(t *testing.T) {
			x := newGitIndex(t)
			s := newStorer()
			// idOf stores c's blob and answers its id, or a submodule's commit.
			idOf := func(c change) plumbing.Hash {
				if c.want == filemode.Submodule {
					return plumbing.NewHash(c.content)
				}
				id, err := WriteBlob(s, []byte(c.content))
				if err != nil {
					t.Fatal(err)
				}
				return id
			}
			var list []File
			for _, f := range files {
				x.set(f.path, f.want, f.content)
				list = append(list, File{Path: f.path, Blob: idOf(f), Mode: f.want})
			}
			root, err := WriteTree(s, list)
			if err != nil {
				t.Fatalf("WriteTree: %v", err)
			}
			if want := x.writeTree(); root != want {
				t.Fatalf("WriteTree of every mode = %s, git write-tree says %s", root, want)
			}
			for _, step := range steps {
				var edits []Edit
				for _, c := range step.changes {
					if c.delete {
						edits = append(edits, Edit{Path: c.path, Delete: true})
						x.remove(c.path)
						continue
					}
					edits = append(edits, Edit{Path: c.path, Blob: idOf(c), Mode: c.mode})
					x.set(c.path, c.want, c.content)
				}
				if packed {
					root, err = UpdateTree(packingStorer{s, t}, root, edits)
				} else {
					root, err = UpdateTree(s, root, edits)
				}
				if err != nil {
					t.Fatalf("%s: UpdateTree: %v", step.what, err)
				}
				if want := x.writeTree(); root != want {
					t.Fatalf("%s: UpdateTree = %s, git write-tree says %s", step.what, root, want)
				}
			}

			// Nothing is written into a submodule, nor deleted from one.
			for _, e := range []Edit{{Path: "vendor/lib/x.go", Blob: BlobID(nil)}, {Path: "vendor/lib/x.go", Delete: true}} {
				_, err := UpdateTree(s, root, []Edit{e})
				var invalid *repo.InvalidEditError
				if !errors.As(err, &invalid) || invalid.Path != "vendor/lib" || !strings.Contains(err.Error(), "submodule") {
					t.Errorf("UpdateTree(%+v) = %v, want a refusal naming the submodule vendor/lib", e, err)
				}
			}
		})
	}
}
