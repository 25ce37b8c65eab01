package server

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/store"
)

const (
	// sealGap is the least time between seals. Sealing after every commit costs the writers
	// more than the seal itself (on SQLite the seal holds the one writer); gathering events for
	// a fifth of a second makes each seal a batch and each checkpoint cover many events.
	sealGap = 200 * time.Millisecond
	// sealInterval bounds how late an event is sealed when no local write woke the sealer
	// (events written on another replica, a seal that failed).
	sealInterval = time.Second
	maxAuditWait = 60 * time.Second
)

// sealLoop seals the audit log until ctx ends: at once after local writes, and every
// sealInterval for what other replicas wrote. Any replica may seal; the store serializes them.
func (s *Server) sealLoop(ctx context.Context) {
	if s.auditSigner == nil {
		s.log.Warn("no audit key: audit events are recorded but not sealed")
		return
	}
	if err := lowerSealerPriority(); err != nil {
		s.log.Warn("the sealer runs at the writers' priority", "err", err)
	}
	seal := s.auditSigner.SealFunc(time.Now)
	// A seal takes at most the store's batch; a backlog is sealed in several, back to back.
	batch := s.store.AuditSealBatch()
	t := time.NewTicker(sealInterval)
	defer t.Stop()
	for {
		wake := s.store.AuditSignal()
		for {
			n, err := s.store.SealAudit(ctx, store.SealAuditParams{Limit: batch, Seal: seal})
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("seal the audit log", "err", err)
				}
				break
			}
			if n > 0 {
				s.metrics.sealed.Add(float64(n))
				s.sealed.Fire()
			}
			if n < batch {
				break
			}
		}
		gap := time.NewTimer(sealGap)
		select {
		case <-ctx.Done():
			gap.Stop()
			return
		case <-gap.C:
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-t.C:
		}
	}
}

// auditService serves AuditService.
type auditService struct {
	s *Server
}

func auditEventProto(e store.AuditEvent) (*agwpv1.AuditEvent, error) {
	out := &agwpv1.AuditEvent{
		Seq: e.Seq, Time: timestamp(e.Time), Principal: e.Principal, Holder: e.Holder, Action: e.Action,
		Subject: e.Subject, PrevHash: e.PrevHash, Hash: e.Hash,
	}
	if len(e.Details) > 0 {
		d := &structpb.Struct{}
		if err := d.UnmarshalJSON(e.Details); err != nil {
			return nil, fmt.Errorf("audit event %d: details: %w", e.Seq, err)
		}
		out.Details = d
		out.DetailsJson = string(e.Details)
	}
	return out, nil
}

func (h auditService) ListAuditEvents(ctx context.Context, req *agwpv1.ListAuditEventsRequest) (*agwpv1.ListAuditEventsResponse, error) {
	limit, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	wait, err := duration("wait", req.GetWait(), 0, 0, maxAuditWait)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		sealed := h.s.sealed.Wait()
		events, err := h.s.store.ListAuditEvents(ctx, store.ListAuditEventsParams{AfterSeq: req.GetAfterSeq(), Limit: limit})
		if err != nil {
			return nil, storeError(err, connect.CodeInternal)
		}
		remaining := time.Until(deadline)
		if len(events) > 0 || remaining <= 0 {
			out := &agwpv1.ListAuditEventsResponse{Events: make([]*agwpv1.AuditEvent, 0, len(events))}
			for _, e := range events {
				pe, err := auditEventProto(e)
				if err != nil {
					return nil, connect.NewError(connect.CodeInternal, err)
				}
				out.Events = append(out.Events, pe)
			}
			return out, nil
		}
		if !h.s.await(ctx, sealed, min(remaining, h.s.pollInterval)) {
			return &agwpv1.ListAuditEventsResponse{}, nil
		}
	}
}

func (h auditService) GetCheckpoint(ctx context.Context, _ *agwpv1.GetCheckpointRequest) (*agwpv1.GetCheckpointResponse, error) {
	cp, err := h.s.store.LatestAuditCheckpoint(ctx)
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out := &agwpv1.GetCheckpointResponse{Size: cp.Size, HeadHash: cp.HeadHash, RootHash: cp.RootHash, Note: string(cp.Note)}
	if h.s.auditSigner != nil {
		out.Origin, out.VerifierKey = h.s.auditSigner.Origin(), h.s.auditSigner.VerifierKey()
	}
	// The signature and its key come from the note itself, so that a checkpoint signed by a
	// key this replica does not hold is shown as it is (and fails verification).
	if keyID, sig, err := audit.NoteSignature(cp.Note); err == nil {
		out.KeyId, out.Signature = keyID, sig
	}
	return out, nil
}

// treeSize answers size, or the newest checkpoint's when size is 0.
func (h auditService) treeSize(ctx context.Context, field string, size uint64) (uint64, error) {
	cp, err := h.s.store.LatestAuditCheckpoint(ctx)
	if err != nil {
		return 0, storeError(err, connect.CodeInternal)
	}
	switch {
	case size == 0:
		return cp.Size, nil
	case size > cp.Size:
		return 0, invalid(field, "%d is beyond the newest checkpoint (%d events)", size, cp.Size)
	}
	return size, nil
}

func (h auditService) hashes(ctx context.Context) func([]int64) ([][]byte, error) {
	return func(indexes []int64) ([][]byte, error) { return h.s.store.ReadAuditHashes(ctx, indexes) }
}

func (h auditService) GetInclusionProof(ctx context.Context, req *agwpv1.GetInclusionProofRequest) (*agwpv1.GetInclusionProofResponse, error) {
	size, err := h.treeSize(ctx, "tree_size", req.GetTreeSize())
	if err != nil {
		return nil, err
	}
	if req.GetSeq() == 0 || req.GetSeq() > size {
		return nil, invalid("seq", "%d is not an event of a tree of %d events (1 to %d)", req.GetSeq(), size, size)
	}
	proof, err := audit.InclusionProof(req.GetSeq(), size, h.hashes(ctx))
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.GetInclusionProofResponse{Seq: req.GetSeq(), TreeSize: size, Hashes: proof}, nil
}

func (h auditService) GetConsistencyProof(ctx context.Context, req *agwpv1.GetConsistencyProofRequest) (*agwpv1.GetConsistencyProofResponse, error) {
	size, err := h.treeSize(ctx, "new_size", req.GetNewSize())
	if err != nil {
		return nil, err
	}
	if req.GetOldSize() == 0 || req.GetOldSize() > size {
		return nil, invalid("old_size", "%d is not a tree size up to %d", req.GetOldSize(), size)
	}
	proof, err := audit.ConsistencyProof(req.GetOldSize(), size, h.hashes(ctx))
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.GetConsistencyProofResponse{OldSize: req.GetOldSize(), NewSize: size, Hashes: proof}, nil
}
