package server_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

func createRepo(t *testing.T, srv *agtest.Server, name string) *agwpv1.Repository {
	t.Helper()
	res, err := srv.Admin.Repos.CreateRepository(context.Background(), &agwpv1.CreateRepositoryRequest{Name: name})
	if err != nil {
		t.Fatalf("create repository: %v", err)
	}
	return res.GetRepository()
}

func acquire(t *testing.T, c *client.Client, repoName, holder string, ttl time.Duration, paths ...string) *agwpv1.Lease {
	t.Helper()
	l, err := c.AcquireLease(context.Background(), client.AcquireLeaseOptions{Repository: repoName, Paths: paths, Holder: holder, TTL: ttl})
	if err != nil {
		t.Fatalf("acquire %v as %s: %v", paths, holder, err)
	}
	return l
}

func write(path, content string) *agwpv1.Edit {
	return &agwpv1.Edit{Path: path, Action: &agwpv1.Edit_Content{Content: []byte(content)}}
}

func mainlineFile(t *testing.T, c *client.Client, repoName, path string) (string, bool) {
	t.Helper()
	tree, err := c.Repos.GetTree(context.Background(), &agwpv1.GetTreeRequest{Repository: repoName})
	if err != nil {
		t.Fatalf("get tree: %v", err)
	}
	for _, e := range tree.GetEntries() {
		if e.GetPath() == path {
			b, err := c.Blob(context.Background(), e.GetDigest())
			if err != nil {
				t.Fatalf("get blob of %s: %v", path, err)
			}
			return string(b), true
		}
	}
	return "", false
}

