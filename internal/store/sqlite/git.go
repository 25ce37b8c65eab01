package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// querier is what both a transaction and a connection pool answer.
type querier interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
	QueryRowContext(context.Context, string, ...any) *sql.Row
}

// gitBackend is store.GitBackend over a transaction (or, to read, the read pool).
type gitBackend struct {
	q querier
	// beforeStoredAs: the schema is one before the stored_as columns (a migration that runs
	// before them), whose rows all keep their bytes whole.
	beforeStoredAs bool
}

func (g gitBackend) ReadGitObject(ctx context.Context, id plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	if g.beforeStoredAs {
		return readGitObjectAs(ctx, g.q, id, "0")
	}
	return readGitObject(ctx, g.q, id)
}

func readGitObject(ctx context.Context, q querier, id plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	return readGitObjectAs(ctx, q, id, "stored_as")
}

// readGitObjectAs reads a git object whose rows' form is the SQL expression storedAs.
func readGitObjectAs(ctx context.Context, q querier, id plumbing.Hash, storedAs string) (plumbing.ObjectType, []byte, error) {
	var (
		typ      int
		data     []byte
		size     int64
		partsKey sql.NullString
		form     int
	)
	err := q.QueryRowContext(ctx, `SELECT type, data, -1, NULL, `+storedAs+` FROM git_objects WHERE id = ?1
		UNION ALL SELECT 3, content, size, parts_key, `+storedAs+` FROM blobs WHERE git_id = ?1 LIMIT 1`, id[:]).Scan(&typ, &data, &size, &partsKey, &form)
	if err != nil {
		return 0, nil, interpretError("read git object "+id.String(), err)
	}
	if form == store.StoredDelta {
		data, err = store.PatchStoredDelta(id, data, func(anchor plumbing.Hash) ([]byte, error) { return readAnchor(ctx, q, anchor) })
	} else {
		data, err = blobContent(ctx, q, "git object "+id.String(), id, data, form, size, partsKey, nil)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("read git object %s: %w", id, err)
	}
	return plumbing.ObjectType(typ), data, nil
}

func (g gitBackend) PutGitObjects(ctx context.Context, objects []store.GitObject) error {
	return g.putGitObjects(ctx, objects, nil)
}

// putGitObjects stores objects; encoded holds each one's data as its row keeps it
// (store.EncodeEach), nil to compress them here.
func (g gitBackend) putGitObjects(ctx context.Context, objects []store.GitObject, encoded []store.Encoded) error {
	if encoded == nil && !g.beforeStoredAs {
		encoded = encodeGitObjects(objects)
	}
	for i, o := range objects {
		if g.beforeStoredAs {
			if _, err := g.q.ExecContext(ctx, `INSERT OR IGNORE INTO git_objects (id, type, data) VALUES (?, ?, ?)`,
				o.ID[:], int(o.Type), nonNil(o.Data)); err != nil {
				return interpretError("store git object "+o.ID.String(), err)
			}
			continue
		}
		if _, err := g.q.ExecContext(ctx, `INSERT OR IGNORE INTO git_objects (id, type, data, stored_as) VALUES (?, ?, ?, ?)`,
			o.ID[:], int(o.Type), nonNil(encoded[i].Data), encoded[i].StoredAs); err != nil {
			return interpretError("store git object "+o.ID.String(), err)
		}
	}
	return nil
}

func (g gitBackend) BlobGitIDs(ctx context.Context, digests []string) (map[string]plumbing.Hash, error) {
	out := make(map[string]plumbing.Hash, len(digests))
	for chunk := range slices.Chunk(digests, missingChunk) {
		args := make([]any, len(chunk))
		for i, d := range chunk {
			args[i] = d
		}
		rows, err := g.q.QueryContext(ctx, `SELECT digest, git_id FROM blobs WHERE digest IN (`+placeholders(1, len(chunk))+`)`, args...)
		if err != nil {
			return nil, interpretError("blob git ids", err)
		}
		for rows.Next() {
			var (
				d  string
				id []byte
			)
			if err := rows.Scan(&d, &id); err != nil {
				rows.Close()
				return nil, interpretError("blob git ids", err)
			}
			var h plumbing.Hash
			copy(h[:], id)
			out[d] = h
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, interpretError("blob git ids", err)
		}
	}
	return out, nil
}

