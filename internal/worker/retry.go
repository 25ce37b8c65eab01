package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// How a worker waits for a server that does not answer (docs/worker-protocol.md, "Retries and
// backoff"): 100 ms between calls, doubling up to 10 s, and 100 ms again after a call worked.
const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 10 * time.Second
	// outageLogMax is the longest one outage goes without a line in the log.
	outageLogMax = time.Minute
)

// Transient reports whether err, from a call to the server, may go away by itself: the server or
// its database away, a network error, a timeout, a server error. Anything else is an answer that
// calling again will not change (a wrong token or role, a request the server refuses), and so is
// an error that is not from a call at all.
func Transient(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return false
	}
	switch ce.Code() {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeResourceExhausted,
		connect.CodeAborted, connect.CodeInternal, connect.CodeUnknown:
		return true
	}
	return false
}

// WaitForServer calls fn until it succeeds, fails with an error that is not Transient, or ctx
// ends, and answers fn's last error (ctx's when it ended). Between calls it waits 100 ms,
// doubling up to 10 s, and logs as outage does; what names the call in the log ("register the
// worker key").
func WaitForServer(ctx context.Context, log *slog.Logger, what string, fn func(context.Context) error) error {
	o := &outage{log: log}
	backoff := backoffMin
	for {
		err := fn(ctx)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil:
			o.answered()
			return nil
		case !Transient(err):
			return err
		}
		o.failed(what, err, backoff)
		if !sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(backoff*2, backoffMax)
	}
}

// outage logs the calls to the server that fail: a line when they start failing, then one each
// time the time since the last line reaches the wait before it, doubled (so about one per step of
// the backoff while it grows, and at least one a minute after), and a line when a call works
// again. The worker's loops share one, so that --concurrency does not multiply the lines.
type outage struct {
	log *slog.Logger

	mu       sync.Mutex
	since    time.Time     // the first failure of this outage; zero while calls work
	last     time.Time     // when the last line was logged
	gap      time.Duration // the time after last before the next line
	failures int
}

func (o *outage) failed(what string, err error, retryIn time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	o.failures++
	msg := "the server does not answer; waiting for it"
	if !Transient(err) {
		msg = "the server refuses the call; trying again (this needs an operator)"
	}
	switch {
	case o.since.IsZero():
		o.since, o.last, o.gap = now, now, max(retryIn, backoffMin)
		o.log.Warn(msg, "to", what, "err", err, "retry_in", retryIn)
	case now.Sub(o.last) >= o.gap:
		o.last, o.gap = now, min(o.gap*2, outageLogMax)
		o.log.Warn(msg, "to", what, "err", err, "retry_in", retryIn,
			"waiting_for", now.Sub(o.since).Round(100*time.Millisecond), "failed_calls", o.failures)
	}
}

// answered ends an outage, if there was one.
func (o *outage) answered() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		return
	}
	o.log.Info("the server answers again", "after", time.Since(o.since).Round(100*time.Millisecond), "failed_calls", o.failures)
	o.since, o.failures = time.Time{}, 0
}
