package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

var _ store.TaskStore = (*DB)(nil)

// depsDoneSQL is true when every dependency of the task t is done.
const depsDoneSQL = `NOT EXISTS (SELECT 1 FROM json_each(t.depends_on) j JOIN tasks d ON d.id = j.value WHERE d.state <> 'done')`

// taskColumns are a task's columns (of the alias t) and whether its dependencies are done.
const taskColumns = `t.id, t.repository, t.title, t.body, t.labels, t.paths, t.depends_on, t.priority, t.state,
	t.created_by, t.created_at, t.updated_at, t.attempts, t.claimant, t.claimed_at, t.claim_expires_at, t.change_id,
	t.done_at, ` + depsDoneSQL

// scanTask reads the taskColumns of a row as of now (store.StateAt); before are columns selected
// ahead of them.
func scanTask(row scanner, now time.Time, before ...any) (store.Task, error) {
	var (
		t                          store.Task
		labels, paths, deps, state string
		created, updated, attempts int64
		claimed, expires, done     sql.NullInt64
		depsDone                   bool
	)
	dest := append(before, &t.ID, &t.Repository, &t.Title, &t.Body, &labels, &paths, &deps, &t.Priority, &state,
		&t.CreatedBy, &created, &updated, &attempts, &t.Claimant, &claimed, &expires, &t.ChangeID, &done, &depsDone)
	if err := row.Scan(dest...); err != nil {
		return store.Task{}, err
	}
	for _, l := range []struct {
		name string
		text string
		dst  *[]string
	}{{"labels", labels, &t.Labels}, {"paths", paths, &t.Paths}, {"depends_on", deps, &t.DependsOn}} {
		if err := json.Unmarshal([]byte(l.text), l.dst); err != nil {
			return store.Task{}, fmt.Errorf("task %s: %s: %w", t.ID, l.name, err)
		}
		if len(*l.dst) == 0 {
			*l.dst = nil
		}
	}
	t.CreatedAt, t.UpdatedAt = fromMicros(created), fromMicros(updated)
	t.Attempts = uint64(attempts)
	t.ClaimedAt, t.ClaimExpiresAt, t.DoneAt = fromNullMicros(claimed), fromNullMicros(expires), fromNullMicros(done)
	t.State = store.StateAt(store.TaskState(state), t.ClaimExpiresAt, now)
	t.ClaimCurrent = store.TaskState(state) == store.TaskClaimed
	t.Ready = t.State == store.TaskOpen && depsDone
	return t, nil
}

