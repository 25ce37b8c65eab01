package postgres

import (
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/ag-coord/ag/internal/store"
)

func init() { store.RegisterUnavailable(unavailable) }

// unavailable reports whether err means PostgreSQL cannot serve now rather than that the
// request or the server is wrong: it could not be reached, it is shutting down or starting,
// it is out of connections or disk, or the connection broke. Clients are told to retry.
func unavailable(err error) bool {
	var connectErr *pgconn.ConnectError
	var netErr *net.OpError
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr), errors.Is(err, puddle.ErrClosedPool),
		errors.Is(err, io.ErrUnexpectedEOF), pgconn.SafeToRetry(err):
		return true
	case errors.As(err, &pgErr):
		// Class 08: connection exception; 53: insufficient resources (connections, disk,
		// memory); 57P01-03: the server is shutting down, crashed or is not accepting yet.
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "53") ||
			pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	return false
}
