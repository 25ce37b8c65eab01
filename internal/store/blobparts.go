package store

import (
	"errors"
	"fmt"
)

// CheckBlobUpload refuses an upload no part could be appended to, before a backend stores it.
func CheckBlobUpload(u BlobUpload) error {
	switch {
	case u.ID == "":
		return errors.New("blob upload without an id")
	case u.PartBytes == 0:
		// The parts' sequence numbers are offsets divided by it.
		return fmt.Errorf("blob upload %s: parts of 0 bytes", u.ID)
	}
	return nil
}

// CheckBlobPart answers why p cannot be the next part of u, as u is stored, or nil. Every
// refusal is ErrFailedPrecondition. A part must start where u's received bytes end, so that a
// part sent twice or out of order is refused; be PartBytes long unless it is the last, so that
// part seq holds the bytes from seq×PartBytes on; end within the blob; and complete the upload
// exactly when it is the last, so that no upload stays with every byte received and no blob.
func CheckBlobPart(u BlobUpload, p AppendBlobUploadParams) error {
	refuse := func(format string, a ...any) error {
		return fmt.Errorf("blob upload %s: %s: %w", u.ID, fmt.Sprintf(format, a...), ErrFailedPrecondition)
	}
	n := uint64(len(p.Content))
	switch {
	case p.Offset != u.Received:
		return refuse("a part from offset %d, but %d bytes were received: send the part from offset %d",
			p.Offset, u.Received, u.Received)
	case n > u.Size-p.Offset:
		return refuse("a part of %d bytes from offset %d ends past the blob's %d bytes", n, p.Offset, u.Size)
	case p.Offset+n < u.Size && n != u.PartBytes:
		return refuse("a part of %d bytes from offset %d, but every part but the last is %d bytes: send the part from offset %d",
			n, p.Offset, u.PartBytes, u.Received)
	case p.Offset+n < u.Size && p.Complete != nil:
		return refuse("the part from offset %d ends at %d, before the blob's end at %d: only the last part completes the upload",
			p.Offset, p.Offset+n, u.Size)
	case p.Offset+n == u.Size && p.Complete == nil:
		return refuse("the part from offset %d is the last and must complete the upload", p.Offset)
	case p.Complete != nil && p.Complete.Digest != u.Digest:
		return refuse("the upload is of %s, not of %s", u.Digest, p.Complete.Digest)
	}
	return nil
}

// ReadBlobParts calls fn with the content of a blob of size bytes stored in parts of partBytes
// from offset on, a piece per part (the first cut at offset), reading part seq with read. Only
// one part is held at a time. A part whose length is not what its place says is an error: the
// blob would be answered wrong.
func ReadBlobParts(size, partBytes, offset uint64, read func(seq uint64) ([]byte, error), fn func(piece []byte) error) error {
	if offset >= size {
		return nil
	}
	for seq := offset / partBytes; seq*partBytes < size; seq++ {
		part, err := read(seq)
		if err != nil {
			return err
		}
		start := seq * partBytes
		if want := min(partBytes, size-start); uint64(len(part)) != want {
			return fmt.Errorf("part %d of a blob of %d bytes holds %d bytes, want %d", seq, size, len(part), want)
		}
		if offset > start {
			part = part[offset-start:]
		}
		if err := fn(part); err != nil {
			return err
		}
	}
	return nil
}
