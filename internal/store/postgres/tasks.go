package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ag-coord/ag/internal/store"
)

var _ store.TaskStore = (*DB)(nil)

// ---- tasks ----
//
// A task's row is locked (FOR UPDATE) by every transaction that changes it, after its
// repository's row when that is locked too (Integrate, InQueue), never before: a claim, a
// renewal, a release and a cancellation lock the task alone. ClaimTask without a task takes
// the first ready task FOR UPDATE SKIP LOCKED, so that claimers on any replica never take one
// task twice nor wait for one another.

// depsDoneSQL is true when every dependency of the task t is done.
const depsDoneSQL = `NOT EXISTS (SELECT 1 FROM tasks d WHERE d.id = ANY(t.depends_on) AND d.state <> 'done')`

// taskCols are a task's columns (of the alias t), whether its dependencies are done, and the
// statement's time ($1), as of which taskScan answers it.
const taskCols = `t.id, t.repository, t.title, t.body, t.labels, t.paths, t.depends_on, t.priority, t.state,
	t.created_by, t.created_at, t.updated_at, t.attempts, t.claimant, t.claimed_at, t.claim_expires_at, t.change_id,
	t.done_at, ` + depsDoneSQL + `, {now}`

type taskScan struct {
	t                      store.Task
	state                  string
	attempts               int64
	claimed, expires, done *time.Time
	depsDone               bool
	now                    time.Time
}

func (s *taskScan) dest() []any {
	t := &s.t
	return []any{&t.ID, &t.Repository, &t.Title, &t.Body, &t.Labels, &t.Paths, &t.DependsOn, &t.Priority, &s.state,
		&t.CreatedBy, &t.CreatedAt, &t.UpdatedAt, &s.attempts, &t.Claimant, &s.claimed, &s.expires, &t.ChangeID,
		&s.done, &s.depsDone, &s.now}
}

// task answers the task as of the statement's time (store.StateAt).
func (s *taskScan) task() store.Task {
	t := s.t
	for _, l := range []*[]string{&t.Labels, &t.Paths, &t.DependsOn} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	t.CreatedAt, t.UpdatedAt = t.CreatedAt.UTC(), t.UpdatedAt.UTC()
	t.Attempts = uint64(s.attempts)
	t.ClaimedAt, t.ClaimExpiresAt, t.DoneAt = utcOrZero(s.claimed), utcOrZero(s.expires), utcOrZero(s.done)
	t.State = store.StateAt(store.TaskState(s.state), t.ClaimExpiresAt, s.now)
	t.ClaimCurrent = store.TaskState(s.state) == store.TaskClaimed
	t.Ready = t.State == store.TaskOpen && s.depsDone
	return t
}

var (
	// getTaskSQL reads the task $2.
	getTaskSQL = q(`SELECT ` + taskCols + ` FROM tasks t WHERE t.id = $2`)
	// lockTaskSQL reads the task $2 and locks it for the rest of the transaction.
	lockTaskSQL = getTaskSQL + ` FOR UPDATE OF t`
	// blockingSQL reads the first of the tasks $2 (a task's dependencies) that is not done.
	blockingSQL = q(`SELECT ` + taskCols + ` FROM tasks t WHERE t.id = ANY($2::text[]) AND t.state <> 'done'
		ORDER BY array_position($2::text[], t.id) LIMIT 1`)
)

// readTask answers the task id, read by sql (getTaskSQL or lockTaskSQL), or ErrNotFound; with
// repository, a task of another repository is not found either.
func (db *DB) readTask(ctx context.Context, qr querier, sql, repository, id string) (store.Task, error) {
	var s taskScan
	if err := qr.QueryRow(ctx, sql, db.now(), id).Scan(s.dest()...); err != nil {
		return store.Task{}, interpretError("task "+id, err)
	}
	t := s.task()
	if repository != "" && t.Repository != repository {
		return store.Task{}, fmt.Errorf("task %s of repository %q: %w", id, repository, store.ErrNotFound)
	}
	return t, nil
}

// repositoryExistsSQL answers a row when the repository $1 exists.
const repositoryExistsSQL = `SELECT true FROM repositories WHERE name = $1`

