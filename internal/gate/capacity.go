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
	// buckets hold the highest value of each of the last capacityWindow's seconds, by the
	// second: the estimate costs the same however often workers claim.
	buckets [capacitySeconds]capacityBucket
	peak    int // the estimate last answered or reported
	onRise  func()
}

const capacitySeconds = int(capacityWindow / time.Second)

type capacityBucket struct {
	second int64
	max    int
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
	best := c.sampleLocked(now)
	oldest := now.Unix() - int64(capacitySeconds) + 1
	for _, b := range c.buckets {
		if b.second >= oldest {
			best = max(best, b.max)
		}
	}
	c.peak = best
	return best
}

func (c *Capacity) change(f func()) {
	c.mu.Lock()
	now := c.now()
	c.sampleLocked(now) // the value that held until now counts for this second too
	f()
	v := c.sampleLocked(now)
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

// sampleLocked records the value now in its second's bucket and answers it. A held job whose
// lease ran out is forgotten: its worker went without a word.
func (c *Capacity) sampleLocked(now time.Time) int {
	for id, until := range c.held {
		if !until.After(now) {
			delete(c.held, id)
		}
	}
	v := c.waiting + len(c.held)
	sec := now.Unix()
	b := &c.buckets[int(sec%int64(capacitySeconds))]
	if b.second != sec {
		*b = capacityBucket{second: sec}
	}
	b.max = max(b.max, v)
	return v
}
