package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestLimitFlags ensures the limits read as sizes and counts, and that a limit too small for a
// run to start, or one that does not read, stops the worker at start and says why.
func TestLimitFlags(t *testing.T) {
	t.Setenv("AG_TOKEN", "agt_test")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--max-memory", "lots"}, 2, `invalid value "lots" for flag -max-memory`},
		{[]string{"--max-disk", "-1G"}, 2, `invalid value "-1G" for flag -max-disk`},
		{[]string{"--max-memory", "1MiB"}, 1, "--max-memory 1 MiB: give 0 for no limit, or at least 16 MiB"},
		{[]string{"--max-pids", "3"}, 1, "--max-pids 3: give 0 for no limit, or at least 8"},
		{[]string{"--max-pids", "-1"}, 1, "--max-pids -1: give 0 for no limit, or at least 8"},
		{[]string{"--max-disk", "1000"}, 1, "--max-disk 1000 bytes: give 0 for no limit, or at least 16 MiB"},
	} {
		var out, errOut bytes.Buffer
		code := exitCode(run(context.Background(), c.args, &out, &errOut), &errOut)
		if code != c.code || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("ag-worker %s: exit %d, stderr:\n%s\nwant exit %d and %q", strings.Join(c.args, " "), code, errOut.String(), c.code, c.want)
		}
	}
}
