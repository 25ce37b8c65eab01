package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// newUpload answers the upload of content in parts of partBytes, as a server would start it.
func newUpload(id, principal string, content []byte, partBytes uint64) store.BlobUpload {
	return store.BlobUpload{ID: id, Principal: principal, Digest: repo.Digest(content), Size: uint64(len(content)),
		PartBytes: partBytes, HashState: hashState(0)}
}

// hashState stands for the server's hashes after n bytes: the store keeps it without reading
// it, so any bytes do, and bytes no text encoding keeps check that it keeps them as they are.
func hashState(n uint64) []byte { return fmt.Appendf(nil, "state after %d bytes \x00\xff", n) }

// completed is what a server that hashed content completes its upload with.
func completed(content []byte) *store.CompletedBlob {
	return &store.CompletedBlob{Digest: repo.Digest(content), GitID: gitstore.BlobID(content)}
}

// part answers the append of content's part of u from offset, completing u when it is the last.
func part(u store.BlobUpload, content []byte, offset uint64) store.AppendBlobUploadParams {
	end := min(offset+u.PartBytes, uint64(len(content)))
	p := store.AppendBlobUploadParams{ID: u.ID, Offset: offset, Content: content[offset:end], HashState: hashState(end)}
	if end == uint64(len(content)) {
		p.Complete = completed(content)
	}
	return p
}

func (b *rbundle) startUpload(t *testing.T, u store.BlobUpload) store.BlobUpload {
	t.Helper()
	got, err := b.rs.StartBlobUpload(b.ctx, u)
	if err != nil {
		t.Fatalf("StartBlobUpload(%s): %v", u.ID, err)
	}
	return got
}

func (b *rbundle) appendPart(t *testing.T, p store.AppendBlobUploadParams) store.BlobUpload {
	t.Helper()
	got, err := b.rs.AppendBlobUpload(b.ctx, p)
	if err != nil {
		t.Fatalf("AppendBlobUpload(%s, %d bytes from %d): %v", p.ID, len(p.Content), p.Offset, err)
	}
	if end := p.Offset + uint64(len(p.Content)); got.Received != end || !bytes.Equal(got.HashState, p.HashState) {
		t.Fatalf("AppendBlobUpload(%s, %d bytes from %d) answered received %d, hash state %q; want %d, %q",
			p.ID, len(p.Content), p.Offset, got.Received, got.HashState, end, p.HashState)
	}
	return got
}

// sendParts sends content's parts from what u received on, and answers u as the last append
// answered it.
func (b *rbundle) sendParts(t *testing.T, u store.BlobUpload, content []byte) store.BlobUpload {
	t.Helper()
	for u.Received < u.Size {
		u = b.appendPart(t, part(u, content, u.Received))
	}
	return u
}

// upload sends content in parts of partBytes, as principal's upload id, from start to end.
func (b *rbundle) upload(t *testing.T, id, principal string, content []byte, partBytes uint64) store.BlobUpload {
	t.Helper()
	return b.sendParts(t, b.startUpload(t, newUpload(id, principal, content, partBytes)), content)
}

// wantUpload checks the upload as StartBlobUpload answers it, which leaves a stored one as it is.
func (b *rbundle) wantUpload(t *testing.T, what string, want store.BlobUpload) {
	t.Helper()
	again := want
	again.Received, again.HashState, again.CreatedAt = 0, []byte("the state of a start"), time.Time{}
	assertFields(t, what+": StartBlobUpload answered", b.startUpload(t, again), want)
	got, err := b.rs.GetBlobUpload(b.ctx, want.ID)
	if err != nil {
		t.Fatalf("%s: GetBlobUpload(%s): %v", what, want.ID, err)
	}
	assertFields(t, what+": GetBlobUpload answered", got, want)
}

// pieces answers what ReadBlob passes fn, piece by piece.
func (b *rbundle) pieces(t *testing.T, digest string, offset uint64) [][]byte {
	t.Helper()
	var pieces [][]byte
	if err := b.rs.ReadBlob(b.ctx, digest, offset, func(piece []byte) error {
		pieces = append(pieces, bytes.Clone(piece))
		return nil
	}); err != nil {
		t.Fatalf("ReadBlob(%s, from %d): %v", digest, offset, err)
	}
	return pieces
}

