package importer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
)

// IsGitRepository reports whether dir is the top of a git working tree (it holds .git, a
// directory or, for a linked worktree, a file).
func IsGitRepository(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, ".git"))
	return err == nil
}

// GitHistory is what an import uploads, in the order the server takes it: blobs, then trees
// with every tree after the trees it holds, then commits with every commit after its parents.
type GitHistory struct {
	Head    plumbing.Hash
	Blobs   []plumbing.Hash
	Trees   []plumbing.Hash
	Commits []plumbing.Hash
	Files   int // files, links and submodules in the head commit's tree
	// Shallow is where the history stops, sorted: the commits of a shallow clone's boundary
	// (its .git/shallow) that HEAD reaches, whose parents are not read, uploaded nor required.
	// None for a whole history.
	Shallow []plumbing.Hash
	// Refused is every entry the server would refuse, each once, with the first commit that
	// brings it in: an import tells them all before it uploads a byte.
	Refused []checkout.RefusedPath
}

// OpenGitStorage opens the object and reference storage of the git working tree dir.
func OpenGitStorage(dir string) (*filesystem.Storage, error) {
	gitDir := filepath.Join(dir, ".git")
	fi, err := os.Stat(gitDir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is a file, as in a linked worktree or a submodule: import from the repository's main working tree", gitDir)
	}
	// A large object is read as a stream (uploadMissing), not into memory and the cache.
	return filesystem.NewStorageWithOptions(osfs.New(gitDir), cache.NewObjectLRUDefault(),
		filesystem.Options{LargeObjectThreshold: client.LargeBlobBytes}), nil
}

// ReadGitHistory lists the objects that the HEAD of the git repository reaches, and the
// entries of its trees that the server would refuse (gitstore.EntryProblem for every tree, and
// for HEAD's tree, which every checkout writes, the rules of a checkout's paths and links).
// Each tree is read once, however many commits hold it. A shallow clone's history stops at the
// commits its shallow file lists (s a storer.ShallowStorer): their parents are not read. A
// commit missing anywhere else is a hole, refused as a *checkout.UsageError.
func ReadGitHistory(ctx context.Context, s storer.Storer) (*GitHistory, error) {
	ref, err := storer.ResolveReference(s, plumbing.HEAD)
	if err != nil {
		return nil, fmt.Errorf("read HEAD: %w (a repository without commits has no history to import)", err)
	}
	h := &GitHistory{Head: ref.Hash()}
	boundary := map[plumbing.Hash]bool{}
	if ss, ok := s.(storer.ShallowStorer); ok {
		list, err := ss.Shallow()
		if err != nil {
			return nil, fmt.Errorf("read the shallow file: %w", err)
		}
		for _, id := range list {
			boundary[id] = true
		}
	}
	seenCommit := map[plumbing.Hash]bool{}
	seenBlob := map[plumbing.Hash]bool{}
	filesIn := map[plumbing.Hash]int{} // trees read so far, with the entries they hold

	// walkTree reads tree id, first found at prefix in commit, and what it holds that was
	// not read before.
	var walkTree func(id plumbing.Hash, prefix string, commit plumbing.Hash) (int, error)
	walkTree = func(id plumbing.Hash, prefix string, commit plumbing.Hash) (int, error) {
		if n, ok := filesIn[id]; ok {
			return n, nil
		}
		t, err := object.GetTree(s, id)
		if err != nil {
			return 0, fmt.Errorf("read tree %s: %w", id, err)
		}
		files := 0
		for _, e := range t.Entries {
			if rule := gitstore.EntryProblem(e.Name, e.Mode); rule != "" {
				// What lies below a refused name is not looked at: its name says it all.
				h.Refused = append(h.Refused, checkout.RefusedPath{Path: prefix + e.Name, Rule: rule, Commit: commit})
				continue
			}
			switch e.Mode {
			case filemode.Dir:
				n, err := walkTree(e.Hash, prefix+e.Name+"/", commit)
				if err != nil {
					return 0, err
				}
				files += n
			case filemode.Submodule:
				files++ // a commit of another repository: nothing of it is uploaded
			default:
				files++
				if !seenBlob[e.Hash] {
					seenBlob[e.Hash] = true
					h.Blobs = append(h.Blobs, e.Hash)
				}
			}
		}
		filesIn[id] = files
		h.Trees = append(h.Trees, id) // after everything it holds
		return files, nil
	}

	// Commits in an order where parents come first: a depth-first walk that emits a commit
	// once all its parents are emitted.
	type frame struct {
		id       plumbing.Hash
		child    plumbing.Hash // the commit whose parent it is; zero for HEAD
		expanded bool
	}
	stack := []frame{{id: h.Head}}
	var headTree plumbing.Hash
	for len(stack) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seenCommit[f.id] {
			continue
		}
		c, err := object.GetCommit(s, f.id)
		if errors.Is(err, plumbing.ErrObjectNotFound) && !f.child.IsZero() {
			return nil, &checkout.UsageError{Err: fmt.Errorf("the history of HEAD reaches commit %s, a parent of %s, which the repository does not hold, "+
				"and %s is not where a shallow clone's history stops (its .git/shallow): a history with a hole cannot be imported; "+
				"fetch what it lacks (git fetch --unshallow), or import a shallow clone of it (ag repo import --depth N)", f.id, f.child, f.child)}
		}
		if err != nil {
			return nil, fmt.Errorf("read commit %s: %w", f.id, err)
		}
		if !f.expanded {
			stack = append(stack, frame{id: f.id, child: f.child, expanded: true})
			if boundary[f.id] {
				h.Shallow = append(h.Shallow, f.id) // its parents are not the clone's
				continue
			}
			for _, p := range c.ParentHashes {
				if !seenCommit[p] {
					stack = append(stack, frame{id: p, child: f.id})
				}
			}
			continue
		}
		seenCommit[f.id] = true
		n, err := walkTree(c.TreeHash, "", f.id)
		if err != nil {
			return nil, err
		}
		if f.id == h.Head {
			h.Files, headTree = n, c.TreeHash
		}
		h.Commits = append(h.Commits, f.id)
	}
	if err := checkHeadTree(ctx, s, h, headTree); err != nil {
		return nil, err
	}
	slices.SortFunc(h.Shallow, func(x, y plumbing.Hash) int { return bytes.Compare(x[:], y[:]) })
	h.Shallow = slices.Compact(h.Shallow)
	return h, nil
}

