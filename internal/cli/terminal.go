package cli

import (
	"fmt"
	"io"

	"github.com/ag-coord/ag/internal/termsafe"
)

// What ag prints for people carries text that agents wrote: change messages, validation output
// and progress, paths, holder labels, job results. Every human-readable output escapes it
// (internal/termsafe), so that it cannot drive the terminal of whoever reads it, and a field of
// a line cannot start another that passes for one of ag's; --json prints it exactly, for
// programs.

// termPrintf is fmt.Fprintf for what people read: each string (or error) argument is escaped as
// one field of a line (termsafe.Line). The format is ag's own, and keeps its newlines and tabs.
// A block of lines (a rejection's reason, a job's output) goes through termsafe.Text instead,
// printed with %s by fmt.Fprintf: here its newlines would be escaped.
func termPrintf(w io.Writer, format string, args ...any) error {
	escaped := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			escaped[i] = termsafe.Line(v)
		case error:
			escaped[i] = termsafe.Line(v.Error())
		default:
			escaped[i] = a
		}
	}
	_, err := fmt.Fprintf(w, format, escaped...)
	return err
}
