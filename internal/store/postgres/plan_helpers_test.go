package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// genericPlan prepares sql on conn, whose plan_cache_mode is force_generic_plan as on every
// connection of the store, and answers EXPLAIN of its execution with args (SQL literals,
// comma-separated; "" for none): the plan every later call on such a connection runs. EXPLAIN
// without ANALYZE plans the statement and runs nothing. It is sent as text: DEALLOCATE ALL
// drops the statements pgx prepared for the cases before.
func genericPlan(ctx context.Context, t *testing.T, conn *pgxpool.Conn, name, sql, args string) string {
	t.Helper()
	if _, err := conn.Exec(ctx, "DEALLOCATE ALL"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "PREPARE s AS "+sql); err != nil {
		t.Fatalf("%s: PREPARE: %v", name, err)
	}
	execute := "EXPLAIN EXECUTE s"
	if args != "" {
		execute += "(" + args + ")"
	}
	rows, err := conn.Query(ctx, execute, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatalf("%s: EXPLAIN: %v", name, err)
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
		t.Fatalf("%s: EXPLAIN: %v", name, err)
	}
	return plan.String()
}
