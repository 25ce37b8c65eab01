package server_test

import (
	"context"
	"fmt"
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

// TestAnAgentGetsItsShareOfTheCodeBase is the attack of issue "agents coordinate work": one
// agent leasing path after path until it holds the code base, and renewing a whole directory
// for ever. Past the server's cap its grants are refused (resource_exhausted, saying what it
// holds and what to do) while another agent still gets its own; past the maximum age its
// renewal is refused, and an agent waiting for the path is told who holds it since when.
func TestAnAgentGetsItsShareOfTheCodeBase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
	srv := agtest.Start(t, agtest.Options{Clock: clk, MaxLeasedPaths: 20, MaxLeaseAge: time.Hour})
	createRepo(t, srv, "app")
	mallory := srv.Principal(t, "mallory", agwpv1.Role_ROLE_AGENT)
	alice := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)

	var held []*agwpv1.Lease
	for i := 0; i < 4; i++ {
		paths := make([]string, 5)
		for j := range paths {
			paths[j] = fmt.Sprintf("pkg%d/file%d.go", i, j)
		}
		held = append(held, acquire(t, mallory, "app", "m1", time.Hour, paths...))
	}
	_, err := mallory.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{"pkg9/one.go"}, Holder: "m2", TTL: time.Hour})
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "mallory holds 20 leased paths of app, and 1 more would pass the 20") {
		t.Fatalf("the 21st path, under another label: %v; want resource_exhausted saying what mallory holds", err)
	}
	acquire(t, alice, "app", "a1", time.Hour, "docs/")

	clk.Advance(59 * time.Minute)
	renewed, err := mallory.Leases.RenewLease(ctx, &agwpv1.RenewLeaseRequest{LeaseId: held[0].GetId(), FencingToken: held[0].GetFencingToken(),
		Ttl: durationpb.New(time.Hour)})
	if err != nil || !renewed.GetLease().GetExpiresAt().AsTime().Equal(held[0].GetAcquiredAt().AsTime().Add(time.Hour)) {
		t.Fatalf("a renewal near the maximum age = %v, %v; want it to end an hour after its grant", renewed.GetLease().GetExpiresAt(), err)
	}
	_, err = alice.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{"pkg0/file0.go"}, Holder: "a1", TTL: time.Hour})
	since := held[0].GetAcquiredAt().AsTime().UTC().Format(time.RFC3339)
	if connect.CodeOf(err) != connect.CodeAborted || !strings.Contains(err.Error(), "leased to mallory|m1") || !strings.Contains(err.Error(), "since "+since) {
		t.Fatalf("alice asking for a file mallory holds: %v; want aborted naming mallory and since when (%s)", err, since)
	}
	clk.Advance(2 * time.Minute)
	_, err = mallory.Leases.RenewLease(ctx, &agwpv1.RenewLeaseRequest{LeaseId: held[0].GetId(), FencingToken: held[0].GetFencingToken(),
		Ttl: durationpb.New(time.Hour)})
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "renewed for at most 1h0m0s") {
		t.Fatalf("a renewal past the maximum age: %v; want failed_precondition naming the age", err)
	}
	if l := acquire(t, alice, "app", "a1", time.Hour, "pkg0/file0.go"); l.GetHolder() != "alice|a1" {
		t.Fatalf("alice's grant once mallory's lease reached its age: %v", l)
	}
}