func (g gitBackend) BlobsByGitID(ctx context.Context, ids []plumbing.Hash) (map[plumbing.Hash]store.BlobRef, error) {
	out := make(map[plumbing.Hash]store.BlobRef, len(ids))
	for chunk := range slices.Chunk(ids, missingChunk) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id[:]
		}
		rows, err := g.q.QueryContext(ctx, `SELECT git_id, digest, size FROM blobs WHERE git_id IN (`+placeholders(1, len(chunk))+`)`, args...)
		if err != nil {
			return nil, interpretError("blobs by git id", err)
		}
		for rows.Next() {
			var (
				raw  []byte
				ref  store.BlobRef
				size int64
			)
			if err := rows.Scan(&raw, &ref.Digest, &size); err != nil {
				rows.Close()
				return nil, interpretError("blobs by git id", err)
			}
			ref.Size = uint64(size)
			var h plumbing.Hash
			copy(h[:], raw)
			out[h] = ref
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, interpretError("blobs by git id", err)
		}
	}
	return out, nil
}

// PutGitObjects stores trees and commits.
func (d *DB) PutGitObjects(ctx context.Context, objects []store.GitObject) error {
	if len(objects) == 0 {
		return nil
	}
	encoded := encodeGitObjects(objects) // before the transaction, on every CPU
	return d.write(ctx, "put git objects", func(ctx context.Context, tx *sql.Tx) error {
		return gitBackend{q: tx}.putGitObjects(ctx, objects, encoded)
	})
}

// MissingGitObjects answers the ids the store holds neither as objects nor as blobs.
func (d *DB) MissingGitObjects(ctx context.Context, ids []plumbing.Hash) ([]plumbing.Hash, error) {
	held := make(map[plumbing.Hash]bool, len(ids))
	for chunk := range slices.Chunk(ids, missingChunk) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id[:]
		}
		in := placeholders(1, len(chunk))
		rows, err := d.r.QueryContext(ctx, `SELECT id FROM git_objects WHERE id IN (`+in+`)
			UNION ALL SELECT git_id FROM blobs WHERE git_id IN (`+in+`)`, args...)
		if err != nil {
			return nil, interpretError("missing git objects", err)
		}
		for rows.Next() {
			var raw []byte
			if err := rows.Scan(&raw); err != nil {
				rows.Close()
				return nil, interpretError("missing git objects", err)
			}
			var h plumbing.Hash
			copy(h[:], raw)
			held[h] = true
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, interpretError("missing git objects", err)
		}
	}
	var missing []plumbing.Hash
	for _, id := range ids {
		if !held[id] {
			missing = append(missing, id)
		}
	}
	return missing, nil
}

// RecordShallowCommits records commits stored without their parents.
func (d *DB) RecordShallowCommits(ctx context.Context, ids []plumbing.Hash) error {
	if len(ids) == 0 {
		return nil
	}
	return d.write(ctx, "record shallow commits", func(ctx context.Context, tx *sql.Tx) error {
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, `INSERT INTO git_shallow_commits (id) VALUES (?) ON CONFLICT DO NOTHING`, id[:]); err != nil {
				return interpretError("record shallow commits", err)
			}
		}
		return nil
	})
}

