package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/agwp"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/store"
)

// jobService serves JobService: it validates, calls the store, and maps the outcome.
type jobService struct {
	s *Server
}

func (h jobService) EnqueueJob(ctx context.Context, req *agwpv1.EnqueueJobRequest) (*agwpv1.EnqueueJobResponse, error) {
	params, err := validateEnqueue(req)
	if err != nil {
		return nil, err
	}
	params.EnqueuedBy = callerFrom(ctx).principal.Name
	job, existing, err := h.s.store.EnqueueJob(ctx, params)
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	if !existing {
		h.s.metrics.enqueued.Inc()
	}
	return &agwpv1.EnqueueJobResponse{Job: jobProto(job), Existing: existing}, nil
}

func (h jobService) ClaimJob(ctx context.Context, req *agwpv1.ClaimJobRequest) (*agwpv1.ClaimJobResponse, error) {
	lease, wait, err := validateClaim(req)
	if err != nil {
		return nil, err
	}
	jobs, err := h.claim(ctx, store.ClaimJobParams{
		Holder: callerFrom(ctx).holder(req.GetWorker()),
		Kinds:  req.GetKinds(),
		Lease:  lease,
		Max:    1,
	}, wait)
	if err != nil || len(jobs) == 0 {
		return &agwpv1.ClaimJobResponse{}, err
	}
	return &agwpv1.ClaimJobResponse{Job: jobProto(jobs[0])}, nil
}

func (h jobService) ClaimJobs(ctx context.Context, req *agwpv1.ClaimJobsRequest) (*agwpv1.ClaimJobsResponse, error) {
	lease, wait, most, err := validateClaimJobs(req)
	if err != nil {
		return nil, err
	}
	jobs, err := h.claim(ctx, store.ClaimJobParams{
		Holder: callerFrom(ctx).holder(req.GetWorker()),
		Kinds:  req.GetKinds(),
		Lease:  lease,
		Max:    most,
	}, wait)
	if err != nil {
		return nil, err
	}
	res := &agwpv1.ClaimJobsResponse{Jobs: make([]*agwpv1.Job, len(jobs))}
	for i, j := range jobs {
		res.Jobs[i] = jobProto(j)
	}
	return res, nil
}

// claim claims up to p.Max jobs, waiting up to wait for the first to become claimable. A claim
// whose caller went away before the answer is handed back at once, so its jobs do not sit
// claimed by nobody until the lease runs out.
func (h jobService) claim(ctx context.Context, p store.ClaimJobParams, wait time.Duration) ([]store.Job, error) {
	if len(p.Kinds) == 0 || slices.Contains(p.Kinds, agwp.KindValidate) {
		// A worker that can validate is what the integration queues speculate to.
		done := h.s.gate.Capacity.Waiting()
		jobs, err := h.claimWaiting(ctx, p, wait)
		done()
		for _, j := range jobs {
			if j.Kind == agwp.KindValidate {
				h.s.gate.Capacity.Held(j.ID, j.LeaseExpiresAt)
			}
		}
		return jobs, err
	}
	return h.claimWaiting(ctx, p, wait)
}

func (h jobService) claimWaiting(ctx context.Context, p store.ClaimJobParams, wait time.Duration) ([]store.Job, error) {
	deadline := time.Now().Add(wait)
	for {
		// Taken before looking, so an enqueue that commits after the look still wakes us.
		signal := h.s.store.JobSignal()
		jobs, err := h.s.store.ClaimJobs(ctx, p)
		if err != nil {
			return nil, storeError(err, connect.CodeInternal)
		}
		if len(jobs) > 0 {
			if ctx.Err() != nil {
				for i := range jobs {
					h.releaseUndelivered(p.Holder, &jobs[i])
				}
				return nil, nil
			}
			h.s.metrics.claims.Add(float64(len(jobs)))
			return jobs, nil
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return nil, nil
		}
		if !h.s.await(ctx, signal, min(remaining, h.s.pollInterval)) {
			// The client gave up; answering "nothing" is what it would have seen a moment later.
			return nil, nil
		}
	}
}

