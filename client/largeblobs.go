package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// LargeBlobBytes is the size from which a blob is sent in parts (UploadBlob) and read back as
// a stream (ReadBlob) rather than in one message: a file of any size then costs the server a
// part of memory, not the file, and files larger than one request are not refused.
const LargeBlobBytes = 4 << 20

// UploadBlob sends the blob of digest, size bytes read from r, in the parts the server asks
// for (StartBlobUpload, UploadBlobPart). It sends nothing the server holds: a blob it has, or
// the parts of an upload that stopped part-way, which goes on where it stopped.
func (c *Client) UploadBlob(ctx context.Context, r io.ReaderAt, size int64, digest string) error {
	start, err := c.Repos.StartBlobUpload(ctx, &agwpv1.StartBlobUploadRequest{Digest: digest, Size: uint64(size)})
	if err != nil {
		return fmt.Errorf("upload %s: %w", digest, err)
	}
	if start.GetStored() {
		return nil
	}
	if size == 0 {
		// No part has any byte to send: an empty blob goes whole.
		res, err := c.Repos.UploadBlobs(ctx, &agwpv1.UploadBlobsRequest{Blobs: [][]byte{{}}})
		if err == nil && (len(res.GetDigests()) != 1 || res.GetDigests()[0] != digest) {
			err = fmt.Errorf("the server stored the empty blob as %v, not %s", res.GetDigests(), digest)
		}
		if err != nil {
			return fmt.Errorf("upload %s: %w", digest, err)
		}
		return nil
	}
	partBytes := start.GetPartBytes()
	if partBytes == 0 {
		return fmt.Errorf("upload %s: the server named no part size", digest)
	}
	buf := make([]byte, min(uint64(size), partBytes))
	for offset := start.GetReceived(); offset < uint64(size); {
		part := buf[:min(uint64(size)-offset, partBytes)]
		if _, err := r.ReadAt(part, int64(offset)); err != nil && err != io.EOF {
			return fmt.Errorf("upload %s: read from %d: %w", digest, offset, err)
		}
		res, err := c.Repos.UploadBlobPart(ctx, &agwpv1.UploadBlobPartRequest{
			UploadId: start.GetUploadId(), Offset: offset, Content: part,
		})
		if err != nil {
			return fmt.Errorf("upload %s from %d: %w", digest, offset, err)
		}
		if res.GetReceived() <= offset {
			return fmt.Errorf("upload %s: the server holds %d bytes after a part from %d", digest, res.GetReceived(), offset)
		}
		offset = res.GetReceived()
	}
	return nil
}

// ReadBlob writes the content of digest to w as the server streams it, never holding it
// whole, and answers its size. The content is checked against digest at its end: on a
// mismatch (or any error) what was written to w is not the blob and is the caller's to drop.
func (c *Client) ReadBlob(ctx context.Context, digest string, w io.Writer) (int64, error) {
	stream, err := c.Repos.ReadBlob(ctx, &agwpv1.ReadBlobRequest{Digest: digest})
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	h := sha256.New()
	out := io.MultiWriter(w, h)
	var n int64
	var size uint64
	for first := true; stream.Receive(); first = false {
		msg := stream.Msg()
		if first {
			size = msg.GetSize()
		}
		m, err := out.Write(msg.GetContent())
		n += int64(m)
		if err != nil {
			return n, fmt.Errorf("blob %s: %w", digest, err)
		}
	}
	if err := stream.Err(); err != nil {
		return n, fmt.Errorf("blob %s: %w", digest, err)
	}
	if uint64(n) != size {
		return n, fmt.Errorf("blob %s: the server sent %d of its %d bytes", digest, n, size)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
		return n, fmt.Errorf("blob %s: the server answered content whose digest is %s", digest, got)
	}
	return n, nil
}

// ReadBlobBytes answers the content of digest read with ReadBlob, sized (when known, > 0) so
// that it is held once.
func (c *Client) ReadBlobBytes(ctx context.Context, digest string, size int64) ([]byte, error) {
	var buf bytes.Buffer
	if size > 0 {
		buf.Grow(int(size))
	}
	if _, err := c.ReadBlob(ctx, digest, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