// wantPieces checks the lengths of the pieces ReadBlob answers from offset.
func (b *rbundle) wantPieces(t *testing.T, what string, digest string, offset uint64, lengths ...int) {
	t.Helper()
	var got []int
	for _, p := range b.pieces(t, digest, offset) {
		got = append(got, len(p))
	}
	if !slices.Equal(got, lengths) {
		t.Fatalf("%s: ReadBlob from %d answered pieces of %v bytes, want %v", what, offset, got, lengths)
	}
}

// wantBlob checks that every read of a blob answers content whole: by digest, by git id, its
// size, and ReadBlob from every offset up to past the end.
func (b *rbundle) wantBlob(t *testing.T, what string, content []byte) {
	t.Helper()
	digest, gitID := repo.Digest(content), gitstore.BlobID(content)
	absent := repo.Digest([]byte("a blob nobody stored"))

	got, err := b.rs.GetBlob(b.ctx, digest)
	if err != nil || got.Digest != digest || !bytes.Equal(got.Content, content) {
		t.Fatalf("%s: GetBlob(%s) = %q (%s), %v; want %q", what, digest, got.Content, got.Digest, err, content)
	}
	blobs, err := b.rs.GetBlobs(b.ctx, []string{absent, digest})
	if err != nil || len(blobs) != 1 || blobs[0].Digest != digest || !bytes.Equal(blobs[0].Content, content) {
		t.Fatalf("%s: GetBlobs = %v, %v; want %s alone, %q", what, blobs, err, digest, content)
	}
	typ, data, err := b.rs.ReadGitObject(b.ctx, gitID)
	if err != nil || typ != plumbing.BlobObject || !bytes.Equal(data, content) {
		t.Fatalf("%s: ReadGitObject(%s) = %s %q, %v; want the blob %q", what, gitID, typ, data, err, content)
	}
	objs, err := b.rs.ReadGitObjects(b.ctx, []plumbing.Hash{gitstore.BlobID([]byte("absent")), gitID})
	if err != nil || len(objs) != 1 || objs[0].ID != gitID || objs[0].Type != plumbing.BlobObject || !bytes.Equal(objs[0].Data, content) {
		t.Fatalf("%s: ReadGitObjects = %v, %v; want the blob %s alone, %q", what, objs, err, gitID, content)
	}
	sizes, err := b.rs.BlobSizes(b.ctx, []string{digest, absent})
	if err != nil || len(sizes) != 1 || sizes[digest] != uint64(len(content)) {
		t.Fatalf("%s: BlobSizes = %v, %v; want %s: %d alone", what, sizes, err, digest, len(content))
	}
	if missing, err := b.rs.MissingBlobs(b.ctx, []string{digest, absent}); err != nil || !slices.Equal(missing, []string{absent}) {
		t.Fatalf("%s: MissingBlobs = %v, %v; want only %s", what, missing, err, absent)
	}
	if missing, err := b.rs.MissingGitObjects(b.ctx, []plumbing.Hash{gitID}); err != nil || len(missing) != 0 {
		t.Fatalf("%s: MissingGitObjects(%s) = %v, %v; want none", what, gitID, missing, err)
	}
	for offset := range uint64(len(content)) + 2 {
		want := content[min(offset, uint64(len(content))):]
		if got := bytes.Join(b.pieces(t, digest, offset), nil); !bytes.Equal(got, want) {
			t.Fatalf("%s: ReadBlob from %d answered %q, want %q", what, offset, got, want)
		}
	}
}

// wantNoBlob checks that no read finds the blob of content.
func (b *rbundle) wantNoBlob(t *testing.T, what string, content []byte) {
	t.Helper()
	digest := repo.Digest(content)
	_, err := b.rs.GetBlob(b.ctx, digest)
	wantErr(t, what+": GetBlob", err, store.ErrNotFound)
	err = b.rs.ReadBlob(b.ctx, digest, 0, func([]byte) error { return nil })
	wantErr(t, what+": ReadBlob", err, store.ErrNotFound)
	if missing, err := b.rs.MissingBlobs(b.ctx, []string{digest}); err != nil || len(missing) != 1 {
		t.Fatalf("%s: MissingBlobs(%s) = %v, %v; want it missing", what, digest, missing, err)
	}
	id := gitstore.BlobID(content)
	if missing, err := b.rs.MissingGitObjects(b.ctx, []plumbing.Hash{id}); err != nil || len(missing) != 1 {
		t.Fatalf("%s: MissingGitObjects(%s) = %v, %v; want it missing", what, id, missing, err)
	}
}

