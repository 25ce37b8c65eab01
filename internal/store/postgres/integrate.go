package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/jackc/pgx/v5"

	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// ---- changes ----

var changeFields = []string{
	"id", "repository", "state", "base_revision", "candidate_revision", "integrated_revision",
	"author", "message", "paths", "job_id", "attestation_digest", "reason", "created_at", "updated_at",
	"candidate_id", "batch_limit", "approved_by", "approved_at", "task_id", "task_claim_number",
}

var changeCols = strings.Join(changeFields, ", ")

type changeScan struct {
	c          store.Change
	state      string
	approvedAt *time.Time
	taskClaim  int64
}

func (s *changeScan) dest() []any {
	c := &s.c
	return []any{&c.ID, &c.Repository, &s.state, &c.BaseRevision, &c.CandidateRevision, &c.IntegratedRevision,
		&c.Holder, &c.Message, &c.Paths, &c.JobID, &c.AttestationDigest, &c.Reason, &c.CreatedAt, &c.UpdatedAt,
		&c.CandidateID, &c.BatchLimit, &c.ApprovedBy, &s.approvedAt, &c.TaskID, &s.taskClaim}
}

func (s *changeScan) change() store.Change {
	c := s.c
	c.State = store.ChangeState(s.state)
	c.TaskClaimNumber = uint64(s.taskClaim)
	if len(c.Paths) == 0 {
		c.Paths = nil
	}
	c.CreatedAt = c.CreatedAt.UTC()
	c.UpdatedAt = c.UpdatedAt.UTC()
	if s.approvedAt != nil {
		c.ApprovedAt = s.approvedAt.UTC()
	}
	return c
}

// getChangeSQL answers a change and, when it is QUEUED, the pending changes of its repository
// ahead of it. The states are literals, those of changes_queue's predicate, so that the count
// reads the queue's rows only.
var getChangeSQL = `SELECT ` + changeCols + `,
	CASE WHEN c.state = 'queued' THEN (
		SELECT count(*) FROM changes a
		WHERE a.repository = c.repository AND a.state IN ('queued', 'validating') AND a.seq < c.seq)
	ELSE 0 END
FROM changes c WHERE c.id = $1`

// GetChange answers a change, with its place in the queue when it is QUEUED.
func (db *DB) GetChange(ctx context.Context, changeID string) (store.Change, error) {
	var s changeScan
	var ahead int64
	err := db.pool.QueryRow(ctx, getChangeSQL, changeID).Scan(append(s.dest(), &ahead)...)
	if err != nil {
		return store.Change{}, interpretError("change "+changeID, err)
	}
	c := s.change()
	c.QueuePosition = int(ahead)
	return c, nil
}

