package gitpush_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/ag-coord/ag/internal/gitpush"
)

// git runs the git binary in dir and answers its output.
func git(t *testing.T, dir string, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = []string{"HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@a",
		"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@a", "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z"}
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// history is a git repository with a base commit (the mainline, held by the server) and a tip
// on it, and the pack of the tip's objects that base does not reach.
type history struct {
	dir       string
	base, tip plumbing.Hash
	held      *memory.Storage
	pack      []byte
}

func newHistory(t *testing.T) *history {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	git(t, dir, nil, "init", "-q", "-b", "main")
	write := func(files map[string]string) {
		for p, c := range files {
			full := filepath.Join(dir, p)
			if err := writeFile(full, c); err != nil {
				t.Fatal(err)
			}
			git(t, dir, nil, "add", p)
		}
	}
	write(map[string]string{"README.md": "# app\n", "src/a.go": "a\n", "src/b.go": "b\n", "docs/x.md": "x\n"})
	git(t, dir, nil, "commit", "-q", "-m", "base")
	h := &history{dir: dir, base: plumbing.NewHash(git(t, dir, nil, "rev-parse", "HEAD"))}
	write(map[string]string{"src/a.go": "a2\n", "src/c.go": "c\n"})
	git(t, dir, nil, "rm", "-q", "docs/x.md")
	git(t, dir, nil, "update-index", "--chmod=+x", "src/b.go")
	git(t, dir, nil, "commit", "-q", "-m", "one")
	write(map[string]string{"docs": "now a file\n"})
	git(t, dir, nil, "commit", "-q", "-m", "two")
	h.tip = plumbing.NewHash(git(t, dir, nil, "rev-parse", "HEAD"))

	// The server holds what base reaches; the pack carries the rest, thin as git pushes it.
	h.held = memory.NewStorage()
	baseObjects := git(t, dir, nil, "rev-list", "--objects", h.base.String())
	for _, line := range strings.Split(baseObjects, "\n") {
		id, _, _ := strings.Cut(line, " ")
		typ := git(t, dir, nil, "cat-file", "-t", id)
		data := gitOut(t, dir, "cat-file", typ, id)
		ot, err := plumbing.ParseObjectType(typ)
		if err != nil {
			t.Fatal(err)
		}
		o := &plumbing.MemoryObject{}
		o.SetType(ot)
		_, _ = o.Write(data)
		if _, err := h.held.SetEncodedObject(o); err != nil {
			t.Fatal(err)
		}
	}
	h.pack = gitOut(t, dir, "pack-objects", "--stdout", "--thin", "--revs", "-q")
	return h
}

func gitOut(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if args[0] == "pack-objects" {
		cmd.Stdin = strings.NewReader("HEAD\n^" + git(t, dir, nil, "rev-parse", "HEAD~2") + "\n")
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

var lim = gitpush.Limits{PackBytes: 64 << 20, ObjectBytes: 1 << 20, Objects: 1000}

// TestReadPackDiffAndFindBase ensures a thin pack git made is read over the objects the server
// holds, its history is walked back to the commit that meets the mainline, and the tip's tree
// against that commit's is each path's edit: a write, a delete, a new mode, and a directory
// that became a file as its files' deletions and the file's write.
func TestReadPackDiffAndFindBase(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	objs, err := gitpush.ReadPack(bytes.NewReader(h.pack), h.held, lim)
	if err != nil {
		t.Fatalf("ReadPack: %v", err)
	}
	var asked []plumbing.Hash
	base, err := gitpush.FindBase(context.Background(), objs, h.tip, func(c plumbing.Hash) (gitpush.Meeting, error) {
		asked = append(asked, c)
		if c == h.base {
			return gitpush.Meeting{Revision: "rev_base"}, nil
		}
		return gitpush.Meeting{}, nil
	})
	if err != nil || base.Commit != h.base || base.Revision != "rev_base" || len(asked) != 3 {
		t.Fatalf("FindBase = %+v, %v after asking about %v; want the base commit, third", base, err, asked)
	}
	tipTree := plumbing.NewHash(git(t, h.dir, nil, "rev-parse", "HEAD^{tree}"))
	edits, err := gitpush.Diff(objs, base.Tree, tipTree)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range edits {
		switch {
		case e.Delete:
			got = append(got, "delete "+e.Path)
		default:
			got = append(got, fmt.Sprintf("%s %o %s", e.Path, uint32(e.Mode), e.ID.String()[:7]))
		}
	}
	want := []string{
		"delete docs/x.md",
		"docs 100644 " + git(t, h.dir, nil, "rev-parse", "--short=7", "HEAD:docs"),
		"src/a.go 100644 " + git(t, h.dir, nil, "rev-parse", "--short=7", "HEAD:src/a.go"),
		"src/b.go 100755 " + git(t, h.dir, nil, "rev-parse", "--short=7", "HEAD:src/b.go"),
		"src/c.go 100644 " + git(t, h.dir, nil, "rev-parse", "--short=7", "HEAD:src/c.go"),
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("Diff =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if e, ok, err := gitpush.EntryAt(objs, tipTree, "src/b.go"); err != nil || !ok || e.Mode != filemode.Executable {
		t.Fatalf("EntryAt(src/b.go) = %+v, %v, %v", e, ok, err)
	}
	if _, ok, err := gitpush.EntryAt(objs, tipTree, "src"); err != nil || ok {
		t.Fatalf("EntryAt(src), a directory = %v, %v; want none", ok, err)
	}

	// A history that never meets the mainline, and a meeting that refuses.
	_, err = gitpush.FindBase(context.Background(), objs, h.tip, func(plumbing.Hash) (gitpush.Meeting, error) { return gitpush.Meeting{}, nil })
	var refused *gitpush.RefusalError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "shares no commit with the mainline") {
		t.Fatalf("FindBase of a history that never meets = %v", err)
	}
}

// TestReadPackRefuses ensures what a push may not carry is refused before it is kept: more
// objects or bytes than the limits, an object over the object limit, and a tree holding .git
// (a delta against an object nobody holds: internal/server's TestGitPushAttacks).
func TestReadPackRefuses(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	for _, c := range []struct {
		name string
		pack []byte
		held *memory.Storage
		lim  gitpush.Limits
		says string
	}{
		{"too many objects", h.pack, h.held, gitpush.Limits{PackBytes: 1 << 20, ObjectBytes: 1 << 20, Objects: 2}, "declares"},
		{"too many bytes", h.pack, h.held, gitpush.Limits{PackBytes: 40, ObjectBytes: 1 << 20, Objects: 1000}, "larger than"},
		{"an object too large", h.pack, h.held, gitpush.Limits{PackBytes: 1 << 20, ObjectBytes: 2, Objects: 1000}, "more than"},
		{"not a pack", []byte("hello, world"), h.held, lim, "carries no pack"},
	} {
		_, err := gitpush.ReadPack(bytes.NewReader(c.pack), c.held, c.lim)
		var refused *gitpush.RefusalError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: ReadPack = %v, want a refusal saying %q", c.name, err, c.says)
		}
	}

	dir := t.TempDir()
	git(t, dir, nil, "init", "-q")
	blob := git(t, dir, []byte("[core]\n"), "hash-object", "-w", "--stdin")
	inner := git(t, dir, []byte("100644 blob "+blob+"\tconfig\n"), "mktree")
	tree := git(t, dir, []byte("040000 tree "+inner+"\t.git\n"), "mktree")
	commit := git(t, dir, nil, "commit-tree", tree, "-m", "evil")
	cmd := exec.Command("git", "pack-objects", "--stdout", "--revs", "-q")
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(commit + "\n")
	pack, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	_, err = gitpush.ReadPack(bytes.NewReader(pack), memory.NewStorage(), lim)
	if err == nil || !strings.Contains(err.Error(), `".git"`) {
		t.Fatalf("ReadPack of a tree holding .git = %v", err)
	}
}