// getTask answers a task as of now, or ErrNotFound.
func getTask(ctx context.Context, q querier, id string, now time.Time) (store.Task, error) {
	t, err := scanTask(q.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks t WHERE t.id = ?`, id), now)
	if err != nil {
		return store.Task{}, interpretError("task "+id, err)
	}
	return t, nil
}

// repositoryTask answers the task id of repository as of now: a task of another repository is
// not found either.
func repositoryTask(ctx context.Context, q querier, repository, id string, now time.Time) (store.Task, error) {
	t, err := getTask(ctx, q, id, now)
	if err == nil && t.Repository != repository {
		err = fmt.Errorf("task %s of repository %q: %w", id, repository, store.ErrNotFound)
	}
	return t, err
}

// repositoryExists answers ErrNotFound for an unknown repository.
func repositoryExists(ctx context.Context, q querier, repository string) error {
	var name string
	if err := q.QueryRowContext(ctx, `SELECT name FROM repositories WHERE name = ?`, repository).Scan(&name); err != nil {
		return interpretError(fmt.Sprintf("repository %q", repository), err)
	}
	return nil
}

// CreateTask stores an open task whose dependencies are tasks of its repository.
func (d *DB) CreateTask(ctx context.Context, p store.CreateTaskParams) (store.Task, error) {
	labels, err := json.Marshal(nonNil(p.Labels))
	if err != nil {
		return store.Task{}, fmt.Errorf("create task: %w", err)
	}
	paths, err := json.Marshal(nonNil(p.Paths))
	if err != nil {
		return store.Task{}, fmt.Errorf("create task: %w", err)
	}
	deps, err := json.Marshal(nonNil(p.DependsOn))
	if err != nil {
		return store.Task{}, fmt.Errorf("create task: %w", err)
	}
	actor := principalActor(ctx, p.CreatedBy)
	var task store.Task
	err = d.write(ctx, "create task", func(ctx context.Context, tx *sql.Tx) error {
		now := d.now()
		if err := repositoryExists(ctx, tx, p.Repository); err != nil {
			return fmt.Errorf("create task: %w", err)
		}
		if err := checkRate(ctx, tx, "tasks", p.CreatedBy, p.MaxPerMinute, now); err != nil {
			return fmt.Errorf("create task: %w", err)
		}
		for _, dep := range p.DependsOn {
			var repository string
			err := tx.QueryRowContext(ctx, `SELECT repository FROM tasks WHERE id = ?`, dep).Scan(&repository)
			if errors.Is(err, sql.ErrNoRows) || err == nil && repository != p.Repository {
				return &store.TaskRefusal{Msg: fmt.Sprintf("depends_on: %s is not a task of repository %q", dep, p.Repository)}
			}
			if err != nil {
				return interpretError("create task: read dependency "+dep, err)
			}
		}
		id := store.NewID("tsk")
		if _, err := tx.ExecContext(ctx, `INSERT INTO tasks (id, repository, title, body, labels, paths, depends_on, priority,
			state, created_by, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'open', ?, ?, ?)`,
			id, p.Repository, p.Title, p.Body, string(labels), string(paths), string(deps), p.Priority, p.CreatedBy,
			micros(now), micros(now)); err != nil {
			return interpretError("create task", err)
		}
		var err error
		if task, err = getTask(ctx, tx, id, now); err != nil {
			return fmt.Errorf("create task: %w", err)
		}
		var det details
		if len(p.DependsOn) > 0 {
			det.strs("depends_on", p.DependsOn)
		}
		det.int("priority", int64(p.Priority)).str("repository", p.Repository)
		d.record(micros(now), actor, "task.created", "task/"+id, det.done())
		return nil
	})
	return task, err
}

// GetTask answers a task as of now.
func (d *DB) GetTask(ctx context.Context, id string) (store.Task, error) {
	t, err := getTask(ctx, d.r, id, d.now())
	if err != nil {
		return store.Task{}, fmt.Errorf("get task: %w", err)
	}
	return t, nil
}

// openAt is the condition of a task t that is open at the time ?n: never claimed, released,
// or claimed with a claim that expired (store.StateAt).
func openAt(n int) string {
	return fmt.Sprintf(`(t.state = 'open' OR (t.state = 'claimed' AND t.claim_expires_at <= ?%d))`, n)
}

// ListTasks answers a repository's tasks as of now: the ready ones by priority and age, or every
// one (of a state) newest first.
func (d *DB) ListTasks(ctx context.Context, p store.ListTasksParams) ([]store.Task, string, error) {
	now := d.now()
	limit := pageLimit(p.Limit)
	if p.Ready {
		priority, seq, after, err := store.DecodeReadyPageToken(p.PageToken)
		if err != nil {
			return nil, "", fmt.Errorf("list tasks: %w", err)
		}
		// The literal states match the partial index tasks_ready.
		q := `SELECT t.seq, ` + taskColumns + ` FROM tasks t INDEXED BY tasks_ready
			WHERE t.repository = ?1 AND t.state IN ('open', 'claimed') AND ` + openAt(2) + ` AND ` + depsDoneSQL
		args := []any{p.Repository, micros(now), limit + 1}
		if after {
			q += ` AND (t.priority < ?4 OR (t.priority = ?4 AND t.seq > ?5))`
			args = append(args, priority, seq)
		}
		q += ` ORDER BY t.priority DESC, t.seq LIMIT ?3`
		tasks, seqs, err := queryTasks(ctx, d.r, now, q, args...)
		if err != nil {
			return nil, "", err
		}
		next := ""
		if len(tasks) > limit {
			tasks = tasks[:limit]
			next = store.EncodeReadyPageToken(tasks[limit-1].Priority, seqs[limit-1])
		}
		return tasks, next, nil
	}
	before, err := store.DecodeSeqPageToken(p.PageToken)
	if err != nil {
		return nil, "", fmt.Errorf("list tasks: %w", err)
	}
	q := `SELECT t.seq, ` + taskColumns + ` FROM tasks t WHERE t.repository = ?1`
	args := []any{p.Repository, micros(now), limit + 1}
	switch p.State {
	case "":
	case store.TaskOpen:
		q += ` AND ` + openAt(2)
	case store.TaskClaimed:
		q += ` AND t.state = 'claimed' AND t.claim_expires_at > ?2`
	default:
		q += ` AND t.state = ?4`
		args = append(args, string(p.State))
	}
	if before > 0 {
		q += fmt.Sprintf(` AND t.seq < ?%d`, len(args)+1)
		args = append(args, before)
	}
	q += ` ORDER BY t.seq DESC LIMIT ?3`
	tasks, seqs, err := queryTasks(ctx, d.r, now, q, args...)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(tasks) > limit {
		tasks = tasks[:limit]
		next = store.EncodeSeqPageToken(seqs[limit-1])
	}
	return tasks, next, nil
}

// queryTasks answers the tasks, as of now, and seqs of a query of seq and taskColumns.
func queryTasks(ctx context.Context, db querier, now time.Time, query string, args ...any) ([]store.Task, []int64, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, nil, interpretError("list tasks", err)
	}
	defer rows.Close()
	var (
		tasks []store.Task
		seqs  []int64
	)
	for rows.Next() {
		var seq int64
		t, err := scanTask(rows, now, &seq)
		if err != nil {
			return nil, nil, interpretError("list tasks", err)
		}
		tasks = append(tasks, t)
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, interpretError("list tasks", err)
	}
	return tasks, seqs, nil
}

// blockingDependency answers the first dependency of t that is not done as of now, or nil.
func blockingDependency(ctx context.Context, tx *sql.Tx, t store.Task, now time.Time) (*store.Task, error) {
	if len(t.DependsOn) == 0 {
		return nil, nil
	}
	deps, err := json.Marshal(t.DependsOn)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", t.ID, err)
	}
	b, err := scanTask(tx.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM json_each(?) j JOIN tasks t ON t.id = j.value
		WHERE t.state <> 'done' ORDER BY j.key LIMIT 1`, string(deps)), now)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, interpretError("task "+t.ID+": read its dependencies", err)
	}
	return &b, nil
}

