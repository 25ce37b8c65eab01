package taskcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/termsafe"
)

// taskStates are the states --state takes and the command line prints.
var taskStates = map[string]agwpv1.TaskState{
	"open":      agwpv1.TaskState_TASK_STATE_OPEN,
	"claimed":   agwpv1.TaskState_TASK_STATE_CLAIMED,
	"done":      agwpv1.TaskState_TASK_STATE_DONE,
	"cancelled": agwpv1.TaskState_TASK_STATE_CANCELLED,
}

// claimJSON is what ag task claim --json prints: the task as claimed, and its claim's number,
// and the claim as integrate --task and git push -o ag.task take it.
type claimJSON struct {
	Task        jsonRaw `json:"task"`
	ClaimNumber uint64  `json:"claim_number"`
	Claim       string  `json:"claim"`
}

// stateName answers a task's state as the command line writes it: open, claimed, done, cancelled.
func stateName(s agwpv1.TaskState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "TASK_STATE_"))
}

func (c *cmds) taskCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "task", Short: "a repository's tasks: create, import, list, claim (fenced by a claim number), renew, release"}
	cmd.AddCommand(c.taskCreateCmd(), c.taskImportCmd(), c.taskReadyCmd(), c.taskListCmd(), c.taskShowCmd(),
		c.taskClaimCmd(), c.taskRenewCmd(), c.taskReleaseCmd(), c.taskCancelCmd())
	return cmd
}

func (c *cmds) taskCreateCmd() *cobra.Command {
	var req agwpv1.CreateTaskRequest
	cmd := &cobra.Command{
		Use:   "create REPO --title TITLE",
		Short: "add an open task to a repository; prints its id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(req.Title) == "" {
				return usage("--title: say what is to be done in one line")
			}
			cl, err := c.env.Client()
			if err != nil {
				return err
			}
			req.Repository = args[0]
			res, err := cl.Tasks.CreateTask(cmd.Context(), &req)
			if err != nil {
				return err
			}
			if c.env.JSON() {
				return c.printTask(res.GetTask())
			}
			_, err = fmt.Fprintln(c.env.Stdout(), res.GetTask().GetId())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Title, "title", "", "what is to be done, one line (required)")
	f.StringVar(&req.Body, "body", "", "the details")
	f.StringArrayVar(&req.Labels, "label", nil, "a label (repeatable)")
	f.StringArrayVar(&req.Paths, "path", nil, "a lease path the work is expected to touch, a file or a directory as dir/ (repeatable; a hint, not a lease)")
	f.StringArrayVar(&req.DependsOn, "depends-on", nil, "a task that must be done first (repeatable)")
	f.Int32Var(&req.Priority, "priority", 0, "higher is taken first among the ready tasks")
	return cmd
}

