package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/jackc/pgx/v5"

	"github.com/ag-coord/ag/internal/store"
)

const blobUploadCols = `id, principal, digest, size, part_bytes, received, hash_state, created_at, parts_key`

// blobUploadScan is a row of blobUploadCols: an upload and the key of its parts.
type blobUploadScan struct {
	u                         store.BlobUpload
	size, partBytes, received int64
	partsKey                  string
}

func (s *blobUploadScan) dest() []any {
	return []any{&s.u.ID, &s.u.Principal, &s.u.Digest, &s.size, &s.partBytes, &s.received, &s.u.HashState,
		&s.u.CreatedAt, &s.partsKey}
}

func (s *blobUploadScan) upload() store.BlobUpload {
	u := s.u
	u.Size, u.PartBytes, u.Received = uint64(s.size), uint64(s.partBytes), uint64(s.received)
	u.CreatedAt = u.CreatedAt.UTC()
	return u
}

// startBlobUploadSQL creates the upload $2 or answers it as stored. The update that changes
// nothing makes the statement answer the stored row even when the row it conflicts with was
// committed after the statement's snapshot, where a SELECT would find nothing.
var startBlobUploadSQL = q(`INSERT INTO blob_uploads
	(id, principal, digest, size, part_bytes, received, hash_state, parts_key, created_at)
VALUES ($2, $3, $4, $5, $6, 0, $7, $8, {now})
ON CONFLICT (id) DO UPDATE SET id = excluded.id
RETURNING ` + blobUploadCols)

// StartBlobUpload answers the upload u.ID, creating it when there is none.
func (db *DB) StartBlobUpload(ctx context.Context, u store.BlobUpload) (store.BlobUpload, error) {
	if err := store.CheckBlobUpload(u); err != nil {
		return store.BlobUpload{}, fmt.Errorf("start blob upload: %w", err)
	}
	var s blobUploadScan
	if err := db.pool.QueryRow(ctx, startBlobUploadSQL, db.now(), u.ID, u.Principal, u.Digest, int64(u.Size),
		int64(u.PartBytes), nonNilBytes(u.HashState), store.NewID("parts")).Scan(s.dest()...); err != nil {
		return store.BlobUpload{}, interpretError("start blob upload "+u.ID, err)
	}
	return s.upload(), nil
}

// GetBlobUpload answers an upload as it stands.
func (db *DB) GetBlobUpload(ctx context.Context, id string) (store.BlobUpload, error) {
	var s blobUploadScan
	if err := db.pool.QueryRow(ctx, `SELECT `+blobUploadCols+` FROM blob_uploads WHERE id = $1`, id).Scan(s.dest()...); err != nil {
		return store.BlobUpload{}, interpretError("get blob upload "+id, err)
	}
	return s.upload(), nil
}

