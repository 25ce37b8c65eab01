package gate

import (
	"errors"
	"strings"

	"github.com/ag-coord/ag/internal/store"
)

// taskRefusal answers why the task claim change c carries is no longer current (""
// when it is, or when c carries none), read in the queue's transaction: a change lands
// for a task only while its claim is the task's current one, by store.CheckTaskClaim,
// the rule Integrate applied when the change was made.
func (r *queueRun) taskRefusal(c store.Change) (string, error) {
	if c.TaskID == "" {
		return "", nil
	}
	t, err := r.tx.Task(c.TaskID)
	if errors.Is(err, store.ErrNotFound) {
		return "task " + c.TaskID + " no longer exists", nil
	}
	if err != nil {
		return "", err
	}
	if err := store.CheckTaskClaim(t, c.Holder, c.TaskClaimNumber); err != nil {
		return err.Error(), nil
	}
	return "", nil
}

// rejectStaleClaims rejects the changes of a passed candidate whose task claim is no longer
// current (claimed again, even by the same holder; released; the task done by another change
// or cancelled), before the mainline moves: the candidate is superseded, and the others of
// its batch are built again without them. It reports whether it rejected any.
func (r *walk) rejectStaleClaims(cand *store.Candidate, group []store.Change) (bool, error) {
	stale := map[string]string{}
	var ids []string
	for _, c := range group {
		why, err := r.taskRefusal(c)
		if err != nil {
			return false, err
		}
		if why != "" {
			stale[c.ID] = why
			ids = append(ids, c.ID)
		}
	}
	if len(stale) == 0 {
		return false, nil
	}
	var others []*store.Change
	for j := range group {
		if stale[group[j].ID] == "" {
			others = append(others, &group[j])
		}
	}
	if err := r.supersede(*cand, others, "it passed, but the task claim of "+strings.Join(ids, ", ")+" is no longer current"); err != nil {
		return false, err
	}
	for j := range group {
		c := &group[j]
		why := stale[c.ID]
		if why == "" {
			continue
		}
		if err := r.rejectForTask(c, store.ChangeValidating, why); err != nil {
			return false, err
		}
	}
	r.why = "the change " + ids[0] + " ahead of it was rejected"
	return true, nil
}

// rejectForTask rejects c, in state from, whose task claim is no longer current (why).
func (r *queueRun) rejectForTask(c *store.Change, from store.ChangeState, why string) error {
	c.State, c.CandidateID = store.ChangeRejected, ""
	c.Reason = "its task claim " + c.TaskClaim() + " is no longer current: " + why
	return r.set(c, from, "change.rejected", map[string]any{"reason": c.Reason, "task": c.TaskID})
}

// finishTasks marks done the tasks whose claims the landed changes of group carry.
func (r *queueRun) finishTasks(group []store.Change) error {
	for _, c := range group {
		if c.TaskID == "" {
			continue
		}
		if err := r.tx.FinishTask(c.TaskID, c.ID); err != nil {
			return err
		}
	}
	return nil
}

// taskClaims answers the task claims of group, for the commit's Ag-Task trailers.
func taskClaims(group []store.Change) []string {
	var out []string
	for _, c := range group {
		if claim := c.TaskClaim(); claim != "" {
			out = append(out, claim)
		}
	}
	return out
}