func (c *cmds) taskImportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "import REPO FILE",
		Short: "create the tasks of a JSON or Markdown file, in order; prints their ids",
		Long: `Creates the tasks of FILE in the file's order, so that a task's dependencies exist before it.
FILE is a JSON array of {"key", "title", "body", "labels", "paths", "depends_on", "priority"}
(depends_on: keys of earlier entries, or tsk_ ids), or a Markdown list: each top-level item
("- [ ] Title", "- Title", "1. Title") is a task, the lines indented under it its body, except
"depends on: 1, 3" (item numbers in the file, or tsk_ ids), "labels: a, b", "paths: x/, y.go"
and "priority: 2". The whole file is checked before anything is created. "-" reads stdin.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if args[1] == "-" {
				data, err = io.ReadAll(cmd.InOrStdin())
			} else {
				data, err = os.ReadFile(args[1])
			}
			if err != nil {
				return err
			}
			tasks, err := ParseImport(args[1], data)
			if err != nil {
				return usage("%v", err)
			}
			cl, err := c.env.Client()
			if err != nil {
				return err
			}
			created, err := createAll(cmd.Context(), cl, args[0], tasks, func(t *agwpv1.Task) {
				if !c.env.JSON() {
					fmt.Fprintln(c.env.Stdout(), t.GetId())
				}
			})
			if c.env.JSON() && (err == nil || len(created) > 0) {
				if perr := c.printValue(taskList{Tasks: rawTasks(created)}); err == nil {
					err = perr
				}
			}
			return err
		},
	}
}

// taskList is the JSON of the commands that print tasks: every one, without paging.
type taskList struct {
	Tasks []jsonRaw `json:"tasks"`
}

// createAll creates tasks in order on repository, each dependency on an earlier entry given
// the id it was created with, calling done after each. It stops at the first refusal, saying
// which entry and what was created before it.
func createAll(ctx context.Context, cl *client.Client, repository string, tasks []ImportTask, done func(*agwpv1.Task)) ([]*agwpv1.Task, error) {
	var created []*agwpv1.Task
	for _, t := range tasks {
		req := &agwpv1.CreateTaskRequest{Repository: repository, Title: t.Title, Body: t.Body, Labels: t.Labels, Paths: t.Paths, Priority: t.Priority}
		for _, d := range t.DependsOn {
			if d.Index >= 0 {
				req.DependsOn = append(req.DependsOn, created[d.Index].GetId())
			} else {
				req.DependsOn = append(req.DependsOn, d.ID)
			}
		}
		res, err := cl.Tasks.CreateTask(ctx, req)
		if err != nil {
			if len(created) > 0 {
				err = fmt.Errorf("%s: %w (the %d tasks before it were created; remove them from the file before importing it again)", t.Where, err, len(created))
			} else {
				err = fmt.Errorf("%s: %w", t.Where, err)
			}
			return created, err
		}
		created = append(created, res.GetTask())
		done(res.GetTask())
	}
	return created, nil
}

// listTasks answers every task ListTasks answers for req, page after page.
func listTasks(ctx context.Context, cl *client.Client, req *agwpv1.ListTasksRequest) ([]*agwpv1.Task, error) {
	var out []*agwpv1.Task
	req.PageSize = 1000
	for {
		res, err := cl.Tasks.ListTasks(ctx, req)
		if err != nil {
			return nil, err
		}
		out = append(out, res.GetTasks()...)
		if res.GetNextPageToken() == "" || len(res.GetTasks()) == 0 {
			return out, nil
		}
		req.PageToken = res.GetNextPageToken()
	}
}

func (c *cmds) taskReadyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ready [REPO]",
		Short: "the tasks ready to be claimed (open, every dependency done), highest priority and then oldest first",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.printTasks(cmd.Context(), args, &agwpv1.ListTasksRequest{Ready: true})
		},
	}
}

func (c *cmds) taskListCmd() *cobra.Command {
	var state string
	cmd := &cobra.Command{
		Use:   "list [REPO]",
		Short: "a repository's tasks, newest first",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &agwpv1.ListTasksRequest{}
			if state != "" {
				s, ok := taskStates[state]
				if !ok {
					return usage("--state %s: want open, claimed, done or cancelled", termsafe.Line(state))
				}
				req.State = s
			}
			return c.printTasks(cmd.Context(), args, req)
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only tasks in this state: open, claimed, done or cancelled")
	return cmd
}

// printTasks lists the tasks req asks for, of REPO or the checkout's repository.
func (c *cmds) printTasks(ctx context.Context, args []string, req *agwpv1.ListTasksRequest) error {
	t, err := c.target(ctx, firstArg(args))
	if err != nil {
		return err
	}
	req.Repository = t.repository
	tasks, err := listTasks(ctx, t.client, req)
	if err != nil {
		return err
	}
	if c.env.JSON() {
		return c.printValue(taskList{Tasks: rawTasks(tasks)})
	}
	if len(tasks) == 0 {
		_, err := fmt.Fprintln(c.env.Stdout(), "no tasks")
		return err
	}
	tw := tabwriter.NewWriter(c.env.Stdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATE\tPRIORITY\tCLAIMANT\tTITLE")
	for _, t := range tasks {
		state := stateName(t.GetState())
		if t.GetReady() {
			state += " (ready)"
		}
		claimant := "-"
		if t.GetState() == agwpv1.TaskState_TASK_STATE_CLAIMED {
			claimant = fmt.Sprintf("%s#%d", t.GetClaimant(), t.GetClaimNumber())
		}
		termsafe.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", t.GetId(), state, t.GetPriority(), claimant, termsafe.FirstLine(t.GetTitle(), 80))
	}
	return tw.Flush()
}

func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

func (c *cmds) taskShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show TASK_ID",
		Short: "a task: its body, dependencies, claim, the change that finished it, and its thread of messages",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.clientHere(cmd.Context())
			if err != nil {
				return err
			}
			res, err := cl.Tasks.GetTask(cmd.Context(), &agwpv1.GetTaskRequest{TaskId: args[0]})
			if err != nil {
				return err
			}
			task := res.GetTask()
			msgs, _, err := listMessages(cmd.Context(), cl, &agwpv1.ListMessagesRequest{Repository: task.GetRepository(), TaskId: task.GetId()})
			if err != nil {
				return err
			}
			if c.env.JSON() {
				return c.printValue(struct {
					Task     jsonRaw   `json:"task"`
					Messages []jsonRaw `json:"messages"`
				}{rawTask(task), rawList(msgs)})
			}
			return c.writeTask(cmd.Context(), cl, task, msgs)
		},
	}
}

// clientHere answers the checkout's client at -C, else one of --server: a command that names
// what it acts on by id asks the server the checkout works with.
func (c *cmds) clientHere(ctx context.Context) (*client.Client, error) {
	ws, err := c.env.Workspace(ctx)
	if noWorkspace(err) {
		return c.env.Client()
	} else if err != nil {
		return nil, err
	}
	return ws.Client, nil
}

// writeTask prints a task for people: what the server and agents wrote escaped, the body and
// messages as indented blocks.
func (c *cmds) writeTask(ctx context.Context, cl *client.Client, t *agwpv1.Task, msgs []*agwpv1.Message) error {
	w := c.env.Stdout()
	state := stateName(t.GetState())
	if t.GetReady() {
		state += ", ready"
	}
	termsafe.Fprintf(w, "task %s (%s) in %s, priority %d\n", t.GetId(), state, t.GetRepository(), t.GetPriority())
	termsafe.Fprintf(w, "title: %s\n", t.GetTitle())
	if len(t.GetLabels()) > 0 {
		termsafe.Fprintf(w, "labels: %s\n", strings.Join(t.GetLabels(), ", "))
	}
	if len(t.GetPaths()) > 0 {
		termsafe.Fprintf(w, "paths: %s\n", strings.Join(t.GetPaths(), " "))
	}
	if len(t.GetDependsOn()) > 0 {
		var deps []string
		for _, d := range t.GetDependsOn() {
			dep, err := cl.Tasks.GetTask(ctx, &agwpv1.GetTaskRequest{TaskId: d})
			if err != nil {
				deps = append(deps, d)
				continue
			}
			deps = append(deps, d+" ("+stateName(dep.GetTask().GetState())+")")
		}
		termsafe.Fprintf(w, "depends on: %s\n", strings.Join(deps, ", "))
	}
	termsafe.Fprintf(w, "created by %s at %s\n", t.GetCreatedBy(), formatTime(t.GetCreatedAt()))
	if t.GetClaimNumber() > 0 {
		termsafe.Fprintf(w, "claim %s#%d by %s at %s", t.GetId(), t.GetClaimNumber(), t.GetClaimant(), formatTime(t.GetClaimedAt()))
		if t.GetState() == agwpv1.TaskState_TASK_STATE_CLAIMED || t.GetState() == agwpv1.TaskState_TASK_STATE_OPEN {
			termsafe.Fprintf(w, ", expires %s (%s)", formatTime(t.GetClaimExpiresAt()), humanUntil(t.GetClaimExpiresAt()))
		}
		fmt.Fprintln(w)
	}
	switch {
	case t.GetChangeId() != "":
		termsafe.Fprintf(w, "done by change %s at %s\n", t.GetChangeId(), formatTime(t.GetDoneAt()))
	case t.GetState() == agwpv1.TaskState_TASK_STATE_DONE:
		termsafe.Fprintf(w, "done at %s\n", formatTime(t.GetDoneAt()))
	}
	if t.GetBody() != "" {
		fmt.Fprintln(w, "body:")
		writeBlock(w, t.GetBody())
	}
	if len(msgs) == 0 {
		_, err := fmt.Fprintln(w, "no messages")
		return err
	}
	fmt.Fprintln(w, "messages:")
	for _, m := range msgs {
		writeMessage(w, m)
	}
	return nil
}

// writeBlock prints text others wrote as a block of lines, each indented, escaped (newlines
// and tabs kept): no line of it can pass for one of ag's.
func writeBlock(w io.Writer, text string) {
	for _, line := range strings.Split(strings.TrimRight(termsafe.Text(text), "\r\n"), "\n") {
		fmt.Fprintf(w, "    %s\n", strings.TrimSuffix(line, "\r"))
	}
}

func (c *cmds) taskClaimCmd() *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "claim [TASK_ID]",
		Short: "claim a task for the checkout's holder (without an id: the first ready task); the checkout records its claim number",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := c.env.Workspace(cmd.Context())
			if err != nil {
				return err
			}
			req := &agwpv1.ClaimTaskRequest{Repository: ws.Checkout.Repository, TaskId: firstArg(args), Holder: ws.Checkout.Holder}
			if req.TaskId != "" && !strings.HasPrefix(req.TaskId, "tsk_") {
				return usage("%q is not a task id (they start with tsk_; `ag task ready` lists the ready ones)", termsafe.Line(req.TaskId))
			}
			if ttl != 0 {
				req.Ttl = durationpb.New(ttl)
			}
			res, err := ws.Client.Tasks.ClaimTask(cmd.Context(), req)
			if client.IsCode(err, connect.CodeAborted) {
				// Another's live claim: refused as a path leased to another is.
				return &checkout.LeaseError{Err: err}
			} else if err != nil {
				return err
			}
			t := res.GetTask()
			claim := checkout.TaskClaim{TaskID: t.GetId(), Number: t.GetClaimNumber(), ExpiresAt: t.GetClaimExpiresAt().AsTime()}
			if err := ws.Checkout.UpdateTasks(func(s *checkout.TaskState) { s.SetClaim(claim) }); err != nil {
				return fmt.Errorf("claimed %s, but the checkout could not record it: %w (name the claim as %s)", claim, err, claim)
			}
			if c.env.JSON() {
				return c.printValue(claimJSON{Task: rawTask(t), ClaimNumber: t.GetClaimNumber(), Claim: claim.String()})
			}
			w := c.env.Stdout()
			termsafe.Fprintf(w, "claimed %s as %s: claim %s until %s\n", t.GetId(), t.GetClaimant(), claim.String(), formatTime(t.GetClaimExpiresAt()))
			termsafe.Fprintf(w, "title: %s\n", t.GetTitle())
			if t.GetBody() != "" {
				fmt.Fprintln(w, "body:")
				writeBlock(w, t.GetBody())
			}
			if len(t.GetPaths()) > 0 {
				termsafe.Fprintf(w, "paths: %s\n", strings.Join(t.GetPaths(), " "))
			}
			if !ws.Checkout.KeepsTasks() {
				return nil // a git working tree: ag keeps no claim, and integrates nothing, there
			}
			return termsafe.Fprintf(w, "finish it with: ag integrate -m MESSAGE --task %s\n", t.GetId())
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "claim time (default 30m, at most 24h); renew with ag task renew")
	return cmd
}

// claimed answers the claim a renew or release names: TASK_ID, TASK_ID#CLAIM, or the one the
// checkout records.
func (c *cmds) claimed(ctx context.Context, args []string) (*checkout.Workspace, checkout.TaskClaim, error) {
	ws, err := c.env.Workspace(ctx)
	if err != nil {
		return nil, checkout.TaskClaim{}, err
	}
	claim, err := ws.Checkout.TaskClaimOf(firstArg(args))
	return ws, claim, err
}

// stale words a refusal of a claim that is no longer current and forgets the claim: it can
// never be current again.
func stale(ws *checkout.Workspace, claim checkout.TaskClaim, err error) error {
	if !client.IsCode(err, connect.CodeFailedPrecondition) {
		return err
	}
	if ferr := ws.Checkout.UpdateTasks(func(s *checkout.TaskState) {
		if cl, ok := s.Claim(claim.TaskID); ok && cl.Number == claim.Number {
			s.Forget(claim.TaskID)
		}
	}); ferr != nil {
		return errors.Join(err, ferr)
	}
	return fmt.Errorf("task claim %s: %w (the checkout forgot it)", claim, err)
}

func (c *cmds) taskRenewCmd() *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "renew [TASK_ID]",
		Short: "extend the checkout's claim of a task (the one it records, or the one named, ID or ID#CLAIM)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, claim, err := c.claimed(cmd.Context(), args)
			if err != nil {
				return err
			}
			req := &agwpv1.RenewTaskClaimRequest{TaskId: claim.TaskID, ClaimNumber: claim.Number}
			if ttl != 0 {
				req.Ttl = durationpb.New(ttl)
			}
			res, err := ws.Client.Tasks.RenewTaskClaim(cmd.Context(), req)
			if err != nil {
				return stale(ws, claim, err)
			}
			t := res.GetTask()
			claim.ExpiresAt = t.GetClaimExpiresAt().AsTime()
			if err := ws.Checkout.UpdateTasks(func(s *checkout.TaskState) { s.SetClaim(claim) }); err != nil {
				return err
			}
			if c.env.JSON() {
				return c.printTask(t)
			}
			return termsafe.Fprintf(c.env.Stdout(), "renewed %s until %s\n", claim.String(), formatTime(t.GetClaimExpiresAt()))
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "new claim time from now (default 30m, at most 24h)")
	return cmd
}

func (c *cmds) taskReleaseCmd() *cobra.Command {
	var done bool
	cmd := &cobra.Command{
		Use:   "release [TASK_ID]",
		Short: "give the checkout's claim of a task back (open for anyone), or with --done mark the task done without a change",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, claim, err := c.claimed(cmd.Context(), args)
			if err != nil {
				return err
			}
			res, err := ws.Client.Tasks.ReleaseTaskClaim(cmd.Context(), &agwpv1.ReleaseTaskClaimRequest{TaskId: claim.TaskID, ClaimNumber: claim.Number, Done: done})
			if err != nil {
				return stale(ws, claim, err)
			}
			if err := ws.Checkout.UpdateTasks(func(s *checkout.TaskState) { s.Forget(claim.TaskID) }); err != nil {
				return err
			}
			if c.env.JSON() {
				return c.printTask(res.GetTask())
			}
			what := "released"
			if done {
				what = "done"
			}
			return termsafe.Fprintf(c.env.Stdout(), "%s %s: task %s is %s\n", what, claim.String(), claim.TaskID, stateName(res.GetTask().GetState()))
		},
	}
	cmd.Flags().BoolVar(&done, "done", false, "mark the task done (no change finished it) instead of giving it back")
	return cmd
}

func (c *cmds) taskCancelCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel TASK_ID",
		Short: "end a task that is not done (its creator or an admin); a claim of it is no longer current",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.clientHere(cmd.Context())
			if err != nil {
				return err
			}
			res, err := cl.Tasks.CancelTask(cmd.Context(), &agwpv1.CancelTaskRequest{TaskId: args[0], Reason: reason})
			if err != nil {
				return err
			}
			if c.env.JSON() {
				return c.printTask(res.GetTask())
			}
			return termsafe.Fprintf(c.env.Stdout(), "cancelled %s\n", res.GetTask().GetId())
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, one line")
	return cmd
}