// HasShallowCommits reports whether a commit was ever stored without its parents.
func (d *DB) HasShallowCommits(ctx context.Context) (bool, error) {
	var held bool
	if err := d.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM git_shallow_commits)`).Scan(&held); err != nil {
		return false, interpretError("shallow commits", err)
	}
	return held, nil
}

// ReadGitObjects answers the git objects the store holds among ids, blobs stored in parts
// joined whole.
func (d *DB) ReadGitObjects(ctx context.Context, ids []plumbing.Hash) ([]store.GitObject, error) {
	var (
		out     []store.GitObject
		inParts []storedInParts
		deltas  []int // of out, kept as deltas
	)
	for chunk := range slices.Chunk(ids, missingChunk) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id[:]
		}
		in := placeholders(1, len(chunk))
		rows, err := d.r.QueryContext(ctx, `SELECT id, type, data, -1, NULL, stored_as FROM git_objects WHERE id IN (`+in+`)
			UNION ALL SELECT git_id, 3, content, size, parts_key, stored_as FROM blobs WHERE git_id IN (`+in+`)`, args...)
		if err != nil {
			return nil, interpretError("read git objects", err)
		}
		for rows.Next() {
			var (
				raw      []byte
				typ      int
				data     []byte
				size     int64
				partsKey sql.NullString
				storedAs int
			)
			if err := rows.Scan(&raw, &typ, &data, &size, &partsKey, &storedAs); err != nil {
				rows.Close()
				return nil, interpretError("read git objects", err)
			}
			if partsKey.Valid || storedAs == store.StoredPackDelta {
				inParts = append(inParts, storedInParts{index: len(out), size: size, partsKey: partsKey, storedAs: storedAs})
			} else if storedAs == store.StoredDelta {
				deltas = append(deltas, len(out))
			} else if data, err = store.DecodeStored(data, storedAs, size); err != nil {
				rows.Close()
				return nil, fmt.Errorf("read git objects: %x: %w", raw, err)
			}
			o := store.GitObject{Type: plumbing.ObjectType(typ), Data: nonNil(data)}
			copy(o.ID[:], raw)
			out = append(out, o)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, interpretError("read git objects", err)
		}
	}
	cache := store.NewReadCache()
	for _, p := range inParts {
		o := &out[p.index]
		var err error
		if o.Data, err = blobContent(ctx, d.r, "git object "+o.ID.String(), o.ID, o.Data, p.storedAs, p.size, p.partsKey, cache); err != nil {
			return nil, fmt.Errorf("read git objects: %w", err)
		}
	}
	if err := store.PatchDeltas(out, deltas, func(anchor plumbing.Hash) ([]byte, error) { return readAnchor(ctx, d.r, anchor) }); err != nil {
		return nil, fmt.Errorf("read git objects: %w", err)
	}
	return out, nil
}

// BlobsByGitID answers the digest and size of each stored blob among ids.
func (d *DB) BlobsByGitID(ctx context.Context, ids []plumbing.Hash) (map[plumbing.Hash]store.BlobRef, error) {
	return gitBackend{q: d.r}.BlobsByGitID(ctx, ids)
}

// ReadGitObject answers a git object of any repository.
func (d *DB) ReadGitObject(ctx context.Context, id plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	return readGitObject(ctx, d.r, id)
}

// gitMigration is the migration that brings the git content store (0008_git.sql).
const gitMigration = 8

// backfillGit gives what was stored before the git content store its git objects, inside the
// migration's transaction: each blob its git id, each revision its git tree, and each
// repository's mainline, from its first revision on, one commit per revision. It does nothing
// on a store that has them.
func backfillGit(ctx context.Context, tx *sql.Tx, emailDomain string) error {
	var storedAs int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('git_objects') WHERE name = 'stored_as'`).Scan(&storedAs); err != nil {
		return fmt.Errorf("backfill git: %w", err)
	}
	b := gitBackend{q: tx, beforeStoredAs: storedAs == 0}
	if err := backfillBlobIDs(ctx, tx); err != nil {
		return err
	}
	objs := store.NewGitObjects(ctx, b)
	rows, err := tx.QueryContext(ctx, `SELECT r.id, t.encoding FROM revisions r JOIN trees t ON t.digest = r.tree_digest
		WHERE r.git_tree = ''`)
	if err != nil {
		return fmt.Errorf("backfill git trees: %w", err)
	}
	trees := map[string]plumbing.Hash{}
	for rows.Next() {
		var (
			id  string
			enc []byte
		)
		if err := rows.Scan(&id, &enc); err != nil {
			rows.Close()
			return fmt.Errorf("backfill git trees: %w", err)
		}
		t, err := repo.DecodeTree(enc)
		if err != nil {
			rows.Close()
			return fmt.Errorf("backfill git trees: revision %s: %w", id, err)
		}
		root, err := store.ImportFlatTree(ctx, b, objs, t)
		if err != nil {
			rows.Close()
			return fmt.Errorf("backfill git trees: revision %s: %w", id, err)
		}
		trees[id] = root
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return fmt.Errorf("backfill git trees: %w", err)
	}
	if err := objs.Flush(); err != nil {
		return fmt.Errorf("backfill git trees: %w", err)
	}
	for id, root := range trees {
		if _, err := tx.ExecContext(ctx, `UPDATE revisions SET git_tree = ? WHERE id = ?`, root.String(), id); err != nil {
			return fmt.Errorf("backfill git trees: %w", err)
		}
	}
	return backfillCommits(ctx, tx, objs, emailDomain)
}

