package gitstore

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
	gitbinary "github.com/go-git/go-git/v5/utils/binary"
	"github.com/klauspost/compress/zlib"
	"golang.org/x/sync/errgroup"
)

// plainPackObjects is the size of a fetch from which the pack is sent without deltas, each
// object compressed at zlib's fastest level: a first clone of a large repository, where
// go-git's encoder spends most of its time resetting a default-level compressor for every
// small object (measured at 100,000 files: docs/benchmarks.md) and its delta search finds
// little between files that are not versions of each other. Smaller fetches, which carry the
// new versions of a few files, keep go-git's encoder and its deltas. A variable for tests.
var plainPackObjects = 10000

// writePack writes the objects ids of s as a pack: with deltas (window packWindow) by go-git's
// encoder, or, from plainPackObjects objects on, by writePlainPack with the deltas bases
// proposes (an object's newer version at the same path: see objectsToSend).
func writePack(w io.Writer, s storer.EncodedObjectStorer, ids []plumbing.Hash, bases map[plumbing.Hash]plumbing.Hash) error {
	if large, ok := s.(LargeObjectStorer); ok {
		n, err := large.LargeObjects(ids)
		if err != nil {
			return err
		}
		if n > 0 {
			return writePlainPack(w, s, ids, bases)
		}
	}
	if len(ids) < plainPackObjects {
		_, err := packfile.NewEncoder(w, s, false).Encode(ids, packWindow)
		return err
	}
	return writePlainPack(w, s, ids, bases)
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

// DeltaStorer is an object storer that keeps some objects as git's deltas against others
// (ADR-0037): it answers, of ids, those it keeps so. writePlainPack writes such an object's
// delta as it is kept when its base is in the pack, never reading the object whole.
type DeltaStorer interface {
	StoredDeltas(ids []plumbing.Hash) (map[plumbing.Hash]StoredDelta, error)
}

// StoredDelta is an object kept as git's delta: its base, the delta's length, and the delta as
// a zlib stream, as a pack entry holds it.
type StoredDelta struct {
	Base     plumbing.Hash
	Size     int
	Deflated []byte
}

// prefetchBatch is how many objects writePlainPack asks a Prefetcher for at once.
const prefetchBatch = 256

// writePlainPack writes a version 2 pack: "PACK", the version and the count, then per object
// its type and size header and its zlib-compressed content, or, for an object of bases whose
// base was written before it (and is at most maxDeltaDepth deltas deep), an OFS_DELTA entry
// against it when that is smaller, then the SHA-1 of everything before (git's pack format,
// Documentation/gitformat-pack.txt).
//
// Compressing is most of the work of a large clone's pack (profiled on a real history of
// 91,000 objects), so the objects of a batch up to parallelObjectBytes are read, deltified and
// compressed at once on every CPU, and written in their order; a larger one is streamed through
// the compressor, never held whole, and never deltified.
func writePlainPack(w io.Writer, s storer.EncodedObjectStorer, ids []plumbing.Hash, bases map[plumbing.Hash]plumbing.Hash) error {
	return writePackWith(w, s, nil, ids, bases, nil)
}

// writePackWith is writePlainPack with two more sources of what is sent:
//   - after, when not nil: a cached pack whose entries the pack begins with, its header
//     counting both. An object of ids whose proposed base is in after is written whole.
//   - thin, for a thin pack: an object of thin that no base of the pack serves is sent as a
//     REF_DELTA against the object thin names, which the client holds and the pack does not
//     (git's index-pack --fix-thin completes the pack with it).
func writePackWith(w io.Writer, s storer.EncodedObjectStorer, after *cachedPack, ids []plumbing.Hash, bases, thin map[plumbing.Hash]plumbing.Hash) error {
	h := sha1.New()
	w = chunked{w}
	cw := &countingWriter{w: io.MultiWriter(w, h)}
	bw := bufio.NewWriterSize(cw, 32<<10)
	count := uint32(len(ids))
	if after != nil {
		count += after.meta.Objects
	}
	var head [12]byte
	copy(head[:4], "PACK")
	binary.BigEndian.PutUint32(head[4:8], 2)
	binary.BigEndian.PutUint32(head[8:12], count)
	if _, err := bw.Write(head[:]); err != nil {
		return err
	}
	if after != nil {
		if err := after.copyEntries(bw); err != nil {
			return err
		}
	}
	p := &packWriter{bw: bw, cw: cw, bases: bases, thin: thin, recent: newContentCache(deltaCacheBytes)}
	deltaStorer, _ := s.(DeltaStorer)
	var inPack map[plumbing.Hash]bool
	if deltaStorer != nil {
		inPack = make(map[plumbing.Hash]bool, len(ids))
		for _, id := range ids {
			inPack[id] = true
		}
	}
	if len(bases) > 0 || inPack != nil {
		p.written = make(map[plumbing.Hash]packedAt, len(ids))
	}
	p.kept = map[plumbing.Hash]bool{}
	prefetcher, _ := s.(Prefetcher)
	objs := make([]plumbing.EncodedObject, 0, prefetchBatch)
	entries := make([]packEntry, prefetchBatch)
	for start := 0; start < len(ids); start += prefetchBatch {
		batch := ids[start:min(len(ids), start+prefetchBatch)]
		// An object kept as a delta against another of the pack goes as it is kept.
		var kept map[plumbing.Hash]StoredDelta
		if deltaStorer != nil {
			var err error
			if kept, err = deltaStorer.StoredDeltas(batch); err != nil {
				return err
			}
			for id, d := range kept {
				if !inPack[d.Base] {
					delete(kept, id)
					continue
				}
				p.kept[id] = true
			}
		}
		read := batch
		if len(kept) > 0 {
			read = make([]plumbing.Hash, 0, len(batch))
			for _, id := range batch {
				if _, ok := kept[id]; !ok {
					read = append(read, id)
				}
			}
		}
		if prefetcher != nil {
			prefetcher.Prefetch(read)
		}
		objs = objs[:0]
		for _, id := range read {
			o, err := s.EncodedObject(plumbing.AnyObject, id)
			if err != nil {
				return fmt.Errorf("object %s: %w", id, err)
			}
			objs = append(objs, o)
		}
		if err := p.prepare(s, objs, entries[:len(objs)]); err != nil {
			return err
		}
		next := 0
		for _, id := range batch {
			if d, ok := kept[id]; ok {
				if err := p.writeKept(id, d); err != nil {
					return err
				}
				continue
			}
			if err := p.write(objs[next], &entries[next]); err != nil {
				return err
			}
			next++
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(h.Sum(nil))
	return err
}

// maxDeltaDepth bounds a delta chain, as git's pack.depth does: reading an object of the pack
// applies at most this many deltas.
const maxDeltaDepth = 50

// deltaCacheBytes is how much of the objects last written writePlainPack keeps to deltify
// against: an object's base is its newer version, written a commit or so before it.
const deltaCacheBytes = 64 << 20

// packWriter is writePlainPack's state between batches.
type packWriter struct {
	bw      *bufio.Writer
	cw      *countingWriter
	bases   map[plumbing.Hash]plumbing.Hash
	thin    map[plumbing.Hash]plumbing.Hash // objects the client holds, as REF_DELTA bases (writePackWith)
	written map[plumbing.Hash]packedAt      // with bases: where each object went, and its depth
	// kept: objects sent as the deltas the store keeps, whose bases may come after them. No
	// delta the writer makes is against one (deltaOf), so no two deltas are each other's bases.
	kept   map[plumbing.Hash]bool
	recent *contentCache
}

type packedAt struct {
	offset int64
	depth  int
}

// packEntry is an object of a batch, prepared: its content compressed, or a delta against
// base compressed, or neither (a large object, streamed when written).
type packEntry struct {
	whole   []byte // the compressed content, when it has no delta
	base    plumbing.Hash
	delta   []byte // the compressed delta against base
	refBase bool   // base is the client's: the delta goes as a REF_DELTA, whatever was written
	size    int    // the delta's size, uncompressed
	content []byte // with a delta: the content, compressed only if the delta cannot be written
}

// prepare reads the small objects of a batch, keeps them for later deltas, and compresses each,
// and its delta against its base when that base is at hand, on every CPU.
func (p *packWriter) prepare(s storer.EncodedObjectStorer, objs []plumbing.EncodedObject, entries []packEntry) error {
	contents := make([][]byte, len(objs))
	for i, o := range objs {
		entries[i] = packEntry{}
		if o.Size() > parallelObjectBytes {
			continue
		}
		b, err := readContent(o)
		if err != nil {
			return err
		}
		contents[i] = b
	}
	// Kept before the workers run, so that an object deltifies against its base in the same batch.
	for i, o := range objs {
		if contents[i] != nil && p.bases != nil {
			p.recent.add(o.Hash(), contents[i])
		}
	}
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, o := range objs {
		if contents[i] == nil {
			continue
		}
		g.Go(func() error {
			e := &entries[i]
			var err error
			if d, base := p.deltaOf(s, o, contents[i]); d != nil {
				if e.delta, err = Deflate(d); err != nil {
					return fmt.Errorf("object %s: %w", o.Hash(), err)
				}
				// The whole object is compressed only if the delta cannot be written after all.
				e.base, e.size, e.content = base, len(d), contents[i]
				return nil
			}
			if d, base := p.thinDeltaOf(s, o, contents[i]); d != nil {
				if e.delta, err = Deflate(d); err != nil {
					return fmt.Errorf("object %s: %w", o.Hash(), err)
				}
				e.base, e.size, e.refBase = base, len(d), true
				return nil
			}
			if e.whole, err = Deflate(contents[i]); err != nil {
				return fmt.Errorf("object %s: %w", o.Hash(), err)
			}
			return nil
		})
	}
	return g.Wait()
}

// deltaOf answers the delta of content, o's, against its proposed base, and the base, or nil
// when it has none at hand or the delta is not worth it.
func (p *packWriter) deltaOf(s storer.EncodedObjectStorer, o plumbing.EncodedObject, content []byte) ([]byte, plumbing.Hash) {
	base, ok := p.bases[o.Hash()]
	if !ok || p.kept[base] {
		return nil, plumbing.ZeroHash
	}
	src, ok := p.recent.get(base)
	if !ok {
		if src, ok = readBase(s, base, o.Type()); !ok {
			return nil, plumbing.ZeroHash
		}
	}
	d := packfile.DiffDelta(src, content)
	if len(d) >= len(content)/2 {
		return nil, plumbing.ZeroHash // not worth a delta: the whole object reads faster
	}
	return d, base
}

// thinDeltaOf answers the delta of content, o's, against the version of it the client holds
// (thin), and that version, or nil when there is none or the delta is not worth it.
func (p *packWriter) thinDeltaOf(s storer.EncodedObjectStorer, o plumbing.EncodedObject, content []byte) ([]byte, plumbing.Hash) {
	base, ok := p.thin[o.Hash()]
	if !ok {
		return nil, plumbing.ZeroHash
	}
	src, ok := readBase(s, base, o.Type())
	if !ok {
		return nil, plumbing.ZeroHash
	}
	d := packfile.DiffDelta(src, content)
	if len(d) >= len(content)/2 {
		return nil, plumbing.ZeroHash
	}
	return d, base
}

// readBase reads a base evicted from the cache, if it is an object of type t that fits.
func readBase(s storer.EncodedObjectStorer, id plumbing.Hash, t plumbing.ObjectType) ([]byte, bool) {
	o, err := s.EncodedObject(t, id)
	if err != nil || o.Size() > parallelObjectBytes {
		return nil, false
	}
	b, err := readContent(o)
	return b, err == nil
}

// write writes o's entry: its delta when its base was written, not too deep, before it; else the
// whole object.
func (p *packWriter) write(o plumbing.EncodedObject, e *packEntry) error {
	offset := p.cw.n + int64(p.bw.Buffered())
	depth := 0
	if e.refBase {
		// Against the client's object: outside the pack, so no chain in it to bound.
		if _, err := p.bw.Write(objectHeader(plumbing.REFDeltaObject, int64(e.size))); err != nil {
			return err
		}
		if _, err := p.bw.Write(e.base[:]); err != nil {
			return err
		}
		if _, err := p.bw.Write(e.delta); err != nil {
			return err
		}
		if p.written != nil {
			p.written[o.Hash()] = packedAt{offset: offset, depth: 1}
		}
		return nil
	}
	if e.delta != nil {
		if at, ok := p.written[e.base]; ok && at.depth < maxDeltaDepth {
			depth = at.depth + 1
			if _, err := p.bw.Write(objectHeader(plumbing.OFSDeltaObject, int64(e.size))); err != nil {
				return err
			}
			if err := gitbinary.WriteVariableWidthInt(p.bw, offset-at.offset); err != nil {
				return err
			}
			if _, err := p.bw.Write(e.delta); err != nil {
				return err
			}
			p.written[o.Hash()] = packedAt{offset: offset, depth: depth}
			return nil
		}
	}
	if _, err := p.bw.Write(objectHeader(o.Type(), o.Size())); err != nil {
		return err
	}
	var err error
	switch {
	case e.whole != nil:
		_, err = p.bw.Write(e.whole)
	case e.content != nil:
		var whole []byte
		if whole, err = Deflate(e.content); err == nil {
			_, err = p.bw.Write(whole)
		}
	default:
		err = streamObject(p.bw, o)
	}
	if err == nil && p.written != nil {
		p.written[o.Hash()] = packedAt{offset: offset, depth: 0}
	}
	return err
}

// writeKept writes the object id as the delta it is kept as: an OFS_DELTA when its base was
// written before it, else a REF_DELTA naming its base, which comes later in the pack (git's
// index-pack takes a REF_DELTA's base from anywhere in the pack).
func (p *packWriter) writeKept(id plumbing.Hash, d StoredDelta) error {
	offset := p.cw.n + int64(p.bw.Buffered())
	depth := 1
	if at, ok := p.written[d.Base]; ok {
		depth = at.depth + 1
		if _, err := p.bw.Write(objectHeader(plumbing.OFSDeltaObject, int64(d.Size))); err != nil {
			return err
		}
		if err := gitbinary.WriteVariableWidthInt(p.bw, offset-at.offset); err != nil {
			return err
		}
	} else {
		if _, err := p.bw.Write(objectHeader(plumbing.REFDeltaObject, int64(d.Size))); err != nil {
			return err
		}
		if _, err := p.bw.Write(d.Base[:]); err != nil {
			return err
		}
	}
	if _, err := p.bw.Write(d.Deflated); err != nil {
		return err
	}
	p.written[id] = packedAt{offset: offset, depth: depth}
	return nil
}

// countingWriter counts what it passes on: the offset of the next pack entry.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// contentCache keeps the contents of the objects last added, up to a number of bytes, oldest
// out first. Reads may run beside each other; adds may not run beside anything.
type contentCache struct {
	max, bytes int
	byID       map[plumbing.Hash][]byte
	order      []plumbing.Hash
}

func newContentCache(max int) *contentCache {
	return &contentCache{max: max, byID: map[plumbing.Hash][]byte{}}
}

func (c *contentCache) add(id plumbing.Hash, b []byte) {
	if _, ok := c.byID[id]; ok {
		return
	}
	c.byID[id] = b
	c.order = append(c.order, id)
	c.bytes += len(b)
	for c.bytes > c.max && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.bytes -= len(c.byID[old])
		delete(c.byID, old)
	}
}

func (c *contentCache) get(id plumbing.Hash) ([]byte, bool) {
	b, ok := c.byID[id]
	return b, ok
}

// readContent reads a small object whole.
func readContent(o plumbing.EncodedObject) ([]byte, error) {
	r, err := o.Reader()
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", o.Hash(), err)
	}
	defer r.Close()
	b := make([]byte, 0, o.Size())
	buf := bytes.NewBuffer(b)
	if _, err := io.Copy(buf, r); err != nil {
		return nil, fmt.Errorf("object %s: %w", o.Hash(), err)
	}
	return buf.Bytes(), nil
}

// parallelObjectBytes is the largest object writePlainPack compresses in memory, beside others.
const parallelObjectBytes = 1 << 20

// compressors are zlib writers at the fastest level, kept between objects: making one costs
// more than compressing a small object.
var compressors = sync.Pool{New: func() any {
	zw, _ := zlib.NewWriterLevel(io.Discard, zlib.BestSpeed)
	return zw
}}

// Deflate answers b compressed as a pack entry or a loose object holds it: a zlib stream, at
// the fastest level. The store keeps contents in this form too (store.EncodeStored).
func Deflate(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(b)/2 + 64)
	zw := compressors.Get().(*zlib.Writer)
	defer compressors.Put(zw)
	zw.Reset(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// streamObject writes o's content compressed to w as it reads it.
func streamObject(w io.Writer, o plumbing.EncodedObject) error {
	r, err := o.Reader()
	if err != nil {
		return fmt.Errorf("object %s: %w", o.Hash(), err)
	}
	defer r.Close()
	zw := compressors.Get().(*zlib.Writer)
	defer compressors.Put(zw)
	zw.Reset(w)
	if _, err := io.Copy(zw, r); err != nil {
		return fmt.Errorf("object %s: %w", o.Hash(), err)
	}
	return zw.Close()
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
