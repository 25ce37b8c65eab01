package checkout

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ag-coord/ag/internal/repo"
)

// checkoutReader reads a checkout's files and links without following any symbolic link: not
// one a parent directory has become, not one at the path itself. os.Root alone would follow a
// link that stays inside the checkout, so a link to .git/config would be read as the file it
// names. Where openat2 is to be had (Linux 5.6 on), every open resolves beneath the checkout
// with RESOLVE_NO_SYMLINKS; elsewhere each parent is checked to be a directory and what is
// opened to be what was checked.
type checkoutReader struct {
	root *os.Root
	dir  *os.File // the checkout's directory, kept open for fd
	fd   int      // dir's descriptor, for openat2; -1 without openat2
	// ownsRoot: the reader opened root itself (openCheckoutReader) and closes it.
	ownsRoot bool
}

// errNotTracked says a path holds neither a regular file nor a link.
var errNotTracked = errors.New("neither a regular file nor a symbolic link")

func newCheckoutReader(root *os.Root) (*checkoutReader, error) {
	r := &checkoutReader{root: root, fd: -1}
	if !haveOpenat2() {
		return r, nil
	}
	d, err := root.Open(".")
	if err != nil {
		return nil, err
	}
	r.dir, r.fd = d, int(d.Fd())
	return r, nil
}

// openCheckoutReader opens the checkout at dir and a reader beneath it, for a caller that
// reads and writes nothing else; close releases both.
func openCheckoutReader(dir string) (*checkoutReader, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	r, err := newCheckoutReader(root)
	if err != nil {
		root.Close()
		return nil, err
	}
	r.ownsRoot = true
	return r, nil
}

func (r *checkoutReader) close() {
	if r.dir != nil {
		r.dir.Close()
	}
	if r.ownsRoot {
		r.root.Close()
	}
}

// openFile opens the regular file at a repository path.
func (r *checkoutReader) openFile(path string) (*os.File, error) {
	if r.fd >= 0 {
		f, err := openBeneath(r.fd, path)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		info, err := f.Stat()
		if err == nil && !info.Mode().IsRegular() {
			err = errNotTracked
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		return f, nil
	}
	info, err := r.lstat(path)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s: %s, not a regular file", path, describeMode(info.Mode()))
	}
	f, err := r.root.Open(filepath.FromSlash(path))
	if err != nil {
		return nil, err
	}
	// What was opened must be what was checked: not a link put there since.
	if opened, err := f.Stat(); err != nil || !os.SameFile(info, opened) {
		f.Close()
		return nil, fmt.Errorf("read %s: it changed while it was read", path)
	}
	return f, nil
}

// readFile answers the content of the regular file at a repository path.
func (r *checkoutReader) readFile(path string) ([]byte, error) {
	f, err := r.openFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}

// readLink answers the target of the symbolic link at a repository path.
func (r *checkoutReader) readLink(path string) (string, error) {
	if r.fd >= 0 {
		target, err := readlinkBeneath(r.fd, path)
		if err != nil {
			return "", fmt.Errorf("read the link %s: %w", path, err)
		}
		return target, nil
	}
	info, err := r.lstat(path)
	if err != nil {
		return "", err
	}
	if info.Mode()&fs.ModeSymlink == 0 {
		return "", fmt.Errorf("read the link %s: %s, not a symbolic link", path, describeMode(info.Mode()))
	}
	return r.root.Readlink(filepath.FromSlash(path))
}

// lstat answers what is at path, every parent a real directory.
func (r *checkoutReader) lstat(path string) (fs.FileInfo, error) {
	info, err := lstatThroughDirs(r.root, path)
	if err == nil && info == nil {
		err = &os.PathError{Op: "lstat", Path: path, Err: fs.ErrNotExist}
	}
	return info, err
}

// hash answers the digest and size of what the path holds, by what its stat says it is: a
// link's target, or a file's bytes.
func (r *checkoutReader) hash(path string, st fileStat) (localFile, error) {
	if gitModeOfStat(st.mode) == repo.ModeSymlink {
		target, err := r.readLink(path)
		if err != nil {
			return localFile{}, err
		}
		return localFile{digest: repo.Digest([]byte(target)), size: int64(len(target))}, nil
	}
	f, err := r.openFile(path)
	if err != nil {
		return localFile{}, err
	}
	defer f.Close()
	return hashContent(path, f)
}
