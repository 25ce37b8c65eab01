package postgres

import (
	"testing"

	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/storetest"
)

// TestBlobPartsKeepsOnlyReadableParts ensures that uploads that complete, complete a blob
// already stored, are dropped or start again leave no part behind that neither a stored blob
// nor an upload under way names: nothing would ever read or delete it.
func TestBlobPartsKeepsOnlyReadableParts(t *testing.T) {
	t.Parallel()
	d, clk := openWithFakeClock(t)
	want := storetest.LeaveBlobParts(t, d, clk)
	var parts, strays int
	if err := d.pool.QueryRow(t.Context(), `SELECT count(*),
		count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM blobs b WHERE b.parts_key = p.parts_key)
			AND NOT EXISTS (SELECT 1 FROM blob_uploads u WHERE u.parts_key = p.parts_key))
		FROM blob_parts p`).Scan(&parts, &strays); err != nil {
		t.Fatal(err)
	}
	if parts != want || strays != 0 {
		t.Fatalf("the store keeps %d parts, %d of them named by no blob or upload; want %d, none", parts, strays, want)
	}
}

// TestADeltaAgainstABlobInPartsReads: a delta whose base a race left stored in parts reads
// back whole.
func TestADeltaAgainstABlobInPartsReads(t *testing.T) {
	t.Parallel()
	d, clk := openWithFakeClock(t)
	storetest.ADeltaAgainstABlobInPartsReads(t, d, clk, func(b store.PackedBlob) {
		if _, err := d.pool.Exec(t.Context(), `INSERT INTO blobs (digest, content, size, git_id, stored_as) VALUES ($1, $2, $3, $4, $5)`,
			b.Digest, b.Data, b.Size, b.GitID[:], b.StoredAs); err != nil {
			t.Fatal(err)
		}
	})
}