// await waits for a wake-up or the timeout; false when ctx ended.
func (s *Server) await(ctx context.Context, signal <-chan struct{}, timeout time.Duration) bool {
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-signal:
	case <-timer.C:
	case <-ctx.Done():
		return false
	}
	return true
}

// releaseUndelivered hands back a claim whose claimer went away before it could be answered, so
// the job does not sit claimed by nobody until its lease runs out. The claim still counted: the
// job's attempts only ever grow.
func (h jobService) releaseUndelivered(worker string, job *store.Job) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	zero := time.Duration(0)
	_, err := h.s.store.FailJob(ctx, store.FailJobParams{
		JobID: job.ID, Holder: worker, ClaimNumber: job.ClaimNumber,
		Error: "claim not delivered: the claimer went away before the answer", RetryDelay: &zero,
	})
	if err != nil {
		h.s.log.Warn("release undelivered claim", "job", job.ID, "err", err)
	}
}

// requireToken refuses a heartbeat, completion or failure without a claim number when the
// server requires one.
func (h jobService) requireToken(procedure string, token uint32) error {
	if token == 0 && h.s.requireFencing {
		h.s.metrics.refusal(procedure, "missing_fencing_token")
		return connect.NewError(connect.CodeFailedPrecondition,
			errors.New("fencing_token: this server requires the claim number (the claimed job's attempts) on every heartbeat, completion and failure"))
	}
	return nil
}

// claimRefusal counts a refused claim-scoped request by its reason and maps it.
func (h jobService) claimRefusal(procedure string, err error, lostClaim connect.Code) error {
	var lost *store.LostClaimError
	switch {
	case errors.As(err, &lost) && lost.State == store.JobClaimed && lost.CurrentHolder == lost.Holder:
		h.s.metrics.refusal(procedure, "stale_claim")
	case errors.As(err, &lost):
		h.s.metrics.refusal(procedure, "lost_claim")
	case errors.Is(err, store.ErrNotFound):
		h.s.metrics.refusal(procedure, "unknown_job")
	case errors.Is(err, store.ErrAttestationRequired):
		h.s.metrics.refusal(procedure, "attestation")
	}
	return storeError(err, lostClaim)
}

func (h jobService) HeartbeatJob(ctx context.Context, req *agwpv1.HeartbeatJobRequest) (*agwpv1.HeartbeatJobResponse, error) {
	token, lease, err := validateHeartbeat(req)
	if err != nil {
		return nil, err
	}
	if err := h.requireToken("HeartbeatJob", token); err != nil {
		return nil, err
	}
	job, err := h.s.store.HeartbeatJob(ctx, store.HeartbeatJobParams{
		JobID:       req.GetJobId(),
		Holder:      callerFrom(ctx).holder(req.GetWorker()),
		ClaimNumber: token,
		Lease:       lease,
		Progress:    req.GetProgress(),
		Output:      req.GetOutput(),
	})
	if err != nil {
		return nil, h.claimRefusal("HeartbeatJob", err, connect.CodeNotFound)
	}
	if job.Kind == agwp.KindValidate {
		h.s.gate.Capacity.Held(job.ID, job.LeaseExpiresAt)
	}
	return &agwpv1.HeartbeatJobResponse{
		LeaseExpiresAt:  timestamp(job.LeaseExpiresAt),
		CancelRequested: job.CancelRequested,
	}, nil
}

func (h jobService) CompleteJob(ctx context.Context, req *agwpv1.CompleteJobRequest) (*agwpv1.CompleteJobResponse, error) {
	token, result, err := validateComplete(req)
	if err != nil {
		return nil, err
	}
	params, err := h.completion(ctx, "CompleteJob", req, token, result)
	if err != nil {
		return nil, err
	}
	job, err := h.s.store.CompleteJob(ctx, params)
	if err != nil {
		return nil, h.claimRefusal("CompleteJob", err, connect.CodeFailedPrecondition)
	}
	h.completed(job)
	return &agwpv1.CompleteJobResponse{Job: jobProto(job)}, nil
}

