// Package gate runs the integration queue: each repository with a validation policy validates
// its changes in arrival order, several candidates at once, each on the one ahead of it, and
// moves its mainline only on a passing, verified attestation for exactly the candidate tree. It
// owns the queue's engine (RunQueue: candidates, speculation, batches and their bisection,
// lanes, landing), the validation policy (Policy, Lane) it parses once per advance into Rules,
// what a validate job's outcome means (Decide), and the loop that advances queues on every
// replica (Gate). It reaches the data only through the store (store.RepoStore.InQueue and its
// store.QueueTx), and never imports the SDK.
//
// The queue's state lives only in the store. Any replica may advance any repository's queue
// (the store serializes them per repository), so a replica that dies leaves nothing behind
// that another cannot take over: every replica sweeps the pending queues periodically, and
// advances a queue at once when something it served may have moved it on (an integrate, a
// validate job's completion or failure).
package gate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/ag-coord/ag/agwp"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/store"
)

// ValidateMaxAttempts is how many claims a validate job gets: a validation that ran is
// completed (passed or failed) on its first; more claims are only for workers that died or
// could not fetch the tree.
const ValidateMaxAttempts = 3

// maxReasonTail bounds the log tail kept in a rejected change's reason; the validate job keeps
// the longer tail (64 KiB) in its output.
const maxReasonTail = 4 << 10

// DefaultMaxDepth bounds the automatic depth of a queue: candidates beyond the workers' reach
// only wait, and each is rebuilt when one ahead of it fails.
const DefaultMaxDepth = 8

// Gate advances integration queues.
type Gate struct {
	store    store.Store
	log      *slog.Logger
	sweep    time.Duration
	kicks    chan string
	sweepNow chan struct{}
	signal   store.Signal

	// Capacity is what a policy without a depth speculates to; nil: one candidate at a time.
	Capacity *Capacity
	// MaxDepth bounds the automatic depth (DefaultMaxDepth when 0).
	MaxDepth int
	// OnChange, when set, is called with every change whose state an advance changed.
	OnChange func(store.Change)
}

// New answers a gate over st that sweeps every queue with pending changes every sweep
// (default 2s), which bounds how late it notices what no request told it (a validate job whose
// lease expired for good, an advance that failed).
func New(st store.Store, log *slog.Logger, sweep time.Duration) *Gate {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if sweep <= 0 {
		sweep = 2 * time.Second
	}
	return &Gate{store: st, log: log, sweep: sweep, kicks: make(chan string, 1024), sweepNow: make(chan struct{}, 1)}
}

// KickAll asks for an advance of every pending queue soon: more workers came, and queues may
// speculate further.
func (g *Gate) KickAll() {
	select {
	case g.sweepNow <- struct{}{}:
	default:
	}
}

// Kick asks for an advance of repository's queue soon. It never blocks: when the gate is
// behind, the sweep catches up.
func (g *Gate) Kick(repository string) {
	select {
	case g.kicks <- repository:
	default:
	}
}

// Changed answers a channel closed after the next advance of this gate that changed a change.
func (g *Gate) Changed() <-chan struct{} { return g.signal.Wait() }

// Run advances queues until ctx ends: the kicked ones at once, all pending ones every sweep.
func (g *Gate) Run(ctx context.Context) {
	t := time.NewTicker(g.sweep)
	defer t.Stop()
	g.advancePending(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case name := <-g.kicks:
			// Kicks for one repository that pile up while it advances need one advance.
			pending := map[string]bool{name: true}
		drain:
			for {
				select {
				case n := <-g.kicks:
					pending[n] = true
				default:
					break drain
				}
			}
			for n := range pending {
				g.advanceLogged(ctx, n)
			}
		case <-t.C:
			g.advancePending(ctx)
		case <-g.sweepNow:
			g.advancePending(ctx)
		}
	}
}

