package server

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// An import sends the objects of its packs as the packs hold them (ADR-0037): compressed, and
// as git's deltas against other objects. The server makes each object whole to check it (its
// id is what git computes of what it makes, so a delta that makes anything else is another
// object, not that one), keeps a blob's delta as it came when its base's chain is short
// enough, and every other object whole.

// maxInflatedPerCall bounds what one UploadGitObjects call makes of what it carries: deltas
// make far more than they weigh (a history's 145 MB of blobs in its pack are 4.1 GB whole).
const maxInflatedPerCall = 1 << 30

// uploadCacheBytes is how much of the objects last made the server keeps as the bases of
// the next deltas: an import's next call names the bases its last one sent.
const uploadCacheBytes = 64 << 20

// objectMaker makes the objects of one UploadGitObjects call whole.
type objectMaker struct {
	ctx   context.Context
	store store.Store
	cache *store.BlobCache
	// made: the objects of the call made so far, by id, to make again when evicted.
	made map[plumbing.Hash]madeObject
	// storedDepths: how deep the stored blobs that deltas of the call name are, read once.
	storedDepths map[plumbing.Hash]int
	// storedBlobs: the stored blobs among the bases of the call's trees and commits.
	storedBlobs map[plumbing.Hash]store.BlobRef
	// fromStore: the bases read from the store, kept for the call (counted in inflated).
	fromStore map[plumbing.Hash][]byte
	// making: the objects of the call being made again. Deltas may name each other (one
	// makes a stored blob from a delta against it): once the objects kept at hand dropped
	// them, making one again goes to the store when it comes round to itself, never in a loop.
	making   map[plumbing.Hash]bool
	inflated int
}

// madeObject is an object of the call: how it came, and as a blob, how deep its row is.
type madeObject struct {
	in    *agwpv1.GitObject
	typ   plumbing.ObjectType
	depth int
}

// madeBlob is what an object of the call is: its content, and its delta when it came as one.
type madeBlob struct {
	content []byte
	delta   []byte
	base    plumbing.Hash
}

func newObjectMaker(ctx context.Context, s *Server, in []*agwpv1.GitObject) (*objectMaker, error) {
	m := &objectMaker{ctx: ctx, store: s.store, cache: s.uploadBases, made: map[plumbing.Hash]madeObject{},
		fromStore: map[plumbing.Hash][]byte{}, making: map[plumbing.Hash]bool{}}
	var blobBases, otherBases []plumbing.Hash
	seen := map[plumbing.Hash]bool{}
	for i, o := range in {
		if o.GetDeltaBase() == "" {
			continue
		}
		id, err := store.ParseGitID(o.GetDeltaBase())
		if err != nil {
			return nil, invalid(fmt.Sprintf("objects[%d].delta_base", i), "%v", err)
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		if o.GetType() == "blob" {
			blobBases = append(blobBases, id)
		} else {
			otherBases = append(otherBases, id)
		}
	}
	var err error
	if m.storedDepths, err = s.store.BlobDepths(ctx, blobBases); err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	// A tree's or commit's base that is a stored blob is refused before it is read: it may be
	// a blob of gigabytes, in parts.
	if m.storedBlobs, err = s.store.BlobsByGitID(ctx, otherBases); err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return m, nil
}

// make answers the object o of type typ whole, checking what it carries, and, when it is a
// delta, the delta and its base. What it makes is counted against the call's bound before it
// is made: a delta's target from its header.
func (m *objectMaker) make(field string, typ plumbing.ObjectType, o *agwpv1.GitObject) (madeBlob, error) {
	data := o.GetData()
	if o.GetDeflated() {
		var err error
		if data, err = store.InflateAtMost(data, maxContentBytes); err != nil {
			return madeBlob{}, invalid(field+".data", "%v", err)
		}
	}
	if err := m.spend(len(data)); err != nil {
		return madeBlob{}, err
	}
	if o.GetDeltaBase() == "" {
		return madeBlob{content: data}, nil
	}
	base := plumbing.NewHash(o.GetDeltaBase()) // parsed by newObjectMaker
	src, target, ok := gitstore.DeltaSizes(data)
	if !ok {
		return madeBlob{}, invalid(field+".data", "is no git delta")
	}
	if target > maxContentBytes {
		return madeBlob{}, invalid(field+".data", "is a delta that makes %d bytes, more than %d MiB", target, maxContentBytes>>20)
	}
	if err := m.spend(int(target)); err != nil {
		return madeBlob{}, err
	}
	if typ == plumbing.BlobObject {
		// A blob's delta is kept against its base: the base must be a blob a delta may be
		// against, made by this call or stored whole or as a delta, not in parts.
		if mo, ok := m.made[base]; ok && mo.typ != plumbing.BlobObject {
			return madeBlob{}, invalid(field+".delta_base", "%s is a %s, not a blob", base, mo.typ)
		} else if _, stored := m.storedDepths[base]; !ok && !stored {
			return madeBlob{}, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
				"%s.delta_base: the server holds no blob %s a delta may be against (none, or one stored in parts): send a delta's base before it, or the blob whole", field, base))
		}
	}
	if _, isBlob := m.storedBlobs[base]; isBlob && typ != plumbing.BlobObject {
		return madeBlob{}, invalid(field+".delta_base", "%s is a blob, not a %s", base, typ)
	}
	from, err := m.content(base, typ)
	if err != nil {
		return madeBlob{}, err
	}
	if src != uint64(len(from)) {
		return madeBlob{}, invalid(field+".data", "is a delta against %d bytes; %s %s has %d", src, typ, base, len(from))
	}
	content, err := packfile.PatchDelta(from, data)
	if err != nil {
		return madeBlob{}, invalid(field+".data", "is a delta git cannot apply to %s %s: %v", typ, base, err)
	}
	return madeBlob{content: content, delta: data, base: base}, nil
}

