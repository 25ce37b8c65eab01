package main

import (
	"fmt"
	"slices"
)

// schedule describes a queue for ideal: its changes in queue order (true for each that fails
// validation), how deep it speculates, how many changes a candidate takes, and how many
// validations run at once.
type schedule struct {
	fails                 []bool
	depth, batch, workers int
}

// plan is what an overhead-free queue needs for a schedule: rounds of validation one after the
// other, and the validate jobs it creates.
type plan struct {
	rounds, jobs int
}

// ideal plays the integration queue's rules (gate.RunQueue) on s with nothing but the
// validations taking time: every validation takes one round, a queue advance and a worker's
// claim take none, and the queue advances until it has nothing more to do between rounds. Up
// to s.depth candidates validate on the chain, each on the one ahead of it, s.batch changes to
// a candidate; a candidate fails when its tree holds a failing change; a failed batch is split
// in halves at once, a failed single change is rejected once every one ahead of it landed; the
// candidates after a failed one are rebuilt without it at once; the validate jobs run in the
// order they were created, s.workers at a time. Since every validation starts at a round's
// start, none is running when a round ends, so a rebuild never waits on a cancelled one.
func ideal(s schedule) (plan, error) {
	q := &simQueue{schedule: s, depth: max(s.depth, 1), batch: max(s.batch, 1), revBad: map[string]bool{"": false}}
	for range s.fails {
		q.changes = append(q.changes, &simChange{})
	}
	var p plan
	for {
		for q.advance() {
		}
		if q.final() {
			p.jobs = q.jobs
			return p, nil
		}
		// The workers take the oldest jobs waiting; each takes one round.
		var running []*simJob
		for _, j := range q.waiting {
			if j.state == jobWaiting && len(running) < max(s.workers, 1) {
				j.state = jobDone
				running = append(running, j)
			}
		}
		if len(running) == 0 {
			return plan{}, fmt.Errorf("the ideal queue is stuck after %d rounds", p.rounds)
		}
		p.rounds++
		for _, j := range running {
			j.cand.passed = !q.revBad[j.cand.rev]
		}
		q.waiting = slices.DeleteFunc(q.waiting, func(j *simJob) bool { return j.state != jobWaiting })
	}
}

type simState int

const (
	simQueued simState = iota
	simValidating
	simIntegrated
	simRejected
)

type simChange struct {
	state simState
	cand  *simCandidate
	limit int // the batch limit a split left, 0 for none
}

type candState int

const (
	candValidating candState = iota
	candPassed
	candFailed
	candEnded // landed, rejected, split or superseded
)

type simCandidate struct {
	changes     []int
	parent, rev string
	state       candState
	job         *simJob
	passed      bool // the job's verdict, once it ran
}

type jobState int

const (
	jobWaiting jobState = iota
	jobDone
	jobCancelled
)

type simJob struct {
	cand  *simCandidate
	state jobState
}

// simQueue is the state of the ideal queue: revisions are named by the changes they hold on
// the initial mainline (""), in order.
type simQueue struct {
	schedule
	depth, batch int
	changes      []*simChange
	mainline     string
	revBad       map[string]bool // whether a revision holds a failing change
	waiting      []*simJob       // jobs not yet run, oldest first
	jobs         int
}

func (q *simQueue) final() bool {
	for _, c := range q.changes {
		if c.state == simQueued || c.state == simValidating {
			return false
		}
	}
	return true
}

// advance walks the queue once as RunQueue does and answers whether anything changed.
func (q *simQueue) advance() bool {
	var pending []int
	for i, c := range q.changes {
		if c.state == simQueued || c.state == simValidating {
			pending = append(pending, i)
		}
	}
	tip, ahead, chain, blocked, changed := q.mainline, 0, 0, false, false
	for k := 0; k < len(pending); {
		c := q.changes[pending[k]]
		if c.state == simValidating {
			cand := c.cand
			n := len(cand.changes)
			if cand.parent != tip || blocked {
				q.supersede(cand)
				changed = true
				continue
			}
			if cand.state == candValidating && cand.job.state == jobDone {
				cand.state = candFailed
				if cand.passed {
					cand.state = candPassed
				}
				changed = true
			}
			switch cand.state {
			case candPassed:
				if ahead == 0 {
					q.mainline, tip = cand.rev, cand.rev
					for _, i := range cand.changes {
						q.changes[i].state = simIntegrated
					}
					cand.state = candEnded
					changed = true
				} else {
					tip, ahead = cand.rev, ahead+n
				}
				k += n
			case candValidating:
				tip, chain, ahead = cand.rev, chain+1, ahead+n
				k += n
			case candFailed:
				switch {
				case n > 1:
					half := (n + 1) / 2
					cand.state = candEnded
					for _, i := range cand.changes {
						ch := q.changes[i]
						ch.state, ch.cand = simQueued, nil
						if ch.limit == 0 || ch.limit > half {
							ch.limit = half
						}
					}
				case ahead == 0:
					cand.state = candEnded
					c.state = simRejected
					k++
				default:
					ahead += n
					k += n
				}
				changed = true
			}
			continue
		}
		if blocked {
			k++
			continue
		}
		if chain >= q.depth {
			blocked = true
			k++
			continue
		}
		limit := q.batch
		var built []int
		for j := k; j < len(pending) && q.changes[pending[j]].state == simQueued; j++ {
			if l := q.changes[pending[j]].limit; l > 0 {
				limit = min(limit, l)
			}
			if len(built) >= limit {
				break
			}
			built = append(built, pending[j])
		}
		rev, bad := tip, q.revBad[tip]
		for _, i := range built {
			rev += fmt.Sprintf("+%d", i)
			bad = bad || q.fails[i]
		}
		q.revBad[rev] = bad
		cand := &simCandidate{changes: built, parent: tip, rev: rev}
		cand.job = &simJob{cand: cand}
		q.waiting = append(q.waiting, cand.job)
		q.jobs++
		for _, i := range built {
			q.changes[i].state, q.changes[i].cand = simValidating, cand
		}
		tip, chain, ahead = rev, chain+1, ahead+len(built)
		k += len(built)
		changed = true
	}
	return changed
}

// supersede ends a candidate built on what is no longer ahead of it: its job is cancelled and
// its changes are queued again.
func (q *simQueue) supersede(cand *simCandidate) {
	cand.state = candEnded
	if cand.job.state == jobWaiting {
		cand.job.state = jobCancelled
	}
	for _, i := range cand.changes {
		q.changes[i].state, q.changes[i].cand = simQueued, nil
	}
}
