package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

// TestCheckpointerCopiesTheWALIntoTheDatabase ensures that writes reach the database file
// while the store is open, by the checkpointer: a megabyte of jobs, far below the WAL size at
// which the writer would checkpoint by itself, is in the file well before Close.
func TestCheckpointerCopiesTheWALIntoTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ag.db")
	d, err := Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()
	payload := []byte(`{"blob":"` + strings.Repeat("x", 1000) + `"}`)
	for range 1000 {
		if _, _, err := d.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "build", Payload: payload, MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// The checkpointer runs every checkpointEvery; a slow machine may take many more.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(20 * time.Second)
	for size() < before+1_000_000 {
		if time.Now().After(deadline) {
			t.Fatalf("the database file grew from %d to %d bytes after a megabyte of jobs: the WAL was not checkpointed", before, size())
		}
		<-tick.C
	}
}
