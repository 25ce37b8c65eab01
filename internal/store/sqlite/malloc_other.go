//go:build !linux || !cgo

package sqlite

// keepFreedMemory has nothing to tune outside glibc's allocator.
func keepFreedMemory() {}
