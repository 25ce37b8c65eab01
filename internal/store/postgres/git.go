package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// execQuerier is a transaction, a connection in one, or the pool.
type execQuerier interface {
	querier
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// gitBackend is store.GitBackend over qr. blobIDs, when set, answers the git ids of blobs
// already read in the same transaction without asking again.
type gitBackend struct {
	qr      execQuerier
	blobIDs map[string]plumbing.Hash
	// beforeStoredAs: the schema is one before the stored_as columns (a migration that runs
	// before them), whose rows all keep their bytes whole.
	beforeStoredAs bool
}

// PutGitObjects stores trees and commits.
func (db *DB) PutGitObjects(ctx context.Context, objects []store.GitObject) error {
	return gitBackend{qr: db.pool}.PutGitObjects(ctx, objects)
}

// RecordShallowCommits records commits stored without their parents.
func (db *DB) RecordShallowCommits(ctx context.Context, ids []plumbing.Hash) error {
	if len(ids) == 0 {
		return nil
	}
	raw := make([][]byte, len(ids))
	for i := range ids {
		raw[i] = ids[i][:]
	}
	_, err := db.pool.Exec(ctx, `INSERT INTO git_shallow_commits (id) SELECT unnest($1::bytea[]) ON CONFLICT DO NOTHING`, raw)
	if err != nil {
		return interpretError("record shallow commits", err)
	}
	return nil
}

// HasShallowCommits reports whether a commit was ever stored without its parents.
func (db *DB) HasShallowCommits(ctx context.Context) (bool, error) {
	var held bool
	if err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM git_shallow_commits)`).Scan(&held); err != nil {
		return false, interpretError("shallow commits", err)
	}
	return held, nil
}

// missingGitObjectsSQL answers the ids among $1 that neither git_objects nor blobs holds, in
// their order, one index probe per id and table (see missingBlobsSQL).
const missingGitObjectsSQL = `SELECT u.i FROM unnest($1::bytea[]) WITH ORDINALITY AS u(i, n)
LEFT JOIN LATERAL (SELECT 1 AS held FROM git_objects g WHERE g.id = u.i LIMIT 1) o ON true
LEFT JOIN LATERAL (SELECT 1 AS held FROM blobs b WHERE b.git_id = u.i LIMIT 1) x ON true
WHERE o.held IS NULL AND x.held IS NULL ORDER BY u.n`

// MissingGitObjects answers the ids the store holds neither as objects nor as blobs.
func (db *DB) MissingGitObjects(ctx context.Context, ids []plumbing.Hash) ([]plumbing.Hash, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	raw := make([][]byte, len(ids))
	for i := range ids {
		raw[i] = ids[i][:]
	}
	rows, err := db.pool.Query(ctx, missingGitObjectsSQL, raw)
	if err != nil {
		return nil, interpretError("missing git objects", err)
	}
	var missing []plumbing.Hash
	var id []byte
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		var h plumbing.Hash
		copy(h[:], id)
		missing = append(missing, h)
		return nil
	}); err != nil {
		return nil, interpretError("missing git objects", err)
	}
	return missing, nil
}

// ReadGitObjects answers the git objects the store holds among ids, blobs stored in parts
// joined whole.
func (db *DB) ReadGitObjects(ctx context.Context, ids []plumbing.Hash) ([]store.GitObject, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	raw := make([][]byte, len(ids))
	for i := range ids {
		raw[i] = ids[i][:]
	}
	rows, err := db.pool.Query(ctx, `SELECT id, type, data, -1::bigint, NULL::text, stored_as FROM git_objects WHERE id = ANY($1::bytea[])
		UNION ALL SELECT git_id, 3, content, size, parts_key, stored_as FROM blobs WHERE git_id = ANY($1::bytea[])`, raw)
	if err != nil {
		return nil, interpretError("read git objects", err)
	}
	var (
		out      []store.GitObject
		inParts  []storedInParts
		id       []byte
		typ      int16
		data     []byte
		size     int64
		partsKey *string
		storedAs int16
		deltas   []int // of out, kept as deltas
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &typ, &data, &size, &partsKey, &storedAs}, func() error {
		if partsKey != nil || storedAs == store.StoredPackDelta {
			inParts = append(inParts, storedInParts{index: len(out), size: size, partsKey: partsKey, storedAs: int(storedAs)})
		} else if storedAs == store.StoredDelta {
			deltas = append(deltas, len(out))
		} else if data, err = store.DecodeStored(data, int(storedAs), size); err != nil {
			return fmt.Errorf("%x: %w", id, err)
		}
		o := store.GitObject{Type: plumbing.ObjectType(typ), Data: nonNilBytes(data)}
		copy(o.ID[:], id)
		out = append(out, o)
		data = nil
		return nil
	}); err != nil {
		return nil, interpretError("read git objects", err)
	}
	cache := store.NewReadCache()
	for _, p := range inParts {
		o := &out[p.index]
		if o.Data, err = blobContent(ctx, db.pool, "git object "+o.ID.String(), o.ID, o.Data, p.storedAs, p.size, p.partsKey, cache); err != nil {
			return nil, err
		}
	}
	if err := store.PatchDeltas(out, deltas, func(anchor plumbing.Hash) ([]byte, error) { return readAnchor(ctx, db.pool, anchor) }); err != nil {
		return nil, fmt.Errorf("read git objects: %w", err)
	}
	return out, nil
}

// BlobsByGitID answers the digest and size of each stored blob among ids.
func (db *DB) BlobsByGitID(ctx context.Context, ids []plumbing.Hash) (map[plumbing.Hash]store.BlobRef, error) {
	return gitBackend{qr: db.pool}.BlobsByGitID(ctx, ids)
}

// ReadGitObject answers a git object of any repository.
func (db *DB) ReadGitObject(ctx context.Context, id plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	return gitBackend{qr: db.pool}.ReadGitObject(ctx, id)
}

const readGitObjectSQL = `SELECT type, data, -1::bigint, NULL::text, stored_as FROM git_objects WHERE id = $1
UNION ALL
SELECT 3, content, size, parts_key, stored_as FROM blobs WHERE git_id = $1
LIMIT 1`

// readGitObjectBeforeStoredAsSQL is readGitObjectSQL on a schema before the stored_as columns
// (the migrations that run before them), whose rows all keep their bytes whole.
const readGitObjectBeforeStoredAsSQL = `SELECT type, data, -1::bigint, NULL::text, 0::smallint FROM git_objects WHERE id = $1
UNION ALL
SELECT 3, content, size, parts_key, 0::smallint FROM blobs WHERE git_id = $1
LIMIT 1`

func (g gitBackend) ReadGitObject(ctx context.Context, id plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	var (
		typ      int16
		data     []byte
		size     int64
		partsKey *string
		storedAs int16
	)
	query := readGitObjectSQL
	if g.beforeStoredAs {
		query = readGitObjectBeforeStoredAsSQL
	}
	if err := g.qr.QueryRow(ctx, query, id[:]).Scan(&typ, &data, &size, &partsKey, &storedAs); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, nil, fmt.Errorf("git object %s: %w", id, store.ErrNotFound)
		}
		return 0, nil, interpretError("read git object "+id.String(), err)
	}
	var err error
	if storedAs == store.StoredDelta {
		data, err = store.PatchStoredDelta(id, data, func(anchor plumbing.Hash) ([]byte, error) { return readAnchor(ctx, g.qr, anchor) })
	} else {
		data, err = blobContent(ctx, g.qr, "git object "+id.String(), id, data, int(storedAs), size, partsKey, nil)
	}
	if err != nil {
		return 0, nil, err
	}
	return plumbing.ObjectType(typ), data, nil
}

// putGitObjectsSQL stores git objects that are not stored yet. Its second array holds each
// object's type and the form its data is stored in (store.EncodeStored) as one number,
// type + 16 × form (gitObjectArgs), so that the statements that embed it keep their arguments.
const putGitObjectsSQL = `INSERT INTO git_objects (id, type, data, stored_as)
SELECT i, t % 16, d, t / 16 FROM unnest($1::bytea[], $2::smallint[], $3::bytea[]) AS u(i, t, d)
ON CONFLICT (id) DO NOTHING`

// putGitObjectsArgs is putGitObjectsSQL with its arrays at $n, $n+1 and $n+2.
func putGitObjectsArgs(n int) string {
	return fmt.Sprintf(`INSERT INTO git_objects (id, type, data, stored_as)
	SELECT i, t %% 16, d, t / 16 FROM unnest($%d::bytea[], $%d::smallint[], $%d::bytea[]) AS u(i, t, d)
	ON CONFLICT (id) DO NOTHING`, n, n+1, n+2)
}

// pendingArgs answers the objects objs holds unflushed, and as putGitObjectsSQL's arguments,
// and forgets them: the caller stores them in its own statement (then objs.KeepDecoded).
func pendingArgs(objs *store.GitObjects) (pending []store.GitObject, ids [][]byte, types []int16, data [][]byte, err error) {
	if pending, err = objs.TakePending(); err != nil {
		return nil, nil, nil, nil, err
	}
	ids, types, data = gitObjectArgs(pending)
	return pending, ids, types, data, nil
}

// commitTime is the time a commit written now is dated: the store's clock when it has one,
// otherwise this replica's. The database's own now() is not known before the statement runs.
func (db *DB) commitTime() time.Time {
	if db.clock != nil {
		return db.clock.Now().UTC()
	}
	return time.Now().UTC()
}

// gitObjectArgs answers putGitObjectsSQL's arguments: ids, types with forms, stored data.
func gitObjectArgs(objects []store.GitObject) ([][]byte, []int16, [][]byte) {
	ids := make([][]byte, len(objects))
	types := make([]int16, len(objects))
	data := make([][]byte, len(objects))
	for i, o := range objects {
		ids[i] = o.ID[:]
		data[i] = nonNilBytes(o.Data)
	}
	for i, o := range objects {
		if o.Delta != nil {
			data[i] = nil // kept as its delta: not compressed for nothing
		}
	}
	for i, e := range store.EncodeEach(data) {
		if objects[i].Delta != nil {
			e = store.Encoded{Data: objects[i].Delta, StoredAs: store.StoredDelta}
		}
		data[i] = nonNilBytes(e.Data)
		types[i] = int16(objects[i].Type) + 16*int16(e.StoredAs)
	}
	return ids, types, data
}

// GitAnchors answers of stored trees the tree each is kept whole as or against
// (store.GitAnchorReader).
func (db *DB) GitAnchors(ctx context.Context, trees []plumbing.Hash) (map[plumbing.Hash]plumbing.Hash, error) {
	return gitBackend{qr: db.pool}.GitAnchors(ctx, trees)
}

// GitAnchors implements store.GitAnchorReader.
func (g gitBackend) GitAnchors(ctx context.Context, trees []plumbing.Hash) (map[plumbing.Hash]plumbing.Hash, error) {
	if g.beforeStoredAs {
		return nil, fmt.Errorf("git anchors: a schema before stored_as keeps no deltas")
	}
	raw := make([][]byte, len(trees))
	for i := range trees {
		raw[i] = trees[i][:]
	}
	rows, err := g.qr.Query(ctx, `SELECT id, stored_as, substring(data from 1 for 20) FROM git_objects WHERE type = 2 AND id = ANY($1::bytea[])`, raw)
	if err != nil {
		return nil, interpretError("git anchors", err)
	}
	out := make(map[plumbing.Hash]plumbing.Hash, len(trees))
	var (
		id, head []byte
		form     int16
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &form, &head}, func() error {
		var tree plumbing.Hash
		copy(tree[:], id)
		if anchor, ok := store.AnchorOf(tree, int(form), head); ok {
			out[tree] = anchor
		}
		return nil
	}); err != nil {
		return nil, interpretError("git anchors", err)
	}
	return out, nil
}

// readAnchor answers the content of the tree anchor, which a delta names: kept whole, or the
// store is damaged.
func readAnchor(ctx context.Context, q querier, anchor plumbing.Hash) ([]byte, error) {
	var (
		data []byte
		form int16
	)
	if err := q.QueryRow(ctx, `SELECT data, stored_as FROM git_objects WHERE id = $1 AND type = 2`, anchor[:]).Scan(&data, &form); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("git object %s: %w", anchor, store.ErrNotFound)
		}
		return nil, interpretError("read git object "+anchor.String(), err)
	}
	// An anchor kept as a delta itself is no form DecodeStored knows: damage, not a tree.
	return store.DecodeStored(data, int(form), -1)
}

func (g gitBackend) PutGitObjects(ctx context.Context, objects []store.GitObject) error {
	if len(objects) == 0 {
		return nil
	}
	ids, types, data := gitObjectArgs(objects)
	query := putGitObjectsSQL
	if g.beforeStoredAs {
		for i, o := range objects {
			types[i], data[i] = int16(o.Type), nonNilBytes(o.Data)
		}
		query = `INSERT INTO git_objects (id, type, data)
			SELECT i, t, d FROM unnest($1::bytea[], $2::smallint[], $3::bytea[]) AS u(i, t, d) ON CONFLICT (id) DO NOTHING`
	}
	if _, err := g.qr.Exec(ctx, query, ids, types, data); err != nil {
		return interpretError("store git objects", err)
	}
	return nil
}

func (g gitBackend) BlobGitIDs(ctx context.Context, digests []string) (map[string]plumbing.Hash, error) {
	out := make(map[string]plumbing.Hash, len(digests))
	var ask []string
	for _, d := range digests {
		if id, ok := g.blobIDs[d]; ok {
			out[d] = id
		} else {
			ask = append(ask, d)
		}
	}
	if len(ask) == 0 {
		return out, nil
	}
	rows, err := g.qr.Query(ctx, `SELECT digest, git_id FROM blobs WHERE digest = ANY($1::text[])`, ask)
	if err != nil {
		return nil, interpretError("blob git ids", err)
	}
	var (
		d  string
		id []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&d, &id}, func() error {
		var h plumbing.Hash
		copy(h[:], id)
		out[d] = h
		return nil
	})
	if err != nil {
		return nil, interpretError("blob git ids", err)
	}
	return out, nil
}

func (g gitBackend) BlobsByGitID(ctx context.Context, ids []plumbing.Hash) (map[plumbing.Hash]store.BlobRef, error) {
	out := make(map[plumbing.Hash]store.BlobRef, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	raw := make([][]byte, len(ids))
	for i := range ids {
		raw[i] = ids[i][:]
	}
	rows, err := g.qr.Query(ctx, `SELECT git_id, digest, size FROM blobs WHERE git_id = ANY($1::bytea[])`, raw)
	if err != nil {
		return nil, interpretError("blobs by git id", err)
	}
	var (
		id   []byte
		ref  store.BlobRef
		size int64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &ref.Digest, &size}, func() error {
		var h plumbing.Hash
		copy(h[:], id)
		ref.Size = uint64(size)
		out[h] = ref
		return nil
	})
	if err != nil {
		return nil, interpretError("blobs by git id", err)
	}
	return out, nil
}

// gitMigration is the migration that brings the git content store (0009_git.sql).
const gitMigration = 9

// backfillGit gives what was stored before the git content store its git objects, inside the
// migration's transaction: each blob its git id, each revision its git tree, and each
// repository's mainline, from its first revision on, one commit per revision.
func backfillGit(ctx context.Context, tx pgx.Tx, emailDomain string) error {
	var storedAs bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'git_objects' AND column_name = 'stored_as')`).Scan(&storedAs); err != nil {
		return interpretError("backfill git", err)
	}
	b := gitBackend{qr: tx, beforeStoredAs: !storedAs}
	for {
		rows, err := tx.Query(ctx, `SELECT digest, content FROM blobs WHERE git_id IS NULL LIMIT 500`)
		if err != nil {
			return interpretError("backfill blob git ids", err)
		}
		var (
			digests []string
			ids     [][]byte
			d       string
			content []byte
		)
		_, err = pgx.ForEachRow(rows, []any{&d, &content}, func() error {
			id := gitstore.BlobID(content)
			digests = append(digests, d)
			ids = append(ids, id[:])
			return nil
		})
		if err != nil {
			return interpretError("backfill blob git ids", err)
		}
		if len(digests) == 0 {
			break
		}
		if _, err := tx.Exec(ctx, `UPDATE blobs b SET git_id = u.i FROM unnest($1::text[], $2::bytea[]) AS u(d, i)
			WHERE b.digest = u.d`, digests, ids); err != nil {
			return interpretError("backfill blob git ids", err)
		}
	}

	objs := store.NewGitObjects(ctx, b)
	// The ids first, then one tree at a time: a long history of large trees is never held in
	// memory at once.
	rows, err := tx.Query(ctx, `SELECT id FROM revisions WHERE git_tree = ''`)
	if err != nil {
		return interpretError("backfill git trees", err)
	}
	legacy, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return interpretError("backfill git trees", err)
	}
	for _, id := range legacy {
		var enc []byte
		if err := tx.QueryRow(ctx, `SELECT t.encoding FROM revisions r JOIN trees t ON t.digest = r.tree_digest WHERE r.id = $1`,
			id).Scan(&enc); err != nil {
			return interpretError("backfill git trees: revision "+id, err)
		}
		t, err := repo.DecodeTree(enc)
		if err != nil {
			return fmt.Errorf("backfill git trees: revision %s: %w", id, err)
		}
		root, err := store.ImportFlatTree(ctx, b, objs, t)
		if err != nil {
			return fmt.Errorf("backfill git trees: revision %s: %w", id, err)
		}
		if err := objs.Flush(); err != nil {
			return fmt.Errorf("backfill git trees: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE revisions SET git_tree = $1 WHERE id = $2`, root.String(), id); err != nil {
			return interpretError("backfill git trees", err)
		}
	}

	rows, err = tx.Query(ctx, `SELECT name, mainline FROM repositories r
		WHERE EXISTS (SELECT 1 FROM revisions v WHERE v.id = r.mainline AND v.git_commit = '')`)
	if err != nil {
		return interpretError("backfill commits", err)
	}
	type head struct{ name, mainline string }
	var heads []head
	var h head
	if _, err := pgx.ForEachRow(rows, []any{&h.name, &h.mainline}, func() error {
		heads = append(heads, h)
		return nil
	}); err != nil {
		return interpretError("backfill commits", err)
	}
	for _, h := range heads {
		var chain []store.LegacyRevision
		for id := h.mainline; id != ""; {
			var (
				r                 store.LegacyRevision
				created, authored time.Time
			)
			// A change's updated_at is when the mainline moved to it: what the commit is dated.
			err := tx.QueryRow(ctx, `SELECT v.id, v.parent, v.change_id, v.author, v.git_tree, v.git_commit, coalesce(c.updated_at, v.created_at),
					coalesce(c.message, ''), coalesce(c.attestation_digest, ''), coalesce(c.created_at, v.created_at)
				FROM revisions v LEFT JOIN changes c ON c.id = v.change_id WHERE v.id = $1 AND v.repository = $2`, id, h.name).
				Scan(&r.ID, &r.Parent, &r.ChangeID, &r.Author, &r.GitTree, &r.GitCommit, &created,
					&r.Message, &r.Attestation, &authored)
			if err != nil {
				return interpretError(fmt.Sprintf("backfill commits of %q: revision %s", h.name, id), err)
			}
			r.CommittedAt, r.AuthoredAt = created, authored
			chain = append(chain, r)
			if r.GitCommit != "" {
				break
			}
			id = r.Parent
		}
		commits, err := store.LegacyCommits(objs, h.name, chain, emailDomain)
		if err != nil {
			return fmt.Errorf("backfill commits of %q: %w", h.name, err)
		}
		if err := objs.Flush(); err != nil {
			return fmt.Errorf("backfill commits of %q: %w", h.name, err)
		}
		for id, commit := range commits {
			if _, err := tx.Exec(ctx, `UPDATE revisions SET git_commit = $1 WHERE id = $2`, commit.String(), id); err != nil {
				return interpretError("backfill commits", err)
			}
		}
	}
	return nil
}