// ListChanges answers a repository's changes, newest first.
func (db *DB) ListChanges(ctx context.Context, p store.ListChangesParams) ([]store.Change, string, error) {
	before, err := store.DecodeSeqPageToken(p.PageToken)
	if err != nil {
		return nil, "", err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	if p.Queued {
		// One page, oldest first, read from changes_queue (the literal states are its predicate).
		rows, err := db.pool.Query(ctx, `SELECT `+changeCols+` FROM changes
			WHERE repository = $1 AND state IN ('queued', 'validating') AND state = 'queued' ORDER BY seq LIMIT $2`,
			p.Repository, limit)
		if err != nil {
			return nil, "", interpretError("list changes", err)
		}
		changes, err := collectChanges(rows)
		return changes, "", err
	}
	if p.AwaitingApproval {
		rows, err := db.pool.Query(ctx, `SELECT `+changeCols+` FROM changes
			WHERE repository = $1 AND state = 'awaiting_approval' ORDER BY seq LIMIT $2`, p.Repository, limit)
		if err != nil {
			return nil, "", interpretError("list changes", err)
		}
		changes, err := collectChanges(rows)
		return changes, "", err
	}
	rows, err := db.pool.Query(ctx, `SELECT seq, `+changeCols+` FROM changes
		WHERE repository = $1 AND ($2::bigint = 0 OR seq < $2) ORDER BY seq DESC LIMIT $3`, p.Repository, before, limit+1)
	if err != nil {
		return nil, "", interpretError("list changes", err)
	}
	var out []store.Change
	var seqs []int64
	var seq int64
	var s changeScan
	_, err = pgx.ForEachRow(rows, append([]any{&seq}, s.dest()...), func() error {
		out = append(out, s.change())
		seqs = append(seqs, seq)
		s.c.Paths = nil // the next row's array gets a slice of its own
		return nil
	})
	if err != nil {
		return nil, "", interpretError("list changes", err)
	}
	if len(out) > limit {
		return out[:limit], store.EncodeSeqPageToken(seqs[limit-1]), nil
	}
	return out, "", nil
}

// approveChangeSQL records an approval ($2 the change, $3 the principal) and queues again a
// change that waited for it.
var approveChangeSQL = q(`UPDATE changes SET approved_by = $3, approved_at = {now},
	state = CASE WHEN state = 'awaiting_approval' THEN 'queued' ELSE state END, updated_at = {now}
WHERE id = $2 RETURNING ` + changeCols)

// ApproveChange records an approval under the lock of the change's repository, the one an
// advance holds, so that no advance parks a change it saw unapproved after this approval.
func (db *DB) ApproveChange(ctx context.Context, changeID, principal string) (store.Change, error) {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return store.Change{}, interpretError("approve change", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	var repository string
	if err := tx.QueryRow(ctx, `SELECT repository FROM changes WHERE id = $1`, changeID).Scan(&repository); err != nil {
		return store.Change{}, interpretError("change "+changeID, err)
	}
	var mainline string
	var validation []byte
	if err := tx.QueryRow(ctx, advanceLockSQL, repository).Scan(&mainline, &validation); err != nil {
		return store.Change{}, interpretError("repository "+repository, err)
	}
	var s changeScan
	if err := tx.QueryRow(ctx, `SELECT `+changeCols+` FROM changes WHERE id = $1`, changeID).Scan(s.dest()...); err != nil {
		return store.Change{}, interpretError("change "+changeID, err)
	}
	c := s.change()
	if c.State.Terminal() {
		return store.Change{}, fmt.Errorf("change %s is %s: %w", changeID, c.State, store.ErrFailedPrecondition)
	}
	if c.ApprovedBy != "" {
		return c, nil // the first approval stays; approving again changes nothing
	}
	s = changeScan{}
	if err := tx.QueryRow(ctx, approveChangeSQL, db.now(), changeID, principal).Scan(s.dest()...); err != nil {
		return store.Change{}, interpretError("approve change "+changeID, err)
	}
	c = s.change()
	actor := store.ActorOf(ctx)
	if _, err := tx.Exec(ctx, recordSQL, db.now(), actor.Principal, actor.Holder, "change.approved", "change/"+c.ID,
		string(details(map[string]any{"approved_by": principal, "state": string(c.State)}))); err != nil {
		return store.Change{}, interpretError("record change.approved", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return store.Change{}, interpretError("approve change: commit", err)
	}
	db.audited()
	return c, nil
}

// collectChanges answers the changes of rows that select changeCols.
func collectChanges(rows pgx.Rows) ([]store.Change, error) {
	defer rows.Close()
	var changes []store.Change
	for rows.Next() {
		var s changeScan
		if err := rows.Scan(s.dest()...); err != nil {
			return nil, interpretError("read changes", err)
		}
		changes = append(changes, s.change())
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("read changes", err)
	}
	return changes, nil
}

// ---- integrate ----

// integrateLockSQL locks the repository: integrations, grants and renewals of one repository run
// one at a time, so the lease check and the move of the mainline are one step. It locks the row
// alone: in a join, a row locked after a wait is checked again against the other tables' rows
// of the old snapshot, which no longer match once the mainline moved. It also tells whether
// the repository has a validation policy: the change is then queued.
const integrateLockSQL = `SELECT mainline, validation IS NOT NULL FROM repositories WHERE name = $1 FOR UPDATE`

// mainlineSQL reads the mainline's git tree and commit. It runs after the lock, so on a
// snapshot that sees the mainline of the last integration.
const mainlineSQL = `SELECT rv.git_tree, rv.git_commit
FROM repositories rp JOIN revisions rv ON rv.id = rp.mainline
WHERE rp.name = $1`

// leaseCheckSQL reads what the lease check needs about the candidate folds $3 (the folds of the
// edited paths and of their ancestor directories, where the lease paths that can cover or
// overlap them lie; see repo.Fold): 'g' rows are the lease paths of the leases given ($2); 'n'
// rows the newest grant at each fold, of anyone, in any state (one backward index step per
// fold). Each row has the fold it was found at and the lease's path as written.
const leaseCheckSQL = `SELECT 'g', lp.fold, lp.path, l.token, l.id, l.state, l.holder, l.ended_at
FROM leases l JOIN lease_paths lp ON lp.lease_id = l.id
WHERE l.repository = $1 AND l.token = ANY($2::bigint[]) AND lp.fold = ANY($3::text[])
UNION ALL
SELECT 'n', c.fold, n.path, n.token, n.id, n.state, n.holder, NULL
FROM unnest($3::text[]) AS c(fold)
CROSS JOIN LATERAL (
	SELECT lp.path, lp.token, l.id, l.state, l.holder
	FROM lease_paths lp JOIN leases l ON l.id = lp.lease_id
	WHERE lp.repository = $1 AND lp.fold = c.fold
	ORDER BY lp.token DESC
	LIMIT 1) n`

// baseSQL reads the base revision's git tree.
const baseSQL = `SELECT git_tree FROM revisions WHERE id = $1 AND repository = $2`

// blobIDsSQL reads the git ids of the edits' blobs, stored before or in the same transaction.
const blobIDsSQL = `SELECT digest, git_id FROM blobs WHERE digest = ANY($1::text[])`

// integrateSQL stores the new trees and commit ($12-$14), the revision, moves the mainline,
// records the change.integrated event (by the holder $8) and answers the change, INTEGRATED,
// with its task claim ($16, $17).
var integrateSQL = q(`WITH g AS (` + putGitObjectsArgs(12) + `),
rv AS (
	INSERT INTO revisions (id, repository, parent, change_id, author, git_tree, git_commit, created_at)
	VALUES ($4, $5, $6, $7, $8, $2, $3, {now})),
u AS (
	UPDATE repositories SET mainline = $4 WHERE name = $5),
c AS (
	INSERT INTO changes (id, repository, state, base_revision, candidate_revision, integrated_revision, author, message, paths,
		fencing_tokens, created_at, updated_at, task_id, task_claim_number)
	VALUES ($7, $5, 'integrated', $9, $4, $4, $8, $10, $11, $15, {now}, {now}, $16, $17)
	RETURNING ` + changeCols + `),
ev AS (` + auditRecord(`SELECT split_part(c.author, '|', 1), c.author, 'change.integrated', 'change/' || c.id, `+jsonObject(
	mem("paths", jsonTexts("c.paths")),
	mem("repository", jsonText("c.repository")),
	mem("revision", jsonText("c.integrated_revision")))+` FROM c`) + `)
SELECT ` + changeCols + ` FROM c`)

// queueChangeSQL answers the change, QUEUED with its edits and its task claim ($10, $11), and
// records the change.queued event (by the holder $5). It runs under the repository's lock, so
// its seq, its place in the queue, follows that of every change queued before it commits.
var queueChangeSQL = q(`WITH c AS (
	INSERT INTO changes (id, repository, state, base_revision, author, message, paths, edits, fencing_tokens, created_at, updated_at,
		task_id, task_claim_number)
	VALUES ($2, $3, 'queued', $4, $5, $6, $7, $8, $9, {now}, {now}, $10, $11)
	RETURNING ` + changeCols + `),
ev AS (` + auditRecord(`SELECT split_part(c.author, '|', 1), c.author, 'change.queued', 'change/' || c.id, `+jsonObject(
	mem("paths", jsonTexts("c.paths")),
	mem("repository", jsonText("c.repository")))+` FROM c`) + `)
SELECT ` + changeCols + ` FROM c`)

// Integrate checks the edited paths' leases, applies the edits to the mainline's git tree,
// stores the new trees, revision and commit and moves the mainline, all in one transaction;
// or, when the repository has a validation policy, queues the change with its edits.
func (db *DB) Integrate(ctx context.Context, p store.IntegrateParams) (store.Change, error) {
	tokens := make([]int64, len(p.FencingTokens))
	for i, t := range p.FencingTokens {
		tokens[i] = int64(t)
	}
	tokensJSON, err := json.Marshal(nonNilUints(p.FencingTokens))
	if err != nil {
		return store.Change{}, fmt.Errorf("postgres: integrate: %w", err)
	}
	candidates := leaseCandidates(p.Paths)
	var editDigests []string
	for _, e := range p.Edits {
		if e.WritesBlob() {
			editDigests = append(editDigests, e.Digest)
		}
	}

	// The transaction is begun and committed by statements sent with the others, so that it
	// takes two round trips (and one more per tree read that no integration read before), one
	// of them while the repository is locked. A connection left in a transaction (a failed
	// ROLLBACK) is closed by the pool on release.
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return store.Change{}, interpretError("integrate", err)
	}
	defer conn.Release()
	committed := false
	defer func() {
		if !committed {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			conn.Exec(rctx, "ROLLBACK") //nolint:errcheck // see above
		}
	}()

	// The first round trip: BEGIN, the blobs (before the lock, which they do not need; in
	// digest order), the lock, the mainline, the lease check, the base revision, the edits'
	// blobs' git ids.
	var batch pgx.Batch
	batch.Queue("BEGIN")
	if len(p.Blobs) > 0 {
		batch.Queue(putBlobsSQL, blobArgs(p.Blobs)...)
	}
	batch.Queue(integrateLockSQL, p.Repository)
	batch.Queue(mainlineSQL, p.Repository)
	batch.Queue(leaseCheckSQL, p.Repository, tokens, candidates)
	batch.Queue(baseSQL, p.BaseRevision, p.Repository)
	batch.Queue(blobIDsSQL, editDigests)
	if p.TaskID != "" {
		// The task's row after the repository's, as InQueue takes them.
		batch.Queue(lockTaskSQL, db.now(), p.TaskID)
	}
	br := conn.SendBatch(ctx, &batch)
	defer br.Close()

	st, err := readIntegrateBatch(br, p, len(editDigests))
	if err != nil {
		return store.Change{}, err
	}
	if err := br.Close(); err != nil {
		return store.Change{}, interpretError("integrate", err)
	}

	backend := gitBackend{qr: conn, blobIDs: st.blobIDs}
	objs := store.NewGitObjects(ctx, backend)
	baseID, err := store.ParseGitID(st.baseTree)
	if err != nil {
		return store.Change{}, fmt.Errorf("postgres: integrate: base revision %s: %w", p.BaseRevision, err)
	}
	mainID, err := store.ParseGitID(st.mainTree)
	if err != nil {
		return store.Change{}, fmt.Errorf("postgres: integrate: mainline %s: %w", st.mainline, err)
	}
	newTree, err := store.RebaseGit(ctx, backend, objs, baseID, mainID, p.Edits)
	if err != nil {
		return store.Change{}, err
	}
	paths := p.Paths
	if paths == nil {
		paths = []string{}
	}

	// The second round trip: the change and what goes with it, COMMIT. After an error the
	// server skips the COMMIT, and the deferred ROLLBACK ends the transaction.
	var final pgx.Batch
	var written []store.GitObject // the trees and commit the statement stores
	changeID := store.NewID("chg")
	if st.gated {
		// The rebased tree is not kept: the gate's advance builds the candidate on the mainline of
		// the change's turn, from the edits.
		edits, err := encodeEdits(p.Edits)
		if err != nil {
			return store.Change{}, err
		}
		final.Queue(queueChangeSQL, db.now(), changeID, p.Repository, p.BaseRevision, p.Holder,
			p.Message, paths, edits, string(tokensJSON), p.TaskID, int64(p.TaskClaimNumber))
	} else {
		if written, err = db.queueMainlineMove(&final, objs, newTree, p, st, changeID, paths, tokensJSON); err != nil {
			return store.Change{}, err
		}
	}
	if p.PushedCommit != "" {
		final.Queue(`INSERT INTO pushed_commits (repository, git_commit, change_id) VALUES ($1, $2, $3)
			ON CONFLICT (repository, git_commit) DO UPDATE SET change_id = excluded.change_id`,
			p.Repository, p.PushedCommit, changeID)
	}
	finishing := p.TaskID != "" && !st.gated
	if finishing {
		// The change lands: it finishes its task, which the first round trip locked and checked.
		final.Queue(finishTaskSQL, db.now(), p.TaskID, changeID, store.PrincipalOf(p.Holder), p.Holder)
	}
	final.Queue("COMMIT")
	fr := conn.SendBatch(ctx, &final)
	defer fr.Close()
	var s changeScan
	if err := fr.QueryRow().Scan(s.dest()...); err != nil {
		return store.Change{}, interpretError("integrate", err)
	}
	if p.PushedCommit != "" {
		if _, err := fr.Exec(); err != nil {
			return store.Change{}, interpretError("integrate: remember the pushed commit", err)
		}
	}
	if finishing {
		var n int64
		if err := fr.QueryRow().Scan(&n); err != nil {
			return store.Change{}, interpretError("integrate: finish task "+p.TaskID, err)
		}
		if n != 1 {
			return store.Change{}, fmt.Errorf("postgres: integrate: finish task %s: %w", p.TaskID, store.ErrNotFound)
		}
	}
	if _, err := fr.Exec(); err != nil {
		return store.Change{}, interpretError("integrate: commit", err)
	}
	committed = true
	// Every result is read: the change is committed whatever Close says.
	fr.Close() //nolint:errcheck // see above
	db.audited()
	objs.KeepDecoded(written)
	return s.change(), nil
}

// integrateRead is what the first round trip of Integrate read under the repository's lock.
type integrateRead struct {
	mainline, mainTree, mainCommit string
	gated                          bool // the repository has a validation policy
	baseTree                       string
	blobIDs                        map[string]plumbing.Hash // by digest, of the edits' blobs
	task                           store.Task               // p.TaskID's, locked, its claim checked
}

// readIntegrateBatch reads the answers to the first round trip of Integrate, in the order they
// were queued, and answers the refusal of an integration the leases given do not allow.
// editBlobs is how many digests blobIDsSQL was given.
func readIntegrateBatch(br pgx.BatchResults, p store.IntegrateParams, editBlobs int) (integrateRead, error) {
	if _, err := br.Exec(); err != nil {
		return integrateRead{}, interpretError("integrate: begin", err)
	}
	if len(p.Blobs) > 0 {
		if _, err := br.Exec(); err != nil {
			return integrateRead{}, interpretError("integrate: store blobs", err)
		}
	}
	var r integrateRead
	if err := br.QueryRow().Scan(&r.mainline, &r.gated); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return integrateRead{}, fmt.Errorf("repository %s: %w", p.Repository, store.ErrNotFound)
		}
		return integrateRead{}, interpretError("integrate: lock repository", err)
	}
	if err := br.QueryRow().Scan(&r.mainTree, &r.mainCommit); err != nil {
		return integrateRead{}, interpretError("integrate: read the mainline", err)
	}
	check, err := readLeaseCheck(br)
	if err != nil {
		return integrateRead{}, err
	}
	if err := check.refusal(p); err != nil {
		return integrateRead{}, err
	}
	if err := br.QueryRow().Scan(&r.baseTree); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return integrateRead{}, fmt.Errorf("revision %s of repository %s: %w", p.BaseRevision, p.Repository, store.ErrNotFound)
		}
		return integrateRead{}, interpretError("integrate: read the base revision", err)
	}
	if r.blobIDs, err = readBlobIDs(br, editBlobs); err != nil {
		return integrateRead{}, err
	}
	if p.TaskID != "" {
		var s taskScan
		if err := br.QueryRow().Scan(s.dest()...); err != nil {
			return integrateRead{}, interpretError("integrate: task "+p.TaskID, err)
		}
		if r.task = s.task(); r.task.Repository != p.Repository {
			return integrateRead{}, fmt.Errorf("integrate: task %s of repository %q: %w", p.TaskID, p.Repository, store.ErrNotFound)
		}
		if err := store.CheckTaskClaim(r.task, p.Holder, p.TaskClaimNumber); err != nil {
			return integrateRead{}, err
		}
	}
	return r, nil
}

