package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// actor is an in-process client of the harness: one SDK client per replica, every call
// recorded, spread over the replicas in turn.
type actor struct {
	r       *run
	name    string
	clients []*client.Client

	mu   sync.Mutex
	rng  *rand.Rand
	next int
}

func (r *run) newActor(name, principal string, stream uint64) *actor {
	a := &actor{r: r, name: name, rng: rand.New(rand.NewPCG(r.cfg.Seed, stream))}
	for i, u := range r.urls {
		a.clients = append(a.clients, newRecordedClient(r.hist, r.hc, u, r.tokens[principal], name, i, callTimeout))
	}
	return a
}

// Random numbers of an actor; each actor has its own stream drawn from the seed.
func (a *actor) float() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rng.Float64()
}

func (a *actor) intn(n int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rng.IntN(n)
}

func (a *actor) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(a.intn(int(hi-lo)+1))
}

// expect is what a call must get; the zero value expects nothing.
type expect struct {
	method string // the method the expectation is about (a call may make several requests)
	e      Expect
	code   connect.Code
	why    string
	items  map[string]string // of a batch call: the jobs whose items it is about, each with its reason; nil: every item
}

// call runs fn against one replica after the other, starting with the next in turn, until it
// gets an answer that says whether it was applied, every replica was tried, or ctx ended.
// Every request fn makes is recorded as part of one call.
func (a *actor) call(ctx context.Context, x expect, fn func(ctx context.Context, c *client.Client) error) error {
	id := a.r.hist.calls.Add(1)
	ctx = withExpectation(ctx, expectation{call: id, method: x.method, expect: x.e, wantCode: x.code, why: x.why, items: x.items})
	var err error
	for range a.clients {
		a.mu.Lock()
		c := a.clients[a.next%len(a.clients)]
		a.next++
		a.mu.Unlock()
		err = fn(ctx, c)
		if !isUnknown(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// callUntil repeats call while its answer is unknown or retry says so, for up to d.
func (a *actor) callUntil(ctx context.Context, d time.Duration, x expect, retry func(error) bool, fn func(ctx context.Context, c *client.Client) error) error {
	deadline := time.Now().Add(d)
	for {
		err := a.call(ctx, x, fn)
		if (!isUnknown(err) && (retry == nil || !retry(err))) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (r *run) newActors() {
	r.enqueuer = &enqueuer{actor: r.newActor("enqueuer", "enqueuer", 1)}
	for i := range r.cfg.RecordedWorkers {
		name := fmt.Sprintf("rw%d", i+1)
		// Every other recorded worker takes its jobs in batches, so that ClaimJobs and
		// CompleteJobs meet the same faults and checks as their single counterparts beside them.
		r.recorded = append(r.recorded, &recWorker{actor: r.newActor(name, "recorder", uint64(100+i)), label: name, batch: i%2 == 1})
	}
	r.prober = &prober{actor: r.newActor("prober", "recorder", 2), enq: r.newActor("prober-enqueue", "enqueuer", 3)}
	for i := range r.cfg.Agents {
		name := fmt.Sprintf("agent-%d", i+1)
		r.agents = append(r.agents, &agent{actor: r.newActor(name, name, uint64(200+i))})
	}
}

// ---- the enqueuer ----

// enqueuer enqueues ag.noop jobs that sleep a little, some that fail, and cancels a few. Now
// and then it enqueues a burst of jobs that all become claimable at one instant.
type enqueuer struct {
	*actor
	mu   sync.Mutex
	jobs []string
}

// burstDelay is how long after its start a burst's jobs become claimable: enough for its
// enqueues to be done.
const burstDelay = 400 * time.Millisecond

func (e *enqueuer) run(ctx context.Context) {
	for ctx.Err() == nil {
		sleep(ctx, e.between(60*time.Millisecond, 180*time.Millisecond))
		if ctx.Err() != nil {
			return
		}
		// Jobs enqueued one by one are each claimed at once by whichever poller wakes first,
		// so a ClaimJobs would only ever get one. A burst's jobs become claimable together
		// (each one's delay counts down to the same instant): the pollers race for them, and
		// a batch worker that is waiting takes several in one claim.
		if e.float() < 0.1 {
			due := time.Now().Add(burstDelay)
			for n := 4 + e.intn(9); n > 0 && ctx.Err() == nil; n-- {
				e.enqueue(ctx, time.Until(due))
			}
			continue
		}
		e.enqueue(ctx, 0)
	}
}

// enqueue enqueues one job, claimable after delay, and now and then cancels one of the last.
func (e *enqueuer) enqueue(ctx context.Context, delay time.Duration) {
	fields := map[string]any{"ms": 10 + e.intn(140)}
	failing := e.float() < 0.08
	if failing {
		fields["fail"] = "failing on purpose"
	}
	payload, _ := structpb.NewStruct(fields)
	req := &agwpv1.EnqueueJobRequest{Kind: "ag.noop", Payload: payload}
	if delay > 0 {
		req.Delay = durationpb.New(delay)
	}
	// A failing job is retried after the server's backoff (1 s, 2 s, ...): two attempts
	// keep it inside the run.
	if failing || e.float() < 0.2 {
		req.MaxAttempts = 2
	}
	var id string
	err := e.call(ctx, expect{}, func(ctx context.Context, c *client.Client) error {
		res, err := c.Jobs.EnqueueJob(ctx, req)
		if err == nil {
			id = res.GetJob().GetId()
		}
		return err
	})
	if err != nil {
		return
	}
	e.mu.Lock()
	e.jobs = append(e.jobs, id)
	var cancel string
	if e.float() < 0.04 && len(e.jobs) > 3 {
		cancel = e.jobs[len(e.jobs)-1-e.intn(3)]
	}
	e.mu.Unlock()
	if cancel != "" {
		_ = e.call(ctx, expect{}, func(ctx context.Context, c *client.Client) error {
			_, err := c.Jobs.CancelJob(ctx, &agwpv1.CancelJobRequest{JobId: cancel})
			return err
		})
	}
}

// ---- recorded workers ----

// recWorker claims ag.noop jobs beside the ag-worker processes, heartbeats, completes or fails
// them, and now and then pauses past its claim's lease and then reports with the old number.
// A batch worker claims up to maxBatch jobs at a time (ClaimJobs), runs them side by side and
// completes those it completes in one CompleteJobs call.
type recWorker struct {
	*actor
	label string
	batch bool
}

// maxBatch is the most jobs a batch worker asks for: a few, so that a batch holds both jobs
// that are still its own and jobs whose claims were taken over when it pauses.
const maxBatch = 8

func (w *recWorker) run(ctx context.Context) {
	for ctx.Err() == nil {
		var claims []*client.Claim
		err := w.call(ctx, expect{}, func(ctx context.Context, c *client.Client) error {
			opts := client.ClaimOptions{Worker: w.label, Kinds: []string{"ag.noop"}, Lease: workerLease, Wait: time.Second}
			if w.batch {
				var err error
				claims, err = c.ClaimMany(ctx, opts, 2+w.intn(maxBatch-1))
				return err
			}
			claim, err := c.Claim(ctx, opts)
			claims = nil
			if claim != nil {
				claims = []*client.Claim{claim}
			}
			return err
		})
		switch {
		case err != nil:
			sleep(ctx, 100*time.Millisecond)
		case len(claims) == 0:
		case w.batch:
			w.workBatch(ctx, claims)
		default:
			w.work(ctx, claims[0].Job)
		}
	}
}

// work runs one claimed job.
func (w *recWorker) work(ctx context.Context, job *agwpv1.Job) {
	n := uint64(job.GetAttempts())
	fields := job.GetPayload().GetFields()
	ms := time.Duration(fields["ms"].GetNumberValue()) * time.Millisecond
	if w.float() < 0.05 {
		// Paused past the lease (as a heartbeat extended it), as a stopped process would be;
		// then it reports as if nothing happened, with its old claim number.
		_ = w.heartbeat(ctx, job.GetId(), n, expect{})
		sleep(ctx, workerLease+800*time.Millisecond)
		w.reportLate(ctx, job.GetId(), n)
		return
	}
	sleep(ctx, ms/2)
	_ = w.heartbeat(ctx, job.GetId(), n, expect{})
	sleep(ctx, ms/2)
	switch p := w.float(); {
	case fields["fail"].GetStringValue() != "" || p < 0.1:
		_ = w.fail(ctx, job.GetId(), n, false, expect{})
	case p < 0.13:
		_ = w.fail(ctx, job.GetId(), n, true, expect{})
	default:
		_ = w.complete(ctx, job.GetId(), n, expect{})
	}
}

// reportLate reports on a claim after a pause: when the job shows that the claim is no longer
// current (claimed again, or finished), every report with its number must be refused.
func (w *recWorker) reportLate(ctx context.Context, jobID string, n uint64) {
	var j *agwpv1.Job
	if err := w.call(ctx, expect{}, func(ctx context.Context, c *client.Client) error {
		res, err := c.Jobs.GetJob(ctx, &agwpv1.GetJobRequest{JobId: jobID})
		j = res.GetJob()
		return err
	}); err != nil {
		return
	}
	if j.GetAttempts() == uint32(n) && j.GetState() == agwpv1.JobState_JOB_STATE_CLAIMED && j.GetClaimedBy() == "recorder|"+w.label {
		// Nobody took it meanwhile: the claim is still this one's.
		_ = w.complete(ctx, jobID, n, expect{})
		return
	}
	why := fmt.Sprintf("after its pause the job was %s with claim %d by %q", j.GetState(), j.GetAttempts(), j.GetClaimedBy())
	_ = w.heartbeat(ctx, jobID, n, expect{method: "HeartbeatJob", e: ExpectRefused, code: connect.CodeNotFound, why: why})
	_ = w.complete(ctx, jobID, n, expect{method: "CompleteJob", e: ExpectRefused, code: connect.CodeFailedPrecondition, why: why})
}

// workBatch runs the jobs of one ClaimJobs answer side by side, as a worker of many short jobs
// does, fails those it fails one by one and completes the others in one CompleteJobs call.
func (w *recWorker) workBatch(ctx context.Context, claims []*client.Claim) {
	if w.float() < 0.1 {
		// Stalled past the leases, as a worker whose heartbeats stopped; but it goes on
		// heartbeating the first job of a batch of several, so that its late report (one call,
		// every job with its old claim number) mixes a current claim with stale ones.
		for _, cl := range claims {
			_ = w.heartbeat(ctx, cl.Job.GetId(), cl.FencingToken(), expect{})
		}
		var kept []*client.Claim
		if len(claims) > 1 {
			kept = claims[:1]
		}
		for end := time.Now().Add(workerLease + 800*time.Millisecond); ctx.Err() == nil && time.Now().Before(end); {
			sleep(ctx, min(600*time.Millisecond, time.Until(end)))
			for _, cl := range kept {
				_ = w.heartbeat(ctx, cl.Job.GetId(), cl.FencingToken(), expect{})
			}
		}
		w.reportLateBatch(ctx, claims)
		return
	}
	var longest time.Duration
	for _, cl := range claims {
		longest = max(longest, time.Duration(cl.Job.GetPayload().GetFields()["ms"].GetNumberValue())*time.Millisecond)
	}
	sleep(ctx, longest/2)
	for _, cl := range claims {
		_ = w.heartbeat(ctx, cl.Job.GetId(), cl.FencingToken(), expect{})
	}
	sleep(ctx, longest/2)
	var done []*client.Claim
	for _, cl := range claims {
		switch p := w.float(); {
		case cl.Job.GetPayload().GetFields()["fail"].GetStringValue() != "" || p < 0.1:
			_ = w.fail(ctx, cl.Job.GetId(), cl.FencingToken(), false, expect{})
		case p < 0.13:
			_ = w.fail(ctx, cl.Job.GetId(), cl.FencingToken(), true, expect{})
		default:
			done = append(done, cl)
		}
	}
	if len(done) > 0 {
		_ = w.completeMany(ctx, done, expect{})
	}
}

// reportLateBatch is reportLate for a batch: the jobs whose claims are no longer current go
// into one CompleteJobs call with those still its own, and each of their items must be refused
// while the others may be accepted; a refused item holds back no other.
func (w *recWorker) reportLateBatch(ctx context.Context, claims []*client.Claim) {
	stale := map[string]string{}
	for _, cl := range claims {
		id, n := cl.Job.GetId(), cl.FencingToken()
		var j *agwpv1.Job
		if err := w.call(ctx, expect{}, func(ctx context.Context, c *client.Client) error {
			res, err := c.Jobs.GetJob(ctx, &agwpv1.GetJobRequest{JobId: id})
			j = res.GetJob()
			return err
		}); err != nil {
			continue // not known to be stale: reported with no expectation
		}
		if j.GetAttempts() == uint32(n) && j.GetState() == agwpv1.JobState_JOB_STATE_CLAIMED && j.GetClaimedBy() == "recorder|"+w.label {
			continue // nobody took it meanwhile: the claim is still this one's
		}
		why := fmt.Sprintf("after its pause the job was %s with claim %d by %q", j.GetState(), j.GetAttempts(), j.GetClaimedBy())
		stale[id] = why
		_ = w.heartbeat(ctx, id, n, expect{method: "HeartbeatJob", e: ExpectRefused, code: connect.CodeNotFound, why: why})
	}
	_ = w.completeMany(ctx, claims, expect{method: "CompleteJob", e: ExpectRefused, code: connect.CodeFailedPrecondition, items: stale})
}

// completeMany completes claims in one CompleteJobs call. x is about the call's items
// (method "CompleteJob"), as they are recorded.
func (w *recWorker) completeMany(ctx context.Context, claims []*client.Claim, x expect) error {
	result, _ := structpb.NewStruct(map[string]any{"by": w.label, "batch": len(claims)})
	cs := make([]client.Completion, len(claims))
	for i, cl := range claims {
		cs[i] = client.Completion{Claim: cl, CompleteOptions: client.CompleteOptions{Result: result, Output: "done in a batch by " + w.label}}
	}
	// A refused item is an answer, not a failure of the call: only a call with no answer is
	// tried again on the next replica, with every item, as CompleteJob would be.
	return w.call(ctx, x, func(ctx context.Context, c *client.Client) error {
		_, _, err := c.CompleteMany(ctx, cs)
		return err
	})
}

func (w *recWorker) heartbeat(ctx context.Context, jobID string, n uint64, x expect) error {
	return w.call(ctx, x, func(ctx context.Context, c *client.Client) error {
		_, err := c.Jobs.HeartbeatJob(ctx, &agwpv1.HeartbeatJobRequest{JobId: jobID, Worker: w.label, FencingToken: n})
		return err
	})
}

func (w *recWorker) complete(ctx context.Context, jobID string, n uint64, x expect) error {
	result, _ := structpb.NewStruct(map[string]any{"by": w.label})
	return w.call(ctx, x, func(ctx context.Context, c *client.Client) error {
		_, err := c.Jobs.CompleteJob(ctx, &agwpv1.CompleteJobRequest{JobId: jobID, Worker: w.label, FencingToken: n,
			Result: result, Output: "done by " + w.label})
		return err
	})
}

func (w *recWorker) fail(ctx context.Context, jobID string, n uint64, final bool, x expect) error {
	return w.call(ctx, x, func(ctx context.Context, c *client.Client) error {
		_, err := c.Jobs.FailJob(ctx, &agwpv1.FailJobRequest{JobId: jobID, Worker: w.label, FencingToken: n,
			Error: "failed on purpose", RetryDelay: durationpb.New(50 * time.Millisecond), Final: final})
		return err
	})
}

// ---- the prober: a claim that expires, taken again by the same worker name ----

// prober plays ADR-0012's scenario on a job of a kind of its own, so that nobody else
// interferes: a worker claims it, pauses past the lease, the same worker name claims it
// again, and the old claim's heartbeat, failure and completion must all be refused.
type prober struct {
	*actor
	enq *actor
	n   atomic.Int64
}

func (p *prober) expireClaim(ctx context.Context) error {
	kind := fmt.Sprintf("chaos.probe.%d", p.n.Add(1))
	w := &recWorker{actor: p.actor, label: "probe"}
	var jobID string
	if err := p.enq.callUntil(ctx, 15*time.Second, expect{}, nil, func(ctx context.Context, c *client.Client) error {
		res, err := c.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: kind})
		jobID = res.GetJob().GetId()
		return err
	}); err != nil {
		return fmt.Errorf("enqueue %s: %w", kind, err)
	}
	claimOnce := func(lease time.Duration) (*agwpv1.Job, error) {
		var job *agwpv1.Job
		err := p.callUntil(ctx, 20*time.Second, expect{}, func(err error) bool { return err == nil && job == nil },
			func(ctx context.Context, c *client.Client) error {
				claim, err := c.Claim(ctx, client.ClaimOptions{Worker: w.label, Kinds: []string{kind}, Lease: lease, Wait: 2 * time.Second})
				if claim != nil {
					job = claim.Job
				}
				return err
			})
		if err == nil && job == nil {
			err = errors.New("no job to claim")
		}
		return job, err
	}
	first, err := claimOnce(time.Second)
	if err != nil {
		return fmt.Errorf("claim %s: %w", kind, err)
	}
	n := uint64(first.GetAttempts())
	// The pause: the first claim's lease runs out.
	sleep(ctx, 1500*time.Millisecond)
	second, err := claimOnce(20 * time.Second)
	if err != nil {
		return fmt.Errorf("claim %s again: %w", kind, err)
	}
	m := uint64(second.GetAttempts())
	if second.GetId() != jobID || first.GetId() != jobID {
		return fmt.Errorf("claims of kind %s answered jobs %s and %s, want %s", kind, first.GetId(), second.GetId(), jobID)
	}
	if m <= n {
		p.r.violate("claim numbers grow", "job %s: claimed again by the same worker after its lease ran out with claim number %d, not above the first claim's %d", jobID, m, n)
		return nil
	}
	why := fmt.Sprintf("claim %d was superseded by claim %d of the same worker name", n, m)
	_ = w.heartbeat(ctx, jobID, n, expect{method: "HeartbeatJob", e: ExpectRefused, code: connect.CodeNotFound, why: why})
	_ = w.fail(ctx, jobID, n, false, expect{method: "FailJob", e: ExpectRefused, code: connect.CodeNotFound, why: why})
	_ = w.complete(ctx, jobID, n, expect{method: "CompleteJob", e: ExpectRefused, code: connect.CodeFailedPrecondition, why: why})
	cur := fmt.Sprintf("claim %d is the job's current claim", m)
	_ = w.heartbeat(ctx, jobID, m, expect{method: "HeartbeatJob", e: ExpectAccepted, why: cur})
	_ = w.complete(ctx, jobID, m, expect{method: "CompleteJob", e: ExpectAccepted, why: cur})
	return nil
}

// ---- agents ----

// files are the paths agents edit; agents overlap on them on purpose.
var files = []string{"src/a.txt", "src/b.txt", "src/c.txt", "lib/d.txt", "lib/e.txt", "notes.txt"}

// agent leases paths, edits them on the mainline and integrates, in both repositories; in
// the gated one some of its changes fail validation on purpose.
type agent struct {
	*actor
	iter int
}

var probeNumber atomic.Int64

func (a *agent) run(ctx context.Context) {
	for ctx.Err() == nil {
		a.iteration(ctx)
		sleep(ctx, a.between(50*time.Millisecond, 300*time.Millisecond))
	}
}

// scope answers the paths to lease and the files to edit under them.
func (a *agent) scope() (lease, edit []string) {
	switch p := a.float(); {
	case p < 0.1:
		dir := []string{"src/", "lib/"}[a.intn(2)]
		var under []string
		for _, f := range files {
			if strings.HasPrefix(f, dir) {
				under = append(under, f)
			}
		}
		return []string{dir}, under[:1+a.intn(len(under))]
	case p < 0.25:
		i, j := a.intn(len(files)), a.intn(len(files))
		if i == j {
			j = (i + 1) % len(files)
		}
		return []string{files[i], files[j]}, []string{files[i], files[j]}
	default:
		f := files[a.intn(len(files))]
		return []string{f}, []string{f}
	}
}

func (a *agent) iteration(ctx context.Context) {
	a.iter++
	repo := freeRepo
	if a.float() < 0.5 {
		repo = gatedRepo
	}
	paths, edit := a.scope()
	// Now and then an agent dawdles: its short lease runs out, maybe while another agent waits
	// for the path, and it renews late, racing that agent's grant.
	dawdle := a.float() < 0.15
	ttl := 5 * time.Second
	if dawdle {
		ttl = time.Second
	}
	var lease *agwpv1.Lease
	if err := a.call(ctx, expect{}, func(ctx context.Context, c *client.Client) error {
		l, err := c.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: repo, Paths: paths, Holder: "a", TTL: ttl, Wait: time.Second})
		lease = l
		return err
	}); err != nil {
		return // taken by another agent (aborted), or no answer
	}
	defer func() {
		_ = a.call(context.WithoutCancel(ctx), expect{}, func(ctx context.Context, c *client.Client) error {
			_, err := c.Leases.ReleaseLease(ctx, &agwpv1.ReleaseLeaseRequest{LeaseId: lease.GetId(), FencingToken: lease.GetFencingToken()})
			return err
		})
	}()
	if dawdle {
		sleep(ctx, a.between(700*time.Millisecond, 1300*time.Millisecond))
		_ = a.call(ctx, expect{}, func(ctx context.Context, c *client.Client) error {
			_, err := c.Leases.RenewLease(ctx, &agwpv1.RenewLeaseRequest{LeaseId: lease.GetId(), FencingToken: lease.GetFencingToken(), Ttl: durationpb.New(5 * time.Second)})
			return err
		})
	}
	base, err := a.mainline(ctx, repo)
	if err != nil {
		return
	}
	failing := repo == gatedRepo && a.float() < 0.25
	var changes []client.FileChange
	for _, f := range edit {
		content := fmt.Sprintf("%s, iteration %d\n", a.name, a.iter)
		if failing {
			content += failMarker + "\n"
		}
		changes = append(changes, client.FileChange{Path: f, Content: []byte(content)})
	}
	var change *agwpv1.Change
	if err := a.call(ctx, expect{}, func(ctx context.Context, c *client.Client) error {
		ch, err := c.IntegrateFiles(ctx, client.IntegrateOptions{Repository: repo, BaseRevision: base, Holder: "a",
			FencingTokens: []uint64{lease.GetFencingToken()}, Message: fmt.Sprintf("%s iteration %d", a.name, a.iter), Changes: changes})
		change = ch
		return err
	}); err != nil || repo != gatedRepo {
		return
	}
	// Follow the change through the gate, as `ag integrate` does: an agent waits for its
	// change before it makes the next.
	a.follow(ctx, change.GetId(), 20*time.Second)
}

// mainline answers the repository's mainline revision.
func (a *agent) mainline(ctx context.Context, repo string) (string, error) {
	var rev string
	err := a.call(ctx, expect{}, func(ctx context.Context, c *client.Client) error {
		res, err := c.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: repo})
		rev = res.GetRevision()
		return err
	})
	return rev, err
}

