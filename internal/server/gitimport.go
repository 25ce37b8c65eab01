package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// A repository can start from a git history (docs/git.md#import): its blobs come through
// UploadBlobs, its trees and commits through UploadGitObjects, and CreateRepository's
// git_commit names the head. The store never holds an object whose references it lacks: an
// object is accepted only when everything it names is stored or in the same request, so a
// commit that is stored reaches only stored objects. The one exception is a shallow history's
// boundary (docs/git.md#shallow-histories): commits UploadGitObjects' shallow lists are taken
// without their parents, and the store records them (RecordShallowCommits), so that
// CreateRepository knows when a history may stop before its root, and checks that it stops
// only where its shallow says.

// maxGitObjectsPerCall bounds UploadGitObjects and FindMissingGitObjects.
const maxGitObjectsPerCall = 10000

// UploadGitObjects stores blobs, trees and commits under the ids git computes for them, each
// made whole from what it came as (objectMaker) and checked.
func (h repoService) UploadGitObjects(ctx context.Context, req *agwpv1.UploadGitObjectsRequest) (*agwpv1.UploadGitObjectsResponse, error) {
	for attempt := 1; ; attempt++ {
		out, err := h.uploadGitObjects(ctx, req)
		var deeper *basesDeeperError
		if !errors.As(err, &deeper) {
			return out, err
		}
		if attempt == 3 {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("%w; try again", deeper.err))
		}
		// A base became a delta (KeepStoredBlobsAsDeltas) since the depths were read: made
		// again with the depths as they are now, a delta past the deepest chain is kept whole.
	}
}

// basesDeeperError is PutPackedBlobs refusing a delta whose base is deeper than when the
// call read it.
type basesDeeperError struct{ err error }

func (e *basesDeeperError) Error() string { return e.err.Error() }

func (h repoService) uploadGitObjects(ctx context.Context, req *agwpv1.UploadGitObjectsRequest) (*agwpv1.UploadGitObjectsResponse, error) {
	in := req.GetObjects()
	if len(in) > maxGitObjectsPerCall {
		return nil, invalid("objects", "has %d objects, more than %d", len(in), maxGitObjectsPerCall)
	}
	if len(req.GetShallow()) > len(in) {
		return nil, invalid("shallow", "lists %d commits, more than the %d objects", len(req.GetShallow()), len(in))
	}
	shallow := make(map[plumbing.Hash]bool, len(req.GetShallow()))
	for i, s := range req.GetShallow() {
		id, err := store.ParseGitID(s)
		if err != nil {
			return nil, invalid(fmt.Sprintf("shallow[%d]", i), "%v", err)
		}
		shallow[id] = true
	}
	maker, err := newObjectMaker(ctx, h.s, in)
	if err != nil {
		return nil, err
	}
	objects := make([]store.GitObject, 0, len(in))
	var blobs []store.PackedBlob
	ids := make([]plumbing.Hash, len(in))
	inRequest := make(map[plumbing.Hash]plumbing.ObjectType, len(in))
	var refs []gitstore.Reference
	total, kept := 0, 0
	for i, o := range in {
		total += len(o.GetData())
		if total > maxContentBytes {
			return nil, connect.NewError(connect.CodeResourceExhausted,
				fmt.Errorf("objects: more than %d MiB in one request: upload in several", maxContentBytes>>20))
		}
		field := fmt.Sprintf("objects[%d]", i)
		typ, err := plumbing.ParseObjectType(o.GetType())
		if err != nil || (typ != plumbing.TreeObject && typ != plumbing.CommitObject && typ != plumbing.BlobObject) {
			return nil, invalid(field+".type", "%q: want blob, tree or commit", truncate(o.GetType(), 40))
		}
		made, err := maker.make(field, typ, o)
		if err != nil {
			return nil, err
		}
		if typ != plumbing.BlobObject {
			// Trees and commits are kept whole until they are stored.
			if kept += len(made.content); kept > maxContentBytes {
				return nil, connect.NewError(connect.CodeResourceExhausted,
					fmt.Errorf("objects: trees and commits of more than %d MiB in one request: upload in several", maxContentBytes>>20))
			}
		}
		if typ == plumbing.BlobObject && len(made.content) >= largeGitBlobBytes {
			return nil, invalid(field, "is a blob of %d bytes: one of %d MiB or more goes in parts (StartBlobUpload)", len(made.content), largeGitBlobBytes>>20)
		}
		id := plumbing.ComputeHash(typ, made.content)
		ids[i] = id
		if _, again := inRequest[id]; again {
			continue
		}
		inRequest[id] = typ
		maker.cache.Add(id, made.content)
		if typ == plumbing.BlobObject {
			row, depth, err := maker.blobRow(id, o, made)
			if err != nil {
				return nil, err
			}
			maker.made[id] = madeObject{in: o, typ: typ, depth: depth}
			blobs = append(blobs, row)
			continue
		}
		maker.made[id] = madeObject{in: o, typ: typ}
		mo := &plumbing.MemoryObject{}
		mo.SetType(typ)
		if _, err := mo.Write(made.content); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		r, err := gitstore.References(mo, made.content)
		if err != nil {
			return nil, invalid(field, "%s %s: %v", typ, id, err)
		}
		refs = append(refs, r...)
		objects = append(objects, store.GitObject{ID: id, Type: typ, Data: made.content})
	}
	for i, s := range req.GetShallow() {
		if inRequest[plumbing.NewHash(s)] != plumbing.CommitObject {
			return nil, invalid(fmt.Sprintf("shallow[%d]", i), "%s is not a commit of objects", s)
		}
	}
	var ask []plumbing.Hash
	for _, r := range refs {
		if _, ok := inRequest[r.ID]; !ok {
			ask = append(ask, r.ID)
		}
	}
	missing, err := h.s.store.MissingGitObjects(ctx, ask)
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	absent := make(map[plumbing.Hash]bool, len(missing))
	for _, id := range missing {
		absent[id] = true
	}
	var holes []plumbing.Hash // shallow commits stored without a parent
	hole := map[plumbing.Hash]bool{}
	for _, r := range refs {
		switch {
		case !absent[r.ID]:
		case shallow[r.From] && r.What == "parent commit": // gitstore.References' word for a parent
			if !hole[r.From] {
				hole[r.From] = true
				holes = append(holes, r.From)
			}
		default:
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
				"%s names %s %s, which the server does not hold: upload blobs first (UploadBlobs), then trees from the leaves up, then commits from the oldest"+
					" (a commit whose parents a shallow clone lacks goes in shallow)",
				r.From, r.What, r.ID))
		}
	}
	// Recorded before the objects are stored: a record without its commit (the store failed in
	// between) only makes CreateRepository walk a history it need not have.
	if err := h.s.store.RecordShallowCommits(ctx, holes); err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	// Blobs first: a tree of the call that names one is stored after it, or with it.
	if err := h.s.store.PutPackedBlobs(ctx, blobs); errors.Is(err, store.ErrFailedPrecondition) {
		return nil, &basesDeeperError{err}
	} else if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	if err := h.s.store.PutGitObjects(ctx, objects); err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out := &agwpv1.UploadGitObjectsResponse{Ids: make([]string, len(ids))}
	for i, id := range ids {
		out.Ids[i] = id.String()
	}
	return out, nil
}

