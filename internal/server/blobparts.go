package server

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"regexp"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/go-git/go-git/v5/plumbing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/store"
)

// A blob too large for one request, or one a client would rather not hold whole, is sent in
// parts (ADR-0027): StartBlobUpload names it by digest and size, UploadBlobPart appends parts
// of a fixed size, and the part that completes it stores it once its digest is checked. The
// store keeps the parts as the blob, and ReadBlob answers it part by part, so no step holds a
// large blob whole.

const (
	// DefaultBlobPartBytes is the size of an upload's parts: small enough that a part is a
	// constant of the server's memory, large enough that a 1 GiB file is 256 requests.
	DefaultBlobPartBytes = 4 << 20
	// DefaultMaxBlobBytes bounds one blob sent in parts.
	DefaultMaxBlobBytes = 4 << 30
	// blobUploadTTL is how long an upload may stay unfinished before it is dropped.
	blobUploadTTL = 24 * time.Hour
	// readBlobMessageBytes bounds one ReadBlob message.
	readBlobMessageBytes = 1 << 20
)

// uploadIDPattern is the wire form of an upload: the blob's digest (hex) and size. The store
// keys it with the caller's principal too (blobUploadKey), so an upload is its principal's.
var uploadIDPattern = regexp.MustCompile(`^([0-9a-f]{64})-([0-9]{1,20})$`)

func wireUploadID(digest string, size uint64) string {
	return strings.TrimPrefix(digest, "sha256:") + "-" + strconv.FormatUint(size, 10)
}

// blobUploadKey answers the store's id of principal's upload of digest and size.
func blobUploadKey(principal, digest string, size uint64) string {
	sum := sha256.Sum256([]byte(principal + "\x00" + wireUploadID(digest, size)))
	return "bu_" + hex.EncodeToString(sum[:20])
}

// partHashes are the running hashes of an upload: its sha256, and git's blob id, which hashes
// "blob <size>\x00" before the content.
type partHashes struct {
	sha256 hash.Hash
	git    hash.Hash
}

func newPartHashes(size uint64) partHashes {
	h := partHashes{sha256: sha256.New(), git: sha1.New()}
	fmt.Fprintf(h.git, "blob %d\x00", size)
	return h
}

// encode answers the hashes' state: each state's length (4 bytes) and bytes.
func (h partHashes) encode() ([]byte, error) {
	var out []byte
	for _, x := range []hash.Hash{h.sha256, h.git} {
		state, err := x.(encoding.BinaryMarshaler).MarshalBinary()
		if err != nil {
			return nil, err
		}
		out = binary.BigEndian.AppendUint32(out, uint32(len(state)))
		out = append(out, state...)
	}
	return out, nil
}

func decodePartHashes(b []byte) (partHashes, error) {
	h := partHashes{sha256: sha256.New(), git: sha1.New()}
	for _, x := range []hash.Hash{h.sha256, h.git} {
		if len(b) < 4 || uint64(len(b)-4) < uint64(binary.BigEndian.Uint32(b)) {
			return partHashes{}, errors.New("the upload's hash state is cut short")
		}
		n := binary.BigEndian.Uint32(b)
		if err := x.(encoding.BinaryUnmarshaler).UnmarshalBinary(b[4 : 4+n]); err != nil {
			return partHashes{}, err
		}
		b = b[4+n:]
	}
	return h, nil
}

func (h partHashes) write(p []byte) {
	h.sha256.Write(p)
	h.git.Write(p)
}

