package client_test

import (
	"context"
	"testing"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestIntegrateFilesWithModes ensures IntegrateFiles sends a FileChange's mode: an executable
// and a symbolic link (its target as content) land with theirs, and a later write that names no
// mode keeps the path's.
func TestIntegrateFilesWithModes(t *testing.T) {
	t.Parallel()
	srv := agtest.Start(t, agtest.Options{})
	ctx := context.Background()
	c := srv.Admin
	r, err := c.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := c.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{"run.sh", "current"}, Holder: "h"})
	if err != nil {
		t.Fatal(err)
	}
	integrate := func(base string, changes ...client.FileChange) string {
		t.Helper()
		ch, err := c.IntegrateFiles(ctx, client.IntegrateOptions{Repository: "app", BaseRevision: base, Holder: "h",
			FencingTokens: []uint64{lease.GetFencingToken()}, Message: "modes", Changes: changes})
		if err != nil {
			t.Fatal(err)
		}
		return ch.GetIntegratedRevision()
	}
	modes := func(rev string) map[string]string {
		t.Helper()
		tree, err := c.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: "app", Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, e := range tree.GetEntries() {
			content, err := c.Blob(ctx, e.GetDigest())
			if err != nil {
				t.Fatal(err)
			}
			out[e.GetPath()] = e.GetMode() + " " + string(content)
		}
		return out
	}
	rev := integrate(r.GetRepository().GetMainline(),
		client.FileChange{Path: "run.sh", Content: []byte("#!/bin/sh\n"), Mode: "100755"},
		client.FileChange{Path: "current", Content: []byte("run.sh"), Mode: "120000"})
	if got := modes(rev); got["run.sh"] != "100755 #!/bin/sh\n" || got["current"] != "120000 run.sh" {
		t.Errorf("after IntegrateFiles with modes: %q", got)
	}
	rev = integrate(rev, client.FileChange{Path: "run.sh", Content: []byte("#!/bin/sh\necho\n")})
	if got := modes(rev); got["run.sh"] != "100755 #!/bin/sh\necho\n" {
		t.Errorf("after a write naming no mode: %q, want run.sh still 100755", got)
	}
}
