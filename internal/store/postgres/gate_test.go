package postgres_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/postgres"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// gatePolicy is a validation policy; the store keeps it without reading it.
var gatePolicy = []byte(`{"command":["true"]}`)

// validatePayload is what gateRules' jobs carry: the change and candidate they validate.
type validatePayload struct {
	Change    string `json:"change"`
	Candidate string `json:"candidate"`
}

// gateRules are the rules of a gate whose validations pass once their job is completed. The
// jobs have no unique key, so that nothing but the store's serialization keeps a candidate
// from being validated twice.
func gateRules() gate.Rules {
	return gate.Rules{
		Decide: func(_ store.Change, _ store.Revision, job store.Job, _ *store.Attestation) gate.Verdict {
			switch job.State {
			case store.JobCompleted:
				return gate.Verdict{Outcome: gate.VerdictPass}
			case store.JobFailed:
				return gate.Verdict{Outcome: gate.VerdictReject, Reason: job.LastError}
			case store.JobCancelled:
				return gate.Verdict{Outcome: gate.VerdictCancel, Reason: "cancelled"}
			}
			return gate.Verdict{Outcome: gate.VerdictPending}
		},
		Job: func(c store.Change, candidate store.Revision, _ string, _ store.Revision) store.EnqueueJobParams {
			payload, _ := json.Marshal(validatePayload{Change: c.ID, Candidate: candidate.ID})
			return store.EnqueueJobParams{Kind: "validate", Payload: payload, MaxAttempts: 1, EnqueuedBy: "gate"}
		},
	}
}

// gateIntegrate integrates a write of content to path on the current mainline.
func gateIntegrate(ctx context.Context, db *postgres.DB, repository string, lease store.Lease, path, content string) (store.Change, error) {
	r, err := db.GetRepository(ctx, repository)
	if err != nil {
		return store.Change{}, err
	}
	blob := store.Blob{Digest: repo.Digest([]byte(content)), Content: []byte(content)}
	edits := []repo.FileEdit{{Path: path, Digest: blob.Digest, Size: uint64(len(content))}}
	return db.Integrate(ctx, store.IntegrateParams{
		Repository:    repository,
		BaseRevision:  r.Mainline,
		Holder:        lease.Holder,
		FencingTokens: []uint64{lease.FencingToken},
		Paths:         []string{path},
		Message:       "write " + path,
		Blobs:         []store.Blob{blob},
		Edits:         edits,
	})
}

