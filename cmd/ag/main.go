// Command ag is the ag server (`ag serve`) and its command-line client.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ag-coord/ag/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, cli.Args(os.Args), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
