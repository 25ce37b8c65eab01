package worker

import (
	"context"
	"time"

	"github.com/ag-coord/ag/client"
)

// completer reports completions in batches on its own: while a CompleteJobs call is in
// flight, the completions that come meanwhile wait and then go together in the next call, each
// with its own claim number. So an idle worker reports a job at once, and a busy one makes one
// call for all the jobs that finished during the last. One call at a time also keeps the slots
// of a burst of jobs coming back together, and with them the next claim whole: with four calls
// in flight, a burst of 64 went out as four calls of one job and one of 60, and the claims
// after it split the same way.
type completer struct {
	client *client.Client
	// gathers: a completion that would go alone waits gatherFor for others. Not for a worker of
	// one slot, which has no others.
	gathers bool
	reqs    chan completion
	done    chan struct{}
	exited  chan struct{}
}

type completion struct {
	ctx    context.Context
	claim  *client.Claim
	opts   client.CompleteOptions
	result chan error
}

func newCompleter(c *client.Client, slots int) *completer {
	p := &completer{client: c, gathers: slots > 1, reqs: make(chan completion), done: make(chan struct{}), exited: make(chan struct{})}
	go p.run()
	return p
}

// complete reports a claim's completion and answers its refusal, or the error of the call that
// carried it.
func (p *completer) complete(ctx context.Context, claim *client.Claim, opts client.CompleteOptions) error {
	c := completion{ctx: ctx, claim: claim, opts: opts, result: make(chan error, 1)}
	select {
	case p.reqs <- c:
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-c.result
}

func (p *completer) run() {
	defer close(p.exited)
	var pending []completion
	sent := make(chan struct{}, 1)
	sending := false
	for {
		if !sending && len(pending) > 0 {
			n := min(len(pending), client.MaxBatch)
			batch := pending[:n:n]
			pending = pending[n:]
			sending = true
			go func() {
				p.send(batch)
				sent <- struct{}{}
			}()
		}
		select {
		case c := <-p.reqs:
			pending = append(pending, c)
			if p.gathers && !sending && len(pending) == 1 {
				pending = append(pending, receiveWithin(p.reqs, client.MaxBatch-1)...)
			}
		case <-sent:
			sending = false
		case <-p.done:
			// Every job was reported (stop's contract), so nothing is pending; a call may
			// still be returning.
			if sending {
				<-sent
			}
			return
		}
	}
}

// gatherFor is how long a completion that would go alone waits for others, and a claim for the
// slots of others: the jobs a claim started together mostly end together, a few microseconds
// apart, and the first of them would otherwise go in a call of its own and split the claims
// that follow. A fleet of four workers of 64 slots made a third fewer calls with it.
const gatherFor = 300 * time.Microsecond

// receiveWithin answers what comes on ch within gatherFor, at most most values.
func receiveWithin[T any](ch <-chan T, most int) []T {
	if most <= 0 {
		return nil
	}
	t := time.NewTimer(gatherFor)
	defer t.Stop()
	var got []T
	for len(got) < most {
		select {
		case v := <-ch:
			got = append(got, v)
		case <-t.C:
			return got
		}
	}
	return got
}

// send reports batch in one call, under the first completion's context (each waits with its
// own report timeout, all alike).
func (p *completer) send(batch []completion) {
	if len(batch) == 1 {
		c := batch[0]
		_, err := c.claim.Complete(c.ctx, c.opts)
		c.result <- err
		return
	}
	cs := make([]client.Completion, len(batch))
	for i, c := range batch {
		cs[i] = client.Completion{Claim: c.claim, CompleteOptions: c.opts}
	}
	_, refusals, err := p.client.CompleteMany(batch[0].ctx, cs)
	for i, c := range batch {
		switch {
		case err != nil:
			c.result <- err
		default:
			c.result <- refusals[i]
		}
	}
}

// stop ends the completer once no completion is waiting: call it after every job reported.
func (p *completer) stop() {
	close(p.done)
	<-p.exited
}
