package checkout

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ag-coord/ag/internal/repo"
	"github.com/go-git/go-git/v5/plumbing"
)

// StateDir is where a checkout keeps what ag knows of it.
const StateDir = ".ag"

// Checkout is the state of a working directory made by `ag checkout`.
type Checkout struct {
	Repository   string `json:"repository"`
	Server       string `json:"server"`
	Holder       string `json:"holder"`
	BaseRevision string `json:"base_revision"`
	// Index names the file under .ag that holds the base revision's files and what ag knows of
	// the files on disk (index.go).
	Index string `json:"index,omitempty"`
	// LegacyFiles is where a checkout made before there was an index kept the base revision's
	// files, path → digest: read, and moved into an index at the next save.
	LegacyFiles map[string]string `json:"files,omitempty"`
	Leases      []HeldLease       `json:"leases,omitempty"`
	// Files `ag sync --merge` wrote with conflict markers, path → the local content before the
	// merge, kept under .ag/conflicts/ for `ag sync --ours`.
	Conflicts map[string]conflictRecord `json:"conflicts,omitempty"`

	root string
	idx  *index // nil until loadIndex
	// base is the base revision's tree: nil until baseFiles or setBase.
	base map[string]treeFile
	// baseChanged is set when base is not yet that of the index Index names.
	baseChanged bool
	// baseInIndex is set with baseChanged when idx holds the new base (moveBase), not base.
	baseInIndex bool
	// written are the stats of the files `ag checkout` wrote, until saveIn records them.
	written map[string]fileStat
	// blobSizes are the sizes of base's blobs as the server told them, digest → size, while
	// `ag checkout` writes them: a large one is streamed.
	blobSizes map[string]uint64
	// stateless is a git working tree's (Stateless): nothing is kept under .ag.
	stateless bool
}

// New answers the state of a checkout about to be written at root, of repository on
// server, its leases held as holder.
func New(root, repository, server, holder string) *Checkout {
	return &Checkout{Repository: repository, Server: server, Holder: holder, root: root}
}

// Stateless answers a git working tree at root as a checkout whose leases are the ones its
// holder holds, for the lease commands to act on as in a checkout (internal/gitwork). git keeps
// its files, its base and its index, so ag keeps nothing: Save writes nothing, and what needs a
// checkout's index (local edits, sync, integrate) refuses. gitlinks are the tree's submodules,
// leased as one entry each as in a checkout.
func Stateless(root, repository, server, holder string, leases []HeldLease, gitlinks []string) *Checkout {
	base := make(map[string]treeFile, len(gitlinks))
	for _, p := range gitlinks {
		base[p] = treeFile{Mode: repo.ModeGitlink}
	}
	return &Checkout{Repository: repository, Server: server, Holder: holder, Leases: leases, root: root, base: base, stateless: true}
}

// Root is the checkout's directory.
func (c *Checkout) Root() string { return c.root }

// SetBlobSizes tells the checkout the sizes of its base's blobs as the server told them, digest
// → size, before WriteFiles writes them: a large one is streamed.
func (c *Checkout) SetBlobSizes(sizes map[string]uint64) { c.blobSizes = sizes }

// conflictRecord is a file a sync merged with conflicts.
type conflictRecord struct {
	Ours string `json:"ours"` // digest of the local content before the merge
}

// conflictsDir holds the local contents of files merged with conflicts, by digest.
const conflictsDir = StateDir + "/conflicts"

// oursPath is where the local content with digest d is kept while its file is in conflict.
func oursPath(d string) string { return conflictsDir + "/" + strings.TrimPrefix(d, "sha256:") }

// Conflicted answers which of edits still hold the conflict markers a sync wrote.
func (c *Checkout) Conflicted(edits []Edit) (map[string]bool, error) {
	out := map[string]bool{}
	if len(c.Conflicts) == 0 {
		return out, nil
	}
	r, err := openCheckoutReader(c.root)
	if err != nil {
		return nil, err
	}
	defer r.close()
	for _, e := range edits {
		if _, ok := c.Conflicts[e.Path]; !ok || e.Kind == "deleted" || e.Mode == repo.ModeSymlink {
			continue
		}
		content, err := r.readFile(e.Path)
		if err != nil {
			return nil, err
		}
		if hasConflictMarkers(content) {
			out[e.Path] = true
		}
	}
	return out, nil
}