func (h jobService) CompleteJobs(ctx context.Context, req *agwpv1.CompleteJobsRequest) (*agwpv1.CompleteJobsResponse, error) {
	tokens, results, err := validateCompleteJobs(req)
	if err != nil {
		return nil, err
	}
	cs := req.GetCompletions()
	res := &agwpv1.CompleteJobsResponse{Results: make([]*agwpv1.CompleteJobsResult, len(cs))}
	refused := func(i int, err error) {
		r := &agwpv1.CompleteJobsResult{ErrorCode: connect.CodeOf(err).String(), ErrorMessage: err.Error()}
		var ce *connect.Error
		if errors.As(err, &ce) {
			r.ErrorMessage = ce.Message()
		}
		res.Results[i] = r
	}
	// Each completion is checked on its own; those that pass go to the store together.
	params := make([]store.CompleteJobParams, 0, len(cs))
	index := make([]int, 0, len(cs))
	for i, c := range cs {
		p, err := h.completion(ctx, "CompleteJobs", c, tokens[i], results[i])
		if err != nil {
			refused(i, err)
			continue
		}
		params = append(params, p)
		index = append(index, i)
	}
	if len(params) > 0 {
		outcomes, err := h.s.store.CompleteJobs(ctx, params)
		if err != nil {
			return nil, storeError(err, connect.CodeInternal)
		}
		for k, o := range outcomes {
			if o.Err != nil {
				refused(index[k], h.claimRefusal("CompleteJobs", o.Err, connect.CodeFailedPrecondition))
				continue
			}
			h.completed(o.Job)
			r := &agwpv1.CompleteJobsResult{}
			if !req.GetOmitJobs() {
				r.Job = jobProto(o.Job)
			}
			res.Results[index[k]] = r
		}
	}
	return res, nil
}

// completion checks what CompleteJob and CompleteJobs check beyond the request's form (the claim
// number the server may require, the attestation) and answers the store's parameters.
func (h jobService) completion(ctx context.Context, procedure string, req *agwpv1.CompleteJobRequest, token uint32, result []byte) (store.CompleteJobParams, error) {
	if err := h.requireToken(procedure, token); err != nil {
		return store.CompleteJobParams{}, err
	}
	c := callerFrom(ctx)
	params := store.CompleteJobParams{
		JobID:        req.GetJobId(),
		Holder:       c.holder(req.GetWorker()),
		ClaimNumber:  token,
		Result:       result,
		Output:       req.GetOutput(),
		OutputDigest: req.GetOutputDigest(),
	}
	// A validate job completed without an attestation is refused by the store's own update,
	// so completions without one cost no read here.
	if req.GetAttestation() != nil {
		a, claim, err := h.verifyAttestation(ctx, c, req, token)
		if err != nil {
			h.s.metrics.refusal(procedure, "attestation")
			return store.CompleteJobParams{}, err
		}
		params.Attestation, params.ClaimNumber = a, claim
	}
	return params, nil
}

// completed counts an accepted completion and lets the gate act on a validate job's result.
func (h jobService) completed(job store.Job) {
	h.s.metrics.completions.Inc()
	if job.Kind == agwp.KindValidate {
		h.s.gate.Capacity.Released(job.ID)
	}
	h.s.kickValidation(job)
}

