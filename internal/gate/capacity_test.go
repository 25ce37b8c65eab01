package gate

import (
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/clock"
)

func TestCapacityCountsWaitingClaimsAndHeldJobsOverTheLastMinute(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	rises := 0
	c := NewCapacity(clk.Now, func() { rises++ })
	if got := c.Estimate(); got != 0 {
		t.Fatalf("Estimate with no worker seen = %d, want 0", got)
	}
	// Four workers wait for validate jobs: the estimate rises with each.
	var done []func()
	for range 4 {
		done = append(done, c.Waiting())
	}
	if got := c.Estimate(); got != 4 || rises != 4 {
		t.Fatalf("Estimate with 4 waiting claims = %d after %d rises, want 4 after 4", got, rises)
	}
	// Each gets a job: it holds it instead of waiting, which is the same worker.
	for i, d := range done {
		d()
		d() // a second call changes nothing
		c.Held(string(rune('a'+i)), clk.Now().Add(30*time.Second))
	}
	if got := c.Estimate(); got != 4 || rises != 4 {
		t.Fatalf("Estimate with 4 held jobs = %d after %d rises, want 4 and no new rise", got, rises)
	}
	// Three finish and do not come back; the fourth's worker dies without a word.
	clk.Advance(10 * time.Second)
	for _, id := range []string{"a", "b", "c"} {
		c.Released(id)
	}
	clk.Advance(30 * time.Second)
	if got := c.Estimate(); got != 4 {
		t.Fatalf("Estimate 40s after 4 were seen = %d, want still 4: a minute counts", got)
	}
	clk.Advance(61 * time.Second)
	if got := c.Estimate(); got != 0 {
		t.Fatalf("Estimate over a minute after the last was seen = %d, want 0 (the held job's lease ran out)", got)
	}
	c.Waiting()
	if got := c.Estimate(); got != 1 || rises != 5 {
		t.Fatalf("Estimate after one came back = %d after %d rises, want 1 after 5", got, rises)
	}
}

// TestCapacityRemembersTheValueBeforeADrop ensures that a value that held for a while without a
// change still counts in the second it ended: four jobs held for 50 s, with no heartbeat seen
// meanwhile, then released, were seen within the last minute 40 s later.
func TestCapacityRemembersTheValueBeforeADrop(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	c := NewCapacity(clk.Now, nil)
	for _, id := range []string{"a", "b", "c", "d"} {
		c.Held(id, clk.Now().Add(3*time.Minute))
	}
	clk.Advance(50 * time.Second)
	for _, id := range []string{"a", "b", "c", "d"} {
		c.Released(id)
	}
	clk.Advance(40 * time.Second)
	if got := c.Estimate(); got != 4 {
		t.Fatalf("Estimate = %d, want 4: four jobs were held 40 s ago, within the last minute", got)
	}
}

// TestTheAutomaticDepthIsBoundedWhateverTheClaims holds SECURITY.md's bound on inflating the
// depth with idle claims: twenty workers waiting make a queue without a depth of its own
// speculate to --gate-max-depth (8 by default), never further; a policy's own depth is its own.
func TestTheAutomaticDepthIsBoundedWhateverTheClaims(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC))
	c := NewCapacity(clk.Now, nil)
	for range 20 {
		c.Waiting()
	}
	for _, tc := range []struct {
		name     string
		g        *Gate
		p        Policy
		depth    int
		capacity int
	}{
		{"twenty waiting, the default bound", &Gate{Capacity: c}, Policy{}, DefaultMaxDepth, 20},
		{"twenty waiting, a bound of 3", &Gate{Capacity: c, MaxDepth: 3}, Policy{}, 3, 20},
		{"a policy's own depth", &Gate{Capacity: c, MaxDepth: 3}, Policy{Depth: 12}, 12, 20},
		{"no estimate", &Gate{}, Policy{}, 1, 0},
		{"no worker seen", &Gate{Capacity: NewCapacity(clk.Now, nil)}, Policy{}, 1, 0},
	} {
		if tc.g.Capacity != nil && tc.g.Capacity.Estimate() != tc.capacity {
			t.Fatalf("%s: estimate %d, want %d", tc.name, tc.g.Capacity.Estimate(), tc.capacity)
		}
		if depth, batch := tc.g.shape(tc.p); depth != tc.depth || batch != 1 {
			t.Errorf("%s: depth %d, batch %d; want %d and 1", tc.name, depth, batch, tc.depth)
		}
	}
}
