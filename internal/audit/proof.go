package audit

import (
	"errors"
	"fmt"
	"math"

	"golang.org/x/mod/sumdb/tlog"
)

// HashesFunc reads the Merkle tree's stored hashes at indexes (tlog.StoredHashIndex numbering),
// in order, as store.AuditStore's ReadAuditHashes does.
type HashesFunc = func(indexes []int64) ([][]byte, error)

// hashReader adapts a HashesFunc to tlog.HashReader, checking what it answers.
func hashReader(hashes HashesFunc) tlog.HashReader {
	return tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		raw, err := hashes(indexes)
		if err != nil {
			return nil, err
		}
		return toHashes(indexes, raw)
	})
}

func toHashes(indexes []int64, raw [][]byte) ([]tlog.Hash, error) {
	if len(raw) != len(indexes) {
		return nil, fmt.Errorf("read %d tree hashes, got %d", len(indexes), len(raw))
	}
	out := make([]tlog.Hash, len(raw))
	for i, h := range raw {
		if len(h) != HashSize {
			return nil, fmt.Errorf("tree hash %d: %d bytes, want %d", indexes[i], len(h), HashSize)
		}
		out[i] = tlog.Hash(h)
	}
	return out, nil
}

func int64Size(n uint64) (int64, error) {
	if n > math.MaxInt64 {
		return 0, fmt.Errorf("tree size %d out of range", n)
	}
	return int64(n), nil
}

// InclusionProof answers the RFC 6962 audit path proving that event seq is in the tree of the
// first treeSize events, reading stored hashes with hashes.
func InclusionProof(seq, treeSize uint64, hashes HashesFunc) ([][]byte, error) {
	if seq == 0 || seq > treeSize || treeSize > math.MaxInt64 {
		return nil, fmt.Errorf("event %d is not in a tree of %d events", seq, treeSize)
	}
	p, err := tlog.ProveRecord(int64(treeSize), int64(seq-1), hashReader(hashes))
	if err != nil {
		return nil, fmt.Errorf("inclusion proof of event %d in %d: %w", seq, treeSize, err)
	}
	return fromHashes(p), nil
}

// ConsistencyProof answers the RFC 6962 proof that the tree of the first oldSize events is a
// prefix of the tree of the first newSize, reading stored hashes with hashes.
func ConsistencyProof(oldSize, newSize uint64, hashes HashesFunc) ([][]byte, error) {
	if oldSize == 0 || oldSize > newSize || newSize > math.MaxInt64 {
		return nil, fmt.Errorf("no consistency proof from %d to %d events", oldSize, newSize)
	}
	p, err := tlog.ProveTree(int64(newSize), int64(oldSize), hashReader(hashes))
	if err != nil {
		return nil, fmt.Errorf("consistency proof from %d to %d: %w", oldSize, newSize, err)
	}
	return fromHashes(p), nil
}

// ErrProof is wrapped by CheckInclusion's and CheckConsistency's errors when a proof does not
// check.
var ErrProof = errors.New("proof does not check")

// CheckInclusion checks that proof proves the event of seq whose canonical form is canonical
// to be in the tree of treeSize events whose hash is root.
func CheckInclusion(proof [][]byte, treeSize uint64, root tlog.Hash, seq uint64, canonical []byte) error {
	t, err := int64Size(treeSize)
	if err != nil {
		return err
	}
	if seq == 0 || seq > treeSize {
		return fmt.Errorf("event %d is not in a tree of %d events", seq, treeSize)
	}
	p, err := toHashes(make([]int64, len(proof)), proof)
	if err != nil {
		return fmt.Errorf("inclusion proof: %w", err)
	}
	if err := tlog.CheckRecord(p, t, root, int64(seq-1), LeafHash(canonical)); err != nil {
		return fmt.Errorf("%w: event %d is not in the tree of %d events with root %s", ErrProof, seq, treeSize, root)
	}
	return nil
}

// CheckConsistency checks that proof proves the tree of oldSize events with hash oldRoot to be
// a prefix of the tree of newSize events with hash newRoot.
func CheckConsistency(proof [][]byte, oldSize uint64, oldRoot tlog.Hash, newSize uint64, newRoot tlog.Hash) error {
	n, err := int64Size(newSize)
	if err != nil {
		return err
	}
	if oldSize == 0 || oldSize > newSize {
		return fmt.Errorf("no consistency from %d to %d events", oldSize, newSize)
	}
	p, err := toHashes(make([]int64, len(proof)), proof)
	if err != nil {
		return fmt.Errorf("consistency proof: %w", err)
	}
	if err := tlog.CheckTree(p, n, newRoot, int64(oldSize), oldRoot); err != nil {
		return fmt.Errorf("%w: the tree of %d events (root %s) is not a prefix of the tree of %d (root %s)", ErrProof, oldSize, oldRoot, newSize, newRoot)
	}
	return nil
}

func fromHashes(hs []tlog.Hash) [][]byte {
	out := make([][]byte, len(hs))
	for i := range hs {
		out[i] = hs[i][:]
	}
	return out
}