func testBlobPartsReadBack(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	content := []byte("\x00123\xff56789abc\n") // parts of 4, 4, 4 and 2 bytes
	digest := repo.Digest(content)

	u := b.startUpload(t, newUpload("upload-1", "alice", content, 4))
	assertFields(t, "StartBlobUpload", u, store.BlobUpload{ID: "upload-1", Principal: "alice", Digest: digest,
		Size: 14, PartBytes: 4, HashState: hashState(0), CreatedAt: epoch})
	for u.Received+u.PartBytes < u.Size {
		u = b.appendPart(t, part(u, content, u.Received))
		b.wantNoBlob(t, fmt.Sprintf("after %d bytes of %d", u.Received, u.Size), content)
	}
	if u = b.appendPart(t, part(u, content, u.Received)); u.Received != u.Size {
		t.Fatalf("the completing append answered received %d, want the size %d", u.Received, u.Size)
	}
	b.wantBlob(t, "a blob sent in parts", content)
	b.wantPieces(t, "from the start", digest, 0, 4, 4, 4, 2)
	b.wantPieces(t, "from inside the first part", digest, 1, 3, 4, 4, 2)
	b.wantPieces(t, "from a part's start", digest, 4, 4, 4, 2)
	b.wantPieces(t, "from inside the last part", digest, 13, 1)
	b.wantPieces(t, "from the end", digest, 14)
	b.wantPieces(t, "from far past the end", digest, 1<<40)

	// The empty blob, sent as one empty part.
	none := b.startUpload(t, newUpload("upload-empty", "alice", nil, 4))
	if got := b.appendPart(t, part(none, nil, 0)); got.Received != 0 {
		t.Fatalf("the append of the empty blob answered received %d", got.Received)
	}
	b.wantBlob(t, "the empty blob sent in parts", []byte{})

	// Beside blobs stored whole, which ReadBlob answers in one piece.
	whole, empty := blobOf("stored whole"), blobOf("")
	if err := b.rs.PutBlobs(b.ctx, []store.Blob{whole}); err != nil {
		t.Fatalf("PutBlobs: %v", err)
	}
	b.wantBlob(t, "a blob stored whole", whole.Content)
	b.wantPieces(t, "a blob stored whole, from the start", whole.Digest, 0, len(whole.Content))
	b.wantPieces(t, "a blob stored whole, from inside", whole.Digest, 3, len(whole.Content)-3)
	b.wantPieces(t, "a blob stored whole, from the end", whole.Digest, uint64(len(whole.Content)))
	b.wantPieces(t, "the empty blob", empty.Digest, 0)
	blobs, err := b.rs.GetBlobs(b.ctx, []string{whole.Digest, digest, empty.Digest})
	if err != nil || len(blobs) != 3 {
		t.Fatalf("GetBlobs of three blobs = %v, %v", blobs, err)
	}
	for _, bl := range blobs {
		want := map[string][]byte{whole.Digest: whole.Content, digest: content, empty.Digest: {}}[bl.Digest]
		if !bytes.Equal(bl.Content, want) || bl.Content == nil {
			t.Fatalf("GetBlobs answered %s as %q, want %q", bl.Digest, bl.Content, want)
		}
	}
	objs, err := b.rs.ReadGitObjects(b.ctx, []plumbing.Hash{gitstore.BlobID(whole.Content), gitstore.BlobID(content)})
	if err != nil || len(objs) != 2 {
		t.Fatalf("ReadGitObjects of two blobs = %v, %v", objs, err)
	}
	for _, o := range objs {
		if o.ID != gitstore.BlobID(o.Data) {
			t.Fatalf("ReadGitObjects answered %s with content %q, whose id is %s", o.ID, o.Data, gitstore.BlobID(o.Data))
		}
	}

}

