package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/clock"
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
	if err := d.r.QueryRowContext(t.Context(), `SELECT count(*),
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
		if err := d.write(t.Context(), "insert a row as a race leaves it", func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO blobs (digest, content, size, git_id, stored_as) VALUES (?, ?, ?, ?, ?)`,
				b.Digest, b.Data, b.Size, b.GitID[:], b.StoredAs)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// openWithFakeClock opens a fresh database file on a fake clock, closed when t ends.
func openWithFakeClock(t *testing.T) (*DB, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
	d, err := Open(t.Context(), filepath.Join(t.TempDir(), "ag.db"), store.Options{Clock: clk})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d, clk
}
