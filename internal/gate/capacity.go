package gate

import (
	"sync"
	"time"
)

// capacityWindow is how long a sighting of validate workers counts: a worker that finished a
// job and has not asked for the next yet is still there.
const capacityWindow = time.Minute

// Capacity estimates how many validations the workers can run at once, from what this replica
// sees of them: the claims waiting for a validate job, plus the validate jobs held (claimed and
// not finished, until their lease runs out), at the highest it was over the last minute. It is
// what a repository whose policy names no depth speculates to.
//
// Each replica sees only the workers it serves; a team whose workers reach several replicas
// names the depth in its policy.
type Capacity struct {
	mu      sync.Mutex
	now     func() time.Time
	waiting int
	held    map[string]time.Time // validate job id → when its lease ends
	samples []capacitySample     // what it was, when it changed, oldest first
	peak    int                  // the estimate last answered or reported
	onRise  func()
}

type capacitySample struct {
	at    time.Time
	value int
}

// NewCapacity answers an empty estimate; onRise, when set, is called (outside the lock) when
// the estimate grows, so that queues waiting on fewer workers speculate further at once.
func NewCapacity(now func() time.Time, onRise func()) *Capacity {
	if now == nil {
		now = time.Now
	}
	return &Capacity{now: now, held: map[string]time.Time{}, onRise: onRise}
}

// Waiting records a claim that waits for a validate job, until done is called.
func (c *Capacity) Waiting() (done func()) {
	c.change(func() { c.waiting++ })
	var once sync.Once
	return func() { once.Do(func() { c.change(func() { c.waiting-- }) }) }
}

// Held records that a validate job is held until its lease ends (a claim, or a heartbeat that
// extended it).
func (c *Capacity) Held(jobID string, until time.Time) {
	c.change(func() { c.held[jobID] = until })
}

// Released records that a validate job's worker is done with it.
func (c *Capacity) Released(jobID string) {
	c.change(func() { delete(c.held, jobID) })
}

// Estimate answers how many validations the workers seen in the last minute can run at once.
func (c *Capacity) Estimate() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.sampleLocked(now)
	best := 0
	for _, s := range c.samples {
		best = max(best, s.value)
	}
	c.peak = best
	return best
}

func (c *Capacity) change(f func()) {
	c.mu.Lock()
	f()
	now := c.now()
	c.sampleLocked(now)
	v := c.samples[len(c.samples)-1].value
	rose := v > c.peak
	if rose {
		c.peak = v
	}
	onRise := c.onRise
	c.mu.Unlock()
	if rose && onRise != nil {
		onRise()
	}
}

// sampleLocked records the value now and forgets the values the window no longer covers. A
// sample holds from its time until the next one's, so the oldest kept may start before the
// window: it was still the value when the window began.
func (c *Capacity) sampleLocked(now time.Time) {
	for id, until := range c.held {
		if !until.After(now) {
			delete(c.held, id) // its worker went without a word
		}
	}
	cut := now.Add(-capacityWindow)
	i := 0
	for i+1 < len(c.samples) && !c.samples[i+1].at.After(cut) {
		i++
	}
	c.samples = c.samples[i:]
	v := c.waiting + len(c.held)
	if n := len(c.samples); n > 0 && c.samples[n-1].value == v {
		return
	}
	c.samples = append(c.samples, capacitySample{at: now, value: v})
}
