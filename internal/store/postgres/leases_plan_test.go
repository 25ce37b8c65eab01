package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// TestLeaseLookupsUseIndexes ensures that the overlap and staleness lookups of grants, renewals
// and integrations, and the list of live leases, are index lookups in the generic plans that
// the store's connections use, on a repository with a long history of leases: never a scan of
// the lease tables, and never a range of a directory checked row by row as a join filter.
func TestLeaseLookupsUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(ctx, pgtest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, r := range []string{"r", "s"} {
		if _, err := db.CreateRepository(ctx, store.CreateRepositoryParams{Name: r, CreatedBy: "admin"}); err != nil {
			t.Fatal(err)
		}
	}
	// 40,000 grants in two repositories over 300 directories, one in 20 still active.
	_, err = db.pool.Exec(ctx, `
INSERT INTO leases (id, repository, holder, token, paths, state, acquired_at, expires_at)
SELECT 'lse_' || g, CASE WHEN g % 2 = 0 THEN 'r' ELSE 's' END, 'agent' || (g % 50) || '|w', g,
	ARRAY['d' || (g % 300) || '/f' || (g % 1000) || '.go'],
	CASE WHEN g % 20 = 0 THEN 'active' ELSE 'released' END, now(), now() + interval '1 hour'
FROM generate_series(1, 40000) AS g;
INSERT INTO lease_paths (lease_id, repository, path, fold, token, active)
SELECT id, repository, paths[1], paths[1], token, state = 'active' FROM leases;
ANALYZE`)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()

	paths := []string{"d7/f7.go", "d8/"}
	oa := newOverlapArgs(paths)
	cases := []struct {
		name string
		sql  string
		args []any
	}{
		{"acquire", acquireSQL, append(append([]any{nil, "r", "x|y"}, oa.args()...), "lse_new", paths, int64(60e6), foldAll(paths), int64(1000))},
		{"superseded", supersededSQL, append([]any{"r", int64(5)}, oa.args()...)},
		{"lease check", leaseCheckSQL, []any{"r", []int64{3, 7}, []string{"d7/", "d7/f7.go", "d9/", "d9/f9.go"}}},
		{"list live leases", listLiveLeasesSQL, []any{nil, "r", int64(0), "", 101}},
	}
	for _, c := range cases {
		lits := make([]string, len(c.args))
		for i, a := range c.args {
			lits[i] = sqlLiteral(a)
		}
		plan := genericPlan(ctx, t, conn, c.name, c.sql, strings.Join(lits, ", "))
		for _, bad := range []string{"Seq Scan on lease", "Join Filter", "Hash"} {
			if strings.Contains(plan, bad) {
				t.Errorf("the plan of %s has %q:\n%s", c.name, bad, plan)
			}
		}
	}
}

// sqlLiteral writes the test's arguments as SQL literals (no quotes inside).
func sqlLiteral(a any) string {
	switch v := a.(type) {
	case nil:
		return "NULL"
	case string:
		return "'" + v + "'"
	case int, int64:
		return fmt.Sprint(v)
	case []int32:
		return "'{" + strings.Trim(strings.Join(strings.Fields(fmt.Sprint(v)), ","), "[]") + "}'"
	case []int64:
		return "'{" + strings.Trim(strings.Join(strings.Fields(fmt.Sprint(v)), ","), "[]") + "}'"
	case []string:
		quoted := make([]string, len(v))
		for i, s := range v {
			quoted[i] = `"` + s + `"`
		}
		return "'{" + strings.Join(quoted, ",") + "}'"
	}
	panic(fmt.Sprintf("sqlLiteral: %T", a))
}
