package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"

	"github.com/ag-coord/ag/internal/clock"
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
// (ReadStoredDeltas). A delta that makes another blob than its id reads as an error, never as
// a blob; one whose base the store lacks is not stored.
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

	// A row whose delta makes another blob than its id says: each read is an error, never the
	// other blob. One against a blob the store lacks is refused.
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
	if err := b.rs.PutPackedBlobs(b.ctx, []store.PackedBlob{orphan}); !errors.Is(err, store.ErrFailedPrecondition) {
		t.Fatalf("PutPackedBlobs of a delta whose base is not stored: %v, want ErrFailedPrecondition", err)
	}
	if err := b.rs.PutPackedBlobs(b.ctx, []store.PackedBlob{lying}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []store.PackedBlob{lying} {
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

// testBlobsKeptAsDeltasInPlace: a blob stored whole is kept as its delta against another
// (ReplaceWithDeltas) unless a delta is against it, it is already a delta, its base is itself,
// is not stored or is as deep as a chain may be; what it keeps reads back whole. A delta
// stored against a base kept as a delta since its sender looked counts the base's chain as it
// is now, and one that would pass the deepest chain is refused.
func testBlobsKeptAsDeltasInPlace(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	versions, rows := packedChain(t, store.MaxBlobDeltaDepth+1) // versions[50] is 50 deep
	whole := func(content []byte) store.PackedBlob {
		data, form := store.EncodeStored(content)
		return store.PackedBlob{Digest: repo.Digest(content), GitID: gitstore.BlobID(content), Size: int64(len(content)), Data: data, StoredAs: form}
	}
	rewrite := func(of, against []byte) store.BlobRewrite {
		d := packfile.DiffDelta(against, of)
		z, err := gitstore.Deflate(d)
		if err != nil {
			t.Fatal(err)
		}
		return store.BlobRewrite{Blob: gitstore.BlobID(of), Base: gitstore.BlobID(against), Len: len(d), Deflated: z}
	}
	x := append(bytes.Clone(versions[3]), "x\n"...)
	y := append(bytes.Clone(versions[3]), "y\n"...)
	z := append(bytes.Clone(versions[3]), "z\n"...)
	if err := b.rs.PutPackedBlobs(b.ctx, append(rows, whole(x), whole(y), whole(z))); err != nil {
		t.Fatal(err)
	}
	for name, rw := range map[string]store.BlobRewrite{
		"a blob a delta is against":                 rewrite(versions[0], x),
		"a blob kept as a delta already":            rewrite(versions[5], x),
		"a blob against itself":                     rewrite(x, x),
		"a blob against one not stored":             rewrite(x, []byte("not stored\n")),
		"a blob against the deepest chain":          rewrite(x, versions[store.MaxBlobDeltaDepth]),
		"a blob stored whole, against itself twice": {Blob: gitstore.BlobID(y), Base: gitstore.BlobID(y)},
	} {
		if n, err := b.rs.ReplaceWithDeltas(b.ctx, []store.BlobRewrite{rw}); err != nil || n != 0 {
			t.Fatalf("ReplaceWithDeltas of %s: %d, %v; want it left as it is", name, n, err)
		}
	}
	// y against a version 10 deep is kept, 11 deep; then x against y, 12 deep.
	if n, err := b.rs.ReplaceWithDeltas(b.ctx, []store.BlobRewrite{rewrite(y, versions[10]), rewrite(x, y)}); err != nil || n != 2 {
		t.Fatalf("ReplaceWithDeltas: %d, %v; want 2", n, err)
	}
	depths, err := b.rs.BlobDepths(b.ctx, []plumbing.Hash{gitstore.BlobID(x), gitstore.BlobID(y)})
	if err != nil || depths[gitstore.BlobID(y)] != 11 || depths[gitstore.BlobID(x)] != 12 {
		t.Fatalf("after ReplaceWithDeltas the depths are %v (%v), want y 11 and x 12", depths, err)
	}
	for _, c := range [][]byte{x, y} {
		got, err := b.rs.GetBlob(b.ctx, repo.Digest(c))
		if err != nil || !bytes.Equal(got.Content, c) {
			t.Fatalf("a blob kept as a delta in place reads back as %d bytes (%v)", len(got.Content), err)
		}
	}
	// A delta against x sent as if x were whole (1 deep) is stored 13 deep.
	late := deltaOn(t, x)
	if err := b.rs.PutPackedBlobs(b.ctx, []store.PackedBlob{late}); err != nil {
		t.Fatal(err)
	}
	if depths, err := b.rs.BlobDepths(b.ctx, []plumbing.Hash{late.GitID}); err != nil || depths[late.GitID] != 13 {
		t.Fatalf("a delta against a blob kept as a delta since is %v deep (%v), want 13", depths, err)
	}
	// Nor against the deepest chain's blob sent again in the same batch, as if whole: the
	// store keeps the row it holds, 50 deep.
	deepest := versions[store.MaxBlobDeltaDepth]
	again := whole(deepest)
	if err := b.rs.PutPackedBlobs(b.ctx, []store.PackedBlob{again, deltaOn(t, deepest)}); !errors.Is(err, store.ErrFailedPrecondition) {
		t.Fatalf("PutPackedBlobs of a delta against a blob stored 50 deep, sent again whole: %v, want ErrFailedPrecondition", err)
	}
	// One against the deepest chain is refused, storing nothing.
	tooDeep := deltaOn(t, deepest)
	if err := b.rs.PutPackedBlobs(b.ctx, []store.PackedBlob{tooDeep}); !errors.Is(err, store.ErrFailedPrecondition) {
		t.Fatalf("PutPackedBlobs of a delta past the deepest chain: %v, want ErrFailedPrecondition", err)
	}
	if missing, err := b.rs.MissingBlobs(b.ctx, []string{tooDeep.Digest}); err != nil || len(missing) != 1 {
		t.Fatalf("a refused delta was stored: %v, %v", missing, err)
	}
}

// deltaOn answers a line more than base, kept as a delta against it that says it is 1 deep.
func deltaOn(t *testing.T, base []byte) store.PackedBlob {
	t.Helper()
	v := append(bytes.Clone(base), "one more\n"...)
	d := packfile.DiffDelta(base, v)
	z, err := gitstore.Deflate(d)
	if err != nil {
		t.Fatal(err)
	}
	return store.PackedBlob{Digest: repo.Digest(v), GitID: gitstore.BlobID(v), Size: int64(len(v)),
		Data: store.PackDelta{Base: gitstore.BlobID(base), Depth: 1, Len: len(d), Deflated: z}.Encode(), StoredAs: store.StoredPackDelta}
}

// ADeltaAgainstABlobInPartsReads stores a blob in parts, then, with insert (which writes a
// row as given, as a race would leave it), a delta against it: a blob uploaded in parts while
// an import stores it as a delta's base keeps whichever row came first, and the delta must
// still read back whole.
func ADeltaAgainstABlobInPartsReads(t *testing.T, st store.Store, clk *clock.Fake, insert func(store.PackedBlob)) {
	t.Helper()
	b := &rbundle{bundle: &bundle{ctx: t.Context(), st: st, clk: clk}, rs: st}
	base := []byte(strings.Repeat("a blob an upload sent in parts\n", 40))
	b.upload(t, "base", "alice", base, 256)
	delta := deltaOn(t, base) // 1 deep: its base is kept whole, in parts
	insert(delta)
	got, err := st.GetBlob(t.Context(), delta.Digest)
	if err != nil || gitstore.BlobID(got.Content) != delta.GitID {
		t.Fatalf("GetBlob of a delta against a blob in parts: %d bytes, %v", len(got.Content), err)
	}
	if _, data, err := st.ReadGitObject(t.Context(), delta.GitID); err != nil || gitstore.BlobID(data) != delta.GitID {
		t.Fatalf("ReadGitObject of a delta against a blob in parts: %d bytes, %v", len(data), err)
	}
}