func testBlobPartsInIntegrate(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Hour, "links/")
	link := func(base, path string, target []byte) store.IntegrateParams {
		return store.IntegrateParams{Repository: "web", BaseRevision: base, Holder: alice, FencingTokens: []uint64{l.FencingToken},
			Paths: []string{path}, Message: "link " + path, Edits: []repo.FileEdit{{Path: path, Digest: repo.Digest(target),
				Size: uint64(len(target)), Mode: repo.ModeSymlink}}}
	}

	// Integrate reads a link's target in its transaction to check it: the blob sent in parts
	// must be read whole there too, or its target would be empty.
	target := []byte("../../some/where/far/away")
	b.upload(t, "far", "alice", target, 4)
	c := b.mustIntegrate(t, link(r.Mainline, "links/far", target))
	tree := b.revision(t, "web", c.IntegratedRevision).Tree
	want := repo.Tree{{Path: "links/far", Digest: repo.Digest(target), Size: uint64(len(target)), Mode: repo.ModeSymlink}}
	assertTree(t, "the tree with a link sent in parts", tree, want)

	// A NUL in the target's last part refuses the link.
	bad := []byte("../../some/where\x00")
	b.upload(t, "bad", "alice", bad, 4)
	err := b.refusedIntegrate(t, "of a link whose last part holds a NUL", link(c.IntegratedRevision, "links/bad", bad))
	var invalid *repo.InvalidEditError
	if !errors.As(err, &invalid) || invalid.Path != "links/bad" {
		t.Fatalf("Integrate of a link to a NUL sent in parts: err = %v (%T), want a *repo.InvalidEditError on links/bad", err, err)
	}
}

func testBlobUploadStart(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	content := []byte("0123456789")
	u := newUpload("upload-1", "alice", content, 4)
	u.Received = 7 // a start creates the upload with nothing received, whatever it says
	first := b.startUpload(t, u)
	want := store.BlobUpload{ID: "upload-1", Principal: "alice", Digest: repo.Digest(content), Size: 10, PartBytes: 4,
		HashState: hashState(0), CreatedAt: epoch}
	assertFields(t, "StartBlobUpload", first, want)

	// A client that stopped asks again, later, and goes on from what was received: the upload
	// as stored, not as the second start describes it.
	b.clk.Advance(time.Minute)
	b.appendPart(t, part(first, content, 0))
	want.Received, want.HashState = 4, hashState(4)
	b.wantUpload(t, "after one part", want)
	again := newUpload("upload-1", "alice", content, 8)
	again.HashState = []byte("another state")
	assertFields(t, "StartBlobUpload of an upload under way with other parts", b.startUpload(t, again), want)

	// Another upload of the same blob is another upload.
	other := b.startUpload(t, newUpload("upload-2", "bob", content, 4))
	if other.Received != 0 || !other.CreatedAt.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("StartBlobUpload of another upload = %+v, want a new upload created now", other)
	}
	b.wantUpload(t, "after another upload started", want)

	// An upload nobody started, or one completed, is not found by a read.
	if _, err := b.rs.GetBlobUpload(b.ctx, "upload-9"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetBlobUpload of an upload nobody started: %v, want ErrNotFound", err)
	}
	b.sendParts(t, b.startUpload(t, newUpload("upload-1", "alice", content, 4)), content)
	if _, err := b.rs.GetBlobUpload(b.ctx, "upload-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetBlobUpload of a completed upload: %v, want ErrNotFound", err)
	}

	// An upload no part could be appended to is refused.
	if _, err := b.rs.StartBlobUpload(b.ctx, newUpload("upload-3", "alice", content, 0)); err == nil {
		t.Fatalf("StartBlobUpload of parts of 0 bytes succeeded")
	}
	if _, err := b.rs.StartBlobUpload(b.ctx, newUpload("", "alice", content, 4)); err == nil {
		t.Fatalf("StartBlobUpload without an id succeeded")
	}
}

