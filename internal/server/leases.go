package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"connectrpc.com/connect"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

const (
	defaultLeaseTTL = 5 * time.Minute
	maxLeaseTTL     = 24 * time.Hour
	maxLeaseWait    = 60 * time.Second
	maxLeasePaths   = 1000
)

// leaseService serves LeaseService.
type leaseService struct {
	s *Server
}

var leaseStates = map[store.LeaseState]agwpv1.LeaseState{
	store.LeaseActive:   agwpv1.LeaseState_LEASE_STATE_ACTIVE,
	store.LeaseReleased: agwpv1.LeaseState_LEASE_STATE_RELEASED,
	store.LeaseExpired:  agwpv1.LeaseState_LEASE_STATE_EXPIRED,
	store.LeaseBroken:   agwpv1.LeaseState_LEASE_STATE_BROKEN,
}

func leaseProto(l store.Lease) *agwpv1.Lease {
	return &agwpv1.Lease{
		Id:           l.ID,
		Repository:   l.Repository,
		Paths:        l.Paths,
		Holder:       l.Holder,
		FencingToken: l.FencingToken,
		State:        leaseStates[l.State],
		AcquiredAt:   timestamp(l.AcquiredAt),
		ExpiresAt:    timestamp(l.ExpiresAt),
		EndedAt:      timestamp(l.EndedAt),
	}
}

