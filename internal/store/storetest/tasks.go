package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

// The tests of tasks, their fenced claims (ADR-0012's rule: a claim's number is the task's
// attempts after it) and the messages between agents (store.TaskStore).

func (b *rbundle) createTask(t *testing.T, repository, title string, priority int32, dependsOn ...string) store.Task {
	t.Helper()
	task, err := b.st.CreateTask(b.ctx, store.CreateTaskParams{Repository: repository, Title: title, Priority: priority,
		DependsOn: dependsOn, CreatedBy: "alice"})
	if err != nil {
		t.Fatalf("CreateTask(%s, %q): %v", repository, title, err)
	}
	return task
}

func (b *rbundle) task(t *testing.T, id string) store.Task {
	t.Helper()
	task, err := b.st.GetTask(b.ctx, id)
	if err != nil {
		t.Fatalf("GetTask(%s): %v", id, err)
	}
	return task
}

// claimTask claims the task id ("": the first ready one) of repository for holder.
func (b *rbundle) claimTask(t *testing.T, repository, id, holder string, ttl time.Duration) store.Task {
	t.Helper()
	task, err := b.st.ClaimTask(b.ctx, store.ClaimTaskParams{Repository: repository, TaskID: id, Holder: holder, TTL: ttl})
	if err != nil {
		t.Fatalf("ClaimTask(%s, task %q, %s): %v", repository, id, holder, err)
	}
	return task
}

// listTasks answers every task ListTasks answers for p, page by page, and how many pages it took.
func (b *rbundle) listTasks(t *testing.T, p store.ListTasksParams) ([]store.Task, int) {
	t.Helper()
	var (
		all   []store.Task
		pages int
	)
	for {
		page, next, err := b.st.ListTasks(b.ctx, p)
		if err != nil {
			t.Fatalf("ListTasks(%+v): %v", p, err)
		}
		all, pages = append(all, page...), pages+1
		if next == "" {
			return all, pages
		}
		if pages > 100 {
			t.Fatalf("ListTasks(%+v) answered more than 100 pages", p)
		}
		p.PageToken = next
	}
}

func taskIDs(tasks []store.Task) []string {
	out := make([]string, len(tasks))
	for i, task := range tasks {
		out[i] = task.ID
	}
	return out
}

// wantTaskIDs fails the test unless got are the tasks want, in that order.
func wantTaskIDs(t *testing.T, what string, got []store.Task, want ...store.Task) {
	t.Helper()
	if g, w := taskIDs(got), taskIDs(want); !slices.Equal(g, w) {
		names := func(tasks []store.Task) string {
			var s []string
			for _, task := range tasks {
				s = append(s, fmt.Sprintf("%q", task.Title))
			}
			return strings.Join(s, ", ")
		}
		t.Fatalf("%s = [%s], want [%s]", what, names(got), names(want))
	}
}

// wantTaskState fails the test unless err is a *store.TaskStateError about task id (errors.Is
// ErrFailedPrecondition) whose message mentions each of mentions.
func wantTaskState(t *testing.T, what string, err error, id string, mentions ...string) {
	t.Helper()
	if !errors.Is(err, store.ErrFailedPrecondition) {
		t.Fatalf("%s: err = %v, want %v", what, err, store.ErrFailedPrecondition)
	}
	var se *store.TaskStateError
	if !errors.As(err, &se) || se.TaskID != id {
		t.Fatalf("%s: err = %v (%T), want a *store.TaskStateError about %s", what, err, err, id)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Fatalf("%s: the refusal %q does not mention %q", what, err, m)
		}
	}
}

// taskUnchanged fails the test unless the task reads as before.
func (b *rbundle) taskUnchanged(t *testing.T, before store.Task, after string) {
	t.Helper()
	if diff := diffFields(b.task(t, before.ID), before); diff != "" {
		t.Fatalf("task %s changed after %s, which was refused:\n%s", before.ID, after, diff)
	}
}

func (b *rbundle) renewTask(principal string, id string, claim uint64, ttl time.Duration) (store.Task, error) {
	return b.st.RenewTaskClaim(b.ctx, store.TaskClaimParams{TaskID: id, ClaimNumber: claim, Principal: principal, TTL: ttl})
}

func (b *rbundle) releaseTask(principal string, id string, claim uint64, done bool) (store.Task, error) {
	return b.st.ReleaseTaskClaim(b.ctx, store.TaskClaimParams{TaskID: id, ClaimNumber: claim, Principal: principal, Done: done})
}

// taskIntegrate is an Integrate by holder of an edit of src/<file> under lease, carrying the
// task claim claim of task.
func taskIntegrate(r store.Repository, holder string, lease store.Lease, file string, task store.Task, claim uint64) store.IntegrateParams {
	p := integrateParams(r.Name, r.Mainline, holder, []uint64{lease.FencingToken}, put("src/"+file, file))
	p.TaskID, p.TaskClaimNumber = task.ID, claim
	return p
}

