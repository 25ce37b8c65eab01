package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// MaxBatch is the most jobs one ClaimMany claims and the most claims one CompleteMany completes.
const MaxBatch = 256

// ClaimMany asks for up to most jobs (1..MaxBatch) in one call; it answers none when none was
// available within the wait, and returns as soon as at least one was. Each claim has its own
// number and is reported on as if Claim had answered it.
func (c *Client) ClaimMany(ctx context.Context, o ClaimOptions, most int) ([]*Claim, error) {
	if most < 1 || most > MaxBatch {
		return nil, fmt.Errorf("claim many: most must be 1 to %d, got %d", MaxBatch, most)
	}
	req := &agwpv1.ClaimJobsRequest{Worker: o.Worker, Kinds: o.Kinds, MaxJobs: uint32(most)}
	if o.Lease > 0 {
		req.Lease = durationpb.New(o.Lease)
	}
	if o.Wait > 0 {
		req.Wait = durationpb.New(o.Wait)
	}
	res, err := c.Jobs.ClaimJobs(ctx, req)
	if err != nil {
		return nil, err
	}
	lease := o.Lease
	if lease == 0 {
		lease = 30 * time.Second
	}
	claims := make([]*Claim, len(res.GetJobs()))
	for i, j := range res.GetJobs() {
		claims[i] = &Claim{Job: j, client: c, worker: o.Worker, lease: lease}
	}
	return claims, nil
}

// Completion is one completion of a CompleteMany call.
type Completion struct {
	Claim *Claim
	CompleteOptions
}

// CompleteMany completes several claims in one call (1..MaxBatch, of distinct jobs), each with
// its own claim number. It answers, in the order of cs, the completed job or nil, and the
// refusal of each completion that was refused, as the error CompleteJob would have answered
// (IsLostClaim, IsCode work on it). err is for the call as a whole: then nothing is known to
// have been completed.
func (c *Client) CompleteMany(ctx context.Context, cs []Completion) (jobs []*agwpv1.Job, refusals []error, err error) {
	res, err := c.completeMany(ctx, cs, false)
	if err != nil {
		return nil, nil, err
	}
	jobs, refusals = make([]*agwpv1.Job, len(cs)), make([]error, len(cs))
	for i, r := range res {
		if refusals[i] = ResultError(r); refusals[i] == nil {
			jobs[i] = r.GetJob()
		}
	}
	return jobs, refusals, nil
}

// ReportMany is CompleteMany for a worker that reads only the refusals: the server leaves the
// completed jobs out of its answer, which spares both sides encoding and decoding them.
func (c *Client) ReportMany(ctx context.Context, cs []Completion) (refusals []error, err error) {
	res, err := c.completeMany(ctx, cs, true)
	if err != nil {
		return nil, err
	}
	refusals = make([]error, len(cs))
	for i, r := range res {
		refusals[i] = ResultError(r)
	}
	return refusals, nil
}

func (c *Client) completeMany(ctx context.Context, cs []Completion, omitJobs bool) ([]*agwpv1.CompleteJobsResult, error) {
	if len(cs) == 0 || len(cs) > MaxBatch {
		return nil, fmt.Errorf("complete many: 1 to %d completions, got %d", MaxBatch, len(cs))
	}
	req := &agwpv1.CompleteJobsRequest{Completions: make([]*agwpv1.CompleteJobRequest, len(cs)), OmitJobs: omitJobs}
	for i, cm := range cs {
		req.Completions[i] = cm.Claim.completeRequest(cm.CompleteOptions)
	}
	res, err := c.Jobs.CompleteJobs(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(res.GetResults()) != len(cs) {
		return nil, fmt.Errorf("complete many: %d results for %d completions", len(res.GetResults()), len(cs))
	}
	return res.GetResults(), nil
}

// ResultError answers the refusal one result of CompleteJobs reports, as the *connect.Error
// CompleteJob would have answered, or nil when the completion was applied.
func ResultError(r *agwpv1.CompleteJobsResult) error {
	if r.GetErrorCode() == "" {
		return nil
	}
	var code connect.Code
	if err := code.UnmarshalText([]byte(r.GetErrorCode())); err != nil {
		code = connect.CodeUnknown
	}
	return connect.NewError(code, errors.New(r.GetErrorMessage()))
}
