package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ag-coord/ag/internal/store"
)

const mirrorCols = `repository, url, branch, credential, state, pushed_commit, last_error, updated_at`

func scanMirror(row pgx.Row) (store.Mirror, error) {
	var (
		m     store.Mirror
		state string
	)
	if err := row.Scan(&m.Repository, &m.URL, &m.Branch, &m.Credential, &state, &m.PushedCommit, &m.LastError, &m.UpdatedAt); err != nil {
		return store.Mirror{}, err
	}
	m.State, m.UpdatedAt = store.MirrorState(state), m.UpdatedAt.UTC()
	return m, nil
}

// setMirrorSQL upserts a mirror and records repository.mirror_set in one statement; $1 is the
// time, $7 and $8 the actor, $9 the details.
var setMirrorSQL = q(`WITH r AS (SELECT name FROM repositories WHERE name = $2),
m AS (INSERT INTO mirrors (repository, url, branch, credential, state, updated_at)
	SELECT name, $3, $4, $5, 'pending', {now} FROM r
	ON CONFLICT (repository) DO UPDATE SET url = excluded.url, branch = excluded.branch, credential = excluded.credential,
		state = 'pending', pushed_commit = '', last_error = '', updated_at = excluded.updated_at
	RETURNING ` + mirrorCols + `),
ev AS (` + auditRecord(`SELECT $6::text, $7::text, 'repository.mirror_set', 'repository/' || r.name, $8::text FROM r`) + `)
SELECT ` + mirrorCols + ` FROM m`)

// removeMirrorSQL removes a mirror and records it; it answers the repository, if there is one.
var removeMirrorSQL = q(`WITH r AS (SELECT name FROM repositories WHERE name = $2),
d AS (DELETE FROM mirrors WHERE repository IN (SELECT name FROM r)),
ev AS (` + auditRecord(`SELECT $3::text, $4::text, 'repository.mirror_set', 'repository/' || r.name, $5::text FROM r`) + `)
SELECT name FROM r`)

// SetMirror sets or removes a repository's forge mirror.
func (db *DB) SetMirror(ctx context.Context, p store.SetMirrorParams) (store.Mirror, error) {
	actor := store.ActorOf(ctx)
	if p.URL == "" {
		var name string
		err := db.pool.QueryRow(ctx, removeMirrorSQL, db.now(), p.Repository, actor.Principal, actor.Holder,
			details(map[string]any{"url": nil})).Scan(&name)
		if err != nil {
			return store.Mirror{}, interpretError("repository "+p.Repository, err)
		}
		db.audited()
		return store.Mirror{}, nil
	}
	m, err := scanMirror(db.pool.QueryRow(ctx, setMirrorSQL, db.now(), p.Repository, p.URL, p.Branch, p.Credential,
		actor.Principal, actor.Holder, details(map[string]any{"url": p.URL, "branch": p.Branch})))
	if err != nil {
		return store.Mirror{}, interpretError("repository "+p.Repository, err)
	}
	db.audited()
	return m, nil
}

// GetMirror answers a repository's forge mirror.
func (db *DB) GetMirror(ctx context.Context, repository string) (store.Mirror, error) {
	m, err := scanMirror(db.pool.QueryRow(ctx, `SELECT `+mirrorCols+` FROM mirrors WHERE repository = $1`, repository))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Mirror{}, fmt.Errorf("the mirror of repository %s: %w", repository, store.ErrNotFound)
	}
	if err != nil {
		return store.Mirror{}, interpretError("mirror of "+repository, err)
	}
	return m, nil
}

// ListMirrors answers every forge mirror.
func (db *DB) ListMirrors(ctx context.Context) ([]store.Mirror, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+mirrorCols+` FROM mirrors ORDER BY repository`)
	if err != nil {
		return nil, interpretError("list mirrors", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Mirror, error) { return scanMirror(row) })
	if err != nil {
		return nil, interpretError("list mirrors", err)
	}
	return out, nil
}

// recordMirrorPushSQL records a push's outcome on the mirror it was made to, and
// repository.mirror_diverged when it became diverged; it answers whether it did.
var recordMirrorPushSQL = q(`WITH old AS (SELECT state FROM mirrors WHERE repository = $2 AND url = $3 FOR UPDATE),
m AS (UPDATE mirrors SET state = $4, last_error = $6, updated_at = {now},
		pushed_commit = CASE WHEN $5 = '' THEN pushed_commit ELSE $5 END
	WHERE repository = $2 AND url = $3 RETURNING repository),
ev AS (` + auditRecord(`SELECT $7::text, ''::text, 'repository.mirror_diverged', 'repository/' || $2, $8::text
	FROM old WHERE $4 = 'diverged' AND old.state <> 'diverged'`) + `)
SELECT coalesce(bool_or(old.state <> 'diverged' AND $4 = 'diverged'), false) FROM old`)

// RecordMirrorPush records a push's outcome on the mirror it was made to.
func (db *DB) RecordMirrorPush(ctx context.Context, p store.MirrorPushParams) error {
	var diverged bool
	err := db.pool.QueryRow(ctx, recordMirrorPushSQL, db.now(), p.Repository, p.URL, string(p.State), p.PushedCommit, p.LastError,
		systemActor.Principal, details(map[string]any{"url": p.URL, "reason": p.LastError})).Scan(&diverged)
	if err != nil {
		return interpretError("record a mirror push", err)
	}
	if diverged {
		db.audited()
	}
	return nil
}
