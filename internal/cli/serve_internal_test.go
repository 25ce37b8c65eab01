package cli

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// TestServeProcs ensures ag serve runs a SQLite store with one Go processor more than the
// runtime's default, a PostgreSQL store with the default, and either with the GOMAXPROCS an
// operator set.
func TestServeProcs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lite, err := OpenStore(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ag.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	pg, err := OpenStore(ctx, pgtest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	for _, c := range []struct {
		name  string
		st    store.Store
		procs int
		env   string
		want  int
	}{
		{"sqlite", lite, 2, "", 3},
		{"sqlite, GOMAXPROCS set", lite, 2, "2", 2},
		{"postgres", pg, 2, "", 2},
		{"postgres, GOMAXPROCS set", pg, 4, "4", 4},
	} {
		if got := serveProcs(c.st, c.procs, c.env); got != c.want {
			t.Errorf("%s: serveProcs with %d processors and GOMAXPROCS=%q = %d, want %d", c.name, c.procs, c.env, got, c.want)
		}
	}
}
