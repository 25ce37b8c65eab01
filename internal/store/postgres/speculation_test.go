package postgres_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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

// brokenSuffix marks the files of the changes that break the tests: a tree holding one fails
// its validation, whichever candidate it is.
const brokenSuffix = ".broken"

// exitCode answers the exit code a validate job's result names, or -1.
func exitCode(result []byte) int {
	var r struct {
		ExitCode *int `json:"exit_code"`
	}
	if json.Unmarshal(result, &r) != nil || r.ExitCode == nil {
		return -1
	}
	return *r.ExitCode
}

// speculativeRules are the rules of a gate that validates up to depth candidates at once: a job
// completed with exit code 0 and an attestation passes, one completed otherwise fails, one that
// ended otherwise is rejected (storetest's passUnlessFailed). The jobs have no unique key, so
// that nothing but the store's serialization keeps a candidate from being validated twice.
func speculativeRules(depth int) gate.Rules {
	return gate.Rules{
		Decide: func(_ store.Change, _ store.Revision, job store.Job, att *store.Attestation) gate.Verdict {
			switch {
			case job.State == store.JobCompleted && att != nil && exitCode(job.Result) == 0:
				return gate.Verdict{Outcome: gate.VerdictPass}
			case job.State == store.JobCompleted:
				return gate.Verdict{Outcome: gate.VerdictReject, Reason: "the tests failed in " + job.ID,
					Attestation: job.AttestationDigest}
			case job.State.Terminal():
				return gate.Verdict{Outcome: gate.VerdictReject, Reason: "validate job " + string(job.State)}
			}
			return gate.Verdict{Outcome: gate.VerdictPending}
		},
		Job: func(c store.Change, candidate store.Revision, _ string, _ store.Revision) store.EnqueueJobParams {
			payload, _ := json.Marshal(validatePayload{Change: c.ID, Candidate: candidate.ID})
			return store.EnqueueJobParams{Kind: "validate", Payload: payload, MaxAttempts: 1, EnqueuedBy: "gate"}
		},
		Depth: depth,
	}
}

