package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"connectrpc.com/connect"
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

// isGitRepository reports whether dir is the top of a git working tree (it holds .git, a
// directory or, for a linked worktree, a file).
func isGitRepository(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, ".git"))
	return err == nil
}

// gitHistory is what an import uploads, in the order the server takes it: blobs, then trees
// with every tree after the trees it holds, then commits with every commit after its parents.
type gitHistory struct {
	head    plumbing.Hash
	blobs   []plumbing.Hash
	trees   []plumbing.Hash
	commits []plumbing.Hash
	files   int // files, links and submodules in the head commit's tree
	// refused is every entry the server would refuse, each once, with the first commit that
	// brings it in: an import tells them all before it uploads a byte.
	refused []checkout.RefusedPath
}

// openGitStorage opens the object and reference storage of the git working tree dir.
func openGitStorage(dir string) (*filesystem.Storage, error) {
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

// readGitHistory lists the objects that the HEAD of the git repository reaches, and the
// entries of its trees that the server would refuse (gitstore.EntryProblem for every tree, and
// for HEAD's tree, which every checkout writes, the rules of a checkout's paths and links).
// Each tree is read once, however many commits hold it.
func readGitHistory(ctx context.Context, s storer.Storer) (*gitHistory, error) {
	ref, err := storer.ResolveReference(s, plumbing.HEAD)
	if err != nil {
		return nil, fmt.Errorf("read HEAD: %w (a repository without commits has no history to import)", err)
	}
	h := &gitHistory{head: ref.Hash()}
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
				h.refused = append(h.refused, checkout.RefusedPath{Path: prefix + e.Name, Rule: rule, Commit: commit})
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
					h.blobs = append(h.blobs, e.Hash)
				}
			}
		}
		filesIn[id] = files
		h.trees = append(h.trees, id) // after everything it holds
		return files, nil
	}

	// Commits in an order where parents come first: a depth-first walk that emits a commit
	// once all its parents are emitted.
	type frame struct {
		id       plumbing.Hash
		expanded bool
	}
	stack := []frame{{id: h.head}}
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
		if err != nil {
			return nil, fmt.Errorf("read commit %s: %w", f.id, err)
		}
		if !f.expanded {
			stack = append(stack, frame{id: f.id, expanded: true})
			for _, p := range c.ParentHashes {
				if !seenCommit[p] {
					stack = append(stack, frame{id: p})
				}
			}
			continue
		}
		seenCommit[f.id] = true
		n, err := walkTree(c.TreeHash, "", f.id)
		if err != nil {
			return nil, err
		}
		if f.id == h.head {
			h.files, headTree = n, c.TreeHash
		}
		h.commits = append(h.commits, f.id)
	}
	if err := checkHeadTree(ctx, s, h, headTree); err != nil {
		return nil, err
	}
	return h, nil
}

// checkHeadTree adds to h.refused what HEAD's tree holds that no checkout may write: a path
// too long as a whole, a file of mode 100664 (which ag's trees write as 100644), a symbolic
// link whose target a file system cannot hold. The names themselves were checked with their
// trees.
func checkHeadTree(ctx context.Context, s storer.Storer, h *gitHistory, tree plumbing.Hash) error {
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
				h.refused = append(h.refused, checkout.RefusedPath{Path: p, Rule: err.Error(), Commit: h.head})
				continue
			}
			switch e.Mode {
			case filemode.Dir:
				if err := walk(e.Hash, p+"/"); err != nil {
					return err
				}
			case filemode.Deprecated:
				h.refused = append(h.refused, checkout.RefusedPath{Path: p, Commit: h.head,
					Rule: "has mode 100664, which git no longer writes: commit it again as 100644 (git update-index --chmod=-x PATH)"})
			case filemode.Symlink:
				_, target, err := readObject(s, e.Hash)
				if err != nil {
					return err
				}
				if err := repo.CheckSymlinkTarget(target); err != nil {
					h.refused = append(h.refused, checkout.RefusedPath{Path: p, Rule: "is a symbolic link that a checkout cannot write: " + err.Error(), Commit: h.head})
				}
			}
		}
		return nil
	}
	return walk(tree, "")
}

// refusal answers the error of an import that would be refused, listing every path and its
// rule, quoted: a name may hold any byte, and reaches the terminal as data.
func (h *gitHistory) refusal(dir string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "the history of %s holds %d paths ag refuses; nothing was uploaded:", dir, len(h.refused))
	for _, r := range h.refused {
		fmt.Fprintf(&b, "\n  %s %s (commit %s)", strconv.Quote(r.Path), r.Rule, r.Commit)
	}
	b.WriteString("\nrewrite the history without them (git filter-repo), or import the files at HEAD alone with --files")
	return withExit(ExitUsage, errors.New(b.String()))
}