// testCreateTask: a task is stored open with what it was given; a dependency must be a task of
// the same repository, and a refused task stores nothing.
func testCreateTask(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	b.createRepo(t, "api")
	b.clk.Advance(time.Minute)
	got, err := b.st.CreateTask(b.ctx, store.CreateTaskParams{Repository: "web", Title: "Fix the build", Body: "It fails on main.",
		Labels: []string{"ci", "p1"}, Paths: []string{"ci/", "Makefile"}, Priority: 3, CreatedBy: "alice"})
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	if !strings.HasPrefix(got.ID, "tsk_") {
		t.Fatalf("CreateTask answered the id %q, want one that starts with tsk_", got.ID)
	}
	want := store.Task{ID: got.ID, Repository: "web", Title: "Fix the build", Body: "It fails on main.",
		Labels: []string{"ci", "p1"}, Paths: []string{"ci/", "Makefile"}, Priority: 3, State: store.TaskOpen, Ready: true,
		CreatedBy: "alice", CreatedAt: b.clk.Now(), UpdatedAt: b.clk.Now()}
	assertFields(t, "CreateTask", got, want)
	assertFields(t, "GetTask", b.task(t, got.ID), want)

	dependent, err := b.st.CreateTask(b.ctx, store.CreateTaskParams{Repository: "web", Title: "Ship it", DependsOn: []string{got.ID},
		CreatedBy: "bob"})
	if err != nil {
		t.Fatalf("CreateTask with a dependency: %v", err)
	}
	if !slices.Equal(dependent.DependsOn, []string{got.ID}) || dependent.Ready || dependent.State != store.TaskOpen {
		t.Fatalf("CreateTask with a dependency = depends on %v, %s, ready %v; want it open, depending on %s, not ready",
			dependent.DependsOn, dependent.State, dependent.Ready, got.ID)
	}
	other := b.createTask(t, "api", "An api task", 0)
	for _, dep := range []string{store.NewID("tsk"), other.ID} {
		_, err := b.st.CreateTask(b.ctx, store.CreateTaskParams{Repository: "web", Title: "Bad", DependsOn: []string{got.ID, dep},
			CreatedBy: "alice"})
		var refusal *store.TaskRefusal
		if !errors.Is(err, store.ErrInvalidTask) || !errors.As(err, &refusal) || !strings.Contains(refusal.Msg, dep) {
			t.Fatalf("CreateTask depending on %s, which is not a task of web: %v (%T), want a *store.TaskRefusal naming it", dep, err, err)
		}
	}
	if _, err := b.st.CreateTask(b.ctx, store.CreateTaskParams{Repository: "nowhere", Title: "Lost", CreatedBy: "alice"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("CreateTask in an unknown repository: %v, want %v", err, store.ErrNotFound)
	}
	if all, _ := b.listTasks(t, store.ListTasksParams{Repository: "web"}); len(all) != 2 {
		t.Fatalf("web holds %d tasks after two were refused, want the 2 created", len(all))
	}
	if _, err := b.st.GetTask(b.ctx, store.NewID("tsk")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetTask of an unknown task: %v, want %v", err, store.ErrNotFound)
	}
}

// testReadyTasks: the ready tasks are the open ones whose dependencies are all done, highest
// priority first and then oldest; ClaimTask without a task takes the first of them, and a claim
// that expired makes its task ready again.
func testReadyTasks(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	b.createRepo(t, "api")
	create := func(title string, priority int32, deps ...string) store.Task {
		t.Helper()
		b.clk.Advance(time.Second)
		return b.createTask(t, "web", title, priority, deps...)
	}
	low := create("low", 0)
	highOld := create("high, older", 5)
	highNew := create("high, newer", 5)
	blocked := create("blocked", 9, low.ID)
	mid := create("mid", 2)
	// Created at one instant: creation order decides.
	sameA := b.createTask(t, "web", "same instant, first", -1)
	sameB := b.createTask(t, "web", "same instant, second", -1)
	b.createTask(t, "api", "another repository's", 100)

	ready, _ := b.listTasks(t, store.ListTasksParams{Repository: "web", Ready: true})
	wantTaskIDs(t, "ListTasks(ready)", ready, highOld, highNew, mid, low, sameA, sameB)
	for _, task := range ready {
		if !task.Ready || task.State != store.TaskOpen {
			t.Fatalf("ListTasks(ready) answered %q as %s, ready %v", task.Title, task.State, task.Ready)
		}
	}
	paged, pages := b.listTasks(t, store.ListTasksParams{Repository: "web", Ready: true, Limit: 2})
	wantTaskIDs(t, "ListTasks(ready) by pages of 2", paged, highOld, highNew, mid, low, sameA, sameB)
	if pages != 3 {
		t.Fatalf("ListTasks(ready) of 6 tasks by pages of 2 took %d pages, want 3", pages)
	}
	all, pages := b.listTasks(t, store.ListTasksParams{Repository: "web", Limit: 3})
	wantTaskIDs(t, "ListTasks by pages of 3", all, sameB, sameA, mid, blocked, highNew, highOld, low)
	if pages != 3 {
		t.Fatalf("ListTasks of 7 tasks by pages of 3 took %d pages, want 3", pages)
	}
	// A page holding the last task says there is no next page, also when it is full.
	if _, pages := b.listTasks(t, store.ListTasksParams{Repository: "web", Limit: 7}); pages != 1 {
		t.Fatalf("ListTasks of 7 tasks by pages of 7 took %d pages, want 1", pages)
	}
	if _, pages := b.listTasks(t, store.ListTasksParams{Repository: "web", Ready: true, Limit: 6}); pages != 1 {
		t.Fatalf("ListTasks(ready) of 6 tasks by pages of 6 took %d pages, want 1", pages)
	}
	if got := b.task(t, blocked.ID); got.Ready || got.State != store.TaskOpen {
		t.Fatalf("GetTask of a task whose dependency is open = %s, ready %v; want open, not ready", got.State, got.Ready)
	}
	_, err := b.st.ClaimTask(b.ctx, store.ClaimTaskParams{Repository: "web", TaskID: blocked.ID, Holder: alice, TTL: time.Minute})
	wantTaskState(t, "ClaimTask of a task whose dependency is open", err, blocked.ID, "not ready", low.ID)
	b.taskUnchanged(t, blocked, "a claim of it before its dependency was done")

	if got := b.claimTask(t, "web", "", alice, time.Minute); got.ID != highOld.ID {
		t.Fatalf("ClaimTask of the first ready task took %q, want %q", got.Title, highOld.Title)
	}
	if got := b.claimTask(t, "web", "", bob, time.Hour); got.ID != highNew.ID {
		t.Fatalf("the next ClaimTask of the first ready task took %q, want %q", got.Title, highNew.Title)
	}
	ready, _ = b.listTasks(t, store.ListTasksParams{Repository: "web", Ready: true})
	wantTaskIDs(t, "ListTasks(ready) after two claims", ready, mid, low, sameA, sameB)
	claimed, _ := b.listTasks(t, store.ListTasksParams{Repository: "web", State: store.TaskClaimed})
	wantTaskIDs(t, "ListTasks(claimed)", claimed, highNew, highOld)
	open, _ := b.listTasks(t, store.ListTasksParams{Repository: "web", State: store.TaskOpen})
	wantTaskIDs(t, "ListTasks(open)", open, sameB, sameA, mid, blocked, low)

	// Its dependency done, the blocked task is ready, and first.
	c := b.claimTask(t, "web", low.ID, alice2, time.Minute)
	if _, err := b.releaseTask("alice", low.ID, c.ClaimNumber(), true); err != nil {
		t.Fatalf("ReleaseTaskClaim(done): %v", err)
	}
	if got := b.task(t, blocked.ID); !got.Ready {
		t.Fatalf("GetTask of a task whose dependency is done = %s, ready %v; want ready", got.State, got.Ready)
	}
	ready, _ = b.listTasks(t, store.ListTasksParams{Repository: "web", Ready: true})
	wantTaskIDs(t, "ListTasks(ready) once the dependency is done", ready, blocked, mid, sameA, sameB)
	done, _ := b.listTasks(t, store.ListTasksParams{Repository: "web", State: store.TaskDone})
	wantTaskIDs(t, "ListTasks(done)", done, low)

	// alice's claim expires: the task reads open, its claim still current, and is ready again.
	b.clk.Advance(time.Minute)
	expired := b.task(t, highOld.ID)
	if expired.State != store.TaskOpen || !expired.Ready || !expired.ClaimCurrent || expired.Claimant != alice {
		t.Fatalf("a task whose claim expired reads %s, ready %v, claim current %v, claimant %s; want open, ready, alice's claim still current",
			expired.State, expired.Ready, expired.ClaimCurrent, expired.Claimant)
	}
	ready, _ = b.listTasks(t, store.ListTasksParams{Repository: "web", Ready: true})
	wantTaskIDs(t, "ListTasks(ready) once a claim expired", ready, blocked, highOld, mid, sameA, sameB)
	for _, want := range []store.Task{blocked, highOld, mid, sameA, sameB} {
		if got := b.claimTask(t, "web", "", bob, time.Hour); got.ID != want.ID {
			t.Fatalf("ClaimTask of the first ready task took %q, want %q", got.Title, want.Title)
		}
	}
	_, err = b.st.ClaimTask(b.ctx, store.ClaimTaskParams{Repository: "web", Holder: bob, TTL: time.Hour})
	wantErr(t, "ClaimTask with no ready task", err, store.ErrNotFound)
	_, err = b.st.ClaimTask(b.ctx, store.ClaimTaskParams{Repository: "nowhere", Holder: bob, TTL: time.Hour})
	wantErr(t, "ClaimTask in an unknown repository", err, store.ErrNotFound)
	_, err = b.st.ClaimTask(b.ctx, store.ClaimTaskParams{Repository: "api", TaskID: mid.ID, Holder: bob, TTL: time.Hour})
	wantErr(t, "ClaimTask of a task of another repository", err, store.ErrNotFound)
	_, err = b.st.ClaimTask(b.ctx, store.ClaimTaskParams{Repository: "web", TaskID: store.NewID("tsk"), Holder: bob, TTL: time.Hour})
	wantErr(t, "ClaimTask of an unknown task", err, store.ErrNotFound)
	if _, _, err := b.st.ListTasks(b.ctx, store.ListTasksParams{Repository: "web", Ready: true, PageToken: "bm90LWEtdG9rZW4"}); !errors.Is(err, store.ErrInvalidPageToken) {
		t.Fatalf("ListTasks(ready) with a malformed page token: %v, want %v", err, store.ErrInvalidPageToken)
	}
}

// testTaskClaimConflictAndExpiry: claim numbers grow with every claim, whoever makes it; a live
// claim of another holder is refused saying whose it is and since when; once it expired another
// holder takes the task, and the old claim is then stale for a renewal, a release and Integrate.
func testTaskClaimConflictAndExpiry(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	task := b.createTask(t, "web", "Fix the build", 0)
	b.clk.Advance(time.Minute)
	first := b.claimTask(t, "web", task.ID, alice, 10*time.Minute)
	want := task
	want.State, want.Ready, want.Attempts, want.Claimant, want.ClaimCurrent = store.TaskClaimed, false, 1, alice, true
	want.ClaimedAt, want.ClaimExpiresAt, want.UpdatedAt = b.clk.Now(), b.clk.Now().Add(10*time.Minute), b.clk.Now()
	assertFields(t, "ClaimTask", first, want)
	assertFields(t, "GetTask after ClaimTask", b.task(t, task.ID), want)
	if first.ClaimNumber() != 1 {
		t.Fatalf("the first claim's number is %d, want 1", first.ClaimNumber())
	}

	b.clk.Advance(time.Minute)
	_, err := b.st.ClaimTask(b.ctx, store.ClaimTaskParams{Repository: "web", TaskID: task.ID, Holder: bob, TTL: time.Minute})
	if !errors.Is(err, store.ErrLeaseConflict) {
		t.Fatalf("ClaimTask of a task alice holds: %v, want %v", err, store.ErrLeaseConflict)
	}
	var ce *store.TaskClaimConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("ClaimTask of a task alice holds: %v (%T), want a *store.TaskClaimConflictError", err, err)
	}
	assertFields(t, "the conflict", *ce, store.TaskClaimConflictError{TaskID: task.ID, Holder: alice, Claim: 1,
		ClaimedAt: first.ClaimedAt, ExpiresAt: first.ClaimExpiresAt})
	if msg := err.Error(); !strings.Contains(msg, alice) || !strings.Contains(msg, first.ClaimedAt.Format(time.RFC3339)) {
		t.Fatalf("the conflict says %q, want it to name %s and since when (%s)", msg, alice, first.ClaimedAt.Format(time.RFC3339))
	}
	// Another label of the same principal is another holder.
	_, err = b.st.ClaimTask(b.ctx, store.ClaimTaskParams{Repository: "web", TaskID: task.ID, Holder: alice2, TTL: time.Minute})
	wantErr(t, "ClaimTask by another label of alice", err, store.ErrLeaseConflict)
	b.taskUnchanged(t, first, "claims of it by others")

	// Expired and nobody claimed it since: still current, alice renews it.
	b.clk.Advance(10 * time.Minute)
	renewed, err := b.renewTask("alice", task.ID, 1, 5*time.Minute)
	if err != nil || !renewed.ClaimExpiresAt.Equal(b.clk.Now().Add(5*time.Minute)) || renewed.State != store.TaskClaimed {
		t.Fatalf("RenewTaskClaim of an expired claim nobody took = %v, %s, %v; want it claimed until %v", renewed.ClaimExpiresAt,
			renewed.State, err, b.clk.Now().Add(5*time.Minute))
	}
	b.clk.Advance(5 * time.Minute)
	second := b.claimTask(t, "web", task.ID, bob, time.Hour)
	if second.ClaimNumber() != 2 || second.Claimant != bob || !second.ClaimedAt.Equal(b.clk.Now()) {
		t.Fatalf("bob's claim once alice's expired = number %d by %s at %v, want number 2 by %s at %v",
			second.ClaimNumber(), second.Claimant, second.ClaimedAt, bob, b.clk.Now())
	}
	_, err = b.renewTask("alice", task.ID, 1, time.Hour)
	wantTaskState(t, "RenewTaskClaim of alice's stale claim", err, task.ID, "claim 1 is stale", bob)
	_, err = b.releaseTask("alice", task.ID, 1, false)
	wantTaskState(t, "ReleaseTaskClaim of alice's stale claim", err, task.ID, "claim 1 is stale")
	_, err = b.releaseTask("alice", task.ID, 1, true)
	wantTaskState(t, "ReleaseTaskClaim(done) of alice's stale claim", err, task.ID, "claim 1 is stale")
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	err = b.refusedIntegrate(t, "under alice's stale claim", taskIntegrate(r, alice, l, "a.go", task, 1))
	wantTaskState(t, "Integrate under alice's stale claim", err, task.ID, "claim 1 is stale")
	// Nor may alice send bob's number: the claim is bob's.
	err = b.refusedIntegrate(t, "under bob's claim by alice", taskIntegrate(r, alice, l, "a.go", task, 2))
	wantTaskState(t, "Integrate under bob's claim by alice", err, task.ID, "claim 2 is "+bob)
	b.taskUnchanged(t, second, "alice's requests with her stale claim")

	// bob renews his; alice, who is not his principal, may not; an admin may.
	if got, err := b.renewTask("bob", task.ID, 2, 2*time.Hour); err != nil || !got.ClaimExpiresAt.Equal(b.clk.Now().Add(2*time.Hour)) {
		t.Fatalf("RenewTaskClaim of bob's claim = %v, %v; want it claimed until %v", got.ClaimExpiresAt, err, b.clk.Now().Add(2*time.Hour))
	}
	_, err = b.renewTask("alice", task.ID, 2, time.Hour)
	wantTaskState(t, "RenewTaskClaim of bob's claim by alice", err, task.ID, "alice")
	if _, err := b.st.RenewTaskClaim(b.ctx, store.TaskClaimParams{TaskID: task.ID, ClaimNumber: 2, Principal: "ops", Admin: true, TTL: time.Hour}); err != nil {
		t.Fatalf("RenewTaskClaim of bob's claim by an admin: %v", err)
	}
	_, err = b.renewTask("bob", task.ID, 3, time.Hour)
	wantTaskState(t, "RenewTaskClaim of a claim never made", err, task.ID, "claim 3 was never made")
	_, err = b.renewTask("bob", task.ID, 0, time.Hour)
	wantTaskState(t, "RenewTaskClaim of claim 0", err, task.ID)
	_, err = b.renewTask("bob", store.NewID("tsk"), 1, time.Hour)
	wantErr(t, "RenewTaskClaim of an unknown task", err, store.ErrNotFound)
}

