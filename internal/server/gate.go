package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/agwp"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/store"
)

// validationPolicy checks a Validation message and answers its stored form; nil for none. A
// lane's stored timeout and env are those it runs with: an absent timeout is the policy's, and
// its env is the policy's with the lane's on top.
func validationPolicy(field string, v *agwpv1.Validation) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	timeout, err := duration(field+".timeout", v.GetTimeout(), 0, gate.MinTimeout, gate.MaxTimeout)
	if err != nil {
		return nil, err
	}
	command := v.GetCommand()
	if v.GetPreset() != "" {
		// Before the command, which an unknown preset does not give.
		if _, err := (gate.Policy{}).WithPreset(v.GetPreset()); err != nil {
			return nil, policyError(field, err)
		}
		if preset, _ := gate.PresetCommand(v.GetPreset()); len(command) == 0 {
			command = preset
		}
	}
	p, err := gate.NewPolicy(command, timeout, v.GetEnv())
	if err == nil {
		p, err = p.WithQueue(v.GetDepth(), v.GetBatch())
	}
	if err == nil {
		p, err = p.WithNetwork(v.GetNetwork())
	}
	if err == nil {
		p, err = p.WithIsolation(v.GetIsolation())
	}
	if l := v.GetLimits(); err == nil && l != nil {
		p, err = p.WithLimits(gate.Limits{MemoryBytes: l.GetMemoryBytes(), Pids: l.GetPids(), DiskBytes: l.GetDiskBytes()})
	}
	if err == nil {
		p, err = p.WithProtect(v.GetProtect())
	}
	if err == nil {
		p, err = p.WithPreset(v.GetPreset())
	}
	if err != nil {
		return nil, policyError(field, err)
	}
	if n := len(v.GetLanes()); n > gate.MaxLanes {
		// Before each lane is checked, as WithLanes would after: the refusal says how many.
		return nil, invalid(field+".lanes", "has %d lanes, more than %d", n, gate.MaxLanes)
	}
	lanes := make([]gate.Lane, 0, len(v.GetLanes()))
	for i, l := range v.GetLanes() {
		lf := fmt.Sprintf("%s.lanes[%d]", field, i)
		lt, err := duration(lf+".timeout", l.GetTimeout(), time.Duration(p.Timeout), gate.MinTimeout, gate.MaxTimeout)
		if err != nil {
			return nil, err
		}
		lane, err := gate.NewLane(l.GetName(), l.GetPrefixes(), l.GetCommand(), lt, laneEnv(p.Env, l.GetEnv()))
		if err != nil {
			return nil, policyError(lf, err)
		}
		lanes = append(lanes, lane)
	}
	if p, err = p.WithLanes(lanes); err != nil {
		return nil, policyError(field, err)
	}
	return p.Encode(), nil
}

// laneEnv answers a lane's environment: the policy's, with the lane's on top.
func laneEnv(policy, lane map[string]string) map[string]string {
	if len(lane) == 0 {
		return policy
	}
	env := make(map[string]string, len(policy)+len(lane))
	maps.Copy(env, policy)
	maps.Copy(env, lane)
	return env
}

// policyError answers err, from checking the policy at field, as invalid_argument naming the
// field at fault.
func policyError(field string, err error) error {
	var pe *gate.PolicyError
	if errors.As(err, &pe) {
		return invalid(field+"."+pe.Field, "%s", pe.Msg)
	}
	return invalid(field, "%v", err)
}

func validationProto(stored []byte) *agwpv1.Validation {
	p, ok, err := gate.ParsePolicy(stored)
	if err != nil || !ok {
		return nil
	}
	v := &agwpv1.Validation{Command: p.Command, Timeout: durationpb.New(time.Duration(p.Timeout)), Env: p.Env,
		Depth: uint32(p.Depth), Batch: uint32(p.Batch), Network: cmp.Or(p.Network, gate.NetworkNone), Isolation: cmp.Or(p.Isolation, gate.IsolationSandbox)}
	if l := p.Limits; l != nil {
		v.Limits = &agwpv1.ValidationLimits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, DiskBytes: l.DiskBytes}
	}
	for _, l := range p.Lanes {
		v.Lanes = append(v.Lanes, &agwpv1.ValidationLane{Name: l.Name, Prefixes: l.Prefixes, Command: l.Command,
			Timeout: durationpb.New(time.Duration(l.Timeout)), Env: l.Env})
	}
	v.Protect, v.Preset = p.Protect, p.Preset
	return v
}