// readLeaseCheck reads the rows of leaseCheckSQL.
func readLeaseCheck(br pgx.BatchResults) (leaseCheck, error) {
	rows, err := br.Query()
	if err != nil {
		return leaseCheck{}, interpretError("integrate: check leases", err)
	}
	check := leaseCheck{given: map[string][]store.Lease{}, newest: map[string]store.Grant{}}
	var kind, fold string
	var g grant
	_, err = pgx.ForEachRow(rows, []any{&kind, &fold, &g.path, &g.token, &g.id, &g.state, &g.holder, &g.ended}, func() error {
		check.add(kind, fold, g)
		return nil
	})
	if err != nil {
		return leaseCheck{}, interpretError("integrate: check leases", err)
	}
	return check, nil
}

// readBlobIDs reads the rows of blobIDsSQL, the git ids of the edits' blobs by digest.
func readBlobIDs(br pgx.BatchResults, blobs int) (map[string]plumbing.Hash, error) {
	blobIDs := make(map[string]plumbing.Hash, blobs)
	rows, err := br.Query()
	if err != nil {
		return nil, interpretError("integrate: read the blobs' git ids", err)
	}
	var digest string
	var gitID []byte
	if _, err = pgx.ForEachRow(rows, []any{&digest, &gitID}, func() error {
		var h plumbing.Hash
		copy(h[:], gitID)
		blobIDs[digest] = h
		return nil
	}); err != nil {
		return nil, interpretError("integrate: read the blobs' git ids", err)
	}
	return blobIDs, nil
}

