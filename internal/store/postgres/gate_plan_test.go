package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// TestQueueLookupsUseTheQueueIndex ensures that the reads of the integration queue (its changes,
// a change's place in it, the repositories with pending work) walk the queue's index in the
// generic plans that the store's connections use, on repositories with a long history of
// finished changes: never a scan of every change.
func TestQueueLookupsUseTheQueueIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(ctx, pgtest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// 40,000 changes in two repositories, the last 20 of each still in the queue.
	_, err = db.pool.Exec(ctx, `
INSERT INTO changes (id, repository, state, base_revision, author, edits, created_at, updated_at)
SELECT 'chg_' || g, CASE WHEN g % 2 = 0 THEN 'r' ELSE 's' END,
	CASE WHEN g > 39960 THEN 'queued' WHEN g % 10 = 0 THEN 'rejected' ELSE 'integrated' END,
	'rev_1', 'agent|w', '[]', now(), now()
FROM generate_series(1, 40000) AS g;
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
	}{
		{"pending", pendingSQL, "'r', 1024"},
		{"get change", getChangeSQL, "'chg_39990'"},
		{"pending queues", pendingQueuesSQL, ""},
	}
	for _, c := range cases {
		plan := genericPlan(ctx, t, conn, c.name, c.sql, c.args)
		if strings.Contains(plan, "Seq Scan on changes") || !strings.Contains(plan, "changes_queue") {
			t.Errorf("the plan of %s does not walk changes_queue:\n%s", c.name, plan)
		}
	}
}

// TestLiveCandidatesUseTheirIndex ensures that every advance's read of the live candidates walks
// candidates_live, however many candidates a repository's history holds.
func TestLiveCandidatesUseTheirIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(ctx, pgtest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.pool.Exec(ctx, `
INSERT INTO repositories (name, mainline, created_at) VALUES ('r', 'rev_0', now()), ('s', 'rev_0', now());
INSERT INTO candidates (id, repository, state, revision, parent_revision, job_id, created_at, updated_at)
SELECT 'cnd_' || g, CASE WHEN g % 2 = 0 THEN 'r' ELSE 's' END,
	CASE WHEN g > 39990 THEN 'validating' WHEN g % 7 = 0 THEN 'superseded' ELSE 'landed' END,
	'rev_' || g, 'rev_' || (g - 1), 'job_' || g, now(), now()
FROM generate_series(1, 40000) AS g;
ANALYZE`)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	plan := genericPlan(ctx, t, conn, "live candidates", liveCandidatesSQL, "'r'")
	if strings.Contains(plan, "Seq Scan on candidates") || !strings.Contains(plan, "candidates_live") {
		t.Errorf("the plan of the live candidates does not walk candidates_live:\n%s", plan)
	}
}
