package storetest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// packedChain answers versions of a file, each a line longer, the first kept whole and each
// next one as git's delta against the one before, as PutPackedBlobs takes them.
func packedChain(t *testing.T, n int) ([][]byte, []store.PackedBlob) {
	t.Helper()
	var (
		versions [][]byte
		rows     []store.PackedBlob
		text     = strings.Repeat("a line every version holds\n", 200)
	)
	for i := range n {
		text += fmt.Sprintf("the line of version %d\n", i)
		content := []byte(text)
		row := store.PackedBlob{Digest: repo.Digest(content), GitID: gitstore.BlobID(content), Size: int64(len(content))}
		if i == 0 {
			row.Data, row.StoredAs = store.EncodeStored(content)
		} else {
			delta := packfile.DiffDelta(versions[i-1], content)
			deflated, err := gitstore.Deflate(delta)
			if err != nil {
				t.Fatal(err)
			}
			row.Data = store.PackDelta{Base: rows[i-1].GitID, Depth: i, Len: len(delta), Deflated: deflated}.Encode()
			row.StoredAs = store.StoredPackDelta
		}
		versions = append(versions, content)
		rows = append(rows, row)
	}
	return versions, rows
}

// testBlobDeltas: blobs an import keeps as a chain of git's deltas, as deep as a pack's may be,
// read back whole by every read of a blob (by digest, many at once, from an offset, by git
// id), are told deep as they are (BlobDepths), and are answered as kept to a pack's writer
// (ReadStoredDeltas). A delta that makes another blob than its id, or whose base the store
// lacks, reads as an error, never as a blob.
func testBlobDeltas(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	versions, rows := packedChain(t, store.MaxBlobDeltaDepth+1)
	if err := b.rs.PutPackedBlobs(b.ctx, rows); err != nil {
		t.Fatalf("PutPackedBlobs: %v", err)
	}
	last := len(rows) - 1
	got, err := b.rs.GetBlob(b.ctx, rows[last].Digest)
	if err != nil || !bytes.Equal(got.Content, versions[last]) {
		t.Fatalf("GetBlob of the blob %d deltas deep: %d bytes, %v; want its %d", last, len(got.Content), err, len(versions[last]))
	}
	digests := make([]string, len(rows))
	ids := make([]plumbing.Hash, len(rows))
	want := map[string][]byte{}
	for i, r := range rows {
		digests[i], ids[i], want[r.Digest] = r.Digest, r.GitID, versions[i]
	}
	blobs, err := b.rs.GetBlobs(b.ctx, digests)
	if err != nil || len(blobs) != len(rows) {
		t.Fatalf("GetBlobs of the chain: %d blobs, %v; want %d", len(blobs), err, len(rows))
	}
	for _, bl := range blobs {
		if !bytes.Equal(bl.Content, want[bl.Digest]) {
			t.Fatalf("GetBlobs answered %s with another content", bl.Digest)
		}
	}
	var read []byte
	if err := b.rs.ReadBlob(b.ctx, rows[30].Digest, 100, func(piece []byte) error {
		read = append(read, piece...)
		return nil
	}); err != nil || !bytes.Equal(read, versions[30][100:]) {
		t.Fatalf("ReadBlob from 100 of a delta: %d bytes, %v; want %d", len(read), err, len(versions[30])-100)
	}
	typ, data, err := b.rs.ReadGitObject(b.ctx, ids[17])
	if err != nil || typ != plumbing.BlobObject || !bytes.Equal(data, versions[17]) {
		t.Fatalf("ReadGitObject of a delta: %s, %v; want the blob", typ, err)
	}
	objs, err := b.rs.ReadGitObjects(b.ctx, ids)
	if err != nil || len(objs) != len(ids) {
		t.Fatalf("ReadGitObjects of the chain: %d objects, %v", len(objs), err)
	}
	for _, o := range objs {
		if o.Type != plumbing.BlobObject || gitstore.BlobID(o.Data) != o.ID {
			t.Fatalf("ReadGitObjects answered %s with another content", o.ID)
		}
	}
	depths, err := b.rs.BlobDepths(b.ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if depths[id] != i {
			t.Fatalf("BlobDepths of the version %d: %d (held: %v)", i, depths[id], len(depths))
		}
	}
	kept, err := b.rs.ReadStoredDeltas(b.ctx, ids)
	if err != nil || len(kept) != len(ids)-1 {
		t.Fatalf("ReadStoredDeltas: %d, %v; want the %d deltas", len(kept), err, len(ids)-1)
	}
	for i := 1; i < len(ids); i++ {
		d := kept[ids[i]]
		delta, err := d.Inflate()
		if err != nil || d.Base != ids[i-1] {
			t.Fatalf("ReadStoredDeltas of version %d: against %s, %v; want %s", i, d.Base, err, ids[i-1])
		}
		if made, err := packfile.PatchDelta(versions[i-1], delta); err != nil || !bytes.Equal(made, versions[i]) {
			t.Fatalf("ReadStoredDeltas of version %d: a delta that does not make it (%v)", i, err)
		}
	}

	// A row whose delta makes another blob than its id says, and one against a blob the
	// store lacks: each read is an error, never the other blob.
	other := append(bytes.Clone(versions[10]), "not this one\n"...)
	claimed := []byte("what the row claims to be\n")
	delta := packfile.DiffDelta(versions[10], other)
	deflated, err := gitstore.Deflate(delta)
	if err != nil {
		t.Fatal(err)
	}
	lying := store.PackedBlob{Digest: repo.Digest(claimed), GitID: gitstore.BlobID(claimed), Size: int64(len(other)),
		Data:     store.PackDelta{Base: ids[10], Depth: 11, Len: len(delta), Deflated: deflated}.Encode(),
		StoredAs: store.StoredPackDelta}
	orphan := lying
	orphanContent := []byte("an orphan\n")
	orphan.Digest, orphan.GitID = repo.Digest(orphanContent), gitstore.BlobID(orphanContent)
	orphan.Data = store.PackDelta{Base: plumbing.NewHash(strings.Repeat("ab", 20)), Depth: 1, Len: len(delta), Deflated: deflated}.Encode()
	if err := b.rs.PutPackedBlobs(b.ctx, []store.PackedBlob{lying, orphan}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []store.PackedBlob{lying, orphan} {
		if got, err := b.rs.GetBlob(b.ctx, bad.Digest); err == nil {
			t.Fatalf("GetBlob of a damaged delta answered %d bytes", len(got.Content))
		}
		if _, data, err := b.rs.ReadGitObject(b.ctx, bad.GitID); err == nil {
			t.Fatalf("ReadGitObject of a damaged delta answered %d bytes", len(data))
		}
		if blobs, err := b.rs.GetBlobs(b.ctx, []string{bad.Digest}); err == nil {
			t.Fatalf("GetBlobs of a damaged delta answered %d blobs", len(blobs))
		}
	}
}