// queueMainlineMove writes the commit of newTree on the mainline and queues integrateSQL, which
// stores it with the trees objs holds, and answers those objects.
func (db *DB) queueMainlineMove(final *pgx.Batch, objs *store.GitObjects, newTree plumbing.Hash, p store.IntegrateParams,
	st integrateRead, changeID string, paths []string, tokensJSON []byte) ([]store.GitObject, error) {
	revID := store.NewID("rev")
	parent, err := store.ParseGitID(st.mainCommit)
	if err != nil {
		return nil, fmt.Errorf("postgres: integrate: mainline %s: commit: %w", st.mainline, err)
	}
	now := db.commitTime()
	info := store.CommitInfo{
		Repository: p.Repository, RevisionID: revID, ChangeID: changeID, Holder: p.Holder, Message: p.Message,
		FencingTokens: p.FencingTokens, AuthoredAt: now, CommittedAt: now, EmailDomain: db.emailDomain,
	}
	if claim := (store.Change{TaskID: p.TaskID, TaskClaimNumber: p.TaskClaimNumber}).TaskClaim(); claim != "" {
		info.Tasks = []string{claim}
	}
	commit, err := store.WriteMainlineCommit(objs, newTree, parent, info)
	if err != nil {
		return nil, fmt.Errorf("postgres: integrate: %w", err)
	}
	written, ids, types, data, err := pendingArgs(objs)
	if err != nil {
		return nil, fmt.Errorf("postgres: integrate: %w", err)
	}
	final.Queue(integrateSQL, db.now(), newTree.String(), commit.String(), revID, p.Repository, st.mainline,
		changeID, p.Holder, p.BaseRevision, p.Message, paths, ids, types, data, string(tokensJSON), p.TaskID, int64(p.TaskClaimNumber))
	return written, nil
}

