package audit

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"hash"
	"maps"
	"math/bits"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/tlog"
)

// SealFunc answers the store.SealAuditParams.Seal that seals with s: the pending events get
// seq head.Size+1, head.Size+2, ... in the order given, their prev hash and hash (the chain),
// and their Merkle tree's stored hashes (tlog.StoredHashes, reading the tree's earlier hashes
// with hashes and the batch's own from memory); then the new head, the tree hash and a
// checkpoint signed by s, created at now().
//
// The function remembers the right edge of the last tree it computed, which is all of the old
// tree a seal reads: the next seal after that head then reads no tree hash from the store. A
// head is its size and the chain's last hash, which commits to every event before it, so a
// head the function computed names the same tree whoever stored it; any other head is read.
func (s *Signer) SealFunc(now func() time.Time) func(head Head, pending []Event, hashes func([]int64) ([][]byte, error)) (Seal, error) {
	var (
		mu   sync.Mutex
		last treeEdge
	)
	return func(head Head, pending []Event, hashes func([]int64) ([][]byte, error)) (Seal, error) {
		mu.Lock()
		edge := last
		mu.Unlock()
		out, next, err := s.seal(now, head, pending, hashes, edge)
		if err == nil {
			mu.Lock()
			last = next
			mu.Unlock()
		}
		return out, err
	}
}

// treeEdge is the right edge of the Merkle tree of the events up to head: the stored hashes
// tlog.TreeHash reads for it, which are the old hashes a seal after head needs.
type treeEdge struct {
	head   Head
	hashes map[int64]tlog.Hash
}

// of answers the edge's hashes when it is head's edge.
func (e treeEdge) of(head Head) (map[int64]tlog.Hash, bool) {
	if e.hashes == nil || e.head.Size != head.Size || !bytes.Equal(e.head.Hash, head.Hash) {
		return nil, false
	}
	return e.hashes, true
}

func (s *Signer) seal(now func() time.Time, head Head, pending []Event, hashes HashesFunc, edge treeEdge) (Seal, treeEdge, error) {
	if len(pending) == 0 {
		return Seal{}, treeEdge{}, fmt.Errorf("seal: no pending events")
	}
	if head.Size == 0 && len(head.Hash) != 0 || head.Size > 0 && len(head.Hash) != HashSize {
		return Seal{}, treeEdge{}, fmt.Errorf("seal: a head of %d events with a hash of %d bytes", head.Size, len(head.Hash))
	}
	size, err := int64Size(head.Size + uint64(len(pending)))
	if err != nil {
		return Seal{}, treeEdge{}, err
	}
	base := tlog.StoredHashCount(int64(head.Size))
	// The batch's hashes are allocated once at their exact size, and are the seal's TreeHashes
	// as they are: grown by append and then copied, a seal of 1,000 events allocated three
	// times the 64 KB they end at.
	r := &sealReader{base: base, batch: make([]byte, 0, HashSize*(tlog.StoredHashCount(size)-base)),
		stored: map[int64]tlog.Hash{}, read: hashes}
	if known, ok := edge.of(head); ok {
		maps.Copy(r.stored, known)
	}
	// TreeHash reads the old tree's right edge (the roots of its complete subtrees) in one
	// call: exactly the old hashes StoredHashes will need below, so they are read once.
	if _, err := tlog.TreeHash(int64(head.Size), r); err != nil {
		return Seal{}, treeEdge{}, fmt.Errorf("seal: read the tree of %d events: %w", head.Size, err)
	}

	out := Seal{Hashes: make([]byte, 0, HashSize*len(pending))}
	prev := head.Hash
	if head.Size == 0 {
		prev = zeroHash
	}
	// One buffer serves every event's canonical form and one digest every chain hash, which
	// goes straight into out.Hashes (its capacity is exact, so prev stays valid).
	var canonical []byte
	chain, leaf := sha256.New(), sha256.New()
	for i := range pending {
		e := pending[i]
		e.Seq = head.Size + uint64(i) + 1
		canonical, err = appendCanonical(canonical[:0], e)
		if err != nil {
			return Seal{}, treeEdge{}, fmt.Errorf("seal: event %d (id %d): %w", e.Seq, e.ID, err)
		}
		chain.Reset()
		chain.Write(prev)
		chain.Write(canonical)
		out.Hashes = chain.Sum(out.Hashes)
		prev = out.Hashes[len(out.Hashes)-HashSize:]

		n := int64(e.Seq - 1)
		if at := tlog.StoredHashIndex(0, n); at != r.base+r.computed() {
			return Seal{}, treeEdge{}, fmt.Errorf("seal: record %d's hashes go at %d, not after the %d known", n, at, r.base+r.computed())
		}
		if err := r.appendStoredHashes(n, leaf, canonical); err != nil {
			return Seal{}, treeEdge{}, fmt.Errorf("seal: tree hashes of event %d: %w", e.Seq, err)
		}
	}

	newEdge := &edgeReader{r: r, hashes: map[int64]tlog.Hash{}}
	root, err := tlog.TreeHash(size, newEdge)
	if err != nil {
		return Seal{}, treeEdge{}, fmt.Errorf("seal: tree hash of %d events: %w", size, err)
	}
	out.TreeHashes = r.batch
	out.Head = Head{Size: uint64(size), Hash: bytes.Clone(prev)}
	cp := Checkpoint{Origin: s.Origin(), Size: uint64(size), Root: root, Head: out.Head.Hash}
	msg, err := s.SignCheckpoint(cp)
	if err != nil {
		return Seal{}, treeEdge{}, fmt.Errorf("seal: sign the checkpoint: %w", err)
	}
	out.Checkpoint = StoredCheckpoint{
		Size: cp.Size, RootHash: bytes.Clone(root[:]), HeadHash: bytes.Clone(prev), Note: msg, CreatedAt: now(),
	}
	return out, treeEdge{head: out.Head, hashes: newEdge.hashes}, nil
}

