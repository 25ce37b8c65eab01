package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/jackc/pgx/v5"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// ---- the integration queue ----
//
// A repository's queue is its QUEUED and VALIDATING changes in seq order; the gate's engine
// (gate.RunQueue) decides its steps. Every step (Integrate queueing a change, an advance
// settling, landing or building candidates) runs under the repository's row lock, so replicas
// advancing the same queue take turns, and each sees what the one before it committed.

// setValidationSQL replaces the policy and records the repository.validation_set event ($4
// and $5 the actor, $6 the details).
var setValidationSQL = q(`WITH r AS (
	UPDATE repositories SET validation = $3 WHERE name = $2 RETURNING ` + repositoryCols + `),
ev AS (` + auditRecord(`SELECT $4, $5, 'repository.validation_set', 'repository/' || r.name, $6 FROM r`) + `)
SELECT * FROM r`)

// SetValidation replaces a repository's validation policy.
func (db *DB) SetValidation(ctx context.Context, repository string, validation []byte) (store.Repository, error) {
	var r store.Repository
	actor := store.ActorOf(ctx)
	err := db.pool.QueryRow(ctx, setValidationSQL, db.now(), repository, bytesOrNull(validation), actor.Principal, actor.Holder,
		details(map[string]any{"validation": jsonValue(validation)})).Scan(repositoryDest(&r)...)
	if err != nil {
		return store.Repository{}, interpretError("repository "+repository, err)
	}
	db.audited()
	finishRepository(&r)
	return r, nil
}

// pendingQueuesSQL reads changes_queue alone, whose predicate is its condition.
const pendingQueuesSQL = `SELECT DISTINCT repository FROM changes WHERE state IN ('queued', 'validating') ORDER BY repository`

