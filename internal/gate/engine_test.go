package gate_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/postgres"
	"github.com/ag-coord/ag/internal/store/sqlite"
	"github.com/ag-coord/ag/internal/store/storetest"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestQueueEngine runs the queue engine's tests (storetest.RunGate: its decisions carried out
// through each backend's queue transaction, with a fake clock) on SQLite and on PostgreSQL.
func TestQueueEngine(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		storetest.RunGate(t, func(t testing.TB, clk clock.Clock) store.Store {
			return opened[*sqlite.DB](t)(sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ag.db"), store.Options{Clock: clk}))
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		storetest.RunGate(t, func(t testing.TB, clk clock.Clock) store.Store {
			return opened[*postgres.DB](t)(postgres.Open(context.Background(), pgtest.NewDatabase(t), store.Options{Clock: clk}))
		})
	})
}

// opened fails t unless a store opened, and closes it when t ends.
func opened[S store.Store](t testing.TB) func(S, error) store.Store {
	return func(st S, err error) store.Store {
		t.Helper()
		if err != nil {
			t.Fatalf("open the store: %v", err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
}