func testBlobUploadRefusals(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	content := []byte("0123456789") // parts 0123, 4567, 89
	u := b.startUpload(t, newUpload("upload-1", "alice", content, 4))
	u = b.appendPart(t, part(u, content, 0))
	refuse := func(what string, p store.AppendBlobUploadParams, received uint64) {
		t.Helper()
		before := u
		before.Received, before.HashState = received, hashState(received)
		got, err := b.rs.AppendBlobUpload(b.ctx, p)
		wantErr(t, fmt.Sprintf("AppendBlobUpload of %s = %+v", what, got), err, store.ErrFailedPrecondition)
		b.wantUpload(t, "after "+what, before)
		b.wantNoBlob(t, "after "+what, content)
	}
	with := func(offset uint64, content string, complete bool) store.AppendBlobUploadParams {
		p := store.AppendBlobUploadParams{ID: u.ID, Offset: offset, Content: []byte(content), HashState: []byte("refused")}
		if complete {
			p.Complete = completed([]byte("0123456789"))
		}
		return p
	}
	refuse("the first part again", part(u, content, 0), 4)
	refuse("the last part before the second", part(u, content, 8), 4)
	refuse("a part from inside the first", with(2, "2345", false), 4)
	refuse("a short part that is not the last", with(4, "456", false), 4)
	refuse("a long part", with(4, "45678", false), 4)
	refuse("a part past the end", with(4, "45678901234", true), 4)
	refuse("an empty part", with(4, "", false), 4)
	refuse("a part that completes before the end", with(4, "4567", true), 4)

	u = b.appendPart(t, part(u, content, 4))
	refuse("the last part without completing", with(8, "89", false), 8)
	last := part(u, content, 8)
	last.Complete = completed([]byte("another blob"))
	refuse("the last part completing another blob", last, 8)
	refuse("the second part again", part(u, content, 4), 8)

	_, err := b.rs.AppendBlobUpload(b.ctx, store.AppendBlobUploadParams{ID: "upload-unknown", Content: []byte("0123"), HashState: hashState(4)})
	wantErr(t, "AppendBlobUpload of an unknown upload", err, store.ErrNotFound)

	// Nothing refused was kept: the blob is the parts accepted.
	b.appendPart(t, part(u, content, 8))
	b.wantBlob(t, "after the refusals", content)
	_, err = b.rs.AppendBlobUpload(b.ctx, part(u, content, 8))
	wantErr(t, "AppendBlobUpload of the last part again, after the upload completed", err, store.ErrNotFound)
}

func testBlobUploadOfAStoredDigest(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)

	// Stored whole first: the upload completes, and the blob stays whole (one piece).
	whole := blobOf("stored whole, then sent in parts")
	if err := b.rs.PutBlobs(b.ctx, []store.Blob{whole}); err != nil {
		t.Fatalf("PutBlobs: %v", err)
	}
	if u := b.upload(t, "by-bob", "bob", whole.Content, 4); u.Received != u.Size {
		t.Fatalf("the upload of a stored blob answered %+v, want it complete", u)
	}
	b.wantBlob(t, "a blob stored whole, sent again in parts", whole.Content)
	b.wantPieces(t, "a blob stored whole, sent again in parts", whole.Digest, 0, len(whole.Content))

	// Stored in parts of 4 first: a second upload in parts of 5 completes, and the blob keeps
	// its parts of 4.
	content := []byte("sent in parts twice, by two principals") // 38 bytes
	b.upload(t, "by-alice", "alice", content, 4)
	b.upload(t, "by-carol", "carol", content, 5)
	b.wantBlob(t, "a blob sent in parts twice", content)
	b.wantPieces(t, "a blob sent in parts twice", repo.Digest(content), 0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 2)

	// And a blob stored in parts is left as it is by a put of its whole content.
	if err := b.rs.PutBlobs(b.ctx, []store.Blob{{Digest: repo.Digest(content), Content: content}}); err != nil {
		t.Fatalf("PutBlobs of a blob stored in parts: %v", err)
	}
	b.wantPieces(t, "a blob sent in parts, put whole", repo.Digest(content), 0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 2)
}

