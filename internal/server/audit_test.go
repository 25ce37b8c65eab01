package server_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/mod/sumdb/tlog"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// auditLog waits until the log holds at least n sealed events and answers them all.
func auditLog(t *testing.T, srv *agtest.Server, n int) []*agwpv1.AuditEvent {
	t.Helper()
	return auditLogUntil(t, srv, func(events []*agwpv1.AuditEvent) bool { return len(events) >= n })
}

// auditLogUntil waits until done holds for the sealed events and answers them all.
func auditLogUntil(t *testing.T, srv *agtest.Server, done func([]*agwpv1.AuditEvent) bool) []*agwpv1.AuditEvent {
	t.Helper()
	var events []*agwpv1.AuditEvent
	waitFor(t, func() bool {
		events = events[:0]
		var after uint64
		for {
			res, err := srv.Admin.Audit.ListAuditEvents(context.Background(), &agwpv1.ListAuditEventsRequest{AfterSeq: after, PageSize: 1000})
			if err != nil {
				t.Fatalf("list audit events: %v", err)
			}
			if len(res.GetEvents()) == 0 {
				break
			}
			events = append(events, res.GetEvents()...)
			after = res.GetEvents()[len(res.GetEvents())-1].GetSeq()
		}
		return done(events)
	})
	return events
}

// TestAuditLogOverHTTP ensures, on both stores, that what principals do is in the audit log
// with who did it, sealed in a chain whose signed checkpoint verifies with the server's key,
// with inclusion and consistency proofs that check, and that only admins and readers read it.
func TestAuditLogOverHTTP(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			alice := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
			ci := srv.Principal(t, "ci", agwpv1.Role_ROLE_WORKER)
			auditor := srv.Principal(t, "auditor", agwpv1.Role_ROLE_READER)

			job := enqueue(t, alice, "build")
			claimed := claim(t, ci, "w1", time.Minute)
			if _, err := ci.Jobs.CompleteJob(ctx, &agwpv1.CompleteJobRequest{JobId: job.GetId(), Worker: "w1", FencingToken: uint64(claimed.GetAttempts())}); err != nil {
				t.Fatal(err)
			}
			// The completion is the last of these events; it may be sealed in a later batch.
			events := auditLogUntil(t, srv, func(es []*agwpv1.AuditEvent) bool {
				return slices.ContainsFunc(es, func(e *agwpv1.AuditEvent) bool { return e.GetAction() == "job.completed" })
			})
			find := func(action, subject string) *agwpv1.AuditEvent {
				t.Helper()
				i := slices.IndexFunc(events, func(e *agwpv1.AuditEvent) bool { return e.GetAction() == action && e.GetSubject() == subject })
				if i < 0 {
					t.Fatalf("no %s of %s in the log", action, subject)
				}
				return events[i]
			}
			if e := find("job.enqueued", "job/"+job.GetId()); e.GetPrincipal() != "alice" || e.GetDetails().GetFields()["kind"].GetStringValue() != "build" {
				t.Fatalf("job.enqueued = %v", e)
			}
			if e := find("job.claimed", "job/"+job.GetId()); e.GetPrincipal() != "ci" || e.GetHolder() != "ci|w1" || e.GetDetails().GetFields()["claim"].GetNumberValue() != 1 {
				t.Fatalf("job.claimed = %v", e)
			}
			find("job.completed", "job/"+job.GetId())
			if e := find("principal.created", "principal/alice"); e.GetPrincipal() != "admin" {
				t.Fatalf("principal.created by %q, want admin", e.GetPrincipal())
			}
			for i, e := range events {
				if e.GetSeq() != uint64(i+1) || len(e.GetHash()) != 32 {
					t.Fatalf("event %d: seq %d, hash of %d bytes", i, e.GetSeq(), len(e.GetHash()))
				}
			}

			// The checkpoint verifies with the server's verifier key, and not with another.
			cp, err := auditor.Audit.GetCheckpoint(ctx, &agwpv1.GetCheckpointRequest{})
			if err != nil {
				t.Fatalf("a reader gets the checkpoint: %v", err)
			}
			checkpoint, err := audit.OpenCheckpoint([]byte(cp.GetNote()), cp.GetVerifierKey())
			if err != nil || checkpoint.Size != cp.GetSize() || len(cp.GetSignature()) != 64 {
				t.Fatalf("open checkpoint: %+v, %v (signature of %d bytes)", checkpoint, err, len(cp.GetSignature()))
			}
			other, err := audit.LoadOrCreateKey(filepath.Join(t.TempDir(), "other.key"), "ag-test")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := audit.OpenCheckpoint([]byte(cp.GetNote()), other.VerifierKey()); err == nil {
				t.Fatal("the checkpoint verifies with another key")
			}

			// Inclusion of the claim, and consistency of an earlier tree with the newest.
			all := auditLog(t, srv, int(cp.GetSize()))[:cp.GetSize()]
			claimEvent := find("job.claimed", "job/"+job.GetId())
			proof, err := auditor.Audit.GetInclusionProof(ctx, &agwpv1.GetInclusionProofRequest{Seq: claimEvent.GetSeq()})
			if err != nil {
				t.Fatalf("inclusion proof: %v", err)
			}
			var root tlog.Hash
			copy(root[:], cp.GetRootHash())
			canonical, err := audit.Canonical(storeEvent(claimEvent))
			if err != nil {
				t.Fatal(err)
			}
			if err := audit.CheckInclusion(proof.GetHashes(), cp.GetSize(), root, claimEvent.GetSeq(), canonical); err != nil {
				t.Fatalf("inclusion proof of seq %d does not check: %v", claimEvent.GetSeq(), err)
			}
			oldSize := uint64(len(all) / 2)
			oldRoot, err := audit.RootAt(storeEvents(all), oldSize)
			if err != nil {
				t.Fatal(err)
			}
			cons, err := auditor.Audit.GetConsistencyProof(ctx, &agwpv1.GetConsistencyProofRequest{OldSize: oldSize, NewSize: cp.GetSize()})
			if err != nil {
				t.Fatalf("consistency proof: %v", err)
			}
			if err := audit.CheckConsistency(cons.GetHashes(), oldSize, oldRoot, cp.GetSize(), root); err != nil {
				t.Fatalf("consistency proof %d→%d does not check: %v", oldSize, cp.GetSize(), err)
			}

			_, err = alice.Audit.ListAuditEvents(ctx, &agwpv1.ListAuditEventsRequest{})
			wantCode(t, "an agent reads the audit log", err, connect.CodePermissionDenied)
			_, err = auditor.Audit.GetInclusionProof(ctx, &agwpv1.GetInclusionProofRequest{Seq: cp.GetSize() + 100})
			wantCode(t, "inclusion proof of an event beyond the checkpoint", err, connect.CodeInvalidArgument)
		})
	}
}

func storeEvent(e *agwpv1.AuditEvent) store.AuditEvent {
	out := store.AuditEvent{
		Seq: e.GetSeq(), Time: e.GetTime().AsTime(), Principal: e.GetPrincipal(), Holder: e.GetHolder(),
		Action: e.GetAction(), Subject: e.GetSubject(), PrevHash: e.GetPrevHash(), Hash: e.GetHash(),
	}
	if e.GetDetailsJson() != "" {
		out.Details = []byte(e.GetDetailsJson())
	}
	return out
}

func storeEvents(es []*agwpv1.AuditEvent) []store.AuditEvent {
	out := make([]store.AuditEvent, len(es))
	for i, e := range es {
		out[i] = storeEvent(e)
	}
	return out
}