func (g *Gate) advancePending(ctx context.Context) {
	names, err := g.store.PendingQueues(ctx)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("list pending integration queues", "err", err)
		}
		return
	}
	for _, n := range names {
		g.advanceLogged(ctx, n)
	}
}

func (g *Gate) advanceLogged(ctx context.Context, name string) {
	if _, err := g.Advance(ctx, name); err != nil && ctx.Err() == nil && !errors.Is(err, store.ErrNotFound) {
		g.log.Warn("advance integration queue", "repository", name, "err", err)
	}
}

// Advance moves one repository's queue on now and answers the changes whose state changed.
func (g *Gate) Advance(ctx context.Context, repository string) ([]store.Change, error) {
	changed, err := AdvanceWith(ctx, g.store, repository, g.rules)
	if err != nil {
		return nil, err
	}
	for _, c := range changed {
		g.log.Info("change "+string(c.State), "change", c.ID, "repository", c.Repository, "author", c.Holder,
			"candidate", c.CandidateRevision, "job", c.JobID, "reason", firstLine(c.Reason))
		if g.OnChange != nil {
			g.OnChange(c)
		}
	}
	if len(changed) > 0 {
		g.signal.Fire()
		// What moved may let more move (an advance builds at most BuildBudget changes):
		// the queue is advanced again until an advance changes nothing.
		g.Kick(repository)
	}
	return changed, nil
}

// rules answers the rules of one advance under the repository's stored policy, parsed once: a
// policy the server cannot read was not written by it, and its candidates' jobs fail on the
// worker with a clear payload error rather than the queue stalling.
func (g *Gate) rules(validation []byte) Rules {
	p, _, err := ParsePolicy(validation)
	if err != nil {
		p = Policy{}
	}
	depth, batch := g.shape(p)
	protected := p.Protected()
	r := Rules{
		Decide: Decide,
		Job: func(c store.Change, candidate store.Revision, lane string, mainline store.Revision) store.EnqueueJobParams {
			return validateJob(p, protected, c, candidate, lane, mainline)
		},
		Lanes: p.Lanes,
		Depth: depth,
		Batch: batch,
	}
	if len(protected) > 0 {
		r.Protected = func(c store.Change) []string { return ProtectedTouched(protected, c.Paths) }
	}
	return r
}

// Shape answers how deep a queue speculates and how many changes a candidate takes, from its
// stored policy: the policy's depth, or the validate workers seen recently.
func (g *Gate) Shape(validation []byte) (depth, batch int) {
	p, _, err := ParsePolicy(validation)
	if err != nil {
		return 1, 1
	}
	return g.shape(p)
}

func (g *Gate) shape(p Policy) (depth, batch int) {
	depth = p.Depth
	if depth == 0 && g.Capacity != nil {
		limit := g.MaxDepth
		if limit <= 0 {
			limit = DefaultMaxDepth
		}
		depth = min(g.Capacity.Estimate(), limit)
	}
	return max(depth, 1), max(p.Batch, 1)
}

// validateJob answers the validate job of a candidate under the repository's stored policy.
// The payload names the candidate's git tree id and, when the candidate has one, its tree
// digest (a candidate built in the queue's transaction has none: computing it reads the whole
// tree). With protected paths, it names the mainline whose copy of them the worker validates
// with.
func validateJob(p Policy, protected []string, c store.Change, candidate store.Revision, lane string, mainline store.Revision) store.EnqueueJobParams {
	l, ok := p.Lane(lane)
	if !ok {
		l = Lane{} // as above: the queue only builds candidates for the policy's lanes
	}
	var from *agwp.ProtectedFrom
	var hidden []string
	if lane != RootLane {
		hidden = LaneHidden(p.Lanes, lane)
	}
	if paths := protectedFor(protected, hidden); len(paths) > 0 {
		from = &agwp.ProtectedFrom{Revision: mainline.ID, Paths: paths}
	}
	payload, _ := json.Marshal(agwp.ValidatePayload{
		Repository:        c.Repository,
		Change:            c.ID,
		CandidateRevision: candidate.ID,
		TreeDigest:        candidate.TreeDigest,
		GitTree:           candidate.GitTree,
		Command:           l.Command,
		Timeout:           time.Duration(l.Timeout).String(),
		Env:               l.Env,
		Lane:              lane,
		Network:           cmp.Or(p.Network, NetworkNone),
		Isolation:         cmp.Or(p.Isolation, IsolationSandbox),
		Limits:            payloadLimits(p.Limits),
		Protected:         from,
		Preset:            p.Preset,
	})
	return store.EnqueueJobParams{
		Kind:        agwp.KindValidate,
		Payload:     payload,
		MaxAttempts: ValidateMaxAttempts,
		UniqueKey:   "validate:" + c.ID + ":" + candidate.ID,
		EnqueuedBy:  store.PrincipalOf(c.Holder),
	}
}