// repositoryExists answers ErrNotFound for an unknown repository.
func repositoryExists(ctx context.Context, qr querier, repository string) error {
	var ok bool
	if err := qr.QueryRow(ctx, repositoryExistsSQL, repository).Scan(&ok); err != nil {
		return interpretError(fmt.Sprintf("repository %q", repository), err)
	}
	return nil
}

// createTaskSQL stores an open task and records task.created ($11 and $12 the actor, $13 the
// details).
var createTaskSQL = q(`WITH t AS (
	INSERT INTO tasks (id, repository, title, body, labels, paths, depends_on, priority, state, created_by, created_at, updated_at)
	VALUES ($2, $3, $4, $5, $6, $7, $8, $9, 'open', $10, {now}, {now})
	RETURNING *),
ev AS (` + auditRecord(`SELECT $11::text, $12::text, 'task.created', 'task/' || t.id, $13::text FROM t`) + `)
SELECT ` + taskCols + ` FROM t`)

// CreateTask stores an open task whose dependencies are tasks of its repository.
func (db *DB) CreateTask(ctx context.Context, p store.CreateTaskParams) (store.Task, error) {
	actor := principalActor(ctx, p.CreatedBy)
	det := map[string]any{"priority": p.Priority, "repository": p.Repository}
	if len(p.DependsOn) > 0 {
		det["depends_on"] = p.DependsOn
	}
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return store.Task{}, interpretError("create task", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if err := repositoryExists(ctx, tx, p.Repository); err != nil {
		return store.Task{}, fmt.Errorf("create task: %w", err)
	}
	if err := db.checkRate(ctx, tx, "tasks", p.CreatedBy, p.MaxPerMinute); err != nil {
		return store.Task{}, fmt.Errorf("create task: %w", err)
	}
	if len(p.DependsOn) > 0 {
		rows, err := tx.Query(ctx, `SELECT id FROM tasks WHERE id = ANY($1::text[]) AND repository = $2`, p.DependsOn, p.Repository)
		if err != nil {
			return store.Task{}, interpretError("create task: read its dependencies", err)
		}
		found, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return store.Task{}, interpretError("create task: read its dependencies", err)
		}
		for _, dep := range p.DependsOn {
			if !slices.Contains(found, dep) {
				return store.Task{}, &store.TaskRefusal{Msg: fmt.Sprintf("depends_on: %s is not a task of repository %q", dep, p.Repository)}
			}
		}
	}
	var s taskScan
	if err := tx.QueryRow(ctx, createTaskSQL, db.now(), store.NewID("tsk"), p.Repository, p.Title, p.Body,
		nonNilStrings(p.Labels), nonNilStrings(p.Paths), nonNilStrings(p.DependsOn), p.Priority, p.CreatedBy,
		actor.Principal, actor.Holder, string(details(det))).Scan(s.dest()...); err != nil {
		return store.Task{}, interpretError("create task", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return store.Task{}, interpretError("create task: commit", err)
	}
	db.audited()
	return s.task(), nil
}

// nonNilStrings keeps an absent list an empty array: pgx sends a nil slice as NULL.
func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// GetTask answers a task as of now.
func (db *DB) GetTask(ctx context.Context, id string) (store.Task, error) {
	return db.readTask(ctx, db.pool, getTaskSQL, "", id)
}

// openSQL is the condition of a task t that is open as of the statement's time: never claimed,
// released, or claimed with a claim that expired (store.StateAt).
const openSQL = `(t.state = 'open' OR (t.state = 'claimed' AND t.claim_expires_at <= {now}))`

// listReadySQL answers a page of the ready tasks of repository $2, by priority and age, after
// the place ($5, $6) of the last one answered when $4.
var listReadySQL = q(`SELECT t.seq, ` + taskCols + ` FROM tasks t
WHERE t.repository = $2 AND t.state IN ('open', 'claimed') AND ` + openSQL + ` AND ` + depsDoneSQL + `
	AND (NOT $4::boolean OR t.priority < $5::integer OR (t.priority = $5::integer AND t.seq > $6::bigint))
ORDER BY t.priority DESC, t.seq LIMIT $3`)

// listTasksSQL answers a page of the tasks of repository $2, newest first, before seq $5 (0:
// from the newest), in the state $4 as of now (empty: any).
var listTasksSQL = q(`SELECT t.seq, ` + taskCols + ` FROM tasks t
WHERE t.repository = $2 AND ($5::bigint = 0 OR t.seq < $5)
	AND CASE $4::text
		WHEN '' THEN true
		WHEN 'open' THEN ` + openSQL + `
		WHEN 'claimed' THEN t.state = 'claimed' AND t.claim_expires_at > {now}
		ELSE t.state = $4::text END
ORDER BY t.seq DESC LIMIT $3`)

// ListTasks answers a repository's tasks as of now: the ready ones by priority and age, or every
// one (of a state) newest first.
func (db *DB) ListTasks(ctx context.Context, p store.ListTasksParams) ([]store.Task, string, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	if p.Ready {
		priority, seq, after, err := store.DecodeReadyPageToken(p.PageToken)
		if err != nil {
			return nil, "", err
		}
		tasks, seqs, err := db.queryTasks(ctx, listReadySQL, db.now(), p.Repository, limit+1, after, priority, seq)
		if err != nil {
			return nil, "", err
		}
		if len(tasks) > limit {
			return tasks[:limit], store.EncodeReadyPageToken(tasks[limit-1].Priority, seqs[limit-1]), nil
		}
		return tasks, "", nil
	}
	before, err := store.DecodeSeqPageToken(p.PageToken)
	if err != nil {
		return nil, "", err
	}
	tasks, seqs, err := db.queryTasks(ctx, listTasksSQL, db.now(), p.Repository, limit+1, string(p.State), before)
	if err != nil {
		return nil, "", err
	}
	if len(tasks) > limit {
		return tasks[:limit], store.EncodeSeqPageToken(seqs[limit-1]), nil
	}
	return tasks, "", nil
}

// queryTasks answers the tasks and seqs of a query of seq and taskCols.
func (db *DB) queryTasks(ctx context.Context, sql string, args ...any) ([]store.Task, []int64, error) {
	rows, err := db.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, nil, interpretError("list tasks", err)
	}
	defer rows.Close()
	var (
		tasks []store.Task
		seqs  []int64
	)
	for rows.Next() {
		var (
			seq int64
			s   taskScan
		)
		if err := rows.Scan(append([]any{&seq}, s.dest()...)...); err != nil {
			return nil, nil, interpretError("list tasks", err)
		}
		tasks = append(tasks, s.task())
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, interpretError("list tasks", err)
	}
	return tasks, seqs, nil
}

