package serveconfig_test

import (
	"testing"

	"github.com/ag-coord/ag/internal/serveconfig"
)

// TestChecks ensures what ag serve refuses before it starts: a non-loopback address in
// plaintext unless told, and an e-mail domain that would break a commit's author line; and that
// a database URL is logged without its password.
func TestChecks(t *testing.T) {
	for _, c := range []struct {
		addr          string
		tls, insecure bool
		ok            bool
	}{
		{"127.0.0.1:7777", false, false, true}, {"localhost:7777", false, false, true}, {"[::1]:7777", false, false, true},
		{"0.0.0.0:7777", false, false, false}, {"0.0.0.0:7777", true, false, true}, {"0.0.0.0:7777", false, true, true}, {"7777", false, false, false},
	} {
		if err := serveconfig.CheckListen(c.addr, c.tls, c.insecure); (err == nil) != c.ok {
			t.Errorf("CheckListen(%q, tls %v, insecure %v) = %v", c.addr, c.tls, c.insecure, err)
		}
	}
	for d, ok := range map[string]bool{"example.com": true, "ag-coord.dev": true, "": false, "-a.com": false, "a..com": false, "a>b.com": false, "a\nb.com": false} {
		if serveconfig.ValidEmailDomain(d) != ok {
			t.Errorf("ValidEmailDomain(%q) = %v", d, !ok)
		}
	}
	if got, want := serveconfig.RedactDSN("postgres://ag:hunter2@db/ag"), "postgres://ag:***@db/ag"; got != want {
		t.Errorf("RedactDSN = %q, want %q", got, want)
	}
}

// TestProcs ensures ag serve runs a SQLite store with one Go processor more than the
// runtime's default, a PostgreSQL store with the default, and either with the GOMAXPROCS an
// operator set.
func TestProcs(t *testing.T) {
	for _, c := range []struct {
		db    string
		procs int
		env   string
		want  int
	}{
		{"sqlite:./ag-data/ag.db", 2, "", 3},
		{"sqlite:./ag-data/ag.db", 2, "2", 2},
		{"postgres://ag@db/ag", 2, "", 2},
		{"postgresql://ag@db/ag", 4, "4", 4},
	} {
		if got := serveconfig.Procs(c.db, c.procs, c.env); got != c.want {
			t.Errorf("Procs(%q) with %d processors and GOMAXPROCS=%q = %d, want %d", c.db, c.procs, c.env, got, c.want)
		}
	}
}
