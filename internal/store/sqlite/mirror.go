package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ag-coord/ag/internal/store"
)

const mirrorColumns = `repository, url, branch, credential, state, pushed_commit, last_error, updated_at`

func scanMirror(row scanner) (store.Mirror, error) {
	var (
		m       store.Mirror
		state   string
		updated int64
	)
	if err := row.Scan(&m.Repository, &m.URL, &m.Branch, &m.Credential, &state, &m.PushedCommit, &m.LastError, &updated); err != nil {
		return store.Mirror{}, err
	}
	m.State, m.UpdatedAt = store.MirrorState(state), fromMicros(updated)
	return m, nil
}

// SetMirror sets or removes a repository's forge mirror.
func (d *DB) SetMirror(ctx context.Context, p store.SetMirrorParams) (store.Mirror, error) {
	now := micros(d.now())
	actor := store.ActorOf(ctx)
	var m store.Mirror
	err := d.write(ctx, "set mirror", func(ctx context.Context, tx *sql.Tx) error {
		var name string
		if err := tx.QueryRowContext(ctx, `SELECT name FROM repositories WHERE name = ?`, p.Repository).Scan(&name); err != nil {
			return interpretError(fmt.Sprintf("set the mirror of repository %q", p.Repository), err)
		}
		var det details
		if p.URL == "" {
			if _, err := tx.ExecContext(ctx, `DELETE FROM mirrors WHERE repository = ?`, p.Repository); err != nil {
				return interpretError("remove mirror", err)
			}
			det.raw("url", []byte("null"))
			d.record(now, actor, "repository.mirror_set", "repository/"+p.Repository, det.done())
			return nil
		}
		var err error
		m, err = scanMirror(tx.QueryRowContext(ctx, `INSERT INTO mirrors (repository, url, branch, credential, state, updated_at)
			VALUES (?, ?, ?, ?, 'pending', ?)
			ON CONFLICT (repository) DO UPDATE SET url = excluded.url, branch = excluded.branch, credential = excluded.credential,
				state = 'pending', pushed_commit = '', last_error = '', updated_at = excluded.updated_at
			RETURNING `+mirrorColumns, p.Repository, p.URL, p.Branch, p.Credential, now))
		if err != nil {
			return interpretError("set mirror", err)
		}
		det.str("branch", p.Branch).str("url", p.URL)
		d.record(now, actor, "repository.mirror_set", "repository/"+p.Repository, det.done())
		return nil
	})
	return m, err
}

// GetMirror answers a repository's forge mirror.
func (d *DB) GetMirror(ctx context.Context, repository string) (store.Mirror, error) {
	m, err := scanMirror(d.r.QueryRowContext(ctx, `SELECT `+mirrorColumns+` FROM mirrors WHERE repository = ?`, repository))
	if err != nil {
		return store.Mirror{}, interpretError(fmt.Sprintf("the mirror of repository %q", repository), err)
	}
	return m, nil
}

// ListMirrors answers every forge mirror.
func (d *DB) ListMirrors(ctx context.Context) ([]store.Mirror, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT `+mirrorColumns+` FROM mirrors ORDER BY repository`)
	if err != nil {
		return nil, interpretError("list mirrors", err)
	}
	defer rows.Close()
	var out []store.Mirror
	for rows.Next() {
		m, err := scanMirror(rows)
		if err != nil {
			return nil, interpretError("list mirrors", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("list mirrors", err)
	}
	return out, nil
}

// RecordMirrorPush records a push's outcome on the mirror it was made to.
func (d *DB) RecordMirrorPush(ctx context.Context, p store.MirrorPushParams) error {
	now := micros(d.now())
	return d.write(ctx, "record a mirror push", func(ctx context.Context, tx *sql.Tx) error {
		var before string
		err := tx.QueryRowContext(ctx, `SELECT state FROM mirrors WHERE repository = ? AND url = ?`, p.Repository, p.URL).Scan(&before)
		if err == sql.ErrNoRows {
			return nil // set again, or removed, meanwhile
		}
		if err != nil {
			return interpretError("record a mirror push", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE mirrors SET state = ?, last_error = ?, updated_at = ?,
			pushed_commit = CASE WHEN ? = '' THEN pushed_commit ELSE ? END WHERE repository = ?`,
			string(p.State), p.LastError, now, p.PushedCommit, p.PushedCommit, p.Repository); err != nil {
			return interpretError("record a mirror push", err)
		}
		if p.State == store.MirrorDiverged && before != string(store.MirrorDiverged) {
			var det details
			det.str("reason", p.LastError).str("url", p.URL)
			d.record(now, systemActor, "repository.mirror_diverged", "repository/"+p.Repository, det.done())
		}
		return nil
	})
}
