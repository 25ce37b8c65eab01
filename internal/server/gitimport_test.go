package server_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// encodeTree answers a tree object's content with these entries, in git's order.
func encodeTree(t *testing.T, entries ...object.TreeEntry) (plumbing.Hash, []byte) {
	t.Helper()
	tree := object.Tree{Entries: entries}
	o := &plumbing.MemoryObject{}
	if err := tree.Encode(o); err != nil {
		t.Fatal(err)
	}
	return o.Hash(), objectData(t, o)
}

func encodeCommit(t *testing.T, tree plumbing.Hash, parents ...plumbing.Hash) (plumbing.Hash, []byte) {
	t.Helper()
	sig := object.Signature{Name: "Dev", Email: "dev@example.com"}
	c := object.Commit{TreeHash: tree, ParentHashes: parents, Author: sig, Committer: sig, Message: "work\n"}
	o := &plumbing.MemoryObject{}
	if err := c.Encode(o); err != nil {
		t.Fatal(err)
	}
	return o.Hash(), objectData(t, o)
}

func objectData(t *testing.T, o *plumbing.MemoryObject) []byte {
	t.Helper()
	r, err := o.Reader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b := make([]byte, o.Size())
	if _, err := r.Read(b); err != nil && o.Size() > 0 {
		t.Fatal(err)
	}
	return b
}

