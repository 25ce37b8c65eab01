//go:build !linux

package cli

import (
	"io"
	"io/fs"
	"os"
)

// fileIdentity answers 0s off Linux: the stat cache then keeps size, mtime and mode only.
func fileIdentity(fs.FileInfo) (ino uint64, ctime int64) { return 0, 0 }

// isTerminal reports whether w is a character device other than the null device: a terminal,
// as far as can be told without a terminal library.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	if err != nil || info.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(info, null)
}