// testTaskClaimedAgainBySameHolder: a holder that claims its own task again (an agent paused
// past its claim and restarted under the same holder) gets a new number, which fences its
// earlier self.
func testTaskClaimedAgainBySameHolder(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	task := b.createTask(t, "web", "Fix the build", 0)
	old := b.claimTask(t, "web", task.ID, alice, time.Hour)
	b.clk.Advance(time.Second)
	restarted := b.claimTask(t, "web", task.ID, alice, time.Hour)
	if restarted.ClaimNumber() != 2 || restarted.Claimant != alice || !restarted.ClaimedAt.Equal(b.clk.Now()) {
		t.Fatalf("the same holder's claim of its live claim = number %d by %s at %v, want number 2 by %s now",
			restarted.ClaimNumber(), restarted.Claimant, restarted.ClaimedAt, alice)
	}
	_, err := b.renewTask("alice", task.ID, old.ClaimNumber(), time.Hour)
	wantTaskState(t, "RenewTaskClaim of the earlier claim", err, task.ID, "claim 1 is stale", "claim 2")
	_, err = b.releaseTask("alice", task.ID, old.ClaimNumber(), false)
	wantTaskState(t, "ReleaseTaskClaim of the earlier claim", err, task.ID, "claim 1 is stale")
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	err = b.refusedIntegrate(t, "under the earlier claim", taskIntegrate(r, alice, l, "a.go", task, old.ClaimNumber()))
	wantTaskState(t, "Integrate under the earlier claim", err, task.ID, "claim 1 is stale")
	b.taskUnchanged(t, restarted, "the earlier claim's requests")
	if _, err := b.renewTask("alice", task.ID, restarted.ClaimNumber(), time.Hour); err != nil {
		t.Fatalf("RenewTaskClaim of the new claim: %v", err)
	}
	// Expired, the same holder claims it again: a third number.
	b.clk.Advance(2 * time.Hour)
	if third := b.claimTask(t, "web", task.ID, alice, time.Hour); third.ClaimNumber() != 3 {
		t.Fatalf("the same holder's claim once its claim expired has number %d, want 3", third.ClaimNumber())
	}
}