func backfillBlobIDs(ctx context.Context, tx *sql.Tx) error {
	for {
		rows, err := tx.QueryContext(ctx, `SELECT digest, content FROM blobs WHERE git_id IS NULL LIMIT 500`)
		if err != nil {
			return fmt.Errorf("backfill blob git ids: %w", err)
		}
		ids := map[string]plumbing.Hash{}
		for rows.Next() {
			var (
				d       string
				content []byte
			)
			if err := rows.Scan(&d, &content); err != nil {
				rows.Close()
				return fmt.Errorf("backfill blob git ids: %w", err)
			}
			ids[d] = gitstore.BlobID(content)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("backfill blob git ids: %w", err)
		}
		if len(ids) == 0 {
			return nil
		}
		for d, id := range ids {
			if _, err := tx.ExecContext(ctx, `UPDATE blobs SET git_id = ? WHERE digest = ?`, id[:], d); err != nil {
				return fmt.Errorf("backfill blob git ids: %w", err)
			}
		}
	}
}

// backfillCommits writes the commits of every repository's mainline that has none yet.
func backfillCommits(ctx context.Context, tx *sql.Tx, objs *store.GitObjects, emailDomain string) error {
	rows, err := tx.QueryContext(ctx, `SELECT name, mainline FROM repositories r
		WHERE EXISTS (SELECT 1 FROM revisions v WHERE v.id = r.mainline AND v.git_commit = '')`)
	if err != nil {
		return fmt.Errorf("backfill commits: %w", err)
	}
	heads := map[string]string{}
	for rows.Next() {
		var name, mainline string
		if err := rows.Scan(&name, &mainline); err != nil {
			rows.Close()
			return fmt.Errorf("backfill commits: %w", err)
		}
		heads[name] = mainline
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return fmt.Errorf("backfill commits: %w", err)
	}
	for name, head := range heads {
		var chain []store.LegacyRevision
		for id := head; id != ""; {
			var (
				r        store.LegacyRevision
				created  int64
				authored int64
				tokens   string
			)
			// A change's updated_at is when the mainline moved to it: what the commit is dated.
			err := tx.QueryRowContext(ctx, `SELECT v.id, v.parent, v.change_id, v.author, v.git_tree, v.git_commit, coalesce(c.updated_at, v.created_at),
					coalesce(c.message, ''), coalesce(c.attestation_digest, ''), coalesce(c.fencing_tokens, '[]'), coalesce(c.created_at, v.created_at)
				FROM revisions v LEFT JOIN changes c ON c.id = v.change_id WHERE v.id = ? AND v.repository = ?`, id, name).
				Scan(&r.ID, &r.Parent, &r.ChangeID, &r.Author, &r.GitTree, &r.GitCommit, &created,
					&r.Message, &r.Attestation, &tokens, &authored)
			if err != nil {
				return fmt.Errorf("backfill commits of %q: revision %s: %w", name, id, err)
			}
			r.CommittedAt = fromMicros(created)
			r.AuthoredAt = fromMicros(authored)
			chain = append(chain, r)
			if r.GitCommit != "" {
				break
			}
			id = r.Parent
		}
		commits, err := store.LegacyCommits(objs, name, chain, emailDomain)
		if err != nil {
			return fmt.Errorf("backfill commits of %q: %w", name, err)
		}
		if err := objs.Flush(); err != nil {
			return fmt.Errorf("backfill commits of %q: %w", name, err)
		}
		for id, commit := range commits {
			if _, err := tx.ExecContext(ctx, `UPDATE revisions SET git_commit = ? WHERE id = ?`, commit.String(), id); err != nil {
				return fmt.Errorf("backfill commits of %q: %w", name, err)
			}
		}
	}
	return nil
}

// encodeGitObjects answers the data of objects as their rows keep them: a tree's delta as it is,
// anything else compressed when that pays.
func encodeGitObjects(objects []store.GitObject) []store.Encoded {
	data := make([][]byte, len(objects))
	for i, o := range objects {
		if o.Delta == nil {
			data[i] = nonNil(o.Data)
		}
	}
	out := store.EncodeEach(data)
	for i, o := range objects {
		if o.Delta != nil {
			out[i] = store.Encoded{Data: o.Delta, StoredAs: store.StoredDelta}
		}
	}
	return out
}

