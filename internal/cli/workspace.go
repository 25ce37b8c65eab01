package cli

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/repo"
)

// stateDir is where a checkout keeps what ag knows of it.
const stateDir = ".ag"

// checkout is the state of a working directory made by `ag checkout`.
type checkout struct {
	Repository   string            `json:"repository"`
	Server       string            `json:"server"`
	Holder       string            `json:"holder"`
	BaseRevision string            `json:"base_revision"`
	Files        map[string]string `json:"files"` // path → digest as of BaseRevision
	Leases       []heldLease       `json:"leases,omitempty"`
	// Files `ag sync --merge` wrote with conflict markers, path → the local content before the
	// merge, kept under .ag/conflicts/ for `ag sync --ours`.
	Conflicts map[string]conflictRecord `json:"conflicts,omitempty"`

	root string
}

// conflictRecord is a file a sync merged with conflicts.
type conflictRecord struct {
	Ours string `json:"ours"` // digest of the local content before the merge
}

// conflictsDir holds the local contents of files merged with conflicts, by digest.
const conflictsDir = stateDir + "/conflicts"

// oursPath is where the local content with digest d is kept while its file is in conflict.
func oursPath(d string) string { return conflictsDir + "/" + strings.TrimPrefix(d, "sha256:") }

// conflicted answers which of edits still hold the conflict markers a sync wrote.
func (c *checkout) conflicted(edits []localEdit) (map[string]bool, error) {
	out := map[string]bool{}
	if len(c.Conflicts) == 0 {
		return out, nil
	}
	root, err := os.OpenRoot(c.root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	for _, e := range edits {
		if _, ok := c.Conflicts[e.path]; !ok || e.kind == "deleted" {
			continue
		}
		content, err := root.ReadFile(filepath.FromSlash(e.path))
		if err != nil {
			return nil, err
		}
		if hasConflictMarkers(content) {
			out[e.path] = true
		}
	}
	return out, nil
}

// unresolved refuses, with the conflict exit code, edits that still hold conflict markers.
func (c *checkout) unresolved(edits []localEdit) error {
	conflicted, err := c.conflicted(edits)
	if err != nil || len(conflicted) == 0 {
		return err
	}
	paths := make([]string, 0, len(conflicted))
	for p := range conflicted {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return withExit(ExitConflict, fmt.Errorf("these files still hold the conflict markers ag sync --merge wrote: %s. Edit them, or take one side with ag sync --ours PATH or --theirs PATH, or ag revert PATH", strings.Join(paths, ", ")))
}

// repoPaths turns paths given on the command line into repository paths, as repoPath does.
func (c *checkout) repoPaths(base string, args []string) ([]string, error) {
	paths := make([]string, 0, len(args))
	for _, a := range args {
		p, err := c.repoPath(base, a)
		if err != nil {
			return nil, withExit(ExitUsage, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// heldLease is a lease this checkout acquired.
type heldLease struct {
	ID        string    `json:"id"`
	Token     uint64    `json:"token"`
	Paths     []string  `json:"paths"`
	ExpiresAt time.Time `json:"expires_at"`
}

// check refuses state that no ag wrote: ag writes files, reverts and removes by the paths
// and digests it keeps here, so a path into .git or out of the checkout, or a digest that is
// a path (.ag/conflicts/<digest>), must not pass because the file was edited by hand, copied
// from someone else, or damaged.
func (c *checkout) check() error {
	for p, d := range c.Files {
		if err := repo.ValidatePath(p, false); err != nil {
			return fmt.Errorf("file %q %v", shortPath(p), err)
		}
		if !repo.IsDigest(d) {
			return fmt.Errorf("file %q has %q for a digest", shortPath(p), d)
		}
	}
	for p, rec := range c.Conflicts {
		if err := repo.ValidatePath(p, false); err != nil {
			return fmt.Errorf("conflict %q %v", shortPath(p), err)
		}
		if !repo.IsDigest(rec.Ours) {
			return fmt.Errorf("conflict %q has %q for a digest", shortPath(p), rec.Ours)
		}
	}
	for _, l := range c.Leases {
		for _, p := range l.Paths {
			if err := repo.ValidatePath(p, true); err != nil {
				return fmt.Errorf("lease %s path %q %v", l.ID, shortPath(p), err)
			}
		}
	}
	return nil
}

func statePath(root string) string { return filepath.Join(root, stateDir, "checkout.json") }

// findCheckout finds the checkout containing dir.
func findCheckout(dir string) (*checkout, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for d := abs; ; d = filepath.Dir(d) {
		data, err := os.ReadFile(statePath(d))
		if err == nil {
			c := &checkout{root: d}
			if err := json.Unmarshal(data, c); err != nil {
				return nil, fmt.Errorf("%s is damaged (%v): run `ag checkout` again into a new directory", statePath(d), err)
			}
			if err := c.check(); err != nil {
				return nil, fmt.Errorf("%s is damaged: %v: run `ag checkout` again into a new directory", statePath(d), err)
			}
			if c.Files == nil {
				c.Files = map[string]string{}
			}
			return c, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		if d == filepath.Dir(d) {
			return nil, fmt.Errorf("%s is not in a checkout: run `ag checkout REPO DIR` first", abs)
		}
	}
}

// save writes the state atomically, so a crash leaves the old or the new state.
func (c *checkout) save() error {
	root, err := os.OpenRoot(c.root)
	if err != nil {
		return err
	}
	defer root.Close()
	return c.saveIn(root)
}

// saveIn writes the state into the checkout opened as root, as every file of a checkout is
// written: never through a symbolic link.
func (c *checkout) saveIn(root *os.Root) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(root, stateDir+"/checkout.json", data)
}

// tokens answers the fencing tokens of the leases this checkout holds.
func (c *checkout) tokens() []uint64 {
	out := make([]uint64, 0, len(c.Leases))
	for _, l := range c.Leases {
		out = append(out, l.Token)
	}
	return out
}

// localFile is a file found in a directory tree.
type localFile struct {
	digest string
	size   int64
}

// scanTree answers the regular files under dir by their repository paths, skipping symbolic
// links (never followed, so nothing outside dir is read) and, at any depth, what no repository
// may hold: the checkout's state and git's directories, a vendored repository's or a
// submodule's among them, as git itself skips a nested repository.
func scanTree(dir string) (map[string]localFile, []string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	s, _, err := scanRoot(root, nil)
	return s.files, s.skipped, err
}

// scan is what scanRoot found.
type scan struct {
	files   map[string]localFile
	skipped []string
	hashed  int        // files read and hashed; the others' digests came from the stat cache
	cache   *statCache // the files' stats and digests as of this scan, when scanned with a cache
}

// hashWorkers is how many files a scan reads and hashes at once.
var hashWorkers = min(8, 2*runtime.GOMAXPROCS(0))

// walked is a regular file a walk found: its repository path, and its stat when asked for.
type walked struct {
	rel  string
	info fs.FileInfo
}

// walkWorkers is how many directories a walk reads at once: lstat of many files is mostly
// the kernel's work, which two cores do twice as fast.
var walkWorkers = min(8, 2*runtime.GOMAXPROCS(0))

// walkFiles lists the regular files under root, with their stats when withInfo, and the paths
// that are not regular files, skipping what no repository may hold. The top-level directories
// are walked in parallel; the answer is in no particular order.
func walkFiles(root *os.Root, withInfo bool) ([]walked, []string, error) {
	fsys := root.FS()
	var (
		mu      sync.Mutex
		files   []walked
		skipped []string
	)
	visit := func(rel string, d fs.DirEntry, local *[]walked, localSkipped *[]string) error {
		if _, reserved := repo.ReservedSegment(d.Name()); reserved {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			*localSkipped = append(*localSkipped, rel)
			return nil
		}
		if err := repo.ValidatePath(rel, false); err != nil {
			return fmt.Errorf("%s: %v", rel, err)
		}
		w := walked{rel: rel}
		if withInfo {
			// The stat is taken before the content is read: a write in between moves the
			// mtime on from what is cached, and the next scan hashes the file again.
			info, err := d.Info()
			if err != nil {
				return err
			}
			w.info = info
		}
		*local = append(*local, w)
		return nil
	}
	top, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, nil, err
	}
	var dirs []string
	for _, d := range top {
		if d.IsDir() {
			if _, reserved := repo.ReservedSegment(d.Name()); !reserved {
				dirs = append(dirs, d.Name())
			}
			continue
		}
		if err := visit(d.Name(), d, &files, &skipped); err != nil {
			return nil, nil, err
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, len(dirs))
	for range min(walkWorkers, len(dirs)) {
		wg.Go(func() {
			var local []walked
			var localSkipped []string
			for {
				i := int(next.Add(1)) - 1
				if i >= len(dirs) {
					break
				}
				errs[i] = fs.WalkDir(fsys, dirs[i], func(rel string, d fs.DirEntry, err error) error {
					if err != nil {
						return err
					}
					return visit(rel, d, &local, &localSkipped)
				})
				if errs[i] != nil {
					break
				}
			}
			mu.Lock()
			files = append(files, local...)
			skipped = append(skipped, localSkipped...)
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	sort.Strings(skipped)
	return files, skipped, nil
}

// scanRoot scans root as scanTree does. With a stat cache (loadCache not nil; it is called
// while the files are listed), a file whose stat is as cached (and not racily clean) takes the
// cached digest without being read, and the scan answers the cache of what it found, for the
// next one, and the cache it was given.
func scanRoot(root *os.Root, loadCache func() *statCache) (scan, *statCache, error) {
	start := time.Now().UnixNano()
	var cacheCh chan *statCache
	if loadCache != nil {
		cacheCh = make(chan *statCache, 1)
		go func() { cacheCh <- loadCache() }()
	}
	found, skipped, err := walkFiles(root, loadCache != nil)
	var cache *statCache
	if cacheCh != nil {
		cache = <-cacheCh
	}
	s := scan{files: make(map[string]localFile, len(found)), skipped: skipped}
	if err != nil {
		return s, cache, err
	}
	if cache != nil {
		s.cache = &statCache{stamp: start, entries: make(map[string]statEntry, len(found))}
	}
	type toHash struct {
		path string
		stat fs.FileInfo // nil without a cache
	}
	var hash []toHash
	for _, f := range found {
		if cache == nil {
			hash = append(hash, toHash{path: f.rel})
			continue
		}
		now := statOf(f.info, "")
		if digest, ok := cache.digestOf(f.rel, now); ok {
			s.files[f.rel] = localFile{digest: digest, size: f.info.Size()}
			now.digest = digest
			s.cache.entries[f.rel] = now
			continue
		}
		hash = append(hash, toHash{path: f.rel, stat: f.info})
	}
	s.hashed = len(hash)
	if len(hash) == 0 {
		return s, cache, nil
	}
	// Read and hash in parallel: a cold scan of many small files waits on the file system.
	hashed := make([]localFile, len(hash))
	errs := make([]error, len(hash))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(hashWorkers, len(hash)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(hash) {
					return
				}
				hashed[i], errs[i] = hashFile(root, hash[i].path)
			}
		})
	}
	wg.Wait()
	for i, h := range hash {
		if errs[i] != nil {
			return s, cache, errs[i]
		}
		s.files[h.path] = hashed[i]
		if s.cache != nil && hashed[i].size == h.stat.Size() {
			s.cache.entries[h.path] = statOf(h.stat, hashed[i].digest)
		}
	}
	return s, cache, nil
}

// hashFile reads the file at a repository path under root and answers its digest and size.
func hashFile(root *os.Root, path string) (localFile, error) {
	f, err := root.Open(filepath.FromSlash(path))
	if err != nil {
		return localFile{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return localFile{}, fmt.Errorf("read %s: %w", path, err)
	}
	return localFile{digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), size: n}, nil
}

// localEdit is a difference between the checkout's files and its base revision.
type localEdit struct {
	path   string
	kind   string // "added", "modified", "deleted"
	digest string // of the local content, unless deleted
}

// localEdits compares the files on disk with the base revision's.
func (c *checkout) localEdits() ([]localEdit, error) {
	s, err := c.scan()
	if err != nil {
		return nil, err
	}
	files := s.files
	var edits []localEdit
	for p, f := range files {
		base, ok := c.Files[p]
		switch {
		case !ok:
			edits = append(edits, localEdit{path: p, kind: "added", digest: f.digest})
		case base != f.digest:
			edits = append(edits, localEdit{path: p, kind: "modified", digest: f.digest})
		}
	}
	for p := range c.Files {
		if _, ok := files[p]; !ok {
			edits = append(edits, localEdit{path: p, kind: "deleted"})
		}
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].path < edits[j].path })
	return edits, nil
}

// scan scans the checkout's files with its stat cache, and writes the cache anew when the scan
// hashed a file or found one gone. The cache only saves time: when it cannot be written, the
// next scan hashes again.
func (c *checkout) scan() (scan, error) {
	root, err := os.OpenRoot(c.root)
	if err != nil {
		return scan{}, err
	}
	defer root.Close()
	s, cache, err := scanRoot(root, func() *statCache { return loadStatCache(root) })
	if err != nil {
		return s, err
	}
	if s.hashed > 0 || len(s.cache.entries) != len(cache.entries) {
		_ = s.cache.save(root)
	}
	return s, nil
}

// repoPath turns a path given on the command line into a repository path; a trailing '/' is
// kept. A relative path is taken relative to base, the directory the command works in (-C, as
// with git -C; "." by default).
func (c *checkout) repoPath(base, arg string) (string, error) {
	dir := strings.HasSuffix(arg, "/") || strings.HasSuffix(arg, string(filepath.Separator))
	full := arg
	if !filepath.IsAbs(full) {
		full = filepath.Join(base, full)
	}
	abs, err := filepath.Abs(full)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(c.root, abs)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("%s is not inside the checkout %s", arg, c.root)
	}
	rel = filepath.ToSlash(rel)
	if !dir {
		if st, err := os.Stat(abs); err == nil && st.IsDir() {
			dir = true
		}
	}
	if dir {
		rel += "/"
	}
	return rel, repo.ValidatePath(rel, true)
}

// treeFiles answers the files of a tree the server sent, path → digest, once every path is
// one a checkout may hold. It runs before anything of the tree is written: a path such as
// "../x", ".git/config" or ".ag/checkout.json" would write outside the checkout, plant a command
// for git or a server address for ag, and the client must not count on the server to refuse
// them.
func treeFiles(entries []*agwpv1.TreeEntry) (map[string]string, error) {
	files := make(map[string]string, len(entries))
	for _, e := range entries {
		p := e.GetPath()
		if err := repo.ValidatePath(p, false); err != nil {
			return nil, fmt.Errorf("refused the server's tree: the path %q %v. Nothing was written; a server (or proxy) that sends such a path is broken or hostile: check --server", shortPath(p), err)
		}
		if _, twice := files[p]; twice {
			return nil, fmt.Errorf("refused the server's tree: it lists the path %q twice. Nothing was written", shortPath(p))
		}
		files[p] = e.GetDigest()
	}
	for p := range files {
		for _, dir := range repo.Ancestors(p) {
			if _, ok := files[strings.TrimSuffix(dir, "/")]; ok {
				return nil, fmt.Errorf("refused the server's tree: %q would be a file and also the directory of %q. Nothing was written", shortPath(strings.TrimSuffix(dir, "/")), shortPath(p))
			}
		}
	}
	return files, nil
}

// shortPath cuts a path for an error message: a server may send up to any length.
func shortPath(p string) string {
	const most = 512
	if len(p) <= most {
		return p
	}
	return p[:most] + "..."
}

// The files of a checkout are written, renamed and removed only through an os.Root opened on
// the checkout, so no symbolic link in it (planted, or made by the user) can lead a write or a
// remove outside; and ag does not follow one inside either: a path whose parent is a link is
// not a file ag wrote.

// writeFile writes content at a repository path under root, creating its directories. The
// content goes to a new file renamed over the old, so a reader sees the old or the new file,
// and a symbolic link standing at path is replaced, not written through.
func writeFile(root *os.Root, path string, content []byte) error {
	if err := makeParents(root, path); err != nil {
		return err
	}
	dir, _ := splitParent(path)
	tmp := rand.Text()
	if dir != "" {
		tmp = dir + "/.ag-write-" + tmp
	} else {
		tmp = ".ag-write-" + tmp
	}
	f, err := root.OpenFile(filepath.FromSlash(tmp), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(filepath.FromSlash(tmp), filepath.FromSlash(path))
	}
	if err != nil {
		_ = root.Remove(filepath.FromSlash(tmp))
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// makeParents creates the directories of path, one segment at a time, refusing a segment that
// is there but not a directory. Several writers may make the same directories at once.
func makeParents(root *os.Root, path string) error {
	segs := strings.Split(path, "/")
	for i := 1; i < len(segs); i++ {
		dir := strings.Join(segs[:i], "/")
		info, err := root.Lstat(filepath.FromSlash(dir))
		if errors.Is(err, fs.ErrNotExist) {
			err = root.Mkdir(filepath.FromSlash(dir), 0o755)
			if err == nil {
				continue
			}
			if !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("write %s: %w", path, err)
			}
			// Made meanwhile, by another of a checkout's writers or by someone else: look again.
			info, err = root.Lstat(filepath.FromSlash(dir))
		}
		switch {
		case err != nil:
			return fmt.Errorf("write %s: %w", path, err)
		case info.IsDir():
		default:
			return fmt.Errorf("write %s: %s is %s, not a directory; ag writes no file through it: move it aside", path, dir, describeMode(info.Mode()))
		}
	}
	return nil
}

// removeFile deletes the file at a repository path under root and the directories that leaves
// empty. Only a regular file reached through real directories is removed: a symbolic link or a
// directory there, or a parent that is a link, is the user's doing and stays.
func removeFile(root *os.Root, path string) error {
	info, err := lstatThroughDirs(root, path)
	if err != nil || info == nil || !info.Mode().IsRegular() {
		return err
	}
	if err := root.Remove(filepath.FromSlash(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	for dir, _ := splitParent(path); dir != ""; dir, _ = splitParent(dir) {
		if root.Remove(filepath.FromSlash(dir)) != nil {
			break
		}
	}
	return nil
}

// lstatThroughDirs answers what is at path, without following it, or nil when path or one of
// its parents is missing or a parent is not a real directory.
func lstatThroughDirs(root *os.Root, path string) (fs.FileInfo, error) {
	segs := strings.Split(path, "/")
	for i := 1; i <= len(segs); i++ {
		info, err := root.Lstat(filepath.FromSlash(strings.Join(segs[:i], "/")))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if i == len(segs) {
			return info, nil
		}
		if !info.IsDir() {
			return nil, nil
		}
	}
	return nil, nil
}

// removeEmptyDirs removes the directory at path and the directories under it, failing when
// any of them holds something else.
func removeEmptyDirs(root *os.Root, path string) error {
	entries, err := readDir(root, path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeEmptyDirs(root, path+"/"+e.Name()); err != nil {
				return err
			}
		}
	}
	if err := root.Remove(filepath.FromSlash(path)); err != nil {
		return fmt.Errorf("remove the directory %s: %w", path, err)
	}
	return nil
}

// readDir lists a directory of root without following the entries.
func readDir(root *os.Root, path string) ([]fs.DirEntry, error) {
	f, err := root.Open(filepath.FromSlash(path))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// splitParent splits a repository path into its parent directory ("" at the top) and name.
func splitParent(path string) (dir, name string) {
	i := strings.LastIndexByte(path, '/')
	if i < 0 {
		return "", path
	}
	return path[:i], path[i+1:]
}

// describeMode names what kind of file a mode is, for a message.
func describeMode(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	default:
		return "a special file"
	}
}

func humanDuration(d time.Duration) string {
	if d <= 0 {
		return "expired"
	}
	return d.Round(time.Second).String()
}
