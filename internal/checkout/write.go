package checkout

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/ag-coord/ag/client"
	"github.com/ag-coord/ag/internal/repo"
)

// WriteFiles writes co's files and state into co.root, a new or empty directory, so that
// it is there in full or not at all: a failure, a refused tree or Ctrl-C leaves no half
// checkout behind, which would pass for a checkout with every missing file deleted locally.
func WriteFiles(ctx context.Context, c *client.Client, co *Checkout, prog *Progress) error {
	info, err := os.Stat(co.root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return writeCheckoutBeside(ctx, c, co, prog)
	case err != nil:
		return err
	case !info.IsDir():
		return fmt.Errorf("%s is not a directory: check out into a new or empty directory", co.root)
	}
	return writeCheckoutInside(ctx, c, co, prog)
}

// writeCheckoutBeside writes the checkout into a new directory beside co.root, on the same file
// system, and renames it into place once complete.
func writeCheckoutBeside(ctx context.Context, c *client.Client, co *Checkout, prog *Progress) error {
	parent := filepath.Dir(co.root)
	// The directories MkdirAll creates go again on failure, down to the first that was there.
	firstNew := ""
	for d := parent; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		firstNew = d
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	var staging string
	for {
		staging = filepath.Join(parent, ".ag-checkout-"+rand.Text())
		err := os.Mkdir(staging, 0o755)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	done := false
	defer func() {
		if done {
			return
		}
		_ = os.RemoveAll(staging)
		for d := parent; firstNew != ""; d = filepath.Dir(d) {
			if os.Remove(d) != nil || d == firstNew {
				break
			}
		}
	}()
	root, err := os.OpenRoot(staging)
	if err != nil {
		return err
	}
	defer root.Close()
	written, err := writeTreeFiles(ctx, c, root, co.base, co.blobSizes, prog)
	if err != nil {
		return err
	}
	co.recordWritten(written)
	if err := co.saveIn(root); err != nil {
		return err
	}
	if err := os.Rename(staging, co.root); err != nil {
		return fmt.Errorf("move the checkout into place: %w (was %s created meanwhile?)", err, co.root)
	}
	done = true
	return nil
}

// writeCheckoutInside checks out into co.root, an existing empty directory: renaming a new
// one over it would swap the directory from under a shell standing in it (`ag checkout app .`)
// and lose its permissions, and could cross file systems when it is a mount point. So the files
// are written in a staging directory under .ag/ (no tree may hold .ag, so none collides) and
// moved up once all are there, and the directory is emptied again on failure.
func writeCheckoutInside(ctx context.Context, c *client.Client, co *Checkout, prog *Progress) error {
	root, err := os.OpenRoot(co.root)
	if err != nil {
		return err
	}
	defer root.Close()
	const staging = StateDir + "/staging"
	if err := root.Mkdir(StateDir, 0o755); err != nil {
		return fmt.Errorf("%s is not empty: check out into a new or empty directory (%w)", co.root, err)
	}
	var moved []string
	done := false
	defer func() {
		if !done {
			for _, name := range moved {
				_ = root.RemoveAll(name)
			}
			_ = root.RemoveAll(StateDir)
		}
	}()
	if err := root.Mkdir(staging, 0o755); err != nil {
		return err
	}
	stage, err := root.OpenRoot(staging)
	if err != nil {
		return err
	}
	defer stage.Close()
	written, err := writeTreeFiles(ctx, c, stage, co.base, co.blobSizes, prog)
	if err != nil {
		return err
	}
	co.recordWritten(written)
	entries, err := readDir(stage, ".")
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := root.Rename(filepath.Join(staging, e.Name()), e.Name()); err != nil {
			return fmt.Errorf("move %s into place: %w", e.Name(), err)
		}
		moved = append(moved, e.Name())
	}
	if err := root.Remove(staging); err != nil {
		return err
	}
	if err := co.saveIn(root); err != nil {
		return err
	}
	done = true
	return nil
}

