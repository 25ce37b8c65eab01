package sqlite

import (
	"crypto/sha256"
	"path/filepath"
	"testing"

	"github.com/ag-coord/ag/internal/store"
)

// TestMigrationToApprovalsKeepsPrincipalsTokensAndChanges fills a file of schema version 14
// (before reviewers and approvals) with a principal, its token and worker key, and a change,
// then opens it with this build: migration 15 rebuilds principals, tokens, worker_keys and
// changes to widen their constraints, and nothing may be lost on the way.
func TestMigrationToApprovalsKeepsPrincipalsTokensAndChanges(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ag.db")
	old := migrateTo(t, path, 14)
	hash := sha256.Sum256([]byte("secret-token"))
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO principals (id, name, role, disabled, created_at) VALUES ('prn_1', 'alice', 'agent', 0, 1)`, nil},
		{`INSERT INTO tokens (id, principal, hash, created_at) VALUES ('tok_1', 'alice', ?, 1)`, []any{hash[:]}},
		{`INSERT INTO worker_keys (key_id, principal, public_key, created_at) VALUES ('sha256:k', 'alice', x'00', 1)`, nil},
		{`INSERT INTO repositories (name, mainline, created_at) VALUES ('web', 'rev_1', 1)`, nil},
		{`INSERT INTO changes (id, repository, state, base_revision, author, paths, created_at, updated_at)
			VALUES ('chg_1', 'web', 'queued', 'rev_1', 'alice|w1', '["a.go"]', 1, 1)`, nil},
	} {
		if _, err := old.Exec(q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	db, err := Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatalf("Open of a version 14 file: %v", err)
	}
	defer db.Close()
	p, tok, err := db.Authenticate(t.Context(), hash[:])
	if err != nil || p.Name != "alice" || p.Role != store.RoleAgent || tok.ID != "tok_1" {
		t.Fatalf("Authenticate after the migration = %+v, %+v, %v; want alice's token tok_1", p, tok, err)
	}
	if keys, err := db.ListWorkerKeys(t.Context(), "alice"); err != nil || len(keys) != 1 {
		t.Fatalf("ListWorkerKeys(alice) after the migration = %v, %v; want her one key", keys, err)
	}
	c, err := db.GetChange(t.Context(), "chg_1")
	if err != nil || c.State != store.ChangeQueued || c.Holder != "alice|w1" || c.ApprovedBy != "" {
		t.Fatalf("GetChange after the migration = %+v, %v; want the queued change, unapproved", c, err)
	}
	if _, _, err := db.CreatePrincipal(t.Context(), store.CreatePrincipalParams{Name: "carol", Role: store.RoleReviewer,
		TokenID: "tok_2", TokenHash: make([]byte, 32)}); err != nil {
		t.Fatalf("CreatePrincipal(reviewer) after the migration: %v", err)
	}
	var violations int
	if err := db.r.QueryRow(`SELECT count(*) FROM pragma_foreign_key_check`).Scan(&violations); err != nil || violations != 0 {
		t.Fatalf("foreign key check after the migration: %d violations, %v", violations, err)
	}
}