// leasePaths validates and deduplicates the paths of a lease request.
func leasePaths(paths []string) ([]string, error) {
	if len(paths) == 0 {
		return nil, invalid("paths", "is required: name at least one file (a/b.go) or directory (a/)")
	}
	if len(paths) > maxLeasePaths {
		return nil, invalid("paths", "has %d paths, more than %d", len(paths), maxLeasePaths)
	}
	seen := make(map[string]bool, len(paths))
	out := make([]string, 0, len(paths))
	for i, p := range paths {
		if err := repo.ValidatePath(p, true); err != nil {
			return nil, invalid(fmt.Sprintf("paths[%d]", i), "%q %v", truncate(p, 200), err)
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out, nil
}

// DefaultMaxLeasedPaths is how many paths a principal may hold in live leases of one
// repository unless the server is told otherwise: far more than an agent's task needs (a
// directory is one path), far fewer than it takes to hold a code base hostage file by file.
const DefaultMaxLeasedPaths = 1000

// maxLeasedPaths answers the cap of a grant, 0 for none.
func (s *Server) maxLeasedPaths() int {
	switch n := s.cfg.MaxLeasedPaths; {
	case n < 0:
		return 0
	case n == 0:
		return DefaultMaxLeasedPaths
	default:
		return n
	}
}

func (h leaseService) AcquireLease(ctx context.Context, req *agwpv1.AcquireLeaseRequest) (*agwpv1.AcquireLeaseResponse, error) {
	if err := validateName("repository", req.GetRepository()); err != nil {
		return nil, err
	}
	paths, err := leasePaths(req.GetPaths())
	if err != nil {
		return nil, err
	}
	if err := validateLabel("holder", req.GetHolder()); err != nil {
		return nil, err
	}
	ttl, err := duration("ttl", req.GetTtl(), defaultLeaseTTL, time.Second, maxLeaseTTL)
	if err != nil {
		return nil, err
	}
	wait, err := duration("wait", req.GetWait(), 0, 0, maxLeaseWait)
	if err != nil {
		return nil, err
	}
	params := store.AcquireLeaseParams{
		Repository:   req.GetRepository(),
		Paths:        paths,
		Holder:       callerFrom(ctx).holder(req.GetHolder()),
		TTL:          ttl,
		MaxLivePaths: h.s.maxLeasedPaths(),
	}
	deadline := time.Now().Add(wait)
	for {
		// Taken before asking, so a release that commits after the refusal still wakes us.
		signal := h.s.store.LeaseSignal()
		lease, err := h.s.store.AcquireLease(ctx, params)
		if err == nil {
			return &agwpv1.AcquireLeaseResponse{Lease: leaseProto(lease)}, nil
		}
		var conflict *store.LeaseConflictError
		if !errors.As(err, &conflict) {
			return nil, storeError(err, connect.CodeInternal)
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("%w; retry later, or acquire with a wait", conflict))
		}
		// The conflicting lease goes when it is released or broken (a signal) or when it
		// expires; the poll interval bounds a wake-up lost on another replica.
		if !h.s.await(ctx, signal, min(remaining, time.Until(conflict.ExpiresAt)+time.Millisecond, h.s.pollInterval)) {
			return nil, connect.NewError(connect.CodeAborted, conflict)
		}
	}
}

func (h leaseService) leaseChange(ctx context.Context, id string, token uint64) (store.ReleaseLeaseParams, error) {
	if err := validateID("lease_id", id); err != nil {
		return store.ReleaseLeaseParams{}, err
	}
	c := callerFrom(ctx)
	return store.ReleaseLeaseParams{
		LeaseID: id, Principal: c.principal.Name, Admin: c.principal.Role == store.RoleAdmin, FencingToken: token,
	}, nil
}

func (h leaseService) RenewLease(ctx context.Context, req *agwpv1.RenewLeaseRequest) (*agwpv1.RenewLeaseResponse, error) {
	p, err := h.leaseChange(ctx, req.GetLeaseId(), req.GetFencingToken())
	if err != nil {
		return nil, err
	}
	ttl, err := duration("ttl", req.GetTtl(), defaultLeaseTTL, time.Second, maxLeaseTTL)
	if err != nil {
		return nil, err
	}
	lease, err := h.s.store.RenewLease(ctx, store.RenewLeaseParams{
		LeaseID: p.LeaseID, Principal: p.Principal, Admin: p.Admin, FencingToken: p.FencingToken, TTL: ttl,
		MaxAge: h.s.cfg.MaxLeaseAge,
	})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.RenewLeaseResponse{Lease: leaseProto(lease)}, nil
}

func (h leaseService) ReleaseLease(ctx context.Context, req *agwpv1.ReleaseLeaseRequest) (*agwpv1.ReleaseLeaseResponse, error) {
	p, err := h.leaseChange(ctx, req.GetLeaseId(), req.GetFencingToken())
	if err != nil {
		return nil, err
	}
	lease, err := h.s.store.ReleaseLease(ctx, p)
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.ReleaseLeaseResponse{Lease: leaseProto(lease)}, nil
}

func (h leaseService) BreakLease(ctx context.Context, req *agwpv1.BreakLeaseRequest) (*agwpv1.BreakLeaseResponse, error) {
	if err := validateID("lease_id", req.GetLeaseId()); err != nil {
		return nil, err
	}
	lease, err := h.s.store.BreakLease(ctx, req.GetLeaseId())
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	h.s.log.Info("lease broken", "lease", lease.ID, "holder", lease.Holder, "by", callerFrom(ctx).principal.Name)
	return &agwpv1.BreakLeaseResponse{Lease: leaseProto(lease)}, nil
}

func (h leaseService) ListLeases(ctx context.Context, req *agwpv1.ListLeasesRequest) (*agwpv1.ListLeasesResponse, error) {
	if err := validateName("repository", req.GetRepository()); err != nil {
		return nil, err
	}
	limit, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	holder := req.GetHolder()
	if holder != "" {
		h, ok := store.ParseHolder(holder)
		if !ok || validateName("holder", h.Principal) != nil || (h.Label != "" && !isLabel(h.Label)) {
			return nil, invalid("holder", "%q is not a holder: use <principal>|<label>, or <principal>| for all its labels", truncate(holder, 200))
		}
	}
	leases, next, err := h.s.store.ListLeases(ctx, store.ListLeasesParams{
		Repository: req.GetRepository(), Holder: holder, IncludeEnded: req.GetIncludeEnded(), Limit: limit, PageToken: req.GetPageToken(),
	})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out := &agwpv1.ListLeasesResponse{NextPageToken: next}
	for _, l := range leases {
		out.Leases = append(out.Leases, leaseProto(l))
	}
	return out, nil
}
