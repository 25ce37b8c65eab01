//go:build unix

// Package e2e runs ag as its users do: `ag serve`, `ag-worker` and the `ag` command line as real
// processes, built once per run, over SQLite and PostgreSQL. The processes are killed, paused
// and stopped with signals to check what the spec promises of claims and fencing (ADR-0012).
package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// Paths of the binaries under test, set by TestMain.
var (
	agBin     string
	workerBin string
)

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := buildBinaries()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: cannot build the binaries under test: %v\n", err)
		os.Exit(2)
	}
	agBin = filepath.Join(dir, "ag")
	workerBin = filepath.Join(dir, "ag-worker")
	code := pgtest.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildBinaries builds ag and ag-worker (without -race, which would only slow them down) into a
// new temporary directory and answers it.
func buildBinaries() (string, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is not on PATH: %w", err)
	}
	dir, err := os.MkdirTemp("", "ag-e2e-bin-")
	if err != nil {
		return "", err
	}
	start := time.Now()
	cmd := exec.Command(gobin, "build", "-o", dir+string(filepath.Separator),
		"github.com/ag-coord/ag/cmd/ag", "github.com/ag-coord/ag/cmd/ag-worker")
	out, err := cmd.CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("go build ./cmd/ag ./cmd/ag-worker: %v\n%s", err, out)
	}
	for _, name := range []string{"ag", "ag-worker"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("go build did not produce %s: %v", name, err)
		}
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "e2e: built ag and ag-worker in %s (%v)\n", dir, time.Since(start).Round(time.Millisecond))
	}
	return dir, nil
}