func (h repoService) SetValidation(ctx context.Context, req *agwpv1.SetValidationRequest) (*agwpv1.SetValidationResponse, error) {
	if err := validateName("repository", req.GetRepository()); err != nil {
		return nil, err
	}
	policy, err := validationPolicy("validation", req.GetValidation())
	if err != nil {
		return nil, err
	}
	r, err := h.s.store.SetValidation(ctx, req.GetRepository(), policy)
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	h.s.log.Info("validation policy set", "repository", r.Name, "policy", string(policy))
	// Queued changes of a repository whose policy was removed are integrated by the next advance.
	h.s.gate.Kick(r.Name)
	return &agwpv1.SetValidationResponse{Repository: repositoryProto(r)}, nil
}

// changeWithProgress answers a change as clients see it: while VALIDATING with the validate
// job's progress line and its candidate (with the workers running it and its place in the
// queue), while QUEUED with its place in the queue, and always with every candidate it was in.
func (h repoService) changeWithProgress(ctx context.Context, c store.Change) *agwpv1.Change {
	out := changeProto(c)
	out.ProtectedPaths = gate.ProtectedTouched(h.protectedPaths(ctx, c.Repository), c.Paths)
	if c.State == store.ChangeQueued {
		out.QueuePosition = uint32(c.QueuePosition)
	}
	history, err := h.s.store.ListCandidates(ctx, store.ListCandidatesParams{ChangeID: c.ID})
	if err != nil {
		h.s.log.Warn("read a change's candidates", "change", c.ID, "err", err)
	}
	// A change rebuilt again and again (many failures ahead of it) keeps its whole history in
	// the store; an answer carries the newest maxHistory.
	for _, cand := range history[max(0, len(history)-maxHistory):] {
		out.History = append(out.History, candidateProto(cand))
	}
	if n := len(out.History); n > 0 {
		out.Candidate = out.History[n-1]
	}
	if c.State != store.ChangeValidating || c.JobID == "" {
		return out
	}
	job, err := h.s.store.GetJob(ctx, c.JobID)
	if err != nil {
		return out
	}
	out.Progress = jobProgress(job)
	if out.Candidate != nil && out.Candidate.GetId() == c.CandidateID {
		h.liveCandidate(ctx, out.Candidate, job)
	}
	return out
}

// jobProgress says where a validate job is, for people.
func jobProgress(job store.Job) string {
	switch {
	case job.State == store.JobQueued && job.ClaimNumber == 0:
		return "waiting for a worker"
	case job.State == store.JobQueued:
		return fmt.Sprintf("attempt %d failed (%s); waiting for a worker", job.ClaimNumber, firstLine(job.LastError))
	case job.State == store.JobClaimed && job.Progress == "":
		return "claimed by " + job.Holder
	case job.State == store.JobClaimed:
		return job.Holder + ": " + job.Progress
	}
	return "validation " + string(job.State) + "; settling"
}

// liveCandidate fills in what a live candidate's job and queue say of it: its workers, its
// progress and its place among the live candidates.
func (h repoService) liveCandidate(ctx context.Context, out *agwpv1.Candidate, job store.Job) {
	out.Workers, out.Progress = candidateRun(job)
	live, err := h.s.store.ListCandidates(ctx, store.ListCandidatesParams{Repository: out.GetRepository()})
	if err != nil {
		return
	}
	for i, c := range live {
		if c.ID == out.GetId() {
			out.Position = uint32(i + 1)
		}
	}
}

// candidateRun answers who runs a live candidate's job and its latest progress line (the
// Candidate message names the workers apart, so the line is the job's own).
func candidateRun(job store.Job) (workers []string, progress string) {
	switch job.State {
	case store.JobClaimed:
		return []string{job.Holder}, job.Progress
	case store.JobQueued:
		return nil, jobProgress(job)
	}
	return nil, ""
}

