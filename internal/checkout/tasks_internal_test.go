package checkout

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestTaskStateKeepsClaimsAndCursors ensures a checkout records its task claims and inbox
// cursors in .ag/tasks.json, a new claim of a task replacing the old, and answers the claim a
// command names: the task's recorded claim, the one named with its number, or the only one.
func TestTaskStateKeepsClaimsAndCursors(t *testing.T) {
	root := t.TempDir()
	c := New(root, "app", "http://x", "a1")
	if _, err := c.TaskClaimOf(""); !isUsage(err) || !strings.Contains(err.Error(), "records no task claim") {
		t.Errorf("no claim recorded, none named: %v, want a usage error", err)
	}
	for _, cl := range []TaskClaim{{TaskID: "tsk_a", Number: 1}, {TaskID: "tsk_b", Number: 4}, {TaskID: "tsk_a", Number: 2}} {
		if err := c.UpdateTasks(func(s *TaskState) { s.SetClaim(cl) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.UpdateTasks(func(s *TaskState) { s.SetInboxSeq("app", "a1", 7); s.SetInboxSeq("other", "a1", 3) }); err != nil {
		t.Fatal(err)
	}
	s, err := c.Tasks()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Claims) != 2 || s.InboxSeq("app", "a1") != 7 || s.InboxSeq("other", "a1") != 3 || s.InboxSeq("app", "b2") != 0 {
		t.Errorf("state read back: %+v", s)
	}
	for ref, want := range map[string]string{"tsk_a": "tsk_a#2", "tsk_b": "tsk_b#4", "tsk_a#1": "tsk_a#1", "tsk_c#9": "tsk_c#9"} {
		if got, err := c.TaskClaimOf(ref); err != nil || got.String() != want {
			t.Errorf("TaskClaimOf(%q) = %v, %v; want %s", ref, got, err, want)
		}
	}
	for ref, want := range map[string]string{
		"":        "records 2 task claims (tsk_b#4, tsk_a#2)",
		"tsk_c":   "records no claim of task tsk_c",
		"job_1":   "is not a task id",
		"tsk_a#0": "is not a claim number",
		"#3":      "a task claim is written TASK#CLAIM",
	} {
		if _, err := c.TaskClaimOf(ref); !isUsage(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("TaskClaimOf(%q) = %v, want a usage error saying %q", ref, err, want)
		}
	}
	if err := c.UpdateTasks(func(s *TaskState) { s.Forget("tsk_b") }); err != nil {
		t.Fatal(err)
	}
	if got, err := c.TaskClaimOf(""); err != nil || got.String() != "tsk_a#2" {
		t.Errorf("the one claim left: %v, %v", got, err)
	}

	// A git working tree keeps nothing: claims are named with their numbers there.
	g := Stateless(t.TempDir(), "app", "http://x", "a1", nil, nil)
	if err := g.UpdateTasks(func(s *TaskState) { s.SetClaim(TaskClaim{TaskID: "tsk_a", Number: 1}) }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(g.Root(), StateDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a git working tree got %s: %v", StateDir, err)
	}
	if _, err := g.TaskClaimOf("tsk_a"); !isUsage(err) || !strings.Contains(err.Error(), "git working tree") {
		t.Errorf("TaskClaimOf in a git working tree: %v", err)
	}
}

// TestADamagedTaskStateIsRefused ensures a tasks.json no ag wrote is refused, saying what to do.
func TestADamagedTaskStateIsRefused(t *testing.T) {
	for name, data := range map[string]string{
		"not JSON":      `{"claims":`,
		"not a task":    `{"claims":[{"task_id":"../x","claim_number":1}]}`,
		"claim zero":    `{"claims":[{"task_id":"tsk_a","claim_number":0}]}`,
		"a wrong shape": `{"claims":{"tsk_a":1}}`,
	} {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, StateDir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(tasksFile)), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		c := New(root, "app", "http://x", "a1")
		if _, err := c.Tasks(); err == nil || !strings.Contains(err.Error(), "is damaged") || !strings.Contains(err.Error(), "remove it") {
			t.Errorf("%s: Tasks() = %v, want it refused as damaged", name, err)
		}
	}
}

func isUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}

// TestTaskStateUpdatesDoNotLoseEachOther: many updates at once (ag mcp's tools and an ag task
// beside them) each find the others' claims recorded; without the lock, a read-modify-write
// would write back a state that misses a claim recorded meanwhile.
func TestTaskStateUpdatesDoNotLoseEachOther(t *testing.T) {
	root := t.TempDir()
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := New(root, "app", "http://x", "a1") // each its own, as another process's would be
			errs <- c.UpdateTasks(func(s *TaskState) { s.SetClaim(TaskClaim{TaskID: fmt.Sprintf("tsk_%d", i), Number: 1}) })
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(root, "app", "http://x", "a1").Tasks()
	if err != nil || len(s.Claims) != n {
		t.Fatalf("claims recorded by %d updates at once: %d (%v), want every one", n, len(s.Claims), err)
	}
}
