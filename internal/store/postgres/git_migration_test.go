package postgres_test

import (
	"maps"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/postgres"
	"github.com/ag-coord/ag/internal/store/storetest"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// TestMigrationToGitKeepsEveryRevision ensures that a database of schema 8, whose revisions
// name flat trees, upgrades without loss: every old revision answers its old files and tree
// digest and gets the git tree of those files, each mainline gets one commit per revision from
// its first on, the changes read back as they were, a second open changes nothing, and the
// queue and Integrate go on from the migrated mainlines.
func TestMigrationToGitKeepsEveryRevision(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	if err := postgres.MigrateTo(ctx, url, postgres.GitMigration-1); err != nil {
		t.Fatalf("migrate to schema %d: %v", postgres.GitMigration-1, err)
	}
	start := time.Date(2026, 3, 2, 9, 30, 0, 123456000, time.UTC)
	content := storetest.NewLegacyContent(start)
	writeLegacyContent(t, connect(t, url), content)

	clk := clock.NewFake(start.Add(24 * time.Hour))
	db, err := postgres.Open(ctx, url, store.Options{Clock: clk})
	if err != nil {
		t.Fatalf("Open a database of schema %d: %v", postgres.GitMigration-1, err)
	}
	first := storetest.CheckGitMigration(t, db, content)
	db.Close()

	// The backfill run again over what it wrote finds nothing to do.
	if err := postgres.BackfillGit(ctx, url); err != nil {
		t.Fatalf("the git backfill on a migrated database: %v", err)
	}

	db = open(t, url, clk)
	if second := storetest.CheckGitMigration(t, db, content); !maps.Equal(second, first) {
		t.Fatalf("the git ids after a second open are\n  %v\nwant those of the first\n  %v", second, first)
	}
	storetest.CompactMigrated(t, db, content, first)
	storetest.AdvanceMigratedQueue(t, db, content)
	storetest.IntegrateOnMigrated(t, db, content, first)
}

// The content and every check are storetest's, shared with the SQLite store's
// migrate_git_internal_test.go; only the SQL that writes the old layout is this backend's.

// writeLegacyContent writes lc with the statements of the build of schema 8, the one before
// postgres.GitMigration.
func writeLegacyContent(t *testing.T, conn *pgx.Conn, lc storetest.LegacyContent) {
	t.Helper()
	exec := func(query string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(t.Context(), query, args...); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
	}
	var digests []string
	var contents [][]byte
	for _, c := range lc.Blobs() {
		digests, contents = append(digests, repo.Digest([]byte(c))), append(contents, []byte(c))
	}
	exec(`INSERT INTO blobs (digest, content, size)
		SELECT d, c, octet_length(c) FROM unnest($1::text[], $2::bytea[]) AS u(d, c)
		ON CONFLICT (digest) DO NOTHING`, digests, contents)
	for _, r := range lc.Repositories() {
		var validation any
		if r.Validation != nil {
			validation = r.Validation
		}
		exec(`INSERT INTO repositories (name, mainline, validation, created_at) VALUES ($1, $2, $3, $4)`,
			r.Name, r.Mainline[0].ID, validation, r.CreatedAt)
	}
	for _, r := range lc.Revisions {
		tree := r.Tree()
		exec(`INSERT INTO trees (digest, encoding) VALUES ($1, $2) ON CONFLICT (digest) DO NOTHING`, tree.Digest(), tree.Encode())
		exec(`INSERT INTO revisions (id, repository, parent, change_id, author, tree_digest, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, r.ID, r.Repository, r.Parent, r.ChangeID, r.Author, tree.Digest(), r.CreatedAt)
	}
	for _, c := range lc.Changes {
		var edits any
		if e := c.EditsJSON(); e != nil {
			edits = string(e)
		}
		exec(`INSERT INTO changes (id, repository, state, base_revision, candidate_revision, integrated_revision, author,
			message, paths, job_id, attestation_digest, reason, edits, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::jsonb, $14, $15)`,
			c.ID, c.Repository, string(c.State), c.BaseRevision, c.CandidateRevision, c.IntegratedRevision, c.Holder,
			c.Message, c.Paths, c.JobID, c.AttestationDigest, c.Reason, edits, c.CreatedAt, c.UpdatedAt)
	}
}