// testReleaseTaskClaim: a release opens the task again and ends the claim; release with done
// finishes it without a change.
func testReleaseTaskClaim(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	task := b.createTask(t, "web", "Fix the build", 0)
	c := b.claimTask(t, "web", task.ID, alice, time.Hour)
	_, err := b.releaseTask("bob", task.ID, c.ClaimNumber(), false)
	wantTaskState(t, "ReleaseTaskClaim by another principal", err, task.ID, "bob")
	b.taskUnchanged(t, c, "bob's release")
	b.clk.Advance(time.Minute)
	released, err := b.releaseTask("alice", task.ID, c.ClaimNumber(), false)
	if err != nil {
		t.Fatalf("ReleaseTaskClaim: %v", err)
	}
	want := c
	want.State, want.Ready, want.ClaimCurrent, want.UpdatedAt = store.TaskOpen, true, false, b.clk.Now()
	assertFields(t, "ReleaseTaskClaim", released, want)
	assertFields(t, "GetTask after ReleaseTaskClaim", b.task(t, task.ID), want)
	_, err = b.renewTask("alice", task.ID, c.ClaimNumber(), time.Hour)
	wantTaskState(t, "RenewTaskClaim of a released claim", err, task.ID, "released")
	_, err = b.releaseTask("alice", task.ID, c.ClaimNumber(), false)
	wantTaskState(t, "ReleaseTaskClaim of a released claim", err, task.ID, "released")
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	err = b.refusedIntegrate(t, "under a released claim", taskIntegrate(r, alice, l, "a.go", task, c.ClaimNumber()))
	wantTaskState(t, "Integrate under a released claim", err, task.ID, "released")
	b.taskUnchanged(t, released, "requests with the released claim")

	second := b.claimTask(t, "web", "", bob, time.Hour)
	if second.ID != task.ID || second.ClaimNumber() != 2 {
		t.Fatalf("ClaimTask of the released task = %s with number %d, want %s with number 2", second.ID, second.ClaimNumber(), task.ID)
	}
	b.clk.Advance(time.Minute)
	done, err := b.st.ReleaseTaskClaim(b.ctx, store.TaskClaimParams{TaskID: task.ID, ClaimNumber: 2, Principal: "ops", Admin: true, Done: true})
	if err != nil {
		t.Fatalf("ReleaseTaskClaim(done) by an admin: %v", err)
	}
	want = second
	want.State, want.ClaimCurrent, want.DoneAt, want.UpdatedAt = store.TaskDone, false, b.clk.Now(), b.clk.Now()
	assertFields(t, "ReleaseTaskClaim(done)", done, want)
	assertFields(t, "GetTask after ReleaseTaskClaim(done)", b.task(t, task.ID), want)
	_, err = b.st.ClaimTask(b.ctx, store.ClaimTaskParams{Repository: "web", TaskID: task.ID, Holder: bob, TTL: time.Hour})
	wantTaskState(t, "ClaimTask of a done task", err, task.ID, "is done")
	_, err = b.releaseTask("bob", task.ID, 2, false)
	wantTaskState(t, "ReleaseTaskClaim of a done task", err, task.ID, "is done")
	lb := b.acquire(t, "web", bob, time.Hour, "docs/")
	p := integrateParams("web", r.Mainline, bob, []uint64{lb.FencingToken}, put("docs/a.md", "a"))
	p.TaskID, p.TaskClaimNumber = task.ID, 2
	err = b.refusedIntegrate(t, "under the claim of a done task", p)
	wantTaskState(t, "Integrate under the claim of a done task", err, task.ID, "is done")
	b.taskUnchanged(t, done, "requests about the done task")
}

