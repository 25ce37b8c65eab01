package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A validation runs in a directory of its own under the work directory, which workers may
// share:
//
//	ag-validate-*/
//	  lock        flocked by the worker running the validation, for as long as it runs
//	  pgid        the command's process group, written once the command has started
//	  output.log  the command's output
//	  tree/       the checkout, the command's working directory
//	  home/ tmp/ shm/  the command's other writable directories
//	  disk.img    with a disk limit: the run's file system, and then
//	  disk/       where it is mounted, which holds output.log, tree/, home/, tmp/ and shm/
//
// The run's cgroups, when it has them, are named after the directory.
//
// A flock belongs to the open file and goes when the worker's process ends, however it ends
// (Go opens files close-on-exec, so the command does not inherit it). A worker that can take
// the lock of a directory therefore knows that the worker that made it is gone, and may kill
// what is left of its command and remove it (ReapOrphans). A directory whose lock is held is
// never touched.
const (
	runDirPattern = "ag-validate-"
	lockFileName  = "lock"
	groupFileName = "pgid"
)

// errLocked is lockFile's answer when another open file holds the lock.
var errLocked = errors.New("locked by another open file")

// errTaken is tryRunDir's answer when a reaper took the new directory for an orphan before
// its lock was held (it removes it).
var errTaken = errors.New("the new directory was taken for an orphan")

// runDir is the directory of one validation run, held by its lock while the run lives.
type runDir struct {
	path string
	lock *os.File
}

// newRunDir creates a fresh directory under workDir and holds its lock.
func newRunDir(workDir string) (*runDir, error) {
	var err error
	for range 3 {
		var d *runDir
		if d, err = tryRunDir(workDir); !errors.Is(err, errTaken) {
			return d, err
		}
	}
	return nil, err
}

// tryRunDir creates a directory and its lock file, and locks it. A reaper may come between
// these steps: it removes an empty directory without a lock file, and takes the lock of a
// directory whose lock is free. tryRunDir notices either and answers errTaken, leaving the
// directory to the reaper.
func tryRunDir(workDir string) (*runDir, error) {
	path, err := os.MkdirTemp(workDir, runDirPattern)
	if err != nil {
		return nil, err
	}
	return claimRunDir(path)
}

// claimRunDir creates the lock file of the new directory path and locks it.
func claimRunDir(path string) (*runDir, error) {
	lockPath := filepath.Join(path, lockFileName)
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errTaken
	}
	if err != nil {
		_ = os.Remove(path)
		return nil, err
	}
	if err := lockFile(f); err != nil {
		f.Close()
		if errors.Is(err, errLocked) {
			return nil, errTaken
		}
		_ = removeAll(path)
		return nil, fmt.Errorf("lock %s: %w", lockPath, err)
	}
	if !sameFile(f, lockPath) {
		f.Close() // a reaper locked it first, then removed the directory
		return nil, errTaken
	}
	return &runDir{path: path, lock: f}, nil
}

// groupFile is where the run records its command's process group.
func (d *runDir) groupFile() string { return filepath.Join(d.path, groupFileName) }

// remove removes the directory, then lets go of its lock.
func (d *runDir) remove() error {
	err := removeAll(d.path)
	if cerr := d.lock.Close(); err == nil {
		err = cerr
	}
	return err
}

// sameFile reports whether path still names the file f has open.
func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// ReapOrphans cleans up after the validations of workers that died without doing it
// themselves (SIGKILL, a crash, a power cut): it removes every ag-validate-* directory in the
// work directory whose lock it can take, after killing what is left of the process group
// recorded there. It leaves alone the directories of live workers, this one's included, so
// workers may share a work directory, those of other users, and directories without a lock
// file but with content (an older ag-worker's). ag-worker calls it once at start. It answers an error only when the
// work directory cannot be read; what it reaps, or fails to, it logs.
//
// The recorded group is killed only when one of its live processes has its working directory
// in the orphaned directory (Linux, through /proc): otherwise its id may have been reused by
// an unrelated group, or the command's processes all left the directory, and nothing is
// killed. Where that cannot be checked, nothing is ever killed.
func (v *Validator) ReapOrphans(ctx context.Context) error {
	if !fileLocks {
		return nil
	}
	workDir := v.workDir()
	entries, err := os.ReadDir(workDir)
	if err != nil {
		return fmt.Errorf("look for orphaned validations: %w", err)
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		if !e.IsDir() || !strings.HasPrefix(e.Name(), runDirPattern) {
			continue // a symbolic link is not a directory here: never followed
		}
		v.reap(filepath.Join(workDir, e.Name()))
	}
	return nil
}

// reap removes dir if its worker is gone, after killing its recorded group.
func (v *Validator) reap(dir string) {
	log := v.logger().With("dir", dir)
	if fi, err := os.Lstat(dir); err != nil || !ownedByUs(fi) {
		return // another user's, in a shared temporary directory
	}
	lockPath := filepath.Join(dir, lockFileName)
	if fi, err := os.Lstat(lockPath); err == nil && !fi.Mode().IsRegular() {
		log.Warn("left alone a validation directory whose lock is not a regular file")
		return // opening a FIFO could block
	}
	f, err := os.OpenFile(lockPath, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		// A worker making it this instant (it tries again with another), or one that died
		// just then: empty either way, and removing it only succeeds if it still is. One with
		// content and no lock file was not made by this protocol: not ours to judge.
		if os.Remove(dir) == nil {
			log.Info("removed an empty validation directory without a lock")
		} else {
			log.Debug("left alone a validation directory without a lock file")
		}
		return
	}
	if err != nil {
		log.Debug("left alone a validation directory whose lock cannot be opened", "err", err)
		return
	}
	defer f.Close() // after the directory is gone: no other reaper gets in meanwhile
	if err := lockFile(f); err != nil {
		if !errors.Is(err, errLocked) {
			log.Warn("left alone a validation directory whose lock cannot be taken", "err", err)
		}
		return // a live worker's
	}
	if !sameFile(f, lockPath) {
		return // removed meanwhile, by its worker or another reaper
	}

	pgid := 0
	killed := false
	if b, err := os.ReadFile(filepath.Join(dir, groupFileName)); err == nil {
		// Anything below 2 would be no group of ours: kill(-1) reaches every process we
		// may signal, kill(0) our own group.
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 1 {
			pgid = n
		} else {
			log.Warn("the recorded process group is not a process group id", "pgid", string(b))
		}
	}
	if pgid > 0 && groupAlive(pgid) {
		ours, err := groupRunsIn(pgid, dir)
		switch {
		case err != nil:
			log.Warn("processes of the orphaned command's group may be running: cannot tell whether they are its, not killed",
				"pgid", pgid, "err", err)
		case !ours:
			log.Warn("process group still alive, but none of its processes works in the orphaned directory: not killed",
				"pgid", pgid)
		default:
			killed = true
			if !killGroup(pgid, 5*time.Second) {
				log.Warn("processes of the orphaned command outlived SIGKILL", "pgid", pgid)
			}
		}
	}
	v.Limits.reapOrphan(dir)
	if err := removeAll(dir); err != nil {
		log.Warn("could not remove an orphaned validation directory", "pgid", pgid, "killed", killed, "err", err)
		return
	}
	log.Info("reaped an orphaned validation", "pgid", pgid, "killed", killed)
}
