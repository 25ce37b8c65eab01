package gitwork

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/repo"
)

// emptyTree is git's empty tree: what a branch with no commit yet is compared with.
const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// LocalChange is a file of the working tree that differs from HEAD, staged or not: what a
// checkout calls a local edit.
type LocalChange struct {
	Path      string `json:"path"`
	Kind      string `json:"kind"`               // added, modified or deleted
	Mode      string `json:"mode,omitempty"`     // on disk (or staged), unless deleted
	BaseMode  string `json:"baseMode,omitempty"` // in HEAD, unless added
	Untracked bool   `json:"untracked"`          // a new file git does not track yet
	Conflict  bool   `json:"conflict"`           // unmerged: a rebase stopped on it
}

// LocalChanges answers the tree's changes against HEAD, staged and not, and its untracked
// files (not those git ignores), each file once: a rename is the old path deleted and the new
// one added, as a push sends it.
func (t *Tree) LocalChanges(ctx context.Context) ([]LocalChange, error) {
	out, err := gitCtx(ctx, t.Root, nil, "diff", t.base(ctx), "--raw", "-z", "--no-renames", "--no-abbrev", "--")
	if err != nil {
		return nil, err
	}
	changes := rawChanges(out)
	out, err = gitCtx(ctx, t.Root, nil, "ls-files", "--others", "--exclude-standard", "-z")
	if err != nil {
		return nil, err
	}
	for _, p := range strings.Split(strings.TrimSuffix(out, "\x00"), "\x00") {
		if p != "" {
			changes = append(changes, LocalChange{Path: p, Kind: "added", Mode: t.diskMode(p), Untracked: true})
		}
	}
	return changes, nil
}

// base answers what local changes are against: HEAD, or the empty tree before a first commit.
func (t *Tree) base(ctx context.Context) string {
	if h := t.head(ctx); h != "" {
		return h
	}
	return emptyTree
}

// diskMode answers the git mode of the file p on disk, "" when it cannot be read.
func (t *Tree) diskMode(p string) string {
	root, err := os.OpenRoot(t.Root)
	if err != nil {
		return ""
	}
	defer root.Close()
	fi, err := root.Lstat(p)
	switch {
	case err != nil:
		return ""
	case fi.Mode()&fs.ModeSymlink != 0:
		return repo.ModeSymlink
	case fi.Mode()&0o111 != 0:
		return repo.ModeExecutable
	}
	return repo.ModeFile
}

