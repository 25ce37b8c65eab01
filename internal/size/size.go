// Package size reads and writes sizes in bytes as operators write them on a command line
// (ag-worker --max-memory 4GiB, ag repo set-validation --max-disk 2G) and as ag prints them in
// reasons ("worker limit: memory 4 GiB"): one reading for every flag, one writing for every
// message, so that what a reason says can be given back as a flag.
package size

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// units are the units Parse reads: K, M, G, T and KiB, MiB, GiB, TiB count in 1024s,
// KB, MB, GB, TB in 1000s.
var units = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// Parse reads a size in bytes: "1073741824", "512MiB", "1.5GiB", "2G" (1024-based), "2GB"
// (1000-based). "0" is no limit.
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	unit, ok := units[strings.ToLower(strings.TrimSpace(t[i:]))]
	n, err := strconv.ParseFloat(t[:i], 64)
	if !ok || err != nil || t[:i] == "" {
		return 0, fmt.Errorf("size %q: a number of bytes, or with a unit: 512MiB, 2GiB, 2G (1024-based), 2GB (1000-based)", s)
	}
	bytes := n * float64(unit)
	if bytes >= math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return int64(bytes), nil
}

// Format writes bytes exactly, in the largest unit that divides them: "4 GiB", "1536 MiB",
// "1000 bytes".
func Format(bytes int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if bytes >= u.size && bytes%u.size == 0 {
			return strconv.FormatInt(bytes/u.size, 10) + " " + u.name
		}
	}
	return strconv.FormatInt(bytes, 10) + " bytes"
}
