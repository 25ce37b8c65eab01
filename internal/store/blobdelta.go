package store

import (
	"bytes"
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/klauspost/compress/zlib"

	"github.com/ag-coord/ag/internal/gitstore"
)

// A blob an import brings as git's delta against another blob is kept as that delta
// (StoredPackDelta, ADR-0037), compressed as the pack held it: a history's versions of a file
// differ by a few lines, and keeping each whole stored loki's history at 7.7 times git's pack.
// The delta's base may itself be a delta, as in a pack, to at most MaxBlobDeltaDepth.

// MaxBlobDeltaDepth bounds a stored blob's chain of deltas, as git's pack.depth bounds a
// pack's (the same 50): reading a blob applies at most this many deltas.
const MaxBlobDeltaDepth = 50

// packDeltaHead is the part of a StoredPackDelta row before its compressed delta that
// BlobDepths reads: the base's id and the depth.
const packDeltaHead = len(plumbing.ZeroHash) + 1

// PackDelta is a StoredPackDelta row's data: the id of the blob it is a delta against, how
// many deltas deep it is (1: its base is kept whole), the delta's length, and the delta as a
// zlib stream.
type PackDelta struct {
	Base     plumbing.Hash
	Depth    int
	Len      int
	Deflated []byte
}

// Encode answers d as a row keeps it: the base's 20 bytes, the depth's byte, the length as a
// uvarint, then the stream.
func (d PackDelta) Encode() []byte {
	out := make([]byte, 0, packDeltaHead+binary.MaxVarintLen64+len(d.Deflated))
	out = append(out, d.Base[:]...)
	out = append(out, byte(d.Depth))
	out = binary.AppendUvarint(out, uint64(d.Len))
	return append(out, d.Deflated...)
}

// ParsePackDelta reads a StoredPackDelta row's data.
func ParsePackDelta(data []byte) (PackDelta, error) {
	var d PackDelta
	if len(data) < packDeltaHead+1 {
		return d, fmt.Errorf("a stored delta of %d bytes", len(data))
	}
	copy(d.Base[:], data)
	d.Depth = int(data[len(d.Base)])
	n, w := binary.Uvarint(data[packDeltaHead:])
	if w <= 0 || n > maxStoredDelta {
		return d, errors.New("a stored delta's length is damaged")
	}
	if d.Depth < 1 || d.Depth > MaxBlobDeltaDepth {
		return d, fmt.Errorf("a stored delta %d deep", d.Depth)
	}
	d.Len, d.Deflated = int(n), data[packDeltaHead+w:]
	return d, nil
}

// maxStoredDelta bounds the length a stored delta may say it has: a delta makes a blob an
// import uploads whole, at most 64 MiB, and says so in a few bytes more.
const maxStoredDelta = 80 << 20

// Inflate answers the delta, exactly d.Len bytes, from a stream that holds nothing more.
func (d PackDelta) Inflate() ([]byte, error) {
	out, err := InflateAtMost(d.Deflated, d.Len)
	if err == nil && len(out) != d.Len {
		err = fmt.Errorf("a zlib stream of %d bytes, not %d", len(out), d.Len)
	}
	return out, err
}

