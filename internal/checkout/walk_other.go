//go:build !linux

package checkout

import (
	"os"
)

// statWalk lists the regular files and links under dir with their stats, through os.Root.
func statWalk(_ string, root *os.Root) ([]walkedFiles, error) {
	return walkStatsOfRoot(root)
}

// statOfInfo answers what the index keeps of a FileInfo: its size, mtime and mode (as a Unix
// stat's: its type and permission bits); inode and ctime are Linux's only.
func statOfInfo(info os.FileInfo) fileStat {
	mode := uint32(info.Mode().Perm())
	switch {
	case info.Mode().IsRegular():
		mode |= statRegular
	case info.Mode()&os.ModeSymlink != 0:
		mode |= statSymlink
	case info.IsDir():
		mode |= 0o040000
	}
	return fileStat{size: info.Size(), mtime: info.ModTime().UnixNano(), mode: mode}
}

// WatchSupported: elsewhere than Linux, watching a checkout takes a watch per file (kqueue) or
// is not built; scans stat every file.
const WatchSupported = false
