package postgres

import (
	"context"

	"github.com/ag-coord/ag/internal/store"
)

// compactBatchBytes bounds the contents one batch of CompactStored holds at once: a batch
// stops taking rows once they hold that much (but takes one, however large).
const compactBatchBytes = 32 << 20

// CompactStored rewrites unexamined rows of blobs, then of git objects, as store.EncodeStored
// writes them (store.Store), skipping the rows another replica's batch holds. PostgreSQL
// reuses the space of the old row versions once vacuumed (autovacuum does).
func (db *DB) CompactStored(ctx context.Context, limit int) (int, error) {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return 0, interpretError("compact stored contents", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	// Each key is read as bytes and matched back as its own type.
	tables := []struct{ name, key, keyBytes, keyOf, content, unexamined string }{
		{"blobs", "digest", "convert_to(digest, 'UTF8')", "convert_from(u.k, 'UTF8')", "content", "stored_as = 0 AND parts_key IS NULL"},
		{"git_objects", "id", "id", "u.k", "data", "stored_as = 0"},
	}
	n := 0
	for _, t := range tables {
		if n >= limit {
			break
		}
		rows, err := tx.Query(ctx, `SELECT `+t.key+`::bytea, `+t.content+` FROM `+t.name+` WHERE `+t.unexamined+`
			LIMIT $1 FOR UPDATE SKIP LOCKED`, limit-n)
		if err != nil {
			return 0, interpretError("compact stored contents", err)
		}
		var (
			keys, contents [][]byte
			forms          []int16
			held           int
		)
		for held < compactBatchBytes && rows.Next() {
			var key, content []byte
			if err := rows.Scan(&key, &content); err != nil {
				rows.Close()
				return 0, interpretError("compact stored contents", err)
			}
			held += len(content)
			data, storedAs := store.EncodeStored(nonNilBytes(content))
			keys, contents, forms = append(keys, key), append(contents, data), append(forms, int16(storedAs))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, interpretError("compact stored contents", err)
		}
		if len(keys) > 0 {
			if _, err := tx.Exec(ctx, `UPDATE `+t.name+` t SET `+t.content+` = u.c, stored_as = u.f
				FROM unnest($1::bytea[], $2::bytea[], $3::smallint[]) AS u(k, c, f) WHERE t.`+t.key+` = `+t.keyOf,
				keys, contents, forms); err != nil {
				return 0, interpretError("compact stored contents", err)
			}
		}
		n += len(keys)
		if held >= compactBatchBytes {
			break
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, interpretError("compact stored contents", err)
	}
	return n, nil
}
