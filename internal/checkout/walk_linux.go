package checkout

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ag-coord/ag/internal/repo"
)

// statWalk lists the regular files and symbolic links under dir with their stats, as walkFiles
// does, by system
// calls: a scan of 100,000 files is one fstatat each and little else, where os.Root's walk
// allocated a FileInfo and a DirEntry per file and took twice as long. Directories are opened
// with openat2 beneath dir and without following any symbolic link, which is what os.Root
// guarantees; a kernel without openat2 (before Linux 5.6) gets the os.Root walk.
func statWalk(dir string, root *os.Root) ([]walkedFiles, error) {
	rootFD, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(rootFD)
	probe, err := unix.Openat2(rootFD, ".", &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			return walkStatsOfRoot(root)
		}
		return nil, &os.PathError{Op: "openat2", Path: dir, Err: err}
	}
	unix.Close(probe)

	w := &dirWalk{rootFD: rootFD, queue: []string{""}}
	w.cond = sync.NewCond(&w.mu)
	parts := make([]walkedFiles, walkWorkers)
	var wg sync.WaitGroup
	for i := range walkWorkers {
		wg.Go(func() { w.work(&parts[i]) })
	}
	wg.Wait()
	if w.err != nil {
		return nil, w.err
	}
	return parts, nil
}

// dirWalk hands out the directories of a walk to its workers: the walk is as parallel as the
// tree is wide at any depth, not only at the top.
type dirWalk struct {
	rootFD int
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []string // directories to read, relative to the root ("" is the root), "/"-terminated
	busy   int      // workers reading a directory, which may queue more
	err    error
}

// next answers a directory to read, or false when the walk is over.
func (w *dirWalk) next() (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.queue) == 0 && w.busy > 0 && w.err == nil {
		w.cond.Wait()
	}
	if len(w.queue) == 0 || w.err != nil {
		return "", false
	}
	d := w.queue[len(w.queue)-1]
	w.queue = w.queue[:len(w.queue)-1]
	w.busy++
	return d, true
}

// done marks a directory read, queueing its subdirectories.
func (w *dirWalk) done(subdirs []string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.busy--
	w.queue = append(w.queue, subdirs...)
	if err != nil && w.err == nil {
		w.err = err
	}
	w.cond.Broadcast()
}

func (w *dirWalk) work(out *walkedFiles) {
	buf := make([]byte, 64<<10)
	var subdirs, names []string
	var path []byte
	for {
		dir, ok := w.next()
		if !ok {
			return
		}
		subdirs = subdirs[:0]
		err := w.readDir(dir, buf, &names, &path, out, &subdirs)
		w.done(subdirs, err)
	}
}

// readDir lists one directory: its regular files and links into out with their stats, its
// subdirectories into subdirs; what is none of them (a device, a FIFO) is no file of the
// checkout.
func (w *dirWalk) readDir(dir string, buf []byte, names *[]string, path *[]byte, out *walkedFiles, subdirs *[]string) error {
	name := dir
	if name == "" {
		name = "."
	}
	fd, err := unix.Openat2(w.rootFD, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
			// Removed since its parent was read, or made a file or a symbolic link: what is
			// there now is the next scan's to find.
			return nil
		}
		return &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err != nil {
			return &os.PathError{Op: "readdirent", Path: name, Err: err}
		}
		if n == 0 {
			return nil
		}
		var types []byte
		*names, types = parseDirents(buf[:n], (*names)[:0], types)
		for i, entry := range *names {
			if _, reserved := repo.ReservedSegment(entry); reserved {
				continue
			}
			*path = append(append((*path)[:0], dir...), entry...)
			typ := types[i]
			if typ == unix.DT_UNKNOWN || typ == unix.DT_REG || typ == unix.DT_LNK {
				if err := unix.Fstatat(fd, entry, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					if errors.Is(err, unix.ENOENT) {
						continue
					}
					return &os.PathError{Op: "lstat", Path: string(*path), Err: err}
				}
				switch st.Mode & unix.S_IFMT {
				case unix.S_IFREG:
					typ = unix.DT_REG
				case unix.S_IFDIR:
					typ = unix.DT_DIR
				case unix.S_IFLNK:
					typ = unix.DT_LNK
				default:
					typ = unix.DT_UNKNOWN // a device, a FIFO, a socket: no path of a repository
				}
			}
			switch typ {
			case unix.DT_DIR:
				*subdirs = append(*subdirs, string(*path)+"/")
			case unix.DT_REG, unix.DT_LNK:
				// A link is a path of its own, its target its content: never followed.
				out.add(*path, statOfSys(&st))
			}
		}
	}
}

// parseDirents reads the names and types of the entries of a getdents64 buffer, leaving out
// "." and "..".
func parseDirents(buf []byte, names []string, types []byte) ([]string, []byte) {
	types = types[:0]
	for len(buf) >= 19 {
		// struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name (NUL-terminated).
		reclen := int(buf[16]) | int(buf[17])<<8
		if reclen < 19 || reclen > len(buf) {
			break
		}
		rec := buf[:reclen]
		buf = buf[reclen:]
		nameBytes := rec[19:]
		for i, c := range nameBytes {
			if c == 0 {
				nameBytes = nameBytes[:i]
				break
			}
		}
		if string(nameBytes) == "." || string(nameBytes) == ".." {
			continue
		}
		names = append(names, string(nameBytes))
		types = append(types, rec[18])
	}
	return names, types
}

// statOfSys answers what the index keeps of a stat.
func statOfSys(st *unix.Stat_t) fileStat {
	return fileStat{size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(), ino: st.Ino, mode: st.Mode}
}

// statOfInfo answers what the index keeps of a FileInfo, as statOfSys does of the stat under it.
func statOfInfo(info os.FileInfo) fileStat {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		panic(fmt.Sprintf("a FileInfo without a stat: %T", info.Sys()))
	}
	return fileStat{size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(), ino: st.Ino, mode: st.Mode}
}

// watchSupported: `ag watch` watches directories with inotify, one watch per directory.
const WatchSupported = true
