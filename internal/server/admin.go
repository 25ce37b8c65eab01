package server

import (
	"context"
	"crypto/ed25519"

	"connectrpc.com/connect"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/store"
)

// adminService serves AdminService.
type adminService struct {
	s *Server
}

func (h adminService) CreatePrincipal(ctx context.Context, req *agwpv1.CreatePrincipalRequest) (*agwpv1.CreatePrincipalResponse, error) {
	if err := validateName("name", req.GetName()); err != nil {
		return nil, err
	}
	role, ok := storeRole(req.GetRole())
	if !ok {
		return nil, invalid("role", "is required: ROLE_ADMIN, ROLE_AGENT, ROLE_WORKER or ROLE_READER")
	}
	token, id, hash := NewToken()
	p, t, err := h.s.store.CreatePrincipal(ctx, store.CreatePrincipalParams{Name: req.GetName(), Role: role, TokenID: id, TokenHash: hash})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.CreatePrincipalResponse{Principal: principalProto(p), Token: token, TokenId: t.ID}, nil
}

func (h adminService) ListPrincipals(ctx context.Context, req *agwpv1.ListPrincipalsRequest) (*agwpv1.ListPrincipalsResponse, error) {
	limit, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	ps, next, err := h.s.store.ListPrincipals(ctx, store.ListPrincipalsParams{Limit: limit, PageToken: req.GetPageToken()})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out := &agwpv1.ListPrincipalsResponse{NextPageToken: next}
	for _, p := range ps {
		out.Principals = append(out.Principals, principalProto(p))
	}
	return out, nil
}

func (h adminService) DisablePrincipal(ctx context.Context, req *agwpv1.DisablePrincipalRequest) (*agwpv1.DisablePrincipalResponse, error) {
	if err := validateName("name", req.GetName()); err != nil {
		return nil, err
	}
	p, err := h.s.store.DisablePrincipal(ctx, req.GetName())
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	h.s.auth.forget(p.Name, "")
	return &agwpv1.DisablePrincipalResponse{Principal: principalProto(p)}, nil
}

func (h adminService) CreateToken(ctx context.Context, req *agwpv1.CreateTokenRequest) (*agwpv1.CreateTokenResponse, error) {
	if err := validateName("principal", req.GetPrincipal()); err != nil {
		return nil, err
	}
	token, id, hash := NewToken()
	t, err := h.s.store.CreateToken(ctx, store.CreateTokenParams{Principal: req.GetPrincipal(), TokenID: id, TokenHash: hash})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.CreateTokenResponse{TokenInfo: tokenProto(t), Token: token}, nil
}

func (h adminService) RevokeToken(ctx context.Context, req *agwpv1.RevokeTokenRequest) (*agwpv1.RevokeTokenResponse, error) {
	if err := validateID("token_id", req.GetTokenId()); err != nil {
		return nil, err
	}
	t, err := h.s.store.RevokeToken(ctx, req.GetTokenId())
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	h.s.auth.forget("", t.ID)
	return &agwpv1.RevokeTokenResponse{TokenInfo: tokenProto(t)}, nil
}

func (h adminService) RegisterWorkerKey(ctx context.Context, req *agwpv1.RegisterWorkerKeyRequest) (*agwpv1.RegisterWorkerKeyResponse, error) {
	pub := req.GetPublicKey()
	if len(pub) != ed25519.PublicKeySize {
		return nil, invalid("public_key", "is %d bytes: send the raw 32-byte Ed25519 public key", len(pub))
	}
	k, err := h.s.store.RegisterWorkerKey(ctx, store.RegisterWorkerKeyParams{
		KeyID:     attest.KeyID(pub),
		Principal: callerFrom(ctx).principal.Name,
		PublicKey: pub,
	})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.RegisterWorkerKeyResponse{Key: workerKeyProto(k)}, nil
}

func (h adminService) ListWorkerKeys(ctx context.Context, req *agwpv1.ListWorkerKeysRequest) (*agwpv1.ListWorkerKeysResponse, error) {
	if err := validateName("principal", req.GetPrincipal()); err != nil {
		return nil, err
	}
	keys, err := h.s.store.ListWorkerKeys(ctx, req.GetPrincipal())
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out := &agwpv1.ListWorkerKeysResponse{}
	for _, k := range keys {
		out.Keys = append(out.Keys, workerKeyProto(k))
	}
	return out, nil
}

func (h adminService) WhoAmI(ctx context.Context, _ *agwpv1.WhoAmIRequest) (*agwpv1.WhoAmIResponse, error) {
	return &agwpv1.WhoAmIResponse{Principal: principalProto(callerFrom(ctx).principal)}, nil
}