// FindMissingGitObjects answers which ids the server does not hold.
func (h repoService) FindMissingGitObjects(ctx context.Context, req *agwpv1.FindMissingGitObjectsRequest) (*agwpv1.FindMissingGitObjectsResponse, error) {
	if len(req.GetIds()) > maxGitObjectsPerCall {
		return nil, invalid("ids", "has %d ids, more than %d", len(req.GetIds()), maxGitObjectsPerCall)
	}
	ids := make([]plumbing.Hash, len(req.GetIds()))
	for i, s := range req.GetIds() {
		id, err := store.ParseGitID(s)
		if err != nil {
			return nil, invalid(fmt.Sprintf("ids[%d]", i), "%v", err)
		}
		ids[i] = id
	}
	missing, err := h.s.store.MissingGitObjects(ctx, ids)
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out := &agwpv1.FindMissingGitObjectsResponse{MissingIds: make([]string, len(missing))}
	for i, id := range missing {
		out.MissingIds[i] = id.String()
	}
	return out, nil
}

// maxShallowCommits bounds CreateRepository's shallow.
const maxShallowCommits = 10000

// shallowCommits reads CreateRepository's shallow: sorted, each once.
func shallowCommits(req *agwpv1.CreateRepositoryRequest) ([]plumbing.Hash, error) {
	list := req.GetShallow()
	if len(list) == 0 {
		return nil, nil
	}
	if req.GetGitCommit() == "" {
		return nil, invalid("shallow", "is where an imported history stops: it goes with git_commit")
	}
	if len(list) > maxShallowCommits {
		return nil, invalid("shallow", "has %d commits, more than %d", len(list), maxShallowCommits)
	}
	ids := make([]plumbing.Hash, len(list))
	seen := make(map[plumbing.Hash]bool, len(list))
	for i, s := range list {
		id, err := store.ParseGitID(s)
		if err != nil {
			return nil, invalid(fmt.Sprintf("shallow[%d]", i), "%v", err)
		}
		if seen[id] {
			return nil, invalid(fmt.Sprintf("shallow[%d]", i), "%s is listed twice", s)
		}
		seen[id] = true
		ids[i] = id
	}
	slices.SortFunc(ids, func(x, y plumbing.Hash) int { return bytes.Compare(x[:], y[:]) })
	return ids, nil
}