// nonNilUints keeps absent tokens as an empty JSON array.
func nonNilUints(t []uint64) []uint64 {
	if t == nil {
		return []uint64{}
	}
	return t
}

// encodeEdits answers the JSON of a change's edits as changes.edits keeps them; no edits are
// an empty list, never null.
func encodeEdits(edits []repo.FileEdit) ([]byte, error) {
	if edits == nil {
		edits = []repo.FileEdit{}
	}
	b, err := json.Marshal(edits)
	if err != nil {
		return nil, fmt.Errorf("postgres: encode the edits: %w", err)
	}
	return b, nil
}

// leaseCandidates answers the folds of the lease paths that can cover or overlap one of the
// edited files: the fold of each file and of its ancestor directories, each once.
func leaseCandidates(paths []string) []string {
	paths = foldAll(paths)
	seen := make(map[string]bool, len(paths))
	out := make([]string, 0, len(paths))
	add := func(c string) {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	for _, f := range paths {
		for _, a := range repo.Ancestors(f) {
			add(a)
		}
		add(f)
	}
	return out
}

// grant is a lease at one of its paths.
type grant struct {
	path   string
	token  int64
	id     string
	state  string
	holder string
	ended  *time.Time
}

// leaseCheck holds what leaseCheckSQL read.
type leaseCheck struct {
	given  map[string][]store.Lease // by fold of a lease path: the given leases there
	newest map[string]store.Grant   // by fold of a lease path: the newest grant there
}

// add keeps a row of leaseCheckSQL as what store.CheckIntegrateLeases reads, converted once
// however many edited paths it covers.
func (c leaseCheck) add(kind, fold string, g grant) {
	if kind == "g" {
		c.given[fold] = append(c.given[fold], store.Lease{ID: g.id, Holder: g.holder, FencingToken: uint64(g.token),
			State: store.LeaseState(g.state), EndedAt: utcOrZero(g.ended)})
	} else {
		c.newest[fold] = store.Grant{Token: uint64(g.token), Holder: g.holder, Path: g.path}
	}
}

// refusal answers store.CheckIntegrateLeases of what leaseCheckSQL read: the leases that cover
// a path are those found at its candidate folds, and its later grant the newest of the grants
// there, the outermost fold's on a tie.
func (c leaseCheck) refusal(p store.IntegrateParams) error {
	cands := make([][]string, len(p.Paths))
	covering := make([][]store.Lease, len(p.Paths))
	for i, f := range p.Paths {
		folded := repo.Fold(f)
		cands[i] = append(repo.Ancestors(folded), folded)
		for _, lp := range cands[i] {
			covering[i] = append(covering[i], c.given[lp]...)
		}
	}
	return store.CheckIntegrateLeases(p, covering, func(i int, token uint64) (store.Grant, bool, error) {
		var newer store.Grant
		found := false
		for _, lp := range cands[i] {
			if n, ok := c.newest[lp]; ok && n.Token > token && (!found || n.Token > newer.Token) {
				newer, found = n, true
			}
		}
		return newer, found, nil
	})
}
