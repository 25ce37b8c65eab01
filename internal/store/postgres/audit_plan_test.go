package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// TestAuditLookupsUseIndexes ensures that, in the generic plans of the store's connections and
// on a long log, a seal finds the pending records through the records' primary key, a listing
// walks the seals' primary key and finds their records through the records', and a tree hash is
// found through the blocks' primary key: never a scan of the log.
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
INSERT INTO audit_records (id, events)
SELECT g,
	'[{"t":0,"p":"ag","h":"","a":"job.expired","s":"job/job_' || g || '","d":{"claim":1,"state":"failed"}}]'
FROM generate_series(1, 100500) AS g;
INSERT INTO audit_seals (seq, record_id, prev_hash, hashes)
SELECT g, g, '\x00', '\x01' FROM generate_series(1, 100000) AS g;
UPDATE audit_head SET size = 100000, last_id = 100000;
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
		name, sql, args string
		indexes         []string
	}{
		{"seal read", sealReadSQL, "1000, 100000, 100500", []string{"audit_records_pkey"}},
		{"list", listAuditRecordsSQL, "5000, 5999", []string{"audit_seals_pkey", "audit_records_pkey"}},
		{"tree hashes", readAuditHashesSQL, "'{7,150001}'", []string{"audit_tree_blocks_pkey"}},
	}
	for _, c := range cases {
		plan := genericPlan(ctx, t, conn, c.name, c.sql, c.args)
		if strings.Contains(plan, "Seq Scan on audit_records") || strings.Contains(plan, "Seq Scan on audit_seals") ||
			strings.Contains(plan, "Seq Scan on audit_tree_blocks") {
			t.Errorf("the plan of %s scans the log:\n%s", c.name, plan)
		}
		for _, index := range c.indexes {
			if !strings.Contains(plan, index) {
				t.Errorf("the plan of %s does not use %s:\n%s", c.name, index, plan)
			}
		}
	}
}
