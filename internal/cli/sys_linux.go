package cli

import (
	"io"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// fileIdentity answers what of a file's stat the stat cache keeps beyond size, mtime and mode:
// its inode and its ctime (ns), which every write and every chmod or utimes moves on, so a tool
// that puts an mtime back is still seen.
func fileIdentity(info fs.FileInfo) (ino uint64, ctime int64) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0
	}
	return st.Ino, st.Ctim.Nano()
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
