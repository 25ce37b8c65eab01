package server_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// deflated answers b as a pack entry holds it.
func deflated(t *testing.T, b []byte) []byte {
	t.Helper()
	d, err := gitstore.Deflate(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestUploadGitObjectsMakesEachDeltaWholeToCheckIt: blobs sent as a pack holds them (deflated,
// and as git's deltas against each other) are stored under the ids of what they make, read
// back whole, and kept as deltas no deeper than a pack's. What an importer could send to make
// the server hold a wrong object, or spend unbounded memory, is refused: a delta claiming a
// huge target, a zlib stream that inflates past the bound or has bytes after it, a delta
// against a base it does not fit or that the server lacks, a delta across types, a blob made
// too large for one request.
func TestUploadGitObjectsMakesEachDeltaWholeToCheckIt(t *testing.T) {
	t.Parallel()
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			upload := func(objs ...*agwpv1.GitObject) ([]string, error) {
				res, err := srv.Admin.Repos.UploadGitObjects(ctx, &agwpv1.UploadGitObjectsRequest{Objects: objs})
				return res.GetIds(), err
			}

			// A chain of versions, each a line longer, sent as one whole blob and its deltas,
			// deeper than a pack's chains may be.
			var versions [][]byte
			text := strings.Repeat("every version has this line\n", 100)
			var objs []*agwpv1.GitObject
			for i := range store.MaxBlobDeltaDepth + 5 {
				text += fmt.Sprintf("version %d\n", i)
				v := []byte(text)
				o := &agwpv1.GitObject{Type: "blob", Data: deflated(t, v), Deflated: true}
				if i > 0 {
					o = &agwpv1.GitObject{Type: "blob", Data: deflated(t, packfile.DiffDelta(versions[i-1], v)), Deflated: true,
						DeltaBase: gitstore.BlobID(versions[i-1]).String()}
				}
				versions = append(versions, v)
				objs = append(objs, o)
			}
			// The first half in one call, the rest in another, against what the first stored.
			half := len(objs) / 2
			ids, err := upload(objs[:half]...)
			if err != nil {
				t.Fatalf("upload the first deltas: %v", err)
			}
			more, err := upload(objs[half:]...)
			if err != nil {
				t.Fatalf("upload the deltas against stored blobs: %v", err)
			}
			ids = append(ids, more...)
			gitIDs := make([]plumbing.Hash, len(versions))
			for i, v := range versions {
				gitIDs[i] = gitstore.BlobID(v)
				if ids[i] != gitIDs[i].String() {
					t.Fatalf("version %d was stored as %s, want %s", i, ids[i], gitIDs[i])
				}
				got, err := srv.Admin.Repos.GetBlob(ctx, &agwpv1.GetBlobRequest{Digest: repo.Digest(v)})
				if err != nil || !bytes.Equal(got.GetContent(), v) {
					t.Fatalf("GetBlob of version %d: %d bytes, %v; want its %d", i, len(got.GetContent()), err, len(v))
				}
			}
			depths, err := srv.Store.BlobDepths(ctx, gitIDs)
			if err != nil {
				t.Fatal(err)
			}
			for i, id := range gitIDs {
				want := i % (store.MaxBlobDeltaDepth + 1) // the 51st version starts a chain anew
				if depths[id] != want {
					t.Fatalf("version %d is kept %d deltas deep, want %d", i, depths[id], want)
				}
			}

			base := versions[0]
			baseID := gitIDs[0].String()
			target := append(bytes.Clone(base), "mine\n"...)
			delta := packfile.DiffDelta(base, target)
			for name, tc := range map[string]struct {
				obj  *agwpv1.GitObject
				code connect.Code
			}{
				"a zlib stream of 65 MiB": {&agwpv1.GitObject{Type: "blob", Deflated: true,
					Data: deflated(t, make([]byte, 65<<20))}, connect.CodeInvalidArgument},
				"a zlib stream with a byte after it": {&agwpv1.GitObject{Type: "blob", Deflated: true,
					Data: append(deflated(t, target), 0)}, connect.CodeInvalidArgument},
				"a stream that is no zlib": {&agwpv1.GitObject{Type: "blob", Deflated: true, Data: target}, connect.CodeInvalidArgument},
				"a delta against a base the server lacks": {&agwpv1.GitObject{Type: "blob", Data: delta,
					DeltaBase: strings.Repeat("ab", 20)}, connect.CodeFailedPrecondition},
				"a delta against a base of another size": {&agwpv1.GitObject{Type: "blob", Data: delta,
					DeltaBase: gitIDs[3].String()}, connect.CodeInvalidArgument},
				"a tree's delta against a blob": {&agwpv1.GitObject{Type: "tree", Data: delta, DeltaBase: baseID}, connect.CodeInvalidArgument},
				"a delta_base that is no id":    {&agwpv1.GitObject{Type: "blob", Data: delta, DeltaBase: "HEAD"}, connect.CodeInvalidArgument},
				"a blob of 4 MiB made of a delta": {&agwpv1.GitObject{Type: "blob", DeltaBase: baseID,
					Data: packfile.DiffDelta(base, append(bytes.Clone(base), make([]byte, 4<<20)...))}, connect.CodeInvalidArgument},
			} {
				_, err := upload(tc.obj)
				wantCode(t, name, err, tc.code)
			}
			// A delta of a few KB that copies its base over and over makes 65 MiB: refused from
			// its header, before the server makes any of it.
			bomb := append(leb(uint64(len(base))), leb(65<<20)...)
			for made := 0; made < 65<<20; made += len(base) {
				n := min(len(base), 65<<20-made)
				bomb = append(bomb, 0x80|0x10|0x20, byte(n), byte(n>>8)) // copy n bytes from 0
			}
			_, err = upload(&agwpv1.GitObject{Type: "blob", DeltaBase: baseID, Data: bomb})
			wantCode(t, "a delta that makes 65 MiB", err, connect.CodeInvalidArgument)
			if !strings.Contains(err.Error(), "makes 68157440 bytes") {
				t.Fatalf("a delta that makes 65 MiB was refused as %q, not from its header", err)
			}
			// None of them stored anything: the one valid content among them is not held.
			missing, err := srv.Admin.Repos.FindMissingGitObjects(ctx, &agwpv1.FindMissingGitObjectsRequest{Ids: []string{gitstore.BlobID(target).String()}})
			if err != nil || len(missing.GetMissingIds()) != 1 {
				t.Fatalf("after refusals, the target is held: %v, %v", missing.GetMissingIds(), err)
			}
			// Deltas that make their own base, against a commit too large for the objects kept
			// at hand (20 MiB): each is made again from the store, never from itself in a loop.
			emptyTree := &agwpv1.GitObject{Type: "tree", Data: []byte{}}
			big := []byte("tree " + plumbing.NewHash("4b825dc642cb6eb9a060e54bf8d69288fbee4904").String() +
				"\nauthor a <a@example.com> 0 +0000\ncommitter a <a@example.com> 0 +0000\n\n" + strings.Repeat("a long message\n", 20<<20/15))
			bigID := plumbing.ComputeHash(plumbing.CommitObject, big)
			if _, err := upload(emptyTree, &agwpv1.GitObject{Type: "commit", Data: big}); err != nil {
				t.Fatalf("upload a 20 MiB commit: %v", err)
			}
			itself := &agwpv1.GitObject{Type: "commit", Data: packfile.DiffDelta(big, big), DeltaBase: bigID.String()}
			ids, err = upload(itself, itself, itself)
			if err != nil || len(ids) != 3 || ids[2] != bigID.String() {
				t.Fatalf("deltas that make their own base: %v, %v", ids, err)
			}

			// Two deltas of each other: x against a stored blob y, then y against x. Once 78 MiB
			// of other blobs have pushed both out of the objects kept at hand, a delta against y
			// makes y again from x, x from y, and y from the store: never a loop.
			y := append(bytes.Clone(base), "y\n"...)
			if _, err := upload(&agwpv1.GitObject{Type: "blob", Data: y}); err != nil {
				t.Fatal(err)
			}
			x := append(bytes.Clone(y), "x\n"...)
			yID := gitstore.BlobID(y).String()
			xID := gitstore.BlobID(x).String()
			objs = []*agwpv1.GitObject{
				{Type: "blob", Data: packfile.DiffDelta(y, x), DeltaBase: yID},
				{Type: "blob", Data: packfile.DiffDelta(x, y), DeltaBase: xID},
			}
			for i := range 20 {
				filler := fmt.Appendf(nil, "%d\n%s", i, strings.Repeat("filler\n", 3900<<10/7))
				objs = append(objs, &agwpv1.GitObject{Type: "blob", Data: deflated(t, filler), Deflated: true})
			}
			z := append(bytes.Clone(y), "z\n"...)
			objs = append(objs, &agwpv1.GitObject{Type: "blob", Data: packfile.DiffDelta(y, z), DeltaBase: yID})
			ids, err = upload(objs...)
			if err != nil || len(ids) != len(objs) || ids[len(ids)-1] != gitstore.BlobID(z).String() {
				t.Fatalf("deltas of each other: %v, %v", ids, err)
			}

			// The same delta, sent right, is stored as what it makes.
			ids, err = upload(&agwpv1.GitObject{Type: "blob", Data: delta, DeltaBase: baseID})
			if err != nil || len(ids) != 1 || ids[0] != gitstore.BlobID(target).String() {
				t.Fatalf("a plain delta: %v, %v", ids, err)
			}
		})
	}
}

// leb answers n as git's deltas write a size.
func leb(n uint64) []byte {
	var out []byte
	for {
		b := byte(n & 0x7f)
		n >>= 7
		if n == 0 {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}