func (h repoService) StartBlobUpload(ctx context.Context, req *agwpv1.StartBlobUploadRequest) (*agwpv1.StartBlobUploadResponse, error) {
	if !digestPattern.MatchString(req.GetDigest()) {
		return nil, invalid("digest", "%q is not a digest: use sha256:<64 lowercase hex>", truncate(req.GetDigest(), 80))
	}
	if req.GetSize() > h.s.maxBlobBytes {
		return nil, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("size: %d bytes, more than the %d this server takes in one blob", req.GetSize(), h.s.maxBlobBytes))
	}
	sizes, err := h.s.store.BlobSizes(ctx, []string{req.GetDigest()})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out := &agwpv1.StartBlobUploadResponse{UploadId: wireUploadID(req.GetDigest(), req.GetSize()), PartBytes: h.s.blobPartBytes}
	if size, ok := sizes[req.GetDigest()]; ok {
		if size != req.GetSize() {
			return nil, invalid("size", "%d, but the server holds %s with %d bytes", req.GetSize(), req.GetDigest(), size)
		}
		out.Stored, out.Received = true, size
		return out, nil
	}
	u, err := h.upload(ctx, req.GetDigest(), req.GetSize())
	if err != nil {
		return nil, err
	}
	out.Received, out.PartBytes = u.Received, u.PartBytes
	return out, nil
}

// upload answers the caller's upload of digest and size, started now if it was not.
func (h repoService) upload(ctx context.Context, digest string, size uint64) (store.BlobUpload, error) {
	state, err := newPartHashes(size).encode()
	if err != nil {
		return store.BlobUpload{}, connect.NewError(connect.CodeInternal, err)
	}
	principal := callerFrom(ctx).principal.Name
	u, err := h.s.store.StartBlobUpload(ctx, store.BlobUpload{
		ID: blobUploadKey(principal, digest, size), Principal: principal, Digest: digest, Size: size,
		PartBytes: h.s.blobPartBytes, HashState: state,
	})
	if err != nil {
		return store.BlobUpload{}, storeError(err, connect.CodeInternal)
	}
	return u, nil
}

func (h repoService) UploadBlobPart(ctx context.Context, req *agwpv1.UploadBlobPartRequest) (*agwpv1.UploadBlobPartResponse, error) {
	m := uploadIDPattern.FindStringSubmatch(req.GetUploadId())
	if m == nil {
		return nil, invalid("upload_id", "%q is not an upload: use the upload_id StartBlobUpload answered", truncate(req.GetUploadId(), 80))
	}
	digest := "sha256:" + m[1]
	size, err := strconv.ParseUint(m[2], 10, 64)
	if err != nil || size > h.s.maxBlobBytes {
		return nil, invalid("upload_id", "%q is not an upload: use the upload_id StartBlobUpload answered", truncate(req.GetUploadId(), 80))
	}
	// A part that completed the blob may come again when its answer was lost: the blob is
	// stored, and no upload is started again.
	sizes, err := h.s.store.BlobSizes(ctx, []string{digest})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	if held, ok := sizes[digest]; ok && held == size {
		return &agwpv1.UploadBlobPartResponse{Received: size, Digest: digest}, nil
	}
	// Read, not started: a part goes only to an upload its principal started.
	u, err := h.s.store.GetBlobUpload(ctx, blobUploadKey(callerFrom(ctx).principal.Name, digest, size))
	if errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("upload_id: you have no upload of %s (%d bytes) under way: start it with StartBlobUpload and send the part from the offset it answers", digest, size))
	}
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	content, offset := req.GetContent(), req.GetOffset()
	end := offset + uint64(len(content))
	switch {
	case offset != u.Received:
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("offset: %d, but the server holds %d bytes of this upload: send the part from %d", offset, u.Received, u.Received))
	case end > u.Size:
		return nil, invalid("content", "%d bytes from %d end past the blob's %d bytes", len(content), offset, u.Size)
	case end < u.Size && uint64(len(content)) != u.PartBytes:
		return nil, invalid("content", "%d bytes: every part but the last has %d", len(content), u.PartBytes)
	case len(content) == 0 && u.Size > 0:
		return nil, invalid("content", "empty: send the part from %d", offset)
	}
	hashes, err := decodePartHashes(u.HashState)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("upload %s: %w", u.ID, err))
	}
	hashes.write(content)
	state, err := hashes.encode()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	p := store.AppendBlobUploadParams{ID: u.ID, Offset: offset, Content: content, HashState: state}
	if end == u.Size {
		got := "sha256:" + hex.EncodeToString(hashes.sha256.Sum(nil))
		if got != digest {
			if _, err := h.s.store.DropBlobUploads(ctx, time.Time{}, u.ID); err != nil {
				return nil, storeError(err, connect.CodeInternal)
			}
			return nil, invalid("content", "the parts make %s, not the %s the upload named: the upload is dropped, start it again", got, digest)
		}
		var gitID plumbing.Hash
		copy(gitID[:], hashes.git.Sum(nil))
		p.Complete = &store.CompletedBlob{Digest: digest, GitID: gitID}
	}
	after, err := h.s.store.AppendBlobUpload(ctx, p)
	if errors.Is(err, store.ErrFailedPrecondition) {
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("offset: %d: another part from %d arrived first: start the upload again to learn where it stands", offset, offset))
	}
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out := &agwpv1.UploadBlobPartResponse{Received: after.Received}
	if p.Complete != nil {
		out.Digest = digest
	}
	return out, nil
}

