// Command ag-chaos is the fault harness: three ag serve replicas on a private PostgreSQL,
// ag-worker processes and recorded clients under killed and paused processes, expired leases
// and a database restart, with the invariants checked over the whole history
// (docs/chaos.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ag-coord/ag/internal/chaos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := chaos.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