// ShallowIDs answers h.Shallow as the API carries it, 40 hex each.
func (h *GitHistory) ShallowIDs() []string {
	ids := make([]string, len(h.Shallow))
	for i, id := range h.Shallow {
		ids[i] = id.String()
	}
	return ids
}

// HeadLabel names the history's head for a person: its commit, and where its history stops
// when it is shallow ("5f0c… (history from 9a1b… on)").
func (h *GitHistory) HeadLabel() string {
	if len(h.Shallow) == 0 {
		return h.Head.String()
	}
	return h.Head.String() + " (history from " + strings.Join(h.ShallowIDs(), ", ") + " on)"
}

// checkHeadTree adds to h.Refused what HEAD's tree holds that no checkout may write: a path
// too long as a whole, a file of mode 100664 (which ag's trees write as 100644), a symbolic
// link whose target a file system cannot hold. The names themselves were checked with their
// trees.
func checkHeadTree(ctx context.Context, s storer.Storer, h *GitHistory, tree plumbing.Hash) error {
	var walk func(id plumbing.Hash, prefix string) error
	walk = func(id plumbing.Hash, prefix string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		t, err := object.GetTree(s, id)
		if err != nil {
			return fmt.Errorf("read tree %s: %w", id, err)
		}
		for _, e := range t.Entries {
			p := prefix + e.Name
			if gitstore.EntryProblem(e.Name, e.Mode) != "" {
				continue // told already
			}
			if err := repo.ValidatePath(p, false); err != nil {
				h.Refused = append(h.Refused, checkout.RefusedPath{Path: p, Rule: err.Error(), Commit: h.Head})
				continue
			}
			switch e.Mode {
			case filemode.Dir:
				if err := walk(e.Hash, p+"/"); err != nil {
					return err
				}
			case filemode.Deprecated:
				h.Refused = append(h.Refused, checkout.RefusedPath{Path: p, Commit: h.Head,
					Rule: "has mode 100664, which git no longer writes: commit it again as 100644 (git update-index --chmod=-x PATH)"})
			case filemode.Symlink:
				_, target, err := readObject(s, e.Hash)
				if err != nil {
					return err
				}
				if err := repo.CheckSymlinkTarget(target); err != nil {
					h.Refused = append(h.Refused, checkout.RefusedPath{Path: p, Rule: "is a symbolic link that a checkout cannot write: " + err.Error(), Commit: h.Head})
				}
			}
		}
		return nil
	}
	return walk(tree, "")
}

