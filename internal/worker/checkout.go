package worker

import (
	"fmt"
	"strings"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/repo"
)

// treeEntry answers an entry of a GetTree answer as materialize takes it: a file of some mode
// with its digest, or a submodule with its commit. A server before modes answers no mode, which
// is a regular file.
func treeEntry(e *agwpv1.TreeEntry) (repo.Entry, error) {
	out := repo.Entry{Path: e.GetPath(), Digest: e.GetDigest(), Size: e.GetSize()}
	switch mode := e.GetMode(); mode {
	case "", repo.ModeFile:
	case repo.ModeExecutable, repo.ModeSymlink:
		out.Mode = mode
	case repo.ModeGitlink:
		if e.GetDigest() != "" || e.GetSize() != 0 {
			return repo.Entry{}, fmt.Errorf("the submodule %s names a blob: a submodule is a commit only", e.GetPath())
		}
		if !repo.IsGitID(e.GetGitlinkCommit()) {
			return repo.Entry{}, fmt.Errorf("the submodule %s names the commit %q: not 40 lowercase hex", e.GetPath(), e.GetGitlinkCommit())
		}
		out.Mode, out.GitlinkCommit = mode, e.GetGitlinkCommit()
		return out, nil
	default:
		return repo.Entry{}, fmt.Errorf("%s has mode %q: a worker writes %s, %s, %s and %s", e.GetPath(), mode,
			repo.ModeFile, repo.ModeExecutable, repo.ModeSymlink, repo.ModeGitlink)
	}
	if e.GetGitlinkCommit() != "" {
		return repo.Entry{}, fmt.Errorf("%s names a commit, but is no submodule", e.GetPath())
	}
	if !digestPattern.MatchString(e.GetDigest()) {
		return repo.Entry{}, fmt.Errorf("%s names %q: not a digest", e.GetPath(), e.GetDigest())
	}
	return out, nil
}

// checkNothingUnder refuses a tree one of whose paths lies under another of its entries: under
// a symbolic link (a/ is a link, a/b a file), a file or a submodule. Written as it comes, such a
// path would be written through the link, wherever it points; git refuses such a tree too.
func checkNothingUnder(tree repo.Tree) error {
	kinds := make(map[string]string, len(tree))
	for _, e := range tree {
		switch e.GitMode() {
		case repo.ModeSymlink:
			kinds[e.Path] = "a symbolic link"
		case repo.ModeGitlink:
			kinds[e.Path] = "a submodule"
		default:
			kinds[e.Path] = "a file"
		}
	}
	for _, e := range tree {
		for _, dir := range repo.Ancestors(e.Path) {
			if kind, ok := kinds[strings.TrimSuffix(dir, "/")]; ok {
				return fmt.Errorf("refused to check out %q: it lies under %s, which is %s of the same tree", e.Path, strings.TrimSuffix(dir, "/"), kind)
			}
		}
	}
	return nil
}
