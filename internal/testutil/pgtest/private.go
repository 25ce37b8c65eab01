package pgtest

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clusterPrefix starts the name of every private cluster's directory.
const clusterPrefix = "agpg"

// sweepMinAge is how old an unlocked cluster directory must be for sweep to remove it: its
// owner takes the lock right after creating it. A variable for the test of sweep.
var sweepMinAge = time.Minute

// startPrivate creates and starts a cluster that listens only on a unix socket in a new
// directory with a short path: a socket path must fit in about 107 bytes, which t.TempDir()
// paths often do not, and no TCP port means no port to collide on.
func startPrivate() (*cluster, error) {
	for _, bin := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s not found on PATH", bin)
		}
	}
	c := &cluster{}
	// initdb refuses to run as root, so root runs the cluster as the postgres user.
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("runuser"); err != nil {
			return nil, errors.New("running as root, and runuser (to run PostgreSQL as user postgres) is not on PATH")
		}
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, and there is no user postgres to run PostgreSQL as: %v", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		c.asUser = true
	}
	parent := clusterParent()
	for _, p := range []string{"/tmp", parent} {
		c.sweep(p)
	}
	dir, err := os.MkdirTemp(parent, clusterPrefix)
	if err != nil {
		return nil, err
	}
	c.dir, c.data = dir, filepath.Join(dir, "data")
	if c.lock, err = lockDir(dir, true); err != nil {
		c.stop()
		return nil, fmt.Errorf("lock %s: %v", dir, err)
	}
	if c.asUser {
		if err := os.Chown(dir, uid, gid); err != nil {
			c.stop()
			return nil, err
		}
	}
	if out, err := c.run("initdb", "-D", c.data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
		"--locale=C", "--no-sync", "--no-instructions"); err != nil {
		c.stop()
		return nil, fmt.Errorf("initdb: %v: %s", err, lastLines(out))
	}
	// Durability is pointless for a cluster thrown away after the run, and costs most of the
	// time of a write.
	opts := fmt.Sprintf("-c listen_addresses='' -k %s -c fsync=off -c synchronous_commit=off "+
		"-c full_page_writes=off -c max_connections=200", dir)
	if out, err := c.run("pg_ctl", "start", "-w", "-t", "60", "-D", c.data,
		"-l", filepath.Join(dir, "log"), "-o", opts); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		c.stop()
		return nil, fmt.Errorf("pg_ctl start: %v: %s %s", err, lastLines(out), lastLines(log))
	}
	q := url.Values{"host": {dir}, "sslmode": {"disable"}}
	c.url = "postgres://postgres@/postgres?" + q.Encode()
	return c, nil
}

// lockDir takes an exclusive flock on dir's lock file, which the kernel releases when this
// process ends however it ends. create makes the file; otherwise a missing one is an error.
// wait false fails at once when another process holds it.
func lockDir(dir string, create bool) (*os.File, error) {
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), flag, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// sweep stops and removes the clusters under parent that test binaries left behind: a binary
// that panics, times out or is killed never reaches Main's cleanup, and its postmaster
// (daemonized by pg_ctl) would run, and its files stay (in memory, under /dev/shm), for good.
// A cluster is abandoned when nobody holds its lock. Directories younger than a minute are
// left alone: their owner may not have taken the lock yet.
func (c *cluster) sweep(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), clusterPrefix) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < sweepMinAge {
			continue
		}
		lock, err := lockDir(dir, false)
		if err != nil {
			continue // alive, or not one of ours
		}
		stale := &cluster{dir: dir, data: filepath.Join(dir, "data"), asUser: c.asUser, lock: lock}
		stale.stop()
	}
}

func (c *cluster) run(name string, args ...string) ([]byte, error) {
	if c.asUser {
		args = append([]string{"-u", "postgres", "--", name}, args...)
		name = "runuser"
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = c.dir // the postgres user may not be able to enter the test's working directory
	return cmd.CombinedOutput()
}

func (c *cluster) stop() {
	if c.admin != nil {
		c.admin.Close()
	}
	if c.dir == "" {
		return
	}
	if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err == nil {
		// immediate: the data is thrown away, so a clean shutdown is wasted time.
		if out, err := c.run("pg_ctl", "stop", "-m", "immediate", "-w", "-D", c.data); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: pg_ctl stop: %v: %s\n", err, lastLines(out))
		}
	}
	os.RemoveAll(c.dir)
	if c.lock != nil {
		c.lock.Close()
	}
}

func lastLines(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}