// pickTaskSQL takes the first ready task of repository $2, highest priority and then oldest,
// that no other transaction holds.
var pickTaskSQL = q(`SELECT ` + taskCols + ` FROM tasks t
WHERE t.repository = $2 AND t.state IN ('open', 'claimed') AND ` + openSQL + ` AND ` + depsDoneSQL + `
ORDER BY t.priority DESC, t.seq LIMIT 1
FOR UPDATE OF t SKIP LOCKED`)

// claimTaskSQL claims the task $2, which the transaction locked, for the holder $3 until now +
// $4 µs, and records task.claimed by the holder.
var claimTaskSQL = q(`WITH t AS (
	UPDATE tasks SET attempts = attempts + 1, state = 'claimed', claimant = $3::text, claimed_at = {now},
		claim_expires_at = {now} + $4::bigint * interval '1 microsecond', updated_at = {now}
	WHERE id = $2
	RETURNING *),
ev AS (` + auditRecord(`SELECT split_part($3::text, '|', 1), $3::text, 'task.claimed', 'task/' || t.id, `+jsonObject(
	mem("claim", jsonInt("t.attempts")),
	mem("expires_at", jsonTime("t.claim_expires_at")),
	mem("holder", jsonText("t.claimant")))+` FROM t`) + `)
SELECT ` + taskCols + ` FROM t`)

