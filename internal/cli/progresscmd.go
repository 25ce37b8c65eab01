package cli

import "github.com/ag-coord/ag/internal/checkout"

// newProgress answers a progress line on g's stderr for totalFiles files of totalBytes bytes (0:
// not known), or nil when stderr is not a terminal or the output is JSON.
func newProgress(g *globals, verb string, totalFiles int, totalBytes int64) *checkout.Progress {
	if g.json {
		return nil
	}
	return checkout.NewProgress(g.stderr, verb, totalFiles, totalBytes)
}