func (h jobService) FailJob(ctx context.Context, req *agwpv1.FailJobRequest) (*agwpv1.FailJobResponse, error) {
	token, retryDelay, err := validateFail(req)
	if err != nil {
		return nil, err
	}
	if err := h.requireToken("FailJob", token); err != nil {
		return nil, err
	}
	params := store.FailJobParams{
		JobID:       req.GetJobId(),
		Holder:      callerFrom(ctx).holder(req.GetWorker()),
		ClaimNumber: token,
		Error:       req.GetError(),
		Output:      req.GetOutput(),
		Final:       req.GetFinal(),
		RetryDelay:  retryDelay,
	}
	job, err := h.s.store.FailJob(ctx, params)
	if err != nil {
		return nil, h.claimRefusal("FailJob", err, connect.CodeNotFound)
	}
	h.s.metrics.failures.Inc()
	if job.Kind == agwp.KindValidate {
		h.s.gate.Capacity.Released(job.ID)
	}
	if job.State.Terminal() {
		h.s.kickValidation(job)
	}
	return &agwpv1.FailJobResponse{Job: jobProto(job)}, nil
}

func (h jobService) CancelJob(ctx context.Context, req *agwpv1.CancelJobRequest) (*agwpv1.CancelJobResponse, error) {
	if err := validateID("job_id", req.GetJobId()); err != nil {
		return nil, err
	}
	c := callerFrom(ctx)
	if c.principal.Role != store.RoleAdmin {
		job, err := h.s.store.GetJob(ctx, req.GetJobId())
		if err != nil {
			return nil, storeError(err, connect.CodeInternal)
		}
		if job.EnqueuedBy != c.principal.Name {
			return nil, connect.NewError(connect.CodePermissionDenied,
				fmt.Errorf("job %s was enqueued by %s: only its enqueuer or an admin may cancel it", job.ID, job.EnqueuedBy))
		}
	}
	job, err := h.s.store.CancelJob(ctx, req.GetJobId())
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	h.s.kickValidation(job)
	return &agwpv1.CancelJobResponse{Job: jobProto(job)}, nil
}

func (h jobService) GetJob(ctx context.Context, req *agwpv1.GetJobRequest) (*agwpv1.GetJobResponse, error) {
	if err := validateID("job_id", req.GetJobId()); err != nil {
		return nil, err
	}
	job, err := h.s.store.GetJob(ctx, req.GetJobId())
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.GetJobResponse{Job: jobProto(job)}, nil
}

func (h jobService) ListJobs(ctx context.Context, req *agwpv1.ListJobsRequest) (*agwpv1.ListJobsResponse, error) {
	limit, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	if err := validateKinds("kinds", req.GetKinds()); err != nil {
		return nil, err
	}
	if c := req.GetClaimedBy(); c != "" {
		h, ok := store.ParseHolder(c)
		if !ok || validateName("claimed_by", h.Principal) != nil || h.Label != "" && validateLabel("claimed_by", h.Label) != nil {
			return nil, invalid("claimed_by", "%q names no worker: use <principal>|<label> for one worker, or <principal>| for every label of the principal", c)
		}
	}
	params := store.ListJobsParams{Kinds: req.GetKinds(), Limit: limit, PageToken: req.GetPageToken(), Holder: req.GetClaimedBy()}
	for i, st := range req.GetStates() {
		s, ok := storeJobState(st)
		if !ok {
			return nil, invalid(fmt.Sprintf("states[%d]", i), "%v is not a job state", st)
		}
		params.States = append(params.States, s)
	}
	jobs, next, err := h.s.store.ListJobs(ctx, params)
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out := &agwpv1.ListJobsResponse{NextPageToken: next}
	for _, j := range jobs {
		out.Jobs = append(out.Jobs, jobProto(j))
	}
	return out, nil
}

func (h jobService) CountJobs(ctx context.Context, _ *agwpv1.CountJobsRequest) (*agwpv1.CountJobsResponse, error) {
	counts, err := h.s.store.CountJobs(ctx)
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out := &agwpv1.CountJobsResponse{CountedAt: timestamp(time.Now())}
	for _, st := range store.JobStates {
		out.Counts = append(out.Counts, &agwpv1.JobStateCount{State: jobStates[st], Count: uint64(counts[st])})
	}
	return out, nil
}
