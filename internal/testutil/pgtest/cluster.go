package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"time"
)

// Cluster is a private PostgreSQL cluster for programs outside `go test`, such as the fault
// harness ag-chaos: the same throwaway cluster the tests get (a unix socket in a short temp
// directory, fsync off, run as the postgres user when the caller is root), which the program
// may also restart, and which it stops with Stop. A program that dies without calling Stop
// leaves a cluster that the next cluster started (by a test binary or a program) stops and
// removes, as it does for test binaries.
type Cluster struct {
	c *cluster
}

// StartCluster creates and starts a private cluster. It fails when the PostgreSQL server
// binaries (initdb, pg_ctl, postgres) are not on PATH, or, as root, when there is no postgres
// user or runuser to run them as.
func StartCluster() (*Cluster, error) {
	c, err := startPrivate()
	if err != nil {
		return nil, err
	}
	if err := c.connect(); err != nil {
		c.stop()
		return nil, err
	}
	return &Cluster{c: c}, nil
}

// URL answers the URL of the cluster's "postgres" database.
func (c *Cluster) URL() string { return c.c.url }

// Dir answers the cluster's directory: its data directory "data", its socket and its server
// log "log".
func (c *Cluster) Dir() string { return c.c.dir }

// LogFile answers the path of the server's log.
func (c *Cluster) LogFile() string { return filepath.Join(c.c.dir, "log") }

// CreateDatabase creates an empty database name and answers its URL.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	if _, err := c.c.admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return withDatabase(c.c.url, name)
}

// Restart stops the server at once, as a crash would (pg_ctl restart -m immediate: every
// connection is cut, and the server recovers from its write-ahead log on start), and waits
// until it accepts connections again.
func (c *Cluster) Restart(ctx context.Context) error {
	if c.c.dir == "" {
		return errors.New("not a private cluster")
	}
	done := make(chan struct{})
	var out []byte
	var err error
	go func() {
		defer close(done)
		// -l again: without it the new server would write to pg_ctl's output, which would
		// then never end.
		out, err = c.c.run("pg_ctl", "restart", "-m", "immediate", "-w", "-t", "60", "-D", c.c.data,
			"-l", filepath.Join(c.c.dir, "log"))
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("pg_ctl restart: %v: %s", err, lastLines(out))
	}
	// The admin pool's connections were cut; it opens new ones, but a ping makes sure the
	// server answers before the caller goes on.
	deadline := time.Now().Add(30 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		perr := c.c.admin.Ping(pctx)
		cancel()
		if perr == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the cluster does not answer after its restart: %w", perr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop stops the cluster and removes its files. It is safe to call more than once.
func (c *Cluster) Stop() {
	if c.c == nil {
		return
	}
	c.c.stop()
	c.c = &cluster{}
}

// Available answers why no private cluster can be started here, or nil when one may be: the
// PostgreSQL server binaries are on PATH and, as root, so are runuser and the postgres user.
// It starts nothing; StartCluster may still fail.
func Available() error {
	for _, bin := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found on PATH", bin)
		}
	}
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("runuser"); err != nil {
			return errors.New("running as root, and runuser (to run PostgreSQL as user postgres) is not on PATH")
		}
		if _, err := user.Lookup("postgres"); err != nil {
			return fmt.Errorf("running as root, and there is no user postgres to run PostgreSQL as: %v", err)
		}
	}
	return nil
}
