package mcp_test

import (
	"context"
	"os"
	"testing"

	"github.com/ag-coord/ag/internal/cli"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// runAsAg, set to 1 in its environment, makes the test binary run as the ag command, under
// whatever name it was started: in a git working tree set up by ag clone, git runs it as ag's
// credential helper.
const runAsAg = "AG_MCP_TEST_RUN_AS_AG"

func TestMain(m *testing.M) {
	if os.Getenv(runAsAg) == "1" {
		os.Exit(cli.Main(context.Background(), cli.Args(os.Args), os.Stdout, os.Stderr))
	}
	pgtest.Main(m)
}