// spend counts n bytes made against the call's bound.
func (m *objectMaker) spend(n int) error {
	m.inflated += n
	if m.inflated > maxInflatedPerCall {
		return connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("objects: they make more than %d MiB in one request: upload in several", maxInflatedPerCall>>20))
	}
	return nil
}

// content answers the content of the object id, of type typ: kept from this call or an
// earlier one, made again from what this call sent, or read from the store. What the cache
// keeps is keyed by id alone, which is enough: git's id is of the type and the content
// together, and every content kept was made and hashed as the object of its id.
func (m *objectMaker) content(id plumbing.Hash, typ plumbing.ObjectType) ([]byte, error) {
	if c, ok := m.cache.Get(id); ok {
		return c, nil
	}
	if c, ok := m.fromStore[id]; ok {
		return c, nil
	}
	if mo, ok := m.made[id]; ok && !m.making[id] {
		if mo.typ != typ {
			return nil, invalid("objects", "a %s's delta_base %s is a %s", typ, id, mo.typ)
		}
		m.making[id] = true
		b, err := m.make("objects", mo.typ, mo.in)
		delete(m.making, id)
		if err != nil {
			return nil, err
		}
		m.cache.Add(id, b.content)
		return b.content, nil
	}
	t, c, err := m.store.ReadGitObject(m.ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"a delta_base %s the server does not hold: send a delta's base before it, or the object whole", id))
	}
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	if t != typ {
		return nil, invalid("objects", "a %s's delta_base %s is a %s", typ, id, t)
	}
	if err := m.spend(len(c)); err != nil {
		return nil, err
	}
	m.fromStore[id] = c
	m.cache.Add(id, c)
	return c, nil
}

// blobRow answers how the blob made as b, of id, is kept: as its delta when it came as one
// against a blob whose chain is short enough; otherwise whole, as the stream it came in when
// that is smaller, else as EncodeStored keeps it.
func (m *objectMaker) blobRow(id plumbing.Hash, o *agwpv1.GitObject, b madeBlob) (store.PackedBlob, int, error) {
	row := store.PackedBlob{Digest: repo.Digest(b.content), GitID: id, Size: int64(len(b.content))}
	if b.delta != nil {
		depth, ok := m.storedDepths[b.base]
		if mo, made := m.made[b.base]; made {
			depth, ok = mo.depth, true
		}
		if ok && depth < store.MaxBlobDeltaDepth {
			deflated := o.GetData()
			if !o.GetDeflated() {
				var err error
				if deflated, err = gitstore.Deflate(b.delta); err != nil {
					return row, 0, connect.NewError(connect.CodeInternal, err)
				}
			}
			row.Data = store.PackDelta{Base: b.base, Depth: depth + 1, Len: len(b.delta), Deflated: deflated}.Encode()
			row.StoredAs = store.StoredPackDelta
			return row, depth + 1, nil
		}
	}
	if o.GetDeflated() && b.delta == nil && len(b.content) >= 64 && len(o.GetData()) <= len(b.content)-len(b.content)/8 {
		row.Data, row.StoredAs = o.GetData(), store.StoredZlib
		return row, 0, nil
	}
	row.Data, row.StoredAs = store.EncodeStored(b.content)
	return row, 0, nil
}