// TestLeasesFenceIntegrate ensures, over HTTP on both stores, that leases are exclusive across
// holders, that Integrate accepts only current tokens of the caller's leases, and that a token
// superseded after expiry is refused with a message naming the newer grant.
func TestLeasesFenceIntegrate(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
			srv := agtest.Start(t, agtest.Options{Backend: backend, Clock: clk})
			r := createRepo(t, srv, "app")
			alice := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
			bob := srv.Principal(t, "bob", agwpv1.Role_ROLE_AGENT)

			la := acquire(t, alice, "app", "w1", 10*time.Second, "src/a.go")
			if la.GetHolder() != "alice|w1" || la.GetFencingToken() == 0 || la.GetState() != agwpv1.LeaseState_LEASE_STATE_ACTIVE {
				t.Fatalf("lease = %v", la)
			}
			_, err := bob.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{"src/"}, Holder: "w2"})
			wantCode(t, "bob leases the directory of alice's file", err, connect.CodeAborted)
			if msg := err.Error(); !strings.Contains(msg, "alice|w1") || !strings.Contains(msg, "src/a.go") || !strings.Contains(msg, "2026-11-30T12:00:10Z") {
				t.Fatalf("conflict message %q does not name the path, holder and expiry", msg)
			}

			res, err := alice.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{
				Repository: "app", BaseRevision: r.GetMainline(), Holder: "w1", Message: "first",
				FencingTokens: []uint64{la.GetFencingToken()}, Edits: []*agwpv1.Edit{write("src/a.go", "package a\n")},
			})
			if err != nil {
				t.Fatalf("integrate: %v", err)
			}
			ch := res.GetChange()
			if ch.GetState() != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED || ch.GetAuthor() != "alice|w1" || ch.GetIntegratedRevision() == "" {
				t.Fatalf("change = %v", ch)
			}
			if got, _ := mainlineFile(t, bob, "app", "src/a.go"); got != "package a\n" {
				t.Fatalf("mainline src/a.go = %q", got)
			}

			// Bob cannot integrate with alice's token: it is not his lease.
			_, err = bob.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{
				Repository: "app", BaseRevision: ch.GetIntegratedRevision(), Holder: "w2",
				FencingTokens: []uint64{la.GetFencingToken()}, Edits: []*agwpv1.Edit{write("src/a.go", "bob was here\n")},
			})
			wantCode(t, "integrate with another holder's token", err, connect.CodeFailedPrecondition)

			// Alice's lease expires; bob is granted the path; alice's late integrate is stale.
			clk.Advance(11 * time.Second)
			lb := acquire(t, bob, "app", "w2", time.Minute, "src/")
			if lb.GetFencingToken() <= la.GetFencingToken() {
				t.Fatalf("bob's token %d is not larger than alice's %d", lb.GetFencingToken(), la.GetFencingToken())
			}
			_, err = alice.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{
				Repository: "app", BaseRevision: ch.GetIntegratedRevision(), Holder: "w1",
				FencingTokens: []uint64{la.GetFencingToken()}, Edits: []*agwpv1.Edit{write("src/a.go", "late\n")},
			})
			wantCode(t, "integrate with a superseded token", err, connect.CodeFailedPrecondition)
			if msg := err.Error(); !strings.Contains(msg, "src/a.go") || !strings.Contains(msg, "bob|w2") {
				t.Fatalf("stale-token message %q does not name the path and the newer holder", msg)
			}
			if got, _ := mainlineFile(t, bob, "app", "src/a.go"); got != "package a\n" {
				t.Fatalf("a refused integrate changed the mainline: %q", got)
			}

			// Renewing or releasing a lease superseded after expiry is refused.
			_, err = alice.Leases.RenewLease(ctx, &agwpv1.RenewLeaseRequest{LeaseId: la.GetId()})
			wantCode(t, "renew a superseded lease", err, connect.CodeFailedPrecondition)
			_, err = bob.Leases.ReleaseLease(ctx, &agwpv1.ReleaseLeaseRequest{LeaseId: la.GetId()})
			wantCode(t, "release another principal's lease", err, connect.CodeFailedPrecondition)

			// A conflict: bob edits from the first (empty) revision a path that moved on.
			_, err = bob.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{
				Repository: "app", BaseRevision: r.GetMainline(), Holder: "w2",
				FencingTokens: []uint64{lb.GetFencingToken()}, Edits: []*agwpv1.Edit{write("src/a.go", "from an old base\n")},
			})
			wantCode(t, "integrate over a path that moved on", err, connect.CodeAborted)

			// From an old base, a path nobody touched is rebased onto the mainline.
			res, err = bob.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{
				Repository: "app", BaseRevision: r.GetMainline(), Holder: "w2",
				FencingTokens: []uint64{lb.GetFencingToken()}, Edits: []*agwpv1.Edit{write("src/b.go", "package b\n")},
			})
			if err != nil {
				t.Fatalf("rebased integrate: %v", err)
			}
			a, _ := mainlineFile(t, alice, "app", "src/a.go")
			b, _ := mainlineFile(t, alice, "app", "src/b.go")
			if a != "package a\n" || b != "package b\n" {
				t.Fatalf("after the rebased integrate: a = %q, b = %q", a, b)
			}

			// The change can be followed as a stream until it is final.
			stream, err := alice.Repos.WatchChange(ctx, &agwpv1.WatchChangeRequest{ChangeId: res.GetChange().GetId()})
			if err != nil {
				t.Fatal(err)
			}
			var states []agwpv1.ChangeState
			for stream.Receive() {
				states = append(states, stream.Msg().GetChange().GetState())
			}
			if err := stream.Err(); err != nil && err != io.EOF {
				t.Fatalf("watch: %v", err)
			}
			if len(states) != 1 || states[0] != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED {
				t.Fatalf("watched states %v, want [integrated]", states)
			}

			list, err := bob.Leases.ListLeases(ctx, &agwpv1.ListLeasesRequest{Repository: "app", IncludeEnded: true})
			if err != nil || len(list.GetLeases()) != 2 || list.GetLeases()[1].GetState() != agwpv1.LeaseState_LEASE_STATE_EXPIRED {
				t.Fatalf("list leases = %v, %v; want bob's active and alice's expired", list.GetLeases(), err)
			}
		})
	}
}

