package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// TaskStore is the part of the store that keeps a repository's tasks, their claims and the
// messages between agents. Store embeds it.
//
// A claim is fenced as a job's is (ADR-0012): its number is the task's attempts after the claim,
// so every claim of a task has a larger number than any earlier one, whoever made it. The rule
// of what a current claim is lives in CheckTaskClaim, which every backend and the gate apply.
type TaskStore interface {
	// CreateTask stores an open task (attempts 0) and records task.created. Every id of
	// p.DependsOn must be a task of the same repository (else a *TaskRefusal naming it, errors.Is
	// ErrInvalidTask). Unknown repository: ErrNotFound. When p.MaxPerMinute is not 0 and
	// p.CreatedBy created that many tasks in the last minute (store's clock): a *RateError
	// (errors.Is ErrResourceExhausted), storing nothing.
	CreateTask(ctx context.Context, p CreateTaskParams) (Task, error)

	// GetTask answers a task as of now (TaskState), or ErrNotFound.
	GetTask(ctx context.Context, id string) (Task, error)

	// ListTasks answers a repository's tasks as of now: with p.Ready only the ready ones (open,
	// every dependency done), highest priority and then oldest first, else every task (or those
	// of p.State), newest first.
	ListTasks(ctx context.Context, p ListTasksParams) (tasks []Task, nextPageToken string, err error)

	// ClaimTask claims p.TaskID, or the first ready task of p.Repository when it is empty, for
	// p.Holder until now + p.TTL, in one transaction: attempts + 1 becomes the claim number,
	// state claimed, and task.claimed is recorded. The task must be open as of now (never
	// claimed, released, or claimed with an expired claim) or claimed by p.Holder itself (a
	// restart of the same holder takes a new claim, which fences its earlier one), and ready.
	// Refusals: another holder's live claim, a *TaskClaimConflictError (errors.Is
	// ErrLeaseConflict); done, cancelled or not ready, a *TaskStateError (errors.Is
	// ErrFailedPrecondition); no ready task or unknown task, ErrNotFound.
	ClaimTask(ctx context.Context, p ClaimTaskParams) (Task, error)

	// RenewTaskClaim sets the current claim's expiry to now + p.TTL and records task.renewed.
	// Refused as ExplainTaskClaimChange refuses (the claim must be current: its expiry alone
	// does not refuse, as long as nobody claimed the task since; the caller must be the
	// claimant's principal or an admin). Unknown task: ErrNotFound.
	RenewTaskClaim(ctx context.Context, p TaskClaimParams) (Task, error)

	// ReleaseTaskClaim ends the current claim (same refusals as RenewTaskClaim): the task
	// becomes open again (task.released), or done without a change with p.Done (task.done).
	ReleaseTaskClaim(ctx context.Context, p TaskClaimParams) (Task, error)

	// CancelTask ends a task that is neither done nor cancelled (else *TaskStateError) and
	// records task.cancelled with reason: a claim of it is no longer current. Only its creator
	// (principal) or an admin: *TaskStateError otherwise. Unknown task: ErrNotFound.
	CancelTask(ctx context.Context, id, principal string, admin bool, reason string) (Task, error)

	// SendMessage stores a message with the repository's next seq and records message.sent
	// (its address and size, never its text). The recipient is worked out in the same
	// transaction: p.ToHolder, the task's claimant (current claim; "" when none), the change's
	// holder. A task or change of another repository, or unknown: ErrNotFound. When
	// p.MaxPerMinute is not 0 and p.Principal sent that many messages in the last minute (store's
	// clock): a *MessageRateError (errors.Is ErrResourceExhausted), storing nothing.
	SendMessage(ctx context.Context, p SendMessageParams) (Message, error)

	// ListMessages answers, oldest first and after p.AfterSeq, at most p.Limit messages: the
	// thread of p.TaskID or p.ChangeID, or else p.Holder's inbox (recipient = p.Holder, or to
	// all; never those p.Holder wrote).
	ListMessages(ctx context.Context, p ListMessagesParams) ([]Message, error)

	// MessageSignal answers a channel closed after the next message this process stores, so a
	// reader waiting for one can look again (other replicas' messages are found by polling).
	MessageSignal() <-chan struct{}
}

// TaskState is where a task is in its life, as of now.
type TaskState string

const (
	TaskOpen      TaskState = "open"
	TaskClaimed   TaskState = "claimed"
	TaskDone      TaskState = "done"
	TaskCancelled TaskState = "cancelled"
)

// Task is a unit of work of a repository.
type Task struct {
	ID         string
	Repository string
	Title      string
	Body       string
	Labels     []string
	Paths      []string // lease paths the work is expected to touch: a hint
	DependsOn  []string
	Priority   int32
	// State is the task's state as of now: a claim that expired reads as TaskOpen.
	State TaskState
	// Ready: open and every dependency done (GetTask and ListTasks fill it in).
	Ready     bool
	CreatedBy string // principal
	CreatedAt time.Time
	UpdatedAt time.Time
	// Attempts counts the claims ever made; the latest claim's number is Attempts.
	Attempts uint64
	// Claimant is the holder of the latest claim ("" when never claimed), kept after it ends.
	Claimant       string
	ClaimedAt      time.Time
	ClaimExpiresAt time.Time
	// ClaimCurrent: the latest claim was neither released nor ended by the task's end (done,
	// cancelled), though it may have expired. Expiry alone does not make it stale; a new claim
	// does.
	ClaimCurrent bool
	ChangeID     string // the change whose landing finished it
	DoneAt       time.Time
}

