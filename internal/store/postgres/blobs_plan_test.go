package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// TestMissingBlobLookupsUseIndexes ensures that the generic plans of FindMissingBlobs and
// FindMissingGitObjects, made while the tables are small (as after a fresh import, before
// autovacuum analyzes them), probe the indexes one digest at a time: a plan that scans the
// table stays on the connection and costs each later call the whole table.
func TestMissingBlobLookupsUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(ctx, pgtest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.pool.Exec(ctx, `
INSERT INTO blobs (digest, content, size, git_id)
SELECT 'sha256:' || lpad(to_hex(g), 64, '0'), 'x', 1, decode(lpad(to_hex(g), 40, '0'), 'hex')
FROM generate_series(1, 600) AS g;
INSERT INTO git_objects (id, type, data)
SELECT decode(lpad(to_hex(g + 100000), 40, '0'), 'hex'), 2, 'x' FROM generate_series(1, 600) AS g;
ANALYZE`); err != nil {
		t.Fatal(err)
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	cases := []struct{ name, sql, arg string }{
		{"missing blobs", missingBlobsSQL, `'{sha256:` + strings.Repeat("a", 64) + `}'`},
		{"missing git objects", missingGitObjectsSQL, `ARRAY['\x` + strings.Repeat("ab", 20) + `'::bytea]`},
	}
	for _, c := range cases {
		plan := genericPlan(ctx, t, conn, c.name, c.sql, c.arg)
		for _, bad := range []string{"Seq Scan on blobs", "Seq Scan on git_objects", "Hash"} {
			if strings.Contains(plan, bad) {
				t.Errorf("the plan of %s has %q:\n%s", c.name, bad, plan)
			}
		}
	}
}
