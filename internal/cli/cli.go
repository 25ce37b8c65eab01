// Package cli is the ag command: `ag serve` and the client commands people and agents type.
// Each command is a function over a client; printers (tables, --json) are separate from logic.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ag-coord/ag/client"
)

// Run runs the ag command line with args (without the program name).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.ExecuteContext(ctx)
}

// globals are the flags every client command takes.
type globals struct {
	server    string
	serverSet bool
	dir       string
	token     string
	json      bool
	stdout    io.Writer
	stderr    io.Writer
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "ag",
		Short:         "ag coordinates many agents changing one code base",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.server, "server", envOr("AG_SERVER", "http://127.0.0.1:7777"), "server URL (AG_SERVER)")
	// The token's default is read when a client is made, not shown as the flag's default:
	// --help would print it to whoever reads the terminal or the log.
	pf.StringVar(&g.token, "token", "", "bearer token (default $AG_TOKEN)")
	pf.BoolVar(&g.json, "json", false, "print machine-readable JSON")
	pf.StringVarP(&g.dir, "dir", "C", ".", "the checkout to work in")
	root.PersistentPreRun = func(cmd *cobra.Command, _ []string) {
		g.serverSet = cmd.Flags().Changed("server") || os.Getenv("AG_SERVER") != ""
	}

	root.AddCommand(newServeCmd(g), newPrincipalCmd(g), newTokenCmd(g), newWhoAmICmd(g), newJobCmd(g),
		newRepoCmd(g), newChangeCmd(g), newCheckoutCmd(g), newLeaseCmd(g), newIntegrateCmd(g), newSyncCmd(g), newStatusCmd(g), newAttestationCmd(g), newAuditCmd(g), newBenchCmd(g))
	return root
}

// client answers a client for the command, refusing early when there is no token.
func (g *globals) client() (*client.Client, error) {
	if g.token == "" {
		g.token = os.Getenv("AG_TOKEN")
	}
	if g.token == "" {
		return nil, errors.New("no token: pass --token or set AG_TOKEN (ag serve prints the admin token on its first start)")
	}
	return client.New(g.server, g.token, client.WithUserAgent("ag-cli")), nil
}

// printJSON prints a message in protobuf's canonical JSON.
func (g *globals) printJSON(m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(g.stdout, string(b))
	return err
}

// allPages follows a list method's page tokens to the end and answers every item.
func allPages[T any](page func(token string) ([]T, string, error)) ([]T, error) {
	var all []T
	token := ""
	for {
		items, next, err := page(token)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next == "" {
			return all, nil
		}
		token = next
	}
}

// Explain turns an error into the line a person should read.
func Explain(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg := ce.Message()
		switch ce.Code() {
		case connect.CodeUnavailable:
			return "cannot reach the server: " + msg + " (is `ag serve` running? check --server / AG_SERVER)"
		case connect.CodeUnauthenticated:
			return "not authenticated: " + msg + " (check --token / AG_TOKEN)"
		}
		return strings.ReplaceAll(ce.Code().String(), "_", " ") + ": " + msg
	}
	return err.Error()
}