// Under answers the changes at or under any of paths ("a/" a directory), as ag selects edits.
func Under(changes []LocalChange, paths []string) []LocalChange {
	var out []LocalChange
	for _, c := range changes {
		for _, p := range paths {
			if repo.Covers(p, c.Path) {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// FileDiff is one local change as a unified diff against HEAD.
type FileDiff struct {
	LocalChange
	Binary bool   `json:"binary"`
	Diff   string `json:"diff"` // git's, headers included
}

// Diff answers the local changes under paths (none: all) as git's unified diffs against HEAD
// (an untracked file as an addition), and HEAD's commit.
func (t *Tree) Diff(ctx context.Context, paths []string) (string, []FileDiff, error) {
	changes, err := t.LocalChanges(ctx)
	if err != nil {
		return "", nil, err
	}
	if len(paths) > 0 {
		changes = Under(changes, paths)
	}
	base := t.base(ctx)
	diffs := []FileDiff{}
	for _, c := range changes {
		if strings.HasSuffix(c.Path, "/") {
			continue // a repository of its own inside the tree: git shows none of it
		}
		var d string
		if c.Untracked {
			// Exit 1 says the files differ, which a new file always does.
			d, err = gitCtx(ctx, t.Root, nil, "diff", "--no-index", "--no-color", "--no-ext-diff", "--", os.DevNull, c.Path)
			if exitCode(err, 1) {
				err = nil
			}
		} else {
			d, err = gitIn(ctx, t.Root, literal, nil, "diff", base, "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", "--", c.Path)
		}
		if err != nil {
			return "", nil, err
		}
		binary := strings.Contains(d, "\nBinary files ") || strings.HasPrefix(d, "Binary files ")
		diffs = append(diffs, FileDiff{LocalChange: c, Binary: binary, Diff: d})
	}
	return t.head(ctx), diffs, nil
}

// Revert drops the local changes under paths, as a checkout's revert drops local edits: a
// changed or deleted file is restored from HEAD, staged changes unstaged, and an added file
// removed (an untracked one too: it is nowhere else). It answers what it dropped.
func (t *Tree) Revert(ctx context.Context, paths []string) ([]LocalChange, error) {
	changes, err := t.LocalChanges(ctx)
	if err != nil {
		return nil, err
	}
	changes = Under(changes, paths)
	var tracked, untracked []LocalChange
	for _, c := range changes {
		switch {
		case !c.Untracked:
			tracked = append(tracked, c)
		case !strings.HasSuffix(c.Path, "/"): // not a repository of its own inside the tree
			untracked = append(untracked, c)
		}
	}
	reverted := []LocalChange{}
	if len(tracked) > 0 {
		// Not in HEAD (staged as added), a path is removed from the index and the disk.
		if _, err := gitIn(ctx, t.Root, literal, pathspecs(tracked), "restore", "--source="+t.base(ctx), "--staged", "--worktree",
			"--pathspec-from-file=-", "--pathspec-file-nul"); err != nil {
			return nil, err
		}
		reverted = append(reverted, tracked...)
	}
	if len(untracked) > 0 {
		root, err := os.OpenRoot(t.Root)
		if err != nil {
			return reverted, err
		}
		defer root.Close()
		for _, c := range untracked {
			// Through the root: never out of the tree by a symbolic link on the way.
			if err := root.Remove(c.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return reverted, err
			}
			reverted = append(reverted, c)
			for d := path.Dir(c.Path); d != "."; d = path.Dir(d) {
				if root.Remove(d) != nil { // not empty: what else is there stays
					break
				}
			}
		}
	}
	return reverted, nil
}

// Head answers HEAD's commit, "" on a branch with none yet.
func (t *Tree) Head(ctx context.Context) string { return t.head(ctx) }

// Has reports whether commit is in HEAD's history: false too when the tree never fetched it.
func (t *Tree) Has(ctx context.Context, commit string) bool {
	if commit == "" {
		return false
	}
	_, err := gitCtx(ctx, t.Root, nil, "merge-base", "--is-ancestor", commit, "HEAD")
	return err == nil
}

// Unpushed answers the commits of HEAD the mainline lacks as the tree last fetched it ("ID
// SUBJECT", newest first): a push sends them.
func (t *Tree) Unpushed(ctx context.Context) ([]string, error) {
	remote, err := t.Remote()
	if err != nil {
		return nil, err
	}
	out, err := gitCtx(ctx, t.Root, nil, "log", "--format=%h %s", "refs/remotes/"+remote+"/"+MainBranch+"..HEAD", "--")
	if err != nil {
		return []string{}, nil // no HEAD, or never fetched: nothing to say
	}
	lines := []string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// Submodules answers the submodules in the tree's index, each at its commit.
func (t *Tree) Submodules(ctx context.Context) ([]checkout.Submodule, error) {
	out, err := gitCtx(ctx, t.Root, nil, "ls-files", "--stage", "-z")
	if err != nil {
		return nil, err
	}
	subs := []checkout.Submodule{}
	for _, e := range strings.Split(out, "\x00") {
		// "MODE OBJECT STAGE\tPATH"
		meta, p, ok := strings.Cut(e, "\t")
		if f := strings.Fields(meta); ok && len(f) == 3 && f[0] == repo.ModeGitlink {
			subs = append(subs, checkout.Submodule{Path: p, Commit: f[1]})
		}
	}
	return subs, nil
}

// Changed answers the files that differ between the commits from and to, as a sync changed
// them: Mode is to's, BaseMode from's.
func (t *Tree) Changed(ctx context.Context, from, to string) ([]LocalChange, error) {
	if from == "" || to == "" || from == to {
		return []LocalChange{}, nil
	}
	out, err := gitCtx(ctx, t.Root, nil, "diff", "--raw", "-z", "--no-renames", "--no-abbrev", from, to, "--")
	if err != nil {
		return nil, err
	}
	return rawChanges(out), nil
}

// rawChanges reads `git diff --raw -z --no-renames`, each path once: an unmerged path, which
// git lists as such and again as changed, is one change in conflict.
func rawChanges(out string) []LocalChange {
	changes := []LocalChange{}
	at := map[string]int{}
	// ":OLDMODE NEWMODE OLDID NEWID STATUS NUL PATH NUL"
	f := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
	for i := 0; i+1 < len(f); i += 2 {
		meta := strings.Fields(strings.TrimPrefix(f[i], ":"))
		if len(meta) != 5 {
			continue
		}
		c := LocalChange{Path: f[i+1], Kind: "modified", Mode: meta[1], BaseMode: meta[0]}
		switch meta[4][0] {
		case 'A':
			c.Kind, c.BaseMode = "added", ""
		case 'D':
			c.Kind, c.Mode = "deleted", ""
		case 'U':
			c.Conflict = true
		}
		if j, seen := at[c.Path]; seen {
			changes[j].Conflict = changes[j].Conflict || c.Conflict
			continue
		}
		at[c.Path] = len(changes)
		changes = append(changes, c)
	}
	return changes
}