// PutPackedBlobs stores blobs an import sent, in the form the caller checked, in their order:
// a delta's base before it.
func (db *DB) PutPackedBlobs(ctx context.Context, blobs []store.PackedBlob) error {
	if len(blobs) == 0 {
		return nil
	}
	digests := make([]string, len(blobs))
	data := make([][]byte, len(blobs))
	gitIDs := make([][]byte, len(blobs))
	sizes := make([]int64, len(blobs))
	forms := make([]int16, len(blobs))
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return interpretError("put packed blobs", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it does nothing
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, blobDeltaLock); err != nil {
		return interpretError("put packed blobs", err)
	}
	if err := store.CheckPackedDepths(blobs, func(bases []plumbing.Hash) (map[plumbing.Hash]store.BaseRow, error) {
		return baseRows(ctx, tx, bases)
	}); err != nil {
		return err
	}
	// In digest order, as putBlobsSQL's other callers, so that two transactions storing
	// overlapping blobs never wait for each other in a cycle.
	sorted := slices.Clone(blobs)
	slices.SortStableFunc(sorted, func(a, b store.PackedBlob) int { return strings.Compare(a.Digest, b.Digest) })
	for i, b := range sorted {
		digests[i], data[i], gitIDs[i], sizes[i], forms[i] = b.Digest, nonNilBytes(b.Data), b.GitID[:], b.Size, int16(b.StoredAs)
	}
	if _, err := tx.Exec(ctx, putBlobsSQL, digests, data, gitIDs, sizes, forms); err != nil {
		return interpretError("put packed blobs", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return interpretError("put packed blobs", err)
	}
	return nil
}

// blobDeltaLock is the advisory lock that orders the transactions that keep blobs as deltas
// (PutPackedBlobs, ReplaceWithDeltas), so that each counts the depth of a base as it is when it
// commits, and no two make blobs deltas of each other.
const blobDeltaLock = 0x61670037

// baseRows answers what a delta against each stored blob among ids needs of its row.
func baseRows(ctx context.Context, qr querier, ids []plumbing.Hash) (map[plumbing.Hash]store.BaseRow, error) {
	out := make(map[plumbing.Hash]store.BaseRow, len(ids))
	raw := make([][]byte, len(ids))
	for i := range ids {
		raw[i] = ids[i][:]
	}
	rows, err := qr.Query(ctx, `SELECT git_id, stored_as, substring(content from 1 for 21), parts_key IS NOT NULL FROM blobs
		WHERE git_id = ANY($1::bytea[])`, raw)
	if err != nil {
		return nil, interpretError("read delta bases", err)
	}
	var (
		id, head []byte
		form     int16
		inParts  bool
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &form, &head, &inParts}, func() error {
		out[hashOf(id)] = store.BaseRow{StoredAs: int(form), Head: bytes.Clone(head), InParts: inParts}
		return nil
	}); err != nil {
		return nil, interpretError("read delta bases", err)
	}
	return out, nil
}

