package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"strings"
	"testing"
)

// TestHelpHidesTheToken ensures -help names where the token comes from without printing it:
// whoever sees a worker's help output must not get its token.
func TestHelpHidesTheToken(t *testing.T) {
	const token = "secret-token-of-the-worker"
	t.Setenv("AG_TOKEN", token)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	err = run(context.Background(), []string{"-help"})
	os.Stderr = stderr
	w.Close()
	help, _ := io.ReadAll(r)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run -help = %v, want flag.ErrHelp", err)
	}
	if strings.Contains(string(help), token) {
		t.Errorf("-help printed the token:\n%s", help)
	}
	if !strings.Contains(string(help), "(default $AG_TOKEN)") {
		t.Errorf("-help does not say the token comes from $AG_TOKEN:\n%s", help)
	}
}
