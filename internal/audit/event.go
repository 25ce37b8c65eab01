package audit

import "time"

// Event is one event of the audit log, as the stores keep it and exports carry it.
type Event struct {
	ID        int64  // the stored record holding it (one per transaction): insertion order, internal to the store
	Seq       uint64 // 0 until sealed; then 1, 2, ... in seal order
	Time      time.Time
	Principal string
	Holder    string
	Action    string
	Subject   string
	Details   []byte // JSON object, or nil
	PrevHash  []byte // 32 bytes once sealed (all zero for seq 1)
	Hash      []byte // 32 bytes once sealed
}

// Head is the end of the sealed chain: its size and the hash of its last event (nil for
// an empty log).
type Head struct {
	Size uint64
	Hash []byte
}

// StoredCheckpoint is what a store keeps of a checkpoint: a signed statement of the log's size, Merkle root and head hash.
type StoredCheckpoint struct {
	Size      uint64
	RootHash  []byte
	HeadHash  []byte
	Note      []byte // the signed note (C2SP checkpoint)
	CreatedAt time.Time
}

// Seal is what a seal stores. Its hashes are flat, HashSize bytes each: a seal of a
// thousand events would otherwise allocate thousands of small slices that only get copied into
// a few rows (storetest.SealedEvents expands them into events, for tests that want them).
type Seal struct {
	// Hashes holds each pending event's chain hash, in order: the i-th event is seq
	// head.Size+i+1, and the hash before it is its prev hash.
	Hashes []byte
	// TreeHashes holds the stored hashes of the Merkle tree the seal adds, in tlog's numbering,
	// from index tlog.StoredHashCount(head.Size) on.
	TreeHashes []byte
	Head       Head
	Checkpoint StoredCheckpoint
}