// GitAnchors answers of stored trees the tree each is kept whole as or against
// (store.GitAnchorReader).
func (d *DB) GitAnchors(ctx context.Context, trees []plumbing.Hash) (map[plumbing.Hash]plumbing.Hash, error) {
	return gitBackend{q: d.r}.GitAnchors(ctx, trees)
}

// GitAnchors implements store.GitAnchorReader.
func (g gitBackend) GitAnchors(ctx context.Context, trees []plumbing.Hash) (map[plumbing.Hash]plumbing.Hash, error) {
	if g.beforeStoredAs {
		return nil, fmt.Errorf("git anchors: a schema before stored_as keeps no deltas")
	}
	out := make(map[plumbing.Hash]plumbing.Hash, len(trees))
	for chunk := range slices.Chunk(trees, missingChunk) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id[:]
		}
		rows, err := g.q.QueryContext(ctx, `SELECT id, stored_as, substr(data, 1, 20) FROM git_objects WHERE type = 2 AND id IN (`+placeholders(1, len(chunk))+`)`, args...)
		if err != nil {
			return nil, interpretError("git anchors", err)
		}
		for rows.Next() {
			var (
				raw, head []byte
				form      int
			)
			if err := rows.Scan(&raw, &form, &head); err != nil {
				rows.Close()
				return nil, interpretError("git anchors", err)
			}
			var id plumbing.Hash
			copy(id[:], raw)
			if anchor, ok := store.AnchorOf(id, form, head); ok {
				out[id] = anchor
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, interpretError("git anchors", err)
		}
	}
	return out, nil
}

// readAnchor answers the content of the tree anchor, which a delta names: kept whole, or the
// store is damaged.
func readAnchor(ctx context.Context, q querier, anchor plumbing.Hash) ([]byte, error) {
	var (
		data []byte
		form int
	)
	if err := q.QueryRowContext(ctx, `SELECT data, stored_as FROM git_objects WHERE id = ? AND type = 2`, anchor[:]).Scan(&data, &form); err != nil {
		return nil, interpretError("read git object "+anchor.String(), err)
	}
	// An anchor kept as a delta itself is no form DecodeStored knows: damage, not a tree.
	return store.DecodeStored(data, form, -1)
}

