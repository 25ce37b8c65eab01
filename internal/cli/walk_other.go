//go:build !linux

package cli

import "os"

// statWalk lists the regular files under dir with their stats, through os.Root.
func statWalk(_ string, root *os.Root) ([]walkedFiles, error) {
	return walkStatsOfRoot(root)
}

// statOfInfo answers what the index keeps of a FileInfo: its size, mtime and mode; inode and
// ctime are Linux's only.
func statOfInfo(info os.FileInfo) fileStat {
	return fileStat{size: info.Size(), mtime: info.ModTime().UnixNano(), mode: uint32(info.Mode())}
}
