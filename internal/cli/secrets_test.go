package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestHelpShowsNoSecret ensures no --help prints the token or the database password the
// environment holds: help text ends up on screens, in terminal recordings and in agents'
// transcripts.
func TestHelpShowsNoSecret(t *testing.T) {
	const token = "agt_secret-token-in-the-environment"
	const password = "hunter2-database-password"
	t.Setenv("AG_TOKEN", token)
	t.Setenv("AG_DB", "postgres://ag:"+password+"@db.internal:5432/ag")
	for _, args := range [][]string{
		{"--help"}, {"serve", "--help"}, {"lease", "acquire", "--help"}, {"job", "enqueue", "--help"},
		{"checkout", "--help"}, {"audit", "verify", "--help"}, {"git-credential", "--help"},
	} {
		var out bytes.Buffer
		if err := Run(context.Background(), args, &out, &out); err != nil {
			t.Fatalf("ag %s: %v", strings.Join(args, " "), err)
		}
		if !strings.Contains(out.String(), "--token") {
			t.Fatalf("ag %s printed no help:\n%s", strings.Join(args, " "), out.String())
		}
		for _, secret := range []string{token, password} {
			if strings.Contains(out.String(), secret) {
				t.Errorf("ag %s prints %q:\n%s", strings.Join(args, " "), secret, out.String())
			}
		}
	}
}

// TestTheTokenStillComesFromTheEnvironment ensures hiding the default did not lose it.
func TestTheTokenStillComesFromTheEnvironment(t *testing.T) {
	t.Setenv("AG_TOKEN", "agt_from-env")
	g := &globals{}
	if _, err := g.client(); err != nil || g.token != "agt_from-env" {
		t.Fatalf("client() = %v with token %q, want the token of AG_TOKEN", err, g.token)
	}
	g = &globals{token: "agt_from-flag"}
	if _, err := g.client(); err != nil || g.token != "agt_from-flag" {
		t.Fatalf("client() = %v with token %q, want the flag's token over AG_TOKEN", err, g.token)
	}
}