func candidateProto(c store.Candidate) *agwpv1.Candidate {
	return &agwpv1.Candidate{
		Id: c.ID, Repository: c.Repository, State: candidateStateProto(c.State), Revision: c.Revision,
		ParentRevision: c.ParentRevision, Changes: c.Changes, JobId: c.JobID, AttestationDigest: c.AttestationDigest,
		Reason: c.Reason, CreatedAt: timestamp(c.CreatedAt), UpdatedAt: timestamp(c.UpdatedAt), Lane: c.Lane,
	}
}

func candidateStateProto(s store.CandidateState) agwpv1.CandidateState {
	switch s {
	case store.CandidateValidating:
		return agwpv1.CandidateState_CANDIDATE_STATE_VALIDATING
	case store.CandidatePassed:
		return agwpv1.CandidateState_CANDIDATE_STATE_PASSED
	case store.CandidateFailed:
		return agwpv1.CandidateState_CANDIDATE_STATE_FAILED
	case store.CandidateLanded:
		return agwpv1.CandidateState_CANDIDATE_STATE_LANDED
	case store.CandidateRejected:
		return agwpv1.CandidateState_CANDIDATE_STATE_REJECTED
	case store.CandidateSplit:
		return agwpv1.CandidateState_CANDIDATE_STATE_SPLIT
	case store.CandidateSuperseded:
		return agwpv1.CandidateState_CANDIDATE_STATE_SUPERSEDED
	case store.CandidateCancelled:
		return agwpv1.CandidateState_CANDIDATE_STATE_CANCELLED
	}
	return agwpv1.CandidateState_CANDIDATE_STATE_UNSPECIFIED
}

// maxHistory bounds the candidates a change's answer lists.
const maxHistory = 50

// maxQueueWaiting bounds the waiting changes GetQueue lists.
const maxQueueWaiting = 1000

func (h repoService) GetQueue(ctx context.Context, req *agwpv1.GetQueueRequest) (*agwpv1.GetQueueResponse, error) {
	if err := validateName("repository", req.GetRepository()); err != nil {
		return nil, err
	}
	r, err := h.s.store.GetRepository(ctx, req.GetRepository())
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	live, err := h.s.store.ListCandidates(ctx, store.ListCandidatesParams{Repository: r.Name})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	waiting, _, err := h.s.store.ListChanges(ctx, store.ListChangesParams{Repository: r.Name, Queued: true, Limit: maxQueueWaiting})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out := &agwpv1.GetQueueResponse{Mainline: r.Mainline}
	if r.Validation != nil {
		depth, batch := h.s.gate.Shape(r.Validation)
		out.Depth, out.Batch = uint32(depth), uint32(batch)
	}
	for i, c := range live {
		cp := candidateProto(c)
		cp.Position = uint32(i + 1)
		if job, err := h.s.store.GetJob(ctx, c.JobID); err == nil && c.State == store.CandidateValidating {
			cp.Workers, cp.Progress = candidateRun(job)
		}
		out.Candidates = append(out.Candidates, cp)
	}
	for i, c := range waiting {
		cp := changeProto(c)
		cp.QueuePosition = uint32(i)
		out.Waiting = append(out.Waiting, cp)
	}
	return out, nil
}

// kickValidation advances the queue of a validate job's repository after the job moved.
func (s *Server) kickValidation(job store.Job) {
	if job.Kind != agwp.KindValidate {
		return
	}
	if repository, ok := validateRepository(job.Payload); ok {
		s.gate.Kick(repository)
	}
}

func validateRepository(payload []byte) (string, bool) {
	p, err := agwp.ParseValidatePayloadJSON(payload)
	if err != nil {
		return "", false
	}
	return p.Repository, true
}

