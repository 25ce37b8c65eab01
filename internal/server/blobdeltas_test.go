package server_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestStoredBlobsAreKeptAsDeltasInPlace: the versions of a file integrates stored whole (as
// every blob of a store before ADR-0037) are kept, once the migration walked the mainline, as
// deltas against the versions that replaced them, the newest whole; every version still reads
// back as it was, and git clones the history `fsck --strict` clean. A second walk finds nothing
// to do; the versions integrated since are offered at the next.
func TestStoredBlobsAreKeptAsDeltasInPlace(t *testing.T) {
	t.Parallel()
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			// The walk the server starts in the background would race the ones this test counts.
			srv := agtest.Start(t, agtest.Options{Backend: backend, BlobDeltasByHand: true})
			if _, err := srv.Admin.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "app"}); err != nil {
				t.Fatal(err)
			}
			agent := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
			lines := make([]string, 200)
			for i := range lines {
				lines[i] = fmt.Sprintf("line %d of a file that changes a line at a time", i)
			}
			var versions []string
			step := func(i int) {
				lines[i*10] = fmt.Sprintf("line %d, changed by version %d", i*10, i)
				v := strings.Join(lines, "\n") + "\n"
				versions = append(versions, v)
				integrateFile(t, agent, "app", "w1", "notes.txt", v)
			}
			for i := range 6 {
				step(i)
			}
			ids := func() []plumbing.Hash {
				out := make([]plumbing.Hash, len(versions))
				for i, v := range versions {
					out[i] = gitstore.BlobID([]byte(v))
				}
				return out
			}
			depths, err := srv.Store.BlobDepths(ctx, ids())
			if err != nil || len(depths) != len(versions) {
				t.Fatalf("BlobDepths before: %v, %v", depths, err)
			}
			for _, d := range depths {
				if d != 0 {
					t.Fatalf("an integrated version is kept as a delta before the migration: %v", depths)
				}
			}

			n, err := srv.KeepStoredBlobsAsDeltas(ctx)
			if err != nil || n != len(versions)-1 {
				t.Fatalf("the migration kept %d versions as deltas (%v), want the %d older ones", n, err, len(versions)-1)
			}
			depths, err = srv.Store.BlobDepths(ctx, ids())
			if err != nil {
				t.Fatal(err)
			}
			for i, id := range ids() {
				if want := len(versions) - 1 - i; depths[id] != want {
					t.Fatalf("version %d is %d deltas deep, want %d (the newest whole, each older against the next)", i, depths[id], want)
				}
				got, err := srv.Admin.Repos.GetBlob(ctx, &agwpv1.GetBlobRequest{Digest: repo.Digest([]byte(versions[i]))})
				if err != nil || string(got.GetContent()) != versions[i] {
					t.Fatalf("version %d reads back as %d bytes (%v), want its %d", i, len(got.GetContent()), err, len(versions[i]))
				}
			}
			if n, err := srv.KeepStoredBlobsAsDeltas(ctx); err != nil || n != 0 {
				t.Fatalf("a second walk kept %d (%v), want nothing", n, err)
			}
			// Two versions more: the next walk goes down to the head the last one started from,
			// and keeps the one between them as a delta. The head it started from stays whole:
			// the older versions are deltas against it, and a base never becomes a delta (its
			// deltas' chains would grow).
			step(6)
			step(7)
			if n, err := srv.KeepStoredBlobsAsDeltas(ctx); err != nil || n != 1 {
				t.Fatalf("the walk after two integrates kept %d (%v), want the version between them", n, err)
			}
			depths, err = srv.Store.BlobDepths(ctx, ids())
			if err != nil || depths[ids()[5]] != 0 || depths[ids()[6]] != 1 || depths[ids()[4]] != 1 {
				t.Fatalf("after the second walk the versions are %v deep (%v); want the 6th whole, the 7th against the 8th", depths, err)
			}

			dir := t.TempDir()
			clone := exec.Command("git", "-c", "http.extraHeader=Authorization: Bearer "+srv.AdminToken, "clone", "-q", srv.URL+"/git/app.git", dir)
			if out, err := clone.CombinedOutput(); err != nil {
				t.Fatalf("git clone: %v\n%s", err, out)
			}
			fsck := exec.Command("git", "fsck", "--strict")
			fsck.Dir = dir
			if out, err := fsck.CombinedOutput(); err != nil {
				t.Fatalf("git fsck: %v\n%s", err, out)
			}
			log := exec.Command("git", "log", "--format=%H", "--", "notes.txt")
			log.Dir = dir
			out, err := log.Output()
			if err != nil || len(strings.Fields(string(out))) != len(versions) {
				t.Fatalf("the clone's history of notes.txt: %q, %v; want %d versions", out, err, len(versions))
			}
			for i, c := range strings.Fields(string(out)) {
				show := exec.Command("git", "show", c+":notes.txt")
				show.Dir = dir
				got, err := show.Output()
				if want := versions[len(versions)-1-i]; err != nil || string(got) != want {
					t.Fatalf("notes.txt at %s differs in the clone (%v)", c, err)
				}
			}
			if got, err := os.ReadFile(filepath.Join(dir, "notes.txt")); err != nil || string(got) != versions[len(versions)-1] {
				t.Fatalf("the clone's notes.txt differs from the last version (%v)", err)
			}
		})
	}
}