// ClaimNumber is the number of the task's latest claim (0: never claimed).
func (t Task) ClaimNumber() uint64 { return t.Attempts }

// CreateTaskParams are the inputs of CreateTask, checked by the caller (sizes, label and path
// syntax).
type CreateTaskParams struct {
	Repository string
	Title      string
	Body       string
	Labels     []string
	Paths      []string
	DependsOn  []string // unique
	Priority   int32
	CreatedBy  string // principal
	// MaxPerMinute, when not 0, bounds the tasks CreatedBy creates in a minute.
	MaxPerMinute int
}

// EncodeReadyPageToken turns the place of the last task of a page of ready tasks, its priority
// and its seq (creation order), into an opaque token: the ready are listed by both.
func EncodeReadyPageToken(priority int32, seq int64) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "r%d:%d", priority, seq))
}

// DecodeReadyPageToken reads a token of EncodeReadyPageToken; "" is the first page (ok false).
func DecodeReadyPageToken(token string) (priority int32, seq int64, ok bool, err error) {
	if token == "" {
		return 0, 0, false, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) < 4 || raw[0] != 'r' {
		return 0, 0, false, fmt.Errorf("%w: malformed page token", ErrInvalidPageToken)
	}
	p, s, found := strings.Cut(string(raw[1:]), ":")
	pr, perr := strconv.ParseInt(p, 10, 32)
	sq, serr := strconv.ParseInt(s, 10, 64)
	if !found || perr != nil || serr != nil || sq <= 0 {
		return 0, 0, false, fmt.Errorf("%w: malformed page token", ErrInvalidPageToken)
	}
	return int32(pr), sq, true, nil
}

// ListTasksParams page ListTasks.
type ListTasksParams struct {
	Repository string
	State      TaskState // "" = any
	Ready      bool
	Limit      int
	PageToken  string
}

// ClaimTaskParams are the inputs of ClaimTask.
type ClaimTaskParams struct {
	Repository string // required; a named task must belong to it
	TaskID     string // "" = the first ready task
	Holder     string // "<principal>|<label>"
	TTL        time.Duration
}

// TaskClaimParams name a claim to renew or release.
type TaskClaimParams struct {
	TaskID      string
	ClaimNumber uint64
	Principal   string // the caller
	Admin       bool   // the caller is an admin: any claimant's claim
	TTL         time.Duration
	Done        bool // ReleaseTaskClaim: mark the task done instead of open
}

// Message is a message between agents and people about a repository's work.
type Message struct {
	ID         string
	Repository string
	Seq        uint64 // the repository's message number
	Author     string // "<principal>|<label>" or "<principal>"
	Principal  string // the author's principal
	Text       string
	ToHolder   string
	TaskID     string
	ChangeID   string
	ToAll      bool
	Recipient  string // the holder it reached when sent ("" for to-all or a task nobody held)
	CreatedAt  time.Time
}

// SendMessageParams are the inputs of SendMessage; exactly one of ToHolder, TaskID, ChangeID
// and ToAll is set (checked by the caller, as is the text's size).
type SendMessageParams struct {
	Repository   string
	Author       string
	Principal    string
	Text         string
	ToHolder     string
	TaskID       string
	ChangeID     string
	ToAll        bool
	MaxPerMinute int
}

// ListMessagesParams select a thread (TaskID or ChangeID) or an inbox (Holder).
type ListMessagesParams struct {
	Repository string
	TaskID     string
	ChangeID   string
	Holder     string
	AfterSeq   uint64
	Limit      int
}

// ErrInvalidTask: a task refers to what it may not (an unknown dependency).
var ErrInvalidTask = errors.New("invalid task")

// TaskRefusal refuses a task's creation: Msg says why.
type TaskRefusal struct{ Msg string }

func (e *TaskRefusal) Error() string { return e.Msg }

// Is makes errors.Is(err, ErrInvalidTask) true.
func (e *TaskRefusal) Is(target error) bool { return target == ErrInvalidTask }

// TaskStateError refuses a claim, renewal, release, cancellation or a change's task claim that
// the task's state does not allow.
type TaskStateError struct {
	TaskID string
	Msg    string
}

func (e *TaskStateError) Error() string { return "task " + e.TaskID + " " + e.Msg }

// Is makes errors.Is(err, ErrFailedPrecondition) true.
func (e *TaskStateError) Is(target error) bool { return target == ErrFailedPrecondition }

// TaskClaimConflictError refuses a claim of a task another holder holds a live claim of.
type TaskClaimConflictError struct {
	TaskID    string
	Holder    string
	Claim     uint64
	ClaimedAt time.Time
	ExpiresAt time.Time
}