func testDropBlobUploads(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	stored := []byte("a blob sent in parts and stored")
	b.upload(t, "stored", "alice", stored, 4)
	old := []byte("an upload left half way")
	b.appendPart(t, part(b.startUpload(t, newUpload("old", "alice", old, 4)), old, 0))
	b.clk.Advance(time.Hour)
	recent := []byte("an upload under way")
	b.appendPart(t, part(b.startUpload(t, newUpload("recent", "bob", recent, 4)), recent, 0))

	drop := func(what string, before time.Time, id string, want int) {
		t.Helper()
		n, err := b.rs.DropBlobUploads(b.ctx, before, id)
		if err != nil || n != want {
			t.Fatalf("DropBlobUploads(%s) = %d, %v; want %d", what, n, err, want)
		}
		b.wantBlob(t, "after DropBlobUploads("+what+")", stored)
	}
	drop("started over half an hour ago", epoch.Add(30*time.Minute), "", 1)
	_, err := b.rs.AppendBlobUpload(b.ctx, part(newUpload("old", "alice", old, 4), old, 4))
	wantErr(t, "AppendBlobUpload of a dropped upload", err, store.ErrNotFound)
	if u := b.startUpload(t, newUpload("old", "alice", old, 4)); u.Received != 0 || !u.CreatedAt.Equal(epoch.Add(time.Hour)) {
		t.Fatalf("StartBlobUpload of a dropped upload = %+v, want a new upload created now", u)
	}
	if u := b.startUpload(t, newUpload("recent", "bob", recent, 4)); u.Received != 4 {
		t.Fatalf("the recent upload has received %d bytes after the drop of the old ones, want 4", u.Received)
	}

	drop("of recent by its id", epoch, "recent", 1)
	if u := b.startUpload(t, newUpload("recent", "bob", recent, 4)); u.Received != 0 {
		t.Fatalf("StartBlobUpload of a dropped upload answered %d bytes received, want 0", u.Received)
	}
	drop("of nothing so old", epoch, "", 0)
	drop("of an unknown id", epoch, "unknown", 0)
	drop("of everything", epoch.Add(24*time.Hour), "", 2)

	// The uploads started again after the drops take their parts from the start.
	b.upload(t, "old", "alice", old, 4)
	b.wantBlob(t, "an upload dropped and sent again", old)
}

func testBlobUploadAfterCompletion(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	content := []byte("stored, then started again by the same principal")
	b.upload(t, "again", "alice", content, 4)
	fours := func() []int {
		n := make([]int, len(content)/4, len(content)/4+1)
		for i := range n {
			n[i] = 4
		}
		if r := len(content) % 4; r > 0 {
			n = append(n, r)
		}
		return n
	}()

	// The id is the same (same principal, digest and size); the upload is a new one.
	b.clk.Advance(time.Minute)
	u := b.startUpload(t, newUpload("again", "alice", content, 4))
	assertFields(t, "StartBlobUpload after the upload completed", u, store.BlobUpload{ID: "again", Principal: "alice",
		Digest: repo.Digest(content), Size: uint64(len(content)), PartBytes: 4, HashState: hashState(0), CreatedAt: epoch.Add(time.Minute)})
	b.appendPart(t, part(u, content, 0))
	b.wantBlob(t, "with an upload of the blob under way", content)

	if n, err := b.rs.DropBlobUploads(b.ctx, epoch, "again"); err != nil || n != 1 {
		t.Fatalf("DropBlobUploads(again) = %d, %v; want 1", n, err)
	}
	b.wantBlob(t, "after the drop of the upload started again", content)
	b.wantPieces(t, "after the drop of the upload started again", repo.Digest(content), 0, fours...)

	b.upload(t, "again", "alice", content, 5)
	b.wantBlob(t, "after the upload completed again", content)
	b.wantPieces(t, "after the upload completed again", repo.Digest(content), 0, fours...)
}

func testConcurrentBlobAppends(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	content := []byte("0123456789ab")
	u := b.startUpload(t, newUpload("upload-1", "alice", content, 4))
	const appenders = 16
	race := func(offset uint64) []int {
		t.Helper()
		var (
			mu   sync.Mutex
			wins []int
			wg   sync.WaitGroup
		)
		for i := range appenders {
			wg.Go(func() {
				p := part(u, content, offset)
				p.HashState = fmt.Appendf(nil, "appender %d", i)
				_, err := b.rs.AppendBlobUpload(b.ctx, p)
				switch {
				case err == nil:
					mu.Lock()
					wins = append(wins, i)
					mu.Unlock()
				case errors.Is(err, store.ErrFailedPrecondition):
				case errors.Is(err, store.ErrNotFound) && p.Complete != nil:
					// The upload was completed, and is gone.
				default:
					t.Errorf("appender %d: AppendBlobUpload from %d: %v", i, offset, err)
				}
			})
		}
		wg.Wait()
		if len(wins) != 1 {
			t.Fatalf("appenders %v of %d appended the part from %d, want exactly one", wins, appenders, offset)
		}
		return wins
	}

	winner := race(0)[0]
	b.wantUpload(t, "after the race", store.BlobUpload{ID: "upload-1", Principal: "alice", Digest: repo.Digest(content),
		Size: 12, PartBytes: 4, Received: 4, HashState: fmt.Appendf(nil, "appender %d", winner), CreatedAt: epoch})
	u = b.appendPart(t, part(u, content, 4))
	race(8)
	b.wantBlob(t, "after the races", content)
}