// InflateAtMost answers what the zlib stream data holds, at most max bytes, and refuses a
// stream with anything after it: a stream kept as given is one that reads back as it was
// checked.
func InflateAtMost(data []byte, max int) ([]byte, error) {
	in := bytes.NewReader(data)
	zr, err := zlib.NewReader(in)
	if err != nil {
		return nil, fmt.Errorf("not a zlib stream: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("a damaged zlib stream: %w", err)
	}
	if len(out) > max {
		return nil, fmt.Errorf("a zlib stream of more than %d bytes", max)
	}
	if in.Len() != 0 {
		return nil, fmt.Errorf("%d bytes after a zlib stream", in.Len())
	}
	return out, nil
}

// MaxPartsBase is the largest blob stored in parts that a chain's read joins whole as a base.
// No delta is stored against a blob in parts, but a blob uploaded in parts while an import
// stores it as a delta's base keeps whichever row came first.
const MaxPartsBase = 64 << 20

// BlobRow is a stored blob's row as reading a chain of deltas needs it.
type BlobRow struct {
	Data     []byte
	StoredAs int
	Size     int64
	InParts  bool
}

// PatchBlob answers the content of the blob id whose row is row, kept as a StoredPackDelta,
// reading the rows of its chain with read (a blob by its git id) and keeping what it makes in
// cache (which may be nil). Every content made is checked against its id, so a damaged row
// is an error, never another blob.
func PatchBlob(id plumbing.Hash, row BlobRow, read func(plumbing.Hash) (BlobRow, error), cache *BlobCache) ([]byte, error) {
	type link struct {
		id    plumbing.Hash
		size  int64
		delta PackDelta
	}
	var (
		chain []link
		base  []byte
		cur   = id
	)
	for {
		if content, ok := cache.Get(cur); ok {
			base = content
			break
		}
		if len(chain) > 0 {
			var err error
			if row, err = read(cur); err != nil {
				return nil, fmt.Errorf("blob %s: its base %s: %w", id, cur, err)
			}
		}
		if row.StoredAs != StoredPackDelta {
			if row.InParts {
				return nil, fmt.Errorf("blob %s: its base %s is stored in parts", id, cur)
			}
			content, err := DecodeStored(row.Data, row.StoredAs, row.Size)
			if err != nil {
				return nil, fmt.Errorf("blob %s: %w", cur, err)
			}
			if gitstore.BlobID(content) != cur {
				return nil, fmt.Errorf("blob %s: its row holds another blob", cur)
			}
			cache.Add(cur, content)
			base = content
			break
		}
		if len(chain) >= MaxBlobDeltaDepth {
			return nil, fmt.Errorf("blob %s: a chain of deltas longer than %d", id, MaxBlobDeltaDepth)
		}
		d, err := ParsePackDelta(row.Data)
		if err != nil {
			return nil, fmt.Errorf("blob %s: %w", cur, err)
		}
		chain = append(chain, link{id: cur, size: row.Size, delta: d})
		cur = d.Base
	}
	for i := len(chain) - 1; i >= 0; i-- {
		l := chain[i]
		delta, err := l.delta.Inflate()
		if err != nil {
			return nil, fmt.Errorf("blob %s: its delta: %w", l.id, err)
		}
		out, err := packfile.PatchDelta(base, delta)
		if err != nil {
			return nil, fmt.Errorf("blob %s: its delta: %w", l.id, err)
		}
		if int64(len(out)) != l.size || gitstore.BlobID(out) != l.id {
			return nil, fmt.Errorf("blob %s: its delta makes another blob", l.id)
		}
		cache.Add(l.id, out)
		base = out
	}
	return base, nil
}

// DepthOf answers how many deltas deep a stored blob is, from its row's form and the first
// packDeltaHead bytes of its data: 0 when kept whole.
func DepthOf(storedAs int, head []byte) (int, bool) {
	if storedAs != StoredPackDelta {
		return 0, true
	}
	if len(head) < packDeltaHead {
		return 0, false
	}
	return int(head[packDeltaHead-1]), true
}

// PackedBlob is a blob an import sent, checked, in the form its row keeps: Data is its
// content as EncodeStored keeps it, a zlib stream of it the import sent (StoredZlib), or a
// PackDelta's encoding (StoredPackDelta).
type PackedBlob struct {
	Digest   string
	GitID    plumbing.Hash
	Size     int64
	Data     []byte
	StoredAs int
}

// BlobCache keeps the contents of blobs last made from their deltas, up to a number of
// bytes, the least recently used dropped first: a chain's bases serve the next versions read.
// A nil *BlobCache keeps nothing. It is safe for concurrent use.
type BlobCache struct {
	mu       sync.Mutex
	maxBytes int
	bytes    int
	lru      *list.List
	byID     map[plumbing.Hash]*list.Element
}

type cachedBlob struct {
	id      plumbing.Hash
	content []byte
}

// NewBlobCache answers a cache of at most maxBytes of contents.
func NewBlobCache(maxBytes int) *BlobCache {
	return &BlobCache{maxBytes: maxBytes, lru: list.New(), byID: map[plumbing.Hash]*list.Element{}}
}

// Get answers the content of id when kept. The caller must not change it.
func (c *BlobCache) Get(id plumbing.Hash) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byID[id]
	if !ok {
		return nil, false
	}
	c.lru.MoveToFront(e)
	return e.Value.(*cachedBlob).content, true
}

// Add keeps content as id's, which the caller checked it is, and no longer changes.
func (c *BlobCache) Add(id plumbing.Hash, content []byte) {
	if c == nil || len(content) > c.maxBytes/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byID[id]; ok {
		return
	}
	for c.bytes+len(content) > c.maxBytes {
		old := c.lru.Remove(c.lru.Back()).(*cachedBlob)
		delete(c.byID, old.id)
		c.bytes -= len(old.content)
	}
	c.byID[id] = c.lru.PushFront(&cachedBlob{id: id, content: content})
	c.bytes += len(content)
}