// writeTreeFiles fetches and writes the files of tree under root, each as git has it (a file
// of its mode, a link, a submodule's empty directory), fetching by several requests at once
// and each blob once, counting on prog.
func writeTreeFiles(ctx context.Context, c *client.Client, root *os.Root, tree map[string]treeFile, sizes map[string]uint64, prog *Progress) (map[string]fileStat, error) {
	if err := refuseFoldedNames(root, tree); err != nil {
		return nil, err
	}
	blobs := make(map[string]string, len(tree)) // path → digest, of all but submodules
	var submodules []string
	for p, f := range tree {
		if f.Gitlink() {
			submodules = append(submodules, p)
		} else {
			blobs[p] = f.digest
		}
	}
	// A large file is streamed to its place, each of its paths by a read of its own.
	large := map[string][]string{}
	for p, d := range blobs {
		if sizes[d] >= client.LargeBlobBytes && tree[p].Mode != repo.ModeSymlink {
			large[d] = append(large[d], p)
			delete(blobs, p)
		}
	}
	w := &freshWriter{root: root, tree: tree, made: map[string]bool{}, dirs: map[string]*openDir{}, written: make(map[string]fileStat, len(blobs))}
	defer w.close()
	for _, d := range slices.Sorted(maps.Keys(large)) {
		paths := large[d]
		sort.Strings(paths)
		for _, p := range paths {
			err := w.writeFrom(p, nil, func(out io.Writer) error {
				_, err := c.ReadBlob(ctx, d, out)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("fetch %s: %w", p, err)
			}
			prog.Add(1, int64(sizes[d]))
		}
	}
	err := fetchBlobs(ctx, c, blobs, sizes, prog, func(paths []string, content []byte) error {
		for _, p := range paths {
			if err := w.write(p, content); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(submodules)
	for _, p := range submodules {
		if err := makeSubmoduleDir(root, p); err != nil {
			return nil, err
		}
	}
	return w.written, nil
}

// freshWriter writes the files of a new checkout into root, a directory ag made for it that
// holds nothing else: no file is there to replace, so each is created in place (O_EXCL, which
// also refuses to write through anything that stands at its name), and directories are made
// once and kept open, so that a file costs one openat, not one per segment of its path. At most
// freshWriterDirs stay open: files come directory after directory.
type freshWriter struct {
	root  *os.Root
	tree  map[string]treeFile // the mode of each path written
	mu    sync.Mutex
	made  map[string]bool     // directories made, by repository path
	dirs  map[string]*openDir // open directories, by repository path
	order []string            // of dirs, oldest first
	// written holds the stat of each file written, taken before it was closed: the checkout's
	// index records it, so that the first status reads no file.
	written map[string]fileStat
}

const freshWriterDirs = 64

type openDir struct {
	root    *os.Root
	users   int
	evicted bool
}

// acquire answers the directory at path (a repository path, "" for the root), made if needed
// and open until release.
func (w *freshWriter) acquire(path string) (*openDir, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d, ok := w.dirs[path]; ok {
		d.users++
		return d, nil
	}
	if path != "" && !w.made[path] {
		if err := w.mkdirAll(path); err != nil {
			return nil, err
		}
	}
	r := w.root
	if path != "" {
		var err error
		if r, err = w.root.OpenRoot(filepath.FromSlash(path)); err != nil {
			return nil, fmt.Errorf("open directory %s: %w", path, err)
		}
	}
	d := &openDir{root: r, users: 1}
	w.dirs[path] = d
	w.order = append(w.order, path)
	for len(w.order) > freshWriterDirs {
		old := w.order[0]
		w.order = w.order[1:]
		od := w.dirs[old]
		delete(w.dirs, old)
		od.evicted = true
		if od.users == 0 && od.root != w.root {
			_ = od.root.Close()
		}
	}
	return d, nil
}

func (w *freshWriter) release(d *openDir) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d.users--
	if d.users == 0 && d.evicted && d.root != w.root {
		_ = d.root.Close()
	}
}

// mkdirAll makes the directories of path that are not made yet, from the top.
func (w *freshWriter) mkdirAll(path string) error {
	segs := strings.Split(path, "/")
	for i := range segs {
		dir := strings.Join(segs[:i+1], "/")
		if w.made[dir] {
			continue
		}
		if err := w.root.Mkdir(filepath.FromSlash(dir), 0o755); err != nil {
			return fmt.Errorf("make directory %s: %w", dir, err)
		}
		w.made[dir] = true
	}
	return nil
}

func (w *freshWriter) write(path string, content []byte) error {
	return w.writeFrom(path, content, nil)
}

// writeFrom writes path as write does, a file's content from content or, when stream is not
// nil, from what stream writes into it: a large file goes from the server to the disk without
// being held (a link's target is always given whole: it is checked before the link is made).
func (w *freshWriter) writeFrom(path string, content []byte, stream func(io.Writer) error) error {
	parentPath, name := splitParent(path)
	d, err := w.acquire(parentPath)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer w.release(d)
	mode := w.tree[path].Mode
	if mode == repo.ModeSymlink {
		// Made where nothing stands (the directory is new), read by nobody: a link is data.
		if err := repo.CheckSymlinkTarget(content); err != nil {
			return fmt.Errorf("write the link %s: %w", path, err)
		}
		if err := d.root.Symlink(string(content), name); err != nil {
			return fmt.Errorf("write the link %s: %w", path, err)
		}
		info, err := d.root.Lstat(name)
		if err != nil {
			return fmt.Errorf("write the link %s: %w", path, err)
		}
		w.record(path, info)
		return nil
	}
	f, err := d.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if stream != nil {
		err = stream(f)
	} else {
		_, err = f.Write(content)
	}
	var info fs.FileInfo
	if err == nil {
		info, err = f.Stat()
	}
	if err == nil && mode == repo.ModeExecutable {
		// Execute where it may be read, after the umask, as git does.
		if err = f.Chmod(filePerm(info.Mode(), mode)); err == nil {
			info, err = f.Stat()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	w.record(path, info)
	return nil
}

// record keeps the stat of a path written, for the checkout's index.
func (w *freshWriter) record(path string, info fs.FileInfo) {
	w.mu.Lock()
	w.written[path] = statOfInfo(info)
	w.mu.Unlock()
}

func (w *freshWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range w.dirs {
		if d.root != w.root {
			_ = d.root.Close()
		}
	}
	w.dirs = nil
}
