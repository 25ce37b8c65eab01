package gitstore

import (
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/filemode"

	"github.com/ag-coord/ag/internal/repo"
)

// EntryProblem says why ag refuses a tree entry of an imported history, "" when it takes it:
// its name must be one ag could write as a path of one segment (repo.ValidatePath: UTF-8, no
// control character, no .git or .ag look-alike, at most 255 bytes), since the history is
// served to every clone; its mode one git writes. The server applies it to every tree
// uploaded, and `ag repo import` to every tree of the history before it uploads anything.
func EntryProblem(name string, mode filemode.FileMode) string {
	if strings.Contains(name, "/") {
		return "a name holds no '/'"
	}
	if err := repo.ValidatePath(name, false); err != nil {
		return err.Error()
	}
	switch mode {
	case filemode.Dir, filemode.Regular, filemode.Deprecated, filemode.Executable, filemode.Symlink, filemode.Submodule:
		return ""
	}
	return fmt.Sprintf("has mode %o, which git does not write", uint32(mode))
}