// readCacheBytes is how much of the bases one read of many blobs keeps.
const readCacheBytes = 32 << 20

// NewReadCache answers the cache one read of many blobs shares between their chains.
func NewReadCache() *BlobCache { return NewBlobCache(readCacheBytes) }

// BlobRewrite is a blob stored whole to keep as its delta against Base instead
// (ReplaceWithDeltas): the delta's length and its zlib stream.
type BlobRewrite struct {
	Blob     plumbing.Hash
	Base     plumbing.Hash
	Len      int
	Deflated []byte
}

// BaseRow is what keeping a delta against a stored blob needs of its row: its form, the first
// bytes of its data (DepthOf), whether it is in parts.
type BaseRow struct {
	StoredAs int
	Head     []byte
	InParts  bool
}

// DeltaDepth answers how deep a delta against the blob of row would be, or an error when no
// delta may be against it: stored in parts, or its chain already as deep as a chain may be.
func (row BaseRow) DeltaDepth() (int, error) {
	if row.InParts {
		return 0, errors.New("it is stored in parts")
	}
	depth, ok := DepthOf(row.StoredAs, row.Head)
	if !ok {
		return 0, errors.New("its row is damaged")
	}
	if depth >= MaxBlobDeltaDepth {
		return 0, fmt.Errorf("its chain of deltas is %d deep", depth)
	}
	return depth + 1, nil
}

// CheckPackedDepths sets the depth of each StoredPackDelta among blobs to its chain's as the
// store holds it now, reading with read (in the transaction that stores them) the rows of the
// bases outside blobs and of the blobs already stored, whose rows the insert keeps: a base
// kept as a delta since the caller looked (ReplaceWithDeltas), or stored already at another
// depth or in parts, is counted as it is. A base the store lacks, or one no delta may be
// against, is ErrFailedPrecondition.
func CheckPackedDepths(blobs []PackedBlob, read func(ids []plumbing.Hash) (map[plumbing.Hash]BaseRow, error)) error {
	ask := make([]plumbing.Hash, 0, len(blobs))
	for _, b := range blobs {
		ask = append(ask, b.GitID)
		if b.StoredAs == StoredPackDelta {
			if d, err := ParsePackDelta(b.Data); err == nil {
				ask = append(ask, d.Base)
			}
		}
	}
	rows, err := read(ask)
	if err != nil {
		return err
	}
	// made: the rows the blobs before have once stored, a delta against each as deep as
	// BaseRow.DeltaDepth says.
	made := make(map[plumbing.Hash]BaseRow, len(blobs))
	for i := range blobs {
		b := &blobs[i]
		if row, stored := rows[b.GitID]; stored {
			made[b.GitID] = row // the insert leaves the stored row as it is
			continue
		}
		if b.StoredAs != StoredPackDelta {
			made[b.GitID] = BaseRow{StoredAs: b.StoredAs}
			continue
		}
		d, err := ParsePackDelta(b.Data)
		if err != nil {
			return fmt.Errorf("blob %s: %w", b.GitID, err)
		}
		base, ok := made[d.Base]
		if !ok {
			if base, ok = rows[d.Base]; !ok {
				return fmt.Errorf("blob %s: its base %s is not stored: %w", b.GitID, d.Base, ErrFailedPrecondition)
			}
		}
		depth, err := base.DeltaDepth()
		if err != nil {
			return fmt.Errorf("blob %s: no delta may be against %s: %v: %w", b.GitID, d.Base, err, ErrFailedPrecondition)
		}
		if d.Depth != depth {
			d.Depth = depth
			b.Data = d.Encode()
		}
		made[b.GitID] = BaseRow{StoredAs: StoredPackDelta, Head: b.Data[:packDeltaHead]}
	}
	return nil
}

// RewriteDepth answers how deep the blob of rw is kept (ReplaceWithDeltas), or false when it
// stays whole: it must be stored whole (form, not in parts) with no delta against it (based),
// and its base, another blob, stored and able to take one more delta.
func RewriteDepth(rw BlobRewrite, form int, inParts, based bool, base BaseRow, baseHeld bool) (int, bool) {
	if rw.Blob == rw.Base || inParts || based || !baseHeld || (form != StoredZlib && form != StoredPlain) {
		return 0, false
	}
	depth, err := base.DeltaDepth()
	return depth, err == nil
}