// TestAcquireLeaseWaitsForRelease ensures a waiting acquirer gets the lease once the holder
// releases it.
func TestAcquireLeaseWaitsForRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := agtest.Start(t, agtest.Options{PollInterval: time.Hour})
	createRepo(t, srv, "app")
	alice := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
	bob := srv.Principal(t, "bob", agwpv1.Role_ROLE_AGENT)
	la := acquire(t, alice, "app", "w1", time.Minute, "docs/")
	got := make(chan error, 1)
	go func() {
		_, err := bob.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{"docs/x.md"}, Holder: "w2", Wait: 30 * time.Second})
		got <- err
	}()
	waitFor(t, func() bool { return srv.WaitingRequests() > 0 })
	if _, err := alice.Leases.ReleaseLease(ctx, &agwpv1.ReleaseLeaseRequest{LeaseId: la.GetId(), FencingToken: la.GetFencingToken()}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiting acquire: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting acquirer was not woken by the release")
	}
}

// TestIntegrateRefusesBadInput ensures malformed integrations are refused naming the field.
func TestIntegrateRefusesBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := agtest.Start(t, agtest.Options{})
	r := createRepo(t, srv, "app")
	alice := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
	reader := srv.Principal(t, "eve", agwpv1.Role_ROLE_READER)
	l := acquire(t, alice, "app", "w1", time.Minute, "src/")
	base := func(edits ...*agwpv1.Edit) *agwpv1.IntegrateRequest {
		return &agwpv1.IntegrateRequest{Repository: "app", BaseRevision: r.GetMainline(), Holder: "w1", FencingTokens: []uint64{l.GetFencingToken()}, Edits: edits}
	}
	for _, p := range []string{"/abs", "src/../etc/passwd", "src//x", "src/./x", "src/x/", "a\x00b"} {
		_, err := alice.Repos.Integrate(ctx, base(write(p, "x")))
		wantCode(t, "integrate path "+p, err, connect.CodeInvalidArgument)
		if !strings.Contains(err.Error(), "edits[0].path") {
			t.Errorf("refusal of %q does not name the field: %v", p, err)
		}
	}
	_, err := alice.Repos.Integrate(ctx, base(write("src/a", "1"), write("src/a", "2")))
	wantCode(t, "the same path twice", err, connect.CodeInvalidArgument)
	_, err = alice.Repos.Integrate(ctx, base(&agwpv1.Edit{Path: "src/a", Action: &agwpv1.Edit_BlobDigest{BlobDigest: "sha256:" + strings.Repeat("0", 64)}}))
	wantCode(t, "a blob never uploaded", err, connect.CodeFailedPrecondition)
	_, err = alice.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{Repository: "app", BaseRevision: "rev_nope", Holder: "w1", FencingTokens: []uint64{l.GetFencingToken()}, Edits: []*agwpv1.Edit{write("src/a", "x")}})
	wantCode(t, "an unknown base revision", err, connect.CodeNotFound)
	_, err = alice.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{Repository: "nope", BaseRevision: r.GetMainline(), Holder: "w1", FencingTokens: []uint64{1}, Edits: []*agwpv1.Edit{write("src/a", "x")}})
	wantCode(t, "an unknown repository", err, connect.CodeNotFound)
	_, err = alice.Repos.Integrate(ctx, base(write("docs/a", "x")))
	wantCode(t, "a path no lease covers", err, connect.CodeFailedPrecondition)
	_, err = reader.Repos.Integrate(ctx, base(write("src/a", "x")))
	wantCode(t, "a reader integrates", err, connect.CodePermissionDenied)
	_, err = alice.Leases.AcquireLease(ctx, &agwpv1.AcquireLeaseRequest{Repository: "app", Paths: []string{"../x"}, Holder: "w1"})
	wantCode(t, "lease an unclean path", err, connect.CodeInvalidArgument)
	_, err = alice.Leases.AcquireLease(ctx, &agwpv1.AcquireLeaseRequest{Repository: "app", Paths: []string{"x"}, Holder: "w1", Ttl: durationpb.New(48 * time.Hour)})
	wantCode(t, "lease for two days", err, connect.CodeInvalidArgument)
	_, err = alice.Leases.AcquireLease(ctx, &agwpv1.AcquireLeaseRequest{Repository: "nope", Paths: []string{"x"}, Holder: "w1"})
	wantCode(t, "lease in an unknown repository", err, connect.CodeNotFound)

	if got, ok := mainlineFile(t, alice, "app", "src/a"); ok {
		t.Fatalf("a refused integrate wrote src/a = %q", got)
	}
}
