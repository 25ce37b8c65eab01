package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// TestGroupQueuesCallsAndRunsThemTogether ensures that calls arriving while every statement
// slot is busy wait, then go together in batches of calls that fit, in arrival order, and
// that every call gets its own answer.
func TestGroupQueuesCallsAndRunsThemTogether(t *testing.T) {
	var g group[int, int]
	var mu sync.Mutex
	var batches [][]int
	release := make(chan struct{})
	run := func(_ context.Context, calls []*call[int, int]) {
		ps := make([]int, len(calls))
		for i, c := range calls {
			ps[i] = c.p
			c.r = c.p * 10
		}
		mu.Lock()
		batches = append(batches, ps)
		first := len(batches) <= groupBusy
		mu.Unlock()
		if first {
			<-release // hold the slots until the others have queued
		}
	}
	// Even and odd numbers never share a batch.
	fits := func(batch []*call[int, int], c *call[int, int]) bool { return batch[0].p%2 == c.p%2 }

	var wg sync.WaitGroup
	results := make([]int, 10)
	do := func(p int) {
		defer wg.Done()
		r, err := g.do(context.Background(), p, run, fits)
		if err != nil {
			t.Errorf("call %d: %v", p, err)
		}
		results[p] = r
	}
	for p := range groupBusy {
		wg.Add(1)
		go do(p)
	}
	waitFor(t, "the first calls to take every slot", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(batches) == groupBusy
	})
	for p := groupBusy; p < 10; p++ {
		wg.Add(1)
		go do(p)
		waitFor(t, fmt.Sprintf("call %d to queue", p), func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.queue) == p-groupBusy+1
		})
	}
	close(release)
	wg.Wait()

	for p, r := range results {
		if r != p*10 {
			t.Errorf("call %d answered %d, want %d", p, r, p*10)
		}
	}
	var queued [][]int
	for _, b := range batches[groupBusy:] {
		if !slices.IsSorted(b) {
			t.Errorf("batch %v is not in arrival order", b)
		}
		for _, p := range b[1:] {
			if p%2 != b[0]%2 {
				t.Errorf("batch %v mixes calls that do not fit", b)
			}
		}
		queued = append(queued, b)
	}
	if len(queued) != 2 {
		t.Errorf("the 8 queued calls ran in batches %v, want 2 batches (even and odd)", queued)
	}
	if g.busy != 0 || len(g.queue) != 0 {
		t.Errorf("after all calls: busy %d, queue %d; want 0, 0", g.busy, len(g.queue))
	}
}