// payloadLimits answers a policy's limits as the payload carries them.
func payloadLimits(l *Limits) *agwp.PayloadLimits {
	if l == nil {
		return nil
	}
	return &agwp.PayloadLimits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, DiskBytes: l.DiskBytes}
}

// Decide settles a validating change from its validate job. The attestation was verified when
// the job was completed (signature by a key of the claiming principal, subject, job and claim);
// Decide checks again, by the rule the server checked (attest.Validation.CheckSubject), that it
// attests exactly this candidate, so that nothing but a pass for this tree can move the
// mainline, whatever wrote the job's attestation into the store.
func Decide(c store.Change, candidate store.Revision, job store.Job, att *store.Attestation) Verdict {
	switch job.State {
	case store.JobQueued, store.JobClaimed:
		return Verdict{Outcome: VerdictPending}
	case store.JobCancelled:
		return Verdict{Outcome: VerdictCancel, Reason: "the validate job " + job.ID + " was cancelled"}
	case store.JobFailed:
		return Verdict{Outcome: VerdictReject,
			Reason: "validation could not run: " + job.LastError + withTail(job.Output)}
	case store.JobCompleted:
	default:
		return Verdict{Outcome: VerdictPending}
	}
	if att == nil {
		return Verdict{Outcome: VerdictReject, Reason: "the validate job " + job.ID + " was completed without an attestation"}
	}
	v, err := attestedValidation(att)
	if err != nil {
		return Verdict{Outcome: VerdictReject, Reason: "the attestation " + att.Digest + " is unreadable: " + err.Error()}
	}
	if err := v.CheckSubject(attest.Candidate{
		Repository: c.Repository, Revision: candidate.ID, GitTree: candidate.GitTree, TreeDigest: candidate.TreeDigest,
	}); err != nil {
		return Verdict{Outcome: VerdictReject, Reason: err.Error()}
	}
	switch {
	case v.JobID != job.ID || v.ClaimNumber != job.ClaimNumber:
		return Verdict{Outcome: VerdictReject,
			Reason: fmt.Sprintf("the attestation is about job %s claim %d, not job %s claim %d", v.JobID, v.ClaimNumber, job.ID, job.ClaimNumber)}
	case v.Passed():
		if reason := weakerThanAsked(c.Repository, job.Payload, v); reason != "" {
			return Verdict{Outcome: VerdictReject, Reason: reason, Attestation: att.Digest}
		}
		return Verdict{Outcome: VerdictPass}
	}
	return Verdict{Outcome: VerdictReject, Reason: failure(v) + withTail(job.Output), Attestation: att.Digest}
}

