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