func testReadBlobErrors(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	calls := 0
	err := b.rs.ReadBlob(b.ctx, repo.Digest([]byte("never stored")), 0, func([]byte) error {
		calls++
		return nil
	})
	wantErr(t, "ReadBlob of a blob never stored", err, store.ErrNotFound)
	if calls != 0 {
		t.Fatalf("ReadBlob of a blob never stored called fn %d times", calls)
	}

	inParts := []byte("0123456789ab")
	b.upload(t, "upload-1", "alice", inParts, 4)
	whole := blobOf("stored whole")
	if err := b.rs.PutBlobs(b.ctx, []store.Blob{whole}); err != nil {
		t.Fatalf("PutBlobs: %v", err)
	}
	errStop := errors.New("the client went away")
	for _, c := range []struct {
		what   string
		digest string
		stopAt int
	}{
		{"a blob stored in parts", repo.Digest(inParts), 2},
		{"a blob stored whole", whole.Digest, 1},
	} {
		calls := 0
		err := b.rs.ReadBlob(b.ctx, c.digest, 0, func([]byte) error {
			if calls++; calls == c.stopAt {
				return errStop
			}
			return nil
		})
		if !errors.Is(err, errStop) || calls != c.stopAt {
			t.Fatalf("ReadBlob of %s whose fn fails on piece %d = %v after %d calls; want fn's error, at once",
				c.what, c.stopAt, err, calls)
		}
	}
}

// LeaveBlobParts sends blobs in parts to st, whose clock is clk: uploads that complete, that
// complete a blob already stored (whole, or in parts by another upload), that are dropped by
// age or by id, and that start again after completing, and one left under way. It answers how
// many parts the store must hold afterwards: those of the one blob stored in parts and the one
// part of the upload under way. A backend's test counts what it keeps, which the store's
// interface cannot see: parts that nothing reads would hold their storage for good.
func LeaveBlobParts(t *testing.T, st store.Store, clk *clock.Fake) int {
	t.Helper()
	b := &rbundle{bundle: &bundle{ctx: t.Context(), st: st, clk: clk}, rs: st}
	content := []byte("a blob sent in parts of 4 bytes") // 8 parts
	b.upload(t, "first", "alice", content, 4)
	b.upload(t, "second", "bob", content, 5)
	whole := blobOf("a blob stored whole, then sent in parts")
	if err := b.rs.PutBlobs(b.ctx, []store.Blob{whole}); err != nil {
		t.Fatalf("PutBlobs: %v", err)
	}
	b.upload(t, "whole", "alice", whole.Content, 4)

	old := []byte("an upload left half way")
	b.appendPart(t, part(b.startUpload(t, newUpload("old", "alice", old, 4)), old, 0))
	again := b.startUpload(t, newUpload("first", "alice", content, 4))
	b.appendPart(t, part(again, content, 0))
	clk.Advance(time.Hour)
	named := []byte("an upload dropped by its id")
	b.appendPart(t, part(b.startUpload(t, newUpload("named", "bob", named, 4)), named, 0))
	for _, drop := range []struct {
		before time.Time
		id     string
	}{{clk.Now().Add(-time.Minute), ""}, {time.Time{}, "named"}} {
		if _, err := b.rs.DropBlobUploads(b.ctx, drop.before, drop.id); err != nil {
			t.Fatalf("DropBlobUploads(%s, %q): %v", drop.before, drop.id, err)
		}
	}

	open := []byte("an upload under way")
	b.appendPart(t, part(b.startUpload(t, newUpload("open", "carol", open, 4)), open, 0))
	b.wantBlob(t, "after the uploads", content)
	b.wantBlob(t, "after the uploads", whole.Content)
	return (len(content)+3)/4 + 1
}