// ClaimTask claims the named task, or the first ready one, for p.Holder: its attempts + 1 is
// the claim's number.
func (d *DB) ClaimTask(ctx context.Context, p store.ClaimTaskParams) (store.Task, error) {
	actor := holderActor(ctx, p.Holder)
	var task store.Task
	err := d.write(ctx, "claim task", func(ctx context.Context, tx *sql.Tx) error {
		// The time is read under the write lock, so claims are ordered as they commit.
		now := d.now()
		var (
			t   store.Task
			err error
		)
		if p.TaskID == "" {
			// The literal states match the partial index tasks_ready.
			t, err = scanTask(tx.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks t INDEXED BY tasks_ready
				WHERE t.repository = ?1 AND t.state IN ('open', 'claimed') AND `+openAt(2)+` AND `+depsDoneSQL+`
				ORDER BY t.priority DESC, t.seq LIMIT 1`, p.Repository, micros(now)), now)
			if errors.Is(err, sql.ErrNoRows) {
				if err := repositoryExists(ctx, tx, p.Repository); err != nil {
					return fmt.Errorf("claim task: %w", err)
				}
				return fmt.Errorf("claim task: repository %q has no ready task: %w", p.Repository, store.ErrNotFound)
			}
			if err != nil {
				return interpretError("claim task: find the first ready task", err)
			}
		} else {
			if t, err = repositoryTask(ctx, tx, p.Repository, p.TaskID, now); err != nil {
				return fmt.Errorf("claim task: %w", err)
			}
			blocking, err := blockingDependency(ctx, tx, t, now)
			if err != nil {
				return fmt.Errorf("claim task: %w", err)
			}
			if err := store.ExplainTaskClaim(t, p.Holder, blocking); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE tasks SET attempts = attempts + 1, state = 'claimed', claimant = ?,
			claimed_at = ?, claim_expires_at = ?, updated_at = ? WHERE id = ?`,
			p.Holder, micros(now), micros(now.Add(p.TTL)), micros(now), t.ID); err != nil {
			return interpretError("claim task "+t.ID, err)
		}
		if task, err = getTask(ctx, tx, t.ID, now); err != nil {
			return fmt.Errorf("claim task: %w", err)
		}
		var det details
		det.int("claim", int64(task.Attempts)).time("expires_at", task.ClaimExpiresAt).str("holder", task.Claimant)
		d.record(micros(now), actor, "task.claimed", "task/"+task.ID, det.done())
		return nil
	})
	return task, err
}

// changeTaskClaim runs, in one write, a renewal or release of a task claim: it reads the task,
// checks the refusals (store.ExplainTaskClaimChange) and runs change with the task as read.
func (d *DB) changeTaskClaim(ctx context.Context, op string, p store.TaskClaimParams,
	change func(ctx context.Context, tx *sql.Tx, t store.Task, now time.Time) error) (store.Task, error) {
	var task store.Task
	err := d.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		now := d.now()
		t, err := getTask(ctx, tx, p.TaskID, now)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		if err := store.ExplainTaskClaimChange(t, p.Principal, p.Admin, p.ClaimNumber); err != nil {
			return err
		}
		if err := change(ctx, tx, t, now); err != nil {
			return err
		}
		if task, err = getTask(ctx, tx, t.ID, now); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		return nil
	})
	return task, err
}