// PendingQueues answers the repositories that have a QUEUED or VALIDATING change, by name.
func (db *DB) PendingQueues(ctx context.Context) ([]string, error) {
	rows, err := db.pool.Query(ctx, pendingQueuesSQL)
	if err != nil {
		return nil, interpretError("pending queues", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, interpretError("pending queues", err)
	}
	return names, nil
}

// advanceLockSQL holds the repository for InQueue, as integrateLockSQL does for Integrate
// (the row alone, for the same reason), and reads what the advance starts from.
const advanceLockSQL = `SELECT mainline, validation FROM repositories WHERE name = $1 FOR UPDATE`

// pendingSQL answers the repository's queue in order. The states are literals so that the
// search walks changes_queue, whose predicate they are.
var pendingSQL = `SELECT ` + changeCols + ` FROM changes
	WHERE repository = $1 AND state IN ('queued', 'validating') ORDER BY seq LIMIT $2`

var candidateCols = `id, repository, state, revision, parent_revision, job_id, attestation_digest, reason, lane, parent_tree,
	size, created_at, updated_at`

// liveCandidatesSQL reads candidates_live alone, whose predicate it repeats.
var liveCandidatesSQL = `SELECT ` + candidateCols + ` FROM candidates
	WHERE repository = $1 AND state IN ('validating', 'passed', 'failed') ORDER BY seq`

var changeCandidatesSQL = `SELECT ` + candidateCols + ` FROM candidates
	WHERE id IN (SELECT candidate_id FROM candidate_changes WHERE change_id = $1) ORDER BY seq`

// setChangeSQL writes what a step of the queue changes in a change, if it is still in state $11.
var setChangeSQL = q(`UPDATE changes SET
	state = $3, candidate_revision = $4, integrated_revision = $5, job_id = $6, attestation_digest = $7,
	reason = $8, candidate_id = $9, batch_limit = $10, updated_at = {now}
WHERE id = $2 AND state = $11
RETURNING ` + changeCols)

var insertCandidateSQL = q(`INSERT INTO candidates (id, repository, state, revision, parent_revision, job_id, lane,
	parent_tree, size, created_at, updated_at)
VALUES ($2, $3, $4, $5, $6, $7, $8, $9, $10, {now}, {now})`)

var insertCandidateChangesSQL = `INSERT INTO candidate_changes (candidate_id, change_id, position)
SELECT $1, c.id, c.n - 1 FROM unnest($2::text[]) WITH ORDINALITY AS c(id, n)`

var setCandidateSQL = q(`UPDATE candidates SET state = $3, attestation_digest = $4, reason = $5, updated_at = {now}
WHERE id = $2 AND state = $6`)

// recordSQL records one event of the queue's, the server's own.
var recordSQL = q(auditRecord(`SELECT $2::text, $3::text, $4::text, $5::text, $6::text`))

// storeRevisionSQL stores a built revision and answers its time.
var storeRevisionSQL = q(`INSERT INTO revisions (id, repository, parent, change_id, author, git_tree, git_commit, created_at)
VALUES ($2, $3, $4, $5, $6, $7, $8, {now})
RETURNING created_at`)

// moveMainlineSQL is the compare-and-swap of the mainline from $2 to $3. Under the lock it
// cannot fail; the condition keeps the rule in the statement that applies it.
const moveMainlineSQL = `UPDATE repositories SET mainline = $3 WHERE name = $1 AND mainline = $2`

// InQueue runs fn in one transaction under the repository's lock. Its events, the validation
// jobs' too, are the server's own (store.SystemPrincipal).
func (db *DB) InQueue(ctx context.Context, repository string, fn func(store.QueueTx) error) error {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return interpretError("advance queue", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	a := &advance{db: db, ctx: ctx, tx: tx, repository: repository}
	if err := tx.QueryRow(ctx, advanceLockSQL, repository).Scan(&a.mainline, &a.validation); err != nil {
		return interpretError("repository "+repository, err)
	}
	a.validation = bytesOrNull(a.validation)
	a.objs = store.NewGitObjects(ctx, gitBackend{qr: tx})
	if err := fn(a); err != nil {
		if a.err != nil {
			err = a.err
		}
		return fmt.Errorf("postgres: advance the queue of %q: %w", repository, err)
	}
	if a.err != nil {
		return fmt.Errorf("postgres: advance the queue of %q: %w", repository, a.err)
	}
	if err := tx.Commit(ctx); err != nil {
		return interpretError("advance queue: commit", err)
	}
	if a.enqueued {
		db.signal.Fire()
	}
	if a.recorded {
		db.audited()
	}
	return nil
}

// advance is one InQueue transaction: its store.QueueTx.
type advance struct {
	db         *DB
	ctx        context.Context
	tx         pgx.Tx
	repository string
	mainline   string
	validation []byte
	objs       *store.GitObjects
	recorded   bool
	enqueued   bool  // a new job was enqueued: the job signal fires after the commit
	err        error // the first failure of Record, which answers none
}

func (a *advance) Mainline() string   { return a.mainline }
func (a *advance) Validation() []byte { return a.validation }

func (a *advance) Pending(limit int) ([]store.Change, error) {
	rows, err := a.tx.Query(a.ctx, pendingSQL, a.repository, limit)
	if err != nil {
		return nil, interpretError("read the queue", err)
	}
	return collectChanges(rows)
}

func (a *advance) Live() ([]store.Candidate, error) {
	return queryCandidates(a.ctx, a.tx, liveCandidatesSQL, a.repository)
}

func queryCandidates(ctx context.Context, qr querier, sql string, args ...any) ([]store.Candidate, error) {
	rows, err := qr.Query(ctx, sql, args...)
	if err != nil {
		return nil, interpretError("read candidates", err)
	}
	defer rows.Close()
	var cands []store.Candidate
	for rows.Next() {
		var (
			c     store.Candidate
			state string
		)
		if err := rows.Scan(&c.ID, &c.Repository, &state, &c.Revision, &c.ParentRevision, &c.JobID,
			&c.AttestationDigest, &c.Reason, &c.Lane, &c.ParentTree, &c.Size, &c.CreatedAt, &c.UpdatedAt); err != nil {
			return nil, interpretError("read candidates", err)
		}
		c.State, c.CreatedAt, c.UpdatedAt = store.CandidateState(state), c.CreatedAt.UTC(), c.UpdatedAt.UTC()
		cands = append(cands, c)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("read candidates", err)
	}
	return cands, nil
}

func (a *advance) Revision(id string) (store.Revision, error) {
	return getRevision(a.ctx, a.tx, a.repository, id)
}

func (a *advance) Job(id string) (store.Job, *store.Attestation, error) {
	var js jobScan
	if err := a.tx.QueryRow(a.ctx, getJobSQL, id).Scan(js.dest()...); err != nil {
		return store.Job{}, nil, interpretError("validate job "+id, err)
	}
	job := js.job()
	if job.AttestationDigest == "" {
		return job, nil, nil
	}
	att, err := getAttestation(a.ctx, a.tx, job.AttestationDigest)
	switch {
	case err == nil:
		return job, &att, nil
	case errors.Is(err, store.ErrNotFound):
		// A digest whose envelope is missing cannot be verified either: Decide sees no
		// attestation rather than the queue stopping on it.
		return job, nil, nil
	}
	return store.Job{}, nil, err
}

func (a *advance) Edits(changeID string) ([]repo.FileEdit, []uint64, error) {
	var (
		js     []byte
		tokens string
	)
	if err := a.tx.QueryRow(a.ctx, `SELECT edits, fencing_tokens FROM changes WHERE id = $1`, changeID).Scan(&js, &tokens); err != nil {
		return nil, nil, interpretError("change "+changeID+": its edits", err)
	}
	var edits []repo.FileEdit
	if js != nil {
		if err := json.Unmarshal(js, &edits); err != nil {
			return nil, nil, fmt.Errorf("change %s: decode its edits: %w", changeID, err)
		}
	}
	var toks []uint64
	if err := json.Unmarshal([]byte(tokens), &toks); err != nil {
		return nil, nil, fmt.Errorf("change %s: its fencing tokens: %w", changeID, err)
	}
	return edits, toks, nil
}

func (a *advance) Rebase(base store.Revision, onto plumbing.Hash, edits []repo.FileEdit) (plumbing.Hash, error) {
	baseTree, err := store.ParseGitID(base.GitTree)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("revision %s: git tree: %w", base.ID, err)
	}
	return store.RebaseGit(a.ctx, gitBackend{qr: a.tx}, a.objs, baseTree, onto, edits)
}

func (a *advance) Project(tree plumbing.Hash, hidden []string) (plumbing.Hash, error) {
	return gitstore.Prune(a.objs, tree, hidden)
}

func (a *advance) StoreRevision(parent store.Revision, tree plumbing.Hash, changeID, author string, commit *store.CommitInfo) (store.Revision, error) {
	rev := store.Revision{ID: store.NewID("rev"), Repository: a.repository, Parent: parent.ID, ChangeID: changeID,
		Holder: author, GitTree: tree.String()}
	if commit != nil {
		id, err := a.writeCommit(rev, parent.GitCommit, *commit)
		if err != nil {
			return store.Revision{}, err
		}
		rev.GitCommit = id
	}
	if err := a.objs.Flush(); err != nil {
		return store.Revision{}, err
	}
	err := a.tx.QueryRow(a.ctx, storeRevisionSQL, a.db.now(), rev.ID, rev.Repository, rev.Parent,
		rev.ChangeID, rev.Holder, rev.GitTree, rev.GitCommit).Scan(&rev.CreatedAt)
	if err != nil {
		return store.Revision{}, interpretError("store the revision of change "+changeID, err)
	}
	rev.CreatedAt = rev.CreatedAt.UTC()
	return rev, nil
}

// writeCommit writes the mainline commit of rev on top of the commit parent, dated now.
func (a *advance) writeCommit(rev store.Revision, parent string, c store.CommitInfo) (string, error) {
	c.CommittedAt, c.EmailDomain = a.db.commitTime(), a.db.emailDomain
	return store.WriteRevisionCommit(a.objs, rev, parent, c)
}

func (a *advance) WriteCommit(rev, parent store.Revision, c store.CommitInfo) (string, error) {
	id, err := a.writeCommit(rev, parent.GitCommit, c)
	if err != nil {
		return "", err
	}
	if err := a.objs.Flush(); err != nil {
		return "", err
	}
	if _, err := a.tx.Exec(a.ctx, `UPDATE revisions SET git_commit = $1 WHERE id = $2`, id, rev.ID); err != nil {
		return "", interpretError("store the commit of revision "+rev.ID, err)
	}
	return id, nil
}

func (a *advance) MoveMainline(from, to string) error {
	tag, err := a.tx.Exec(a.ctx, moveMainlineSQL, a.repository, from, to)
	if err != nil {
		return interpretError("move the mainline", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("move the mainline: the mainline of %q moved during the transaction", a.repository)
	}
	a.mainline = to
	return nil
}

func (a *advance) Enqueue(p store.EnqueueJobParams) (store.Job, error) {
	job, existing, err := a.db.enqueue(a.ctx, a.tx, p, systemActor)
	if !existing && err == nil {
		a.recorded, a.enqueued = true, true
	}
	return job, err
}

func (a *advance) CancelJob(id string) error {
	var (
		ok bool
		s  jobScan
	)
	// A job that ended already (or whose worker was asked already) is left as it is.
	err := a.tx.QueryRow(a.ctx, cancelSQL, a.db.now(), id, systemActor.Principal, systemActor.Holder).
		Scan(append([]any{&ok}, s.dest()...)...)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return interpretError("cancel job "+id, err)
	}
	if ok {
		a.recorded = true
	}
	return nil
}

func (a *advance) InsertCandidate(c store.Candidate) error {
	if _, err := a.tx.Exec(a.ctx, insertCandidateSQL, a.db.now(), c.ID, a.repository, string(c.State), c.Revision,
		c.ParentRevision, c.JobID, c.Lane, c.ParentTree, len(c.Changes)); err != nil {
		return interpretError("store candidate", err)
	}
	if _, err := a.tx.Exec(a.ctx, insertCandidateChangesSQL, c.ID, c.Changes); err != nil {
		return interpretError("store candidate", err)
	}
	return nil
}

func (a *advance) SetCandidate(c store.Candidate, from store.CandidateState) error {
	tag, err := a.tx.Exec(a.ctx, setCandidateSQL, a.db.now(), c.ID, string(c.State), c.AttestationDigest, c.Reason, string(from))
	if err != nil {
		return interpretError("update candidate "+c.ID, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("update candidate %s: it is no longer %s", c.ID, from)
	}
	return nil
}

func (a *advance) SetChange(c store.Change, from store.ChangeState) (store.Change, error) {
	var s changeScan
	err := a.tx.QueryRow(a.ctx, setChangeSQL, a.db.now(), c.ID, string(c.State), c.CandidateRevision,
		c.IntegratedRevision, c.JobID, c.AttestationDigest, c.Reason, c.CandidateID, c.BatchLimit, string(from)).Scan(s.dest()...)
	if err != nil {
		return store.Change{}, interpretError("update change "+c.ID, err)
	}
	return s.change(), nil
}

func (a *advance) Task(id string) (store.Task, error) {
	// Locked: FinishTask may follow, and no claim may change it meanwhile.
	return a.db.readTask(a.ctx, a.tx, lockTaskSQL, "", id)
}

func (a *advance) FinishTask(id, changeID string) error {
	if err := a.db.finishTask(a.ctx, a.tx, id, changeID, systemActor); err != nil {
		return err
	}
	a.recorded = true
	return nil
}

func (a *advance) Record(action, subject string, det map[string]any) {
	if a.err != nil {
		return
	}
	var detJSON []byte
	if det != nil {
		detJSON = details(det)
	}
	if _, err := a.tx.Exec(a.ctx, recordSQL, a.db.now(), systemActor.Principal, systemActor.Holder, action, subject,
		textOrNil(detJSON)); err != nil {
		a.err = interpretError("record "+action, err)
		return
	}
	a.recorded = true
}

// ListCandidates answers a change's candidates, oldest first, or a repository's live ones.
func (db *DB) ListCandidates(ctx context.Context, p store.ListCandidatesParams) ([]store.Candidate, error) {
	var (
		cands []store.Candidate
		err   error
	)
	if p.ChangeID != "" {
		cands, err = queryCandidates(ctx, db.pool, changeCandidatesSQL, p.ChangeID)
	} else {
		cands, err = queryCandidates(ctx, db.pool, liveCandidatesSQL, p.Repository)
	}
	if err != nil || len(cands) == 0 {
		return cands, err
	}
	ids := make([]string, len(cands))
	at := make(map[string]int, len(cands))
	for i, c := range cands {
		ids[i], at[c.ID] = c.ID, i
	}
	rows, err := db.pool.Query(ctx, `SELECT candidate_id, change_id FROM candidate_changes
		WHERE candidate_id = ANY($1) ORDER BY candidate_id, position`, ids)
	if err != nil {
		return nil, interpretError("read candidates", err)
	}
	defer rows.Close()
	for rows.Next() {
		var cand, change string
		if err := rows.Scan(&cand, &change); err != nil {
			return nil, interpretError("read candidates", err)
		}
		cands[at[cand]].Changes = append(cands[at[cand]].Changes, change)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("read candidates", err)
	}
	return cands, nil
}
