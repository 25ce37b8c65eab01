package worker

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

// TestLimitsWithin ensures a policy may hold its runs to less than the worker's limits, never
// to more, nor to none, nor to less than a run needs to start; and that where the worker has
// no limit, the policy's holds.
func TestLimitsWithin(t *testing.T) {
	t.Parallel()
	worker := Limits{Memory: 1 << 30, Pids: 100, Disk: 1 << 30}
	for _, c := range []struct {
		name          string
		asked, within Limits
		want          Limits
	}{
		{"nothing asked", Limits{}, worker, worker},
		{"less", Limits{Memory: 64 << 20, Pids: 10, Disk: 32 << 20}, worker, Limits{Memory: 64 << 20, Pids: 10, Disk: 32 << 20}},
		{"more", Limits{Memory: 8 << 30, Pids: 1000, Disk: 8 << 30}, worker, worker},
		{"too little to start", Limits{Memory: 1, Pids: 1, Disk: 1}, worker, MinLimits},
		{"no worker limit", Limits{Memory: 64 << 20}, Limits{}, Limits{Memory: 64 << 20}},
	} {
		if got := c.asked.within(c.within); got != c.want {
			t.Errorf("%s: %+v within %+v = %+v, want %+v", c.name, c.asked, c.within, got, c.want)
		}
	}
}

// TestPayloadLimits ensures the limits a policy asks for are read from a validate job's
// payload, as JSON numbers or as the strings protobuf's JSON writes 64-bit integers as; a
// payload without them asks for none, and one whose limits are not counts is refused.
func TestPayloadLimits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		payload map[string]any
		want    Limits
		wantErr string
	}{
		{"none", map[string]any{"command": []any{"true"}}, Limits{}, ""},
		{"null", map[string]any{"limits": nil}, Limits{}, ""},
		{"numbers", map[string]any{"limits": map[string]any{"memory_bytes": 1 << 30, "pids": 64, "disk_bytes": 1 << 20}}, Limits{Memory: 1 << 30, Pids: 64, Disk: 1 << 20}, ""},
		{"strings", map[string]any{"limits": map[string]any{"memory_bytes": "1073741824"}}, Limits{Memory: 1 << 30}, ""},
		{"not an object", map[string]any{"limits": "1GiB"}, Limits{}, "limits is not an object"},
		{"negative", map[string]any{"limits": map[string]any{"pids": -1}}, Limits{}, "limits.pids"},
		{"a fraction", map[string]any{"limits": map[string]any{"pids": 1.5}}, Limits{}, "limits.pids"},
		{"not a number", map[string]any{"limits": map[string]any{"disk_bytes": "1GiB"}}, Limits{}, "limits.disk_bytes"},
	} {
		s, err := structpb.NewStruct(c.payload)
		if err != nil {
			t.Fatal(err)
		}
		got, err := payloadLimits(s)
		switch {
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: payloadLimits = %+v, %v; want an error about %s", c.name, got, err, c.wantErr)
		case c.wantErr == "" && (err != nil || got != c.want):
			t.Errorf("%s: payloadLimits = %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

// TestOverLimitReasons ensures a run that reached a limit says which, and how much, as an agent
// reads it in its change's rejection.
func TestOverLimitReasons(t *testing.T) {
	t.Parallel()
	l := Limits{Memory: 1 << 30, Pids: 1024, Disk: 4 << 30}
	for name, want := range map[string]string{
		limitMemory: "worker limit: memory 1 GiB", limitProcesses: "worker limit: processes 1024", limitDisk: "worker limit: disk 4 GiB",
	} {
		if got := overLimitPrefix + l.describe(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	r := &runLimit{limits: Limits{Memory: 64 << 20}}
	if got, want := r.String(), "memory 64 MiB, processes none, disk none"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}