// testCancelTask: only a task's creator or an admin cancels it; a claim of a cancelled task is
// no longer current, and a task that depends on it is never ready.
func testCancelTask(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	task := b.createTask(t, "web", "Fix the build", 0) // alice's
	dependent := b.createTask(t, "web", "Ship it", 0, task.ID)
	c := b.claimTask(t, "web", task.ID, bob, time.Hour)
	_, err := b.st.CancelTask(b.ctx, task.ID, "bob", false, "not needed")
	wantTaskState(t, "CancelTask by another principal than its creator", err, task.ID, "alice", "bob")
	b.taskUnchanged(t, c, "bob's cancellation")
	b.clk.Advance(time.Minute)
	cancelled, err := b.st.CancelTask(b.ctx, task.ID, "alice", false, "not needed")
	if err != nil {
		t.Fatalf("CancelTask by its creator: %v", err)
	}
	want := c
	want.State, want.ClaimCurrent, want.UpdatedAt = store.TaskCancelled, false, b.clk.Now()
	assertFields(t, "CancelTask", cancelled, want)
	assertFields(t, "GetTask after CancelTask", b.task(t, task.ID), want)
	_, err = b.renewTask("bob", task.ID, c.ClaimNumber(), time.Hour)
	wantTaskState(t, "RenewTaskClaim of a cancelled task", err, task.ID, "cancelled")
	_, err = b.st.ClaimTask(b.ctx, store.ClaimTaskParams{Repository: "web", TaskID: task.ID, Holder: bob, TTL: time.Hour})
	wantTaskState(t, "ClaimTask of a cancelled task", err, task.ID, "cancelled")
	_, err = b.st.CancelTask(b.ctx, task.ID, "alice", false, "again")
	wantTaskState(t, "CancelTask of a cancelled task", err, task.ID, "cancelled")
	b.taskUnchanged(t, cancelled, "requests about the cancelled task")
	_, err = b.st.CancelTask(b.ctx, store.NewID("tsk"), "alice", true, "")
	wantErr(t, "CancelTask of an unknown task", err, store.ErrNotFound)

	if ready, _ := b.listTasks(t, store.ListTasksParams{Repository: "web", Ready: true}); len(ready) != 0 {
		t.Fatalf("ListTasks(ready) = %v, want none: one task is cancelled and the other depends on it", taskIDs(ready))
	}
	_, err = b.st.ClaimTask(b.ctx, store.ClaimTaskParams{Repository: "web", TaskID: dependent.ID, Holder: bob, TTL: time.Hour})
	wantTaskState(t, "ClaimTask of a task whose dependency was cancelled", err, dependent.ID, task.ID, "cancelled")
	if got, err := b.st.CancelTask(b.ctx, dependent.ID, "ops", true, "its dependency was cancelled"); err != nil || got.State != store.TaskCancelled {
		t.Fatalf("CancelTask by an admin = %s, %v; want it cancelled", got.State, err)
	}
}

// testIntegrateFinishesTask: a change carrying a current task claim lands on a repository
// without a policy and finishes the task, its commit naming the claim; with a policy it is
// queued with the claim and the task stays claimed. A task of another repository, or unknown,
// is not found.
func testIntegrateFinishesTask(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	b.createRepo(t, "api")
	task := b.createTask(t, "web", "Fix the build", 0)
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	c := b.claimTask(t, "web", task.ID, alice, time.Hour)
	b.clk.Advance(time.Minute)
	p := taskIntegrate(r, alice, l, "a.go", task, c.ClaimNumber())
	change := b.mustIntegrate(t, p)
	if change.State != store.ChangeIntegrated || change.TaskID != task.ID || change.TaskClaimNumber != 1 {
		t.Fatalf("Integrate with a task claim = %s carrying %q#%d, want integrated carrying %s#1", change.State, change.TaskID,
			change.TaskClaimNumber, task.ID)
	}
	assertFields(t, "GetChange of the change that carried a task claim", b.change(t, change.ID), change)
	want := c
	want.State, want.ClaimCurrent, want.ChangeID, want.DoneAt, want.UpdatedAt = store.TaskDone, false, change.ID, b.clk.Now(), b.clk.Now()
	assertFields(t, "GetTask after its change landed", b.task(t, task.ID), want)
	b.wantCommit(t, b.revision(t, "web", change.IntegratedRevision), p.Message, fmt.Sprintf("Ag-Task: %s#1", task.ID))

	r = b.repository(t, "web")
	err := b.refusedIntegrate(t, "under the claim of a task its change finished", taskIntegrate(r, alice, l, "b.go", task, 1))
	wantTaskState(t, "Integrate under the claim of a task its change finished", err, task.ID, "is done", change.ID)
	other := b.createTask(t, "api", "An api task", 0)
	b.claimTask(t, "api", other.ID, alice, time.Hour)
	err = b.refusedIntegrate(t, "carrying a task of another repository", taskIntegrate(r, alice, l, "b.go", other, 1))
	wantErr(t, "Integrate carrying a task of another repository", err, store.ErrNotFound)
	err = b.refusedIntegrate(t, "carrying an unknown task", taskIntegrate(r, alice, l, "b.go", store.Task{ID: store.NewID("tsk")}, 1))
	wantErr(t, "Integrate carrying an unknown task", err, store.ErrNotFound)

	// With a policy: queued with the claim, the task still claimed.
	g := b.createPolicyRepo(t, "gated")
	gatedTask := b.createTask(t, "gated", "Gated work", 0)
	gl := b.acquire(t, "gated", alice, time.Hour, "src/")
	gc := b.claimTask(t, "gated", gatedTask.ID, alice, time.Hour)
	queued := b.queue(t, taskIntegrate(g, alice, gl, "a.go", gatedTask, gc.ClaimNumber()))
	if queued.TaskID != gatedTask.ID || queued.TaskClaimNumber != 1 {
		t.Fatalf("the queued change carries %q#%d, want %s#1", queued.TaskID, queued.TaskClaimNumber, gatedTask.ID)
	}
	assertFields(t, "GetChange of the queued change", b.change(t, queued.ID), queued)
	b.taskUnchanged(t, gc, "the queueing of its change")
}

