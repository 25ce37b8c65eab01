package server_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/agwp"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestPolicyCarriesItsClosedRunToTheWorker ensures what a policy asks of its runs (no network
// or egress, the evidence a pass needs, limits below the worker's) is answered as set, refused
// when out of range naming the field, and reaches the worker in the validate job's payload,
// which a worker holds its run to.
func TestPolicyCarriesItsClosedRunToTheWorker(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			createRepo(t, srv, "app")
			for _, bad := range []struct {
				limits *agwpv1.ValidationLimits
				field  string
			}{
				{&agwpv1.ValidationLimits{MemoryBytes: 1 << 20}, "validation.limits.memory_bytes: 1048576 is less than 16777216"},
				{&agwpv1.ValidationLimits{Pids: 2}, "validation.limits.pids: 2 is less than 8"},
				{&agwpv1.ValidationLimits{DiskBytes: 1}, "validation.limits.disk_bytes"},
				{&agwpv1.ValidationLimits{DiskBytes: 1 << 62}, "validation.limits: memory_bytes and disk_bytes are at most"},
			} {
				_, err := srv.Admin.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{Repository: "app",
					Validation: &agwpv1.Validation{Command: []string{"true"}, Limits: bad.limits}})
				wantCode(t, "limits "+bad.limits.String(), err, connect.CodeInvalidArgument)
				if !strings.Contains(err.Error(), bad.field) {
					t.Errorf("refusal %q does not say %q", err, bad.field)
				}
			}

			res, err := srv.Admin.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{Repository: "app", Validation: &agwpv1.Validation{
				Command: []string{"true"}, Network: "egress", Isolation: "sandbox",
				Limits: &agwpv1.ValidationLimits{MemoryBytes: 512 << 20, Pids: 256, DiskBytes: 1 << 30},
			}})
			if err != nil {
				t.Fatal(err)
			}
			v := res.GetRepository().GetValidation()
			if l := v.GetLimits(); v.GetNetwork() != "egress" || v.GetIsolation() != "sandbox" || l.GetMemoryBytes() != 512<<20 || l.GetPids() != 256 || l.GetDiskBytes() != 1<<30 {
				t.Fatalf("the policy answered %v", v)
			}

			alice := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
			integrateFile(t, alice, "app", "w1", "a.txt", "a\n")
			_, p := newValidator(t, srv, "ci").claim()
			want := agwp.PayloadLimits{MemoryBytes: 512 << 20, Pids: 256, DiskBytes: 1 << 30}
			if p.Network != "egress" || p.Isolation != "sandbox" || p.Limits == nil || *p.Limits != want {
				t.Errorf("the validate payload carries network %q, isolation %q, limits %+v; want egress, sandbox, %+v", p.Network, p.Isolation, p.Limits, want)
			}
		})
	}
}