// weakerThanAsked says why the pass v is weaker evidence than the job's policy asks, or answers
// "". A pass must come from a run in the worker's sandbox, with no more network than asked,
// unless the policy takes any run. A worker too old to say so does not pass for one that
// did: its default was the worker's own network. Jobs enqueued before policies asked (no
// network in their payload) keep the rule they were enqueued under.
func weakerThanAsked(repository string, payload []byte, v attest.Validation) string {
	var p agwp.ValidatePayload
	if err := json.Unmarshal(payload, &p); err != nil {
		return ""
	}
	if reason := protectedNotAsAsked(p.Protected, v); reason != "" {
		return reason
	}
	if p.Network == "" || p.Isolation == IsolationAny {
		return ""
	}
	asked := "no network"
	if p.Network == NetworkEgress {
		asked = "no network but its egress proxy"
	}
	why := func(what, fix string) string {
		return fmt.Sprintf("the pass of worker %s is weaker evidence than the policy of %s asks: %s; %s "+
			"(or an admin accepts any run: ag repo set-validation %s --isolation none)", v.Worker, repository, what, fix, repository)
	}
	switch v.Isolation {
	case attest.IsolationBubblewrap:
	case attest.IsolationNone:
		return why("its run had no sandbox (ag-worker --unsafe-no-sandbox)", "run the validation on a worker with its sandbox")
	default:
		return why("it does not say how its run was isolated", "upgrade that ag-worker")
	}
	switch {
	case v.Network == attest.NetworkNone:
	case v.Network == attest.NetworkEgress && p.Network == NetworkEgress:
	case v.Network == attest.NetworkShared:
		return why("its run had the worker's own network (ag-worker --sandbox-network shared), and the policy gives "+asked,
			"restart that worker without --sandbox-network shared")
	case v.Network == "":
		return why("it does not say which network its run had", "upgrade that ag-worker")
	default:
		return why("its run had network "+v.Network+", and the policy gives "+asked, "run it on another worker")
	}
	return ""
}

// protectedNotAsAsked says why a pass was not run with the protected paths the job asked for,
// or answers "": the attestation must say it took exactly those paths from exactly that
// revision. A worker that ignored them ran the candidate's own copy, which any change can
// rewrite (ADR-0031), whatever its isolation.
func protectedNotAsAsked(asked *agwp.ProtectedFrom, v attest.Validation) string {
	if asked == nil {
		return ""
	}
	got := v.Protected
	switch {
	case got == nil:
		return fmt.Sprintf("the pass of worker %s ran the candidate's own copy of the protected paths %s, not the mainline's: upgrade that ag-worker",
			v.Worker, strings.Join(asked.Paths, ", "))
	case got.Revision != asked.Revision || !slices.Equal(got.Paths, asked.Paths):
		return fmt.Sprintf("the pass of worker %s took the protected paths %s from revision %s, not %s from revision %s as asked",
			v.Worker, strings.Join(got.Paths, ", "), got.Revision, strings.Join(asked.Paths, ", "), asked.Revision)
	}
	return ""
}

func attestedValidation(att *store.Attestation) (attest.Validation, error) {
	env, err := attest.Decode(att.Envelope)
	if err != nil {
		return attest.Validation{}, err
	}
	payload, err := env.DecodeB64Payload()
	if err != nil {
		return attest.Validation{}, err
	}
	return attest.ParseStatement(payload)
}

// failure says how a validation failed, naming the command and the worker.
func failure(v attest.Validation) string {
	cmd := strings.Join(v.Command, " ")
	switch {
	case v.Reason != "":
		return fmt.Sprintf("validation failed: `%s` %s (worker %s)", cmd, v.Reason, v.Worker)
	default:
		return fmt.Sprintf("validation failed: `%s` exited with status %d (worker %s)", cmd, v.ExitCode, v.Worker)
	}
}

// withTail answers the end of a log, to follow a reason, starting at a line.
func withTail(output string) string {
	if strings.TrimSpace(output) == "" {
		return ""
	}
	if len(output) > maxReasonTail {
		output = output[len(output)-maxReasonTail:]
		if i := strings.IndexByte(output, '\n'); i >= 0 && i < len(output)-1 {
			output = output[i+1:]
		}
	}
	return "\n\n" + strings.TrimRight(output, "\n")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
