package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// repositoryColumns are a repository's columns and its mainline's commit.
const repositoryColumns = `name, mainline, validation, created_at,
	coalesce((SELECT git_commit FROM revisions WHERE revisions.id = repositories.mainline), ''), shallow`

func scanRepository(row scanner) (store.Repository, error) {
	var (
		r       store.Repository
		created int64
		shallow string
	)
	if err := row.Scan(&r.Name, &r.Mainline, &r.Validation, &created, &r.MainlineCommit, &shallow); err != nil {
		return store.Repository{}, err
	}
	r.CreatedAt = fromMicros(created)
	var err error
	if r.Shallow, err = store.DecodeShallow(shallow); err != nil {
		return store.Repository{}, fmt.Errorf("repository %q: %w", r.Name, err)
	}
	return r, nil
}

// CreateRepository creates a repository whose mainline is a revision with the empty tree.
func (d *DB) CreateRepository(ctx context.Context, p store.CreateRepositoryParams) (store.Repository, error) {
	actor := principalActor(ctx, p.CreatedBy)
	var r store.Repository
	err := d.write(ctx, "create repository", func(ctx context.Context, tx *sql.Tx) error {
		now := micros(d.now())
		revID := store.NewID("rev")
		var err error
		r, err = scanRepository(tx.QueryRowContext(ctx, `INSERT INTO repositories (name, mainline, validation, created_at, shallow)
			VALUES (?, ?, ?, ?, ?) RETURNING `+repositoryColumns, p.Name, revID, nullBytes(p.Validation), now, store.EncodeShallow(p.Shallow)))
		if err != nil {
			return interpretError(fmt.Sprintf("create repository %q", p.Name), err)
		}
		objs := store.NewGitObjects(ctx, gitBackend{q: tx})
		tree, commit, digest, err := store.FirstRevision(objs, p, revID, fromMicros(now), d.emailDomain)
		if err != nil {
			return fmt.Errorf("create repository %q: %w", p.Name, err)
		}
		if err := objs.Flush(); err != nil {
			return fmt.Errorf("create repository %q: %w", p.Name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO revisions (id, repository, author, tree_digest, git_tree, git_commit, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, revID, p.Name, p.CreatedBy, digest, tree.String(), commit.String(), now); err != nil {
			return interpretError(fmt.Sprintf("create repository %q: first revision", p.Name), err)
		}
		r.MainlineCommit = commit.String()
		var det details
		if !p.GitCommit.IsZero() {
			det.str("git_commit", p.GitCommit.String())
		}
		if len(r.Shallow) > 0 {
			det.strs("shallow", strings.Fields(store.EncodeShallow(r.Shallow)))
		}
		if r.Validation != nil {
			det.raw("validation", r.Validation)
		}
		d.record(now, actor, "repository.created", "repository/"+r.Name, det.done())
		return nil
	})
	return r, err
}

// GetRepository answers a repository by name.
func (d *DB) GetRepository(ctx context.Context, name string) (store.Repository, error) {
	r, err := scanRepository(d.r.QueryRowContext(ctx, `SELECT `+repositoryColumns+` FROM repositories WHERE name = ?`, name))
	if err != nil {
		return store.Repository{}, interpretError(fmt.Sprintf("get repository %q", name), err)
	}
	return r, nil
}

// ListRepositories answers repositories ordered by name; the page token is the last name answered.
func (d *DB) ListRepositories(ctx context.Context, p store.ListRepositoriesParams) ([]store.Repository, string, error) {
	after, err := store.DecodeNamePageToken(p.PageToken)
	if err != nil {
		return nil, "", fmt.Errorf("list repositories: %w", err)
	}
	limit := pageLimit(p.Limit)
	rows, err := d.r.QueryContext(ctx, `SELECT `+repositoryColumns+` FROM repositories WHERE name > ? ORDER BY name LIMIT ?`,
		after, limit+1)
	if err != nil {
		return nil, "", interpretError("list repositories", err)
	}
	defer rows.Close()
	var repos []store.Repository
	for rows.Next() {
		r, err := scanRepository(rows)
		if err != nil {
			return nil, "", interpretError("list repositories", err)
		}
		repos = append(repos, r)
	}
	if err := rows.Err(); err != nil {
		return nil, "", interpretError("list repositories", err)
	}
	next := ""
	if len(repos) > limit {
		repos = repos[:limit]
		next = store.EncodeNamePageToken(repos[limit-1].Name)
	}
	return repos, next, nil
}

// insertBlobs stores blobs that are not stored yet; encoded holds each one's content as its
// row keeps it (store.EncodeEach), nil to compress them here.
func insertBlobs(ctx context.Context, tx *sql.Tx, blobs []store.Blob, encoded []store.Encoded) error {
	if encoded == nil {
		encoded = encodeBlobs(blobs)
	}
	for i, b := range blobs {
		content := nonNil(b.Content)
		id := gitstore.BlobID(content)
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO blobs (digest, content, size, git_id, stored_as) VALUES (?, ?, ?, ?, ?)`,
			b.Digest, nonNil(encoded[i].Data), len(content), id[:], encoded[i].StoredAs); err != nil {
			return interpretError("store blob "+b.Digest, err)
		}
	}
	return nil
}

// PutBlobs stores contents under their digests, leaving stored ones as they are.
func (d *DB) PutBlobs(ctx context.Context, blobs []store.Blob) error {
	if len(blobs) == 0 {
		return nil
	}
	encoded := encodeBlobs(blobs) // before the transaction, on every CPU
	return d.write(ctx, "put blobs", func(ctx context.Context, tx *sql.Tx) error {
		return insertBlobs(ctx, tx, blobs, encoded)
	})
}

// GetBlob answers a blob by digest, a blob stored in parts joined whole.
func (d *DB) GetBlob(ctx context.Context, digest string) (store.Blob, error) {
	var (
		content  []byte
		size     int64
		partsKey sql.NullString
		storedAs int
	)
	var gitID []byte
	if err := d.r.QueryRowContext(ctx, `SELECT content, size, parts_key, stored_as, git_id FROM blobs WHERE digest = ?`, digest).
		Scan(&content, &size, &partsKey, &storedAs, &gitID); err != nil {
		return store.Blob{}, interpretError("get blob "+digest, err)
	}
	content, err := blobContent(ctx, d.r, "blob "+digest, hashOf(gitID), content, storedAs, size, partsKey, nil)
	if err != nil {
		return store.Blob{}, fmt.Errorf("get blob: %w", err)
	}
	return store.Blob{Digest: digest, Content: content}, nil
}

// GetBlobs answers the blobs the store holds among digests, those stored in parts joined whole.
func (d *DB) GetBlobs(ctx context.Context, digests []string) ([]store.Blob, error) {
	var (
		out []store.Blob
		// inParts are the blobs of out stored in parts, joined once the rows are read.
		inParts []storedInParts
	)
	for chunk := range slices.Chunk(digests, missingChunk) {
		args := make([]any, len(chunk))
		for i, dg := range chunk {
			args[i] = dg
		}
		rows, err := d.r.QueryContext(ctx, `SELECT digest, content, size, parts_key, stored_as, git_id FROM blobs WHERE digest IN (`+placeholders(1, len(chunk))+`)`, args...)
		if err != nil {
			return nil, interpretError("get blobs", err)
		}
		for rows.Next() {
			var (
				b        store.Blob
				size     int64
				partsKey sql.NullString
				storedAs int
				gitID    []byte
			)
			if err := rows.Scan(&b.Digest, &b.Content, &size, &partsKey, &storedAs, &gitID); err != nil {
				rows.Close()
				return nil, interpretError("get blobs", err)
			}
			if partsKey.Valid || storedAs == store.StoredPackDelta {
				inParts = append(inParts, storedInParts{index: len(out), size: size, partsKey: partsKey, storedAs: storedAs, gitID: hashOf(gitID)})
			} else if b.Content, err = store.DecodeStored(b.Content, storedAs, size); err != nil {
				rows.Close()
				return nil, fmt.Errorf("get blobs: %s: %w", b.Digest, err)
			}
			b.Content = nonNil(b.Content)
			out = append(out, b)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, interpretError("get blobs", err)
		}
	}
	cache := store.NewReadCache()
	for _, p := range inParts {
		b := &out[p.index]
		var err error
		if b.Content, err = blobContent(ctx, d.r, "blob "+b.Digest, p.gitID, b.Content, p.storedAs, p.size, p.partsKey, cache); err != nil {
			return nil, fmt.Errorf("get blobs: %w", err)
		}
	}
	return out, nil
}

// missingChunk bounds the digests of one lookup, well under SQLite's parameter limit.
const missingChunk = 500

// MissingBlobs answers the digests the store does not hold, in the order given.
func (d *DB) MissingBlobs(ctx context.Context, digests []string) ([]string, error) {
	held, err := d.BlobSizes(ctx, digests)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, dg := range digests {
		if _, ok := held[dg]; !ok {
			missing = append(missing, dg)
		}
	}
	return missing, nil
}

// BlobSizes answers the sizes of the blobs the store holds among digests.
func (d *DB) BlobSizes(ctx context.Context, digests []string) (map[string]uint64, error) {
	held := make(map[string]uint64, len(digests))
	for chunk := range slices.Chunk(digests, missingChunk) {
		args := make([]any, len(chunk))
		for i, dg := range chunk {
			args[i] = dg
		}
		rows, err := d.r.QueryContext(ctx, `SELECT digest, size FROM blobs WHERE digest IN (`+placeholders(1, len(chunk))+`)`, args...)
		if err != nil {
			return nil, interpretError("blob sizes", err)
		}
		for rows.Next() {
			var dg string
			var size int64
			if err := rows.Scan(&dg, &size); err != nil {
				rows.Close()
				return nil, interpretError("blob sizes", err)
			}
			held[dg] = uint64(size)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, interpretError("blob sizes", err)
		}
	}
	return held, nil
}

const revisionColumns = `id, repository, parent, change_id, author, tree_digest, git_tree, git_commit, created_at`

func scanRevision(row scanner) (store.Revision, error) {
	var (
		rev     store.Revision
		created int64
	)
	if err := row.Scan(&rev.ID, &rev.Repository, &rev.Parent, &rev.ChangeID, &rev.Holder, &rev.TreeDigest,
		&rev.GitTree, &rev.GitCommit, &created); err != nil {
		return store.Revision{}, err
	}
	rev.CreatedAt = fromMicros(created)
	return rev, nil
}

// getRevision answers a revision without its file list (Tree and TreeDigest empty).
func getRevision(ctx context.Context, q querier, repository, id string) (store.Revision, error) {
	rev, err := scanRevision(q.QueryRowContext(ctx, `SELECT `+revisionColumns+`
		FROM revisions WHERE id = ? AND repository = ?`, id, repository))
	if err != nil {
		return store.Revision{}, interpretError(fmt.Sprintf("revision %s of repository %q", id, repository), err)
	}
	rev.TreeDigest = ""
	return rev, nil
}

// GetRevision answers a revision of a repository with its file list, read from its git tree.
func (d *DB) GetRevision(ctx context.Context, repository, revisionID string) (store.Revision, error) {
	rev, err := getRevision(ctx, d.r, repository, revisionID)
	if err != nil {
		return store.Revision{}, fmt.Errorf("get revision: %w", err)
	}
	root, err := store.ParseGitID(rev.GitTree)
	if err != nil {
		return store.Revision{}, fmt.Errorf("get revision %s: git tree: %w", rev.ID, err)
	}
	b := gitBackend{q: d.r}
	if rev.Tree, err = store.ListTree(ctx, b, store.NewGitObjects(ctx, b), root); err != nil {
		return store.Revision{}, fmt.Errorf("get revision %s: %w", rev.ID, err)
	}
	rev.TreeDigest = rev.Tree.Digest()
	return rev, nil
}

// DiffRevisions answers revision revisionID without its tree, and what changed in its tree
// from since: the trees along the changed paths, no others.
func (d *DB) DiffRevisions(ctx context.Context, repository, since, revisionID string) (store.Revision, store.TreeDiff, error) {
	rev, err := getRevision(ctx, d.r, repository, revisionID)
	if err != nil {
		return store.Revision{}, store.TreeDiff{}, fmt.Errorf("get revision: %w", err)
	}
	from, err := getRevision(ctx, d.r, repository, since)
	if err != nil {
		return store.Revision{}, store.TreeDiff{}, fmt.Errorf("get the revision compared with: %w", err)
	}
	diff, err := store.DiffRevisionTrees(ctx, gitBackend{q: d.r}, from, rev)
	if err != nil {
		return store.Revision{}, store.TreeDiff{}, err
	}
	return rev, diff, nil
}

const changeColumns = `id, repository, state, base_revision, candidate_revision, integrated_revision, author, message,
	paths, job_id, attestation_digest, reason, created_at, updated_at, candidate_id, batch_limit, approved_by, approved_at,
	task_id, task_claim_number`

// scanChange reads the changeColumns of a row; before are columns selected ahead of them.
func scanChange(row scanner, before ...any) (store.Change, error) {
	var (
		c                store.Change
		state, paths     string
		created, updated int64
		approved         sql.NullInt64
		taskClaim        int64
	)
	dest := append(before, &c.ID, &c.Repository, &state, &c.BaseRevision, &c.CandidateRevision, &c.IntegratedRevision,
		&c.Holder, &c.Message, &paths, &c.JobID, &c.AttestationDigest, &c.Reason, &created, &updated, &c.CandidateID,
		&c.BatchLimit, &c.ApprovedBy, &approved, &c.TaskID, &taskClaim)
	if err := row.Scan(dest...); err != nil {
		return store.Change{}, err
	}
	c.TaskClaimNumber = uint64(taskClaim)
	if err := json.Unmarshal([]byte(paths), &c.Paths); err != nil {
		return store.Change{}, fmt.Errorf("change %s: paths: %w", c.ID, err)
	}
	c.State = store.ChangeState(state)
	c.CreatedAt = fromMicros(created)
	c.UpdatedAt = fromMicros(updated)
	if approved.Valid {
		c.ApprovedAt = fromMicros(approved.Int64)
	}
	return c, nil
}

// rebase applies edits made on base to head's git tree (store.RebaseGit).
func rebase(ctx context.Context, tx *sql.Tx, objs *store.GitObjects, base, head store.Revision, edits []repo.FileEdit) (plumbing.Hash, error) {
	baseTree, err := store.ParseGitID(base.GitTree)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("revision %s: git tree: %w", base.ID, err)
	}
	headTree, err := store.ParseGitID(head.GitTree)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("revision %s: git tree: %w", head.ID, err)
	}
	return store.RebaseGit(ctx, gitBackend{q: tx}, objs, baseTree, headTree, edits)
}

// recordIntegrated records that change c was integrated.
func (d *DB) recordIntegrated(now int64, actor store.Actor, c store.Change) {
	var det details
	det.strIf("attestation_digest", c.AttestationDigest).strs("paths", c.Paths).str("repository", c.Repository).
		str("revision", c.IntegratedRevision)
	d.record(now, actor, "change.integrated", "change/"+c.ID, det.done())
}

// revisionParams describe a revision to store.
type revisionParams struct {
	repository string
	parent     store.Revision
	changeID   string
	author     string
	tree       plumbing.Hash
	now        int64
	// commit, when set, makes the revision the mainline's next: it gets its commit, whose
	// parent is parent's commit. Its Message, FencingTokens, Attestation and AuthoredAt are
	// the change's; the rest is filled in here.
	commit *store.CommitInfo
}

// insertRevision stores the git objects written so far and a new revision of p.tree.
func (d *DB) insertRevision(ctx context.Context, tx *sql.Tx, objs *store.GitObjects, p revisionParams) (store.Revision, error) {
	rev := store.Revision{ID: store.NewID("rev"), Repository: p.repository, Parent: p.parent.ID, ChangeID: p.changeID,
		Holder: p.author, GitTree: p.tree.String(), CreatedAt: fromMicros(p.now)}
	if p.commit != nil {
		commit, err := d.writeCommit(objs, rev, p.parent.GitCommit, *p.commit)
		if err != nil {
			return store.Revision{}, err
		}
		rev.GitCommit = commit
	}
	if err := objs.Flush(); err != nil {
		return store.Revision{}, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO revisions (id, repository, parent, change_id, author, git_tree, git_commit, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, rev.ID, rev.Repository, rev.Parent, rev.ChangeID, rev.Holder, rev.GitTree,
		rev.GitCommit, p.now); err != nil {
		return store.Revision{}, interpretError("store revision", err)
	}
	return rev, nil
}

// writeCommit writes the mainline commit of rev on top of the commit parent, dated when rev
// was stored unless c says otherwise.
func (d *DB) writeCommit(objs *store.GitObjects, rev store.Revision, parent string, c store.CommitInfo) (string, error) {
	if c.CommittedAt.IsZero() {
		c.CommittedAt = rev.CreatedAt
	}
	c.EmailDomain = d.emailDomain
	return store.WriteRevisionCommit(objs, rev, parent, c)
}

// moveMainline is the compare-and-swap of a repository's mainline: it moves to to only from
// from, and answers whether it moved.
func moveMainline(ctx context.Context, tx *sql.Tx, repository, from, to string) (bool, error) {
	res, err := tx.ExecContext(ctx, `UPDATE repositories SET mainline = ? WHERE name = ? AND mainline = ?`, to, repository, from)
	if err != nil {
		return false, interpretError("move the mainline", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, interpretError("move the mainline", err)
	}
	return n == 1, nil
}

// mustMoveMainline is moveMainline from a mainline read in the same write: the write lock is
// held since, so a miss means the transaction is broken.
func mustMoveMainline(ctx context.Context, tx *sql.Tx, repository, from, to string) error {
	moved, err := moveMainline(ctx, tx, repository, from, to)
	if err == nil && !moved {
		err = fmt.Errorf("move the mainline: the mainline of %q moved during the transaction", repository)
	}
	return err
}

// nonNilEdits keeps absent edits as an empty JSON array.
func nonNilEdits(e []repo.FileEdit) []repo.FileEdit {
	if e == nil {
		return []repo.FileEdit{}
	}
	return e
}

// GetChange answers a change, with its place in the queue while it is queued.
func (d *DB) GetChange(ctx context.Context, changeID string) (store.Change, error) {
	var pos int
	// One statement, so the position is counted in the snapshot the change was read from.
	c, err := scanChange(d.r.QueryRowContext(ctx, `SELECT
			CASE WHEN c.state = 'queued' THEN (SELECT count(*) FROM changes q
				WHERE q.repository = c.repository AND q.state IN ('queued', 'validating') AND q.seq < c.seq)
			ELSE 0 END, `+changeColumns+`
		FROM changes c WHERE c.id = ?`, changeID), &pos)
	if err != nil {
		return store.Change{}, interpretError("get change "+changeID, err)
	}
	c.QueuePosition = pos
	return c, nil
}

// PushedChange answers the newest change made from a pushed commit.
func (d *DB) PushedChange(ctx context.Context, repository, commit string) (store.Change, error) {
	var id string
	if err := d.r.QueryRowContext(ctx, `SELECT change_id FROM pushed_commits WHERE repository = ? AND git_commit = ?`,
		repository, commit).Scan(&id); err != nil {
		return store.Change{}, interpretError(fmt.Sprintf("pushed commit %s of repository %q", commit, repository), err)
	}
	return d.GetChange(ctx, id)
}

// PushedCommits answers the commits of the newest pushed changes.
func (d *DB) PushedCommits(ctx context.Context, repository string, limit int) ([]string, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT p.git_commit FROM pushed_commits p JOIN changes c ON c.id = p.change_id
		WHERE p.repository = ? ORDER BY c.seq DESC LIMIT ?`, repository, limit)
	if err != nil {
		return nil, interpretError("pushed commits", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, interpretError("pushed commits", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("pushed commits", err)
	}
	return out, nil
}

// RevisionByCommit answers the mainline revision whose commit is commit.
func (d *DB) RevisionByCommit(ctx context.Context, repository, commit string) (store.Revision, error) {
	rev, err := scanRevision(d.r.QueryRowContext(ctx, `SELECT `+revisionColumns+`
		FROM revisions WHERE repository = ? AND git_commit = ? AND git_commit != ''`, repository, commit))
	if err != nil {
		return store.Revision{}, interpretError(fmt.Sprintf("the revision of commit %s of repository %q", commit, repository), err)
	}
	rev.TreeDigest = ""
	return rev, nil
}

// ListChanges answers a repository's changes newest first; the page token is the seq of the
// last change answered.
func (d *DB) ListChanges(ctx context.Context, p store.ListChangesParams) ([]store.Change, string, error) {
	before, err := store.DecodeSeqPageToken(p.PageToken)
	if err != nil {
		return nil, "", fmt.Errorf("list changes: %w", err)
	}
	limit := pageLimit(p.Limit)
	q := `SELECT seq, ` + changeColumns + ` FROM changes WHERE repository = ?`
	args := []any{p.Repository}
	if p.Queued {
		// The literal states match the partial index changes_queue.
		changes, err := queryChanges(ctx, d.r, q+` AND state IN ('queued', 'validating') AND state = 'queued'
			ORDER BY seq LIMIT ?`, p.Repository, limit)
		return changes, "", err
	}
	if p.AwaitingApproval {
		changes, err := queryChanges(ctx, d.r, q+` AND state = 'awaiting_approval' ORDER BY seq LIMIT ?`, p.Repository, limit)
		return changes, "", err
	}
	if before > 0 {
		q += ` AND seq < ?`
		args = append(args, before)
	}
	q += ` ORDER BY seq DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := d.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", interpretError("list changes", err)
	}
	defer rows.Close()
	var (
		changes []store.Change
		seqs    []int64
	)
	for rows.Next() {
		var seq int64
		c, err := scanChange(rows, &seq)
		if err != nil {
			return nil, "", interpretError("list changes", err)
		}
		changes = append(changes, c)
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, "", interpretError("list changes", err)
	}
	next := ""
	if len(changes) > limit {
		changes = changes[:limit]
		next = store.EncodeSeqPageToken(seqs[limit-1])
	}
	return changes, next, nil
}

// queryChanges answers the changes a query of seq and changeColumns finds.
func queryChanges(ctx context.Context, db querier, query string, args ...any) ([]store.Change, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpretError("list changes", err)
	}
	defer rows.Close()
	var changes []store.Change
	for rows.Next() {
		var seq int64
		c, err := scanChange(rows, &seq)
		if err != nil {
			return nil, interpretError("list changes", err)
		}
		changes = append(changes, c)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("list changes", err)
	}
	return changes, nil
}

// ApproveChange records an approval of a change in one write, which holds every queue (SQLite
// has one writer), and queues again a change that waited for it.
func (d *DB) ApproveChange(ctx context.Context, changeID, principal string) (store.Change, error) {
	now := micros(d.now())
	actor := store.ActorOf(ctx)
	var c store.Change
	err := d.write(ctx, "approve change", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		if c, err = scanChange(tx.QueryRowContext(ctx, `SELECT `+changeColumns+` FROM changes WHERE id = ?`, changeID)); err != nil {
			return interpretError("change "+changeID, err)
		}
		if c.State.Terminal() {
			return fmt.Errorf("change %s is %s: %w", changeID, c.State, store.ErrFailedPrecondition)
		}
		if c.ApprovedBy != "" {
			return nil // the first approval stays; approving again changes nothing
		}
		if c, err = scanChange(tx.QueryRowContext(ctx, `UPDATE changes SET approved_by = ?, approved_at = ?,
				state = CASE WHEN state = 'awaiting_approval' THEN 'queued' ELSE state END, updated_at = ?
			WHERE id = ? RETURNING `+changeColumns, principal, now, now, changeID)); err != nil {
			return interpretError("approve change "+changeID, err)
		}
		var det details
		det.str("approved_by", principal)
		det.str("state", string(c.State))
		d.record(now, actor, "change.approved", "change/"+c.ID, det.done())
		return nil
	})
	return c, err
}

// encodeBlobs answers the contents of blobs as their rows keep them.
func encodeBlobs(blobs []store.Blob) []store.Encoded {
	contents := make([][]byte, len(blobs))
	for i, b := range blobs {
		contents[i] = nonNil(b.Content)
	}
	return store.EncodeEach(contents)
}
