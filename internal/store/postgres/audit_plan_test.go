package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// TestAuditLookupsUseIndexes ensures that, in the generic plans of the store's connections and
// on a long log, a seal finds the pending events and seals them through audit_events_pending,
// and a listing walks audit_events_seq: never a scan of the log.
func TestAuditLookupsUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(ctx, pgtest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// 100,000 sealed events and 500 pending ones.
	_, err = db.pool.Exec(ctx, `
INSERT INTO audit_events (time, principal, holder, action, subject, details, seq, prev_hash, hash)
SELECT now(), 'ag', '', 'job.expired', 'job/job_' || g, '{"claim":1,"state":"failed"}',
	CASE WHEN g <= 100000 THEN g END, CASE WHEN g <= 100000 THEN '\x00'::bytea END, CASE WHEN g <= 100000 THEN '\x01'::bytea END
FROM generate_series(1, 100500) AS g;
ANALYZE`)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()

	ids := "'{100001,100002}'"
	cases := []struct {
		name, sql, args, index string
	}{
		{"seal read", sealReadSQL, "1000", "audit_events_pending"},
		{"seal write", sealWriteSQL, ids + ", '{100001,100002}', NULL, NULL, '{}', NULL, 2, NULL, 2, NULL, NULL, NULL, NULL, 0",
			"audit_events_pending"},
		{"list", listAuditEventsSQL, "5000, 1000", "audit_events_seq"},
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
		if strings.Contains(plan.String(), "Seq Scan on audit_events") || !strings.Contains(plan.String(), c.index) {
			t.Errorf("the plan of %s scans the log or does not use %s:\n%s", c.name, c.index, plan.String())
		}
	}
}
