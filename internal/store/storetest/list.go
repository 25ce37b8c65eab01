package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

// listAll pages through ListJobs with pages of size limit and answers every job, failing the
// test on a page that is larger than asked or a token on a page that ends nothing.
func (b *bundle) listAll(t *testing.T, p store.ListJobsParams) (jobs []store.Job, pages int) {
	t.Helper()
	seen := map[string]bool{}
	for {
		page, next, err := b.st.ListJobs(b.ctx, p)
		if err != nil {
			t.Fatalf("ListJobs(%+v): %v", p, err)
		}
		pages++
		if p.Limit > 0 && len(page) > p.Limit {
			t.Fatalf("ListJobs page %d has %d jobs, more than the limit %d", pages, len(page), p.Limit)
		}
		if next != "" && len(page) == 0 {
			t.Fatalf("ListJobs page %d is empty but has a next page token", pages)
		}
		for _, j := range page {
			if seen[j.ID] {
				t.Fatalf("ListJobs answered job %s twice (page %d)", j.ID, pages)
			}
			seen[j.ID] = true
		}
		jobs = append(jobs, page...)
		if next == "" {
			return jobs, pages
		}
		if pages > 1000 {
			t.Fatalf("ListJobs did not end after %d pages", pages)
		}
		p.PageToken = next
	}
}

func testListJobs(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	page, next, err := b.st.ListJobs(b.ctx, store.ListJobsParams{})
	if err != nil || len(page) != 0 || next != "" {
		t.Fatalf("ListJobs of an empty store = %d jobs, next %q, %v; want none", len(page), next, err)
	}

	var all []store.Job
	for i := range 6 {
		kind := "build"
		if i%2 == 1 {
			kind = "validate"
		}
		// Higher priority for later jobs, so that claims do not follow creation order.
		all = append(all, b.enqueue(t, store.EnqueueJobParams{Kind: kind, Priority: int32(i)}))
		b.clk.Advance(time.Second)
	}
	// Claim the two newest (highest priority): all[5] validate, all[4] build; complete all[5].
	b.mustClaim(t, "p|w1", time.Minute)
	b.mustClaim(t, "p|w1", time.Minute)
	if _, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: all[5].ID, Holder: "p|w1", Attestation: attestation(all[5].ID, "passed")}); err != nil {
		t.Fatalf("CompleteJob: %v", err)
	}

	check := func(what string, p store.ListJobsParams, want ...store.Job) {
		t.Helper()
		got, _ := b.listAll(t, p)
		if !slices.Equal(ids(got), ids(want)) {
			t.Fatalf("ListJobs %s = %v, want %v", what, ids(got), ids(want))
		}
		for i := range got {
			assertJob(t, "ListJobs "+what+": job "+got[i].ID, got[i], b.get(t, got[i].ID))
		}
	}
	check("(all)", store.ListJobsParams{}, all[5], all[4], all[3], all[2], all[1], all[0])
	check("(queued)", store.ListJobsParams{States: []store.JobState{store.JobQueued}}, all[3], all[2], all[1], all[0])
	check("(claimed, completed)", store.ListJobsParams{States: []store.JobState{store.JobClaimed, store.JobCompleted}}, all[5], all[4])
	check("(failed)", store.ListJobsParams{States: []store.JobState{store.JobFailed}})
	check("(validate)", store.ListJobsParams{Kinds: []string{"validate"}}, all[5], all[3], all[1])
	check("(build, deploy)", store.ListJobsParams{Kinds: []string{"build", "deploy"}}, all[4], all[2], all[0])
	check("(queued validate)", store.ListJobsParams{States: []store.JobState{store.JobQueued}, Kinds: []string{"validate"}}, all[3], all[1])
	check("(queued validate, pages of 1)", store.ListJobsParams{States: []store.JobState{store.JobQueued}, Kinds: []string{"validate"}, Limit: 1}, all[3], all[1])
}

