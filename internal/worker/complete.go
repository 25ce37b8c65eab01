package worker

import (
	"context"
	"sync"

	"github.com/ag-coord/ag/client"
)

// completers is how many CompleteJobs calls a worker has in flight at once.
const completers = 4

// completer reports completions in batches on its own: the completions that come while a call
// is in flight go together in the next one (CompleteJobs, each with its own claim number), so a
// busy worker makes one call for many jobs and an idle one waits for nobody.
type completer struct {
	client *client.Client
	reqs   chan completion
	done   chan struct{}
	wg     sync.WaitGroup
}

type completion struct {
	ctx    context.Context
	claim  *client.Claim
	opts   client.CompleteOptions
	result chan error
}

func newCompleter(c *client.Client) *completer {
	p := &completer{client: c, reqs: make(chan completion), done: make(chan struct{})}
	for range completers {
		p.wg.Add(1)
		go p.run()
	}
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
	defer p.wg.Done()
	for {
		var first completion
		select {
		case first = <-p.reqs:
		case <-p.done:
			return
		}
		batch := []completion{first}
	more:
		for len(batch) < client.MaxBatch {
			select {
			case c := <-p.reqs:
				batch = append(batch, c)
			default:
				break more
			}
		}
		p.send(batch)
	}
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
	p.wg.Wait()
}