func (e *TaskClaimConflictError) Error() string {
	return fmt.Sprintf("task %s is claimed by %s (claim %d) since %s until %s", e.TaskID, e.Holder, e.Claim,
		e.ClaimedAt.UTC().Format(time.RFC3339), e.ExpiresAt.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrLeaseConflict) true: the same refusal as a path leased by another.
func (e *TaskClaimConflictError) Is(target error) bool { return target == ErrLeaseConflict }

// RateError refuses a message or a task past its principal's rate.
type RateError struct {
	Principal string
	What      string // "messages" or "tasks"
	Max       int
}

func (e *RateError) Error() string {
	verb := "sent"
	if e.What == "tasks" {
		verb = "created"
	}
	return fmt.Sprintf("principal %s %s %d %s in the last minute, its most: wait before %s more", e.Principal, verb, e.Max, e.What,
		map[string]string{"sent": "sending", "created": "creating"}[verb])
}

// Is makes errors.Is(err, ErrResourceExhausted) true.
func (e *RateError) Is(target error) bool { return target == ErrResourceExhausted }

// CheckTaskClaim is the one rule of a current task claim, applied when a claim is renewed or
// released, when a change carrying it is integrated, and when that change would land: t (read
// in the same transaction) is claimed by holder with claim number claim, and that claim is
// still current (not released, the task neither done nor cancelled, nobody claimed it since;
// expiry alone does not refuse). holder "" skips the holder comparison (an admin acting on
// anyone's claim). It answers a *TaskStateError saying what is wrong, or nil.
func CheckTaskClaim(t Task, holder string, claim uint64) error {
	refuse := func(format string, a ...any) error {
		return &TaskStateError{TaskID: t.ID, Msg: fmt.Sprintf(format, a...)}
	}
	switch {
	case claim == 0:
		return refuse("claim number 0 is no claim: send the claim_number ClaimTask answered")
	case claim > t.Attempts:
		return refuse("claim %d was never made, the latest claim is %d", claim, t.Attempts)
	case claim < t.Attempts:
		return refuse("claim %d is stale: claimed again as claim %d by %s at %s", claim, t.Attempts, t.Claimant,
			t.ClaimedAt.UTC().Format(time.RFC3339))
	case holder != "" && t.Claimant != holder:
		return refuse("claim %d is %s's, not %s's", claim, t.Claimant, holder)
	case t.State == TaskDone:
		if t.ChangeID != "" {
			return refuse("is done: change %s finished it", t.ChangeID)
		}
		return refuse("is done")
	case t.State == TaskCancelled:
		return refuse("was cancelled")
	case !t.ClaimCurrent:
		return refuse("claim %d was released", claim)
	}
	return nil
}

// ExplainTaskClaim answers why holder may not claim t (read in the same transaction, as of now:
// TaskState), or nil: t must be open, or claimed by holder itself (a restart of the same holder
// takes a new claim), and ready; blocking is the first of its dependencies that is not done, as
// of now, or nil when all are. A live claim of another holder is a *TaskClaimConflictError, the
// rest a *TaskStateError.
func ExplainTaskClaim(t Task, holder string, blocking *Task) error {
	refuse := func(format string, a ...any) error {
		return &TaskStateError{TaskID: t.ID, Msg: fmt.Sprintf(format, a...)}
	}
	switch {
	case t.State == TaskDone && t.ChangeID != "":
		return refuse("is done: change %s finished it", t.ChangeID)
	case t.State == TaskDone:
		return refuse("is done")
	case t.State == TaskCancelled:
		return refuse("was cancelled")
	case t.State == TaskClaimed && t.Claimant != holder:
		return &TaskClaimConflictError{TaskID: t.ID, Holder: t.Claimant, Claim: t.Attempts, ClaimedAt: t.ClaimedAt,
			ExpiresAt: t.ClaimExpiresAt}
	case blocking != nil:
		return refuse("is not ready: it depends on %s, which is %s", blocking.ID, blocking.State)
	}
	return nil
}

// ExplainTaskClaimChange is CheckTaskClaim for a renewal or release by principal (admin: of
// anyone's claim): the claim must be current, and the caller the claimant's principal.
func ExplainTaskClaimChange(t Task, principal string, admin bool, claim uint64) error {
	if err := CheckTaskClaim(t, "", claim); err != nil {
		return err
	}
	if !admin && PrincipalOf(t.Claimant) != principal {
		return &TaskStateError{TaskID: t.ID, Msg: fmt.Sprintf("is claimed by %s: principal %q may not change its claim", t.Claimant, principal)}
	}
	return nil
}

// StateAt answers the state a task stored as stored reads as at now: a claim whose expiry has
// passed reads as open. Backends store TaskClaimed and let this decide, so that expiry needs no
// sweep.
func StateAt(stored TaskState, claimExpiresAt, now time.Time) TaskState {
	if stored == TaskClaimed && !claimExpiresAt.After(now) {
		return TaskOpen
	}
	return stored
}