// Refusal answers the error of an import that would be refused, listing every path and its
// rule, quoted: a name may hold any byte, and reaches the terminal as data.
func (h *GitHistory) Refusal(dir string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "the history of %s holds %d paths ag refuses; nothing was uploaded:", dir, len(h.Refused))
	for _, r := range h.Refused {
		fmt.Fprintf(&b, "\n  %s %s (commit %s)", strconv.Quote(r.Path), r.Rule, r.Commit)
	}
	b.WriteString("\nrewrite the history without them (git filter-repo), or import the files at HEAD alone with --files")
	return &checkout.UsageError{Err: errors.New(b.String())}
}

// MissingGitObjects asks the server which of the history's objects it lacks.
func MissingGitObjects(ctx context.Context, c *client.Client, h *GitHistory) (map[plumbing.Hash]bool, error) {
	all := make([]string, 0, len(h.Blobs)+len(h.Trees)+len(h.Commits))
	for _, list := range [][]plumbing.Hash{h.Blobs, h.Trees, h.Commits} {
		for _, id := range list {
			all = append(all, id.String())
		}
	}
	missing := make(map[plumbing.Hash]bool)
	for len(all) > 0 {
		ask := all[:min(len(all), client.MaxDigestsPerCall)]
		all = all[len(ask):]
		res, err := c.Repos.FindMissingGitObjects(ctx, &agwpv1.FindMissingGitObjectsRequest{Ids: ask})
		if err != nil {
			return nil, err
		}
		for _, id := range res.GetMissingIds() {
			missing[plumbing.NewHash(id)] = true
		}
	}
	return missing, nil
}

// ProgressFunc answers the progress line of one upload of files objects of bytes bytes (0: not
// known), or nil to draw none: the caller knows whether its output is a terminal.
type ProgressFunc func(verb string, files int, bytes int64) *checkout.Progress

// UploadGitHistory sends the objects of h that the server lacks (missing, from
// MissingGitObjects), so that every object arrives after those it names: blobs, then trees,
// then commits, all through UploadGitObjects, each as packs (when not nil) hold it: compressed,
// and a delta against its base when the server will hold that base (ADR-0037). A blob of
// client.LargeBlobBytes or more goes alone, in parts. A commit where the history stops
// (h.Shallow) is sent as one whose parents are absent (UploadGitObjectsRequest.shallow).
func UploadGitHistory(ctx context.Context, c *client.Client, s GitObjectReader, packs *Packs, h *GitHistory, missing map[plumbing.Hash]bool, progress ProgressFunc) error {
	boundary := make(map[plumbing.Hash]bool, len(h.Shallow))
	for _, id := range h.Shallow {
		boundary[id] = true
	}
	uploadObjects := func(objs []*agwpv1.GitObject, ids []plumbing.Hash) error {
		req := &agwpv1.UploadGitObjectsRequest{Objects: objs}
		for _, id := range ids {
			if boundary[id] {
				req.Shallow = append(req.Shallow, id.String())
			}
		}
		_, err := c.Repos.UploadGitObjects(ctx, req)
		return err
	}
	u := &uploader{s: s, packs: packs, missing: missing, history: make(map[plumbing.Hash]bool, len(h.Blobs)),
		sent: map[plumbing.Hash]bool{}, send: uploadObjects,
		sendLarge: func(r io.ReaderAt, size int64, digest string) error { return c.UploadBlob(ctx, r, size, digest) }}
	for _, id := range h.Blobs {
		u.history[id] = true
	}
	var missingBlobs []plumbing.Hash
	for _, id := range h.Blobs {
		if missing[id] {
			missingBlobs = append(missingBlobs, id)
		}
	}
	blobs, err := packs.SendOrder(missingBlobs)
	if err != nil {
		return err
	}
	if err := u.upload(progress, "blobs", blobs); err != nil {
		return err
	}
	if err := u.upload(progress, "trees", h.Trees); err != nil {
		return err
	}
	return u.upload(progress, "commits", h.Commits)
}

