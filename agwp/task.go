package agwp

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ParseTaskClaim reads a task claim as commits, push options and the command line write it:
// "tsk_…#3", the task's id and the claim's number (ClaimTaskResponse.task.claim_number).
func ParseTaskClaim(s string) (taskID string, claim uint64, err error) {
	id, number, ok := strings.Cut(s, "#")
	if !ok || id == "" {
		return "", 0, errors.New("a task claim is written TASK#CLAIM, such as tsk_0a1b#3 (`ag task claim` says it)")
	}
	if !strings.HasPrefix(id, "tsk_") {
		return "", 0, fmt.Errorf("%q is not a task id (they start with tsk_)", id)
	}
	n, err := strconv.ParseUint(number, 10, 64)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("%q is not a claim number (a positive number)", number)
	}
	return id, n, nil
}

// FormatTaskClaim writes a task claim as ParseTaskClaim reads it.
func FormatTaskClaim(taskID string, claim uint64) string {
	return taskID + "#" + strconv.FormatUint(claim, 10)
}
