package checkout

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ag-coord/ag/internal/repo"
)

// beneath resolves a path under a checkout's descriptor and through no symbolic link.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS

var openat2Probe = sync.OnceValue(func() bool {
	fd, err := unix.Openat2(unix.AT_FDCWD, ".", &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: beneath})
	if err != nil {
		return !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM)
	}
	unix.Close(fd)
	return true
})

// haveOpenat2 reports whether the kernel resolves paths with openat2 (Linux 5.6 on; a seccomp
// filter may refuse it with EPERM).
func haveOpenat2() bool { return openat2Probe() }

// openBeneath opens the file at path under dirFD for reading, following no link, and without
// blocking should a FIFO stand there.
func openBeneath(dirFD int, path string) (*os.File, error) {
	fd, err := unix.Openat2(dirFD, path, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK,
		Resolve: beneath,
	})
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("a symbolic link stands on the way or there: %w", err)
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// readlinkBeneath answers the target of the link at path under dirFD, its parent reached
// through no link.
func readlinkBeneath(dirFD int, path string) (string, error) {
	parent, name := splitParent(path)
	if parent == "" {
		parent = "."
	}
	dfd, err := unix.Openat2(dirFD, parent, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: beneath})
	if errors.Is(err, unix.ELOOP) {
		return "", fmt.Errorf("a symbolic link stands on the way: %w", err)
	}
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	buf := make([]byte, repo.MaxSymlinkTarget+1)
	n, err := unix.Readlinkat(dfd, name, buf)
	if errors.Is(err, unix.EINVAL) {
		return "", errors.New("not a symbolic link")
	}
	if err != nil {
		return "", err
	}
	if n > repo.MaxSymlinkTarget {
		return "", fmt.Errorf("its target is more than %d bytes", repo.MaxSymlinkTarget)
	}
	return string(buf[:n]), nil
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