// TestAdvanceQueueAcrossReplicas ensures that two replicas advancing one repository's queue at
// the same time, while agents integrate through both and workers validate through both, take
// turns: never two changes VALIDATING, never a second validate job for a change, and every
// change integrated once, in queue order, each on the one before.
func TestAdvanceQueueAcrossReplicas(t *testing.T) {
	url := pgtest.NewDatabase(t)
	replicas := []*postgres.DB{open(t, url, nil), open(t, url, nil)}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const name, agents, perAgent = "gated", 4, 4
	if _, err := replicas[0].CreateRepository(ctx, store.CreateRepositoryParams{Name: name, CreatedBy: "admin",
		Validation: gatePolicy}); err != nil {
		t.Fatal(err)
	}

	// A watcher reads the queue from a connection of its own all along.
	conn := connect(t, url)
	var maxValidating atomic.Int64
	watchDone := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			select {
			case <-stopWatch:
				return
			default:
			}
			var n int64
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM changes WHERE state = 'validating'`).Scan(&n); err != nil {
				if ctx.Err() == nil {
					t.Errorf("watch the queue: %v", err)
				}
				return
			}
			if n > maxValidating.Load() {
				maxValidating.Store(n)
			}
		}
	}()

	var wg sync.WaitGroup
	var submitting atomic.Int64
	submitting.Store(agents)
	var queued sync.Map // change id → true, for every change Integrate queued
	for g := range agents {
		db := replicas[g%2]
		lease, err := db.AcquireLease(ctx, store.AcquireLeaseParams{Repository: name,
			Paths: []string{fmt.Sprintf("agents/%d/", g)}, Holder: fmt.Sprintf("agent%d|w", g), TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer submitting.Add(-1)
			for i := range perAgent {
				c, err := gateIntegrate(ctx, db, name, lease, fmt.Sprintf("agents/%d/%d.txt", g, i), fmt.Sprintf("%d.%d\n", g, i))
				if err != nil {
					t.Errorf("Integrate: %v", err)
					return
				}
				if c.State != store.ChangeQueued {
					t.Errorf("Integrate into a repository with a policy answered a change %s, want queued", c.State)
				}
				queued.Store(c.ID, true)
			}
		})
	}
	// done: every agent submitted and no change is pending.
	done := func(db *postgres.DB) bool {
		if submitting.Load() > 0 {
			return false
		}
		names, err := db.PendingQueues(ctx)
		if err != nil {
			t.Errorf("PendingQueues: %v", err)
			return true
		}
		return len(names) == 0
	}
	// The states AdvanceQueue answered for each change. Two advances answer as they commit,
	// so their answers may be recorded in either order.
	answered := map[string][]store.ChangeState{}
	var mu sync.Mutex
	for i := range 4 {
		db := replicas[i%2]
		wg.Go(func() {
			for !done(db) && ctx.Err() == nil {
				changed, err := gate.AdvanceWith(ctx, db, name, func([]byte) gate.Rules { return gateRules() })
				if err != nil {
					t.Errorf("AdvanceQueue: %v", err)
					return
				}
				mu.Lock()
				for _, c := range changed {
					answered[c.ID] = append(answered[c.ID], c.State)
				}
				mu.Unlock()
			}
		})
	}
	for i := range 2 {
		db := replicas[i]
		wg.Go(func() {
			for !done(db) && ctx.Err() == nil {
				j, err := db.ClaimJob(ctx, store.ClaimJobParams{Holder: fmt.Sprintf("worker|%d", i), Kinds: []string{"validate"},
					Lease: time.Minute})
				if err != nil {
					t.Errorf("ClaimJob: %v", err)
					return
				}
				if j == nil {
					continue
				}
				// The store keeps the envelope as bytes; its content is the gate's business.
				env := []byte(`{"job":"` + j.ID + `"}`)
				sum := sha256.Sum256(env)
				att := &store.Attestation{Digest: "sha256:" + hex.EncodeToString(sum[:]), Envelope: env, JobID: j.ID}
				if _, err := db.CompleteJob(ctx, store.CompleteJobParams{JobID: j.ID, Holder: j.Holder,
					ClaimNumber: j.ClaimNumber, Attestation: att}); err != nil {
					t.Errorf("CompleteJob: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stopWatch)
	<-watchDone
	if t.Failed() {
		return
	}
	if ctx.Err() != nil {
		t.Fatal("the queue did not drain within 2 minutes")
	}

	if n := maxValidating.Load(); n > 1 {
		t.Errorf("%d changes were VALIDATING at once, want at most 1", n)
	}
	changes, _, err := replicas[0].ListChanges(ctx, store.ListChangesParams{Repository: name, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(changes) // oldest first: queue order
	if len(changes) != agents*perAgent {
		t.Fatalf("%d changes, want %d", len(changes), agents*perAgent)
	}
	jobs, _, err := replicas[0].ListJobs(ctx, store.ListJobsParams{Kinds: []string{"validate"}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	jobsOf := map[string][]store.Job{}
	for _, j := range jobs {
		var p validatePayload
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			t.Fatal(err)
		}
		jobsOf[p.Change] = append(jobsOf[p.Change], j)
	}
	parent := changes[0].BaseRevision // the first change was queued on the first mainline
	for _, c := range changes {
		if _, ok := queued.Load(c.ID); !ok {
			t.Errorf("change %s was not answered by Integrate", c.ID)
		}
		if c.State != store.ChangeIntegrated {
			t.Errorf("change %s is %s (%s), want integrated", c.ID, c.State, c.Reason)
			continue
		}
		got := slices.Clone(answered[c.ID])
		slices.Sort(got)
		if !slices.Equal(got, []store.ChangeState{store.ChangeIntegrated, store.ChangeValidating}) {
			t.Errorf("AdvanceQueue answered change %s as %v, want validating once and integrated once", c.ID, answered[c.ID])
		}
		if js := jobsOf[c.ID]; len(js) != 1 || js[0].ID != c.JobID {
			t.Errorf("change %s (job %s) has validate jobs %v, want exactly its own", c.ID, c.JobID, js)
		}
		if c.IntegratedRevision != c.CandidateRevision {
			t.Errorf("change %s integrated %s, want its candidate %s", c.ID, c.IntegratedRevision, c.CandidateRevision)
		}
		rev, err := replicas[1].GetRevision(ctx, name, c.IntegratedRevision)
		if err != nil {
			t.Fatal(err)
		}
		if rev.Parent != parent || rev.ChangeID != c.ID || rev.Holder != c.Holder {
			t.Errorf("revision of change %s: parent %s, change %s, author %s; want parent %s (the change before in the queue), change %s, author %s",
				c.ID, rev.Parent, rev.ChangeID, rev.Holder, parent, c.ID, c.Holder)
		}
		parent = rev.ID
	}
	r, err := replicas[1].GetRepository(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if r.Mainline != parent {
		t.Errorf("mainline %s, want the last change's revision %s", r.Mainline, parent)
	}
	head, err := replicas[0].GetRevision(ctx, name, r.Mainline)
	if err != nil {
		t.Fatal(err)
	}
	if len(head.Tree) != agents*perAgent {
		t.Errorf("the mainline holds %d files, want %d: every change's", len(head.Tree), agents*perAgent)
	}
}

// TestAdvanceQueueOnAnotherReplica ensures that a change queued through one replica is
// advanced through another, which sees it at its place in the queue, and that the validate
// job enqueued there wakes a claimer waiting on the first only once it is committed.
func TestAdvanceQueueOnAnotherReplica(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a, b := open(t, url, nil), open(t, url, nil)
	ctx := t.Context()
	if _, err := a.CreateRepository(ctx, store.CreateRepositoryParams{Name: "r", CreatedBy: "admin", Validation: gatePolicy}); err != nil {
		t.Fatal(err)
	}
	lease, err := a.AcquireLease(ctx, store.AcquireLeaseParams{Repository: "r", Paths: []string{"a.txt", "b.txt"},
		Holder: "alice|w", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	first, err := gateIntegrate(ctx, a, "r", lease, "a.txt", "a\n")
	if err != nil {
		t.Fatal(err)
	}
	second, err := gateIntegrate(ctx, a, "r", lease, "b.txt", "b\n")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.GetChange(ctx, second.ID); err != nil || got.State != store.ChangeQueued || got.QueuePosition != 1 {
		t.Fatalf("GetChange of the second change on the other replica = %s at %d, %v; want queued at 1", got.State, got.QueuePosition, err)
	}

	waitListening(t, a, 1)
	woken := a.JobSignal()
	var wokenEarly bool
	rules := gateRules()
	job := rules.Job
	rules.Job = func(c store.Change, candidate store.Revision, lane string, mainline store.Revision) store.EnqueueJobParams {
		// Still inside b's transaction: nobody may be told of a job that is not committed.
		select {
		case <-woken:
			wokenEarly = true
		default:
		}
		return job(c, candidate, lane, mainline)
	}
	changed, err := gate.AdvanceWith(ctx, b, "r", func([]byte) gate.Rules { return rules })
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 1 || changed[0].ID != first.ID || changed[0].State != store.ChangeValidating || changed[0].JobID == "" {
		t.Fatalf("AdvanceQueue on the other replica answered %+v, want the first change VALIDATING with its job", changed)
	}
	wantClosed(t, woken, "after the other replica's AdvanceQueue enqueued a validate job")
	if wokenEarly {
		t.Error("the job signal fired before AdvanceQueue committed")
	}
	j, err := a.ClaimJob(ctx, store.ClaimJobParams{Holder: "worker|1", Kinds: []string{"validate"}, Lease: time.Minute})
	if err != nil || j == nil || j.ID != changed[0].JobID {
		t.Fatalf("ClaimJob on the first replica = %v, %v; want job %s", j, err, changed[0].JobID)
	}
	if got, err := a.GetChange(ctx, second.ID); err != nil || got.QueuePosition != 1 {
		t.Fatalf("GetChange of the second change = at %d, %v; want still at 1, behind the validating one", got.QueuePosition, err)
	}
}

// TestListJobsByClaimerTakesNamesLiterally ensures that a principal's name is matched as it is,
// never as a pattern.
func TestListJobsByClaimerTakesNamesLiterally(t *testing.T) {
	db := open(t, pgtest.NewDatabase(t), nil)
	ctx := t.Context()
	claimed := map[string]string{} // worker → job
	for _, w := range []string{"a_b|1", "axb|1", "a%|1", "a_b|2"} {
		j, _, err := db.EnqueueJob(ctx, store.EnqueueJobParams{Kind: "k", MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		got, err := db.ClaimJob(ctx, store.ClaimJobParams{Holder: w, Lease: time.Minute})
		if err != nil || got == nil || got.ID != j.ID {
			t.Fatalf("ClaimJob = %v, %v; want %s", got, err, j.ID)
		}
		claimed[w] = j.ID
	}
	for _, tc := range []struct {
		claimedBy string
		want      []string
	}{
		{"a_b|", []string{"a_b|2", "a_b|1"}},
		{"a%|", []string{"a%|1"}},
		{"a_b|1", []string{"a_b|1"}},
		{"a_", nil},
	} {
		jobs, _, err := db.ListJobs(ctx, store.ListJobsParams{Holder: tc.claimedBy, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var got, want []string
		for _, j := range jobs {
			got = append(got, j.ID)
		}
		for _, w := range tc.want {
			want = append(want, claimed[w])
		}
		if !slices.Equal(got, want) {
			t.Errorf("ListJobs(ClaimedBy %q) = %v, want %v (the jobs of %v)", tc.claimedBy, got, want, tc.want)
		}
	}
}
