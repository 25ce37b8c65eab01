package sqlite

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

// TestMigrationToLeasePathFoldsBackfillsLiveLeases writes a live lease on "Café.txt" in the
// layout before lease_paths.fold, then opens the file with this build: the old lease must
// conflict with another holder's lease on another spelling, as one granted after would.
func TestMigrationToLeasePathFoldsBackfillsLiveLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ag.db")
	old := migrateTo(t, path, leasePathFoldMigration-1)
	far := time.Now().Add(time.Hour).UnixMicro()
	for _, q := range []string{
		`INSERT INTO repositories (name, mainline, created_at, lease_counter) VALUES ('web', 'rev_none', 0, 1)`,
		`INSERT INTO leases (id, repository, holder, token, state, paths, acquired_at, expires_at)
			VALUES ('lse_old', 'web', 'alice|w1', 1, 'active', '["Caf\u00e9.txt"]', 0, ` + strconv.FormatInt(far, 10) + `)`,
		`INSERT INTO lease_paths (lease_id, repository, path, token) VALUES ('lse_old', 'web', 'Caf` + "\u00e9" + `.txt', 1)`,
	} {
		if _, err := old.Exec(q); err != nil {
			old.Close()
			t.Fatalf("write the rows of schema %d: %v", leasePathFoldMigration-1, err)
		}
	}
	old.Close()
	d, err := Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatalf("Open a file of schema %d: %v", leasePathFoldMigration-1, err)
	}
	defer d.Close()
	_, err = d.AcquireLease(ctx, store.AcquireLeaseParams{Repository: "web", Holder: "bob|w1", TTL: time.Minute,
		Paths: []string{"cafe\u0301.TXT"}})
	if err == nil {
		t.Fatal("a lease on another spelling of a lease granted before the migration was granted, want a conflict")
	}
	var fold string
	if err := d.r.QueryRowContext(ctx, `SELECT fold FROM lease_paths WHERE lease_id = 'lse_old'`).Scan(&fold); err != nil || fold != "caf\u00e9.txt" {
		t.Fatalf("the backfilled fold is %q, %v; want %q", fold, err, "caf\u00e9.txt")
	}
}
