package postgres

import (
	"context"
	"slices"
	"sync"
)

// Group commit of claims and completions.
//
// Most of the cost of a claim or a completion is the statement and its transaction, not the
// row: the round trip, starting the plan, the commit. So concurrent calls of one kind share a
// statement: at most groupBusy statements of a kind run at once, and the calls that arrive
// meanwhile queue and then go together, in one statement and one transaction, up to
// groupMax at a time. A call that finds a statement slot free runs at once, alone, so a lone
// caller waits for nobody.
//
// Each call keeps its own semantics inside the shared statement: a claim takes the best jobs,
// as many as it asks for, among those not taken by the calls before it in the group, as if
// they had run one after the other; a completion's claim check is in the conditional UPDATE's
// WHERE, row by row, and a refused completion changes nothing (it is then run alone, to tell
// why). A statement that fails changes nothing either, and its calls are then run one by one,
// so that each gets its own answer.

// groupBusy is how many statements of one kind (claims, completions) run at once. Beyond
// that, calls queue and go together. One: a second statement in flight (on the wire while the
// first is in the database) split the queue into smaller statements, and the database pays
// for each. Measured on two cores with four ag-worker processes of 64 slots draining a queue,
// one took a third fewer statements and a fifth less of the database's CPU, for 15% more jobs
// a second; eight workers claiming one job a call went 27% faster, and batches of 128 the
// same (docs/benchmarks.md).
const groupBusy = 1

// groupMax is the most calls one statement serves. A kind may hold a statement to less, by
// what its calls ask for (claimFits).
const groupMax = 32

// call is one call of a group: its context, parameters and outcome.
type call[P, R any] struct {
	ctx context.Context
	p   P
	r   R
	err error
	// ready is closed when r and err are set, or when this call is to run lead.
	ready chan struct{}
	lead  []*call[P, R]
}

// group queues the calls of one kind. The zero value is ready to use.
type group[P, R any] struct {
	mu    sync.Mutex
	busy  int           // statements running
	queue []*call[P, R] // calls waiting for a statement
}

// do runs p, alone or with the calls queued with it: run executes a batch of calls (one or
// more, all of whose contexts are live) and sets their outcomes; fits tells whether c may
// join batch.
func (g *group[P, R]) do(ctx context.Context, p P, run func(context.Context, []*call[P, R]), fits func(batch []*call[P, R], c *call[P, R]) bool) (R, error) {
	c := &call[P, R]{ctx: ctx, p: p}
	g.mu.Lock()
	if g.busy < groupBusy {
		g.busy++
		g.mu.Unlock()
		g.lead([]*call[P, R]{c}, run, fits)
		return c.r, c.err
	}
	c.ready = make(chan struct{})
	g.queue = append(g.queue, c)
	g.mu.Unlock()
	select {
	case <-c.ready:
	case <-ctx.Done():
		g.mu.Lock()
		if i := slices.Index(g.queue, c); i >= 0 {
			g.queue = slices.Delete(g.queue, i, i+1)
			g.mu.Unlock()
			var zero R
			return zero, ctx.Err()
		}
		g.mu.Unlock()
		// Taken into a batch already: its statement may change the job, so wait for it.
		<-c.ready
	}
	if c.lead != nil {
		g.lead(c.lead, run, fits)
	}
	return c.r, c.err
}

// lead runs batch, whose first call is the caller's own, answers the others, and hands the
// statement slot to the first queued call with the batch it is to run, if any.
func (g *group[P, R]) lead(batch []*call[P, R], run func(context.Context, []*call[P, R]), fits func([]*call[P, R], *call[P, R]) bool) {
	defer func() {
		for _, c := range batch[1:] {
			close(c.ready)
		}
		g.mu.Lock()
		next := g.take(fits)
		if next == nil {
			g.busy--
		}
		g.mu.Unlock()
		if next != nil {
			next[0].lead = next
			close(next[0].ready)
		}
	}()
	live := make([]*call[P, R], 0, len(batch))
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = err
		} else {
			live = append(live, c)
		}
	}
	switch len(live) {
	case 0:
	case 1:
		run(live[0].ctx, live)
	default:
		// One caller going away must not cancel the others' statement.
		run(context.WithoutCancel(batch[0].ctx), live)
	}
}

// take removes from the queue the next batch: the first queued call and those after it that
// fit with it, up to groupMax. Nil when nothing is queued. g.mu is held.
func (g *group[P, R]) take(fits func([]*call[P, R], *call[P, R]) bool) []*call[P, R] {
	if len(g.queue) == 0 {
		return nil
	}
	batch := []*call[P, R]{g.queue[0]}
	rest := g.queue[:0]
	for _, c := range g.queue[1:] {
		if len(batch) < groupMax && fits(batch, c) {
			batch = append(batch, c)
		} else {
			rest = append(rest, c)
		}
	}
	clear(g.queue[len(rest):])
	g.queue = rest
	return batch
}
