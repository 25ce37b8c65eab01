//go:build unix

package checkout

import (
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

// decodeIndexFile decodes the index file f of size bytes, with room for spare more entries,
// from a mapping of it: read into memory of its own, the file's megabytes would cost a page
// fault per page of fresh memory, which on a virtual machine is most of reading a large
// checkout's index. Only the entries and the paths are copied out, and the mapping is gone
// when it answers.
func decodeIndexFile(f *os.File, size int64, spare int) (x *index, err error) {
	if size == 0 || size != int64(int(size)) {
		return decodeIndexSpare(nil, true, spare)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	defer func() { _ = unix.Munmap(data) }()
	// A file cut short under the mapping (by hand: ag replaces its indexes, never truncates
	// them) faults as it is read: that is a damaged index, not a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			x, err = nil, errIndexDamaged
		}
	}()
	return decodeIndexSpare(data, false, spare)
}
