package audit

import (
	"bytes"
	"fmt"
	"slices"

	"golang.org/x/mod/sumdb/tlog"
)

// VerifyError names the first event of a log that does not verify, and why. Seq is the place
// in the log (1, 2, ...) where the check failed: the event found there, or the one missing.
type VerifyError struct {
	Seq    uint64
	Reason string
}

func (e *VerifyError) Error() string { return fmt.Sprintf("event %d: %s", e.Seq, e.Reason) }

// VerifyResult is what Verify found in a log that verifies.
type VerifyResult struct {
	// Events is how many events were checked, all in one chain.
	Events uint64
	// Covered is how many of them the checkpoint covers (its size); the remaining
	// Events-Covered are chained to them but not yet signed.
	Covered uint64
	Root    tlog.Hash
	Head    []byte
}

// Uncovered answers how many events verified in the chain after the checkpoint's last one, with
// no signature over them yet.
func (r VerifyResult) Uncovered() uint64 { return r.Events - r.Covered }

// Verify checks a log against a checkpoint (whose signature the caller checked with
// OpenCheckpoint): events run seq 1, 2, 3, ... without a gap, each prev_hash is the previous
// event's hash (32 zero bytes for event 1), each hash is ChainHash(prev_hash, Canonical(event)),
// the Merkle tree of the first cp.Size events has hash cp.Root and event cp.Size has hash
// cp.Head. Events after cp.Size are chain-checked too; the result tells how many there are.
//
// It answers a *VerifyError for the first event that does not verify: an edited event fails its
// hash; a deleted one leaves a gap in the seqs (or, renumbered, breaks the next event's prev hash
// or hash); an inserted or reordered one breaks the seqs, a prev hash or a hash; a log that
// ends before cp.Size names the first missing event. A chain rebuilt after a change (every hash
// recomputed) is caught by the checkpoint, and named at its size.
func Verify(events []Event, cp Checkpoint) (VerifyResult, error) {
	tree, err := verifyChain(events)
	if err != nil {
		return VerifyResult{}, err
	}
	if err := checkCheckpoint(events, tree, cp, "the checkpoint"); err != nil {
		return VerifyResult{}, err
	}
	return VerifyResult{Events: uint64(len(events)), Covered: cp.Size, Root: cp.Root, Head: bytes.Clone(cp.Head)}, nil
}

// verifyChain checks the seqs, prev hashes and hashes of events and answers their Merkle tree.
func verifyChain(events []Event) (*memTree, error) {
	tree := &memTree{hashes: make([]tlog.Hash, 0, 2*len(events))}
	prev := zeroHash
	for i, e := range events {
		want := uint64(i) + 1
		bad := func(format string, args ...any) (*memTree, error) {
			return nil, &VerifyError{Seq: want, Reason: fmt.Sprintf(format, args...)}
		}
		switch {
		case e.Seq > want && slices.ContainsFunc(events[i+1:], func(l Event) bool { return l.Seq == want }):
			return bad("the event found here has seq %d, and event %d comes later: events were reordered", e.Seq, want)
		case e.Seq > want:
			return bad("missing: the log goes on with event %d, so %s deleted", e.Seq, plural(e.Seq-want, "this event was", "events %d to %d were", want, e.Seq-1))
		case e.Seq < want:
			return bad("the event found here has seq %d: an event was inserted before it, or events were reordered", e.Seq)
		case len(e.PrevHash) != HashSize:
			return bad("prev_hash has %d bytes, want %d", len(e.PrevHash), HashSize)
		case !bytes.Equal(e.PrevHash, prev) && want == 1:
			return bad("prev_hash is not zero, as the first event's must be")
		case !bytes.Equal(e.PrevHash, prev):
			return bad("prev_hash is not the hash of event %d: an event before it was deleted, inserted or changed (with its hash), or events were reordered", want-1)
		}
		canonical, err := Canonical(e)
		if err != nil {
			return bad("%v", err)
		}
		if !bytes.Equal(ChainHash(e.PrevHash, canonical), e.Hash) {
			return bad("hash does not match the event's content: the event was changed (%s)", describe(e))
		}
		if err := tree.add(canonical); err != nil {
			return nil, err
		}
		prev = e.Hash
	}
	return tree, nil
}

// checkCheckpoint checks that the first cp.Size of verified events are those cp states.
func checkCheckpoint(events []Event, tree *memTree, cp Checkpoint, what string) error {
	if cp.Size == 0 {
		return fmt.Errorf("%s covers no event", what)
	}
	if uint64(len(events)) < cp.Size {
		return &VerifyError{Seq: uint64(len(events)) + 1, Reason: fmt.Sprintf(
			"missing: %s covers %d events, the log ends after %d (truncated)", what, cp.Size, len(events))}
	}
	if !bytes.Equal(events[cp.Size-1].Hash, cp.Head) {
		return &VerifyError{Seq: cp.Size, Reason: fmt.Sprintf(
			"hash is not the head of %s: the chain up to here was rebuilt after a change", what)}
	}
	root, err := tree.root(cp.Size)
	if err != nil {
		return err
	}
	if root != cp.Root {
		return &VerifyError{Seq: cp.Size, Reason: fmt.Sprintf(
			"the Merkle tree of events 1 to %d has hash %s, not the root hash of %s", cp.Size, root, what)}
	}
	return nil
}

// RootAt answers the Merkle tree hash of the first size events (sealed, in seq order; their
// chain is not checked: see Verify).
func RootAt(events []Event, size uint64) (tlog.Hash, error) {
	if size > uint64(len(events)) {
		return tlog.Hash{}, fmt.Errorf("a tree of %d events from a log of %d", size, len(events))
	}
	tree := &memTree{hashes: make([]tlog.Hash, 0, 2*size)}
	for _, e := range events[:size] {
		canonical, err := Canonical(e)
		if err != nil {
			return tlog.Hash{}, fmt.Errorf("event %d: %w", e.Seq, err)
		}
		if err := tree.add(canonical); err != nil {
			return tlog.Hash{}, err
		}
	}
	return tree.root(size)
}

// Consistent checks that a log (which Verify accepted against a newer checkpoint) extends old,
// a checkpoint verified earlier: its chain verifies, and its first old.Size events have old's
// Merkle root and head. A log that was truncated below old, or rewritten, is refused with a
// *VerifyError.
func Consistent(events []Event, old Checkpoint) error {
	tree, err := verifyChain(events)
	if err != nil {
		return err
	}
	return checkCheckpoint(events, tree, old, fmt.Sprintf("the checkpoint of %d events verified before", old.Size))
}

func plural(n uint64, one, many string, args ...any) string {
	if n == 1 {
		return one
	}
	return fmt.Sprintf(many, args...)
}

// describe names an event in an error: "<action> <subject> by <principal>".
func describe(e Event) string {
	who := e.Principal
	if e.Holder != "" {
		who = e.Holder
	}
	return fmt.Sprintf("%s %s by %s", e.Action, e.Subject, who)
}
