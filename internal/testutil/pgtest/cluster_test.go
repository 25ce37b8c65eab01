package pgtest

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestCluster ensures a Cluster started outside the tests' shared one serves a database of
// its own, keeps its data across a crash restart (with durable commits), and is gone after
// Stop.
func TestCluster(t *testing.T) {
	if err := Available(); err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("PostgreSQL is required (%s=1) but unavailable: %v", EnvRequire, err)
		}
		t.Skipf("no PostgreSQL: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := StartCluster()
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	defer c.Stop()
	url, err := c.CreateDatabase(ctx, "clustertest")
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec("SET synchronous_commit = on; CREATE TABLE t (x int); INSERT INTO t VALUES (42)")

	if err := c.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect after the restart: %v", err)
	}
	var x int
	if err := conn.QueryRow(ctx, "SELECT x FROM t").Scan(&x); err != nil || x != 42 {
		t.Errorf("after the restart: SELECT x = %d, %v; want 42", x, err)
	}
	conn.Close(ctx)

	dir := c.Dir()
	c.Stop()
	c.Stop() // a second Stop does nothing
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster directory %s still there after Stop (stat: %v)", dir, err)
	}
}
