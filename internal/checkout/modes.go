package checkout

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/repo"
)

// A path of a checkout holds what git's tree holds there: a file's bytes and mode (100644, or
// 100755 for an executable), a symbolic link (120000, its target as its content) or a
// submodule (160000, a commit of another repository). A link is data: ag writes it as a link,
// reads it with readlink, and never reads, writes or removes anything through it. A submodule
// is never fetched: its directory is left empty, as `git clone` without --recurse-submodules
// leaves it, and what is in it is not the checkout's.

// treeFile is what a revision's tree holds at a path.
type treeFile struct {
	digest string // "sha256:<hex>" of the content (a link's target); "" for a submodule
	Mode   string // repo.ModeFile, ModeExecutable, ModeSymlink or ModeGitlink
	commit string // a submodule's commit, 40 lowercase hex
}

func (f treeFile) Gitlink() bool { return f.Mode == repo.ModeGitlink }

// check refuses a treeFile no tree holds.
func (f treeFile) check() error {
	switch f.Mode {
	case repo.ModeFile, repo.ModeExecutable, repo.ModeSymlink:
		if !repo.IsDigest(f.digest) {
			return fmt.Errorf("has %q for a digest", f.digest)
		}
	case repo.ModeGitlink:
		if !repo.IsGitID(f.commit) {
			return fmt.Errorf("is a submodule of commit %q, not 40 lowercase hex", f.commit)
		}
	default:
		return fmt.Errorf("has mode %q, which ag does not write", f.Mode)
	}
	return nil
}

// baseSum answers what the index keeps as the base content: the digest, or a submodule's
// commit in the first 20 bytes.
func (f treeFile) baseSum() (sha256Sum, error) {
	if f.Gitlink() {
		var s sha256Sum
		if n, err := hex.Decode(s[:], []byte(f.commit)); err != nil || n != 20 {
			return s, fmt.Errorf("is a submodule of commit %q, not 40 lowercase hex", f.commit)
		}
		return s, nil
	}
	s, ok := parseSum(f.digest)
	if !ok {
		return s, fmt.Errorf("has %q for a digest", f.digest)
	}
	return s, nil
}

// baseFile answers the base file an index entry records.
func (e *indexEntry) baseFile() treeFile {
	if e.baseMode == repo.ModeGitlink {
		return treeFile{Mode: e.baseMode, commit: hex.EncodeToString(e.base[:20])}
	}
	return treeFile{digest: e.base.String(), Mode: e.baseMode}
}

// regularFiles answers digests (path → digest) as a tree of 100644 files: what a checkout kept
// before there were modes.
func regularFiles(digests map[string]string) map[string]treeFile {
	out := make(map[string]treeFile, len(digests))
	for p, d := range digests {
		out[p] = treeFile{digest: d, Mode: repo.ModeFile}
	}
	return out
}

// BlobSizes answers the size of each blob of a tree the server sent, digest → size, so that a
// large one is fetched as a stream.
func BlobSizes(entries []*agwpv1.TreeEntry) map[string]uint64 {
	sizes := make(map[string]uint64, len(entries))
	for _, e := range entries {
		if e.GetDigest() != "" {
			sizes[e.GetDigest()] = e.GetSize()
		}
	}
	return sizes
}

// TreeFiles answers the files of a tree the server sent, once every path is one a checkout may
// hold. It runs before anything of the tree is written: a path such as "../x", ".git/config" or
// ".ag/checkout.json" would write outside the checkout, plant a command for git or a server
// address for ag, and a path under a link of the same tree would be written wherever the link
// points; the client must not count on the server to refuse them.
func TreeFiles(entries []*agwpv1.TreeEntry) (map[string]treeFile, error) {
	files := make(map[string]treeFile, len(entries))
	for _, e := range entries {
		p := e.GetPath()
		if err := repo.ValidatePath(p, false); err != nil {
			return nil, fmt.Errorf("refused the server's tree: the path %q %v. Nothing was written; a server (or proxy) that sends such a path is broken or hostile: check --server", ShortPath(p), err)
		}
		if _, twice := files[p]; twice {
			return nil, fmt.Errorf("refused the server's tree: it lists the path %q twice. Nothing was written", ShortPath(p))
		}
		f := treeFile{digest: e.GetDigest(), Mode: e.GetMode(), commit: e.GetGitlinkCommit()}
		if f.Mode == "" {
			// A server from before modes: every file is 100644.
			f.Mode = repo.ModeFile
		}
		err := f.check()
		switch {
		case err == nil && f.Gitlink() && (f.digest != "" || e.GetSize() != 0):
			err = errors.New("is a submodule that names a blob too")
		case err == nil && !f.Gitlink() && f.commit != "":
			err = errors.New("names a submodule's commit, but is no submodule")
		case err == nil && f.Mode == repo.ModeSymlink && (e.GetSize() == 0 || e.GetSize() > repo.MaxSymlinkTarget):
			err = fmt.Errorf("is a symbolic link whose target is %d bytes: a link's target is 1 to %d bytes", e.GetSize(), repo.MaxSymlinkTarget)
		}
		if err != nil {
			return nil, fmt.Errorf("refused the server's tree: %q %v. Nothing was written", ShortPath(p), err)
		}
		files[p] = f
	}
	if err := checkNothingUnder(files); err != nil {
		return nil, fmt.Errorf("refused the server's tree: %v. Nothing was written", err)
	}
	return files, nil
}

