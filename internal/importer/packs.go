package importer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/klauspost/compress/zlib"

	"github.com/ag-coord/ag/internal/gitstore"
)

// An import sends the objects of the repository's packs as they are there (ADR-0037): each
// entry's compressed bytes, and a delta as git's delta against its base, which the server
// makes whole to check and keeps. Reading a history's packs this way costs the client no
// decompression of what it sends, and the server keeps git's own economy of the history.

// Packs are the pack files of a git repository, read entry by entry.
type Packs struct {
	files []*packFile
	at    map[plumbing.Hash]packedEntry
}

type packFile struct {
	f    *os.File
	name string
	// offsets of the entries in the pack, ascending, with the id of each, and where the last
	// one ends (the pack's checksum).
	offsets []int64
	ids     []plumbing.Hash
	end     int64
}

// packedEntry is where an object is: its pack, and its entry's index in the pack's offsets.
type packedEntry struct {
	pack, entry int
}

// OpenPacks reads the indexes of the packs of the git directory gitDir. A pack without its
// index, or one that cannot be read, is left out: its objects are read whole through go-git.
func OpenPacks(gitDir string) (*Packs, error) {
	p := &Packs{at: map[plumbing.Hash]packedEntry{}}
	names, err := filepath.Glob(filepath.Join(gitDir, "objects", "pack", "pack-*.idx"))
	if err != nil {
		return nil, err
	}
	for _, idxName := range names {
		pf, err := openPack(strings.TrimSuffix(idxName, ".idx"))
		if err != nil {
			continue
		}
		for i, id := range pf.ids {
			if _, ok := p.at[id]; !ok {
				p.at[id] = packedEntry{pack: len(p.files), entry: i}
			}
		}
		p.files = append(p.files, pf)
	}
	return p, nil
}

func openPack(base string) (*packFile, error) {
	idxFile, err := os.Open(base + ".idx")
	if err != nil {
		return nil, err
	}
	defer idxFile.Close()
	idx := idxfile.NewMemoryIndex()
	if err := idxfile.NewDecoder(idxFile).Decode(idx); err != nil {
		return nil, err
	}
	f, err := os.Open(base + ".pack")
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil || fi.Size() < 32 {
		f.Close()
		return nil, errors.New("not a pack")
	}
	iter, err := idx.EntriesByOffset()
	if err != nil {
		f.Close()
		return nil, err
	}
	pf := &packFile{f: f, name: base + ".pack", end: fi.Size() - 20}
	for {
		e, err := iter.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			f.Close()
			return nil, err
		}
		pf.offsets = append(pf.offsets, int64(e.Offset))
		pf.ids = append(pf.ids, e.Hash)
	}
	return pf, nil
}

// Close closes the pack files.
func (p *Packs) Close() {
	if p == nil {
		return
	}
	for _, f := range p.files {
		f.f.Close()
	}
}

// Has reports whether id is in a pack.
func (p *Packs) Has(id plumbing.Hash) bool {
	if p == nil {
		return false
	}
	_, ok := p.at[id]
	return ok
}

// SendOrder answers ids in an order where each delta of a pack among them comes right after
// its base, the way git's index-pack makes a pack's objects: a depth-first walk of each base's
// deltas, the bases in the order their packs hold them, an id in no pack last. The server makes
// each delta from its base, which it has just made, not from the store.
func (p *Packs) SendOrder(ids []plumbing.Hash) ([]plumbing.Hash, error) {
	sorted := slices.Clone(ids)
	slices.SortStableFunc(sorted, func(a, b plumbing.Hash) int {
		pa, oa := p.order(a)
		pb, ob := p.order(b)
		if pa != pb {
			return pa - pb
		}
		return int(min(max(oa-ob, -1), 1))
	})
	if p == nil {
		return sorted, nil
	}
	in := make(map[plumbing.Hash]bool, len(ids))
	for _, id := range ids {
		in[id] = true
	}
	children := map[plumbing.Hash][]plumbing.Hash{}
	hasBase := make(map[plumbing.Hash]bool, len(ids))
	for _, id := range sorted {
		if !p.Has(id) {
			continue
		}
		base, ok, err := p.deltaBase(id)
		if err != nil {
			return nil, err
		}
		if ok && in[base] && base != id {
			children[base] = append(children[base], id)
			hasBase[id] = true
		}
	}
	out := make([]plumbing.Hash, 0, len(sorted))
	done := make(map[plumbing.Hash]bool, len(sorted))
	var stack []plumbing.Hash
	walk := func(root plumbing.Hash) {
		stack = append(stack[:0], root)
		for len(stack) > 0 {
			id := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if done[id] {
				continue
			}
			done[id] = true
			out = append(out, id)
			kids := children[id]
			for i := len(kids) - 1; i >= 0; i-- { // the first in its pack goes first
				stack = append(stack, kids[i])
			}
		}
	}
	for _, id := range sorted {
		if !hasBase[id] {
			walk(id)
		}
	}
	for _, id := range sorted { // a damaged pack's cycle of deltas: each still goes once
		if !done[id] {
			walk(id)
		}
	}
	return out, nil
}

