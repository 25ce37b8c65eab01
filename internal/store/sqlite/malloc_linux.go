//go:build linux && cgo

package sqlite

/*
#include <malloc.h>

// ag_keep_freed_memory makes the C allocator keep what SQLite frees. By default glibc hands
// the top of a heap back to the kernel once more than 128 KiB of it is free, and serves
// blocks of 128 KiB or more with a fresh mmap each. SQLite frees and allocates such amounts
// all the time: every statement with RETURNING builds an ephemeral table whose page cache
// starts with a block of about 85 KiB, and a transaction's statement journal and bound audit
// records come and go with it. Each round trip to the kernel costs a system call and a page
// fault per 4 KiB touched again, on the one writer every write waits for. An allocator
// without these settings is left as it is.
static void ag_keep_freed_memory(void) {
#if defined(M_TRIM_THRESHOLD) && defined(M_MMAP_THRESHOLD)
	mallopt(M_MMAP_THRESHOLD, 16 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}
*/
import "C"

// keepFreedMemory tunes the C allocator for SQLite (see ag_keep_freed_memory): at most 64 MiB
// of freed memory is kept for reuse, and only blocks of 16 MiB or more are mapped on their own.
// It is process-wide, so it is done once, by the first Open.
func keepFreedMemory() {
	C.ag_keep_freed_memory()
}
