package size

import (
	"strings"
	"testing"
)

// TestParse ensures sizes read as operators write them: bytes, 1024-based K, M, G, T with
// or without "iB", 1000-based with "B", decimals, any case; and anything else refused.
func TestParse(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"0": 0, "1024": 1024, "512MiB": 512 << 20, "1GiB": 1 << 30, "2G": 2 << 30, "2g": 2 << 30,
		"1.5GiB": 3 << 29, "64 MiB": 64 << 20, "4k": 4096, "2GB": 2e9, "1TB": 1e12, "1T": 1 << 40, "10b": 10,
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1G", "1PiB", "1 G B", "1e3", "lots", "99999999999T"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", in, got)
		}
	}
}

// TestFormat ensures a size reads back exactly, in the largest unit that divides it.
func TestFormat(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{
		64 << 20: "64 MiB", 4 << 30: "4 GiB", 3 << 29: "1536 MiB", 1000: "1000 bytes", 4096: "4 KiB", 1 << 40: "1 TiB",
	} {
		if got := Format(in); got != want {
			t.Errorf("Format(%d) = %q, want %q", in, got, want)
		}
		if back, err := Parse(strings.ReplaceAll(Format(in), " bytes", "")); err != nil || back != in {
			t.Errorf("Parse(Format(%d)) = %d, %v", in, back, err)
		}
	}
}