// edgeReader reads through r and keeps what it read: the right edge of the tree whose hash
// tlog.TreeHash computes with it.
type edgeReader struct {
	r      tlog.HashReader
	hashes map[int64]tlog.Hash
}

func (e *edgeReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	hs, err := e.r.ReadHashes(indexes)
	if err != nil {
		return nil, err
	}
	for i, x := range indexes {
		e.hashes[x] = hs[i]
	}
	return hs, nil
}

// sealReader reads the tree's hashes during a seal: those the store holds (indexes below base)
// through read, once each, and those the batch computed (from base on) from memory, one after
// the other in batch.
type sealReader struct {
	base   int64
	batch  []byte
	stored map[int64]tlog.Hash
	read   HashesFunc
}

// computed answers how many hashes the batch computed.
func (r *sealReader) computed() int64 { return int64(len(r.batch) / HashSize) }

// batchHash answers the hash at x, which the batch computed.
func (r *sealReader) batchHash(x int64) tlog.Hash {
	i := (x - r.base) * HashSize
	return tlog.Hash(r.batch[i : i+HashSize])
}

// appendStoredHashes appends the tree hashes that record n, whose data is data, adds: what
// tlog.StoredHashes(n, data, r) answers, computed with leaf as the record hash's digest and
// without allocating, since a seal runs it for every event.
func (r *sealReader) appendStoredHashes(n int64, leaf hash.Hash, data []byte) error {
	var h tlog.Hash
	leaf.Reset()
	leaf.Write(leafPrefix)
	leaf.Write(data)
	leaf.Sum(h[:0])
	r.batch = append(r.batch, h[:]...)
	// Each trailing 1 bit of n completes a subtree, whose hash joins the one to its left.
	for level := range bits.TrailingZeros64(uint64(n + 1)) {
		left, err := r.hash(tlog.StoredHashIndex(level, n>>uint(level)-1))
		if err != nil {
			return err
		}
		h = tlog.NodeHash(left, h)
		r.batch = append(r.batch, h[:]...)
	}
	return nil
}

// leafPrefix starts a record hash's input (RFC 6962).
var leafPrefix = []byte{0}

// hash answers the tree hash at x, as ReadHashes would.
func (r *sealReader) hash(x int64) (tlog.Hash, error) {
	if x >= r.base && x-r.base < r.computed() {
		return r.batchHash(x), nil
	}
	if h, ok := r.stored[x]; ok && x < r.base {
		return h, nil
	}
	hs, err := r.ReadHashes([]int64{x})
	if err != nil {
		return tlog.Hash{}, err
	}
	return hs[0], nil
}

func (r *sealReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	var missing []int64
	for i, x := range indexes {
		switch h, ok := r.stored[x]; {
		case x >= r.base && x-r.base < r.computed():
			out[i] = r.batchHash(x)
		case x >= r.base:
			return nil, fmt.Errorf("tree hash %d is not computed yet (%d known)", x, r.base+r.computed())
		case ok:
			out[i] = h
		default:
			missing = append(missing, x)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	raw, err := r.read(missing)
	if err != nil {
		return nil, err
	}
	got, err := toHashes(missing, raw)
	if err != nil {
		return nil, err
	}
	for i, x := range missing {
		r.stored[x] = got[i]
	}
	for i, x := range indexes {
		if x < r.base {
			out[i] = r.stored[x]
		}
	}
	return out, nil
}

// memTree is a Merkle tree held in memory: its stored hashes in tlog's numbering.
type memTree struct {
	n      int64
	hashes []tlog.Hash
}

func (t *memTree) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(t.hashes)) {
			return nil, fmt.Errorf("tree hash %d is not stored (%d are)", x, len(t.hashes))
		}
		out[i] = t.hashes[x]
	}
	return out, nil
}

// add appends the record whose canonical form is canonical.
func (t *memTree) add(canonical []byte) error {
	hs, err := tlog.StoredHashes(t.n, canonical, t)
	if err != nil {
		return err
	}
	t.hashes = append(t.hashes, hs...)
	t.n++
	return nil
}

// root answers the tree hash of the first n records.
func (t *memTree) root(n uint64) (tlog.Hash, error) {
	if n > uint64(t.n) {
		return tlog.Hash{}, fmt.Errorf("a tree of %d events holds no tree of %d", t.n, n)
	}
	return tlog.TreeHash(int64(n), t)
}