// TestGroupCallLeavesTheQueueWhenCancelled ensures that a call whose context ends while it is
// queued answers at once and never runs.
func TestGroupCallLeavesTheQueueWhenCancelled(t *testing.T) {
	var g group[int, int]
	release := make(chan struct{})
	var mu sync.Mutex
	var ran []int
	run := func(_ context.Context, calls []*call[int, int]) {
		for _, c := range calls {
			mu.Lock()
			ran = append(ran, c.p)
			mu.Unlock()
			if c.p < groupBusy {
				<-release
			}
		}
	}
	fits := func([]*call[int, int], *call[int, int]) bool { return true }
	var wg sync.WaitGroup
	for p := range groupBusy {
		wg.Go(func() { g.do(context.Background(), p, run, fits) })
	}
	waitFor(t, "the first calls to take every slot", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == groupBusy
	})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := g.do(ctx, 100, run, fits)
		errc <- err
	}()
	waitFor(t, "the call to queue", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.queue) == 1
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled queued call: err = %v, want %v", err, context.Canceled)
	}
	close(release)
	wg.Wait()
	if slices.Contains(ran, 100) {
		t.Errorf("the cancelled call ran")
	}
	if g.busy != 0 || len(g.queue) != 0 {
		t.Errorf("after all calls: busy %d, queue %d; want 0, 0", g.busy, len(g.queue))
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// openWithFakeClock opens a fresh database of the private cluster on a fake clock, closed when
// t ends.
func openWithFakeClock(t *testing.T) (*DB, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	db, err := Open(context.Background(), pgtest.NewDatabase(t), store.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, clk
}

// TestClaimGroupHandsOutJobsInClaimOrder ensures that the claimers of one statement get
// distinct jobs, the first claimer the best, each with its own worker and lease, that those
// left over get none, and that claimers of other kinds are not served jobs of this kind.
func TestClaimGroupHandsOutJobsInClaimOrder(t *testing.T) {
	t.Parallel()
	db, clk := openWithFakeClock(t)
	ctx := context.Background()
	var want []string // claim order
	for _, prio := range []int32{1, 5, 3} {
		j, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "k", Priority: prio, MaxAttempts: 3})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, j.ID)
	}
	want[0], want[1], want[2] = want[1], want[2], want[0]
	other, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "other", Priority: 9, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}

	calls := make([]*claimCall, 4)
	for i := range calls {
		calls[i] = &claimCall{ctx: ctx, p: store.ClaimJobParams{
			Holder: fmt.Sprintf("p|w%d", i), Kinds: []string{"k"}, Lease: time.Duration(i+1) * time.Minute}}
	}
	if err := db.claimTogether(ctx, calls); err != nil {
		t.Fatalf("claimTogether: %v", err)
	}
	for i, c := range calls {
		if i == 3 {
			if len(c.r) != 0 {
				t.Errorf("claimer 3 of 3 jobs got %s, want none", c.r[0].ID)
			}
			continue
		}
		if len(c.r) != 1 || c.r[0].ID != want[i] {
			t.Fatalf("claimer %d got %v, want job %s", i, c.r, want[i])
		}
		j := &c.r[0]
		if j.State != store.JobClaimed || j.Holder != c.p.Holder || j.ClaimNumber != 1 ||
			j.Lease != c.p.Lease || !j.LeaseExpiresAt.Equal(clk.Now().Add(c.p.Lease)) {
			t.Errorf("claimer %d: job %+v, want claimed by %s, attempt 1, lease %v", i, *j, c.p.Holder, c.p.Lease)
		}
	}
	if got, _ := db.GetJob(ctx, other.ID); got.State != store.JobQueued {
		t.Errorf("job of another kind is %s, want queued", got.State)
	}
}