// RenewTaskClaim sets the current claim's expiry to now + p.TTL.
func (d *DB) RenewTaskClaim(ctx context.Context, p store.TaskClaimParams) (store.Task, error) {
	actor := store.ActorOf(ctx)
	return d.changeTaskClaim(ctx, "renew task claim", p, func(ctx context.Context, tx *sql.Tx, t store.Task, now time.Time) error {
		expires := now.Add(p.TTL)
		if _, err := tx.ExecContext(ctx, `UPDATE tasks SET claim_expires_at = ?, updated_at = ? WHERE id = ?`,
			micros(expires), micros(now), t.ID); err != nil {
			return interpretError("renew the claim of task "+t.ID, err)
		}
		var det details
		det.int("claim", int64(t.Attempts)).time("expires_at", expires)
		d.record(micros(now), actor, "task.renewed", "task/"+t.ID, det.done())
		return nil
	})
}

// ReleaseTaskClaim ends the current claim: the task is open again, or done with p.Done.
func (d *DB) ReleaseTaskClaim(ctx context.Context, p store.TaskClaimParams) (store.Task, error) {
	actor := store.ActorOf(ctx)
	return d.changeTaskClaim(ctx, "release task claim", p, func(ctx context.Context, tx *sql.Tx, t store.Task, now time.Time) error {
		if p.Done {
			if _, err := tx.ExecContext(ctx, `UPDATE tasks SET state = 'done', done_at = ?, updated_at = ? WHERE id = ?`,
				micros(now), micros(now), t.ID); err != nil {
				return interpretError("finish task "+t.ID, err)
			}
			d.recordTaskDone(micros(now), actor, t.ID, "", t.Attempts)
			return nil
		}
		if _, err := tx.ExecContext(ctx, `UPDATE tasks SET state = 'open', updated_at = ? WHERE id = ?`, micros(now), t.ID); err != nil {
			return interpretError("release the claim of task "+t.ID, err)
		}
		var det details
		det.int("claim", int64(t.Attempts))
		d.record(micros(now), actor, "task.released", "task/"+t.ID, det.done())
		return nil
	})
}

// recordTaskDone records that task id is done with its claim claim, by the change changeID
// ("" for none).
func (d *DB) recordTaskDone(now int64, actor store.Actor, id, changeID string, claim uint64) {
	var det details
	det.strIf("change", changeID).int("claim", int64(claim))
	d.record(now, actor, "task.done", "task/"+id, det.done())
}

