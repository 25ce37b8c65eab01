// Package cli is the ag command: `ag serve` and the client commands people and agents type.
// Each command is a function over a client; printers (tables, --json) are separate from logic.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ag-coord/ag/client"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/gitwork"
	"github.com/ag-coord/ag/internal/suggest"
	"github.com/ag-coord/ag/internal/taskcli"
	"github.com/ag-coord/ag/internal/termsafe"
)

// Run runs the ag command line with args (without the program name). Its error carries the
// exit code the process should end with: see ExitCode.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return usageOf(root.ExecuteContext(ctx))
}

// Main runs the ag command line as a process does: it prints an error to stderr (as one JSON
// object with --json) and answers the exit code, documented in docs/cli.md.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := Run(ctx, args, stdout, stderr)
	if err == nil {
		return ExitOK
	}
	code := ExitCode(err)
	if jsonRequested(args) {
		b, _ := json.Marshal(errorJSON{Error: Explain(err), Kind: exitKinds[code], ExitCode: code})
		fmt.Fprintln(stderr, string(b))
		return code
	}
	// Errors quote what the server and agents said: a refusal names paths and holders.
	fmt.Fprintln(stderr, "ag:", termsafe.Text(Explain(err)))
	return code
}

// errorJSON is what a failing command prints to stderr with --json.
type errorJSON struct {
	Error    string `json:"error"`
	Kind     string `json:"kind"`
	ExitCode int    `json:"exitCode"`
}

// jsonRequested reports whether args ask for --json, as far as they can be read: a command
// line too broken to parse still had its answer asked for in JSON.
func jsonRequested(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "--json=true":
			return true
		}
	}
	return false
}

// globals are the flags every client command takes.
type globals struct {
	server    string
	serverSet bool
	dir       string
	token     string
	json      bool
	tree      *gitwork.Tree // the git working tree workspace found, when it found no checkout
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
		newRepoCmd(g), newChangeCmd(g), newCheckoutCmd(g), newLeaseCmd(g), newIntegrateCmd(g), newSyncCmd(g), newStatusCmd(g), newDiffCmd(g), newRevertCmd(g), newAttestationCmd(g), newAuditCmd(g), newBenchCmd(g))
	root.AddCommand(newMCPCmd(g), newGitCredentialCmd(g), newWatchCmd(g), newHookCmd(g))
	root.AddCommand(newSetupCmds(g)...)
	root.AddCommand(taskcli.Commands(taskEnv{g})...)
	strictCommands(root)
	return root
}

// taskEnv is what internal/taskcli's commands need of the command line.
type taskEnv struct{ g *globals }

func (e taskEnv) Client() (*client.Client, error) { return e.g.client() }
func (e taskEnv) Workspace(ctx context.Context) (*checkout.Workspace, error) {
	return e.g.workspace(ctx)
}
func (e taskEnv) JSON() bool                      { return e.g.json }
func (e taskEnv) Stdout() io.Writer               { return e.g.stdout }
func (e taskEnv) Stderr() io.Writer               { return e.g.stderr }
func (e taskEnv) PrintJSON(m proto.Message) error { return e.g.printJSON(m) }

