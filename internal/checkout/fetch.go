package checkout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/ag-coord/ag/client"
)

// fetchCalls is how many GetBlobs calls a checkout or a sync keeps in flight.
const fetchCalls = 4

// fetchBlobs fetches the blobs of files (path → digest), each digest once however many paths
// share it, in GetBlobs calls of many blobs, a few at once, and calls got with each blob's
// content and the paths (sorted) that hold it. got runs on the fetching goroutines, several at
// once. The first error, from a fetch or from got, stops the rest and is answered. sizes (digest
// → size, nil or partial when not known) lets a large blob come as a stream.
func fetchBlobs(ctx context.Context, c *client.Client, files map[string]string, sizes map[string]uint64, prog *Progress, got func(paths []string, content []byte) error) error {
	byDigest := map[string][]string{}
	for p, d := range files {
		byDigest[d] = append(byDigest[d], p)
	}
	digests := make([]string, 0, len(byDigest))
	for d, ps := range byDigest {
		sort.Strings(ps)
		digests = append(digests, d)
	}
	// In the order of their first paths, so a checkout fills directories one after the other.
	sort.Slice(digests, func(i, j int) bool { return byDigest[digests[i]][0] < byDigest[digests[j]][0] })
	err := c.BlobsSized(ctx, digests, sizes, fetchCalls, func(d string, content []byte) error {
		paths := byDigest[d]
		if err := got(paths, content); err != nil {
			return err
		}
		prog.Add(len(paths), int64(len(content))*int64(len(paths)))
		return nil
	})
	var missing *client.BlobNotFoundError
	if errors.As(err, &missing) && len(byDigest[missing.Digest]) > 0 {
		return fmt.Errorf("fetch %s: %w", byDigest[missing.Digest][0], err)
	}
	if err != nil {
		return fmt.Errorf("fetch the files' contents: %w", err)
	}
	return nil
}

// fetchContents fetches the blobs of files (path → digest) in parallel, as fetchBlobs does, and
// answers every path's content, all held in memory: for a sync or a revert, which change
// nothing on disk before every blob is there.
func fetchContents(ctx context.Context, c *client.Client, files map[string]string, sizes map[string]uint64, prog *Progress) (map[string][]byte, error) {
	out := make(map[string][]byte, len(files))
	var mu sync.Mutex
	err := fetchBlobs(ctx, c, files, sizes, prog, func(paths []string, content []byte) error {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range paths {
			out[p] = content
		}
		return nil
	})
	return out, err
}

// Progress prints, on a terminal, one line that counts the files and bytes fetched and
// written, redrawn at most every progressEvery and ended by done. A nil progress prints
// nothing: that is what a pipe, a file or --json get.
type Progress struct {
	w          io.Writer
	verb       string
	unit       string // what totalFiles counts; "" is files
	totalFiles int
	totalBytes int64

	mu    sync.Mutex
	files int
	bytes int64
	drawn time.Time
	shown bool
}

const progressEvery = 100 * time.Millisecond

// Add counts files of bytes done, and redraws the line when it is due.
func (p *Progress) Add(files int, bytes int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.files += files
	p.bytes += bytes
	if now := time.Now(); now.Sub(p.drawn) >= progressEvery {
		p.drawn = now
		p.draw()
	}
}

// Done draws the final count and ends the line, if one was drawn.
func (p *Progress) Done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		p.draw()
		fmt.Fprintln(p.w)
	}
}

func (p *Progress) draw() {
	p.shown = true
	total := ""
	if p.totalBytes > 0 {
		total = "/" + humanBytes(p.totalBytes)
	}
	// \x1b[K clears what a longer line drawn before left at its end.
	unit := p.unit
	if unit == "" {
		unit = "files"
	}
	fmt.Fprintf(p.w, "\r%s %d/%d %s, %s%s\x1b[K", p.verb, p.files, p.totalFiles, unit, humanBytes(p.bytes), total)
}

// humanBytes writes a byte count in binary units, one decimal.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// NewProgress answers a progress line on w, or nil when w is not a terminal.
func NewProgress(w io.Writer, verb string, totalFiles int, totalBytes int64) *Progress {
	if !isTerminal(w) {
		return nil
	}
	return &Progress{w: w, verb: verb, totalFiles: totalFiles, totalBytes: totalBytes}
}

// SetUnit names what the line counts instead of files.
func (p *Progress) SetUnit(what string) {
	if p != nil {
		p.unit = what
	}
}