func testListJobsPages(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	var created []string
	for i := range 23 {
		// Priorities and delays vary so that no other order coincides with creation order.
		j := b.enqueue(t, store.EnqueueJobParams{Priority: int32(i % 3), Delay: time.Duration(23-i) * time.Second})
		created = append(created, j.ID)
	}
	newestFirst := reversed(created)

	for _, limit := range []int{1, 5, 7, 22, 23, 24, 1000} {
		got, pages := b.listAll(t, store.ListJobsParams{Limit: limit})
		if !slices.Equal(ids(got), newestFirst) {
			t.Fatalf("ListJobs in pages of %d = %v, want %v", limit, ids(got), newestFirst)
		}
		// The last page has no token, even when it is full: 23 jobs in pages of 23 are one page.
		if want := (23 + limit - 1) / limit; pages != want {
			t.Fatalf("ListJobs in pages of %d took %d pages, want %d", limit, pages, want)
		}
	}

	// The default page size is 100.
	page, next, err := b.st.ListJobs(b.ctx, store.ListJobsParams{})
	if err != nil || len(page) != 23 || next != "" {
		t.Fatalf("ListJobs with the default limit = %d jobs, next %q, %v; want 23 and no next page", len(page), next, err)
	}

	// A token stays valid while jobs are added: the next page goes on from where the first
	// ended, and new jobs appear only on a fresh listing.
	first, next, err := b.st.ListJobs(b.ctx, store.ListJobsParams{Limit: 10})
	if err != nil || next == "" {
		t.Fatalf("ListJobs(limit 10) = next %q, %v", next, err)
	}
	added := b.enqueue(t, store.EnqueueJobParams{})
	rest, _ := b.listAll(t, store.ListJobsParams{Limit: 10, PageToken: next})
	if got := append(ids(first), ids(rest)...); !slices.Equal(got, newestFirst) {
		t.Fatalf("ListJobs across an enqueue = %v, want %v", got, newestFirst)
	}
	fresh, _, err := b.st.ListJobs(b.ctx, store.ListJobsParams{Limit: 1})
	if err != nil || len(fresh) != 1 || fresh[0].ID != added.ID {
		t.Fatalf("a fresh ListJobs = %v, %v; want the new job %s first", ids(fresh), err, added.ID)
	}
}

func testListJobsBadToken(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	b.enqueue(t, store.EnqueueJobParams{})
	for _, token := range []string{"!!!", "%%%", "a b"} {
		_, _, err := b.st.ListJobs(b.ctx, store.ListJobsParams{PageToken: token})
		wantErr(t, "ListJobs(page token "+token+")", err, store.ErrInvalidPageToken)
	}
}

func testCountJobs(t *testing.T, newStore Factory) {
	b := setup(t, newStore)
	counts, err := b.st.CountJobs(b.ctx)
	if err != nil {
		t.Fatalf("CountJobs: %v", err)
	}
	for s, n := range counts {
		if n != 0 {
			t.Fatalf("CountJobs of an empty store: %s = %d", s, n)
		}
	}

	var jobs []store.Job
	for i := range 7 {
		jobs = append(jobs, b.enqueue(t, store.EnqueueJobParams{Priority: int32(10 - i)}))
	}
	// jobs[0..3] claimed in priority order; 0 completed, 1 failed, 2 cancel-requested; 4 cancelled.
	for range 4 {
		b.mustClaim(t, "p|w1", time.Minute)
	}
	if _, err := b.st.CompleteJob(b.ctx, store.CompleteJobParams{JobID: jobs[0].ID, Holder: "p|w1"}); err != nil {
		t.Fatalf("CompleteJob: %v", err)
	}
	if _, err := b.st.FailJob(b.ctx, store.FailJobParams{JobID: jobs[1].ID, Holder: "p|w1", Error: "x", Final: true}); err != nil {
		t.Fatalf("FailJob: %v", err)
	}
	for _, id := range []string{jobs[2].ID, jobs[4].ID} {
		if _, err := b.st.CancelJob(b.ctx, id); err != nil {
			t.Fatalf("CancelJob: %v", err)
		}
	}
	counts, err = b.st.CountJobs(b.ctx)
	if err != nil {
		t.Fatalf("CountJobs: %v", err)
	}
	want := map[store.JobState]int64{
		store.JobQueued: 2, store.JobClaimed: 2, store.JobCompleted: 1, store.JobFailed: 1, store.JobCancelled: 1,
	}
	for _, s := range []store.JobState{store.JobQueued, store.JobClaimed, store.JobCompleted, store.JobFailed, store.JobCancelled} {
		if counts[s] != want[s] {
			t.Fatalf("CountJobs = %v, want %v", counts, want)
		}
	}
	if len(counts) > 5 {
		t.Fatalf("CountJobs = %v: states that do not exist", counts)
	}
}