// follow waits until the change is decided, up to d.
func (a *agent) follow(ctx context.Context, id string, d time.Duration) {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		var st agwpv1.ChangeState
		err := a.call(ctx, expect{}, func(ctx context.Context, c *client.Client) error {
			res, err := c.Repos.GetChange(ctx, &agwpv1.GetChangeRequest{ChangeId: id, Wait: durationpb.New(3 * time.Second)})
			st = res.GetChange().GetState()
			return err
		})
		if err == nil && st != agwpv1.ChangeState_CHANGE_STATE_QUEUED && st != agwpv1.ChangeState_CHANGE_STATE_VALIDATING {
			return
		}
		if err != nil {
			sleep(ctx, 200*time.Millisecond)
		}
	}
}

// expireLease plays the lease expiry: this agent leases a path of its own for a second,
// pauses past the lease, the other agent is granted the path, and then this one's integrate,
// renewal and release under the old token must all be refused.
func (a *agent) expireLease(ctx context.Context, other *agent) error {
	repo := freeRepo
	if a.float() < 0.5 {
		repo = gatedRepo
	}
	path := fmt.Sprintf("probe/%s-%d.txt", a.name, probeNumber.Add(1))
	acquire := func(who *agent, holder string, ttl time.Duration) (*agwpv1.Lease, error) {
		var l *agwpv1.Lease
		err := who.callUntil(ctx, 20*time.Second, expect{}, func(err error) bool { return client.IsCode(err, connect.CodeAborted) },
			func(ctx context.Context, c *client.Client) error {
				var err error
				l, err = c.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: repo, Paths: []string{path}, Holder: holder, TTL: ttl, Wait: 3 * time.Second})
				return err
			})
		return l, err
	}
	first, err := acquire(a, "probe-a", time.Second)
	if err != nil {
		return fmt.Errorf("lease %s: %w", path, err)
	}
	base, err := a.mainline(ctx, repo)
	if err != nil {
		return err
	}
	// The pause: the lease runs out, and the other agent is granted the path.
	sleep(ctx, 1500*time.Millisecond)
	second, err := acquire(other, "probe-b", 20*time.Second)
	if err != nil {
		return fmt.Errorf("lease %s for %s: %w", path, other.name, err)
	}
	t1, t2 := first.GetFencingToken(), second.GetFencingToken()
	if t2 <= t1 {
		a.r.violate("lease tokens grow", "%s %s: granted to %s with token %d after the grant with token %d to %s", repo, path, second.GetHolder(), t2, t1, first.GetHolder())
	}
	why := fmt.Sprintf("token %d of %s was superseded by token %d granted to %s", t1, first.GetHolder(), t2, second.GetHolder())
	stale := expect{method: "Integrate", e: ExpectRefused, code: connect.CodeFailedPrecondition, why: why}
	_ = a.call(ctx, stale, func(ctx context.Context, c *client.Client) error {
		_, err := c.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{Repository: repo, BaseRevision: base, Holder: "probe-a",
			FencingTokens: []uint64{t1}, Message: "stale write",
			Edits: []*agwpv1.Edit{{Path: path, Action: &agwpv1.Edit_Content{Content: []byte("stale write by " + a.name + "\n")}}}})
		return err
	})
	stale.method = "RenewLease"
	_ = a.call(ctx, stale, func(ctx context.Context, c *client.Client) error {
		_, err := c.Leases.RenewLease(ctx, &agwpv1.RenewLeaseRequest{LeaseId: first.GetId(), FencingToken: t1, Ttl: durationpb.New(time.Minute)})
		return err
	})
	stale.method = "ReleaseLease"
	_ = a.call(ctx, stale, func(ctx context.Context, c *client.Client) error {
		_, err := c.Leases.ReleaseLease(ctx, &agwpv1.ReleaseLeaseRequest{LeaseId: first.GetId(), FencingToken: t1})
		return err
	})

	cur := fmt.Sprintf("token %d is the current lease of %s", t2, second.GetHolder())
	base, err = other.mainline(ctx, repo)
	if err != nil {
		return nil
	}
	_ = other.call(ctx, expect{method: "Integrate", e: ExpectAccepted, why: cur}, func(ctx context.Context, c *client.Client) error {
		_, err := c.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{Repository: repo, BaseRevision: base, Holder: "probe-b",
			FencingTokens: []uint64{t2}, Message: "write under the current lease",
			Edits: []*agwpv1.Edit{{Path: path, Action: &agwpv1.Edit_Content{Content: []byte("written by " + other.name + "\n")}}}})
		return err
	})
	_ = other.call(context.WithoutCancel(ctx), expect{method: "ReleaseLease", e: ExpectAccepted, why: cur}, func(ctx context.Context, c *client.Client) error {
		_, err := c.Leases.ReleaseLease(ctx, &agwpv1.ReleaseLeaseRequest{LeaseId: second.GetId(), FencingToken: t2})
		return err
	})
	return nil
}