// verifyAttestation checks a completion's envelope before the store sees it: it must be
// signed by a key that the principal holding the claim registered. A validate job's envelope
// moves a mainline, so it must also be an in-toto test-result statement whose subject is
// exactly the job's candidate tree, and whose job, worker and claim number are this job's
// current claim. It answers the envelope to store and the claim number for the store's
// conditional update (for a validate job, the one the statement names), so a statement about
// an earlier claim cannot be stored even if the claim moves on meanwhile.
func (h jobService) verifyAttestation(ctx context.Context, c caller, req *agwpv1.CompleteJobRequest, token uint32) (*store.Attestation, uint32, error) {
	env := attest.FromProto(req.GetAttestation())
	if env.PayloadType == "" || len(req.GetAttestation().GetPayload()) == 0 || len(env.Signatures) == 0 {
		return nil, 0, invalid("attestation", "needs payload_type, payload and at least one signature")
	}
	job, err := h.s.store.GetJob(ctx, req.GetJobId())
	if err != nil {
		return nil, 0, storeError(err, connect.CodeInternal) // an unknown job: not_found, as the store answers
	}
	keys, err := h.workerKeys(ctx, c.principal.Name)
	if err != nil {
		return nil, 0, err
	}
	data, digest, err := attest.Encode(env)
	if err != nil {
		return nil, 0, connect.NewError(connect.CodeInternal, err)
	}
	stored := &store.Attestation{Digest: digest, Envelope: data, JobID: job.ID}
	if job.Kind != agwp.KindValidate {
		if _, err := attest.Verify(ctx, env, keys); err != nil {
			return nil, 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("attestation: %w", err))
		}
		return stored, token, nil
	}
	payload, err := agwp.ParseValidatePayloadJSON(job.Payload)
	if err != nil {
		return nil, 0, connect.NewError(connect.CodeInternal, fmt.Errorf("validate job %s: %w", job.ID, err))
	}
	v, _, err := attest.VerifyValidation(ctx, env, keys)
	if err != nil {
		return nil, 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("attestation: %w", err))
	}
	if err := attestsJobTree(v, payload, job.ID); err != nil {
		return nil, 0, err
	}
	switch {
	case v.JobID != job.ID:
		return nil, 0, invalid("attestation", "it is about job %s, not %s", v.JobID, job.ID)
	case v.Worker != c.holder(req.GetWorker()):
		return nil, 0, invalid("attestation", "it names worker %s, but %s is completing the job", v.Worker, c.holder(req.GetWorker()))
	case token != 0 && v.ClaimNumber != token:
		return nil, 0, invalid("attestation", "it names claim %d, but the request's fencing_token is %d", v.ClaimNumber, token)
	case v.ClaimNumber != job.ClaimNumber:
		return nil, 0, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("attestation of job %s names claim %d, but the current claim is %d: the claim was lost", job.ID, v.ClaimNumber, job.ClaimNumber))
	}
	return stored, v.ClaimNumber, nil
}

// attestsJobTree checks that v's subject is the candidate a validate job's payload names, by
// the rule the gate holds the stored statement to again (attest.Validation.CheckSubject), and
// words a mismatch for the worker completing job jobID.
func attestsJobTree(v attest.Validation, payload agwp.ValidatePayload, jobID string) error {
	err := v.CheckSubject(attest.Candidate{
		Repository: payload.Repository, Revision: payload.CandidateRevision,
		GitTree: payload.GitTree, TreeDigest: payload.TreeDigest,
	})
	var m *attest.SubjectMismatch
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &m):
		return invalid("attestation", "%v", err)
	case m.Part == attest.SubjectNoTree:
		// ParseValidatePayloadJSON refuses such a payload before: the job is broken, not the
		// attestation.
		return connect.NewError(connect.CodeInternal, fmt.Errorf("validate job %s names neither a git tree nor a tree digest", jobID))
	case m.Part == attest.SubjectGitTree && m.Attested == "":
		return invalid("attestation", "its subject names no git tree, but job %s validates git tree %s", jobID, payload.GitTree)
	case m.Part == attest.SubjectGitTree:
		return invalid("attestation", "its subject is git tree %s, but job %s validates git tree %s", m.Attested, jobID, payload.GitTree)
	case m.Part == attest.SubjectTreeDigest && m.Attested == "":
		return invalid("attestation", "its subject names no tree digest, but job %s validates tree %s", jobID, payload.TreeDigest)
	case m.Part == attest.SubjectTreeDigest:
		return invalid("attestation", "its subject is tree %s, but job %s validates tree %s", m.Attested, jobID, payload.TreeDigest)
	default:
		return invalid("attestation", "its subject is %s, but job %s validates %s@%s", m.Attested, jobID, payload.Repository, payload.CandidateRevision)
	}
}

