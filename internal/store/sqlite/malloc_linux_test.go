//go:build linux && cgo

package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ag-coord/ag/internal/store"
)

// TestWritesReuseFreedMemory ensures that claims and completions run on memory the process
// already has. Each of the store's UPDATE … RETURNING statements allocates and frees a block
// of about 85 KiB (the page cache of the table RETURNING fills), among others; with glibc's
// defaults such memory often went back to the kernel and was faulted in again by the next
// statement, a page fault per 4 KiB, on the writer every write waits for.
func TestWritesReuseFreedMemory(t *testing.T) {
	ctx := context.Background()
	d, err := Open(ctx, filepath.Join(t.TempDir(), "ag.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const warmUp, measured, batch, workers = 2000, 8000, 32, 8
	// Eight workers at once, so that the writer commits their calls in groups, as under load.
	inParallel := func(each func(worker string)) {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() { each(fmt.Sprintf("w%d", w)) })
		}
		wg.Wait()
	}
	inParallel(func(string) {
		for range (warmUp + measured) / workers {
			if _, _, err := d.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "build", Payload: []byte(`{"tree":"t"}`), MaxAttempts: 1}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	claimAndComplete := func(worker string, jobs int) {
		for done := 0; done < jobs; {
			claimed, err := d.ClaimJobs(ctx, store.ClaimJobParams{Holder: worker, Kinds: []string{"build"}, Lease: time.Hour, Max: min(batch, jobs-done)})
			if err != nil || len(claimed) == 0 {
				t.Errorf("ClaimJobs: %d jobs, %v", len(claimed), err)
				return
			}
			ps := make([]store.CompleteJobParams, len(claimed))
			for i, j := range claimed {
				ps[i] = store.CompleteJobParams{JobID: j.ID, Holder: worker, ClaimNumber: j.ClaimNumber, Result: []byte(`{"passed":true}`)}
			}
			outs, err := d.CompleteJobs(ctx, ps)
			if err != nil {
				t.Error(err)
				return
			}
			for _, o := range outs {
				if o.Err != nil {
					t.Error(o.Err)
					return
				}
			}
			done += len(claimed)
		}
	}
	faults := func() int64 {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return ru.Minflt
	}
	// The first jobs bring the connections' caches and the heaps to their working size.
	inParallel(func(w string) { claimAndComplete(w, warmUp/workers) })
	before := faults()
	inParallel(func(w string) { claimAndComplete(w, measured/workers) })
	got := faults() - before
	t.Logf("%d page faults in %d claims and completions", got, measured)
	// Not zero: the Go heap may still grow. A fault per job or more is the allocator handing
	// memory back to the kernel and taking it again.
	if got >= measured {
		t.Errorf("%d page faults in %d claims and completions, want fewer than one per job: freed memory goes back to the kernel", got, measured)
	}
}