// TestUploadGitObjectsKeepsTheStoreWhole attacks the import path: a history may not bring a
// path no checkout may hold (.git, .ag), or a reference to something the server lacks (a
// submodule's commit is another repository's, and none); a non-admin may not upload at all; and
// a repository may start only at a commit the server holds whose tree ag can check out.
func TestUploadGitObjectsKeepsTheStoreWhole(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			admin := srv.Admin.Repos
			blob := []byte("hello\n")
			blobID := gitstore.BlobID(blob)
			upload := func(objs ...*agwpv1.GitObject) error {
				_, err := admin.UploadGitObjects(ctx, &agwpv1.UploadGitObjectsRequest{Objects: objs})
				return err
			}
			tree := func(entries ...object.TreeEntry) (plumbing.Hash, *agwpv1.GitObject) {
				id, data := encodeTree(t, entries...)
				return id, &agwpv1.GitObject{Type: "tree", Data: data}
			}

			// A tree naming a blob the server lacks: refused until the blob is uploaded.
			goodID, good := tree(object.TreeEntry{Name: "a.txt", Mode: filemode.Regular, Hash: blobID})
			err := upload(good)
			wantCode(t, "a tree whose blob is missing", err, connect.CodeFailedPrecondition)
			if !strings.Contains(err.Error(), blobID.String()) {
				t.Fatalf("the refusal %q does not name the missing blob", err)
			}
			if _, err := admin.UploadBlobs(ctx, &agwpv1.UploadBlobsRequest{Blobs: [][]byte{blob}}); err != nil {
				t.Fatal(err)
			}
			res, err := admin.UploadGitObjects(ctx, &agwpv1.UploadGitObjectsRequest{Objects: []*agwpv1.GitObject{good}})
			if err != nil || len(res.GetIds()) != 1 || res.GetIds()[0] != goodID.String() {
				t.Fatalf("UploadGitObjects(tree) = %v, %v; want the id %s", res.GetIds(), err, goodID)
			}

			for _, name := range []string{".git", ".GIT", ".ag", "git~1", "a/b"} {
				_, bad := tree(object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: goodID})
				wantCode(t, "a tree entry named "+name, upload(bad), connect.CodeInvalidArgument)
			}
			// Trees git's fsck would refuse on every clone: out of order, a name twice, a
			// zero-padded mode.
			_, good2 := tree(object.TreeEntry{Name: "b.txt", Mode: filemode.Regular, Hash: blobID})
			unordered := append(append([]byte{}, good2.GetData()...), good.GetData()...) // b.txt, then a.txt
			twice := append(append([]byte{}, good.GetData()...), good.GetData()...)
			padded := append([]byte("0"), good.GetData()...) // "0100644 a.txt"
			for name, data := range map[string][]byte{"out of order": unordered, "a name twice": twice, "a zero-padded mode": padded} {
				err := upload(&agwpv1.GitObject{Type: "tree", Data: data})
				wantCode(t, "a tree with "+name, err, connect.CodeInvalidArgument)
			}
			// A submodule names another repository's commit, which no server holds.
			_, sub := tree(object.TreeEntry{Name: "vendor", Mode: filemode.Submodule, Hash: plumbing.NewHash(strings.Repeat("5e", 20))})
			if err := upload(sub); err != nil {
				t.Fatalf("a tree holding a submodule: %v", err)
			}
			_, nullSub := tree(object.TreeEntry{Name: "vendor", Mode: filemode.Submodule, Hash: plumbing.ZeroHash})
			wantCode(t, "a submodule of the null commit", upload(nullSub), connect.CodeInvalidArgument)
			wantCode(t, "a tag sent as a git object",
				upload(&agwpv1.GitObject{Type: "tag", Data: blob}), connect.CodeInvalidArgument)

			// A commit whose parent is missing; then its tree and parent in the same request.
			parentID, parentData := encodeCommit(t, goodID)
			childID, childData := encodeCommit(t, goodID, parentID)
			wantCode(t, "a commit whose parent is missing",
				upload(&agwpv1.GitObject{Type: "commit", Data: childData}), connect.CodeFailedPrecondition)
			if err := upload(&agwpv1.GitObject{Type: "commit", Data: parentData}, &agwpv1.GitObject{Type: "commit", Data: childData}); err != nil {
				t.Fatalf("a commit and its parent in one request: %v", err)
			}
			missing, err := admin.FindMissingGitObjects(ctx, &agwpv1.FindMissingGitObjectsRequest{
				Ids: []string{childID.String(), blobID.String(), strings.Repeat("ab", 20)}})
			if err != nil || len(missing.GetMissingIds()) != 1 || missing.GetMissingIds()[0] != strings.Repeat("ab", 20) {
				t.Fatalf("FindMissingGitObjects = %v, %v; want only the unknown id", missing.GetMissingIds(), err)
			}

			agent := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
			_, err = agent.Repos.UploadGitObjects(ctx, &agwpv1.UploadGitObjectsRequest{Objects: []*agwpv1.GitObject{good}})
			wantCode(t, "an agent uploading git objects", err, connect.CodePermissionDenied)
			_, err = agent.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "mine", GitCommit: childID.String()})
			wantCode(t, "an agent creating a repository", err, connect.CodePermissionDenied)

			_, err = admin.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "x", GitCommit: strings.Repeat("cd", 20)})
			wantCode(t, "a repository at an unknown commit", err, connect.CodeFailedPrecondition)
			_, err = admin.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "x", GitCommit: "HEAD"})
			wantCode(t, "a repository at a commit that is no id", err, connect.CodeInvalidArgument)

			// A head whose tree holds a symbolic link no file system makes (an empty target), or
			// a file of git's old mode 100664, which no tree ag writes says.
			if _, err := admin.UploadBlobs(ctx, &agwpv1.UploadBlobsRequest{Blobs: [][]byte{{}}}); err != nil {
				t.Fatal(err)
			}
			for what, entry := range map[string]object.TreeEntry{
				"a symbolic link to nothing": {Name: "l", Mode: filemode.Symlink, Hash: gitstore.BlobID(nil)},
				"a file of mode 100664":      {Name: "l", Mode: filemode.Deprecated, Hash: blobID},
			} {
				badTree, bad := tree(object.TreeEntry{Name: "a.txt", Mode: filemode.Regular, Hash: blobID}, entry)
				badCommit, badData := encodeCommit(t, badTree)
				if err := upload(bad, &agwpv1.GitObject{Type: "commit", Data: badData}); err != nil {
					t.Fatalf("a history holding %s: %v", what, err)
				}
				_, err = admin.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "x", GitCommit: badCommit.String()})
				wantCode(t, "a repository whose head holds "+what, err, connect.CodeInvalidArgument)
			}

			created, err := admin.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "app", GitCommit: childID.String()})
			if err != nil || created.GetRepository().GetMainlineCommit() != childID.String() {
				t.Fatalf("CreateRepository at %s = %v, %v", childID, created.GetRepository(), err)
			}
			tr, err := admin.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: "app"})
			if err != nil || len(tr.GetEntries()) != 1 || tr.GetEntries()[0].GetPath() != "a.txt" || tr.GetGitTree() != goodID.String() ||
				tr.GetGitCommit() != childID.String() {
				t.Fatalf("GetTree of the imported repository = %v, %v", tr, err)
			}
		})
	}
}