// ClaimTask claims the named task, or the first ready one, for p.Holder: its attempts + 1 is
// the claim's number.
func (db *DB) ClaimTask(ctx context.Context, p store.ClaimTaskParams) (store.Task, error) {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return store.Task{}, interpretError("claim task", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	var t store.Task
	if p.TaskID == "" {
		var s taskScan
		err := tx.QueryRow(ctx, pickTaskSQL, db.now(), p.Repository).Scan(s.dest()...)
		if errors.Is(err, pgx.ErrNoRows) {
			if err := repositoryExists(ctx, tx, p.Repository); err != nil {
				return store.Task{}, fmt.Errorf("claim task: %w", err)
			}
			return store.Task{}, fmt.Errorf("claim task: repository %q has no ready task: %w", p.Repository, store.ErrNotFound)
		}
		if err != nil {
			return store.Task{}, interpretError("claim task: find the first ready task", err)
		}
		t = s.task()
	} else {
		if t, err = db.readTask(ctx, tx, lockTaskSQL, p.Repository, p.TaskID); err != nil {
			return store.Task{}, fmt.Errorf("claim task: %w", err)
		}
		var blocking *store.Task
		if len(t.DependsOn) > 0 {
			var s taskScan
			err := tx.QueryRow(ctx, blockingSQL, db.now(), t.DependsOn).Scan(s.dest()...)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return store.Task{}, interpretError("claim task: read the dependencies of task "+t.ID, err)
			}
			if err == nil {
				b := s.task()
				blocking = &b
			}
		}
		if err := store.ExplainTaskClaim(t, p.Holder, blocking); err != nil {
			return store.Task{}, err
		}
	}
	var s taskScan
	if err := tx.QueryRow(ctx, claimTaskSQL, db.now(), t.ID, p.Holder, micros(p.TTL)).Scan(s.dest()...); err != nil {
		return store.Task{}, interpretError("claim task "+t.ID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return store.Task{}, interpretError("claim task: commit", err)
	}
	db.audited()
	return s.task(), nil
}

// taskEvent answers the audit record of the event action on the task row t of a statement, by
// the actor whose principal and holder are the parameters $p and $p+1, with details (an SQL
// expression).
func taskEvent(action string, p int, details string) string {
	return auditRecord(fmt.Sprintf(`SELECT $%d::text, $%d::text, '%s', 'task/' || t.id, %s FROM t`, p, p+1, action, details))
}

var (
	// renewTaskSQL sets the claim's expiry to now + $3 µs; $4 and $5 are the actor.
	renewTaskSQL = q(`WITH t AS (
	UPDATE tasks SET claim_expires_at = {now} + $3::bigint * interval '1 microsecond', updated_at = {now}
	WHERE id = $2 RETURNING *),
ev AS (` + taskEvent("task.renewed", 4, jsonObject(mem("claim", jsonInt("t.attempts")), mem("expires_at", jsonTime("t.claim_expires_at")))) + `)
SELECT ` + taskCols + ` FROM t`)

	// releaseTaskSQL opens the task again; $3 and $4 are the actor.
	releaseTaskSQL = q(`WITH t AS (
	UPDATE tasks SET state = 'open', updated_at = {now} WHERE id = $2 RETURNING *),
ev AS (` + taskEvent("task.released", 3, jsonObject(mem("claim", jsonInt("t.attempts")))) + `)
SELECT ` + taskCols + ` FROM t`)

	// releaseDoneSQL marks the task done without a change; $3 and $4 are the actor.
	releaseDoneSQL = q(`WITH t AS (
	UPDATE tasks SET state = 'done', done_at = {now}, updated_at = {now} WHERE id = $2 RETURNING *),
ev AS (` + taskEvent("task.done", 3, jsonObject(mem("claim", jsonInt("t.attempts")))) + `)
SELECT ` + taskCols + ` FROM t`)

	// cancelTaskSQL cancels the task with the reason $3; $4 and $5 are the actor.
	cancelTaskSQL = q(`WITH t AS (
	UPDATE tasks SET state = 'cancelled', updated_at = {now} WHERE id = $2 RETURNING *),
ev AS (` + taskEvent("task.cancelled", 4, jsonObject(mem("reason", jsonText("$3::text")))) + `)
SELECT ` + taskCols + ` FROM t`)

	// finishTaskSQL marks the task done by the change $3 and answers how many it marked; $4 and
	// $5 are the actor.
	finishTaskSQL = q(`WITH t AS (
	UPDATE tasks SET state = 'done', change_id = $3::text, done_at = {now}, updated_at = {now} WHERE id = $2 RETURNING *),
ev AS (` + taskEvent("task.done", 4, jsonObject(mem("change", jsonText("t.change_id")), mem("claim", jsonInt("t.attempts")))) + `)
SELECT count(*) FROM t`)
)

// changeTask runs, in one transaction, a change of the task id: it reads the task locked,
// checks the refusals and runs update ($1 now, $2 the task id, then more), which answers
// taskCols.
func (db *DB) changeTask(ctx context.Context, what, id string, check func(store.Task) error, update string, more ...any) (store.Task, error) {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return store.Task{}, interpretError(what, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	t, err := db.readTask(ctx, tx, lockTaskSQL, "", id)
	if err != nil {
		return store.Task{}, fmt.Errorf("%s: %w", what, err)
	}
	if err := check(t); err != nil {
		return store.Task{}, err
	}
	var s taskScan
	if err := tx.QueryRow(ctx, update, append([]any{db.now(), id}, more...)...).Scan(s.dest()...); err != nil {
		return store.Task{}, interpretError(what+" "+id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return store.Task{}, interpretError(what+": commit", err)
	}
	db.audited()
	return s.task(), nil
}

// RenewTaskClaim sets the current claim's expiry to now + p.TTL.
func (db *DB) RenewTaskClaim(ctx context.Context, p store.TaskClaimParams) (store.Task, error) {
	actor := store.ActorOf(ctx)
	return db.changeTask(ctx, "renew task claim", p.TaskID, func(t store.Task) error {
		return store.ExplainTaskClaimChange(t, p.Principal, p.Admin, p.ClaimNumber)
	}, renewTaskSQL, micros(p.TTL), actor.Principal, actor.Holder)
}

// ReleaseTaskClaim ends the current claim: the task is open again, or done with p.Done.
func (db *DB) ReleaseTaskClaim(ctx context.Context, p store.TaskClaimParams) (store.Task, error) {
	actor := store.ActorOf(ctx)
	sql := releaseTaskSQL
	if p.Done {
		sql = releaseDoneSQL
	}
	return db.changeTask(ctx, "release task claim", p.TaskID, func(t store.Task) error {
		return store.ExplainTaskClaimChange(t, p.Principal, p.Admin, p.ClaimNumber)
	}, sql, actor.Principal, actor.Holder)
}

// CancelTask ends a task that is neither done nor cancelled, for its creator or an admin.
func (db *DB) CancelTask(ctx context.Context, id, principal string, admin bool, reason string) (store.Task, error) {
	actor := store.ActorOf(ctx)
	return db.changeTask(ctx, "cancel task", id, func(t store.Task) error {
		switch {
		case t.State == store.TaskDone || t.State == store.TaskCancelled:
			return &store.TaskStateError{TaskID: t.ID, Msg: "is " + string(t.State) + " already"}
		case !admin && t.CreatedBy != principal:
			return &store.TaskStateError{TaskID: t.ID, Msg: fmt.Sprintf("was created by %s: principal %q may not cancel it", t.CreatedBy, principal)}
		}
		return nil
	}, cancelTaskSQL, reason, actor.Principal, actor.Holder)
}

// finishTask marks the task id done by the change changeID in the transaction qr, which locked
// it and checked the claim (store.CheckTaskClaim), and records task.done by actor.
func (db *DB) finishTask(ctx context.Context, qr querier, id, changeID string, actor store.Actor) error {
	var n int64
	if err := qr.QueryRow(ctx, finishTaskSQL, db.now(), id, changeID, actor.Principal, actor.Holder).Scan(&n); err != nil {
		return interpretError("finish task "+id, err)
	}
	if n != 1 {
		return fmt.Errorf("finish task %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// ---- messages ----

// messageCols are a message's columns.
const messageCols = `id, repository, seq, author, principal, text, to_holder, task_id, change_id, to_all, recipient, created_at`

type messageScan struct {
	m   store.Message
	seq int64
}

func (s *messageScan) dest() []any {
	m := &s.m
	return []any{&m.ID, &m.Repository, &s.seq, &m.Author, &m.Principal, &m.Text, &m.ToHolder, &m.TaskID, &m.ChangeID,
		&m.ToAll, &m.Recipient, &m.CreatedAt}
}

func (s *messageScan) message() store.Message {
	m := s.m
	m.Seq = uint64(s.seq)
	m.CreatedAt = m.CreatedAt.UTC()
	return m
}

// rateLockSQL serializes what the principal $1 makes of a kind ($2) while its rate is checked:
// replicas then count alike.
const rateLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('ag_rate/' || $2::text || '/' || $1::text, 0))`

// rateSQL counts what the principal $2 made in the last minute, per kind of store.RateError.
var rateSQL = map[string]string{
	"tasks":    q(`SELECT count(*) FROM tasks WHERE created_by = $2 AND created_at > {now} - interval '1 minute'`),
	"messages": q(`SELECT count(*) FROM messages WHERE principal = $2 AND created_at > {now} - interval '1 minute'`),
}

// checkRate refuses with a *store.RateError when principal made max (0: no cap) of what (tasks
// or messages) in the last minute, counted under the principal's lock for that kind.
func (db *DB) checkRate(ctx context.Context, tx pgx.Tx, what, principal string, max int) error {
	if max <= 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, rateLockSQL, principal, what); err != nil {
		return interpretError("lock the principal's rate", err)
	}
	var made int64
	if err := tx.QueryRow(ctx, rateSQL[what], db.now(), principal).Scan(&made); err != nil {
		return interpretError("count the principal's "+what, err)
	}
	if made >= int64(max) {
		return &store.RateError{Principal: principal, What: what, Max: max}
	}
	return nil
}

// sendMessageSQL stores the message with its repository's next number, taken under the lock of
// the repository's row of message_seqs, held until the commit: messages commit in the order
// of their numbers. It records message.sent ($12 and $13 the actor, $14 the details).
var sendMessageSQL = q(`WITH s AS (
	INSERT INTO message_seqs AS c (repository, last_seq) VALUES ($3, 1)
	ON CONFLICT (repository) DO UPDATE SET last_seq = c.last_seq + 1
	RETURNING last_seq),
m AS (
	INSERT INTO messages (id, repository, seq, author, principal, text, to_holder, task_id, change_id, to_all, recipient, created_at)
	SELECT $2, $3, s.last_seq, $4, $5, $6, $7, $8, $9, $10, $11, {now} FROM s
	RETURNING *),
ev AS (` + auditRecord(`SELECT $12::text, $13::text, 'message.sent', 'message/' || m.id, $14::text FROM m`) + `)
SELECT ` + messageCols + ` FROM m`)

// messageActor is the actor of a message: its author, a holder or a principal alone.
func messageActor(ctx context.Context, author, principal string) store.Actor {
	if strings.Contains(author, "|") {
		return store.Actor{Principal: store.PrincipalOf(author), Holder: author}
	}
	return principalActor(ctx, principal)
}

// messageAddress is how message.sent names where a message was posted.
func messageAddress(p store.SendMessageParams) string {
	switch {
	case p.ToHolder != "":
		return "holder/" + p.ToHolder
	case p.TaskID != "":
		return "task/" + p.TaskID
	case p.ChangeID != "":
		return "change/" + p.ChangeID
	}
	return "all"
}

// SendMessage stores a message with the repository's next seq, unless its principal is past its
// rate.
func (db *DB) SendMessage(ctx context.Context, p store.SendMessageParams) (store.Message, error) {
	actor := messageActor(ctx, p.Author, p.Principal)
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return store.Message{}, interpretError("send message", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if err := repositoryExists(ctx, tx, p.Repository); err != nil {
		return store.Message{}, fmt.Errorf("send message: %w", err)
	}
	if err := db.checkRate(ctx, tx, "messages", p.Principal, p.MaxPerMinute); err != nil {
		return store.Message{}, fmt.Errorf("send message: %w", err)
	}
	recipient := p.ToHolder
	switch {
	case p.TaskID != "":
		t, err := db.readTask(ctx, tx, getTaskSQL, p.Repository, p.TaskID)
		if err != nil {
			return store.Message{}, fmt.Errorf("send message: %w", err)
		}
		if t.ClaimCurrent {
			recipient = t.Claimant
		}
	case p.ChangeID != "":
		var repository string
		if err := tx.QueryRow(ctx, `SELECT repository, author FROM changes WHERE id = $1`, p.ChangeID).
			Scan(&repository, &recipient); err != nil {
			return store.Message{}, interpretError("send message: change "+p.ChangeID, err)
		}
		if repository != p.Repository {
			return store.Message{}, fmt.Errorf("send message: change %s of repository %q: %w", p.ChangeID, p.Repository, store.ErrNotFound)
		}
	}
	var det detailsBuilder
	det.str("address", messageAddress(p)).str("recipient", recipient).str("repository", p.Repository).
		int("size", int64(len(p.Text)))
	var s messageScan
	if err := tx.QueryRow(ctx, sendMessageSQL, db.now(), store.NewID("msg"), p.Repository, p.Author, p.Principal, p.Text,
		p.ToHolder, p.TaskID, p.ChangeID, p.ToAll, recipient, actor.Principal, actor.Holder, det.done()).Scan(s.dest()...); err != nil {
		return store.Message{}, interpretError("send message", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return store.Message{}, interpretError("send message: commit", err)
	}
	db.audited()
	db.messageSignal.Fire()
	return s.message(), nil
}

var (
	// taskThreadSQL answers the messages of the thread of task $1 of repository $2 after seq $3.
	taskThreadSQL = `SELECT ` + messageCols + ` FROM messages
WHERE task_id = $1 AND task_id <> '' AND repository = $2 AND seq > $3 ORDER BY seq LIMIT $4`
	// changeThreadSQL answers the messages of the thread of change $1 of repository $2 after seq $3.
	changeThreadSQL = `SELECT ` + messageCols + ` FROM messages
WHERE change_id = $1 AND change_id <> '' AND repository = $2 AND seq > $3 ORDER BY seq LIMIT $4`
	// inboxSQL answers what reached the holder $2 in repository $1 and what was sent to all (its
	// recipient is ''), after seq $3, never what $2 wrote: two searches of messages_recipient.
	inboxSQL = `(SELECT ` + messageCols + ` FROM messages
	WHERE repository = $1 AND recipient = $2 AND $2 <> '' AND NOT to_all AND seq > $3 AND author <> $2 ORDER BY seq LIMIT $4)
UNION ALL
(SELECT ` + messageCols + ` FROM messages
	WHERE repository = $1 AND recipient = '' AND to_all AND seq > $3 AND author <> $2 ORDER BY seq LIMIT $4)
ORDER BY seq LIMIT $4`
)

// ListMessages answers a thread, or a holder's inbox, oldest first after p.AfterSeq.
func (db *DB) ListMessages(ctx context.Context, p store.ListMessagesParams) ([]store.Message, error) {
	limit := p.Limit
	switch {
	case limit <= 0:
		limit = 100
	case limit > 1000:
		limit = 1000
	}
	sql, key := inboxSQL, p.Holder
	switch {
	case p.TaskID != "":
		sql, key = taskThreadSQL, p.TaskID
	case p.ChangeID != "":
		sql, key = changeThreadSQL, p.ChangeID
	}
	var (
		rows pgx.Rows
		err  error
	)
	if sql == inboxSQL {
		rows, err = db.pool.Query(ctx, sql, p.Repository, key, int64(p.AfterSeq), limit)
	} else {
		rows, err = db.pool.Query(ctx, sql, key, p.Repository, int64(p.AfterSeq), limit)
	}
	if err != nil {
		return nil, interpretError("list messages", err)
	}
	defer rows.Close()
	var out []store.Message
	for rows.Next() {
		var s messageScan
		if err := rows.Scan(s.dest()...); err != nil {
			return nil, interpretError("list messages", err)
		}
		out = append(out, s.message())
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("list messages", err)
	}
	return out, nil
}

// MessageSignal answers a channel closed after the next message this store stores; other
// replicas' messages are found by polling.
func (db *DB) MessageSignal() <-chan struct{} { return db.messageSignal.Wait() }