// ReplaceWithDeltas keeps blobs stored whole as their deltas instead, each that still may be.
func (db *DB) ReplaceWithDeltas(ctx context.Context, rewrites []store.BlobRewrite) (int, error) {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return 0, interpretError("keep blobs as deltas", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it does nothing
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, blobDeltaLock); err != nil {
		return 0, interpretError("keep blobs as deltas", err)
	}
	n := 0
	for _, rw := range rewrites {
		var (
			form    int16
			inParts bool
			based   bool
		)
		err := tx.QueryRow(ctx, `SELECT stored_as, parts_key IS NOT NULL FROM blobs WHERE git_id = $1`, rw.Blob[:]).Scan(&form, &inParts)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return 0, interpretError("keep blobs as deltas", err)
		}
		// A delta against it would grow its chain: such a blob stays whole.
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM blobs WHERE stored_as = 4 AND substring(content from 1 for 20) = $1)`,
			rw.Blob[:]).Scan(&based); err != nil {
			return 0, interpretError("keep blobs as deltas", err)
		}
		bases, err := baseRows(ctx, tx, []plumbing.Hash{rw.Base})
		if err != nil {
			return 0, err
		}
		base, held := bases[rw.Base]
		depth, ok := store.RewriteDepth(rw, int(form), inParts, based, base, held)
		if !ok {
			continue
		}
		data := store.PackDelta{Base: rw.Base, Depth: depth, Len: rw.Len, Deflated: rw.Deflated}.Encode()
		tag, err := tx.Exec(ctx, `UPDATE blobs SET content = $1, stored_as = $2 WHERE git_id = $3 AND stored_as IN ($4, $5) AND parts_key IS NULL`,
			data, store.StoredPackDelta, rw.Blob[:], store.StoredZlib, store.StoredPlain)
		if err != nil {
			return 0, interpretError("keep blobs as deltas", err)
		}
		n += int(tag.RowsAffected())
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, interpretError("keep blobs as deltas", err)
	}
	return n, nil
}

// BlobDeltaWalk answers the head the last walk of repository's mainline went down from.
func (db *DB) BlobDeltaWalk(ctx context.Context, repository string) (plumbing.Hash, error) {
	var raw []byte
	err := db.pool.QueryRow(ctx, `SELECT head FROM blob_delta_walks WHERE repository = $1`, repository).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return plumbing.ZeroHash, nil
	}
	if err != nil {
		return plumbing.ZeroHash, interpretError("blob delta walk", err)
	}
	return hashOf(raw), nil
}

// RecordBlobDeltaWalk records that repository's mainline was walked down from head.
func (db *DB) RecordBlobDeltaWalk(ctx context.Context, repository string, head plumbing.Hash) error {
	if _, err := db.pool.Exec(ctx, `INSERT INTO blob_delta_walks (repository, head) VALUES ($1, $2)
		ON CONFLICT (repository) DO UPDATE SET head = excluded.head`, repository, head[:]); err != nil {
		return interpretError("record a blob delta walk", err)
	}
	return nil
}

// BlobDepths answers how many deltas deep each stored blob among ids is that a delta may be
// against: one not stored in parts.
func (db *DB) BlobDepths(ctx context.Context, ids []plumbing.Hash) (map[plumbing.Hash]int, error) {
	rows, err := baseRows(ctx, db.pool, ids)
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
func (db *DB) ReadStoredDeltas(ctx context.Context, ids []plumbing.Hash) (map[plumbing.Hash]store.PackDelta, error) {
	out := map[plumbing.Hash]store.PackDelta{}
	if len(ids) == 0 {
		return out, nil
	}
	raw := make([][]byte, len(ids))
	for i := range ids {
		raw[i] = ids[i][:]
	}
	rows, err := db.pool.Query(ctx, `SELECT git_id, content FROM blobs WHERE stored_as = $1 AND git_id = ANY($2::bytea[])`,
		store.StoredPackDelta, raw)
	if err != nil {
		return nil, interpretError("read stored deltas", err)
	}
	var id, data []byte
	if _, err := pgx.ForEachRow(rows, []any{&id, &data}, func() error {
		pd, err := store.ParsePackDelta(data)
		if err != nil {
			return fmt.Errorf("blob %x: %w", id, err)
		}
		pd.Deflated = bytes.Clone(pd.Deflated)
		out[hashOf(id)] = pd
		return nil
	}); err != nil {
		return nil, interpretError("read stored deltas", err)
	}
	return out, nil
}
