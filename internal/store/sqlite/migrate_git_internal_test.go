package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/storetest"
)

// TestMigrationToGitKeepsEveryRevision ensures that a file of schema 7, whose revisions name
// flat trees, upgrades without loss: every old revision answers its old files and tree digest
// and gets the git tree of those files, each mainline gets one commit per revision from its
// first on, the changes read back as they were, a second open changes nothing, and the queue
// and Integrate go on from the migrated mainlines.
func TestMigrationToGitKeepsEveryRevision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ag.db")
	start := time.Date(2026, 3, 2, 9, 30, 0, 123456000, time.UTC)
	content := storetest.NewLegacyContent(start)

	old := migrateTo(t, path, gitMigration-1)
	writeLegacyContent(t, old, content)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	clk := clock.NewFake(start.Add(24 * time.Hour))
	db, err := Open(ctx, path, store.Options{Clock: clk})
	if err != nil {
		t.Fatalf("Open a file of schema %d: %v", gitMigration-1, err)
	}
	first := storetest.CheckGitMigration(t, db, content)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// The backfill run again over what it wrote finds nothing to do.
	w, err := sql.Open("sqlite3", dsn(path, "_txlock", "immediate"))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := backfillGit(ctx, tx, ""); err != nil {
		t.Fatalf("backfillGit on a migrated file: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = Open(ctx, path, store.Options{Clock: clk})
	if err != nil {
		t.Fatalf("Open the migrated file again: %v", err)
	}
	defer db.Close()
	if second := storetest.CheckGitMigration(t, db, content); !maps.Equal(second, first) {
		t.Fatalf("the git ids after a second open are\n  %v\nwant those of the first\n  %v", second, first)
	}
	storetest.CompactMigrated(t, db, content, first)
	storetest.AdvanceMigratedQueue(t, db, content)
	storetest.IntegrateOnMigrated(t, db, content, first)
}

// The content and every check are storetest's, shared with the PostgreSQL store's
// git_migration_test.go; only the SQL that writes the old layout is this backend's.

// writeLegacyContent writes lc with the statements of the build of schema 7, the one before
// gitMigration.
func writeLegacyContent(t *testing.T, db *sql.DB, lc storetest.LegacyContent) {
	t.Helper()
	exec := func(query string, args ...any) {
		t.Helper()
		if _, err := db.Exec(query, args...); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
	}
	for _, c := range lc.Blobs() {
		exec(`INSERT INTO blobs (digest, content, size) VALUES (?, ?, ?)`, repo.Digest([]byte(c)), []byte(c), len(c))
	}
	for _, r := range lc.Repositories() {
		var validation any
		if r.Validation != nil {
			validation = r.Validation
		}
		exec(`INSERT INTO repositories (name, mainline, validation, created_at) VALUES (?, ?, ?, ?)`,
			r.Name, r.Mainline[0].ID, validation, r.CreatedAt.UnixMicro())
	}
	for _, r := range lc.Revisions {
		tree := r.Tree()
		exec(`INSERT OR IGNORE INTO trees (digest, encoding) VALUES (?, ?)`, tree.Digest(), tree.Encode())
		exec(`INSERT INTO revisions (id, repository, parent, change_id, author, tree_digest, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, r.ID, r.Repository, r.Parent, r.ChangeID, r.Author, tree.Digest(), r.CreatedAt.UnixMicro())
	}
	for _, c := range lc.Changes {
		paths, err := json.Marshal(c.Paths)
		if err != nil {
			t.Fatal(err)
		}
		var edits any
		if e := c.EditsJSON(); e != nil {
			edits = string(e)
		}
		exec(`INSERT INTO changes (id, repository, state, base_revision, candidate_revision, integrated_revision, author,
			message, paths, job_id, attestation_digest, reason, edits, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			c.ID, c.Repository, string(c.State), c.BaseRevision, c.CandidateRevision, c.IntegratedRevision, c.Holder,
			c.Message, string(paths), c.JobID, c.AttestationDigest, c.Reason, edits, c.CreatedAt.UnixMicro(), c.UpdatedAt.UnixMicro())
	}
}
