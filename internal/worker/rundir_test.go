//go:build unix

package worker

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func needLinux(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal and /proc are Linux things")
	}
}

// testValidator answers a Validator on a work directory of its own, logging to the test.
func testValidator(t *testing.T) *Validator {
	t.Helper()
	return &Validator{WorkDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
}

// orphanDir makes a run directory as a worker that died would leave it: a lock file nobody
// holds, and a checkout. It answers the directory and its checkout.
func orphanDir(t *testing.T, workDir string) (dir, checkout string) {
	t.Helper()
	dir, err := os.MkdirTemp(workDir, runDirPattern)
	if err != nil {
		t.Fatal(err)
	}
	checkout = filepath.Join(dir, "tree")
	if err := os.Mkdir(checkout, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, lockFileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, checkout
}

// group is a process group a test started.
type group struct {
	pgid  int
	ended chan error // the leader's Wait, once
}

// startGroup starts script in a new process group, working in dir, and records the group in
// record when it is not empty. Cleanup kills the group.
func startGroup(t *testing.T, dir, script, record string) group {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // no parent-death signal: the test is no worker
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := group{pgid: cmd.Process.Pid, ended: make(chan error, 1)}
	go func() { g.ended <- cmd.Wait() }()
	t.Cleanup(func() { killGroup(g.pgid, 5*time.Second) })
	if record != "" {
		if err := os.WriteFile(record, []byte(strconv.Itoa(g.pgid)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// TestReapOrphansLeavesLockedDirectories ensures a directory whose lock is held, by a run of
// this worker or by any other open file, is left alone with its processes.
func TestReapOrphansLeavesLockedDirectories(t *testing.T) {
	t.Parallel()
	v := testValidator(t)

	run, err := newRunDir(v.WorkDir)
	if err != nil {
		t.Fatal(err)
	}
	runGroup := startGroup(t, run.path, "sleep 60", run.groupFile())

	held, checkout := orphanDir(t, v.WorkDir)
	heldGroup := startGroup(t, checkout, "sleep 60 & wait", filepath.Join(held, groupFileName))
	f, err := os.OpenFile(filepath.Join(held, lockFileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := lockFile(f); err != nil {
		t.Fatal(err)
	}

	if err := v.ReapOrphans(context.Background()); err != nil {
		t.Fatalf("ReapOrphans: %v", err)
	}
	for dir, pgid := range map[string]int{run.path: runGroup.pgid, held: heldGroup.pgid} {
		if !exists(filepath.Join(dir, lockFileName)) || !exists(filepath.Join(dir, groupFileName)) {
			t.Errorf("%s was reaped while its lock was held", dir)
		}
		if !groupAlive(pgid) {
			t.Errorf("the group %d of a held directory was killed", pgid)
		}
	}
	if err := run.remove(); err != nil || exists(run.path) {
		t.Errorf("remove: %v; the run's directory is still there: %v", err, exists(run.path))
	}
}

// TestReapOrphansKillsAndRemoves ensures a directory whose lock is free has the processes of
// its recorded group killed, all of them, and is removed, and that nothing else in the work
// directory is touched.
func TestReapOrphansKillsAndRemoves(t *testing.T) {
	t.Parallel()
	needLinux(t)
	v := testValidator(t)
	dir, checkout := orphanDir(t, v.WorkDir)
	if err := os.Chmod(checkout, 0o500); err != nil { // a command may leave such things
		t.Fatal(err)
	}
	g := startGroup(t, checkout, "sleep 60 & wait", filepath.Join(dir, groupFileName))
	other := filepath.Join(v.WorkDir, "ag-other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}

	if err := v.ReapOrphans(context.Background()); err != nil {
		t.Fatalf("ReapOrphans: %v", err)
	}
	if exists(dir) {
		t.Errorf("the orphaned directory %s is still there", dir)
	}
	if groupAlive(g.pgid) {
		t.Errorf("processes of the orphaned group %d are alive", g.pgid)
	}
	if err := <-g.ended; err == nil || err.Error() != "signal: killed" {
		t.Errorf("the leader ended with %v, want killed", err)
	}
	if !exists(other) {
		t.Error("ReapOrphans removed a directory that is not a run's")
	}
}

// TestReapOrphansSparesWhatIsNotTheirs ensures the reaper kills no group whose processes do
// not work in the orphaned directory (its id may have been reused), follows no symbolic link,
// leaves another user's directory alone (checked when the test runs as root), and a directory
// without a lock file unless it is empty.
func TestReapOrphansSparesWhatIsNotTheirs(t *testing.T) {
	t.Parallel()
	v := testValidator(t)
	dir, _ := orphanDir(t, v.WorkDir)
	elsewhere := startGroup(t, t.TempDir(), "sleep 60", filepath.Join(dir, groupFileName))

	target := t.TempDir()
	if err := os.WriteFile(filepath.Join(target, lockFileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(v.WorkDir, runDirPattern+"link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	foreign, _ := orphanDir(t, v.WorkDir)
	if os.Geteuid() == 0 {
		if err := os.Chown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	empty := filepath.Join(v.WorkDir, runDirPattern+"empty")
	older := filepath.Join(v.WorkDir, runDirPattern+"older")
	for _, d := range []string{empty, filepath.Join(older, "tree")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	if err := v.ReapOrphans(context.Background()); err != nil {
		t.Fatalf("ReapOrphans: %v", err)
	}
	if exists(dir) {
		t.Errorf("the orphaned directory %s is still there", dir)
	}
	if !groupAlive(elsewhere.pgid) {
		t.Errorf("the group %d, which works elsewhere, was killed", elsewhere.pgid)
	}
	if !exists(link) || !exists(filepath.Join(target, lockFileName)) {
		t.Error("the reaper followed a symbolic link")
	}
	if exists(empty) {
		t.Error("an empty directory without a lock file is still there")
	}
	if os.Geteuid() == 0 && !exists(foreign) {
		t.Error("the reaper removed another user's directory")
	}
	if !exists(older) {
		t.Error("a directory without a lock file, with content, was removed")
	}
}

// TestClaimRunDirLosesToAReaper ensures a new directory that a reaper removed before its
// maker held the lock is given up, not made again, and that a run's lock, once held, is held
// against any other open file.
func TestClaimRunDirLosesToAReaper(t *testing.T) {
	t.Parallel()
	workDir := t.TempDir()
	if _, err := claimRunDir(filepath.Join(workDir, runDirPattern+"reaped")); !errors.Is(err, errTaken) {
		t.Errorf("claimRunDir of a removed directory = %v, want errTaken", err)
	}
	run, err := newRunDir(workDir)
	if err != nil {
		t.Fatal(err)
	}
	defer run.remove()
	f, err := os.OpenFile(filepath.Join(run.path, lockFileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := lockFile(f); !errors.Is(err, errLocked) {
		t.Errorf("a second open file took the run's lock: %v", err)
	}
}
