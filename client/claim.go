package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// ClaimOptions describe a claim.
type ClaimOptions struct {
	Worker string        // the worker's label
	Kinds  []string      // kinds this worker runs; empty = any
	Lease  time.Duration // 0 = the server's default (30s)
	Wait   time.Duration // long-poll up to this long (max 60s); 0 = answer at once
}

// Claim is a claimed job. Every call it makes carries the claim's own number, so a claim that
// was handed out again is refused instead of acting on the new claimant's job (ADR-0012).
type Claim struct {
	Job *agwpv1.Job

	client *Client
	worker string
	lease  time.Duration

	mu       sync.Mutex
	progress string
}

// Claim asks for a job; it answers nil, nil when none was available within the wait.
func (c *Client) Claim(ctx context.Context, o ClaimOptions) (*Claim, error) {
	req := &agwpv1.ClaimJobRequest{Worker: o.Worker, Kinds: o.Kinds}
	if o.Lease > 0 {
		req.Lease = durationpb.New(o.Lease)
	}
	if o.Wait > 0 {
		req.Wait = durationpb.New(o.Wait)
	}
	res, err := c.Jobs.ClaimJob(ctx, req)
	if err != nil {
		return nil, err
	}
	if res.GetJob() == nil {
		return nil, nil
	}
	lease := o.Lease
	if lease == 0 {
		lease = 30 * time.Second
	}
	return &Claim{Job: res.GetJob(), client: c, worker: o.Worker, lease: lease}, nil
}

// FencingToken answers the claim's number: the job's attempts when it was claimed.
func (h *Claim) FencingToken() uint64 { return uint64(h.Job.GetAttempts()) }

// Lease answers the claim's lease length.
func (h *Claim) Lease() time.Duration { return h.lease }

// Heartbeat extends the claim's lease and reports progress. A lost or stale claim answers an
// error for which IsLostClaim is true: stop the work, do not complete it.
func (h *Claim) Heartbeat(ctx context.Context, progress string) (*agwpv1.HeartbeatJobResponse, error) {
	return h.HeartbeatOutput(ctx, progress, "")
}

// HeartbeatOutput is Heartbeat that also sends output, the tail of the job's log so far (at
// most 64 KiB), for people to follow while the job runs; "" leaves the job's output as it is.
func (h *Claim) HeartbeatOutput(ctx context.Context, progress, output string) (*agwpv1.HeartbeatJobResponse, error) {
	return h.client.Jobs.HeartbeatJob(ctx, &agwpv1.HeartbeatJobRequest{
		JobId:        h.Job.GetId(),
		Worker:       h.worker,
		Progress:     progress,
		FencingToken: h.FencingToken(),
		Output:       output,
	})
}

// CompleteOptions are what a completion reports.
type CompleteOptions struct {
	Result       *structpb.Struct
	Output       string // tail of the log, <= 64 KiB
	OutputDigest string
	Attestation  *agwpv1.Envelope
}

// Complete finishes the job.
func (h *Claim) Complete(ctx context.Context, o CompleteOptions) (*agwpv1.Job, error) {
	res, err := h.client.Jobs.CompleteJob(ctx, h.completeRequest(o))
	if err != nil {
		return nil, err
	}
	return res.GetJob(), nil
}

func (h *Claim) completeRequest(o CompleteOptions) *agwpv1.CompleteJobRequest {
	return &agwpv1.CompleteJobRequest{
		JobId:        h.Job.GetId(),
		Worker:       h.worker,
		Result:       o.Result,
		Output:       o.Output,
		OutputDigest: o.OutputDigest,
		Attestation:  o.Attestation,
		FencingToken: h.FencingToken(),
	}
}

// FailOptions are what a failure reports.
type FailOptions struct {
	Error      string
	Output     string
	RetryDelay *time.Duration // nil: the server's backoff
	Final      bool           // do not retry
}

