package client_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestBlobsFetchesEachBlobOnce fetches more blobs than one call carries, with repeats, through
// parallel GetBlobs calls, and checks that each arrives once with its content; a digest the
// server lacks fails the fetch, naming it.
func TestBlobsFetchesEachBlobOnce(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			n := 2*client.BlobsPerCall + 7
			var blobs [][]byte
			for i := range n {
				blobs = append(blobs, []byte(fmt.Sprintf("blob %d\n", i)))
			}
			up, err := srv.Admin.Repos.UploadBlobs(ctx, &agwpv1.UploadBlobsRequest{Blobs: blobs})
			if err != nil {
				t.Fatal(err)
			}
			digests := append(up.GetDigests(), up.GetDigests()[:10]...) // repeats are fetched once
			var mu sync.Mutex
			got := map[string]string{}
			err = srv.Admin.Blobs(ctx, digests, 3, func(d string, content []byte) error {
				mu.Lock()
				defer mu.Unlock()
				if _, dup := got[d]; dup {
					return fmt.Errorf("blob %s delivered twice", d)
				}
				got[d] = string(content)
				return nil
			})
			if err != nil || len(got) != n {
				t.Fatalf("Blobs = %d blobs, %v; want %d", len(got), err, n)
			}
			for i, d := range up.GetDigests() {
				if got[d] != string(blobs[i]) {
					t.Fatalf("blob %s = %q, want %q", d, got[d], blobs[i])
				}
			}

			unknown := "sha256:" + strings.Repeat("0", 64)
			err = srv.Admin.Blobs(ctx, []string{up.GetDigests()[0], unknown}, 1, func(string, []byte) error { return nil })
			if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), unknown) {
				t.Fatalf("Blobs of an unknown digest: %v, want not_found naming it", err)
			}
		})
	}
}
