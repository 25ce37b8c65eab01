package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// Test_two_agents_cannot_both_lease_or_land_one_name_in_two_spellings performs the attack of
// two agents on one file of a macOS or Windows checkout, on both stores: alice leases and
// lands "café.txt" in NFC; bob's lease on the NFD spelling and on the upper-case one conflicts
// with hers, and once he holds a lease of his own on the NFD spelling (after hers ended) his
// change adding it beside hers is refused naming both. A name in NFD, on its own, round-trips
// byte for byte through Integrate and GetTree.
func Test_two_agents_cannot_both_lease_or_land_one_name_in_two_spellings(t *testing.T) {
	const (
		nfc   = "caf\u00e9.txt"
		nfd   = "cafe\u0301.txt"
		upper = "CAF\u00c9.TXT"
	)
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			if _, err := srv.Admin.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "app"}); err != nil {
				t.Fatal(err)
			}
			alice := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
			bob := srv.Principal(t, "bob", agwpv1.Role_ROLE_AGENT)

			held := acquire(t, alice, "app", "w1", time.Minute, nfc, "Docs/")
			if got := held.GetPaths(); len(got) != 2 || got[0] != "Docs/" || got[1] != nfc {
				t.Fatalf("alice's lease answers the paths %q, want them as written", got)
			}
			for _, p := range []string{nfd, upper, "docs/a.txt", "DOCS/"} {
				_, err := bob.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{p}, Holder: "w1", TTL: time.Minute})
				wantCode(t, "bob leases "+p+" while alice holds "+nfc+" and Docs/", err, connect.CodeAborted)
				if !strings.Contains(err.Error(), "alice|w1") {
					t.Fatalf("bob's refusal on %q does not name alice's lease: %v", p, err)
				}
			}
			// alice lands the NFC spelling with her token.
			base := mainline(t, alice, "app")
			if _, err := alice.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{Repository: "app", BaseRevision: base, Holder: "w1",
				FencingTokens: []uint64{held.GetFencingToken()}, Edits: []*agwpv1.Edit{write(nfc, "alice\n")}}); err != nil {
				t.Fatalf("alice integrates %s: %v", nfc, err)
			}
			if _, err := alice.Leases.ReleaseLease(ctx, &agwpv1.ReleaseLeaseRequest{LeaseId: held.GetId(), FencingToken: held.GetFencingToken()}); err != nil {
				t.Fatalf("alice releases: %v", err)
			}

			// bob now holds the NFD spelling, but the tree holds the NFC one: a second spelling.
			l := acquire(t, bob, "app", "w1", time.Minute, nfd)
			_, err := bob.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{Repository: "app", BaseRevision: mainline(t, bob, "app"), Holder: "w1",
				FencingTokens: []uint64{l.GetFencingToken()}, Edits: []*agwpv1.Edit{write(nfd, "bob\n")}})
			wantCode(t, "bob integrates "+nfd+" beside "+nfc, err, connect.CodeInvalidArgument)
			if msg := err.Error(); !strings.Contains(msg, nfd) || !strings.Contains(msg, nfc) {
				t.Fatalf("the refusal of bob's second spelling does not name both spellings: %v", err)
			}
			// bob's token on the NFD spelling covers the NFC file: an edit of the existing name lands.
			if _, err := bob.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{Repository: "app", BaseRevision: mainline(t, bob, "app"), Holder: "w1",
				FencingTokens: []uint64{l.GetFencingToken()}, Edits: []*agwpv1.Edit{write(nfc, "bob\n")}}); err != nil {
				t.Fatalf("bob integrates %s with his lease on %s: %v", nfc, nfd, err)
			}
			if got, ok := mainlineFile(t, bob, "app", nfc); !ok || got != "bob\n" {
				t.Fatalf("the mainline's %s holds %q (%v), want bob's content", nfc, got, ok)
			}

			// An NFD name on its own, in an NFD directory, round-trips byte for byte.
			if _, err := srv.Admin.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "nfd"}); err != nil {
				t.Fatal(err)
			}
			path := "résumé/" + nfd
			integrateFile(t, alice, "nfd", "w2", path, "nfd\n")
			tree, err := alice.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: "nfd"})
			if err != nil {
				t.Fatalf("get tree: %v", err)
			}
			if es := tree.GetEntries(); len(es) != 1 || es[0].GetPath() != path {
				t.Fatalf("GetTree answers %v, want the one path %q byte for byte", es, path)
			}
		})
	}
}
