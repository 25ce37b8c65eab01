// Package pgtest gives tests a private PostgreSQL: a fresh, empty database per test, inside a
// throwaway cluster that the test binary starts on first use and stops when it ends, or inside
// the server that AG_TEST_POSTGRES_URL names.
//
// A package that uses it calls Main from its TestMain, so the cluster does not outlive the
// tests:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// Where no PostgreSQL can be had, NewDatabase skips the test with the reason, unless
// AG_REQUIRE_POSTGRES=1, which turns the skip into a failure (CI must not pass by skipping).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Environment variables read by this package.
const (
	// EnvURL names an existing server to create the test databases in instead of starting one.
	EnvURL = "AG_TEST_POSTGRES_URL"
	// EnvRequire, set to 1, fails the tests that need PostgreSQL when there is none.
	EnvRequire = "AG_REQUIRE_POSTGRES"
)

var (
	once     sync.Once
	server   *cluster
	startErr error
)

// cluster is the server the test databases are created in.
type cluster struct {
	url   string        // URL of its "postgres" database
	admin *pgxpool.Pool // connections to it, for CREATE and DROP DATABASE

	// Set only for the private cluster this process started.
	dir    string
	data   string
	asUser bool     // run the PostgreSQL binaries as the postgres user (we are root)
	lock   *os.File // held while this process lives; see sweep
}

// Main runs the tests and then stops the private cluster, if one was started, removes its
// files and exits with the tests' code. Call it from TestMain.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main for a TestMain that has more to clean up: it answers the code to exit with
// instead of exiting.
func Run(m *testing.M) int {
	code := m.Run()
	stop()
	return code
}

// NewDatabase answers the connection URL of a fresh, empty database that only this test uses.
// The database is dropped when the test ends; close every connection to it before that (a
// t.Cleanup registered after NewDatabase runs first).
func NewDatabase(t testing.TB) string {
	t.Helper()
	c := get(t)
	name := "agtest_" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// FORCE ends connections a failed test left open, so the drop cannot hang or fail.
		if _, err := c.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	u, err := withDatabase(c.url, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return u
}

// URL answers the URL of the server's "postgres" database, for helpers and benchmarks that
// manage databases themselves. It skips or fails like NewDatabase when there is no server.
func URL(t testing.TB) string {
	t.Helper()
	return get(t).url
}

// get answers the server, starting it on first use, or ends the test when there is none.
func get(t testing.TB) *cluster {
	t.Helper()
	once.Do(func() { server, startErr = start() })
	if startErr != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("pgtest: PostgreSQL is required (%s=1) but unavailable: %v", EnvRequire, startErr)
		}
		t.Skipf("pgtest: skipped, no PostgreSQL: %v (set %s or install the PostgreSQL server binaries)", startErr, EnvURL)
	}
	return server
}

func start() (*cluster, error) {
	if u := os.Getenv(EnvURL); u != "" {
		if _, err := withDatabase(u, "postgres"); err != nil {
			return nil, err
		}
		c := &cluster{url: u}
		if err := c.connect(); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvURL, err)
		}
		return c, nil
	}
	c, err := startPrivate()
	if err != nil {
		return nil, err
	}
	if err := c.connect(); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

func (c *cluster) connect() error {
	cfg, err := pgxpool.ParseConfig(c.url)
	if err != nil {
		return err
	}
	cfg.MaxConns = 4
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return err
	}
	c.admin = pool
	return nil
}

func stop() {
	if server != nil {
		server.stop()
	}
}

// withDatabase answers base with its database replaced by name.
func withDatabase(base, name string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("%s must be a postgres:// URL", EnvURL)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