// PutPackedBlobs stores blobs an import sent, in the form the caller checked.
func (d *DB) PutPackedBlobs(ctx context.Context, blobs []store.PackedBlob) error {
	if len(blobs) == 0 {
		return nil
	}
	return d.write(ctx, "put packed blobs", func(ctx context.Context, tx *sql.Tx) error {
		if err := store.CheckPackedDepths(blobs, func(bases []plumbing.Hash) (map[plumbing.Hash]store.BaseRow, error) {
			return baseRows(ctx, tx, bases)
		}); err != nil {
			return err
		}
		for _, b := range blobs {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO blobs (digest, content, size, git_id, stored_as) VALUES (?, ?, ?, ?, ?)`,
				b.Digest, nonNil(b.Data), b.Size, b.GitID[:], b.StoredAs); err != nil {
				return interpretError("store blob "+b.Digest, err)
			}
		}
		return nil
	})
}

// BlobDepths answers how many deltas deep each stored blob among ids is that a delta may be
// against: one not stored in parts.
func (d *DB) BlobDepths(ctx context.Context, ids []plumbing.Hash) (map[plumbing.Hash]int, error) {
	rows, err := baseRows(ctx, d.r, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[plumbing.Hash]int, len(rows))
	for id, r := range rows {
		if depth, ok := store.DepthOf(r.StoredAs, r.Head); ok && !r.InParts {
			out[id] = depth
		}
	}
	return out, nil
}

// ReadStoredDeltas answers the blobs among ids kept as deltas, as they are kept.
func (d *DB) ReadStoredDeltas(ctx context.Context, ids []plumbing.Hash) (map[plumbing.Hash]store.PackDelta, error) {
	out := map[plumbing.Hash]store.PackDelta{}
	for chunk := range slices.Chunk(ids, missingChunk) {
		args := make([]any, len(chunk)+1)
		args[0] = store.StoredPackDelta
		for i, id := range chunk {
			args[i+1] = id[:]
		}
		rows, err := d.r.QueryContext(ctx, `SELECT git_id, content FROM blobs
			WHERE stored_as = ?1 AND git_id IN (`+placeholders(2, len(chunk))+`)`, args...)
		if err != nil {
			return nil, interpretError("read stored deltas", err)
		}
		for rows.Next() {
			var raw, data []byte
			if err := rows.Scan(&raw, &data); err != nil {
				rows.Close()
				return nil, interpretError("read stored deltas", err)
			}
			pd, err := store.ParsePackDelta(data)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("read stored deltas: blob %x: %w", raw, err)
			}
			out[hashOf(raw)] = pd
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, interpretError("read stored deltas", err)
		}
	}
	return out, nil
}

// baseRows answers what a delta against each stored blob among ids needs of its row.
func baseRows(ctx context.Context, q querier, ids []plumbing.Hash) (map[plumbing.Hash]store.BaseRow, error) {
	out := make(map[plumbing.Hash]store.BaseRow, len(ids))
	for chunk := range slices.Chunk(ids, missingChunk) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id[:]
		}
		rows, err := q.QueryContext(ctx, `SELECT git_id, stored_as, substr(content, 1, 21), parts_key IS NOT NULL FROM blobs
			WHERE git_id IN (`+placeholders(1, len(chunk))+`)`, args...)
		if err != nil {
			return nil, interpretError("read delta bases", err)
		}
		for rows.Next() {
			var (
				raw []byte
				r   store.BaseRow
			)
			if err := rows.Scan(&raw, &r.StoredAs, &r.Head, &r.InParts); err != nil {
				rows.Close()
				return nil, interpretError("read delta bases", err)
			}
			out[hashOf(raw)] = r
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, interpretError("read delta bases", err)
		}
	}
	return out, nil
}

// ReplaceWithDeltas keeps blobs stored whole as their deltas instead, each that still may be.
func (d *DB) ReplaceWithDeltas(ctx context.Context, rewrites []store.BlobRewrite) (int, error) {
	var n int
	err := d.write(ctx, "keep blobs as deltas", func(ctx context.Context, tx *sql.Tx) error {
		n = 0
		for _, rw := range rewrites {
			var (
				form    int
				inParts bool
				based   bool
			)
			err := tx.QueryRowContext(ctx, `SELECT stored_as, parts_key IS NOT NULL FROM blobs WHERE git_id = ?`, rw.Blob[:]).Scan(&form, &inParts)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return interpretError("keep blobs as deltas", err)
			}
			// A delta against it would grow its chain: such a blob stays whole.
			if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM blobs WHERE stored_as = 4 AND substr(content, 1, 20) = ?)`,
				rw.Blob[:]).Scan(&based); err != nil {
				return interpretError("keep blobs as deltas", err)
			}
			bases, err := baseRows(ctx, tx, []plumbing.Hash{rw.Base})
			if err != nil {
				return err
			}
			base, held := bases[rw.Base]
			depth, ok := store.RewriteDepth(rw, form, inParts, based, base, held)
			if !ok {
				continue
			}
			data := store.PackDelta{Base: rw.Base, Depth: depth, Len: rw.Len, Deflated: rw.Deflated}.Encode()
			res, err := tx.ExecContext(ctx, `UPDATE blobs SET content = ?, stored_as = ? WHERE git_id = ? AND stored_as IN (?, ?) AND parts_key IS NULL`,
				data, store.StoredPackDelta, rw.Blob[:], store.StoredZlib, store.StoredPlain)
			if err != nil {
				return interpretError("keep blobs as deltas", err)
			}
			if k, _ := res.RowsAffected(); k == 1 {
				n++
			}
		}
		return nil
	})
	return n, err
}

// BlobDeltaWalk answers the head the last walk of repository's mainline went down from.
func (d *DB) BlobDeltaWalk(ctx context.Context, repository string) (plumbing.Hash, error) {
	var raw []byte
	err := d.r.QueryRowContext(ctx, `SELECT head FROM blob_delta_walks WHERE repository = ?`, repository).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return plumbing.ZeroHash, nil
	}
	if err != nil {
		return plumbing.ZeroHash, interpretError("blob delta walk", err)
	}
	return hashOf(raw), nil
}

// RecordBlobDeltaWalk records that repository's mainline was walked down from head.
func (d *DB) RecordBlobDeltaWalk(ctx context.Context, repository string, head plumbing.Hash) error {
	return d.write(ctx, "record a blob delta walk", func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO blob_delta_walks (repository, head) VALUES (?, ?)
			ON CONFLICT (repository) DO UPDATE SET head = excluded.head`, repository, head[:]); err != nil {
			return interpretError("record a blob delta walk", err)
		}
		return nil
	})
}
