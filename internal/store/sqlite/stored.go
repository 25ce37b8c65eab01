package sqlite

import (
	"context"
	"database/sql"

	"github.com/ag-coord/ag/internal/store"
)

// compactBatchBytes bounds the contents one batch of CompactStored holds at once: a batch
// stops taking rows once they hold that much (but takes one, however large).
const compactBatchBytes = 32 << 20

// CompactStored rewrites unexamined rows of blobs, then of git objects, as store.EncodeStored
// writes them (store.Store). The freed pages stay in the file for later rows; `VACUUM` gives
// them back to the file system (docs/storage.md).
func (d *DB) CompactStored(ctx context.Context, limit int) (int, error) {
	var n int
	err := d.write(ctx, "compact stored contents", func(ctx context.Context, tx *sql.Tx) error {
		n = 0
		tables := []struct{ name, key, content, unexamined string }{
			{"blobs", "digest", "content", "stored_as = 0 AND parts_key IS NULL"},
			{"git_objects", "id", "data", "stored_as = 0"},
		}
		for _, t := range tables {
			if n >= limit {
				break
			}
			rows, err := tx.QueryContext(ctx, `SELECT `+t.key+`, `+t.content+` FROM `+t.name+` WHERE `+t.unexamined+` LIMIT ?`, limit-n)
			if err != nil {
				return interpretError("compact stored contents", err)
			}
			var (
				keys     [][]byte
				contents [][]byte
				held     int
			)
			for held < compactBatchBytes && rows.Next() {
				var key, content []byte
				if err := rows.Scan(&key, &content); err != nil {
					rows.Close()
					return interpretError("compact stored contents", err)
				}
				keys, contents, held = append(keys, key), append(contents, content), held+len(content)
			}
			err = rows.Err()
			rows.Close()
			if err != nil {
				return interpretError("compact stored contents", err)
			}
			for i, key := range keys {
				data, storedAs := store.EncodeStored(nonNil(contents[i]))
				var k any = key
				if t.key == "digest" {
					k = string(key) // a TEXT key matches only a TEXT argument
				}
				if _, err := tx.ExecContext(ctx, `UPDATE `+t.name+` SET `+t.content+` = ?, stored_as = ? WHERE `+t.key+` = ?`,
					data, storedAs, k); err != nil {
					return interpretError("compact stored contents", err)
				}
			}
			n += len(keys)
			if held >= compactBatchBytes {
				break
			}
		}
		return nil
	})
	return n, err
}
