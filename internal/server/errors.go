package server

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/internal/store"
)

// storeError maps a store error to the Connect error a client sees. lostClaim is the code of a
// lost or stale claim, which differs by method (ADR-0012: failed_precondition for completion,
// not_found for heartbeat and fail).
func storeError(err error, lostClaim connect.Code) error {
	var ce *connect.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce):
		return err
	case errors.Is(err, store.ErrLostClaim):
		return connect.NewError(lostClaim, err)
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, store.ErrAlreadyExists):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, store.ErrFailedPrecondition):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, store.ErrResourceExhausted):
		return connect.NewError(connect.CodeResourceExhausted, err)
	case errors.Is(err, store.ErrAttestationRequired):
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("attestation: is required: %w (a DSSE envelope of an in-toto statement signed with a registered worker key)", err))
	case errors.Is(err, store.ErrInvalidPageToken):
		return connect.NewError(connect.CodeInvalidArgument, errors.New("page_token: not a token this server handed out"))
	}
	if down, unapplied := store.Unavailable(err); down {
		return connect.NewError(connect.CodeUnavailable, &unavailableError{cause: err, unapplied: unapplied})
	}
	switch {
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}