// testInQueueTask: the queue's transaction reads a task as GetTask does and finishes it by a
// change; a transaction that fails keeps nothing of it.
func testInQueueTask(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	g := b.createPolicyRepo(t, "gated")
	task := b.createTask(t, "gated", "Gated work", 0)
	l := b.acquire(t, "gated", alice, time.Hour, "src/")
	c := b.claimTask(t, "gated", task.ID, alice, time.Hour)
	queued := b.queue(t, taskIntegrate(g, alice, l, "a.go", task, c.ClaimNumber()))

	failed := errors.New("the advance failed")
	err := b.rs.InQueue(b.ctx, "gated", func(q store.QueueTx) error {
		if err := q.FinishTask(task.ID, queued.ID); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("InQueue whose fn failed: %v, want %v", err, failed)
	}
	b.taskUnchanged(t, c, "an InQueue that finished it and failed")

	b.clk.Advance(time.Minute)
	err = b.rs.InQueue(b.ctx, "gated", func(q store.QueueTx) error {
		got, err := q.Task(task.ID)
		if err != nil {
			return err
		}
		if diff := diffFields(got, c); diff != "" {
			return fmt.Errorf("QueueTx.Task differs from the task as claimed:\n%s", diff)
		}
		if err := store.CheckTaskClaim(got, queued.Holder, queued.TaskClaimNumber); err != nil {
			return fmt.Errorf("the change's claim is not current: %w", err)
		}
		if _, err := q.Task(store.NewID("tsk")); !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("QueueTx.Task of an unknown task: %v, want %v", err, store.ErrNotFound)
		}
		return q.FinishTask(task.ID, queued.ID)
	})
	if err != nil {
		t.Fatalf("InQueue: %v", err)
	}
	want := c
	want.State, want.ClaimCurrent, want.ChangeID, want.DoneAt, want.UpdatedAt = store.TaskDone, false, queued.ID, b.clk.Now(), b.clk.Now()
	assertFields(t, "GetTask after FinishTask", b.task(t, task.ID), want)
}

// send sends a message and fails the test on an error.
func (b *rbundle) send(t *testing.T, p store.SendMessageParams) store.Message {
	t.Helper()
	if p.Principal == "" {
		p.Principal = store.PrincipalOf(p.Author)
	}
	m, err := b.st.SendMessage(b.ctx, p)
	if err != nil {
		t.Fatalf("SendMessage(%+v): %v", p, err)
	}
	return m
}

func (b *rbundle) messages(t *testing.T, p store.ListMessagesParams) []store.Message {
	t.Helper()
	ms, err := b.st.ListMessages(b.ctx, p)
	if err != nil {
		t.Fatalf("ListMessages(%+v): %v", p, err)
	}
	return ms
}

// wantMessages fails the test unless got are the messages want, in that order.
func wantMessages(t *testing.T, what string, got []store.Message, want ...store.Message) {
	t.Helper()
	texts := func(ms []store.Message) []string {
		out := make([]string, len(ms))
		for i, m := range ms {
			out[i] = m.Text
		}
		return out
	}
	if !slices.Equal(texts(got), texts(want)) {
		t.Fatalf("%s = %q, want %q", what, texts(got), texts(want))
	}
	for i := range got {
		assertFields(t, fmt.Sprintf("%s: message %d", what, i), got[i], want[i])
	}
}

// testMessages: a message on a task's thread reaches its claimant, one on a change's thread the
// change's author; a holder's inbox holds what reached it and what was sent to all, never what
// it wrote, oldest first after a seq; a task or change of another repository is not found.
func testMessages(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	b.createRepo(t, "api")
	task := b.createTask(t, "web", "Fix the build", 0)
	b.claimTask(t, "web", task.ID, bob, time.Hour)
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	change := b.mustIntegrate(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken}, put("src/a.go", "a")))

	b.clk.Advance(time.Minute)
	onTask := b.send(t, store.SendMessageParams{Repository: "web", Author: alice, Text: "Are you on it?", TaskID: task.ID})
	if !strings.HasPrefix(onTask.ID, "msg_") {
		t.Fatalf("SendMessage answered the id %q, want one that starts with msg_", onTask.ID)
	}
	assertFields(t, "SendMessage on a task's thread", onTask, store.Message{ID: onTask.ID, Repository: "web", Seq: onTask.Seq,
		Author: alice, Principal: "alice", Text: "Are you on it?", TaskID: task.ID, Recipient: bob, CreatedAt: b.clk.Now()})
	toAll := b.send(t, store.SendMessageParams{Repository: "web", Author: bob, Text: "Freeze at noon.", ToAll: true})
	toAlice := b.send(t, store.SendMessageParams{Repository: "web", Author: bob, Text: "Yes.", ToHolder: alice})
	onChange := b.send(t, store.SendMessageParams{Repository: "web", Author: "carol", Principal: "carol", Text: "Nice change.", ChangeID: change.ID})
	if onChange.Recipient != alice || onChange.Author != "carol" {
		t.Fatalf("a message on a change's thread by carol reached %q as %q, want the change's author %s, by carol", onChange.Recipient, onChange.Author, alice)
	}
	toBob := b.send(t, store.SendMessageParams{Repository: "web", Author: alice, Text: "Thanks.", ToHolder: bob})
	if toAll.Recipient != "" || toAlice.Recipient != alice || !toAll.ToAll || toAlice.ToHolder != alice {
		t.Fatalf("a message to all reached %q, one to alice %q; want none and %s", toAll.Recipient, toAlice.Recipient, alice)
	}
	all := []store.Message{onTask, toAll, toAlice, onChange, toBob}
	for i := 1; i < len(all); i++ {
		if all[i].Seq <= all[i-1].Seq {
			t.Fatalf("message %d has seq %d after seq %d: every later message must have a larger one", i, all[i].Seq, all[i-1].Seq)
		}
	}
	if first := b.send(t, store.SendMessageParams{Repository: "api", Author: alice, Text: "Hello api.", ToAll: true}); first.Seq != 1 {
		t.Fatalf("the first message of a repository has seq %d, want 1: the seq is the repository's", first.Seq)
	}

	wantMessages(t, "bob's inbox", b.messages(t, store.ListMessagesParams{Repository: "web", Holder: bob}), onTask, toBob)
	wantMessages(t, "alice's inbox", b.messages(t, store.ListMessagesParams{Repository: "web", Holder: alice}), toAll, toAlice, onChange)
	wantMessages(t, "the inbox of another label of alice", b.messages(t, store.ListMessagesParams{Repository: "web", Holder: alice2}), toAll)
	wantMessages(t, "alice's inbox after the message to all",
		b.messages(t, store.ListMessagesParams{Repository: "web", Holder: alice, AfterSeq: toAll.Seq}), toAlice, onChange)
	wantMessages(t, "alice's inbox, one message", b.messages(t, store.ListMessagesParams{Repository: "web", Holder: alice, Limit: 1}), toAll)
	wantMessages(t, "alice's inbox after its last message",
		b.messages(t, store.ListMessagesParams{Repository: "web", Holder: alice, AfterSeq: onChange.Seq}))
	wantMessages(t, "the task's thread", b.messages(t, store.ListMessagesParams{Repository: "web", TaskID: task.ID}), onTask)
	wantMessages(t, "the change's thread", b.messages(t, store.ListMessagesParams{Repository: "web", ChangeID: change.ID}), onChange)

	// A task nobody holds: its thread reaches no one.
	if _, err := b.releaseTask("bob", task.ID, 1, false); err != nil {
		t.Fatalf("ReleaseTaskClaim: %v", err)
	}
	unheld := b.send(t, store.SendMessageParams{Repository: "web", Author: alice, Text: "Anyone?", TaskID: task.ID})
	if unheld.Recipient != "" {
		t.Fatalf("a message on the thread of a task nobody holds reached %q, want no one", unheld.Recipient)
	}
	wantMessages(t, "the task's thread", b.messages(t, store.ListMessagesParams{Repository: "web", TaskID: task.ID}), onTask, unheld)

	apiTask := b.createTask(t, "api", "An api task", 0)
	for _, c := range []struct {
		what string
		p    store.SendMessageParams
	}{
		{"on the thread of a task of another repository", store.SendMessageParams{Repository: "web", TaskID: apiTask.ID}},
		{"on the thread of an unknown task", store.SendMessageParams{Repository: "web", TaskID: store.NewID("tsk")}},
		{"on the thread of a change of another repository", store.SendMessageParams{Repository: "api", ChangeID: change.ID}},
		{"on the thread of an unknown change", store.SendMessageParams{Repository: "web", ChangeID: store.NewID("chg")}},
		{"in an unknown repository", store.SendMessageParams{Repository: "nowhere", ToAll: true}},
	} {
		c.p.Author, c.p.Principal, c.p.Text = alice, "alice", "lost"
		_, err := b.st.SendMessage(b.ctx, c.p)
		wantErr(t, "SendMessage "+c.what, err, store.ErrNotFound)
	}
	wantMessages(t, "bob's inbox after the refused messages", b.messages(t, store.ListMessagesParams{Repository: "web", Holder: bob}), onTask, toBob)
	wantMessages(t, "the api task's thread", b.messages(t, store.ListMessagesParams{Repository: "api", TaskID: apiTask.ID}))
}