// TestSpeculativeAdvanceAcrossReplicas ensures that two replicas advancing one repository's
// queue four candidates deep at the same time, while agents integrate through both and workers
// validate through both, failing every tree that holds a broken change, keep the gate's
// promises: the mainline only moves forward, and only to a landed candidate whose job passed
// with an attestation; never more than four candidates validate at once; every change is
// settled once, exactly the broken ones rejected; and the mainline lists the others in queue
// order, each on the one before.
func TestSpeculativeAdvanceAcrossReplicas(t *testing.T) {
	url := pgtest.NewDatabase(t)
	replicas := []*postgres.DB{open(t, url, nil), open(t, url, nil)}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const name, agents, perAgent, depth = "speculated", 4, 5, 4
	created, err := replicas[0].CreateRepository(ctx, store.CreateRepositoryParams{Name: name, CreatedBy: "admin",
		Validation: gatePolicy})
	if err != nil {
		t.Fatal(err)
	}
	// A fifth of the changes, chosen by a seeded draw, write a file that breaks the tests.
	broken := map[int]bool{}
	for _, k := range rand.New(rand.NewPCG(23, 5)).Perm(agents * perAgent)[:agents*perAgent/5] {
		broken[k] = true
	}
	pathOf := func(g, i int) string {
		if broken[g*perAgent+i] {
			return fmt.Sprintf("agents/%d/%d%s", g, i, brokenSuffix)
		}
		return fmt.Sprintf("agents/%d/%d.txt", g, i)
	}

	// A watcher reads the mainline from a connection of its own all along, and the live
	// candidates through a replica.
	conn := connect(t, url)
	var maxValidating atomic.Int64
	var mainlines []string // every mainline the watcher saw, in order
	watchDone := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		defer close(watchDone)
		prev := created.Mainline
		mainlines = append(mainlines, prev)
		for {
			select {
			case <-stopWatch:
				return
			default:
			}
			// One statement: the mainline and what it stands on, as of one snapshot.
			var (
				mainline, cand, candState, candAtt, jobState, jobAtt string
				result                                               []byte
				attested                                             bool
			)
			if err := conn.QueryRow(ctx, `SELECT r.mainline, coalesce(k.id, ''), coalesce(k.state, ''),
				coalesce(k.attestation_digest, ''), coalesce(j.state, ''), coalesce(j.attestation_digest, ''),
				j.result, a.digest IS NOT NULL
				FROM repositories r
				LEFT JOIN candidates k ON k.revision = r.mainline
				LEFT JOIN jobs j ON j.id = k.job_id
				LEFT JOIN attestations a ON a.digest = j.attestation_digest AND a.job_id = j.id
				WHERE r.name = $1`, name).Scan(&mainline, &cand, &candState, &candAtt, &jobState, &jobAtt,
				&result, &attested); err != nil {
				if ctx.Err() == nil {
					t.Errorf("watch the mainline: %v", err)
				}
				return
			}
			if mainline != prev {
				if candState != string(store.CandidateLanded) || jobState != string(store.JobCompleted) ||
					exitCode(result) != 0 || !attested || candAtt == "" || candAtt != jobAtt {
					t.Errorf("the mainline moved to %s, the revision of candidate %q (%s) whose job is %s with result %s, "+
						"attestation %q (stored: %t), candidate's %q; want a landed candidate whose job passed with its attestation",
						mainline, cand, candState, jobState, result, jobAtt, attested, candAtt)
				}
				// It descends from the mainline seen before: the mainline never moves back.
				for at := mainline; at != prev; {
					if err := conn.QueryRow(ctx, `SELECT parent FROM revisions WHERE id = $1`, at).Scan(&at); err != nil {
						t.Errorf("walk back from the mainline %s: %v", mainline, err)
						return
					}
					if at == "" {
						t.Errorf("the mainline moved from %s to %s, which does not descend from it", prev, mainline)
						break
					}
				}
				prev = mainline
				mainlines = append(mainlines, mainline)
			}
			live, err := replicas[0].ListCandidates(ctx, store.ListCandidatesParams{Repository: name})
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("ListCandidates: %v", err)
				}
				return
			}
			var n int64
			for _, c := range live {
				if c.State == store.CandidateValidating {
					n++
				}
			}
			if n > maxValidating.Load() {
				maxValidating.Store(n)
			}
		}
	}()

	var wg sync.WaitGroup
	var submitting atomic.Int64
	submitting.Store(agents)
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
				c, err := gateIntegrate(ctx, db, name, lease, pathOf(g, i), fmt.Sprintf("%d.%d\n", g, i))
				if err != nil {
					t.Errorf("Integrate: %v", err)
					return
				}
				if c.State != store.ChangeQueued {
					t.Errorf("Integrate into a repository with a policy answered a change %s, want queued", c.State)
				}
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
				changed, err := gate.AdvanceWith(ctx, db, name, func([]byte) gate.Rules { return speculativeRules(depth) })
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
	// The workers start once the queue speculates: two candidates validating at once, which
	// nothing settles before they start.
	speculating := make(chan struct{})
	wg.Go(func() {
		defer close(speculating)
		for maxValidating.Load() < 2 {
			select {
			case <-ctx.Done():
				return
			case <-watchDone: // the watcher failed
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	for i := range 3 {
		db := replicas[i%2]
		wg.Go(func() {
			<-speculating
			worker := fmt.Sprintf("worker|%d", i)
			for !done(db) && ctx.Err() == nil {
				j, err := db.ClaimJob(ctx, store.ClaimJobParams{Holder: worker, Kinds: []string{"validate"}, Lease: time.Minute})
				if err != nil {
					t.Errorf("ClaimJob: %v", err)
					return
				}
				if j == nil {
					continue
				}
				// The tests fail on a tree that holds a broken change.
				var p validatePayload
				if err := json.Unmarshal(j.Payload, &p); err != nil {
					t.Errorf("job %s: payload: %v", j.ID, err)
					return
				}
				rev, err := db.GetRevision(ctx, name, p.Candidate)
				if err != nil {
					t.Errorf("GetRevision of the candidate of job %s: %v", j.ID, err)
					return
				}
				result := `{"exit_code": 0}`
				if slices.ContainsFunc(rev.Tree, func(e repo.Entry) bool { return strings.HasSuffix(e.Path, brokenSuffix) }) {
					result = `{"exit_code": 1}`
				}
				env := []byte(`{"job":"` + j.ID + `","result":` + result + `}`)
				sum := sha256.Sum256(env)
				att := &store.Attestation{Digest: "sha256:" + hex.EncodeToString(sum[:]), Envelope: env, JobID: j.ID}
				if _, err := db.CompleteJob(ctx, store.CompleteJobParams{JobID: j.ID, Holder: worker,
					ClaimNumber: j.ClaimNumber, Result: []byte(result), Attestation: att}); err != nil {
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

	if n := maxValidating.Load(); n > depth {
		t.Errorf("%d candidates were VALIDATING at once, want at most %d", n, depth)
	}
	changes, _, err := replicas[0].ListChanges(ctx, store.ListChangesParams{Repository: name, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(changes) // oldest first: queue order
	if len(changes) != agents*perAgent {
		t.Fatalf("%d changes, want %d", len(changes), agents*perAgent)
	}
	isBroken := func(c store.Change) bool {
		return slices.ContainsFunc(c.Paths, func(p string) bool { return strings.HasSuffix(p, brokenSuffix) })
	}

	// Every change settled once, as the advances answered and as the audit log tells.
	settled := map[string]int{}
	events := allEvents(t, replicas[1]) // nothing sealed yet
	if len(events) != 0 {
		t.Fatalf("%d events sealed before the test sealed any", len(events))
	}
	sealAll(t, replicas[1], newSigner(t), 1000)
	events = allEvents(t, replicas[1])
	onMainline := map[string]bool{created.Mainline: true}
	speculative := 0
	for _, e := range events {
		id, ok := strings.CutPrefix(e.Subject, "change/")
		switch {
		case ok && (e.Action == "change.integrated" || e.Action == "change.rejected"):
			settled[id+" "+e.Action]++
			var d struct {
				Revision string `json:"revision"`
			}
			if err := json.Unmarshal(e.Details, &d); err == nil && e.Action == "change.integrated" {
				onMainline[d.Revision] = true
			}
		case e.Action == "candidate.built":
			var d struct {
				Parent string `json:"parent_revision"`
			}
			if err := json.Unmarshal(e.Details, &d); err != nil {
				t.Fatalf("event %d %s: details %s: %v", e.Seq, e.Action, e.Details, err)
			}
			if !onMainline[d.Parent] {
				speculative++ // built on a candidate still validating
			}
		}
	}
	if speculative == 0 {
		t.Error("the audit log shows no candidate built on another: the queue never speculated")
	}
	var integrated []store.Change
	for _, c := range changes {
		want, other := store.ChangeIntegrated, store.ChangeRejected
		if isBroken(c) {
			want, other = other, want
		}
		if c.State != want {
			t.Errorf("change %s (%v) is %s (%s), want %s", c.ID, c.Paths, c.State, c.Reason, want)
			continue
		}
		if n := settled[c.ID+" change."+string(want)]; n != 1 || settled[c.ID+" change."+string(other)] != 0 {
			t.Errorf("the audit log records change %s %s %d times and %s %d times, want %s once",
				c.ID, want, n, other, settled[c.ID+" change."+string(other)], want)
		}
		finals := 0
		for _, s := range answered[c.ID] {
			if s == store.ChangeIntegrated || s == store.ChangeRejected {
				finals++
			}
		}
		if finals != 1 {
			t.Errorf("AdvanceQueue answered change %s as %v, want it settled once", c.ID, answered[c.ID])
		}
		// Its last candidate is the one that settled it, alone for a rejection.
		h, err := replicas[0].ListCandidates(ctx, store.ListCandidatesParams{ChangeID: c.ID})
		if err != nil {
			t.Fatal(err)
		}
		final := map[store.ChangeState]store.CandidateState{store.ChangeIntegrated: store.CandidateLanded,
			store.ChangeRejected: store.CandidateRejected}[want]
		if len(h) == 0 || h[len(h)-1].State != final || h[len(h)-1].JobID != c.JobID ||
			(want == store.ChangeRejected && !slices.Equal(h[len(h)-1].Changes, []string{c.ID})) {
			t.Errorf("the candidates of change %s (%s) are %+v; want the last %s, with its job %s", c.ID, want, h, final, c.JobID)
		}
		if want == store.ChangeIntegrated {
			integrated = append(integrated, c)
		} else if !strings.HasPrefix(c.Reason, "the tests failed in ") || c.AttestationDigest == "" {
			t.Errorf("change %s was rejected for %q with the attestation %q; want its failed run", c.ID, c.Reason, c.AttestationDigest)
		}
	}

	// The mainline lists the integrated changes in queue order, one revision each, each on the
	// one before; the watcher saw some of those revisions, in that order.
	r, err := replicas[1].GetRepository(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var history []store.Revision
	for at := r.Mainline; at != created.Mainline; {
		rev, err := replicas[0].GetRevision(ctx, name, at)
		if err != nil {
			t.Fatal(err)
		}
		history = append(history, rev)
		at = rev.Parent
	}
	slices.Reverse(history)
	if len(history) != len(integrated) {
		t.Fatalf("the mainline has %d revisions after the first, want one per integrated change (%d)", len(history), len(integrated))
	}
	for i, c := range integrated {
		if rev := history[i]; rev.ID != c.IntegratedRevision || rev.ChangeID != c.ID || rev.GitCommit == "" {
			t.Errorf("mainline revision %d is %s of change %s (commit %q); want %s of change %s, the %d-th integrated in queue order, with its commit",
				i+1, rev.ID, rev.ChangeID, rev.GitCommit, c.IntegratedRevision, c.ID, i+1)
		}
	}
	var ids []string
	for _, rev := range history {
		ids = append(ids, rev.ID)
	}
	seen := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !slices.Contains(mainlines, id) })
	if !slices.Equal(seen, mainlines[1:]) {
		t.Errorf("the watcher saw the mainlines %v, want them in the order of the history %v", mainlines[1:], ids)
	}
	head, err := replicas[0].GetRevision(ctx, name, r.Mainline)
	if err != nil {
		t.Fatal(err)
	}
	if len(head.Tree) != len(integrated) ||
		slices.ContainsFunc(head.Tree, func(e repo.Entry) bool { return strings.HasSuffix(e.Path, brokenSuffix) }) {
		t.Errorf("the mainline holds %v, want the %d files of the integrated changes and no broken one", head.Tree, len(integrated))
	}

	// Every candidate had a validate job of its own, and only a landed one's revision is on the
	// mainline.
	var candidates, jobs, distinctJobs, landedOff int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT job_id),
		count(*) FILTER (WHERE state = 'landed' AND revision <> ALL($2::text[])) FROM candidates WHERE repository = $1`,
		name, ids).Scan(&candidates, &distinctJobs, &landedOff); err != nil {
		t.Fatal(err)
	}
	if landedOff != 0 {
		t.Errorf("%d landed candidates have a revision that is not on the mainline", landedOff)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE kind = 'validate'`).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if candidates != distinctJobs || jobs != candidates {
		t.Errorf("%d candidates with %d distinct jobs, %d validate jobs; want one job per candidate", candidates, distinctJobs, jobs)
	}
	t.Logf("%d changes (%d broken), %d candidates (%d built on another), at most %d validating at once, %d mainlines seen",
		len(changes), len(changes)-len(integrated), candidates, speculative, maxValidating.Load(), len(mainlines))
}
