package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/ag-coord/ag/internal/store"
)

const blobUploadColumns = `id, principal, digest, size, part_bytes, received, hash_state, created_at, parts_key`

// scanBlobUpload reads blobUploadColumns: the upload and the key of its parts.
func scanBlobUpload(row scanner) (store.BlobUpload, string, error) {
	var (
		u                                  store.BlobUpload
		size, partBytes, received, created int64
		partsKey                           string
	)
	if err := row.Scan(&u.ID, &u.Principal, &u.Digest, &size, &partBytes, &received, &u.HashState, &created, &partsKey); err != nil {
		return store.BlobUpload{}, "", err
	}
	u.Size, u.PartBytes, u.Received = uint64(size), uint64(partBytes), uint64(received)
	u.CreatedAt = fromMicros(created)
	return u, partsKey, nil
}

// StartBlobUpload answers the upload u.ID, creating it when there is none.
func (d *DB) StartBlobUpload(ctx context.Context, u store.BlobUpload) (store.BlobUpload, error) {
	if err := store.CheckBlobUpload(u); err != nil {
		return store.BlobUpload{}, fmt.Errorf("start blob upload: %w", err)
	}
	var stored store.BlobUpload
	err := d.write(ctx, "start blob upload", func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO blob_uploads
			(id, principal, digest, size, part_bytes, received, hash_state, parts_key, created_at)
			VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
			u.ID, u.Principal, u.Digest, int64(u.Size), int64(u.PartBytes), nonNil(u.HashState),
			store.NewID("parts"), micros(d.now())); err != nil {
			return interpretError("start blob upload "+u.ID, err)
		}
		var err error
		stored, _, err = scanBlobUpload(tx.QueryRowContext(ctx, `SELECT `+blobUploadColumns+` FROM blob_uploads WHERE id = ?`, u.ID))
		if err != nil {
			return interpretError("start blob upload "+u.ID, err)
		}
		return nil
	})
	if err != nil {
		return store.BlobUpload{}, err
	}
	return stored, nil
}

// GetBlobUpload answers an upload as it stands.
func (d *DB) GetBlobUpload(ctx context.Context, id string) (store.BlobUpload, error) {
	u, _, err := scanBlobUpload(d.r.QueryRowContext(ctx, `SELECT `+blobUploadColumns+` FROM blob_uploads WHERE id = ?`, id))
	if err != nil {
		return store.BlobUpload{}, interpretError("get blob upload "+id, err)
	}
	return u, nil
}