// client answers a client for the command, refusing early when there is no token.
func (g *globals) client() (*client.Client, error) {
	if g.token == "" {
		g.token = os.Getenv("AG_TOKEN")
	}
	if g.token == "" {
		return nil, withExit(ExitAuth, errors.New("no token: pass --token or set AG_TOKEN (ag serve prints the admin token on its first start)"))
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

// followOut is where following a change shows its progress: stderr, or nowhere under --json.
func (g *globals) followOut() io.Writer {
	if g.json {
		return nil
	}
	return g.stderr
}

// printValue prints v as indented JSON: the shapes of docs/cli.md that are no one message.
func (g *globals) printValue(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(g.stdout, string(b))
	return err
}

// protoRaw answers a message in protobuf's canonical JSON, to embed in a printValue shape.
func protoRaw(m proto.Message) json.RawMessage {
	b, err := protojson.Marshal(m)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// Explain turns an error into the line a person should read: a server error in words, with
// what the command said around it.
func Explain(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg := ce.Message()
		var explained string
		switch ce.Code() {
		case connect.CodeUnavailable:
			explained = "cannot reach the server: " + msg + " (is `ag serve` running? check --server / AG_SERVER)"
		case connect.CodeUnauthenticated:
			explained = "not authenticated: " + msg + " (check --token / AG_TOKEN)"
		default:
			explained = strings.ReplaceAll(ce.Code().String(), "_", " ") + ": " + msg
		}
		return strings.Replace(err.Error(), ce.Error(), explained, 1)
	}
	return err.Error()
}

// Exit codes of the ag command line (docs/cli.md). A script tells from the code alone whether to
// fix its command line, wait for a lease, merge, or try the server again later.
const (
	ExitOK          = 0 // done
	ExitError       = 1 // anything else
	ExitUsage       = 2 // the command line: an unknown command or flag, a missing or bad argument
	ExitLease       = 3 // refused by a lease or fencing token: held by another, lost, or not held
	ExitConflict    = 4 // a conflict with the mainline: sync or integrate, merge conflicts
	ExitRejected    = 5 // a change rejected by validation or cancelled
	ExitUnavailable = 6 // the server cannot be reached or did not answer in time
	ExitAuth        = 7 // no token, an unknown one, or a role that may not do this
)

// exitKinds names each exit code in the JSON error object.
var exitKinds = map[int]string{
	ExitError: "error", ExitUsage: "usage", ExitLease: "lease", ExitConflict: "conflict",
	ExitUnavailable: "unavailable", ExitAuth: "auth", ExitRejected: "rejected",
}

// exitError is an error that ends the process with its code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withExit gives err the exit code code; nil stays nil.
func withExit(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// codedExit answers the exit code err was given: by withExit, or by the checkout engine's kind
// of refusal. The outermost wins, so that a command can give an engine error another code.
func codedExit(err error) (int, bool) {
	switch e := err.(type) {
	case nil:
		return 0, false
	case *exitError:
		return e.code, true
	case *checkout.UsageError:
		return ExitUsage, true
	case *checkout.LeaseError:
		return ExitLease, true
	case *checkout.ConflictError:
		return ExitConflict, true
	case interface{ Unwrap() []error }:
		// Depth first, as errors.As looks.
		for _, inner := range e.Unwrap() {
			if code, ok := codedExit(inner); ok {
				return code, true
			}
		}
		return 0, false
	}
	return codedExit(errors.Unwrap(err))
}

// ExitCode answers the exit code for an error Run answered: the one it was given, or the one
// its server error's code maps to.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	if code, ok := codedExit(err); ok {
		return code
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
			return ExitUnavailable
		case connect.CodeUnauthenticated, connect.CodePermissionDenied:
			return ExitAuth
		case connect.CodeInvalidArgument:
			return ExitUsage
		case connect.CodeFailedPrecondition:
			return ExitLease
		case connect.CodeAborted:
			return ExitConflict
		}
	}
	return ExitError
}

// usageOf gives the errors cobra answers for a bad command line the usage exit code.
func usageOf(err error) error {
	if _, ok := codedExit(err); err == nil || ok {
		return err
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	if strings.HasPrefix(err.Error(), "required flag(s) ") || strings.HasPrefix(err.Error(), "if any flags in the group") {
		return withExit(ExitUsage, err)
	}
	return err
}

// strictCommands makes every command of the tree refuse what it does not know, with the usage
// exit code and a "Did you mean" when something is close: a command that only groups others
// refuses an unknown subcommand (cobra would print its help and exit 0), a flag error names the
// close flags, and a wrong number of arguments is a usage error.
func strictCommands(root *cobra.Command) {
	root.SetFlagErrorFunc(flagError)
	// cobra adds these when it runs; added now, they are walked too.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.SuggestionsMinimumDistance = 2
		switch {
		case c.HasSubCommands() && c.Run == nil && c.RunE == nil:
			c.Args = unknownSubcommand
			c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		case c.Args != nil:
			check := c.Args
			c.Args = func(cmd *cobra.Command, args []string) error {
				return withExit(ExitUsage, check(cmd, args))
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// unknownSubcommand refuses any argument of a command that only groups others.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return withExit(ExitUsage, fmt.Errorf("unknown command %q for %q%s (%s --help lists them)",
		args[0], cmd.CommandPath(), suggest.DidYouMean(cmd.SuggestionsFor(args[0])), cmd.CommandPath()))
}

// flagError is every command's answer to a flag it cannot parse. On a command that groups
// others, a first argument that is no subcommand is the error to report: `ag lease aquire --ttl 5m`
// is an unknown command, not an unknown --ttl.
func flagError(cmd *cobra.Command, err error) error {
	if cmd.HasSubCommands() {
		if args := cmd.Flags().Args(); len(args) > 0 {
			return unknownSubcommand(cmd, args)
		}
	}
	msg := err.Error()
	name, ok := strings.CutPrefix(msg, "unknown flag: --")
	if ok {
		var close []string
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && (suggest.Distance(name, f.Name) <= 2 || strings.HasPrefix(f.Name, name)) {
				close = append(close, "--"+f.Name)
			}
		})
		msg += suggest.DidYouMean(close)
	}
	return withExit(ExitUsage, fmt.Errorf("%s (%s --help lists the flags)", msg, cmd.CommandPath()))
}