func (h jobService) workerKeys(ctx context.Context, principal string) ([][]byte, error) {
	keys, err := h.s.store.ListWorkerKeys(ctx, principal)
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	raw := make([][]byte, 0, len(keys))
	for _, k := range keys {
		raw = append(raw, k.PublicKey)
	}
	return raw, nil
}

func (h jobService) GetAttestation(ctx context.Context, req *agwpv1.GetAttestationRequest) (*agwpv1.GetAttestationResponse, error) {
	if !digestPattern.MatchString(req.GetDigest()) {
		return nil, invalid("digest", "%q is not a digest: use sha256:<64 lowercase hex>", truncate(req.GetDigest(), 80))
	}
	a, err := h.s.store.GetAttestation(ctx, req.GetDigest())
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	env, err := attest.Decode(a.Envelope)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("attestation %s: %w", a.Digest, err))
	}
	pe, err := attest.ToProto(env)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("attestation %s: %w", a.Digest, err))
	}
	return &agwpv1.GetAttestationResponse{
		Digest: a.Digest, Envelope: pe, EnvelopeJson: a.Envelope, JobId: a.JobID, CreatedAt: timestamp(a.CreatedAt),
	}, nil
}

// workerReads decides what a worker may read: only the candidate tree of a validate job it
// holds now (and the mainline tree it takes protected paths from), and those trees' blobs. Trees are immutable, so they are cached by revision.
type workerReads struct {
	s  *Server
	mu sync.Mutex
	// trees maps a revision to the digests of its blobs; bounded by clearing when full.
	trees map[string]map[string]bool
}

const maxCachedWorkerTrees = 64

// held answers the candidates of the validate jobs the principal's workers hold now.
func (w *workerReads) held(ctx context.Context, principal string) ([]agwp.ValidatePayload, error) {
	jobs, _, err := w.s.store.ListJobs(ctx, store.ListJobsParams{
		States: []store.JobState{store.JobClaimed}, Kinds: []string{agwp.KindValidate},
		Holder: principal + "|", Limit: 1000,
	})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out := make([]agwp.ValidatePayload, 0, len(jobs))
	for _, j := range jobs {
		if p, err := agwp.ParseValidatePayloadJSON(j.Payload); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// readableRevisions answers the revisions a validate job lets its worker read: its candidate,
// and the mainline whose protected paths it validates with (ADR-0031).
func readableRevisions(p agwp.ValidatePayload) []string {
	if p.Protected != nil {
		return []string{p.CandidateRevision, p.Protected.Revision}
	}
	return []string{p.CandidateRevision}
}

func (w *workerReads) mayReadTree(ctx context.Context, principal, repository, revision string) error {
	held, err := w.held(ctx, principal)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(held, func(p agwp.ValidatePayload) bool {
		return p.Repository == repository && slices.Contains(readableRevisions(p), revision)
	}) {
		return nil
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
		"a worker may read only the candidate revision of a validate job it holds; %s holds none for %s@%s", principal, repository, revision))
}

func (w *workerReads) mayReadBlob(ctx context.Context, principal, digest string) error {
	held, err := w.held(ctx, principal)
	if err != nil {
		return err
	}
	for _, p := range held {
		for _, revision := range readableRevisions(p) {
			digests, err := w.treeDigests(ctx, p.Repository, revision)
			if err != nil {
				return err
			}
			if digests[digest] {
				return nil
			}
		}
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
		"a worker may read only the blobs of the candidate tree of a validate job it holds; %s is in none that %s holds", digest, principal))
}

func (w *workerReads) treeDigests(ctx context.Context, repository, revision string) (map[string]bool, error) {
	w.mu.Lock()
	d, ok := w.trees[revision]
	w.mu.Unlock()
	if ok {
		return d, nil
	}
	rev, err := w.s.store.GetRevision(ctx, repository, revision)
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	d = make(map[string]bool, len(rev.Tree))
	for _, e := range rev.Tree {
		d[e.Digest] = true
	}
	w.mu.Lock()
	if w.trees == nil || len(w.trees) >= maxCachedWorkerTrees {
		w.trees = make(map[string]map[string]bool)
	}
	w.trees[revision] = d
	w.mu.Unlock()
	return d, nil
}

func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}