// testMessageRate: a principal sends at most MaxPerMinute messages a minute, whatever its labels,
// and a refused message stores nothing.
func testMessageRate(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	send := func(author, text string, max int) (store.Message, error) {
		return b.st.SendMessage(b.ctx, store.SendMessageParams{Repository: "web", Author: author, Principal: store.PrincipalOf(author),
			Text: text, ToHolder: "carol|w1", MaxPerMinute: max})
	}
	var sent []store.Message
	for i := range 3 {
		m, err := send(alice, fmt.Sprint("message ", i), 3)
		if err != nil {
			t.Fatalf("message %d of 3 a minute: %v", i, err)
		}
		sent = append(sent, m)
		b.clk.Advance(time.Second)
	}
	for _, author := range []string{alice, alice2} {
		_, err := send(author, "one too many", 3)
		var re *store.RateError
		if !errors.Is(err, store.ErrResourceExhausted) || !errors.As(err, &re) {
			t.Fatalf("the 4th message of alice in a minute, by %s: %v (%T), want a *store.RateError", author, err, err)
		}
		assertFields(t, "the refusal", *re, store.RateError{Principal: "alice", What: "messages", Max: 3})
	}
	wantMessages(t, "carol's inbox after the refused messages", b.messages(t, store.ListMessagesParams{Repository: "web", Holder: "carol|w1"}), sent...)
	if _, err := send(bob, "bob's own share", 3); err != nil {
		t.Fatalf("bob's message: %v", err)
	}
	if _, err := send(alice, "without a cap", 0); err != nil {
		t.Fatalf("alice's message without a cap: %v", err)
	}
	// The first of her messages is 59s old: still in the last minute.
	b.clk.Advance(56 * time.Second)
	if _, err := send(alice, "still too many", 3); !errors.Is(err, store.ErrResourceExhausted) {
		t.Fatalf("alice's message while 4 of hers are younger than a minute: %v, want %v", err, store.ErrResourceExhausted)
	}
	b.clk.Advance(2 * time.Second)
	if _, err := send(alice, "one minute later", 3); err != nil {
		t.Fatalf("alice's message once only 2 of hers are younger than a minute: %v", err)
	}
}

// testTaskRate: a principal creates at most MaxPerMinute tasks a minute, and a refused task is
// not stored.
func testTaskRate(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	create := func(by, title string, max int) (store.Task, error) {
		return b.st.CreateTask(b.ctx, store.CreateTaskParams{Repository: "web", Title: title, CreatedBy: by, MaxPerMinute: max})
	}
	for i := range 2 {
		if _, err := create("alice", fmt.Sprint("task ", i), 2); err != nil {
			t.Fatalf("task %d of 2 a minute: %v", i, err)
		}
		b.clk.Advance(time.Second)
	}
	_, err := create("alice", "one too many", 2)
	var re *store.RateError
	if !errors.Is(err, store.ErrResourceExhausted) || !errors.As(err, &re) {
		t.Fatalf("alice's 3rd task in a minute: %v (%T), want a *store.RateError", err, err)
	}
	assertFields(t, "the refusal", *re, store.RateError{Principal: "alice", What: "tasks", Max: 2})
	if tasks, _, err := b.st.ListTasks(b.ctx, store.ListTasksParams{Repository: "web", Limit: 10}); err != nil || len(tasks) != 2 {
		t.Fatalf("tasks after the refusal: %d, %v; want the 2 created", len(tasks), err)
	}
	if _, err := create("bob", "bob's own share", 2); err != nil {
		t.Fatalf("bob's task: %v", err)
	}
	b.clk.Advance(59 * time.Second)
	if _, err := create("alice", "a minute later", 2); err != nil {
		t.Fatalf("alice's task once her first is a minute old: %v", err)
	}
}

// testMessageSignal: the message signal fires once a message is stored.
func testMessageSignal(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	ch := b.st.MessageSignal()
	select {
	case <-ch:
		t.Fatal("MessageSignal fired before any message")
	default:
	}
	b.send(t, store.SendMessageParams{Repository: "web", Author: "carol", Text: "x", ToAll: true})
	// Fired by the time SendMessage returned.
	select {
	case <-ch:
	default:
		t.Fatal("MessageSignal did not fire once SendMessage stored a message")
	}
	ch = b.st.MessageSignal()
	if _, err := b.st.SendMessage(b.ctx, store.SendMessageParams{Repository: "web", Author: "carol", Principal: "carol", Text: "x",
		TaskID: store.NewID("tsk")}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("SendMessage on the thread of an unknown task: %v, want %v", err, store.ErrNotFound)
	}
	select {
	case <-ch:
		t.Fatal("MessageSignal fired after a refused message")
	default:
	}
}