// finishTask marks the task id done by the change changeID and records task.done, in a write
// that checked its claim (store.CheckTaskClaim).
func (d *DB) finishTask(ctx context.Context, tx *sql.Tx, id, changeID string, now int64, actor store.Actor) error {
	var attempts int64
	if err := tx.QueryRowContext(ctx, `UPDATE tasks SET state = 'done', change_id = ?, done_at = ?, updated_at = ?
		WHERE id = ? RETURNING attempts`, changeID, now, now, id).Scan(&attempts); err != nil {
		return interpretError("finish task "+id, err)
	}
	d.recordTaskDone(now, actor, id, changeID, uint64(attempts))
	return nil
}

// CancelTask ends a task that is neither done nor cancelled, for its creator or an admin.
func (d *DB) CancelTask(ctx context.Context, id, principal string, admin bool, reason string) (store.Task, error) {
	actor := store.ActorOf(ctx)
	var task store.Task
	err := d.write(ctx, "cancel task", func(ctx context.Context, tx *sql.Tx) error {
		now := d.now()
		t, err := getTask(ctx, tx, id, now)
		if err != nil {
			return fmt.Errorf("cancel task: %w", err)
		}
		if err := cancelRefusal(t, principal, admin); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE tasks SET state = 'cancelled', updated_at = ? WHERE id = ?`, micros(now), id); err != nil {
			return interpretError("cancel task "+id, err)
		}
		if task, err = getTask(ctx, tx, id, now); err != nil {
			return fmt.Errorf("cancel task: %w", err)
		}
		var det details
		det.str("reason", reason)
		d.record(micros(now), actor, "task.cancelled", "task/"+id, det.done())
		return nil
	})
	return task, err
}

// cancelRefusal answers why principal (admin) may not cancel t, or nil.
func cancelRefusal(t store.Task, principal string, admin bool) error {
	switch {
	case t.State == store.TaskDone || t.State == store.TaskCancelled:
		return &store.TaskStateError{TaskID: t.ID, Msg: "is " + string(t.State) + " already"}
	case !admin && t.CreatedBy != principal:
		return &store.TaskStateError{TaskID: t.ID, Msg: fmt.Sprintf("was created by %s: principal %q may not cancel it", t.CreatedBy, principal)}
	}
	return nil
}

// messageColumns are a message's columns.
const messageColumns = `id, repository, seq, author, principal, text, to_holder, task_id, change_id, to_all, recipient, created_at`

func scanMessage(row scanner) (store.Message, error) {
	var (
		m         store.Message
		seq       int64
		toAll     bool
		createdAt int64
	)
	if err := row.Scan(&m.ID, &m.Repository, &seq, &m.Author, &m.Principal, &m.Text, &m.ToHolder, &m.TaskID, &m.ChangeID,
		&toAll, &m.Recipient, &createdAt); err != nil {
		return store.Message{}, err
	}
	m.Seq, m.ToAll, m.CreatedAt = uint64(seq), toAll, fromMicros(createdAt)
	return m, nil
}

// messageActor is the actor of a message: its author, a holder or a principal alone.
func messageActor(ctx context.Context, author, principal string) store.Actor {
	if strings.Contains(author, "|") {
		return holderActor(ctx, author)
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
func (d *DB) SendMessage(ctx context.Context, p store.SendMessageParams) (store.Message, error) {
	actor := messageActor(ctx, p.Author, p.Principal)
	var msg store.Message
	err := d.write(ctx, "send message", func(ctx context.Context, tx *sql.Tx) error {
		now := d.now()
		if err := repositoryExists(ctx, tx, p.Repository); err != nil {
			return fmt.Errorf("send message: %w", err)
		}
		if err := checkRate(ctx, tx, "messages", p.Principal, p.MaxPerMinute, now); err != nil {
			return fmt.Errorf("send message: %w", err)
		}
		recipient := p.ToHolder
		switch {
		case p.TaskID != "":
			t, err := repositoryTask(ctx, tx, p.Repository, p.TaskID, now)
			if err != nil {
				return fmt.Errorf("send message: %w", err)
			}
			if t.ClaimCurrent {
				recipient = t.Claimant
			}
		case p.ChangeID != "":
			var repository string
			if err := tx.QueryRowContext(ctx, `SELECT repository, author FROM changes WHERE id = ?`, p.ChangeID).
				Scan(&repository, &recipient); err != nil {
				return interpretError("send message: change "+p.ChangeID, err)
			}
			if repository != p.Repository {
				return fmt.Errorf("send message: change %s of repository %q: %w", p.ChangeID, p.Repository, store.ErrNotFound)
			}
		}
		var err error
		msg, err = scanMessage(tx.QueryRowContext(ctx, `INSERT INTO messages (id, repository, seq, author, principal, text,
			to_holder, task_id, change_id, to_all, recipient, created_at)
			VALUES (?1, ?2, (SELECT coalesce(max(seq), 0) + 1 FROM messages WHERE repository = ?2), ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
			RETURNING `+messageColumns, store.NewID("msg"), p.Repository, p.Author, p.Principal, p.Text, p.ToHolder, p.TaskID,
			p.ChangeID, p.ToAll, recipient, micros(now)))
		if err != nil {
			return interpretError("send message", err)
		}
		var det details
		det.str("address", messageAddress(p)).str("recipient", recipient).str("repository", p.Repository).
			int("size", int64(len(p.Text)))
		d.record(micros(now), actor, "message.sent", "message/"+msg.ID, det.done())
		return nil
	})
	if err != nil {
		return store.Message{}, err
	}
	d.messageSignal.Fire()
	return msg, nil
}

// ListMessages answers a thread, or a holder's inbox, oldest first after p.AfterSeq.
func (d *DB) ListMessages(ctx context.Context, p store.ListMessagesParams) ([]store.Message, error) {
	limit := pageLimit(p.Limit)
	after := int64(p.AfterSeq)
	var (
		q    string
		args []any
	)
	switch {
	case p.TaskID != "":
		q = `SELECT ` + messageColumns + ` FROM messages INDEXED BY messages_task
			WHERE task_id = ?1 AND task_id <> '' AND repository = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4`
		args = []any{p.TaskID, p.Repository, after, limit}
	case p.ChangeID != "":
		q = `SELECT ` + messageColumns + ` FROM messages INDEXED BY messages_change
			WHERE change_id = ?1 AND change_id <> '' AND repository = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4`
		args = []any{p.ChangeID, p.Repository, after, limit}
	default:
		// What reached the holder, and what was sent to all (whose recipient is ''): two
		// searches of messages_recipient, merged by seq.
		q = `SELECT ` + messageColumns + ` FROM messages
			WHERE repository = ?1 AND recipient = ?2 AND ?2 <> '' AND NOT to_all AND seq > ?3 AND author <> ?2
			UNION ALL
			SELECT ` + messageColumns + ` FROM messages
			WHERE repository = ?1 AND recipient = '' AND to_all AND seq > ?3 AND author <> ?2
			ORDER BY seq LIMIT ?4`
		args = []any{p.Repository, p.Holder, after, limit}
	}
	rows, err := d.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, interpretError("list messages", err)
	}
	defer rows.Close()
	var out []store.Message
	for rows.Next() {
		m, err := scanMessage(rows)
		if err != nil {
			return nil, interpretError("list messages", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("list messages", err)
	}
	return out, nil
}

// MessageSignal answers the channel that the next message this store stores closes.
func (d *DB) MessageSignal() <-chan struct{} { return d.messageSignal.Wait() }

// rateQueries count what a principal made in a window, per kind of store.RateError.
var rateQueries = map[string]string{
	"tasks":    `SELECT count(*) FROM tasks WHERE created_by = ? AND created_at > ?`,
	"messages": `SELECT count(*) FROM messages WHERE principal = ? AND created_at > ?`,
}

// checkRate refuses with a *store.RateError when principal made max (0: no cap) of what (tasks
// or messages) in the minute before now; the write lock makes the count exact.
func checkRate(ctx context.Context, tx *sql.Tx, what, principal string, max int, now time.Time) error {
	if max <= 0 {
		return nil
	}
	var made int
	if err := tx.QueryRowContext(ctx, rateQueries[what], principal, micros(now.Add(-time.Minute))).Scan(&made); err != nil {
		return interpretError("count the principal's "+what, err)
	}
	if made >= max {
		return &store.RateError{Principal: principal, What: what, Max: max}
	}
	return nil
}
