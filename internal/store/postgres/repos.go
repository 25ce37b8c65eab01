package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/jackc/pgx/v5"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/store"
)

var _ store.RepoStore = (*DB)(nil)

// ---- repositories ----

// repositoryCols are a repository's columns and its mainline's commit.
const repositoryCols = `name, mainline, validation, created_at,
	coalesce((SELECT v.git_commit FROM revisions v WHERE v.id = repositories.mainline), ''), shallow`

func repositoryDest(r *store.Repository) []any {
	return []any{&r.Name, &r.Mainline, &r.Validation, &r.CreatedAt, &r.MainlineCommit, shallowDest{&r.Shallow}}
}

// shallowDest scans the shallow column (store.EncodeShallow) into its commits.
type shallowDest struct{ ids *[]plumbing.Hash }

func (d shallowDest) Scan(src any) error {
	s, ok := src.(string)
	if !ok {
		return fmt.Errorf("shallow: a %T, want text", src)
	}
	ids, err := store.DecodeShallow(s)
	*d.ids = ids
	return err
}

func finishRepository(r *store.Repository) {
	if len(r.Validation) == 0 {
		r.Validation = nil
	}
	r.CreatedAt = r.CreatedAt.UTC()
}

// bytesOrNull keeps an empty byte slice out of the database: nil and empty are both "none".
func bytesOrNull(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// The first revision's git objects ($11-$13), the revision, the repository and its
// repository.created event ($8 and $9 the actor, $10 the details) in one statement: a taken
// name inserts none of them. The first revision's tree is $14, its digest $2 (” when not
// known yet) and its commit $3.
var createRepositorySQL = q(`WITH g AS (` + putGitObjectsArgs(11) + `),
rv AS (
	INSERT INTO revisions (id, repository, author, tree_digest, git_tree, git_commit, created_at)
	VALUES ($4, $5, $6, $2, $14, $3, {now})),
r AS (
	INSERT INTO repositories (name, mainline, validation, created_at, shallow) VALUES ($5, $4, $7, {now}, $15)
	RETURNING name, mainline, validation, created_at, shallow),
ev AS (` + auditRecord(`SELECT $8, $9, 'repository.created', 'repository/' || r.name, $10 FROM r`) + `)
SELECT r.name, r.mainline, r.validation, r.created_at, $3::text, r.shallow FROM r`)

// CreateRepository creates a repository whose mainline is a new revision with the empty tree
// and its root commit.
func (db *DB) CreateRepository(ctx context.Context, p store.CreateRepositoryParams) (store.Repository, error) {
	var r store.Repository
	actor := principalActor(ctx, p.CreatedBy)
	var det []byte
	if len(p.Validation) > 0 {
		det = details(map[string]any{"validation": jsonValue(p.Validation)})
	}
	revID := store.NewID("rev")
	// The objects of a new root commit are stored by the statement; an imported commit is read
	// from the store.
	objs := store.NewGitObjects(ctx, gitBackend{qr: db.pool})
	tree, commit, digest, err := store.FirstRevision(objs, p, revID, db.commitTime(), db.emailDomain)
	if err != nil {
		return store.Repository{}, fmt.Errorf("create repository %q: %w", p.Name, err)
	}
	_, ids, types, data, err := pendingArgs(objs)
	if err != nil {
		return store.Repository{}, fmt.Errorf("create repository %q: %w", p.Name, err)
	}
	shallow := store.EncodeShallow(p.Shallow)
	if !p.GitCommit.IsZero() {
		m := map[string]any{"git_commit": p.GitCommit.String()}
		if shallow != "" {
			m["shallow"] = strings.Fields(shallow)
		}
		if len(p.Validation) > 0 {
			m["validation"] = jsonValue(p.Validation)
		}
		det = details(m)
	}
	err = db.pool.QueryRow(ctx, createRepositorySQL, db.now(), digest, commit.String(),
		revID, p.Name, p.CreatedBy, bytesOrNull(p.Validation), actor.Principal, actor.Holder, textOrNil(det),
		ids, types, data, tree.String(), shallow).
		Scan(repositoryDest(&r)...)
	if err != nil {
		return store.Repository{}, interpretError("repository "+p.Name, err)
	}
	db.audited()
	finishRepository(&r)
	return r, nil
}

// GetRepository answers a repository by name.
func (db *DB) GetRepository(ctx context.Context, name string) (store.Repository, error) {
	var r store.Repository
	err := db.pool.QueryRow(ctx, `SELECT `+repositoryCols+` FROM repositories WHERE name = $1`, name).
		Scan(repositoryDest(&r)...)
	if err != nil {
		return store.Repository{}, interpretError("repository "+name, err)
	}
	finishRepository(&r)
	return r, nil
}

// ListRepositories answers repositories ordered by name, a page at a time.
func (db *DB) ListRepositories(ctx context.Context, p store.ListRepositoriesParams) ([]store.Repository, string, error) {
	after, err := store.DecodeNamePageToken(p.PageToken)
	if err != nil {
		return nil, "", err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := db.pool.Query(ctx, `SELECT `+repositoryCols+` FROM repositories
		WHERE name > $1 ORDER BY name LIMIT $2`, after, limit+1)
	if err != nil {
		return nil, "", interpretError("list repositories", err)
	}
	var out []store.Repository
	var r store.Repository
	_, err = pgx.ForEachRow(rows, repositoryDest(&r), func() error {
		x := r
		x.Validation = slices.Clone(r.Validation)
		finishRepository(&x)
		out = append(out, x)
		return nil
	})
	if err != nil {
		return nil, "", interpretError("list repositories", err)
	}
	if len(out) > limit {
		return out[:limit], store.EncodeNamePageToken(out[limit-1].Name), nil
	}
	return out, "", nil
}

// ---- blobs ----

// putBlobsSQL stores blobs that are not stored yet. The rows come in digest order (see
// blobArgs), so two transactions storing overlapping sets never wait for each other in a cycle.
const putBlobsSQL = `INSERT INTO blobs (digest, content, size, git_id, stored_as)
SELECT d, c, s, g, f FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::bigint[], $5::smallint[]) AS u(d, c, g, s, f)
ON CONFLICT DO NOTHING`

// blobArgs answers putBlobsSQL's arguments for blobs, sorted by digest, each digest once: the
// digests, the contents as stored (store.EncodeStored), the git ids, the sizes and the forms.
func blobArgs(blobs []store.Blob) []any {
	sorted := slices.Clone(blobs)
	slices.SortStableFunc(sorted, func(a, b store.Blob) int { return strings.Compare(a.Digest, b.Digest) })
	sorted = slices.CompactFunc(sorted, func(a, b store.Blob) bool { return a.Digest == b.Digest })
	digests := make([]string, len(sorted))
	contents := make([][]byte, len(sorted))
	gitIDs := make([][]byte, len(sorted))
	sizes := make([]int64, len(sorted))
	forms := make([]int16, len(sorted))
	for i, b := range sorted {
		content := nonNilBytes(b.Content)
		digests[i] = b.Digest
		id := gitstore.BlobID(content)
		gitIDs[i] = id[:]
		sizes[i] = int64(len(content))
		contents[i] = content
	}
	for i, e := range store.EncodeEach(contents) {
		contents[i], forms[i] = nonNilBytes(e.Data), int16(e.StoredAs)
	}
	return []any{digests, contents, gitIDs, sizes, forms}
}

// PutBlobs stores contents under their digests; a blob already stored is left as it is.
func (db *DB) PutBlobs(ctx context.Context, blobs []store.Blob) error {
	if len(blobs) == 0 {
		return nil
	}
	if _, err := db.pool.Exec(ctx, putBlobsSQL, blobArgs(blobs)...); err != nil {
		return interpretError("put blobs", err)
	}
	return nil
}

// GetBlob answers a blob by its digest, a blob stored in parts joined whole.
func (db *DB) GetBlob(ctx context.Context, digest string) (store.Blob, error) {
	var (
		content  []byte
		size     int64
		partsKey *string
		storedAs int16
	)
	var gitID []byte
	err := db.pool.QueryRow(ctx, `SELECT content, size, parts_key, stored_as, git_id FROM blobs WHERE digest = $1`, digest).
		Scan(&content, &size, &partsKey, &storedAs, &gitID)
	if err != nil {
		return store.Blob{}, interpretError("blob "+digest, err)
	}
	if content, err = blobContent(ctx, db.pool, "blob "+digest, hashOf(gitID), content, int(storedAs), size, partsKey, nil); err != nil {
		return store.Blob{}, err
	}
	return store.Blob{Digest: digest, Content: content}, nil
}

// missingBlobsSQL answers the digests among $1 that blobs lacks, in their order: one index
// probe per digest, whatever the table's size when the connection planned it. With generic
// plans (plan_cache_mode), a NOT EXISTS planned while blobs was small stays a hash anti-join
// over the whole table, 15-25 ms a call at 50,000 blobs.
const missingBlobsSQL = `SELECT u.d FROM unnest($1::text[]) WITH ORDINALITY AS u(d, n)
LEFT JOIN LATERAL (SELECT 1 AS held FROM blobs b WHERE b.digest = u.d LIMIT 1) x ON true
WHERE x.held IS NULL ORDER BY u.n`

// GetBlobs answers the blobs the store holds among digests, those stored in parts joined whole.
func (db *DB) GetBlobs(ctx context.Context, digests []string) ([]store.Blob, error) {
	if len(digests) == 0 {
		return nil, nil
	}
	rows, err := db.pool.Query(ctx, `SELECT digest, content, size, parts_key, stored_as, git_id FROM blobs WHERE digest = ANY($1::text[])`, digests)
	if err != nil {
		return nil, interpretError("get blobs", err)
	}
	var (
		out []store.Blob
		// inParts are the blobs of out stored in parts, joined once the rows are read.
		inParts  []storedInParts
		b        store.Blob
		size     int64
		partsKey *string
		storedAs int16
		gitID    []byte
	)
	if _, err := pgx.ForEachRow(rows, []any{&b.Digest, &b.Content, &size, &partsKey, &storedAs, &gitID}, func() error {
		if partsKey != nil || storedAs == store.StoredPackDelta {
			inParts = append(inParts, storedInParts{index: len(out), size: size, partsKey: partsKey, storedAs: int(storedAs), gitID: hashOf(gitID)})
		} else if b.Content, err = store.DecodeStored(b.Content, int(storedAs), size); err != nil {
			return fmt.Errorf("%s: %w", b.Digest, err)
		}
		b.Content = nonNilBytes(b.Content)
		out = append(out, b)
		b = store.Blob{}
		return nil
	}); err != nil {
		return nil, interpretError("get blobs", err)
	}
	cache := store.NewReadCache()
	for _, p := range inParts {
		b := &out[p.index]
		if b.Content, err = blobContent(ctx, db.pool, "blob "+b.Digest, p.gitID, b.Content, p.storedAs, p.size, p.partsKey, cache); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// MissingBlobs answers the digests among digests that are not stored, in the order given.
func (db *DB) MissingBlobs(ctx context.Context, digests []string) ([]string, error) {
	if len(digests) == 0 {
		return nil, nil
	}
	rows, err := db.pool.Query(ctx, missingBlobsSQL, digests)
	if err != nil {
		return nil, interpretError("missing blobs", err)
	}
	missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, interpretError("missing blobs", err)
	}
	return missing, nil
}

// BlobSizes answers the sizes of the blobs the store holds among digests.
func (db *DB) BlobSizes(ctx context.Context, digests []string) (map[string]uint64, error) {
	held := make(map[string]uint64, len(digests))
	if len(digests) == 0 {
		return held, nil
	}
	rows, err := db.pool.Query(ctx, `SELECT digest, size FROM blobs WHERE digest = ANY($1::text[])`, digests)
	if err != nil {
		return nil, interpretError("blob sizes", err)
	}
	defer rows.Close()
	for rows.Next() {
		var dg string
		var size int64
		if err := rows.Scan(&dg, &size); err != nil {
			return nil, interpretError("blob sizes", err)
		}
		held[dg] = uint64(size)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("blob sizes", err)
	}
	return held, nil
}

// ---- revisions ----

// GetRevision answers a revision of a repository with its file list, read from its git tree.
func (db *DB) GetRevision(ctx context.Context, repository, revisionID string) (store.Revision, error) {
	r, err := getRevision(ctx, db.pool, repository, revisionID)
	if err != nil {
		return store.Revision{}, err
	}
	root, err := store.ParseGitID(r.GitTree)
	if err != nil {
		return store.Revision{}, fmt.Errorf("revision %s: git tree: %w", r.ID, err)
	}
	b := gitBackend{qr: db.pool}
	if r.Tree, err = store.ListTree(ctx, b, store.NewGitObjects(ctx, b), root); err != nil {
		return store.Revision{}, fmt.Errorf("revision %s: %w", r.ID, err)
	}
	r.TreeDigest = r.Tree.Digest()
	return r, nil
}

// DiffRevisions answers revision revisionID without its tree, and what changed in its tree
// from since: the trees along the changed paths, no others.
func (db *DB) DiffRevisions(ctx context.Context, repository, since, revisionID string) (store.Revision, store.TreeDiff, error) {
	rev, err := getRevision(ctx, db.pool, repository, revisionID)
	if err != nil {
		return store.Revision{}, store.TreeDiff{}, fmt.Errorf("get revision: %w", err)
	}
	from, err := getRevision(ctx, db.pool, repository, since)
	if err != nil {
		return store.Revision{}, store.TreeDiff{}, fmt.Errorf("get the revision compared with: %w", err)
	}
	diff, err := store.DiffRevisionTrees(ctx, gitBackend{qr: db.pool}, from, rev)
	if err != nil {
		return store.Revision{}, store.TreeDiff{}, err
	}
	return rev, diff, nil
}

// RevisionByCommit answers the mainline revision whose commit is commit.
func (db *DB) RevisionByCommit(ctx context.Context, repository, commit string) (store.Revision, error) {
	var id string
	err := db.pool.QueryRow(ctx, `SELECT id FROM revisions WHERE repository = $1 AND git_commit = $2 AND git_commit <> ''`,
		repository, commit).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Revision{}, fmt.Errorf("the revision of commit %s of repository %s: %w", commit, repository, store.ErrNotFound)
	}
	if err != nil {
		return store.Revision{}, interpretError("revision of commit "+commit, err)
	}
	return getRevision(ctx, db.pool, repository, id)
}

// PushedCommits answers the commits of the newest pushed changes.
func (db *DB) PushedCommits(ctx context.Context, repository string, limit int) ([]string, error) {
	rows, err := db.pool.Query(ctx, `SELECT p.git_commit FROM pushed_commits p JOIN changes c ON c.id = p.change_id
		WHERE p.repository = $1 ORDER BY c.seq DESC LIMIT $2`, repository, limit)
	if err != nil {
		return nil, interpretError("pushed commits", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, interpretError("pushed commits", err)
	}
	return out, nil
}

// PushedChange answers the newest change made from a pushed commit.
func (db *DB) PushedChange(ctx context.Context, repository, commit string) (store.Change, error) {
	var id string
	err := db.pool.QueryRow(ctx, `SELECT change_id FROM pushed_commits WHERE repository = $1 AND git_commit = $2`,
		repository, commit).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Change{}, fmt.Errorf("pushed commit %s of repository %s: %w", commit, repository, store.ErrNotFound)
	}
	if err != nil {
		return store.Change{}, interpretError("pushed commit "+commit, err)
	}
	return db.GetChange(ctx, id)
}

// getRevision answers a revision without its file list (Tree and TreeDigest empty), on qr, a
// transaction's or the pool's.
func getRevision(ctx context.Context, qr querier, repository, revisionID string) (store.Revision, error) {
	var r store.Revision
	err := qr.QueryRow(ctx, `SELECT id, repository, parent, change_id, author, git_tree, git_commit, created_at
		FROM revisions WHERE id = $1 AND repository = $2`, revisionID, repository).
		Scan(&r.ID, &r.Repository, &r.Parent, &r.ChangeID, &r.Holder, &r.GitTree, &r.GitCommit, &r.CreatedAt)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return store.Revision{}, fmt.Errorf("revision %s of repository %s: %w", revisionID, repository, store.ErrNotFound)
		}
		return store.Revision{}, interpretError("revision "+revisionID, err)
	}
	r.CreatedAt = r.CreatedAt.UTC()
	return r, nil
}
