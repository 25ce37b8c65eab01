package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WaitListening waits up to timeout until db's listener has started listening n times in all.
func WaitListening(db *DB, n int64, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		// Taken before the count is read, so a LISTEN in between still wakes this loop.
		ch := db.listening.Wait()
		if db.listens.Load() >= n {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

// KnownVersion answers the schema version this build migrates to.
func KnownVersion() int { return knownVersion() }

// MigrateTo migrates the database at url as a build whose last migration is version would.
func MigrateTo(ctx context.Context, url string, version int) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	return migrate(ctx, pool, version, "")
}

// GitMigration is the migration that brings the git content store.
const GitMigration = gitMigration

// BackfillGit runs the git migration's backfill again over the database at url, in a
// transaction of its own.
func BackfillGit(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := backfillGit(ctx, tx, ""); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// SetSealWaitMost bounds db's seals' wait for the transactions writing records to d.
func SetSealWaitMost(db *DB, d time.Duration) { db.sealWaitMost = d }

// ErrWritersStillOpen is what a seal answers when its wait ended with writers still open.
var ErrWritersStillOpen = errWritersStillOpen