// checkNothingUnder refuses files one of whose paths lies under another: under a file, a
// submodule, or a symbolic link (a/ a link, a/b a file), which a write of a/b would go through.
func checkNothingUnder(files map[string]treeFile) error {
	for p := range files {
		for _, dir := range repo.Ancestors(p) {
			d := strings.TrimSuffix(dir, "/")
			if f, ok := files[d]; ok {
				return underError(p, d, f)
			}
		}
	}
	return nil
}

// underError is the refusal of a tree that holds the path p under d, its file f.
func underError(p, d string, f treeFile) error {
	switch f.Mode {
	case repo.ModeSymlink:
		return fmt.Errorf("%q lies under %q, a symbolic link of the same tree: ag writes nothing through a link", ShortPath(p), ShortPath(d))
	case repo.ModeGitlink:
		return fmt.Errorf("%q lies under %q, a submodule of the same tree", ShortPath(p), ShortPath(d))
	}
	return fmt.Errorf("%q would be a file and also the directory of %q", ShortPath(d), ShortPath(p))
}

// A stat's mode: its file type and permission bits, as Linux's stat answers them (statOfInfo
// answers them so elsewhere too).
const (
	statTypeMask   = 0o170000
	statRegular    = 0o100000
	statSymlink    = 0o120000
	statOwnerExec  = 0o100
	statAnyExecute = 0o111
)

// gitModeOfStat answers the git mode of what a stat found: a link, or a file executable when
// its owner may execute it, as git decides (core.fileMode); "" for anything else.
func gitModeOfStat(mode uint32) string {
	switch mode & statTypeMask {
	case statSymlink:
		return repo.ModeSymlink
	case statRegular:
		if mode&statOwnerExec != 0 {
			return repo.ModeExecutable
		}
		return repo.ModeFile
	}
	return ""
}

// tracked reports whether a stat is of something a checkout holds as a path: a regular file or
// a symbolic link.
func tracked(mode uint32) bool { return gitModeOfStat(mode) != "" }

// filePerm answers the permission bits a file of mode gets, from a file's perm now: execute
// wherever it may be read (0644 → 0755, 0600 → 0700, as git and the umask would), or none.
func filePerm(perm fs.FileMode, mode string) fs.FileMode {
	perm &= fs.ModePerm
	if mode == repo.ModeExecutable {
		return perm | (perm&0o444)>>2
	}
	return perm &^ statAnyExecute
}

// readEntry answers what the path holds as its content: a file's bytes, or a link's target, by
// what the scan found there (mode). Nothing is followed.
func (r *checkoutReader) readEntry(path, mode string) ([]byte, error) {
	if mode == repo.ModeSymlink {
		target, err := r.readLink(path)
		return []byte(target), err
	}
	return r.readFile(path)
}

// writeEntry writes content at a repository path under root as mode says: a file with its
// execute bits, a symbolic link to content, or a submodule's empty directory. A file or link is
// made aside and renamed over what is at path, so a link standing there is replaced, never
// written through; the parents must be real directories (makeParents).
func writeEntry(root *os.Root, path string, content []byte, mode string) error {
	switch mode {
	case repo.ModeSymlink:
		return writeLink(root, path, content)
	case repo.ModeGitlink:
		return makeSubmoduleDir(root, path)
	case repo.ModeExecutable:
		return writeFileSync(root, path, content, 0o755, false)
	}
	return writeFileSync(root, path, content, 0o644, false)
}

// writeLink makes the symbolic link path lead to target.
func writeLink(root *os.Root, path string, target []byte) error {
	if err := repo.CheckSymlinkTarget(target); err != nil {
		return fmt.Errorf("write the link %s: %w", path, err)
	}
	if err := makeParents(root, path); err != nil {
		return err
	}
	tmp := tempName(path)
	err := root.Symlink(string(target), filepath.FromSlash(tmp))
	if err == nil {
		err = root.Rename(filepath.FromSlash(tmp), filepath.FromSlash(path))
	}
	if err != nil {
		_ = root.Remove(filepath.FromSlash(tmp))
		return fmt.Errorf("write the link %s: %w", path, err)
	}
	return nil
}

// makeSubmoduleDir makes the empty directory a submodule stands in, unless one is there.
func makeSubmoduleDir(root *os.Root, path string) error {
	if err := makeParents(root, path); err != nil {
		return err
	}
	info, err := root.Lstat(filepath.FromSlash(path))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := root.Mkdir(filepath.FromSlash(path), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("make the submodule's directory %s: %w", path, err)
		}
		return nil
	case err != nil:
		return err
	case !info.IsDir():
		return fmt.Errorf("make the submodule's directory %s: %s stands there", path, describeMode(info.Mode()))
	}
	return nil
}

