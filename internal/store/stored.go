package store

import (
	"bytes"
	"fmt"
	"io"
	"runtime"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/klauspost/compress/zlib"
	"golang.org/x/sync/errgroup"

	"github.com/ag-coord/ag/internal/gitstore"
)

// How a blob's content or a git object's data is kept in its row (the stored_as column of the
// blobs and git_objects tables, docs/storage.md): compressed when that pays, as git keeps its
// objects. A row written before compression is StoredUnexamined until the store's compaction
// (CompactStored) rewrites it.
const (
	// StoredUnexamined: the bytes themselves, never offered to compression.
	StoredUnexamined = 0
	// StoredZlib: a zlib stream of the bytes, as git's loose objects and packs hold them.
	StoredZlib = 1
	// StoredPlain: the bytes themselves; compressed, they were not smaller by an eighth.
	StoredPlain = 2
	// StoredDelta: a tree kept as git's delta against another tree the store keeps whole, its
	// anchor: the anchor's 20-byte id, then the delta (GitObjects.TakePending). A one-file
	// change rewrites every tree along its path, and the wide ones near the root differ from
	// the versions they replace by an entry's 20 bytes.
	StoredDelta = 3
	// StoredPackDelta: a blob kept as git's delta against another blob, compressed, as the
	// pack an import sent held it (PackDelta, ADR-0037). Its base may be a delta too.
	StoredPackDelta = 4
)

// PatchStoredDelta answers the tree a StoredDelta row of id keeps as data, reading its
// anchor's content with anchor, and checked against id: a damaged row or anchor is an error,
// never another tree.
func PatchStoredDelta(id plumbing.Hash, data []byte, anchor func(plumbing.Hash) ([]byte, error)) ([]byte, error) {
	from, ok := DeltaAnchor(data)
	if !ok {
		return nil, fmt.Errorf("stored delta of %s: %d bytes", id, len(data))
	}
	base, err := anchor(from)
	if err != nil {
		return nil, fmt.Errorf("stored delta of %s: its anchor %s: %w", id, from, err)
	}
	out, err := packfile.PatchDelta(base, data[len(from):])
	if err != nil {
		return nil, fmt.Errorf("stored delta of %s: %w", id, err)
	}
	if plumbing.ComputeHash(plumbing.TreeObject, out) != id {
		return nil, fmt.Errorf("stored delta of %s: it makes another tree", id)
	}
	return out, nil
}

// PatchDeltas makes each of objs at the indexes deltas, read as a StoredDelta row keeps it, the
// tree it stands for, reading each anchor once with anchor.
func PatchDeltas(objs []GitObject, deltas []int, anchor func(plumbing.Hash) ([]byte, error)) error {
	read := map[plumbing.Hash][]byte{}
	once := func(id plumbing.Hash) ([]byte, error) {
		if data, ok := read[id]; ok {
			return data, nil
		}
		data, err := anchor(id)
		if err == nil {
			read[id] = data
		}
		return data, err
	}
	for _, i := range deltas {
		data, err := PatchStoredDelta(objs[i].ID, objs[i].Data, once)
		if err != nil {
			return err
		}
		objs[i].Data = data
	}
	return nil
}

// DeltaAnchor answers the anchor a StoredDelta row's data names.
func DeltaAnchor(data []byte) (plumbing.Hash, bool) {
	var id plumbing.Hash
	if len(data) < len(id) {
		return id, false
	}
	copy(id[:], data)
	return id, true
}

// AnchorOf answers the tree a stored tree id is kept whole as or against, from its row's form
// and the first bytes of its data (GitAnchorReader): id itself when kept whole, the anchor its
// delta names otherwise.
func AnchorOf(id plumbing.Hash, storedAs int, head []byte) (plumbing.Hash, bool) {
	if storedAs != StoredDelta {
		return id, true
	}
	return DeltaAnchor(head)
}

// storedMinSize is the smallest content worth compressing: below it zlib's own header and
// checksum eat most of what it saves.
const storedMinSize = 64

// EncodeStored answers how to keep content in a row: its zlib stream and StoredZlib when that
// is at least an eighth smaller, else content itself and StoredPlain.
func EncodeStored(content []byte) ([]byte, int) {
	if len(content) < storedMinSize {
		return content, StoredPlain
	}
	// zlib's fastest level (gitstore.Deflate): on a real history, 5% more bytes than its
	// default level for a quarter of its time, which an import would otherwise wait for
	// (docs/benchmarks.md, "A real history").
	data, err := gitstore.Deflate(content)
	if err != nil || len(data) > len(content)-len(content)/8 {
		return content, StoredPlain
	}
	return data, StoredZlib
}

// DecodeStored answers the content a row keeps as data, stored as storedAs; size is the
// content's length, or -1 when the row does not say.
func DecodeStored(data []byte, storedAs int, size int64) ([]byte, error) {
	switch storedAs {
	case StoredUnexamined, StoredPlain:
		return data, nil
	case StoredZlib:
		r, err := zlib.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("stored content: %w", err)
		}
		var (
			out []byte
			in  io.Reader = r
		)
		if size >= 0 {
			// Never more than one byte past what the row says: a damaged row is an error,
			// not memory for whatever it inflates to.
			out, in = make([]byte, 0, size), io.LimitReader(r, size+1)
		}
		buf := bytes.NewBuffer(out)
		if _, err := io.Copy(buf, in); err != nil {
			return nil, fmt.Errorf("stored content: %w", err)
		}
		if size >= 0 && int64(buf.Len()) != size {
			return nil, fmt.Errorf("stored content: %d bytes, its row says %d", buf.Len(), size)
		}
		return buf.Bytes(), nil
	default:
		return nil, fmt.Errorf("stored content: unknown form %d", storedAs)
	}
}

// Encoded is a content as a row keeps it: EncodeStored's answer.
type Encoded struct {
	Data     []byte
	StoredAs int
}

// encodeInParallel is the size of contents from which EncodeEach compresses on every CPU.
const encodeInParallel = 256 << 10

// EncodeEach answers EncodeStored of each of contents, compressing on every CPU when they are
// many: an import's batch is compressed before its transaction, not by the one writer.
func EncodeEach(contents [][]byte) []Encoded {
	out := make([]Encoded, len(contents))
	total := 0
	for _, c := range contents {
		total += len(c)
	}
	if total < encodeInParallel || len(contents) < 2 {
		for i, c := range contents {
			out[i].Data, out[i].StoredAs = EncodeStored(c)
		}
		return out
	}
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, c := range contents {
		g.Go(func() error {
			out[i].Data, out[i].StoredAs = EncodeStored(c)
			return nil
		})
	}
	_ = g.Wait() // nothing fails
	return out
}