// TestAShallowHistoryStopsOnlyWhereItSays attacks the import of a shallow history: a commit is
// stored without its parents only when its upload says it is a boundary (shallow), and a
// repository starts at a history only when that history stops at the commits its shallow lists
// and nowhere else: a hole not declared is refused, naming it, also in a history that reaches
// a boundary another upload declared; a commit listed that the history does not reach, or
// listed twice, or a shallow without git_commit, is refused; a whole history still starts a
// repository once the store holds a boundary. The repository answers where its history stops.
func TestAShallowHistoryStopsOnlyWhereItSays(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			admin := srv.Admin.Repos
			blob := []byte("hello\n")
			if _, err := admin.UploadBlobs(ctx, &agwpv1.UploadBlobsRequest{Blobs: [][]byte{blob}}); err != nil {
				t.Fatal(err)
			}
			treeID, treeData := encodeTree(t, object.TreeEntry{Name: "a.txt", Mode: filemode.Regular, Hash: gitstore.BlobID(blob)})
			tree := &agwpv1.GitObject{Type: "tree", Data: treeData}
			commit := func(parents ...plumbing.Hash) (plumbing.Hash, *agwpv1.GitObject) {
				id, data := encodeCommit(t, treeID, parents...)
				return id, &agwpv1.GitObject{Type: "commit", Data: data}
			}
			upload := func(shallow []string, objs ...*agwpv1.GitObject) error {
				_, err := admin.UploadGitObjects(ctx, &agwpv1.UploadGitObjectsRequest{Objects: objs, Shallow: shallow})
				return err
			}
			create := func(name string, head plumbing.Hash, shallow ...string) (*agwpv1.Repository, error) {
				res, err := admin.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: name, GitCommit: head.String(), Shallow: shallow})
				return res.GetRepository(), err
			}

			// A whole history, uploaded before any boundary.
			rootID, root := commit()
			wholeID, whole := commit(rootID)
			if err := upload(nil, tree, root, whole); err != nil {
				t.Fatal(err)
			}
			// The boundary: its parent is a commit nobody uploaded.
			absent := plumbing.NewHash(strings.Repeat("ab", 20))
			boundaryID, boundary := commit(absent)
			headID, head := commit(boundaryID)
			wantCode(t, "a commit whose parent is absent, not declared", upload(nil, boundary, head), connect.CodeFailedPrecondition)
			wantCode(t, "shallow naming a commit the request does not carry", upload([]string{headID.String()}, boundary), connect.CodeInvalidArgument)
			wantCode(t, "shallow naming a tree", upload([]string{treeID.String()}, tree, boundary), connect.CodeInvalidArgument)
			wantCode(t, "shallow naming no id", upload([]string{"HEAD"}, boundary), connect.CodeInvalidArgument)
			if err := upload([]string{boundaryID.String()}, boundary, head); err != nil {
				t.Fatalf("a boundary and its child: %v", err)
			}

			// The history that stops at the boundary, without saying so: refused, naming both.
			_, err := create("holey", headID)
			wantCode(t, "a history with a hole it does not declare", err, connect.CodeFailedPrecondition)
			for _, want := range []string{absent.String(), "a parent of " + boundaryID.String(), "not in shallow"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal of a hole %q does not say %q", err, want)
				}
			}
			// A later history that reaches the boundary through a merge: refused too.
			mergeID, merge := commit(wholeID, headID)
			if err := upload(nil, merge); err != nil {
				t.Fatal(err)
			}
			_, err = create("holey", mergeID)
			wantCode(t, "a merge reaching a boundary it does not declare", err, connect.CodeFailedPrecondition)

			_, err = create("x", headID, boundaryID.String(), boundaryID.String())
			wantCode(t, "a boundary listed twice", err, connect.CodeInvalidArgument)
			_, err = create("x", headID, boundaryID.String(), rootID.String())
			wantCode(t, "a boundary the history does not reach", err, connect.CodeInvalidArgument)
			_, err = admin.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "x", Shallow: []string{boundaryID.String()}})
			wantCode(t, "shallow without git_commit", err, connect.CodeInvalidArgument)
			if _, err := admin.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: "x"}); connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatalf("a refused import made the repository: %v", err)
			}

			r, err := create("shallow", mergeID, boundaryID.String())
			if err != nil || r.GetMainlineCommit() != mergeID.String() || !slices.Equal(r.GetShallow(), []string{boundaryID.String()}) {
				t.Fatalf("CreateRepository at a history declaring where it stops = %v, %v", r, err)
			}
			got, err := admin.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: "shallow"})
			if err != nil || !slices.Equal(got.GetRepository().GetShallow(), []string{boundaryID.String()}) {
				t.Fatalf("GetRepository of it = %v, %v", got, err)
			}
			w, err := create("whole", wholeID)
			if err != nil || len(w.GetShallow()) != 0 {
				t.Fatalf("CreateRepository at a whole history, once the store holds a boundary = %v, %v", w, err)
			}
		})
	}
}
