//go:build unix

package gitstore

import (
	"io/fs"
	"syscall"
)

// inodeOf answers the file's inode, 0 where the platform does not tell.
func inodeOf(info fs.FileInfo) uint64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
