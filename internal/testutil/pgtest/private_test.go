package pgtest

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain runs the tests, or, in the subprocess of TestSweepRemovesAbandonedClusters, starts
// a cluster and exits without cleaning up, as a test binary that crashes does.
func TestMain(m *testing.M) {
	if os.Getenv("PGTEST_ABANDON") == "1" {
		c, err := start()
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("DIR " + c.dir + "\n")
		os.Exit(0)
	}
	Main(m)
}

// TestSweepRemovesAbandonedClusters ensures that a cluster whose test binary died without
// cleaning up is stopped and removed by the next binary that starts a cluster.
func TestSweepRemovesAbandonedClusters(t *testing.T) {
	if os.Getenv(EnvURL) != "" {
		t.Skipf("%s is set: no private cluster to abandon", EnvURL)
	}
	URL(t) // skips when there is no PostgreSQL to start

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "PGTEST_ABANDON=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v: %s", err, out)
	}
	var dir string
	for sc := bufio.NewScanner(strings.NewReader(string(out))); sc.Scan(); {
		if d, ok := strings.CutPrefix(sc.Text(), "DIR "); ok {
			dir = d
		}
	}
	if dir == "" {
		t.Fatalf("helper printed no cluster directory: %s", out)
	}
	pidFile, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatalf("the abandoned cluster is not running: %v", err)
	}
	pid, _ := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])

	// Our own cluster is locked and must survive the sweep.
	defer func(d time.Duration) { sweepMinAge = d }(sweepMinAge)
	sweepMinAge = 0
	server.sweep(filepath.Dir(dir))

	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("abandoned cluster directory %s still exists (stat: %v)", dir, err)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the abandoned postmaster %d still runs", pid)
		}
		<-tick.C
	}
	if _, err := os.Stat(server.dir); err != nil {
		t.Errorf("the sweep removed this binary's own cluster: %v", err)
	}
	if err := server.admin.Ping(t.Context()); err != nil {
		t.Errorf("this binary's own cluster stopped answering after the sweep: %v", err)
	}
}
