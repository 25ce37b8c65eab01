package cli

import (
	"io"

	"github.com/ag-coord/ag/internal/termsafe"
)

// What ag prints for people carries text that agents wrote: change messages, validation output
// and progress, paths, holder labels, job results. Every human-readable output escapes it
// (internal/termsafe), so that it cannot drive the terminal of whoever reads it, and a field of
// a line cannot start another that passes for one of ag's; --json prints it exactly, for
// programs.

// termPrintf is termsafe.Fprintf: each string (or error) argument escaped as one field of a line.
func termPrintf(w io.Writer, format string, args ...any) error {
	return termsafe.Fprintf(w, format, args...)
}
