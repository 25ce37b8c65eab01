package gitstore

import (
	"bufio"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// plainPackObjects is the size of a fetch from which the pack is sent without deltas, each
// object compressed at zlib's fastest level: a first clone of a large repository, where
// go-git's encoder spends most of its time resetting a default-level compressor for every
// small object (measured at 100,000 files: docs/benchmarks.md) and its delta search finds
// little between files that are not versions of each other. Smaller fetches, which carry the
// new versions of a few files, keep go-git's encoder and its deltas. A variable for tests.
var plainPackObjects = 10000

// writePack writes the objects ids of s as a pack: with deltas (window packWindow) by go-git's
// encoder, or, from plainPackObjects objects on, without.
func writePack(w io.Writer, s storer.EncodedObjectStorer, ids []plumbing.Hash) error {
	if large, ok := s.(LargeObjectStorer); ok {
		n, err := large.LargeObjects(ids)
		if err != nil {
			return err
		}
		if n > 0 {
			return writePlainPack(w, s, ids)
		}
	}
	if len(ids) < plainPackObjects {
		_, err := packfile.NewEncoder(w, s, false).Encode(ids, packWindow)
		return err
	}
	return writePlainPack(w, s, ids)
}

// LargeObjectStorer is an object storer that holds objects too large to read whole: it
// answers how many of ids are such, and streams each from its Reader. A pack that carries one
// is written of whole objects, each streamed through the compressor, since go-git's encoder
// reads every object whole to search for deltas (and holds a delta index of each).
type LargeObjectStorer interface {
	LargeObjects(ids []plumbing.Hash) (int, error)
}

// Prefetcher is an object storer that can read many objects ahead of their use, in few
// requests: writePlainPack asks it for each batch of objects before it writes them.
type Prefetcher interface {
	Prefetch(ids []plumbing.Hash)
}

// prefetchBatch is how many objects writePlainPack asks a Prefetcher for at once.
const prefetchBatch = 256

// writePlainPack writes a version 2 pack of whole objects: "PACK", the version and the count,
// then per object its type and size header and its zlib-compressed content, then the SHA-1 of
// everything before (git's pack format, Documentation/gitformat-pack.txt).
func writePlainPack(w io.Writer, s storer.EncodedObjectStorer, ids []plumbing.Hash) error {
	h := sha1.New()
	w = chunked{w}
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 32<<10)
	var head [12]byte
	copy(head[:4], "PACK")
	binary.BigEndian.PutUint32(head[4:8], 2)
	binary.BigEndian.PutUint32(head[8:12], uint32(len(ids)))
	if _, err := bw.Write(head[:]); err != nil {
		return err
	}
	zw, err := zlib.NewWriterLevel(bw, zlib.BestSpeed)
	if err != nil {
		return err
	}
	prefetcher, _ := s.(Prefetcher)
	for i, id := range ids {
		if prefetcher != nil && i%prefetchBatch == 0 {
			prefetcher.Prefetch(ids[i:min(len(ids), i+prefetchBatch)])
		}
		o, err := s.EncodedObject(plumbing.AnyObject, id)
		if err != nil {
			return fmt.Errorf("object %s: %w", id, err)
		}
		if _, err := bw.Write(objectHeader(o.Type(), o.Size())); err != nil {
			return err
		}
		r, err := o.Reader()
		if err != nil {
			return fmt.Errorf("object %s: %w", id, err)
		}
		zw.Reset(bw)
		_, err = io.Copy(zw, r)
		r.Close()
		if err != nil {
			return fmt.Errorf("object %s: %w", id, err)
		}
		if err := zw.Close(); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err = w.Write(h.Sum(nil))
	return err
}

// chunked passes writes on in pieces of at most 32 KiB: a side-band packet holds less than
// 64 KiB, and go-git's muxer refuses a larger write rather than splitting it.
type chunked struct{ w io.Writer }

func (c chunked) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		m, err := c.w.Write(p[:min(len(p), 32<<10)])
		n += m
		if err != nil {
			return n, err
		}
		p = p[m:]
	}
	return n, nil
}

// objectHeader is a pack entry's header: the type in bits 4-6 of the first byte, the size in
// its low 4 bits and then 7 bits a byte, each byte but the last with its high bit set.
func objectHeader(t plumbing.ObjectType, size int64) []byte {
	b := []byte{byte(t)<<4 | byte(size&0x0f)}
	size >>= 4
	for size > 0 {
		b[len(b)-1] |= 0x80
		b = append(b, byte(size&0x7f))
		size >>= 7
	}
	return b
}