// importGit starts the repository name from the history that the HEAD of the git repository
// in dir reaches, keeping every commit's id: the mainline continues that history, so a clone
// of dir fetches from ag and fast-forwards. Objects the server holds are not sent again, so an
// import that stopped is finished by running it again.
func importGit(ctx context.Context, g *globals, c *client.Client, name, dir string, dryRun bool) error {
	if _, err := c.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: name}); err == nil {
		return withExit(ExitUsage, fmt.Errorf("repository %s exists: a git history starts a new repository (ag repo import --files imports %s's files as one change instead)", name, dir))
	} else if !client.IsCode(err, connect.CodeNotFound) {
		return err
	}
	st, err := openGitStorage(dir)
	if err != nil {
		return fmt.Errorf("open the git repository %s: %w", dir, err)
	}
	fmt.Fprintf(g.stderr, "reading the history of %s...\n", dir)
	h, err := readGitHistory(ctx, st)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stderr, "%d commits, %d trees, %d blobs; %d files at HEAD %s\n",
		len(h.commits), len(h.trees), len(h.blobs), h.files, h.head)
	if len(h.refused) > 0 {
		return h.refusal(dir)
	}

	missing, err := missingGitObjects(ctx, c, h)
	if err != nil {
		return err
	}
	if dryRun {
		if g.json {
			return g.printValue(map[string]any{"head": h.head.String(), "commits": len(h.commits), "trees": len(h.trees), "blobs": len(h.blobs),
				"files": h.files, "missing": map[string]int{"commits": countMissing(h.commits, missing), "trees": countMissing(h.trees, missing), "blobs": countMissing(h.blobs, missing)}})
		}
		fmt.Fprintf(g.stdout, "the import of %s into %s would upload %d blobs, %d trees and %d commits the server lacks (of %d, %d, %d), and start %s at %s; nothing was uploaded\n",
			dir, name, countMissing(h.blobs, missing), countMissing(h.trees, missing), countMissing(h.commits, missing),
			len(h.blobs), len(h.trees), len(h.commits), name, h.head)
		return nil
	}
	// Blobs go with their sha256 digests (UploadBlobs), trees and commits as git objects.
	uploadBlobs := func(objs []*agwpv1.GitObject) error {
		blobs := make([][]byte, len(objs))
		for i, o := range objs {
			blobs[i] = o.GetData()
		}
		_, err := c.Repos.UploadBlobs(ctx, &agwpv1.UploadBlobsRequest{Blobs: blobs})
		return err
	}
	uploadObjects := func(objs []*agwpv1.GitObject) error {
		_, err := c.Repos.UploadGitObjects(ctx, &agwpv1.UploadGitObjectsRequest{Objects: objs})
		return err
	}
	// A large blob goes alone, in parts, so that no request must hold it whole.
	uploadLargeBlob := func(r io.ReaderAt, size int64, digest string) error {
		return c.UploadBlob(ctx, r, size, digest)
	}
	if err := uploadMissing(g, "blobs", st, h.blobs, missing, uploadBlobs, uploadLargeBlob); err != nil {
		return err
	}
	if err := uploadMissing(g, "trees", st, h.trees, missing, uploadObjects, nil); err != nil {
		return err
	}
	if err := uploadMissing(g, "commits", st, h.commits, missing, uploadObjects, nil); err != nil {
		return err
	}
	created, err := c.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: name, GitCommit: h.head.String()})
	if err != nil {
		return err
	}
	repo := created.GetRepository()
	if g.json {
		return g.printJSON(repo)
	}
	fmt.Fprintf(g.stdout, "imported the git history of %s into %s: %d commits, %d files at %s; mainline %s\n",
		dir, name, len(h.commits), h.files, h.head, repo.GetMainline())
	fmt.Fprintf(g.stdout, "fetch from ag in that clone: git remote add ag %s/git/%s.git\n", c.BaseURL(), name)
	return nil
}

// missingGitObjects asks the server which of the history's objects it lacks.
func missingGitObjects(ctx context.Context, c *client.Client, h *gitHistory) (map[plumbing.Hash]bool, error) {
	all := make([]string, 0, len(h.blobs)+len(h.trees)+len(h.commits))
	for _, list := range [][]plumbing.Hash{h.blobs, h.trees, h.commits} {
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

// importChunkBytes bounds one upload request, well under the server's 64 MiB of content.
const importChunkBytes = 16 << 20

// uploadMissing sends the missing objects among ids, in their order, in calls of at most
// importChunkBytes and client.MaxBlobsPerUpload objects: send gets each call's objects, and
// sendLarge (when not nil) each object of client.LargeBlobBytes or more, alone, from a
// temporary file it was copied to (its digest computed on the way), never read into memory.
func uploadMissing(g *globals, what string, s gitObjectReader, ids []plumbing.Hash, missing map[plumbing.Hash]bool,
	send func(objs []*agwpv1.GitObject) error, sendLarge func(r io.ReaderAt, size int64, digest string) error) error {
	p := newProgress(g, "uploading", countMissing(ids, missing), 0)
	p.SetUnit(what)
	var chunk []*agwpv1.GitObject
	size := 0
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		if err := send(chunk); err != nil {
			return err
		}
		p.Add(len(chunk), int64(size))
		chunk, size = nil, 0
		return nil
	}
	for _, id := range ids {
		if !missing[id] {
			continue
		}
		if sendLarge != nil {
			size, err := s.EncodedObjectSize(id)
			if err != nil {
				return fmt.Errorf("read %s: %w", id, err)
			}
			if size >= client.LargeBlobBytes {
				if err := spoolObject(s, id, func(f *os.File, digest string) error { return sendLarge(f, size, digest) }); err != nil {
					return err
				}
				p.Add(1, size)
				continue
			}
		}
		typ, data, err := readObject(s, id)
		if err != nil {
			return err
		}
		if size+len(data) > importChunkBytes || len(chunk) == client.MaxBlobsPerUpload {
			if err := flush(); err != nil {
				return err
			}
		}
		chunk = append(chunk, &agwpv1.GitObject{Type: typ.String(), Data: data})
		size += len(data)
	}
	if err := flush(); err != nil {
		return err
	}
	p.Done()
	return nil
}

func countMissing(ids []plumbing.Hash, missing map[plumbing.Hash]bool) int {
	n := 0
	for _, id := range ids {
		if missing[id] {
			n++
		}
	}
	return n
}

// gitObjectReader reads a git repository's objects, and their sizes without their contents.
type gitObjectReader interface {
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
