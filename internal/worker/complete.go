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
	claim *client.Claim
	opts  client.CompleteOptions
	// reported is called with the completion's refusal, or the error of the call that
	// carried it, once the call has returned.
	reported func(error)
}

// newCompleter answers a completer for a worker of slots jobs at a time: no more completions
// than that can be waiting, and none waits to be handed over.
func newCompleter(c *client.Client, slots int) *completer {
	p := &completer{client: c, gathers: slots > 1, reqs: make(chan completion, slots), done: make(chan struct{}), exited: make(chan struct{})}
	go p.run()
	return p
}

// complete has a claim's completion reported within reportTimeout, and reported called then.
// It does not wait: a job's goroutine has nothing more to do, and one that waited would be
// woken once for each job of a call.
func (p *completer) complete(claim *client.Claim, opts client.CompleteOptions, reported func(error)) {
	p.reqs <- completion{claim: claim, opts: opts, reported: reported}
}

func (p *completer) run() {
	defer close(p.exited)
	var pending []completion
	// One goroutine makes every call: a goroutine a call would grow a new stack each time to
	// the depth of an HTTP call.
	batches, sent := make(chan []completion), make(chan struct{}, 1)
	go func() {
		for batch := range batches {
			p.send(batch)
			sent <- struct{}{}
		}
	}()
	defer close(batches)
	sending := false
	for {
		if !sending && len(pending) > 0 {
			n := min(len(pending), client.MaxBatch)
			batch := pending[:n:n]
			pending = pending[n:]
			sending = true
			batches <- batch
		}
		select {
		case c := <-p.reqs:
			pending = append(pending, c)
			for len(p.reqs) > 0 {
				pending = append(pending, <-p.reqs)
			}
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

// send reports batch in one call.
func (p *completer) send(batch []completion) {
	ctx, cancel := context.WithTimeout(context.Background(), reportTimeout)
	defer cancel()
	if len(batch) == 1 {
		c := batch[0]
		_, err := c.claim.Complete(ctx, c.opts)
		c.reported(err)
		return
	}
	cs := make([]client.Completion, len(batch))
	for i, c := range batch {
		cs[i] = client.Completion{Claim: c.claim, CompleteOptions: c.opts}
	}
	refusals, err := p.client.ReportMany(ctx, cs)
	for i, c := range batch {
		switch {
		case err != nil:
			c.reported(err)
		default:
			c.reported(refusals[i])
		}
	}
}

// stop ends the completer once no completion is waiting: call it after every job reported.
func (p *completer) stop() {
	close(p.done)
	<-p.exited
}
