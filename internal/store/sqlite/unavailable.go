package sqlite

import (
	"database/sql"
	"errors"
	"strings"

	"github.com/mattn/go-sqlite3"

	"github.com/ag-coord/ag/internal/store"
)

// The test is registered when the package is linked, not when a store is opened:
// store.Unavailable is asked about an error alone, wherever it was wrapped, and answers with
// every linked backend's test, whichever backend the error came from.
func init() { store.RegisterUnavailable(unavailable) }

// unavailable reports whether err means the database file cannot serve now: it is locked
// longer than the busy timeout, the disk is full or failing, it cannot be opened, or the
// store was closed. Clients are told to retry; a write that was refused its lock, or never
// reached a closed store, surely did not apply; one that failed on I/O may have.
func unavailable(err error) (unavailable, unapplied bool) {
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrBusy, sqlite3.ErrLocked, sqlite3.ErrCantOpen:
			return true, true
		case sqlite3.ErrIoErr, sqlite3.ErrFull, sqlite3.ErrNomem:
			return true, false
		}
		return false, false
	}
	// database/sql does not export the error of a closed pool.
	if errors.Is(err, sql.ErrConnDone) || strings.Contains(err.Error(), "sql: database is closed") {
		return true, true
	}
	return false, false
}