// testConcurrentTaskClaims: of holders claiming one task at once exactly one wins, and the others
// are told whose it is; holders claiming the first ready task at once take every task once.
func testConcurrentTaskClaims(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	b.createRepo(t, "web")
	const holders, rounds = 8, 10
	var wg sync.WaitGroup
	for round := range rounds {
		task := b.createTask(t, "web", fmt.Sprint("contended ", round), 0)
		won := make([]bool, holders)
		errs := make([]error, holders)
		start := make(chan struct{})
		for i := range holders {
			wg.Go(func() {
				<-start
				_, errs[i] = b.st.ClaimTask(b.ctx, store.ClaimTaskParams{Repository: "web", TaskID: task.ID,
					Holder: fmt.Sprintf("agent%d|w", i), TTL: time.Hour})
				won[i] = errs[i] == nil
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i := range holders {
			switch {
			case won[i] && winner >= 0:
				t.Fatalf("round %d: agent%d and agent%d both claimed the task", round, winner, i)
			case won[i]:
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no holder claimed the task: %v", round, errs)
		}
		got := b.task(t, task.ID)
		if got.ClaimNumber() != 1 || got.Claimant != fmt.Sprintf("agent%d|w", winner) {
			t.Fatalf("round %d: the task's claim is number %d by %s, want number 1 by agent%d|w", round, got.ClaimNumber(), got.Claimant, winner)
		}
		for i, err := range errs {
			if i == winner {
				continue
			}
			var ce *store.TaskClaimConflictError
			if !errors.As(err, &ce) || ce.Holder != got.Claimant || ce.Claim != 1 {
				t.Fatalf("round %d: agent%d's refused claim: %v (%T), want a *store.TaskClaimConflictError naming %s", round, i, err, err, got.Claimant)
			}
		}
	}

	const tasks = 12
	for i := range tasks {
		b.createTask(t, "web", fmt.Sprint("task ", i), int32(i%3))
	}
	claims := make([][]store.Task, holders)
	claimErrs := make([]error, holders)
	start := make(chan struct{})
	for i := range holders {
		wg.Go(func() {
			<-start
			for {
				c, err := b.st.ClaimTask(b.ctx, store.ClaimTaskParams{Repository: "web", Holder: fmt.Sprintf("worker%d|w", i), TTL: time.Hour})
				if errors.Is(err, store.ErrNotFound) {
					return
				}
				if err != nil {
					claimErrs[i] = err
					return
				}
				claims[i] = append(claims[i], c)
			}
		})
	}
	close(start)
	wg.Wait()
	for i, err := range claimErrs {
		if err != nil {
			t.Fatalf("worker%d: ClaimTask of the first ready task: %v", i, err)
		}
	}
	seen := map[string]string{}
	for i, cs := range claims {
		for _, c := range cs {
			if c.ClaimNumber() != 1 {
				t.Fatalf("worker%d took %q with claim number %d, want 1: it was claimed before", i, c.Title, c.ClaimNumber())
			}
			if other, ok := seen[c.ID]; ok {
				t.Fatalf("%q was claimed by %s and worker%d", c.Title, other, i)
			}
			seen[c.ID] = fmt.Sprintf("worker%d", i)
		}
	}
	if len(seen) != tasks {
		t.Fatalf("the claimers took %d of the %d ready tasks", len(seen), tasks)
	}
	if ready, _ := b.listTasks(t, store.ListTasksParams{Repository: "web", Ready: true}); len(ready) != 0 {
		t.Fatalf("%d tasks are still ready after the claimers found none", len(ready))
	}
}

// testTaskRefusalsWriteNothing: refused requests about tasks and messages write no audit event.
func testTaskRefusalsWriteNothing(t *testing.T, newStore Factory) {
	b := setupAudit(t, newStore)
	r := b.createRepo(t, "web")
	task := b.createTask(t, "web", "Fix the build", 0)
	c := b.claimTask(t, "web", task.ID, alice, time.Hour)
	done := b.createTask(t, "web", "Done already", 0)
	dc := b.claimTask(t, "web", done.ID, bob, time.Hour)
	if _, err := b.releaseTask("bob", done.ID, dc.ClaimNumber(), true); err != nil {
		t.Fatalf("ReleaseTaskClaim(done): %v", err)
	}
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	for i := range 2 {
		b.send(t, store.SendMessageParams{Repository: "web", Author: alice, Text: fmt.Sprint(i), ToAll: true, MaxPerMinute: 2})
	}
	b.markLog(t)
	for _, ref := range []refusal{
		{"CreateTask with an unknown dependency", func() error {
			_, err := b.st.CreateTask(b.ctx, store.CreateTaskParams{Repository: "web", Title: "x", DependsOn: []string{store.NewID("tsk")}, CreatedBy: "alice"})
			return wantIs(err, store.ErrInvalidTask)
		}},
		{"ClaimTask of a task another holder holds", func() error {
			_, err := b.st.ClaimTask(b.ctx, store.ClaimTaskParams{Repository: "web", TaskID: task.ID, Holder: bob, TTL: time.Hour})
			return wantIs(err, store.ErrLeaseConflict)
		}},
		{"ClaimTask with no ready task", func() error {
			_, err := b.st.ClaimTask(b.ctx, store.ClaimTaskParams{Repository: "web", Holder: bob, TTL: time.Hour})
			return wantIs(err, store.ErrNotFound)
		}},
		{"RenewTaskClaim by another principal", func() error {
			_, err := b.renewTask("bob", task.ID, c.ClaimNumber(), time.Hour)
			return wantIs(err, store.ErrFailedPrecondition)
		}},
		{"ReleaseTaskClaim of a claim never made", func() error {
			_, err := b.releaseTask("alice", task.ID, 7, false)
			return wantIs(err, store.ErrFailedPrecondition)
		}},
		{"CancelTask of a done task", func() error {
			_, err := b.st.CancelTask(b.ctx, done.ID, "alice", true, "")
			return wantIs(err, store.ErrFailedPrecondition)
		}},
		{"Integrate under the claim of a done task", func() error {
			_, err := b.rs.Integrate(b.ctx, taskIntegrate(r, alice, l, "a.go", done, 1))
			return wantIs(err, store.ErrFailedPrecondition)
		}},
		{"SendMessage past its principal's rate", func() error {
			_, err := b.st.SendMessage(b.ctx, store.SendMessageParams{Repository: "web", Author: alice, Principal: "alice", Text: "x",
				ToAll: true, MaxPerMinute: 2})
			return wantIs(err, store.ErrResourceExhausted)
		}},
		{"SendMessage on the thread of an unknown task", func() error {
			_, err := b.st.SendMessage(b.ctx, store.SendMessageParams{Repository: "web", Author: alice, Principal: "alice", Text: "x",
				TaskID: store.NewID("tsk")})
			return wantIs(err, store.ErrNotFound)
		}},
	} {
		if err := ref.do(); err != nil {
			t.Fatalf("%s: %v", ref.what, err)
		}
		if n := b.sealAll(t); n != 0 {
			events := b.auditEvents(t, b.mark)
			t.Fatalf("%s wrote %d audit events, the first %s %s", ref.what, n, events[0].Action, events[0].Subject)
		}
	}
	b.verifyLog(t)
}
