package storetest

import (
	"iter"
	"slices"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/ag-coord/ag/internal/store"
)

// What tests that keep a log of their own need from a store.AuditSeal, whose hashes are flat.

// SealedEvents answers pending as seal places them after head: each event with its seq, prev
// hash and hash, as ListAuditEvents answers it once stored. The hashes share seal's memory.
func SealedEvents(head store.AuditHead, pending []store.AuditEvent, seal store.AuditSeal) []store.AuditEvent {
	out := slices.Clone(pending)
	prev := head.Hash
	if head.Size == 0 {
		prev = make([]byte, store.AuditHashSize)
	}
	for i := range out {
		out[i].Seq = head.Size + uint64(i) + 1
		out[i].PrevHash = prev
		if lo := i * store.AuditHashSize; lo+store.AuditHashSize <= len(seal.Hashes) {
			out[i].Hash = seal.Hashes[lo : lo+store.AuditHashSize : lo+store.AuditHashSize]
		}
		prev = out[i].Hash
	}
	return out
}

// SealTreeHashes yields the tree hashes that seal, of events after head, adds, each with its
// index.
func SealTreeHashes(head store.AuditHead, seal store.AuditSeal) iter.Seq2[int64, []byte] {
	const size = store.AuditHashSize
	return func(yield func(int64, []byte) bool) {
		first := tlog.StoredHashCount(int64(head.Size))
		for i := 0; (i+1)*size <= len(seal.TreeHashes); i++ {
			if !yield(first+int64(i), seal.TreeHashes[i*size:(i+1)*size:(i+1)*size]) {
				return
			}
		}
	}
}
