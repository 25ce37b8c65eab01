package worker

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

// TestParseSize ensures sizes read as operators write them: bytes, 1024-based K, M, G, T with
// or without "iB", 1000-based with "B", decimals, any case; and anything else refused.
func TestParseSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"0": 0, "1024": 1024, "512MiB": 512 << 20, "1GiB": 1 << 30, "2G": 2 << 30, "2g": 2 << 30,
		"1.5GiB": 3 << 29, "64 MiB": 64 << 20, "4k": 4096, "2GB": 2e9, "1TB": 1e12, "1T": 1 << 40, "10b": 10,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1G", "1PiB", "1 G B", "1e3", "lots", "99999999999T"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

// TestFormatSize ensures a size reads back exactly, in the largest unit that divides it.
func TestFormatSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{
		64 << 20: "64 MiB", 4 << 30: "4 GiB", 3 << 29: "1536 MiB", 1000: "1000 bytes", 4096: "4 KiB", 1 << 40: "1 TiB",
	} {
		if got := FormatSize(in); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", in, got, want)
		}
		if back, err := ParseSize(strings.ReplaceAll(FormatSize(in), " bytes", "")); err != nil || back != in {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", in, back, err)
		}
	}
}

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