// entryHeadBytes is how much of a pack entry tells its type, its size and, for a delta, the
// size of what it makes (the stream's first bytes).
const entryHeadBytes = 4 << 10

// importChunkBytes bounds one upload request, well under the server's 64 MiB of content.
const importChunkBytes = 16 << 20

// importChunkMade bounds what one upload request's objects make once whole, well under the
// server's bound of what one call may make (deltas make far more than they weigh).
const importChunkMade = 256 << 20

// uploader sends the missing objects of a history.
type uploader struct {
	s       GitObjectReader
	packs   *Packs
	missing map[plumbing.Hash]bool
	history map[plumbing.Hash]bool // the history's blobs
	// sent: the blobs sent by this run that a delta may be against (stored whole or as a
	// delta, not in parts).
	sent      map[plumbing.Hash]bool
	send      func(objs []*agwpv1.GitObject, ids []plumbing.Hash) error
	sendLarge func(r io.ReaderAt, size int64, digest string) error
}

// upload sends the missing objects among ids, in their order, in calls of at most
// importChunkBytes, importChunkMade once made, and client.MaxBlobsPerUpload objects; a blob
// of client.LargeBlobBytes or more goes alone through sendLarge, from a temporary file it was
// copied to (its digest computed on the way), never read into memory.
func (u *uploader) upload(progress ProgressFunc, what string, ids []plumbing.Hash) error {
	p := progress("uploading", CountMissing(ids, u.missing), 0)
	p.SetUnit(what)
	var chunk []*agwpv1.GitObject
	var chunkIDs []plumbing.Hash
	size, made := 0, int64(0)
	// One call is in flight while the next chunk is read: the server stores a chunk while this
	// side reads the next. Calls still go one after another, so every object arrives after
	// those it names, and a delta after its base.
	var inFlight chan error
	wait := func() error {
		if inFlight == nil {
			return nil
		}
		err := <-inFlight
		inFlight = nil
		return err
	}
	flush := func() error {
		if err := wait(); err != nil || len(chunk) == 0 {
			return err
		}
		objs, objIDs, n := chunk, chunkIDs, size
		inFlight = make(chan error, 1)
		go func(done chan<- error) {
			err := u.send(objs, objIDs)
			if err == nil {
				p.Add(len(objs), int64(n))
			}
			done <- err
		}(inFlight)
		chunk, chunkIDs, size, made = nil, nil, 0, 0
		return nil
	}
	// A return before the last flush leaves no call behind.
	defer func() { _ = wait() }()
	for _, id := range ids {
		if !u.missing[id] {
			continue
		}
		o, whole, err := u.object(id)
		if err != nil {
			return err
		}
		if o == nil { // a large blob
			if err := wait(); err != nil {
				return err
			}
			if err := spoolObject(u.s, id, func(f *os.File, digest string) error { return u.sendLarge(f, whole, digest) }); err != nil {
				return err
			}
			p.Add(1, whole)
			continue
		}
		if size+len(o.Data) > importChunkBytes || made+whole > importChunkMade || len(chunk) == client.MaxBlobsPerUpload {
			if err := flush(); err != nil {
				return err
			}
		}
		chunk = append(chunk, o)
		chunkIDs = append(chunkIDs, id)
		size += len(o.Data)
		made += whole
		if o.Type == "blob" {
			u.sent[id] = true
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if err := wait(); err != nil {
		return err
	}
	p.Done()
	return nil
}

// object answers the object id as it goes in a call, and its size once whole: as its pack
// holds it when it can, else read whole. A blob of client.LargeBlobBytes or more is no
// object (nil), to go in parts.
func (u *uploader) object(id plumbing.Hash) (*agwpv1.GitObject, int64, error) {
	if u.packs.Has(id) {
		// The entry's header and first bytes tell a large blob, which is not read whole; most
		// entries are smaller than those bytes, and are read once.
		e, whole, err := u.packs.entry(id, entryHeadBytes)
		if err != nil {
			return nil, 0, err
		}
		if !e.Delta && e.Size >= client.LargeBlobBytes && e.Type == plumbing.BlobObject {
			return nil, e.Size, nil
		}
		readWhole := func() error {
			if whole {
				return nil
			}
			e, err = u.packs.Entry(id)
			whole = err == nil
			return err
		}
		target := e.Size
		if e.Delta && u.history[id] {
			if target, err = deltaTarget(e.Deflated); err != nil && !whole { // its first bytes were not enough
				if err := readWhole(); err != nil {
					return nil, 0, err
				}
				target, err = deltaTarget(e.Deflated)
			}
			if err != nil {
				return nil, 0, fmt.Errorf("read %s: %w", id, err)
			}
			if target >= client.LargeBlobBytes {
				return nil, target, nil
			}
		}
		if err := readWhole(); err != nil {
			return nil, 0, err
		}
		switch {
		case !e.Delta:
			return &agwpv1.GitObject{Type: e.Type.String(), Data: e.Deflated, Deflated: true}, e.Size, nil
		case u.history[id] && u.baseHeld(e.Base):
			// A blob's delta; a tree's or a commit's is sent made whole.
			return &agwpv1.GitObject{Type: "blob", Data: e.Deflated, Deflated: true, DeltaBase: e.Base.String()}, target, nil
		}
	} else if u.history[id] {
		size, err := u.s.EncodedObjectSize(id)
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", id, err)
		}
		if size >= client.LargeBlobBytes {
			return nil, size, nil
		}
	}
	typ, data, err := readObject(u.s, id)
	if err != nil {
		return nil, 0, err
	}
	return &agwpv1.GitObject{Type: typ.String(), Data: data}, int64(len(data)), nil
}

// baseHeld reports whether the server holds the blob base as a delta may be against (stored
// whole or as a delta, not in parts) by the time a delta sent now arrives.
func (u *uploader) baseHeld(base plumbing.Hash) bool {
	if u.sent[base] {
		return true
	}
	if u.missing[base] || !u.history[base] {
		return false // sent later, or large; or not the history's, so not known to be held
	}
	size, err := u.s.EncodedObjectSize(base)
	return err == nil && size < client.LargeBlobBytes
}

// CountMissing answers how many of ids are missing.
func CountMissing(ids []plumbing.Hash, missing map[plumbing.Hash]bool) int {
	n := 0
	for _, id := range ids {
		if missing[id] {
			n++
		}
	}
	return n
}

// GitObjectReader reads a git repository's objects, and their sizes without their contents.
type GitObjectReader interface {
	storer.EncodedObjectStorer
	EncodedObjectSize(id plumbing.Hash) (int64, error)
}

// spoolObject copies the content of the object id into a temporary file, checking its git id
// and computing its sha256 digest on the way, and calls use with the file and the digest.
func spoolObject(s storer.EncodedObjectStorer, id plumbing.Hash, use func(f *os.File, digest string) error) error {
	o, err := s.EncodedObject(plumbing.AnyObject, id)
	if err != nil {
		return fmt.Errorf("read %s: %w", id, err)
	}
	r, err := o.Reader()
	if err != nil {
		return fmt.Errorf("read %s %s: %w", o.Type(), id, err)
	}
	defer r.Close()
	f, err := os.CreateTemp("", "ag-import-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	sum := sha256.New()
	gitID := plumbing.NewHasher(o.Type(), o.Size())
	n, err := io.Copy(io.MultiWriter(f, sum, gitID), r)
	if err != nil {
		return fmt.Errorf("read %s %s: %w", o.Type(), id, err)
	}
	if n != o.Size() || gitID.Sum() != id {
		return errors.New("the git repository answered another object for " + id.String())
	}
	return use(f, "sha256:"+hex.EncodeToString(sum.Sum(nil)))
}

// readObject answers the type and content of a git object, without its header.
func readObject(s storer.EncodedObjectStorer, id plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	o, err := s.EncodedObject(plumbing.AnyObject, id)
	if err != nil {
		return 0, nil, fmt.Errorf("read %s: %w", id, err)
	}
	data, err := gitstore.ObjectData(o)
	if err != nil {
		return 0, nil, fmt.Errorf("read %s %s: %w", o.Type(), id, err)
	}
	if o.Hash() != id {
		return 0, nil, errors.New("the git repository answered another object for " + id.String())
	}
	return o.Type(), data, nil
}