// Fail reports that this attempt did not finish the job.
func (h *Claim) Fail(ctx context.Context, o FailOptions) (*agwpv1.Job, error) {
	req := &agwpv1.FailJobRequest{
		JobId:        h.Job.GetId(),
		Worker:       h.worker,
		Error:        o.Error,
		Output:       o.Output,
		Final:        o.Final,
		FencingToken: h.FencingToken(),
	}
	if o.RetryDelay != nil {
		req.RetryDelay = durationpb.New(*o.RetryDelay)
	}
	res, err := h.client.Jobs.FailJob(ctx, req)
	if err != nil {
		return nil, err
	}
	return res.GetJob(), nil
}

// IsLostClaim reports whether err says the claim is no longer this worker's: a heartbeat or
// failure answered not_found, a completion failed_precondition. The worker must stop the work
// and must not retry the call.
func IsLostClaim(err error) bool {
	return IsCode(err, connect.CodeNotFound) || IsCode(err, connect.CodeFailedPrecondition)
}

// Errors a KeepAlive context is cancelled with (see context.Cause).
var (
	ErrClaimLost       = errors.New("claim lost: the job was handed to another claim")
	ErrCancelRequested = errors.New("the job's cancellation was requested")
)

// KeepAlive heartbeats the claim every third of its lease until stop is called, and answers a
// context derived from ctx that is cancelled at once when the claim is lost (cause
// ErrClaimLost) or its cancellation is requested (cause ErrCancelRequested). Progress set with
// SetProgress travels with the next heartbeat.
func (h *Claim) KeepAlive(ctx context.Context) (context.Context, func()) {
	return h.KeepAliveEvery(ctx, h.lease/3)
}

// KeepAliveEvery is KeepAlive with heartbeats every interval (at most a third of the lease):
// sooner, a cancellation requested reaches the job sooner.
func (h *Claim) KeepAliveEvery(ctx context.Context, interval time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := h.HeartbeatEvery(ctx, interval, cancel)
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// HeartbeatEvery heartbeats the claim every interval (at most a third of the lease) until stop
// is called or ctx ends, and calls over, once, with a cause wrapping ErrClaimLost or
// ErrCancelRequested when a heartbeat says the claim is over. KeepAliveEvery is the same with
// a context of its own to cancel; a worker that has one already saves making another. Once
// stop has returned, no heartbeat is in flight.
func (h *Claim) HeartbeatEvery(ctx context.Context, interval time.Duration, over func(cause error)) (stop func()) {
	if interval <= 0 || interval > h.lease/3 {
		interval = h.lease / 3
	}
	// A timer rather than a goroutine with a ticker: most claims end before their first
	// heartbeat, and a worker of many slots would otherwise keep a goroutine a job asleep.
	var (
		mu      sync.Mutex
		stopped bool
		beating sync.WaitGroup // the heartbeat in flight, which stop waits for
		timer   *time.Timer
	)
	beat := func() {
		mu.Lock()
		if stopped || ctx.Err() != nil {
			mu.Unlock()
			return
		}
		beating.Add(1)
		mu.Unlock()
		defer beating.Done()
		started := time.Now()
		// However often it beats, each heartbeat may take a third of the lease: a server
		// slower than the pace must not lose the claim.
		hctx, hcancel := context.WithTimeout(ctx, h.lease/3)
		res, err := h.Heartbeat(hctx, h.takeProgress())
		hcancel()
		switch {
		case err != nil && IsLostClaim(err):
			over(fmt.Errorf("%w: %v", ErrClaimLost, err))
			return
		case err == nil && res.GetCancelRequested():
			over(ErrCancelRequested)
			return
		}
		// Other errors (the server briefly unreachable) are retried at the next beat; the
		// lease is at least three beats long. The beats keep their pace from the start of
		// each, and one that would have come while a heartbeat was in flight goes at once.
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			timer.Reset(max(0, interval-time.Since(started)))
		}
	}
	mu.Lock()
	timer = time.AfterFunc(interval, beat)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		timer.Stop()
		mu.Unlock()
		beating.Wait()
	}
}

// SetProgress records a line of progress for the next heartbeat.
func (h *Claim) SetProgress(p string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.progress = p
}

func (h *Claim) takeProgress() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.progress
	h.progress = ""
	return p
}