// Unresolved refuses, as a conflict, edits that still hold conflict markers.
func (c *Checkout) Unresolved(edits []Edit) error {
	conflicted, err := c.Conflicted(edits)
	if err != nil || len(conflicted) == 0 {
		return err
	}
	paths := make([]string, 0, len(conflicted))
	for p := range conflicted {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return &ConflictError{&MarkersError{Paths: paths}}
}

// MarkersError refuses to send files that still hold the conflict markers a sync wrote.
type MarkersError struct{ Paths []string }

func (e *MarkersError) Error() string {
	return fmt.Sprintf("these files still hold the conflict markers ag sync --merge wrote: %s. Edit them, or take one side with ag sync --ours PATH or --theirs PATH, or ag revert PATH", strings.Join(e.Paths, ", "))
}

// RepoPaths turns paths given on the command line into repository paths, as repoPath does.
func (c *Checkout) RepoPaths(base string, args []string) ([]string, error) {
	paths := make([]string, 0, len(args))
	for _, a := range args {
		p, err := c.repoPath(base, a)
		if err != nil {
			return nil, &UsageError{err}
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// HeldLease is a lease this checkout acquired.
type HeldLease struct {
	ID        string    `json:"id"`
	Token     uint64    `json:"token"`
	Paths     []string  `json:"paths"`
	ExpiresAt time.Time `json:"expires_at"`
}

// check refuses state that no ag wrote: ag writes files, reverts and removes by the paths
// and digests it keeps here, so a path into .git or out of the checkout, or a digest that is
// a path (.ag/conflicts/<digest>), must not pass because the file was edited by hand, copied
// from someone else, or damaged.
func (c *Checkout) check() error {
	if err := checkBase(regularFiles(c.LegacyFiles)); err != nil {
		return err
	}
	if c.Index != "" && !validIndexName(c.Index) {
		return fmt.Errorf("index %q is not the name of an index file", ShortPath(c.Index))
	}
	for p, rec := range c.Conflicts {
		if err := repo.ValidatePath(p, false); err != nil {
			return fmt.Errorf("conflict %q %v", ShortPath(p), err)
		}
		if !repo.IsDigest(rec.Ours) {
			return fmt.Errorf("conflict %q has %q for a digest", ShortPath(p), rec.Ours)
		}
	}
	for _, l := range c.Leases {
		for _, p := range l.Paths {
			if err := repo.ValidatePath(p, true); err != nil {
				return fmt.Errorf("lease %s path %q %v", l.ID, ShortPath(p), err)
			}
		}
	}
	return nil
}

func statePath(root string) string { return filepath.Join(root, StateDir, "checkout.json") }

// Find finds the checkout containing dir.
func Find(dir string) (*Checkout, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for d := abs; ; d = filepath.Dir(d) {
		data, err := os.ReadFile(statePath(d))
		if err == nil {
			c := &Checkout{root: d}
			if err := json.Unmarshal(data, c); err != nil {
				return nil, fmt.Errorf("%s is damaged (%v): run `ag checkout` again into a new directory", statePath(d), err)
			}
			if err := c.check(); err != nil {
				return nil, fmt.Errorf("%s is damaged: %v: run `ag checkout` again into a new directory", statePath(d), err)
			}
			if c.Index == "" {
				// Made before there was an index (or with no file at all), and before modes:
				// workspace.rebuildOldIndex asks the server for the base's modes.
				c.SetBase(c.BaseRevision, regularFiles(c.LegacyFiles))
			}
			return c, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		if d == filepath.Dir(d) {
			return nil, &NotFoundError{Dir: abs}
		}
	}
}

// NotFoundError is Find's answer for a directory in no checkout, which may still be a git
// working tree set up for ag (internal/gitwork): the command line then looks there.
type NotFoundError struct{ Dir string }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("%s is not in a checkout: run `ag checkout REPO DIR` first", e.Dir)
}

// Save writes the state atomically, so a crash leaves the old or the new state.
func (c *Checkout) Save() error {
	if c.stateless {
		return nil
	}
	root, err := os.OpenRoot(c.root)
	if err != nil {
		return err
	}
	defer root.Close()
	return c.saveIn(root)
}

// saveIn writes the state into the checkout opened as root, as every file of a checkout is
// written: never through a symbolic link.
func (c *Checkout) saveIn(root *os.Root) error {
	if c.written != nil {
		c.recordStats(c.written)
		c.written = nil
	}
	if !c.baseChanged {
		return c.saveState(root)
	}
	// A new base goes to a new index file, named in checkout.json once it is whole; the old
	// one goes once checkout.json no longer names it.
	x := c.idx
	if !c.baseInIndex {
		var err error
		if x, err = baseIndex(c.base, c.idx); err != nil {
			return err
		}
	}
	old, oldLink := c.Index, ""
	if c.idx != nil {
		// The link of the overlay being replaced, even when the new base is built afresh.
		oldLink = c.idx.ownLink(old)
	}
	name := indexPrefix + rand.Text()
	if err := saveIndex(root, name, x); err != nil {
		return err
	}
	c.Index, c.LegacyFiles = name, nil
	if err := c.saveState(root); err != nil {
		c.Index = old
		_ = root.Remove(StateDir + "/" + name)
		if link := x.ownLink(name); link != "" {
			_ = root.Remove(StateDir + "/" + link)
		}
		// What the index was read from is gone with it: the next save writes it whole.
		x.shared, x.linkOf = "", ""
		return err
	}
	c.idx, c.baseChanged, c.baseInIndex = x, false, false
	for _, gone := range []string{old, oldLink} {
		if gone != "" && gone != x.shared {
			_ = root.Remove(StateDir + "/" + gone)
		}
	}
	removeStaleIndexes(root, name)
	return nil
}

// saveState writes checkout.json.
func (c *Checkout) saveState(root *os.Root) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return writeStateFile(root, StateDir+"/checkout.json", data)
}

// SetBase makes files the checkout's base revision's, written to a new index at the next save.
func (c *Checkout) SetBase(revision string, files map[string]treeFile) {
	if files == nil {
		files = map[string]treeFile{}
	}
	c.BaseRevision, c.base, c.baseChanged, c.baseInIndex = revision, files, true, false
}

// recordWritten takes the stats of the base files `ag checkout` wrote, for the next save to
// record them in the index (recordStats).
func (c *Checkout) recordWritten(written map[string]fileStat) {
	c.written = written
}

// recordStats records in the index, for the next scan, the stats of base files as they were
// written: a checkout writes into a directory of its own making, which nothing else writes
// until it is done, so each file holds its base content with the stat taken. The racy window
// still applies: files written in the last moments before the index are hashed once.
func (c *Checkout) recordStats(written map[string]fileStat) {
	x := &index{stamp: time.Now().UnixNano(), window: racyWindow, entries: make([]indexEntry, 0, len(written))}
	for p, st := range written {
		if f, ok := c.base[p]; ok && gitModeOfStat(st.mode) == localMode(f.Mode) {
			if sum, ok := parseSum(f.digest); ok {
				x.entries = append(x.entries, indexEntry{path: p, hashed: true, stat: st, local: sum})
			}
		}
	}
	c.idx = x
}

// localMode answers the mode a scan finds for a base file of mode written as the base has it.
func localMode(mode string) string {
	if mode == repo.ModeGitlink {
		return ""
	}
	return mode
}

// loadIndex answers the checkout's index, reading it the first time.
func (c *Checkout) loadIndex(root *os.Root) (*index, error) {
	if c.stateless {
		return nil, &UsageError{fmt.Errorf("%s is a git working tree: git keeps its files, so use git (git status, git commit, git push) where an ag checkout needs its index", c.root)}
	}
	if c.idx != nil && !c.baseChanged {
		return c.idx, nil
	}
	if c.baseChanged && c.baseInIndex {
		return c.idx, nil
	}
	if c.baseChanged {
		// A base not saved yet: its files with what is known of them on disk.
		return baseIndex(c.base, c.idx)
	}
	x, err := readIndex(root, c.Index)
	if errors.Is(err, fs.ErrNotExist) {
		// Another ag in this checkout may have moved it to a new base meanwhile, and removed
		// the index this one read the name of: the state is read again, once.
		if fresh, ferr := Find(c.root); ferr == nil && fresh.root == c.root && fresh.Index != c.Index && fresh.Index != "" {
			c.Index, c.BaseRevision, c.LegacyFiles = fresh.Index, fresh.BaseRevision, nil
			c.Leases, c.Conflicts = fresh.Leases, fresh.Conflicts
			x, err = readIndex(root, c.Index)
		}
	}
	if errors.Is(err, errIndexOldVersion) {
		return nil, fmt.Errorf("%s was written by an ag that knew no file modes: run ag status (with the server reachable) to rebuild it", filepath.Join(c.root, StateDir, c.Index))
	}
	if err != nil {
		return nil, fmt.Errorf("%s is damaged (%v): run `ag checkout` again into a new directory", filepath.Join(c.root, StateDir, c.Index), err)
	}
	c.idx = x
	return x, nil
}

// takeIndexOf takes the index other has read, when this checkout's state names the same index
// file at the same base: that file can differ from it only by stats a later scan recorded, and
// a stat with its digest stays true of the file for as long as the file keeps that stat. A
// sync after an integrate then reads no index again: at 100,000 files that is a read and a
// decode of some megabytes.
func (c *Checkout) takeIndexOf(other *Checkout) {
	if c.idx == nil && other.idx != nil && !c.baseChanged && !other.baseChanged &&
		c.root == other.root && c.Index != "" && c.Index == other.Index && c.BaseRevision == other.BaseRevision {
		c.idx = other.idx
	}
}

// BaseFiles answers the base revision's files, once every path is one a checkout may hold (see
// checkBase).
func (c *Checkout) BaseFiles() (map[string]treeFile, error) {
	if c.base != nil {
		return c.base, nil
	}
	root, err := os.OpenRoot(c.root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	x, err := c.loadIndex(root)
	if err != nil {
		return nil, err
	}
	files := make(map[string]treeFile, len(x.entries))
	for i := range x.entries {
		if e := &x.entries[i]; e.inBase {
			files[e.path] = e.baseFile()
		}
	}
	if err := checkBase(files); err != nil {
		return nil, c.indexDamaged(err)
	}
	c.base = files
	return files, nil
}

// indexDamaged is the refusal of an index that holds what no ag wrote (why): a path or a file
// no checkout may hold.
func (c *Checkout) indexDamaged(why error) error {
	return fmt.Errorf("%s is damaged: %v: run `ag checkout` again into a new directory", filepath.Join(c.root, StateDir, c.Index), why)
}

// tokens answers the fencing tokens of the leases this checkout holds.
func (c *Checkout) tokens() []uint64 {
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

// ScanTree answers the regular files under dir by their repository paths, skipping symbolic
// links (never followed, so nothing outside dir is read) and, at any depth, what no repository
// may hold: the checkout's state and git's directories, a vendored repository's or a
// submodule's among them, as git itself skips a nested repository.
func ScanTree(dir string) (map[string]localFile, []string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	found, skipped, err := walkFiles(root, false, false)
	if err != nil {
		return nil, nil, err
	}
	paths := make([]string, len(found))
	for i, f := range found {
		paths[i] = f.rel
	}
	hashed, err := hashFiles(root, paths)
	if err != nil {
		return nil, nil, err
	}
	files := make(map[string]localFile, len(found))
	for i, p := range paths {
		files[p] = hashed[i]
	}
	return files, skipped, nil
}

// hashWorkers is how many files a scan reads and hashes at once.
var hashWorkers = min(8, 2*runtime.GOMAXPROCS(0))

// hashFiles reads and hashes the files at paths under root, in parallel: a cold scan of many
// small files waits on the file system.
func hashFiles(root *os.Root, paths []string) ([]localFile, error) {
	hashed := make([]localFile, len(paths))
	errs := make([]error, len(paths))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(hashWorkers, len(paths)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(paths) {
					return
				}
				hashed[i], errs[i] = hashFile(root, paths[i])
			}
		})
	}
	wg.Wait()
	return hashed, errors.Join(errs...)
}

// walked is a regular file a walk found: its repository path, and its stat when asked for.
type walked struct {
	rel  string
	info fs.FileInfo
}

// walkWorkers is how many directories a walk reads at once: lstat of many files is mostly
// the kernel's work, which two cores do twice as fast.
var walkWorkers = min(8, 2*runtime.GOMAXPROCS(0))

// walkFiles lists the regular files under root (and the symbolic links, withLinks), with their
// stats when withInfo, and the paths that are neither, skipping what no repository may hold.
// The top-level directories are walked in parallel; the answer is in no particular order.
func walkFiles(root *os.Root, withInfo, withLinks bool) ([]walked, []string, error) {
	fsys := root.FS()
	var (
		mu      sync.Mutex
		files   []walked
		skipped []string
		refused []RefusedPath // every name ag refuses, told all at once
	)
	refuse := func(rel string, err error) {
		mu.Lock()
		refused = append(refused, RefusedPath{Path: rel, Rule: err.Error()})
		mu.Unlock()
	}
	visit := func(rel string, d fs.DirEntry, local *[]walked, localSkipped *[]string) error {
		if _, reserved := repo.ReservedSegment(d.Name()); reserved {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if err := repo.ValidatePath(rel, false); err != nil {
				refuse(rel+"/", err) // and not what is under it, which its name says
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() && !(withLinks && d.Type()&fs.ModeSymlink != 0) {
			*localSkipped = append(*localSkipped, rel)
			return nil
		}
		if err := repo.ValidatePath(rel, false); err != nil {
			refuse(rel, err)
			return nil
		}
		w := walked{rel: rel}
		if withInfo {
			// The stat is taken before the content is read: a write in between moves the
			// mtime on from what is recorded, and the next scan hashes the file again.
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
			if _, reserved := repo.ReservedSegment(d.Name()); reserved {
				continue
			}
			if err := repo.ValidatePath(d.Name(), false); err != nil {
				refuse(d.Name()+"/", err)
				continue
			}
			dirs = append(dirs, d.Name())
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
	if len(refused) > 0 {
		return nil, nil, refusedNames(refused)
	}
	sort.Strings(skipped)
	return files, skipped, nil
}

// refusedNames answers the error of names ag refuses, every one of them quoted with its rule,
// in path order: a name may hold any byte, and reaches a terminal as data.
func refusedNames(refused []RefusedPath) error {
	sort.Slice(refused, func(i, j int) bool { return refused[i].Path < refused[j].Path })
	var b strings.Builder
	fmt.Fprintf(&b, "%d names ag refuses:", len(refused))
	for _, r := range refused {
		fmt.Fprintf(&b, "\n  %s %s", strconv.Quote(r.Path), r.Rule)
	}
	b.WriteString("\nrename them, or move them out of the directory")
	return errors.New(b.String())
}

// walkedFiles is what a walk with stats found: the regular files, their paths in one buffer
// rather than a string each, since most are only looked up in the index.
type walkedFiles struct {
	names []byte
	ends  []int // path i is names[ends[i-1]:ends[i]]
	stats []fileStat
}

func (w *walkedFiles) add(path []byte, st fileStat) {
	w.names = append(w.names, path...)
	w.ends = append(w.ends, len(w.names))
	w.stats = append(w.stats, st)
}

func (w *walkedFiles) len() int { return len(w.ends) }

func (w *walkedFiles) path(i int) []byte {
	start := 0
	if i > 0 {
		start = w.ends[i-1]
	}
	return w.names[start:w.ends[i]]
}

// walkStatsOfRoot is statWalk through os.Root, for where the system calls it makes are not
// to be had.
func walkStatsOfRoot(root *os.Root) ([]walkedFiles, error) {
	found, _, err := walkFiles(root, true, true)
	if err != nil {
		return nil, err
	}
	var out walkedFiles
	for _, f := range found {
		out.add([]byte(f.rel), statOfInfo(f.info))
	}
	return []walkedFiles{out}, nil
}

// scan is what a scan of a checkout found, against its index.
type scan struct {
	x     *index
	found []scanState // per entry of x
	// submodules are the base's submodules' paths: nothing at or under one is the checkout's.
	submodules map[string]bool
	// hash are the files the scan read and hashed: those it found in state rehashed, and those
	// with no entry in x. The others' contents came from the index.
	hash     []toHash
	contents []localFile // of each of hash
	watched  bool        // the scan took the checkout watcher's word for what did not change
}

// toHash is a file a scan reads and hashes.
type toHash struct {
	path  string
	entry int // in the index, or -1
	stat  fileStat
}

// scanState is what a scan found of a path of the index.
type scanState byte

const (
	absent    scanState = iota // no regular file or link there
	unchanged                  // a file or link with the stat recorded for it
	rehashed                   // a file or link read and hashed again
)

// newScan answers a scan against x, nothing found yet.
func newScan(x *index) *scan {
	s := &scan{x: x, found: make([]scanState, len(x.entries))}
	for i := range x.entries {
		if x.entries[i].baseMode == repo.ModeGitlink {
			if s.submodules == nil {
				s.submodules = map[string]bool{}
			}
			s.submodules[x.entries[i].path] = true
		}
	}
	return s
}

// inSubmodule reports whether path is a submodule's or under one: another repository's, which
// ag neither reads nor sends, as git leaves it to the submodule.
func (s *scan) inSubmodule(path []byte) bool {
	if s.submodules == nil {
		return false
	}
	for i := range path {
		if path[i] == '/' && s.submodules[string(path[:i])] {
			return true
		}
	}
	return s.submodules[string(path)]
}

// hashFile reads the file at a repository path under root and answers its digest and size.
func hashFile(root *os.Root, path string) (localFile, error) {
	f, err := root.Open(filepath.FromSlash(path))
	if err != nil {
		return localFile{}, err
	}
	defer f.Close()
	return hashContent(path, f)
}

// hashContent answers the digest and size of what r holds, the file at path.
func hashContent(path string, r io.Reader) (localFile, error) {
	h := sha256.New()
	buf := hashBuffers.Get().(*[]byte)
	defer hashBuffers.Put(buf)
	// Through a struct that hides the file's WriteTo, so that the pooled buffer is used.
	n, err := io.CopyBuffer(h, struct{ io.Reader }{r}, *buf)
	if err != nil {
		return localFile{}, fmt.Errorf("read %s: %w", path, err)
	}
	return localFile{digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), size: n}, nil
}

// Edit is a difference between the checkout's files and its base revision: of content,
// of mode, or both.
type Edit struct {
	Path     string
	Kind     string // "added", "modified", "deleted"
	digest   string // of the local content (a link's target), unless deleted
	Mode     string // of the local file (repo.ModeFile, ModeExecutable or ModeSymlink), unless deleted
	base     string // of the base revision's content, unless added
	BaseMode string // of the base revision's file, unless added
}

// LocalEdits compares the files on disk with the base revision's.
func (c *Checkout) LocalEdits() ([]Edit, error) {
	s, err := c.scan()
	if err != nil {
		return nil, err
	}
	return s.edits(c)
}

// edits answers the differences the scan found between the files on disk and the base
// revision's, by path. Every path is checked as baseFiles checks them: a path the index gave
// (a deletion, or a file the watcher's word left unread) is the index's alone, and revert
// writes or removes by it.
func (s *scan) edits(c *Checkout) ([]Edit, error) {
	var edits []Edit
	compare := func(e *indexEntry, local sha256Sum, mode string) {
		switch {
		case e.baseMode == repo.ModeGitlink:
			// A submodule is never an edit: ag neither fetches it nor looks in its directory.
		case !e.inBase:
			edits = append(edits, Edit{Path: e.path, Kind: "added", digest: local.String(), Mode: mode})
		case local != e.base || mode != e.baseMode:
			edits = append(edits, Edit{Path: e.path, Kind: "modified", digest: local.String(), Mode: mode, base: e.base.String(), BaseMode: e.baseMode})
		}
	}
	for i := range s.x.entries {
		e := &s.x.entries[i]
		switch {
		case e.baseMode == repo.ModeGitlink:
		case s.found[i] == absent && e.inBase:
			edits = append(edits, Edit{Path: e.path, Kind: "deleted", base: e.base.String(), BaseMode: e.baseMode})
		case s.found[i] == unchanged:
			compare(e, e.local, gitModeOfStat(e.stat.mode))
		}
	}
	for i, h := range s.hash {
		sum, _ := parseSum(s.contents[i].digest)
		if h.entry >= 0 {
			compare(&s.x.entries[h.entry], sum, gitModeOfStat(h.stat.mode))
		} else {
			compare(&indexEntry{path: h.path}, sum, gitModeOfStat(h.stat.mode))
		}
	}
	for _, e := range edits {
		if err := repo.ValidatePath(e.Path, false); err != nil {
			return nil, c.indexDamaged(fmt.Errorf("file %q %v", ShortPath(e.Path), err))
		}
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].Path < edits[j].Path })
	return edits, nil
}

// scan scans the checkout's files against its index: a file whose stat is as recorded (and
// not racily clean) takes the recorded content without being read. When the scan hashed a file
// or found one gone, it writes the index anew with what it found, for the next scan; the index
// only saves time there, so a failure to write it is no error.
func (c *Checkout) scan() (*scan, error) {
	root, err := os.OpenRoot(c.root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	defer holdGC()()
	start := time.Now().UnixNano()
	var (
		s     *scan
		token WatchToken
	)
	if watched(c.root) {
		// A watcher: its token is taken before anything is read, so that what changes from
		// now on is the next scan's to hear of.
		x, err := c.loadIndex(root)
		if err != nil {
			return nil, err
		}
		if ans, ok := AskWatcher(c.root, x.watch); ok {
			token = ans.Now
			if !ans.Full {
				if s, err = scanChanged(root, x, ans.Paths); err != nil {
					return nil, err
				}
			}
		}
	}
	if s == nil {
		if s, err = c.walkAll(root); err != nil {
			return nil, err
		}
	}
	if s.contents, err = hashEntries(root, s.hash); err != nil {
		return nil, err
	}
	gone := false
	for i := range s.x.entries {
		gone = gone || (s.found[i] == absent && s.x.entries[i].hashed)
	}
	// A new watcher token is worth a write when the watcher would otherwise answer many paths
	// again next time.
	newToken := token != s.x.watch && (token.Session != s.x.watch.Session || token.Seq-s.x.watch.Seq > 256)
	if s.settledHashes(start) || gone || newToken || (len(s.hash) > 0 && (c.Index == "" || c.baseChanged)) {
		next := s.recorded(start)
		next.watch = token
		if c.Index == "" || c.baseChanged {
			c.idx = next
			_ = c.saveIn(root)
		} else if saveIndex(root, c.Index, next) == nil {
			c.idx = next
		}
	}
	return s, nil
}

// settledHashes reports whether the scan that began at start hashed a file that the index it
// writes would let the next scan trust. A file written within the racy window of the scan's
// start is hashed again by every scan until one begins a window after it (index.trusted): an
// index recording only such files saves the next scan nothing, and writing it (the whole index,
// megabytes for a large checkout) would be most of an integrate's cost, which edits a file just
// before it scans.
func (s *scan) settledHashes(start int64) bool {
	window := s.x.window
	if window == 0 {
		window = racyWindow
	}
	for _, h := range s.hash {
		if h.stat.mtime < start-window.Nanoseconds() {
			return true
		}
	}
	return false
}

// gcHold counts the scans running in this process (the MCP server runs several at once).
var gcHold struct {
	sync.Mutex
	scans   int
	percent int
	limit   int64
}

// holdGC holds the collector off while a scan runs, and answers the function that lets it go
// when the last running scan ends. What a scan allocates is nearly all alive until it ends
// (the index, the stats it found): collecting during it would mark the same tens of megabytes
// again and again, on the cores the walk's system calls want (measured at 100,000 files: a
// quarter of a status's time). Reading files allocates little (hashFile's buffers are pooled),
// and a memory limit of 1 GiB beyond the heap at the start still makes the collector run
// should a scan grow past it.
func holdGC() func() {
	gcHold.Lock()
	defer gcHold.Unlock()
	if gcHold.scans == 0 {
		gcHold.percent = debug.SetGCPercent(-1)
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		gcHold.limit = debug.SetMemoryLimit(min(debug.SetMemoryLimit(-1), int64(m.HeapAlloc)+1<<30))
	}
	gcHold.scans++
	return func() {
		gcHold.Lock()
		defer gcHold.Unlock()
		if gcHold.scans--; gcHold.scans == 0 {
			debug.SetGCPercent(gcHold.percent)
			debug.SetMemoryLimit(gcHold.limit)
		}
	}
}

// hashEntries reads and hashes the files and links a scan found, in parallel, as hashFiles
// does, following no link.
func hashEntries(root *os.Root, hs []toHash) ([]localFile, error) {
	r, err := newCheckoutReader(root)
	if err != nil {
		return nil, err
	}
	defer r.close()
	hashed := make([]localFile, len(hs))
	errs := make([]error, len(hs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(hashWorkers, len(hs)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(hs) {
					return
				}
				hashed[i], errs[i] = r.hash(hs[i].path, hs[i].stat)
			}
		})
	}
	wg.Wait()
	return hashed, errors.Join(errs...)
}

// hashBuffers are hashFile's read buffers, so that hashing many files with the collector held
// off does not pile up a buffer per file.
var hashBuffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// walkAll scans every file of the checkout against its index: the files are listed while the
// index is read, since both take a while at 100,000 files.
func (c *Checkout) walkAll(root *os.Root) (*scan, error) {
	type loaded struct {
		x      *index
		lookup *pathTable
		err    error
	}
	ch := make(chan loaded, 1)
	go func() {
		x, err := c.loadIndex(root)
		if err != nil {
			ch <- loaded{err: err}
			return
		}
		ch <- loaded{x: x, lookup: newPathTable(x)}
	}()
	walked, walkErr := statWalk(c.root, root)
	l := <-ch
	if walkErr != nil {
		return nil, walkErr
	}
	if l.err != nil {
		return nil, l.err
	}
	s := newScan(l.x)
	for _, part := range walked {
		for i := range part.len() {
			if err := s.saw(l.lookup, part.path(i), part.stats[i]); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// saw records a regular file or link found at path with stat st: unchanged when the index may
// be trusted for it, to be hashed otherwise.
func (s *scan) saw(lookup *pathTable, path []byte, st fileStat) error {
	if s.inSubmodule(path) {
		return nil
	}
	at, known := lookup.find(path)
	if !known {
		if err := repo.ValidatePath(string(path), false); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		s.hash = append(s.hash, toHash{path: string(path), entry: -1, stat: st})
		return nil
	}
	if _, ok := s.x.trusted(&s.x.entries[at], st); ok {
		s.found[at] = unchanged
		return nil
	}
	s.found[at] = rehashed
	s.hash = append(s.hash, toHash{path: s.x.entries[at].path, entry: at, stat: st})
	return nil
}

// scanChanged scans, with a watcher's answer, only what may have changed since the index was
// written: the paths the watcher names (a directory with all under it), and the entries the
// index cannot vouch for (never hashed, or racily clean). Every other file is as the index
// says, without a system call.
func scanChanged(root *os.Root, x *index, changed []string) (*scan, error) {
	s := newScan(x)
	s.watched = true
	lookup := searchTable(x)
	// A new file is named by the watcher, and found again under each new directory above it.
	added := map[string]bool{}
	sawNew := func(path string, st fileStat) error {
		if added[path] {
			return nil
		}
		added[path] = true
		return s.saw(lookup, []byte(path), st)
	}
	check := make([]bool, len(x.entries))
	for i := range x.entries {
		e := &x.entries[i]
		if _, ok := x.trusted(e, e.stat); ok {
			s.found[i] = unchanged
		} else {
			check[i] = true
		}
	}
	for _, p := range changed {
		if i, ok := lookup.find([]byte(p)); ok {
			check[i] = true
		}
		// What was under p, were it a directory: the watcher names a directory removed or
		// moved away, not always each file it held.
		under := p + "/"
		first := sort.Search(len(x.entries), func(i int) bool { return x.entries[i].path >= under })
		for i := first; i < len(x.entries) && strings.HasPrefix(x.entries[i].path, under); i++ {
			check[i] = true
		}
		// Through real directories only, as the walk goes: os.Root follows a link to a
		// directory of the checkout, and a directory replaced by such a link would then seem to
		// hold the files of the one it leads to.
		info, err := lstatThroughDirs(root, p)
		switch {
		case err != nil:
			return nil, err
		case info == nil:
			continue
		case info.IsDir():
			// A directory made or moved in: its files may be unknown to the index.
			sub, err := root.OpenRoot(filepath.FromSlash(p))
			if err != nil {
				return nil, err
			}
			found, _, err := walkFiles(sub, true, true)
			sub.Close()
			if err != nil {
				return nil, err
			}
			for _, f := range found {
				// A file the index knows is under p, so checked below with the others.
				path := under + f.rel
				if _, known := lookup.find([]byte(path)); !known {
					if err := sawNew(path, statOfInfo(f.info)); err != nil {
						return nil, err
					}
				}
			}
		case tracked(statOfInfo(info).mode):
			if _, ok := lookup.find([]byte(p)); !ok {
				if err := sawNew(p, statOfInfo(info)); err != nil {
					return nil, err
				}
			}
		}
	}
	for i := range x.entries {
		if !check[i] {
			continue
		}
		s.found[i] = absent
		info, err := lstatThroughDirs(root, x.entries[i].path)
		if err != nil {
			return nil, err
		}
		if info != nil && tracked(statOfInfo(info).mode) {
			if err := s.saw(lookup, []byte(x.entries[i].path), statOfInfo(info)); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// watched reports whether a watcher may be watching the checkout at root: its socket is there.
func watched(root string) bool {
	info, err := os.Lstat(filepath.Join(root, WatchSocket))
	return err == nil && info.Mode()&fs.ModeSocket != 0
}

// recorded answers the index the scan leaves for the next: the stats and contents it found,
// for the files whose size while hashed was the one stat gave (another means the file was being
// written: it is hashed again next time).
func (s *scan) recorded(start int64) *index {
	next := &index{stamp: start, window: s.x.window, entries: make([]indexEntry, 0, len(s.x.entries)+len(s.hash)),
		shared: s.x.shared, linkOf: s.x.linkOf, sharedCRC: s.x.sharedCRC, changed: maps.Clone(s.x.changed)}
	if next.window == 0 {
		next.window = racyWindow
	}
	record := func(e indexEntry, h toHash, content localFile) indexEntry {
		e.hashed = content.size == h.stat.size
		e.stat = h.stat
		e.local, _ = parseSum(content.digest)
		return e
	}
	rehashedAt := map[int]int{}
	for i, h := range s.hash {
		if h.entry >= 0 {
			rehashedAt[h.entry] = i
		}
	}
	for i, e := range s.x.entries {
		switch s.found[i] {
		case absent:
			next.noteChanged(e.path)
			if !e.inBase {
				continue
			}
			e.hashed, e.stat, e.local = false, fileStat{}, sha256Sum{}
		case rehashed:
			next.noteChanged(e.path)
			h := rehashedAt[i]
			e = record(e, s.hash[h], s.contents[h])
		}
		next.entries = append(next.entries, e)
	}
	sorted := true
	for i, h := range s.hash {
		if h.entry < 0 {
			next.noteChanged(h.path)
			next.entries = append(next.entries, record(indexEntry{path: h.path}, h, s.contents[i]))
			sorted = false
		}
	}
	if !sorted {
		slices.SortFunc(next.entries, func(a, b indexEntry) int { return strings.Compare(a.path, b.path) })
	}
	return next
}

// repoPath turns a path given on the command line into a repository path; a trailing '/' is
// kept. A relative path is taken relative to base, the directory the command works in (-C, as
// with git -C; "." by default).
func (c *Checkout) repoPath(base, arg string) (string, error) {
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
	// ".." or below it is out; a name that only starts with two dots ("..x") is in.
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%s is not inside the checkout %s", arg, c.root)
	}
	rel = filepath.ToSlash(rel)
	if !dir {
		// Lstat: a link to a directory is a path of its own, leased and sent as the link.
		if st, err := os.Lstat(abs); err == nil && st.IsDir() {
			dir = true
		}
	}
	if dir {
		rel += "/"
	}
	if err := repo.ValidatePath(rel, true); err != nil {
		return "", fmt.Errorf("%q %w", rel, err)
	}
	return rel, nil
}

// ShortPath cuts a path for an error message: a server may send up to any length.
func ShortPath(p string) string {
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
	return writeFileSync(root, path, content, 0o644, false)
}

// writeStateFile is writeFile for the checkout's own state (checkout.json, the index): the
// content reaches the disk before the rename, and the rename before it returns, so that after
// a power loss checkout.json never names an index that is not whole.
func writeStateFile(root *os.Root, path string, content []byte) error {
	return writeFileSync(root, path, content, 0o644, true)
}

// writeFileSync is writeFile of a file with permissions perm (less the umask).
func writeFileSync(root *os.Root, path string, content []byte, perm fs.FileMode, durable bool) error {
	return writeFileWith(root, path, perm, durable, func(w io.Writer) error {
		_, err := w.Write(content)
		return err
	})
}

// writeFileWith is writeFileSync of the content write writes.
func writeFileWith(root *os.Root, path string, perm fs.FileMode, durable bool, write func(io.Writer) error) error {
	if err := makeParents(root, path); err != nil {
		return err
	}
	dir, _ := splitParent(path)
	tmp := tempName(path)
	f, err := root.OpenFile(filepath.FromSlash(tmp), os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	err = write(f)
	if err == nil && durable {
		err = f.Sync()
	}
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
	if durable {
		parent := dir
		if parent == "" {
			parent = "."
		}
		if d, err := root.Open(filepath.FromSlash(parent)); err == nil {
			err = d.Sync()
			d.Close()
			if err != nil {
				return fmt.Errorf("write %s: %w", path, err)
			}
		}
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

// removeFile deletes the file or symbolic link at a repository path under root (the link
// itself: unlinkat follows no link) and the directories that leaves empty. Only what is reached
// through real directories is removed: a directory there, or a parent that is a link, is the
// user's doing and stays.
func removeFile(root *os.Root, path string) error {
	info, err := lstatThroughDirs(root, path)
	if err != nil || info == nil || !tracked(statOfInfo(info).mode) {
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

// lstatThroughDirs answers what is at path, without following it or a link on its way, or nil
// when path or one of its parents is missing or a parent is not a real directory.
func lstatThroughDirs(root *os.Root, path string) (fs.FileInfo, error) {
	segs := strings.Split(path, "/")
	for i := 1; i <= len(segs); i++ {
		info, err := root.Lstat(filepath.FromSlash(strings.Join(segs[:i], "/")))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil, nil // ENOTDIR: a parent turned into a file since it was looked at
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

func HumanDuration(d time.Duration) string {
	if d <= 0 {
		return "expired"
	}
	return d.Round(time.Second).String()
}

// RefusedPath is a path of the history the server would refuse, and why.
type RefusedPath struct {
	Path   string // may hold any byte: print it quoted
	Rule   string
	Commit plumbing.Hash
}
