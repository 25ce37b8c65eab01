// Package taskcli is the command line of a repository's work: `ag task` (tasks with fenced
// claims, created one by one or imported from a JSON or Markdown file), `ag message send` and
// `ag inbox`. It is apart from internal/cli, which adds these commands to its own and gives them
// what they need through Env; like the rest of the command line's client side, it reaches the
// server through the SDK only, and keeps a checkout's claims and inbox cursors through
// internal/checkout.
package taskcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/gitwork"
)

// Env is what the commands need of the command line they are part of.
type Env interface {
	// Client answers a client of the server (--server, AG_SERVER), refusing without a token.
	Client() (*client.Client, error)
	// Workspace answers the checkout at -C (or the git working tree set up for ag there) with a
	// client of its server; outside either, a *checkout.NotFoundError.
	Workspace(ctx context.Context) (*checkout.Workspace, error)
	// JSON reports whether --json was given.
	JSON() bool
	Stdout() io.Writer
	Stderr() io.Writer
	// PrintJSON prints a message of the API in protobuf's canonical JSON, as every command does.
	PrintJSON(m proto.Message) error
}

// Commands answers `ag task`, `ag message` and `ag inbox`.
func Commands(env Env) []*cobra.Command {
	c := &cmds{env: env}
	return []*cobra.Command{c.taskCmd(), c.messageCmd(), c.inboxCmd()}
}

// cmds are the commands over one Env.
type cmds struct{ env Env }

// usage marks err as the command line's mistake: exit 2.
func usage(format string, args ...any) error {
	return &checkout.UsageError{Err: fmt.Errorf(format, args...)}
}

// target is where a command that names a repository (or takes the checkout's) acts.
type target struct {
	client     *client.Client
	repository string
	ws         *checkout.Workspace // nil outside a checkout
}

// holder answers the checkout's holder label, "" outside one.
func (t target) holder() string {
	if t.ws == nil {
		return ""
	}
	return t.ws.Checkout.Holder
}

// target answers the repository repo (the checkout's when "") with a client: the checkout's at
// -C when there is one (its server, its holder), else one of --server. Outside a checkout a
// repository must be named.
func (c *cmds) target(ctx context.Context, repo string) (target, error) {
	ws, err := c.env.Workspace(ctx)
	switch {
	case noWorkspace(err) && repo != "":
		cl, err := c.env.Client()
		return target{client: cl, repository: repo}, err
	case noWorkspace(err):
		return target{}, usage("name the repository, or run this in a checkout (%v)", err)
	case err != nil:
		return target{}, err
	}
	if repo == "" {
		repo = ws.Checkout.Repository
	}
	return target{client: ws.Client, repository: repo, ws: ws}, nil
}

// noWorkspace reports whether err is Env.Workspace's answer for a directory that is neither a
// checkout nor a git working tree set up for ag: a command that names what it acts on then
// acts without one.
func noWorkspace(err error) bool {
	var none *checkout.NotFoundError
	var notSetUp *gitwork.NotSetUpError
	return errors.As(err, &none) || errors.As(err, &notSetUp)
}

// printValue prints v as indented JSON: the shapes of docs/cli.md that are no one message.
func (c *cmds) printValue(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.env.Stdout(), string(b))
	return err
}

// jsonRaw is a message of the API in canonical JSON, within a shape of the command line's.
type jsonRaw = json.RawMessage

// raw answers m in protobuf's canonical JSON, to embed in a printValue shape.
func raw(m proto.Message) json.RawMessage {
	b, err := protojson.Marshal(m)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// taskStateJSON finds a task's state in its canonical JSON (which may space it either way).
var taskStateJSON = regexp.MustCompile(`"state":\s*"TASK_STATE_([A-Z]+)"`)

// rawTask answers t as raw, its state written as the command line writes it (open, claimed,
// done, cancelled) rather than as the enum's name.
func rawTask(t *agwpv1.Task) json.RawMessage {
	return taskStateJSON.ReplaceAllFunc(raw(t), func(m []byte) []byte {
		return []byte(`"state":"` + strings.ToLower(string(taskStateJSON.FindSubmatch(m)[1])) + `"`)
	})
}

// rawTasks answers ts as rawTask, an empty list as [].
func rawTasks(ts []*agwpv1.Task) []jsonRaw {
	out := make([]jsonRaw, 0, len(ts))
	for _, t := range ts {
		out = append(out, rawTask(t))
	}
	return out
}

// printTask prints a task as --json does: rawTask, indented.
func (c *cmds) printTask(t *agwpv1.Task) error { return c.printValue(rawTask(t)) }

// rawList answers ms as raw, an empty list as [] (lists are always present).
func rawList[M proto.Message](ms []M) []jsonRaw {
	out := make([]jsonRaw, 0, len(ms))
	for _, m := range ms {
		out = append(out, raw(m))
	}
	return out
}

// formatTime writes a time of the server's as the command line does, in local time.
func formatTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().Local().Format("2006-01-02 15:04:05")
}

// clockTime writes a time briefly: its time of day when it is today, else with the date.
func clockTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return "?"
	}
	lt, now := t.AsTime().Local(), time.Now()
	if y, m, d := lt.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return lt.Format("15:04:05")
	}
	return lt.Format("2006-01-02 15:04:05")
}

// humanUntil says how long until t, or that it passed.
func humanUntil(t *timestamppb.Timestamp) string {
	d := time.Until(t.AsTime())
	if d <= 0 {
		return "expired " + checkout.HumanDuration(-d) + " ago"
	}
	return "in " + checkout.HumanDuration(d)
}