// removeSubmoduleDir removes a submodule's directory when it is empty: what someone put in it
// is theirs, not the checkout's.
func removeSubmoduleDir(root *os.Root, path string) error {
	info, err := lstatThroughDirs(root, path)
	if err != nil || info == nil || !info.IsDir() {
		return err
	}
	if root.Remove(filepath.FromSlash(path)) == nil {
		for dir, _ := splitParent(path); dir != ""; dir, _ = splitParent(dir) {
			if root.Remove(filepath.FromSlash(dir)) != nil {
				break
			}
		}
	}
	return nil
}

// tempName answers a name beside path for a file to be renamed over it.
func tempName(path string) string {
	dir, _ := splitParent(path)
	if dir == "" {
		return ".ag-write-" + rand.Text()
	}
	return dir + "/.ag-write-" + rand.Text()
}

// EditNote says, for `ag status`, what of a path's mode an edit changed: "mode 100644 →
// 100755", "link → TARGET" for a link made or retargeted. target is the link's, when the edit
// leaves one.
func EditNote(e Edit, target string) string {
	var notes []string
	switch {
	case e.Kind == "deleted":
		if e.BaseMode != repo.ModeFile {
			notes = append(notes, "mode "+e.BaseMode)
		}
	case e.Kind == "added":
		if e.Mode != repo.ModeFile && e.Mode != repo.ModeSymlink {
			notes = append(notes, "mode "+e.Mode)
		}
	case e.Mode != e.BaseMode:
		notes = append(notes, "mode "+e.BaseMode+" → "+e.Mode)
	}
	if e.Kind != "deleted" && e.Mode == repo.ModeSymlink {
		notes = append(notes, "link → "+target)
	}
	if len(notes) == 0 {
		return ""
	}
	return " (" + strings.Join(notes, ", ") + ")"
}

// LinkTargets answers the targets of the links edits leave, read without following them.
func (c *Checkout) LinkTargets(edits []Edit) (map[string]string, error) {
	out := map[string]string{}
	var r *checkoutReader
	for _, e := range edits {
		if e.Kind == "deleted" || e.Mode != repo.ModeSymlink {
			continue
		}
		if r == nil {
			var err error
			if r, err = openCheckoutReader(c.root); err != nil {
				return nil, err
			}
			defer r.close()
		}
		target, err := r.readLink(e.Path)
		if err != nil {
			return nil, err
		}
		out[e.Path] = target
	}
	return out, nil
}

// Submodule is a submodule of the base revision.
type Submodule struct {
	Path   string `json:"path"`
	Commit string `json:"commit"`
}

// Submodules answers the base revision's submodules, by path.
func (c *Checkout) Submodules() ([]Submodule, error) {
	base, err := c.BaseFiles()
	if err != nil {
		return nil, err
	}
	out := []Submodule{}
	for p, f := range base {
		if f.Gitlink() {
			out = append(out, Submodule{Path: p, Commit: f.commit})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// RebuildOldIndex rebuilds the index of a checkout made by an ag that knew no modes (an index of
// version 2 or 3, or base files kept in checkout.json): its base is the server's tree of the
// base revision, modes and all, and the stats it knew are dropped, so the next scan reads every
// file once. Read as they are, such a base would make every executable, link and submodule a
// plain file.
func (ws *Workspace) RebuildOldIndex(ctx context.Context) error {
	old, err := ws.Checkout.predatesModes()
	if err != nil || !old {
		return err
	}
	tree, err := ws.Client.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: ws.Checkout.Repository, Revision: ws.Checkout.BaseRevision})
	if err != nil {
		return fmt.Errorf("rebuild the index of %s, written by an ag that knew no file modes, from the base revision %s: %w", ws.Checkout.root, ws.Checkout.BaseRevision, err)
	}
	base, err := TreeFiles(tree.GetEntries())
	if err != nil {
		return err
	}
	ws.Checkout.idx = nil
	ws.Checkout.SetBase(tree.GetRevision(), base)
	return ws.Checkout.Save()
}

// predatesModes reports whether the checkout's base was kept by an ag that knew no modes.
func (c *Checkout) predatesModes() (bool, error) {
	if c.Index == "" {
		return c.BaseRevision != "", nil
	}
	root, err := os.OpenRoot(c.root)
	if err != nil {
		return false, err
	}
	defer root.Close()
	f, err := root.Open(StateDir + "/" + c.Index)
	if err != nil {
		// loadIndex says what is wrong with it.
		return false, nil
	}
	defer f.Close()
	head := make([]byte, len(indexMagic))
	n, _ := io.ReadFull(f, head)
	return oldIndexVersion(head[:n]), nil
}