// AppendBlobUpload stores the next part of an upload and, with p.Complete, makes its parts the
// blob. The upload's row is locked from its read on, so of two appends at the same offset the
// second reads what the first received, once it committed, and is refused.
func (db *DB) AppendBlobUpload(ctx context.Context, p store.AppendBlobUploadParams) (store.BlobUpload, error) {
	what := "append to blob upload " + p.ID
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return store.BlobUpload{}, interpretError(what, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	var s blobUploadScan
	if err := tx.QueryRow(ctx, `SELECT `+blobUploadCols+` FROM blob_uploads WHERE id = $1 FOR UPDATE`, p.ID).
		Scan(s.dest()...); err != nil {
		return store.BlobUpload{}, interpretError(what, err)
	}
	u := s.upload()
	if err := store.CheckBlobPart(u, p); err != nil {
		return store.BlobUpload{}, err
	}
	u.Received = p.Offset + uint64(len(p.Content))
	u.HashState = p.HashState
	seq := int64(p.Offset / u.PartBytes)
	if p.Complete == nil {
		if _, err := tx.Exec(ctx, `WITH part AS (INSERT INTO blob_parts (parts_key, seq, content) VALUES ($2, $3, $4))
			UPDATE blob_uploads SET received = $5, hash_state = $6 WHERE id = $1`,
			p.ID, s.partsKey, seq, nonNilBytes(p.Content), int64(u.Received), nonNilBytes(p.HashState)); err != nil {
			return store.BlobUpload{}, interpretError(fmt.Sprintf("%s: the part from offset %d", what, p.Offset), err)
		}
	} else {
		if _, err := tx.Exec(ctx, `INSERT INTO blob_parts (parts_key, seq, content) VALUES ($1, $2, $3)`,
			s.partsKey, seq, nonNilBytes(p.Content)); err != nil {
			return store.BlobUpload{}, interpretError(fmt.Sprintf("%s: the part from offset %d", what, p.Offset), err)
		}
		if err := completeBlobUpload(ctx, tx, u, s.partsKey, *p.Complete); err != nil {
			return store.BlobUpload{}, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return store.BlobUpload{}, interpretError(what, err)
	}
	return u, nil
}

// completeBlobUpload makes the parts under partsKey the blob c, unless a blob of that digest
// is stored already (then the parts go), and ends the upload u. A blob of the same digest
// completed at the same time by another upload is waited for by the insert, which then does
// nothing.
func completeBlobUpload(ctx context.Context, tx pgx.Tx, u store.BlobUpload, partsKey string, c store.CompletedBlob) error {
	what := "complete blob upload " + u.ID
	tag, err := tx.Exec(ctx, `INSERT INTO blobs (digest, content, size, git_id, parts_key, part_bytes)
		VALUES ($1, '', $2, $3, $4, $5) ON CONFLICT (digest) DO NOTHING`,
		c.Digest, int64(u.Size), c.GitID[:], partsKey, int64(u.PartBytes))
	if err != nil {
		return interpretError(what+": store blob "+c.Digest, err)
	}
	if tag.RowsAffected() == 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM blob_parts WHERE parts_key = $1`, partsKey); err != nil {
			return interpretError(what+": drop the parts of a blob already stored", err)
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM blob_uploads WHERE id = $1`, u.ID); err != nil {
		return interpretError(what, err)
	}
	return nil
}

// DropBlobUploads removes the uploads started before before, and the upload id, with their
// parts. A blob's parts are never under an upload's key: completing an upload deletes its row.
//
// The parts are deleted by a statement of their own, after the uploads': the delete of an
// upload waits for an append holding its row, and only a statement begun after that append
// committed (read committed takes a snapshot per statement) sees the part it stored.
func (db *DB) DropBlobUploads(ctx context.Context, before time.Time, id string) (int, error) {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return 0, interpretError("drop blob uploads", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	rows, err := tx.Query(ctx, `DELETE FROM blob_uploads WHERE created_at < $1 OR ($2 <> '' AND id = $2)
		RETURNING parts_key`, before, id)
	if err != nil {
		return 0, interpretError("drop blob uploads", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, interpretError("drop blob uploads", err)
	}
	if len(keys) == 0 {
		return 0, nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM blob_parts WHERE parts_key = ANY($1::text[])`, keys); err != nil {
		return 0, interpretError("drop blob uploads: their parts", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, interpretError("drop blob uploads", err)
	}
	return len(keys), nil
}

// ReadBlob calls fn with a blob's content from offset on, a part at a time for a blob stored
// in parts. Each part is read by a query of its own before fn runs, so that a slow fn (a
// client reading over the network) holds no connection. A stored blob's parts never change,
// so the parts read apart are one blob's.
func (db *DB) ReadBlob(ctx context.Context, digest string, offset uint64, fn func(piece []byte) error) error {
	var (
		content   []byte
		size      int64
		partsKey  *string
		partBytes *int64
		storedAs  int16
	)
	var gitID []byte
	if err := db.pool.QueryRow(ctx, `SELECT content, size, parts_key, part_bytes, stored_as, git_id FROM blobs WHERE digest = $1`, digest).
		Scan(&content, &size, &partsKey, &partBytes, &storedAs, &gitID); err != nil {
		return interpretError("read blob "+digest, err)
	}
	if partsKey == nil || partBytes == nil {
		content, err := blobContent(ctx, db.pool, "blob "+digest, hashOf(gitID), content, int(storedAs), size, nil, nil)
		if err != nil {
			return fmt.Errorf("read blob %s: %w", digest, err)
		}
		if offset >= uint64(len(content)) {
			return nil
		}
		return fn(content[offset:])
	}
	return store.ReadBlobParts(uint64(size), uint64(*partBytes), offset, func(seq uint64) ([]byte, error) {
		var part []byte
		if err := db.pool.QueryRow(ctx, `SELECT content FROM blob_parts WHERE parts_key = $1 AND seq = $2`,
			*partsKey, int64(seq)).Scan(&part); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				// Not ErrNotFound: the blob is stored, and answering it short would be wrong.
				return nil, fmt.Errorf("read blob %s: part %d is missing", digest, seq)
			}
			return nil, interpretError(fmt.Sprintf("read blob %s: part %d", digest, seq), err)
		}
		return part, nil
	}, fn)
}

// blobContent answers the whole content of the blob gitID: content as stored (storedAs), made
// from its chain of deltas (sharing cache, which may be nil), or, when partsKey is set, its
// parts joined in order. A stored blob's parts never change, so qr may be any
// connection.
func blobContent(ctx context.Context, qr querier, what string, gitID plumbing.Hash, content []byte, storedAs int, size int64, partsKey *string, cache *store.BlobCache) ([]byte, error) {
	if storedAs == store.StoredPackDelta && partsKey == nil {
		return patchBlob(ctx, qr, gitID, store.BlobRow{Data: content, StoredAs: storedAs, Size: size}, cache)
	}
	if partsKey == nil {
		content, err := store.DecodeStored(content, storedAs, size)
		return nonNilBytes(content), err
	}
	rows, err := qr.Query(ctx, `SELECT content FROM blob_parts WHERE parts_key = $1 ORDER BY seq`, *partsKey)
	if err != nil {
		return nil, interpretError("read the parts of "+what, err)
	}
	whole := make([]byte, 0, size)
	var part []byte
	if _, err := pgx.ForEachRow(rows, []any{&part}, func() error {
		whole = append(whole, part...)
		return nil
	}); err != nil {
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
	partsKey *string
	storedAs int
	gitID    plumbing.Hash
}

// nonNilBytes keeps an absent byte string as an empty one, which pgx would send as NULL.
func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// patchBlob answers the content of the blob id kept as a delta (row), reading its chain.
func patchBlob(ctx context.Context, qr querier, id plumbing.Hash, row store.BlobRow, cache *store.BlobCache) ([]byte, error) {
	return store.PatchBlob(id, row, func(base plumbing.Hash) (store.BlobRow, error) {
		var (
			r        store.BlobRow
			form     int16
			partsKey *string
		)
		if err := qr.QueryRow(ctx, `SELECT content, stored_as, size, parts_key FROM blobs WHERE git_id = $1`, base[:]).
			Scan(&r.Data, &form, &r.Size, &partsKey); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				// Not ErrNotFound: the blob asked for is stored, and its base must be.
				return r, errors.New("not stored")
			}
			return r, interpretError("read blob "+base.String(), err)
		}
		r.StoredAs, r.InParts = int(form), partsKey != nil
		if r.InParts && r.Size <= store.MaxPartsBase {
			whole, err := blobContent(ctx, qr, "blob "+base.String(), base, nil, store.StoredPlain, r.Size, partsKey, nil)
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
