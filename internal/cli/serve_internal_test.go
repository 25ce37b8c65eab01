package cli

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/serveconfig"
)

// TestServeOnABusyPortCreatesNothing ensures ag serve on an address in use fails saying so
// before it creates its database, its audit key or the admin, so no token is printed that the
// next start would not print again.
func TestServeOnABusyPortCreatesNothing(t *testing.T) {
	t.Setenv("AG_BOOTSTRAP_TOKEN", "")
	t.Setenv("AG_AUDIT_KEY", "")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := filepath.Join(t.TempDir(), "data")
	var out bytes.Buffer
	g := &globals{stdout: &out, stderr: &out}
	err = serve(context.Background(), g, &serveOptions{addr: busy.Addr().String(), db: "sqlite:" + filepath.Join(dir, "ag.db"),
		logLevel: "error", logFormat: "text", auditOrigin: "ag"})
	if err == nil || !strings.Contains(err.Error(), "listen on "+busy.Addr().String()) || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("serve on a busy port: %v, want \"listen on ADDR: ... address already in use\"", err)
	}
	if strings.Contains(out.String(), "AG_TOKEN") {
		t.Errorf("serve on a busy port printed a token:\n%s", out.String())
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("serve on a busy port created %s (%v)", dir, err)
	}
}

// TestAuditKeyBesideTheDatabase ensures the audit key of a SQLite server is audit.key in its
// database's directory, of a PostgreSQL server ./ag-data/audit.key, and that AG_AUDIT_KEY and
// --audit-key choose another.
func TestAuditKeyBesideTheDatabase(t *testing.T) {
	for db, want := range map[string]string{
		"sqlite:./ag-data/ag.db":             filepath.Join("ag-data", "audit.key"),
		"sqlite:/srv/team-a/ag.db":           "/srv/team-a/audit.key",
		"sqlite:///srv/team-a/ag.db":         "/srv/team-a/audit.key",
		"sqlite:ag.db":                       "audit.key",
		"sqlite:../b/x.db":                   filepath.Join("..", "b", "audit.key"),
		"postgres://ag@db.internal/ag":       "ag-data/audit.key",
		"postgresql://ag:pw@db.internal/ag2": "ag-data/audit.key",
	} {
		if got := serveconfig.AuditKeyFor(db); got != want {
			t.Errorf("AuditKeyFor(%q) = %q, want %q", db, got, want)
		}
	}

	// A server started on a SQLite file creates its key there, and not in ./ag-data.
	t.Setenv("AG_BOOTSTRAP_TOKEN", "agt_test-"+strings.Repeat("a", 32))
	for _, c := range []struct {
		name, env, flag string
		want            func(dir string) string
	}{
		{"default", "", "", func(dir string) string { return filepath.Join(dir, "db", "audit.key") }},
		{"AG_AUDIT_KEY", "env.key", "", func(dir string) string { return filepath.Join(dir, "env.key") }},
		{"--audit-key over AG_AUDIT_KEY", "env.key", "flag.key", func(dir string) string { return filepath.Join(dir, "flag.key") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.env != "" {
				t.Setenv("AG_AUDIT_KEY", filepath.Join(dir, c.env))
			} else {
				t.Setenv("AG_AUDIT_KEY", "")
			}
			o := &serveOptions{addr: "127.0.0.1:0", db: "sqlite:" + filepath.Join(dir, "db", "ag.db"), logLevel: "error", logFormat: "text", auditOrigin: "ag"}
			if c.flag != "" {
				o.auditKey = filepath.Join(dir, c.flag)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var out bytes.Buffer
			done := make(chan error, 1)
			go func() { done <- serve(ctx, &globals{stdout: &out, stderr: &out}, o) }()
			want := c.want(dir)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for deadline := time.Now().Add(20 * time.Second); ; <-tick.C {
				if _, err := os.Stat(want + ".pub"); err == nil {
					break
				}
				if time.Now().After(deadline) {
					cancel()
					t.Fatalf("no audit key at %s after 20s; serve: %v", want, <-done)
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
			var keys []string
			_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, _ error) error {
				if strings.HasSuffix(p, ".key") {
					keys = append(keys, p)
				}
				return nil
			})
			if len(keys) != 1 || keys[0] != want {
				t.Errorf("audit keys %v, want only %s", keys, want)
			}
			if _, err := os.Stat(filepath.Join("ag-data", "audit.key")); err == nil {
				t.Errorf("serve created ./ag-data/audit.key in the working directory")
			}
		})
	}
}
