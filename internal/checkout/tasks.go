package checkout

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ag-coord/ag/agwp"
	"github.com/ag-coord/ag/internal/termsafe"
)

// tasksFile is where a checkout keeps what it knows of its task work: the task claims its
// holder made here (ag integrate --task sends the claim's number) and how far it read its
// inboxes. It is apart from checkout.json, which sync and integrate rewrite from a fresh read.
const tasksFile = StateDir + "/tasks.json"

// tasksLock is flocked while the task state is read, updated and written (UpdateTasks).
const tasksLock = StateDir + "/tasks.lock"

// TaskClaim is a task claim made in a checkout: the task and the claim's number
// (ClaimTaskResponse.task.claim_number), the fencing token a change for the task carries.
type TaskClaim struct {
	TaskID    string    `json:"task_id"`
	Number    uint64    `json:"claim_number"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// String writes the claim as commits and the command line do: "tsk_…#3".
func (c TaskClaim) String() string { return agwp.FormatTaskClaim(c.TaskID, c.Number) }

// InboxCursor is the last message seq a holder's inbox showed in the checkout.
type InboxCursor struct {
	Repository string `json:"repository"`
	Holder     string `json:"holder"`
	Seq        uint64 `json:"seq"`
}

// TaskState is the content of .ag/tasks.json.
type TaskState struct {
	Claims  []TaskClaim   `json:"claims,omitempty"`
	Inboxes []InboxCursor `json:"inboxes,omitempty"`
}

// Claim answers the claim of task id the checkout recorded.
func (s *TaskState) Claim(id string) (TaskClaim, bool) {
	i := slices.IndexFunc(s.Claims, func(c TaskClaim) bool { return c.TaskID == id })
	if i < 0 {
		return TaskClaim{}, false
	}
	return s.Claims[i], true
}

// SetClaim records claim, replacing any earlier claim of its task: a new claim fences the old.
func (s *TaskState) SetClaim(claim TaskClaim) {
	s.Forget(claim.TaskID)
	s.Claims = append(s.Claims, claim)
}

// Forget drops the claim of task id, if any.
func (s *TaskState) Forget(id string) {
	s.Claims = slices.DeleteFunc(s.Claims, func(c TaskClaim) bool { return c.TaskID == id })
}

// InboxSeq answers the last seq the inbox of holder on repository showed (0: none yet).
func (s *TaskState) InboxSeq(repository, holder string) uint64 {
	for _, c := range s.Inboxes {
		if c.Repository == repository && c.Holder == holder {
			return c.Seq
		}
	}
	return 0
}

// SetInboxSeq records seq as the last the inbox of holder on repository showed.
func (s *TaskState) SetInboxSeq(repository, holder string, seq uint64) {
	for i, c := range s.Inboxes {
		if c.Repository == repository && c.Holder == holder {
			s.Inboxes[i].Seq = seq
			return
		}
	}
	s.Inboxes = append(s.Inboxes, InboxCursor{Repository: repository, Holder: holder, Seq: seq})
}

// check refuses a state no ag wrote.
func (s *TaskState) check() error {
	for _, c := range s.Claims {
		if !strings.HasPrefix(c.TaskID, "tsk_") || len(c.TaskID) > 64 || c.Number == 0 {
			return fmt.Errorf("claim %q#%d is not a task claim", termsafe.Line(c.TaskID), c.Number)
		}
	}
	return nil
}

// Tasks answers what the checkout keeps of its task work; nothing yet is an empty state. A git
// working tree (Stateless) keeps none.
func (c *Checkout) Tasks() (*TaskState, error) {
	s := &TaskState{}
	if c.stateless {
		return s, nil
	}
	data, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(tasksFile)))
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	} else if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("%s is damaged (%v): remove it (the checkout forgets its task claims and inbox cursors)", filepath.Join(c.root, tasksFile), err)
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("%s is damaged: %v: remove it (the checkout forgets its task claims and inbox cursors)", filepath.Join(c.root, tasksFile), err)
	}
	return s, nil
}

// UpdateTasks reads the checkout's task state afresh, lets update change it and writes it back
// atomically (never through a link). A git working tree keeps none: update runs on an empty
// state, and nothing is written.
//
// The read, the update and the write hold a lock (tasksLock, flocked), so that two processes of
// the checkout (ag mcp's tools and watcher, an ag task beside it) never lose each other's claim.
func (c *Checkout) UpdateTasks(update func(*TaskState)) error {
	if c.stateless {
		update(&TaskState{})
		return nil
	}
	root, err := os.OpenRoot(c.root)
	if err != nil {
		return err
	}
	defer root.Close()
	var lock *os.File
	err = makeParents(root, tasksLock)
	if err == nil {
		lock, err = root.OpenFile(tasksLock, os.O_RDWR|os.O_CREATE, 0o600)
	}
	if err != nil {
		return fmt.Errorf("lock the checkout's task state: %w", err)
	}
	defer lock.Close()
	if err := lockTasks(lock); err != nil {
		return fmt.Errorf("lock the checkout's task state: %w", err)
	}
	s, err := c.Tasks()
	if err != nil {
		return err
	}
	update(s)
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeStateFile(root, tasksFile, data)
}

// KeepsTasks reports whether the checkout keeps task claims and inbox cursors: a git working
// tree does not (ag keeps nothing of its own in it).
func (c *Checkout) KeepsTasks() bool { return !c.stateless }

// ParseTaskRef reads a task as the command line names one: "tsk_…" (the claim this checkout
// recorded, number 0 here) or "tsk_…#3" (that claim). A bad value is a *UsageError.
func ParseTaskRef(s string) (taskID string, claim uint64, err error) {
	if strings.Contains(s, "#") {
		id, n, err := agwp.ParseTaskClaim(s)
		if err != nil {
			return "", 0, &UsageError{fmt.Errorf("%s: %w", termsafe.Line(s), err)}
		}
		return id, n, nil
	}
	if !strings.HasPrefix(s, "tsk_") {
		return "", 0, &UsageError{fmt.Errorf("%q is not a task id (they start with tsk_; `ag task list` lists them)", termsafe.Line(s))}
	}
	return s, 0, nil
}

// TaskClaimOf answers the claim ref names ("tsk_…", "tsk_…#3", or "" for the one claim the
// checkout records): a claim number given is taken as it is, else the checkout's record of the
// task's claim. No such record, or "" with none or several, is a *UsageError.
func (c *Checkout) TaskClaimOf(ref string) (TaskClaim, error) {
	s, err := c.Tasks()
	if err != nil {
		return TaskClaim{}, err
	}
	if ref == "" {
		switch len(s.Claims) {
		case 1:
			return s.Claims[0], nil
		case 0:
			return TaskClaim{}, &UsageError{errors.New("this checkout records no task claim: name the task (ID, or ID#CLAIM), or claim one with `ag task claim`")}
		}
		var names []string
		for _, cl := range s.Claims {
			names = append(names, cl.String())
		}
		return TaskClaim{}, &UsageError{fmt.Errorf("this checkout records %d task claims (%s): name the task", len(s.Claims), strings.Join(names, ", "))}
	}
	id, n, err := ParseTaskRef(ref)
	if err != nil {
		return TaskClaim{}, err
	}
	if n != 0 {
		if cl, ok := s.Claim(id); ok && cl.Number == n {
			return cl, nil
		}
		return TaskClaim{TaskID: id, Number: n}, nil
	}
	cl, ok := s.Claim(id)
	if !ok {
		where := "this checkout"
		if c.stateless {
			where = "a git working tree (ag keeps no state in one)"
		}
		return TaskClaim{}, &UsageError{fmt.Errorf("%s records no claim of task %s: claim it here first (ag task claim %s), or name the claim as %s#CLAIM",
			where, termsafe.Line(id), termsafe.Line(id), termsafe.Line(id))}
	}
	return cl, nil
}
