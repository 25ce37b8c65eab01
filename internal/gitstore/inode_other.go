//go:build !unix

package gitstore

import "io/fs"

// inodeOf answers 0: this platform's file information holds no inode.
func inodeOf(fs.FileInfo) uint64 { return 0 }
