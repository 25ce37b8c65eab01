package store

import (
	"bytes"
	"fmt"
	"io"
	"runtime"

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
)

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
