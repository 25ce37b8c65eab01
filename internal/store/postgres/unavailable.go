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

// The test is registered when the package is linked, not when a store is opened:
// store.Unavailable is asked about an error alone, wherever it was wrapped, and answers with
// every linked backend's test, whichever backend the error came from.
func init() { store.RegisterUnavailable(unavailable) }

// unavailable reports whether err means PostgreSQL cannot serve now rather than that the
// request or the server is wrong: it could not be reached, it is shutting down or starting,
// it is out of connections or disk, or the connection broke. Clients are told to retry; and
// whether the request surely did not apply: it failed before anything was sent, or the server
// refused the connection. A connection lost after a statement was sent (a commit among them)
// may have applied it.
func unavailable(err error) (unavailable, unapplied bool) {
	var connectErr *pgconn.ConnectError
	var netErr *net.OpError
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &connectErr), errors.Is(err, puddle.ErrClosedPool), pgconn.SafeToRetry(err):
		return true, true
	case errors.As(err, &pgErr):
		switch {
		case pgErr.Code == "57P03", pgErr.Code == "53300": // not accepting yet, too many connections: at connect
			return true, true
		case strings.HasPrefix(pgErr.Code, "08"), strings.HasPrefix(pgErr.Code, "53"), pgErr.Code == "57P01", pgErr.Code == "57P02":
			// Connection exceptions, insufficient resources, shutdown or crash under way.
			return true, false
		}
		return false, false
	case errors.As(err, &netErr), errors.Is(err, io.ErrUnexpectedEOF):
		return true, false
	}
	return false, false
}
