package cli_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
)

// countingRepos is a fake server that counts the blobs its GetBlobs calls ask for, per digest,
// and the calls in flight at most at once. A call waits until another is in flight beside it,
// so that calls made at once are seen to overlap however the machine schedules them; a client
// that makes one call at a time has its first wait 10 s, and then none.
type countingRepos struct {
	*fakeRepos
	mu       sync.Mutex
	calls    map[string]int
	inFlight int
	most     int
	overlap  chan struct{} // closed once two calls were in flight at once, or one gave up waiting
}

func newCountingRepos() *countingRepos {
	return &countingRepos{fakeRepos: &fakeRepos{}, calls: map[string]int{}, overlap: make(chan struct{})}
}

func (f *countingRepos) GetBlobs(ctx context.Context, req *agwpv1.GetBlobsRequest, stream *connect.ServerStream[agwpv1.GetBlobsResponse]) error {
	f.mu.Lock()
	for _, d := range req.GetDigests() {
		f.calls[d]++
	}
	f.inFlight++
	f.most = max(f.most, f.inFlight)
	if f.inFlight > 1 {
		f.overlapped()
	}
	overlap := f.overlap
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()
	select {
	case <-overlap:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Second):
		f.mu.Lock()
		f.overlapped()
		f.mu.Unlock()
	}
	return f.fakeRepos.GetBlobs(ctx, req, stream)
}

// overlapped lets every call that waits for another go on; f.mu is held.
func (f *countingRepos) overlapped() {
	select {
	case <-f.overlap:
	default:
		close(f.overlap)
	}
}

// reset forgets the calls so far, for the next command to be counted alone.
func (f *countingRepos) reset() {
	f.calls, f.most, f.overlap = map[string]int{}, 0, make(chan struct{})
}

// TestCheckoutFetchesInParallel ensures `ag checkout` and `ag sync` fetch blobs by a few
// GetBlobs calls at once, but not more than a handful, and each blob once however many files
// hold it; and that with stderr not a terminal they print no progress line.
func TestCheckoutFetchesInParallel(t *testing.T) {
	t.Parallel()
	files := map[string]string{}
	distinct := 3*client.BlobsPerCall + 1 // four calls
	for i := range distinct + 300 {
		files[fmt.Sprintf("d%d/f%d.txt", i%7, i)] = fmt.Sprintf("content %d\n", i%distinct)
	}
	f := newCountingRepos()
	f.set("rev_1", files)
	mux := http.NewServeMux()
	mux.Handle(agwpv1connect.NewRepositoryServiceHandler(f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	dir := filepath.Join(t.TempDir(), "co")
	out, errOut, code := runCLI("checkout", "app", dir, "--server", srv.URL, "--token", "t")
	if code != 0 {
		t.Fatalf("ag checkout: exit %d\n%s%s", code, out, errOut)
	}
	if errOut != "" {
		t.Errorf("ag checkout printed to stderr, which is no terminal: %q", errOut)
	}
	assertFiles(t, dir, files)
	check := func(what string, blobs int) {
		t.Helper()
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.calls) != blobs {
			t.Errorf("%s fetched %d distinct blobs, want %d", what, len(f.calls), blobs)
		}
		for d, n := range f.calls {
			if n != 1 {
				t.Errorf("%s fetched %s %d times, want once", what, d, n)
			}
		}
		if f.most < 2 || f.most > 4 {
			t.Errorf("%s had at most %d GetBlobs calls in flight, want several and at most 4", what, f.most)
		}
		f.reset()
	}
	check("checkout", distinct)

	// A sync to a revision that changes every file fetches the same way.
	next := maps.Clone(files)
	for p, c := range next {
		next[p] = strings.ToUpper(c)
	}
	f.set("rev_2", next)
	if out, errOut, code := runCLI("sync", "-C", dir, "--server", srv.URL, "--token", "t"); code != 0 {
		t.Fatalf("ag sync: exit %d\n%s%s", code, out, errOut)
	}
	assertFiles(t, dir, next)
	check("sync", distinct)
}

// TestCheckoutFetchFailureLeavesNothing ensures a checkout whose fetches fail while others are
// in flight leaves nothing behind, as a sequential checkout did.
func TestCheckoutFetchFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	files := map[string]string{}
	for i := range 200 {
		files[fmt.Sprintf("d%d/f%d.txt", i%5, i)] = fmt.Sprintf("content %d\n", i)
	}
	f := &fakeRepos{}
	f.set("rev_1", files)
	url := serveRepos(t, f)
	f.mu.Lock()
	f.files["d3/f103.txt"] = "not served\n"
	f.mu.Unlock()
	parent := t.TempDir()
	target := filepath.Join(parent, "co")
	if out, err := runAg("checkout", "app", target, "--server", url, "--token", "t"); err == nil || !strings.Contains(err.Error(), "d3/f103.txt") {
		t.Fatalf("ag checkout with a blob missing: %v\n%s\nwant an error naming d3/f103.txt", err, out)
	}
	if entries, err := os.ReadDir(parent); err != nil || len(entries) != 0 {
		t.Errorf("after the failed checkout, %s holds %v (%v), want nothing", parent, entries, err)
	}
}
