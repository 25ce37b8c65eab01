package storetest

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// testStoredForms: contents are stored compressed when that pays (store.EncodeStored). Text
// that compresses, random bytes that do not, a short content and the empty one each read back
// whole through every read, by digest and by git id, from any offset; so do trees and commits.
// A store that wrote every row itself has nothing for CompactStored.
func testStoredForms(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	text := bytes.Repeat([]byte("func main() { fmt.Println(\"hello, world\") }\n"), 3000)
	random := make([]byte, 100<<10)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(random)
	contents := map[string][]byte{"text": text, "random bytes": random, "a short content": []byte("short"), "the empty content": {}}
	var blobs []store.Blob
	for _, c := range contents {
		blobs = append(blobs, store.Blob{Digest: repo.Digest(c), Content: c})
	}
	if err := b.rs.PutBlobs(b.ctx, blobs); err != nil {
		t.Fatalf("PutBlobs: %v", err)
	}
	for what, c := range contents {
		digest, gitID := repo.Digest(c), gitstore.BlobID(c)
		got, err := b.rs.GetBlob(b.ctx, digest)
		if err != nil || !bytes.Equal(got.Content, c) || got.Content == nil {
			t.Fatalf("%s: GetBlob answered %d bytes, %v; want its %d", what, len(got.Content), err, len(c))
		}
		all, err := b.rs.GetBlobs(b.ctx, []string{digest})
		if err != nil || len(all) != 1 || !bytes.Equal(all[0].Content, c) {
			t.Fatalf("%s: GetBlobs answered %d blobs, %v; want it whole", what, len(all), err)
		}
		typ, data, err := b.rs.ReadGitObject(b.ctx, gitID)
		if err != nil || typ != plumbing.BlobObject || !bytes.Equal(data, c) {
			t.Fatalf("%s: ReadGitObject answered %s of %d bytes, %v; want the blob whole", what, typ, len(data), err)
		}
		objs, err := b.rs.ReadGitObjects(b.ctx, []plumbing.Hash{gitID})
		if err != nil || len(objs) != 1 || !bytes.Equal(objs[0].Data, c) {
			t.Fatalf("%s: ReadGitObjects answered %d objects, %v; want the blob whole", what, len(objs), err)
		}
		for _, offset := range []int{0, len(c) / 3, len(c)} {
			var read []byte
			for _, p := range b.pieces(t, digest, uint64(offset)) {
				read = append(read, p...)
			}
			if !bytes.Equal(read, c[offset:]) {
				t.Fatalf("%s: ReadBlob from %d answered %d bytes, want the %d from there", what, offset, len(read), len(c)-offset)
			}
		}
	}

	// A tree of many entries (which compresses) and a commit.
	var tree bytes.Buffer
	for i := range 400 {
		id := gitstore.BlobID([]byte{byte(i), byte(i >> 8)})
		tree.WriteString("100644 file-" + string(rune('a'+i%26)) + "-" + repo.Digest([]byte{byte(i), byte(i >> 8)})[7:19] + "\x00")
		tree.Write(id[:])
	}
	commit := []byte("tree " + gitstore.BlobID(tree.Bytes()).String() + "\nauthor a <a@example.com> 1 +0000\ncommitter a <a@example.com> 1 +0000\n\nm\n")
	objects := []store.GitObject{
		{ID: plumbing.ComputeHash(plumbing.TreeObject, tree.Bytes()), Type: plumbing.TreeObject, Data: tree.Bytes()},
		{ID: plumbing.ComputeHash(plumbing.CommitObject, commit), Type: plumbing.CommitObject, Data: commit},
	}
	if err := b.rs.PutGitObjects(b.ctx, objects); err != nil {
		t.Fatalf("PutGitObjects: %v", err)
	}
	for _, o := range objects {
		typ, data, err := b.rs.ReadGitObject(b.ctx, o.ID)
		if err != nil || typ != o.Type || !bytes.Equal(data, o.Data) {
			t.Fatalf("ReadGitObject(%s) answered %s of %d bytes, %v; want the %s of %d", o.ID, typ, len(data), err, o.Type, len(o.Data))
		}
	}
	read, err := b.rs.ReadGitObjects(b.ctx, []plumbing.Hash{objects[0].ID, objects[1].ID})
	if err != nil || len(read) != 2 {
		t.Fatalf("ReadGitObjects answered %d objects, %v; want 2", len(read), err)
	}
	for _, o := range read {
		if plumbing.ComputeHash(o.Type, o.Data) != o.ID {
			t.Fatalf("ReadGitObjects answered %s with data whose id is %s", o.ID, plumbing.ComputeHash(o.Type, o.Data))
		}
	}

	if n, err := b.rs.CompactStored(b.ctx, 100); n != 0 || err != nil {
		t.Fatalf("CompactStored on rows all written compressed = %d, %v; want 0 rewritten", n, err)
	}
}
