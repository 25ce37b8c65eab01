package gitstore

import (
	"fmt"

	"github.com/go-git/go-git/v5/plumbing/filemode"

	"github.com/ag-coord/ag/internal/repo"
)

// FileMode answers the git mode of an ag entry's mode (repo.Entry.Mode, repo.FileEdit.Mode):
// "" and repo.ModeFile are filemode.Regular.
func FileMode(mode string) (filemode.FileMode, error) {
	switch mode {
	case "", repo.ModeFile:
		return filemode.Regular, nil
	case repo.ModeExecutable:
		return filemode.Executable, nil
	case repo.ModeSymlink:
		return filemode.Symlink, nil
	case repo.ModeGitlink:
		return filemode.Submodule, nil
	}
	return 0, fmt.Errorf("mode %q is none of %s, %s, %s and %s", mode, repo.ModeFile, repo.ModeExecutable, repo.ModeSymlink, repo.ModeGitlink)
}

// EntryMode answers an ag entry's mode (repo.Entry.Mode) for the git mode of a file or
// submodule: "" for a regular file. git's old group-writable 100664 is a regular file, as git
// checks it out; ok is false for a directory or a mode git does not write.
func EntryMode(m filemode.FileMode) (mode string, ok bool) {
	switch m {
	case filemode.Regular, filemode.Deprecated:
		return "", true
	case filemode.Executable:
		return repo.ModeExecutable, true
	case filemode.Symlink:
		return repo.ModeSymlink, true
	case filemode.Submodule:
		return repo.ModeGitlink, true
	}
	return "", false
}