// order answers where id is, as a key that sorts objects as their packs hold them.
func (p *Packs) order(id plumbing.Hash) (int, int64) {
	if p == nil {
		return 1 << 30, 0
	}
	e, ok := p.at[id]
	if !ok {
		return 1 << 30, 0
	}
	return e.pack, p.files[e.pack].offsets[e.entry]
}

// deltaBase answers the base of id's entry when it is a delta, reading only its header.
func (p *Packs) deltaBase(id plumbing.Hash) (plumbing.Hash, bool, error) {
	e, _, err := p.entry(id, 48)
	if err != nil {
		return plumbing.ZeroHash, false, err
	}
	return e.Base, e.Delta, nil
}

// PackEntry is an object's entry in a pack: its type (a delta's is its base's, which only the
// base tells: Delta says it is one), the size its header gives (of the object, or of the
// delta), the base of a delta, and the zlib stream of the object or the delta.
type PackEntry struct {
	Delta    bool
	Type     plumbing.ObjectType
	Size     int64
	Base     plumbing.Hash
	Deflated []byte
}

// Entry reads the entry of id, which must be in a pack (Has).
func (p *Packs) Entry(id plumbing.Hash) (PackEntry, error) {
	e, _, err := p.entry(id, 1<<31)
	return e, err
}

// entry reads at most the first limit bytes of the entry of id: with a small limit, its
// header alone (the stream cut short). whole says whether that was the whole entry.
func (p *Packs) entry(id plumbing.Hash, limit int64) (e PackEntry, whole bool, err error) {
	at, ok := p.at[id]
	if !ok {
		return PackEntry{}, false, fmt.Errorf("%s is in no pack", id)
	}
	pf := p.files[at.pack]
	start := pf.offsets[at.entry]
	end := pf.end
	if at.entry+1 < len(pf.offsets) {
		end = pf.offsets[at.entry+1]
	}
	if end <= start || end-start > 1<<31 {
		return PackEntry{}, false, fmt.Errorf("%s: the entry of %s is damaged", pf.name, id)
	}
	raw := make([]byte, min(end-start, limit))
	if _, err := pf.f.ReadAt(raw, start); err != nil {
		return PackEntry{}, false, fmt.Errorf("%s: read the entry of %s: %w", pf.name, id, err)
	}
	e, err = parseEntry(raw, func(back int64) (plumbing.Hash, bool) {
		i, found := slices.BinarySearch(pf.offsets, start-back)
		if !found || back <= 0 {
			return plumbing.ZeroHash, false
		}
		return pf.ids[i], true
	})
	if err != nil {
		return PackEntry{}, false, fmt.Errorf("%s: the entry of %s: %w", pf.name, id, err)
	}
	return e, int64(len(raw)) == end-start, nil
}

// parseEntry reads a pack entry's header (git's gitformat-pack), baseAt answering the id of
// the entry an OFS_DELTA's distance back names.
func parseEntry(raw []byte, baseAt func(back int64) (plumbing.Hash, bool)) (PackEntry, error) {
	var e PackEntry
	if len(raw) == 0 {
		return e, errors.New("empty")
	}
	c := raw[0]
	typ := plumbing.ObjectType((c >> 4) & 7)
	size := int64(c & 15)
	shift, n := 4, 1
	for c&0x80 != 0 {
		if n >= len(raw) || shift > 56 {
			return e, errors.New("a damaged header")
		}
		c = raw[n]
		n++
		size |= int64(c&0x7f) << shift
		shift += 7
	}
	e.Size = size
	switch typ {
	case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
		e.Type = typ
	case plumbing.OFSDeltaObject:
		if n >= len(raw) {
			return e, errors.New("a damaged delta")
		}
		c = raw[n]
		n++
		back := int64(c & 0x7f)
		for c&0x80 != 0 {
			if n >= len(raw) || back > 1<<48 {
				return e, errors.New("a damaged delta")
			}
			c = raw[n]
			n++
			back = ((back + 1) << 7) | int64(c&0x7f)
		}
		base, ok := baseAt(back)
		if !ok {
			return e, errors.New("a delta against no entry of its pack")
		}
		e.Delta, e.Base = true, base
	case plumbing.REFDeltaObject:
		if n+20 > len(raw) {
			return e, errors.New("a damaged delta")
		}
		copy(e.Base[:], raw[n:n+20])
		n += 20
		e.Delta = true
	default:
		return e, fmt.Errorf("an entry of type %d", typ)
	}
	e.Deflated = raw[n:]
	return e, nil
}

// deltaTarget answers the size of what the delta in a zlib stream makes, reading only its
// first bytes.
func deltaTarget(deflated []byte) (int64, error) {
	zr, err := zlib.NewReader(bytes.NewReader(deflated))
	if err != nil {
		return 0, err
	}
	defer zr.Close()
	var head [20]byte // two sizes of at most 10 bytes each
	n, err := io.ReadFull(zr, head[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return 0, err
	}
	_, target, ok := gitstore.DeltaSizes(head[:n])
	if !ok || target > math.MaxInt64 {
		return 0, errors.New("a damaged delta")
	}
	return int64(target), nil
}