// checkImportHistory checks that the history of head stops at the commits of shallow and
// nowhere else: every commit it reaches, but those, has its parents stored, and each of them
// is reached. Until the store records a commit stored without its parents, no stored history
// stops before its root (UploadGitObjects' rule), and a history declared whole is not walked.
func (h repoService) checkImportHistory(ctx context.Context, head plumbing.Hash, shallow []plumbing.Hash) error {
	if len(shallow) == 0 {
		held, err := h.s.store.HasShallowCommits(ctx)
		if err != nil {
			return storeError(err, connect.CodeInternal)
		}
		if !held {
			return nil
		}
	}
	stops := make(map[plumbing.Hash]bool, len(shallow))
	for _, id := range shallow {
		stops[id] = true
	}
	objs := newGitObjects(ctx, h.s.store, h.s.log)
	child := map[plumbing.Hash]plumbing.Hash{head: head} // each commit found, with the one that names it
	frontier := []plumbing.Hash{head}
	for len(frontier) > 0 {
		for chunk := range slices.Chunk(frontier, 1000) {
			objs.Prefetch(chunk)
		}
		var next []plumbing.Hash
		for _, id := range frontier {
			if err := ctx.Err(); err != nil {
				return err
			}
			if stops[id] {
				continue
			}
			c, err := object.GetCommit(objs, id)
			if errors.Is(err, plumbing.ErrObjectNotFound) {
				hint := "list it in shallow when the history stops there (a shallow clone's .git/shallow), or upload the history it lacks"
				return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
					"git_commit: the history of %s reaches commit %s, a parent of %s, which the server does not hold, and %s is not in shallow: %s",
					head, id, child[id], child[id], hint))
			}
			if err != nil {
				return storeError(err, connect.CodeInternal)
			}
			for _, p := range c.ParentHashes {
				if _, ok := child[p]; !ok {
					child[p] = id
					next = append(next, p)
				}
			}
		}
		frontier = next
	}
	for i, id := range shallow {
		if _, ok := child[id]; !ok {
			return invalid(fmt.Sprintf("shallow[%d]", i), "commit %s is not in the history of git_commit %s", id, head)
		}
	}
	return nil
}

// checkImportHead checks that a repository may start at commit: the server holds it (and so,
// by UploadGitObjects' rule, everything it reaches), and its tree holds only what ag checks out
// as git does — regular and executable files, symbolic links whose targets a file system
// holds, submodules — at paths ag accepts, since every checkout and worker will write them.
func (h repoService) checkImportHead(ctx context.Context, commit plumbing.Hash) error {
	objs := newGitObjects(ctx, h.s.store, h.s.log)
	c, err := object.GetCommit(objs, commit)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("git_commit: the server does not hold commit %s: upload it and what it reaches first (UploadBlobs, UploadGitObjects)", commit))
	}
	if err != nil {
		return storeError(err, connect.CodeInternal)
	}
	var walk func(id plumbing.Hash, prefix string) error
	walk = func(id plumbing.Hash, prefix string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		entries, err := gitstore.TreeEntries(objs, id)
		if err != nil {
			return storeError(err, connect.CodeInternal)
		}
		for _, e := range entries {
			p := prefix + e.Name
			switch e.Mode {
			case filemode.Dir:
				if err := walk(e.Hash, p+"/"); err != nil {
					return err
				}
				continue
			case filemode.Regular, filemode.Executable, filemode.Submodule:
			case filemode.Symlink:
				if err := h.checkImportedLink(objs, commit, p, e.Hash); err != nil {
					return err
				}
			case filemode.Deprecated:
				// Every tree ag writes and every worker computes says 100644 for it, so no change
				// to the repository could be validated.
				return invalid("git_commit", "the tree of %s holds %s with mode 100664, which git wrote before 2005 and writes no longer: "+
					"commit it again as 100644 (git update-index --chmod=-x %s, then git commit) and import that commit",
					commit, truncate(p, 200), truncate(p, 200))
			default:
				return invalid("git_commit", "the tree of %s holds %s with mode %o: ag checks out files, executable files, symbolic links and submodules",
					commit, truncate(p, 200), uint32(e.Mode))
			}
			if err := repo.ValidatePath(p, false); err != nil {
				return invalid("git_commit", "the tree of %s holds the path %q, which %v", commit, truncate(p, 200), err)
			}
		}
		return nil
	}
	return walk(c.TreeHash, "")
}

// checkImportedLink checks that the symbolic link path of the head commit points to a target
// a checkout can write (repo.CheckSymlinkTarget), as an Integrate's link must.
func (h repoService) checkImportedLink(objs *gitObjects, commit plumbing.Hash, path string, blob plumbing.Hash) error {
	_, target, err := objs.read(blob)
	if err != nil {
		return storeError(err, connect.CodeInternal)
	}
	if err := repo.CheckSymlinkTarget(target); err != nil {
		return invalid("git_commit", "the tree of %s holds the symbolic link %s: %v", commit, truncate(path, 200), err)
	}
	return nil
}