// AppendBlobUpload stores the next part of an upload and, with p.Complete, makes its parts the
// blob. The writer holds the write lock from the read of the upload on, so of two appends at
// the same offset the second sees what the first received and is refused.
func (d *DB) AppendBlobUpload(ctx context.Context, p store.AppendBlobUploadParams) (store.BlobUpload, error) {
	var u store.BlobUpload
	err := d.write(ctx, "append to blob upload", func(ctx context.Context, tx *sql.Tx) error {
		var (
			partsKey string
			err      error
		)
		u, partsKey, err = scanBlobUpload(tx.QueryRowContext(ctx, `SELECT `+blobUploadColumns+` FROM blob_uploads WHERE id = ?`, p.ID))
		if err != nil {
			return interpretError("append to blob upload "+p.ID, err)
		}
		if err := store.CheckBlobPart(u, p); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO blob_parts (parts_key, seq, content) VALUES (?, ?, ?)`,
			partsKey, int64(p.Offset/u.PartBytes), nonNil(p.Content)); err != nil {
			return interpretError(fmt.Sprintf("append to blob upload %s: store the part from offset %d", p.ID, p.Offset), err)
		}
		u.Received = p.Offset + uint64(len(p.Content))
		u.HashState = p.HashState
		if p.Complete == nil {
			if _, err := tx.ExecContext(ctx, `UPDATE blob_uploads SET received = ?, hash_state = ? WHERE id = ?`,
				int64(u.Received), nonNil(p.HashState), p.ID); err != nil {
				return interpretError("append to blob upload "+p.ID, err)
			}
			return nil
		}
		return completeBlobUpload(ctx, tx, u, partsKey, *p.Complete)
	})
	if err != nil {
		return store.BlobUpload{}, err
	}
	return u, nil
}

// completeBlobUpload makes the parts under partsKey the blob c, unless a blob of that digest
// is stored already (then the parts go), and ends the upload u.
func completeBlobUpload(ctx context.Context, tx *sql.Tx, u store.BlobUpload, partsKey string, c store.CompletedBlob) error {
	res, err := tx.ExecContext(ctx, `INSERT INTO blobs (digest, content, size, git_id, parts_key, part_bytes)
		VALUES (?, x'', ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING`,
		c.Digest, int64(u.Size), c.GitID[:], partsKey, int64(u.PartBytes))
	if err != nil {
		return interpretError(fmt.Sprintf("complete blob upload %s: store blob %s", u.ID, c.Digest), err)
	}
	stored, err := res.RowsAffected()
	if err != nil {
		return interpretError("complete blob upload "+u.ID, err)
	}
	if stored == 0 {
		if _, err := tx.ExecContext(ctx, `DELETE FROM blob_parts WHERE parts_key = ?`, partsKey); err != nil {
			return interpretError(fmt.Sprintf("complete blob upload %s: drop the parts of a blob already stored", u.ID), err)
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM blob_uploads WHERE id = ?`, u.ID); err != nil {
		return interpretError("complete blob upload "+u.ID, err)
	}
	return nil
}

// DropBlobUploads removes the uploads started before before, and the upload id, with their
// parts. A blob's parts are never under an upload's key: completing an upload deletes its row.
func (d *DB) DropBlobUploads(ctx context.Context, before time.Time, id string) (int, error) {
	var dropped int64
	err := d.write(ctx, "drop blob uploads", func(ctx context.Context, tx *sql.Tx) error {
		const uploads = `FROM blob_uploads WHERE created_at < ?1 OR (?2 <> '' AND id = ?2)`
		if _, err := tx.ExecContext(ctx, `DELETE FROM blob_parts WHERE parts_key IN (SELECT parts_key `+uploads+`)`,
			micros(before), id); err != nil {
			return interpretError("drop blob uploads: their parts", err)
		}
		res, err := tx.ExecContext(ctx, `DELETE `+uploads, micros(before), id)
		if err != nil {
			return interpretError("drop blob uploads", err)
		}
		if dropped, err = res.RowsAffected(); err != nil {
			return interpretError("drop blob uploads", err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return int(dropped), nil
}

// ReadBlob calls fn with a blob's content from offset on, a part at a time for a blob stored
// in parts. Each part is read by a query of its own and copied out before fn runs, so that a
// slow fn (a client reading over the network) holds neither a connection nor a read snapshot.
// A stored blob's parts never change, so the parts read apart are one blob's.
func (d *DB) ReadBlob(ctx context.Context, digest string, offset uint64, fn func(piece []byte) error) error {
	var (
		content   []byte
		size      int64
		partsKey  sql.NullString
		partBytes sql.NullInt64
		storedAs  int
	)
	var gitID []byte
	if err := d.r.QueryRowContext(ctx, `SELECT content, size, parts_key, part_bytes, stored_as, git_id FROM blobs WHERE digest = ?`, digest).
		Scan(&content, &size, &partsKey, &partBytes, &storedAs, &gitID); err != nil {
		return interpretError("read blob "+digest, err)
	}
	if !partsKey.Valid {
		content, err := blobContent(ctx, d.r, "blob "+digest, hashOf(gitID), content, storedAs, size, partsKey, nil)
		if err != nil {
			return fmt.Errorf("read blob %s: %w", digest, err)
		}
		if offset >= uint64(len(content)) {
			return nil
		}
		return fn(content[offset:])
	}
	return store.ReadBlobParts(uint64(size), uint64(partBytes.Int64), offset, func(seq uint64) ([]byte, error) {
		var part []byte
		if err := d.r.QueryRowContext(ctx, `SELECT content FROM blob_parts WHERE parts_key = ? AND seq = ?`,
			partsKey.String, int64(seq)).Scan(&part); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				// Not ErrNotFound: the blob is stored, and answering it short would be wrong.
				return nil, fmt.Errorf("read blob %s: part %d is missing", digest, seq)
			}
			return nil, interpretError(fmt.Sprintf("read blob %s: part %d", digest, seq), err)
		}
		return part, nil
	}, fn)
}

// blobContent answers the whole content of the blob gitID: content as stored (storedAs), made
// from its chain of deltas (sharing cache, which may be nil), or its parts under partsKey
// joined in order. A stored blob's rows and parts never change, so q may be any connection.
func blobContent(ctx context.Context, q querier, what string, gitID plumbing.Hash, content []byte, storedAs int, size int64, partsKey sql.NullString, cache *store.BlobCache) ([]byte, error) {
	if storedAs == store.StoredPackDelta && !partsKey.Valid {
		return patchBlob(ctx, q, gitID, store.BlobRow{Data: content, StoredAs: storedAs, Size: size}, cache)
	}
	if !partsKey.Valid {
		content, err := store.DecodeStored(content, storedAs, size)
		return nonNil(content), err
	}
	rows, err := q.QueryContext(ctx, `SELECT content FROM blob_parts WHERE parts_key = ? ORDER BY seq`, partsKey.String)
	if err != nil {
		return nil, interpretError("read the parts of "+what, err)
	}
	defer rows.Close()
	whole := make([]byte, 0, size)
	for rows.Next() {
		var part sql.RawBytes
		if err := rows.Scan(&part); err != nil {
			return nil, interpretError("read the parts of "+what, err)
		}
		whole = append(whole, part...)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("read the parts of "+what, err)
	}
	if int64(len(whole)) != size {
		return nil, fmt.Errorf("read the parts of %s: they hold %d bytes, the blob %d", what, len(whole), size)
	}
	return whole, nil
}

// storedInParts is a blob, among others read, whose content is in parts or in deltas: read
// once the rows are.
type storedInParts struct {
	index    int
	size     int64
	partsKey sql.NullString
	storedAs int
	gitID    plumbing.Hash
}

// patchBlob answers the content of the blob id kept as a delta (row), reading its chain.
func patchBlob(ctx context.Context, q querier, id plumbing.Hash, row store.BlobRow, cache *store.BlobCache) ([]byte, error) {
	return store.PatchBlob(id, row, func(base plumbing.Hash) (store.BlobRow, error) {
		var (
			r        store.BlobRow
			partsKey sql.NullString
		)
		if err := q.QueryRowContext(ctx, `SELECT content, stored_as, size, parts_key FROM blobs WHERE git_id = ?`, base[:]).
			Scan(&r.Data, &r.StoredAs, &r.Size, &partsKey); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				// Not ErrNotFound: the blob asked for is stored, and its base must be.
				return r, errors.New("not stored")
			}
			return r, interpretError("read blob "+base.String(), err)
		}
		r.InParts = partsKey.Valid
		if r.InParts && r.Size <= store.MaxPartsBase {
			whole, err := blobContent(ctx, q, "blob "+base.String(), base, nil, store.StoredPlain, r.Size, partsKey, nil)
			return store.BlobRow{Data: whole, StoredAs: store.StoredPlain, Size: r.Size}, err
		}
		return r, nil
	}, cache)
}

// hashOf answers a git id as a column holds it.
func hashOf(raw []byte) plumbing.Hash {
	var h plumbing.Hash
	copy(h[:], raw)
	return h
}