func (h repoService) ReadBlob(ctx context.Context, req *agwpv1.ReadBlobRequest, stream *connect.ServerStream[agwpv1.ReadBlobResponse]) error {
	digest := req.GetDigest()
	if !digestPattern.MatchString(digest) {
		return invalid("digest", "%q is not a digest: use sha256:<64 lowercase hex>", truncate(digest, 80))
	}
	if c := callerFrom(ctx); c.principal.Role == store.RoleWorker {
		if err := h.s.workerReads.mayReadBlob(ctx, c.principal.Name, digest); err != nil {
			return err
		}
	}
	sizes, err := h.s.store.BlobSizes(ctx, []string{digest})
	if err != nil {
		return storeError(err, connect.CodeInternal)
	}
	size, ok := sizes[digest]
	if !ok {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("blob %s: not found", digest))
	}
	if req.GetOffset() > size {
		return connect.NewError(connect.CodeOutOfRange, fmt.Errorf("offset: %d, past the blob's %d bytes", req.GetOffset(), size))
	}
	if size == req.GetOffset() {
		return stream.Send(&agwpv1.ReadBlobResponse{Size: size})
	}
	first := true
	err = h.s.store.ReadBlob(ctx, digest, req.GetOffset(), func(piece []byte) error {
		for len(piece) > 0 {
			msg := &agwpv1.ReadBlobResponse{Content: piece[:min(len(piece), readBlobMessageBytes)]}
			if first {
				msg.Size, first = size, false
			}
			if err := stream.Send(msg); err != nil {
				return err
			}
			piece = piece[len(msg.Content):]
		}
		return nil
	})
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return err
		}
		return storeError(err, connect.CodeInternal)
	}
	return nil
}

// dropStaleBlobUploads drops the uploads that were not finished within blobUploadTTL.
func (s *Server) dropStaleBlobUploads(ctx context.Context, now time.Time) {
	n, err := s.store.DropBlobUploads(ctx, now.Add(-blobUploadTTL), "")
	if err != nil && ctx.Err() == nil {
		s.log.Warn("drop unfinished blob uploads", "err", err)
	} else if n > 0 {
		s.log.Info("dropped unfinished blob uploads", "uploads", n)
	}
}

// compactBatch is how many rows one transaction of compactStored rewrites.
const compactBatch = 500

// compactStored rewrites the contents a build before compressed contents stored whole, a batch
// at a time, until none is left (docs/storage.md): the store's migration in place. A server
// stopped meanwhile goes on where it stopped when it starts again.
func (s *Server) compactStored(ctx context.Context) {
	total, reported := 0, time.Now()
	for {
		n, err := s.store.CompactStored(ctx, compactBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("compress stored contents: stopped; the next start goes on", "rows", total, "err", err)
			}
			return
		}
		total += n
		if n == 0 {
			if total > 0 {
				s.log.Info("compressed the contents stored before", "rows", total)
			}
			return
		}
		if time.Since(reported) >= 10*time.Second {
			reported = time.Now()
			s.log.Info("compressing the contents stored before", "rows", total)
		}
	}
}