// TestCompleteGroupChecksEachClaim ensures that one statement completing several jobs applies
// each claim check on its own: the current claims complete (and their attestation is stored),
// the stale ones are refused as lost claims and change nothing, and an unknown job is not
// found.
func TestCompleteGroupChecksEachClaim(t *testing.T) {
	t.Parallel()
	db, _ := openWithFakeClock(t)
	ctx := context.Background()
	var jobs []*store.Job
	for i := range 4 {
		if _, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "k", MaxAttempts: 3}); err != nil {
			t.Fatal(err)
		}
		j, err := db.ClaimJob(ctx, store.ClaimJobParams{Holder: fmt.Sprintf("p|w%d", i), Lease: time.Minute})
		if err != nil || j == nil {
			t.Fatalf("ClaimJob = %v, %v", j, err)
		}
		jobs = append(jobs, j)
	}
	att := func(i int) *store.Attestation {
		return &store.Attestation{Digest: fmt.Sprintf("sha256:%064d", i), Envelope: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	params := []store.CompleteJobParams{
		{JobID: jobs[0].ID, Holder: jobs[0].Holder, ClaimNumber: 1, Result: []byte(`{"a":1}`), Output: "o0", Attestation: att(0)},
		{JobID: jobs[1].ID, Holder: jobs[1].Holder, ClaimNumber: 2, Output: "stale", Attestation: att(1)},
		{JobID: jobs[2].ID, Holder: "p|someone-else", Output: "not mine"},
		{JobID: jobs[3].ID, Holder: jobs[3].Holder, Output: "o3", OutputDigest: "d3"},
		{JobID: "job_unknown", Holder: "p|w0", Output: "none"},
	}
	calls := make([]*completeCall, len(params))
	for i, p := range params {
		calls[i] = &completeCall{ctx: ctx, p: p}
	}
	done, err := db.completeTogether(ctx, calls)
	if err != nil {
		t.Fatalf("completeTogether: %v", err)
	}
	if ids := slices.Sorted(maps.Keys(done)); !slices.Equal(ids, sortedIDs(jobs[0], jobs[3])) {
		t.Fatalf("the statement completed %v, want the jobs of the current claims", ids)
	}
	calls[0].r, calls[3].r = done[jobs[0].ID], done[jobs[3].ID]
	// The others are run alone, to explain their refusals.
	db.completeGroup(ctx, []*completeCall{calls[1], calls[2], calls[4]})

	for _, i := range []int{0, 3} {
		c := calls[i]
		if c.err != nil {
			t.Fatalf("completion %d: %v", i, c.err)
		}
		if c.r.State != store.JobCompleted || c.r.Output != c.p.Output || c.r.OutputDigest != c.p.OutputDigest ||
			string(c.r.Result) != string(c.p.Result) {
			t.Errorf("completion %d answered %+v", i, c.r)
		}
	}
	if calls[0].r.AttestationDigest != att(0).Digest {
		t.Errorf("attestation digest %q, want %q", calls[0].r.AttestationDigest, att(0).Digest)
	}
	if a, err := db.GetAttestation(ctx, att(0).Digest); err != nil || string(a.Envelope) != string(att(0).Envelope) || a.JobID != jobs[0].ID {
		t.Errorf("GetAttestation of the completed job = %+v, %v", a, err)
	}
	for _, i := range []int{1, 2} {
		var lost *store.LostClaimError
		if !errors.As(calls[i].err, &lost) {
			t.Errorf("stale completion %d: err = %v, want a lost claim", i, calls[i].err)
		}
		if got, _ := db.GetJob(ctx, jobs[i].ID); got.State != store.JobClaimed || got.Output != "" {
			t.Errorf("refused completion %d changed the job: %+v", i, got)
		}
	}
	if _, err := db.GetAttestation(ctx, att(1).Digest); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("attestation of a refused completion: err = %v, want not found", err)
	}
	if !errors.Is(calls[4].err, store.ErrNotFound) {
		t.Errorf("completion of an unknown job: err = %v, want not found", calls[4].err)
	}
}

func sortedIDs(jobs ...*store.Job) []string {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	slices.Sort(ids)
	return ids
}

// TestCompleteManyFits ensures that chunks of CompleteJobs calls share a statement only while
// together they hold at most completeChunkMax completions, of distinct jobs.
func TestCompleteManyFits(t *testing.T) {
	chunk := func(first, n int) *completeManyCall {
		c := &completeManyCall{}
		for i := range n {
			c.p = append(c.p, &completeCall{p: store.CompleteJobParams{JobID: fmt.Sprintf("job_%d", first+i)}})
		}
		return c
	}
	for _, tc := range []struct {
		name  string
		batch []*completeManyCall
		c     *completeManyCall
		want  bool
	}{
		{"distinct jobs within the limit", []*completeManyCall{chunk(0, 100), chunk(100, 100)}, chunk(200, 56), true},
		{"one completion past the limit", []*completeManyCall{chunk(0, 100), chunk(100, 100)}, chunk(200, 57), false},
		{"a job of the batch again", []*completeManyCall{chunk(0, 10), chunk(10, 10)}, chunk(19, 2), false},
	} {
		if got := completeManyFits(tc.batch, tc.c); got != tc.want {
			t.Errorf("%s: completeManyFits = %v, want %v", tc.name, got, tc.want)
		}
	}
}
