package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// TestAuditLookupsUseIndexes ensures that, in the generic plans of the store's connections and
// on a long log, a seal finds the pending records and seals them through audit_records_pending,
// a listing walks audit_records_seq and a tree hash is found through the blocks' primary key:
// never a scan of the log.
func TestAuditLookupsUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(ctx, pgtest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// 100,000 sealed records of one event, 500 pending ones, and the blocks of 100,000 seals.
	_, err = db.pool.Exec(ctx, `
INSERT INTO audit_records (events, seq, prev_hash, hashes)
SELECT '[{"t":0,"p":"ag","h":"","a":"job.expired","s":"job/job_' || g || '","d":{"claim":1,"state":"failed"}}]',
	CASE WHEN g <= 100000 THEN g END, CASE WHEN g <= 100000 THEN '\x00'::bytea END, CASE WHEN g <= 100000 THEN '\x01'::bytea END
FROM generate_series(1, 100500) AS g;
INSERT INTO audit_tree_blocks (first, hashes) SELECT 2 * g, '\x02'::bytea FROM generate_series(0, 99999) AS g;
ANALYZE`)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()

	cases := []struct {
		name, sql, args, index string
	}{
		{"seal read", sealReadSQL, "1000, 100400", "audit_records_pending"},
		{"seal write", sealWriteSQL, "'{100001,100002}', '{100001,100002}', NULL, NULL, 200000, NULL, 100002, NULL, 100002, NULL, NULL, NULL, NULL, 100000",
			"audit_records_pending"},
		{"list", listAuditRecordsSQL, "5000, 5999", "audit_records_seq"},
		{"tree hashes", readAuditHashesSQL, "'{7,150001}'", "audit_tree_blocks_pkey"},
	}
	for _, c := range cases {
		if _, err := conn.Exec(ctx, "DEALLOCATE ALL"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "PREPARE s AS "+c.sql); err != nil {
			t.Fatalf("%s: PREPARE: %v", c.name, err)
		}
		// EXPLAIN without ANALYZE plans the statement and runs nothing.
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE s("+c.args+")")
		if err != nil {
			t.Fatalf("%s: EXPLAIN: %v", c.name, err)
		}
		var plan strings.Builder
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan.WriteString(line + "\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: EXPLAIN: %v", c.name, err)
		}
		if strings.Contains(plan.String(), "Seq Scan on audit_records") || strings.Contains(plan.String(), "Seq Scan on audit_tree_blocks") ||
			!strings.Contains(plan.String(), c.index) {
			t.Errorf("the plan of %s scans the log or does not use %s:\n%s", c.name, c.index, plan.String())
		}
	}
}
