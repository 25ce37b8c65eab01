package client_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// recordingRepos is a repository server that lacks every blob and records the calls that
// carry digests and contents.
type recordingRepos struct {
	agwpv1connect.UnimplementedRepositoryServiceHandler
	mu       sync.Mutex
	asked    []int   // digests per FindMissingBlobs
	uploads  [][]int // blob sizes per UploadBlobs
	edits    []int   // edits per Integrate
	uploaded map[string]bool
}

func (f *recordingRepos) FindMissingBlobs(_ context.Context, req *agwpv1.FindMissingBlobsRequest) (*agwpv1.FindMissingBlobsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, len(req.GetDigests()))
	return &agwpv1.FindMissingBlobsResponse{Missing: req.GetDigests()}, nil
}

func (f *recordingRepos) UploadBlobs(_ context.Context, req *agwpv1.UploadBlobsRequest) (*agwpv1.UploadBlobsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var sizes []int
	for _, b := range req.GetBlobs() {
		sizes = append(sizes, len(b))
		f.uploaded[string(b)] = true
	}
	f.uploads = append(f.uploads, sizes)
	return &agwpv1.UploadBlobsResponse{}, nil
}

func (f *recordingRepos) Integrate(_ context.Context, req *agwpv1.IntegrateRequest) (*agwpv1.IntegrateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.edits = append(f.edits, len(req.GetEdits()))
	return &agwpv1.IntegrateResponse{Change: &agwpv1.Change{Id: "chg_1"}}, nil
}

func serve(t *testing.T, f *recordingRepos) *client.Client {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(agwpv1connect.NewRepositoryServiceHandler(f, connect.WithReadMaxBytes(80<<20)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return client.New(srv.URL, "t", client.WithRetries(0, 0))
}

// TestIntegrateFilesSplitsUploads ensures IntegrateFiles uploads each missing content once, in
// calls of at most 16 MiB and client.MaxBlobsPerUpload blobs, and integrates all the changes in
// one call.
func TestIntegrateFilesSplitsUploads(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		files, size int
		uploads     int
	}{
		{"40 files of 1 MiB", 40, 1 << 20, 3},
		{"a change's worth of small files", client.MaxEditsPerChange, 8, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := &recordingRepos{uploaded: map[string]bool{}}
			cl := serve(t, f)
			var changes []client.FileChange
			for i := range c.files {
				content := bytes.Repeat([]byte{'x'}, c.size)
				copy(content, fmt.Sprint(i))
				changes = append(changes, client.FileChange{Path: fmt.Sprintf("f%d", i), Content: content})
			}
			// A second path with a content already sent, which goes up once.
			changes[len(changes)-1].Content = changes[0].Content
			if _, err := cl.IntegrateFiles(context.Background(), client.IntegrateOptions{Repository: "app", Changes: changes}); err != nil {
				t.Fatal(err)
			}
			if len(f.uploaded) != c.files-1 || len(f.edits) != 1 || f.edits[0] != c.files {
				t.Errorf("uploaded %d distinct contents, integrated %v edits; want %d and [%d]", len(f.uploaded), f.edits, c.files-1, c.files)
			}
			if len(f.uploads) != c.uploads {
				t.Errorf("%d UploadBlobs calls, want %d", len(f.uploads), c.uploads)
			}
			blobs := 0
			for _, sizes := range f.uploads {
				total := 0
				for _, s := range sizes {
					total += s
				}
				if total > 16<<20 || len(sizes) > client.MaxBlobsPerUpload {
					t.Errorf("an UploadBlobs call carried %d blobs of %d bytes", len(sizes), total)
				}
				blobs += len(sizes)
			}
			if blobs != c.files-1 {
				t.Errorf("uploaded %d blobs, want %d", blobs, c.files-1)
			}
			for _, n := range f.asked {
				if n > client.MaxDigestsPerCall {
					t.Errorf("a FindMissingBlobs call asked about %d digests", n)
				}
			}
		})
	}
}

// TestIntegrateFilesRefusesMoreThanAChange ensures more changes than one Integrate may carry are
// refused before a call is made, naming the limit.
func TestIntegrateFilesRefusesMoreThanAChange(t *testing.T) {
	t.Parallel()
	f := &recordingRepos{uploaded: map[string]bool{}}
	cl := serve(t, f)
	changes := make([]client.FileChange, client.MaxEditsPerChange+1)
	for i := range changes {
		changes[i] = client.FileChange{Path: fmt.Sprintf("f%d", i), LocalPath: "/nonexistent"}
	}
	_, err := cl.IntegrateFiles(context.Background(), client.IntegrateOptions{Repository: "app", Changes: changes})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(client.MaxEditsPerChange)) {
		t.Errorf("IntegrateFiles of %d changes: %v, want a refusal naming the limit", len(changes), err)
	}
	if len(f.asked)+len(f.uploads)+len(f.edits) != 0 {
		t.Errorf("calls were made: %v %v %v", f.asked, f.uploads, f.edits)
	}
}

// TestIntegrateFilesAtTheServersLimit ensures a real server takes a change of
// client.MaxEditsPerChange files from IntegrateFiles and refuses one more edit in one Integrate:
// the SDK's limits are the server's.
func TestIntegrateFilesAtTheServersLimit(t *testing.T) {
	t.Parallel()
	srv := agtest.Start(t, agtest.Options{})
	ctx := context.Background()
	c := srv.Admin
	r, err := c.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := c.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{"d/"}, Holder: "h"})
	if err != nil {
		t.Fatal(err)
	}
	changes := make([]client.FileChange, client.MaxEditsPerChange)
	for i := range changes {
		changes[i] = client.FileChange{Path: fmt.Sprintf("d/f%d", i), Content: []byte(fmt.Sprint(i))}
	}
	change, err := c.IntegrateFiles(ctx, client.IntegrateOptions{
		Repository: "app", BaseRevision: r.GetRepository().GetMainline(), Holder: "h",
		FencingTokens: []uint64{lease.GetFencingToken()}, Message: "many", Changes: changes,
	})
	if err != nil {
		t.Fatal(err)
	}
	edits := make([]*agwpv1.Edit, client.MaxEditsPerChange+1)
	for i := range edits {
		edits[i] = &agwpv1.Edit{Path: fmt.Sprintf("d/g%d", i), Action: &agwpv1.Edit_Delete{Delete: true}}
	}
	_, err = c.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{
		Repository: "app", BaseRevision: change.GetIntegratedRevision(), Holder: "h",
		FencingTokens: []uint64{lease.GetFencingToken()}, Message: "one too many", Edits: edits,
	})
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("Integrate of %d edits: %v, want resource_exhausted", len(edits), err)
	}
	missing, err := c.Repos.FindMissingBlobs(ctx, &agwpv1.FindMissingBlobsRequest{Digests: make([]string, client.MaxDigestsPerCall+1)})
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("FindMissingBlobs of %d digests: %v %v, want invalid_argument", client.MaxDigestsPerCall+1, missing, err)
	}
}
