package taskcli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/termsafe"
)

// maxWait is the longest an inbox waits for a message, as the server bounds it.
const maxWait = 60 * time.Second

func (c *cmds) messageCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "message", Short: "send messages to other holders, on a task's or a change's thread, or to everyone"}
	var req agwpv1.SendMessageRequest
	send := &cobra.Command{
		Use:   "send [REPO] (--to HOLDER | --task ID | --change ID | --all) TEXT",
		Short: "send a message (REPO: the checkout's when left out; sent as the checkout's holder in one)",
		Long: `Sends TEXT to one address: a holder (--to alice|a1), the thread of a task (--task, reaching its
claimant) or of a change (--change, reaching its author), or everyone on the repository (--all).
In a checkout the message is the checkout's holder's, and REPO may be left out; elsewhere it is
the principal's, or --holder's. TEXT "-" reads it from stdin. Readers see it as the author's
words, never as ag's.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			addresses := 0
			for _, set := range []bool{req.ToHolder != "", req.TaskId != "", req.ChangeId != "", req.ToAll} {
				if set {
					addresses++
				}
			}
			if addresses != 1 {
				return usage("name exactly one address: --to HOLDER, --task ID, --change ID or --all")
			}
			repo, text := "", args[len(args)-1]
			if len(args) == 2 {
				repo = args[0]
			}
			if text == "-" {
				b, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return err
				}
				text = string(b)
			}
			t, err := c.target(cmd.Context(), repo)
			if err != nil {
				return err
			}
			send := &agwpv1.SendMessageRequest{Repository: t.repository, ToHolder: req.ToHolder, TaskId: req.TaskId,
				ChangeId: req.ChangeId, ToAll: req.ToAll, Text: text, Holder: req.Holder}
			if h := t.holder(); h != "" && send.Holder == "" {
				send.Holder = h
			}
			res, err := t.client.Tasks.SendMessage(cmd.Context(), send)
			if err != nil {
				return err
			}
			m := res.GetMessage()
			if c.env.JSON() {
				return c.env.PrintJSON(m)
			}
			return termsafe.Fprintf(c.env.Stdout(), "sent %s (seq %d) %s as %s\n", m.GetId(), m.GetSeq(), address(m), m.GetAuthor())
		},
	}
	f := send.Flags()
	f.StringVar(&req.ToHolder, "to", "", "the holder to send to: PRINCIPAL|LABEL")
	f.StringVar(&req.TaskId, "task", "", "the task whose thread to post on (its claimant gets it)")
	f.StringVar(&req.ChangeId, "change", "", "the change whose thread to post on (its author gets it)")
	f.BoolVar(&req.ToAll, "all", false, "everyone on the repository")
	f.StringVar(&req.Holder, "holder", "", "the holder label to send as (default: the checkout's; outside one, the principal alone)")
	cmd.AddCommand(send)
	return cmd
}

// address says where a message was posted.
func address(m *agwpv1.Message) string {
	switch {
	case m.GetTaskId() != "":
		return "on task " + m.GetTaskId()
	case m.GetChangeId() != "":
		return "on change " + m.GetChangeId()
	case m.GetToAll():
		return "to all"
	}
	return "to " + m.GetToHolder()
}

// writeMessage prints a message for people: a header of ag's naming its seq, author, address
// and time, then its text as the author wrote it, escaped and indented, so that no line of it
// passes for ag's.
func writeMessage(w io.Writer, m *agwpv1.Message) {
	termsafe.Fprintf(w, "[seq %d] from %s %s at %s:\n", m.GetSeq(), m.GetAuthor(), address(m), clockTime(m.GetCreatedAt()))
	writeBlock(w, m.GetText())
}

// listMessages answers every message req selects, oldest first, page after page; req.Wait
// applies to the first page only. It answers the next call's after_seq.
func listMessages(ctx context.Context, cl *client.Client, req *agwpv1.ListMessagesRequest) ([]*agwpv1.Message, uint64, error) {
	var out []*agwpv1.Message
	last := req.GetAfterSeq()
	req.PageSize = 1000
	for {
		// A wait is the server's to bound: the SDK's default deadline must not cut it short.
		callCtx, cancel := context.WithTimeout(ctx, req.GetWait().AsDuration()+30*time.Second)
		res, err := cl.Tasks.ListMessages(callCtx, req)
		cancel()
		if err != nil {
			return nil, 0, err
		}
		out = append(out, res.GetMessages()...)
		last = max(last, res.GetLastSeq())
		if len(res.GetMessages()) < int(req.PageSize) {
			return out, last, nil
		}
		req.AfterSeq, req.Wait = last, nil
	}
}

// inboxJSON is ag inbox --json: ListMessagesResponse, its list always present.
type inboxJSON struct {
	Messages []jsonRaw `json:"messages"`
	LastSeq  string    `json:"lastSeq"`
}

func (c *cmds) inboxCmd() *cobra.Command {
	var holder string
	var wait time.Duration
	var all bool
	var after uint64
	cmd := &cobra.Command{
		Use:   "inbox [REPO]",
		Short: "the messages to the checkout's holder (or --holder's) since the last call: sent to it, on its tasks' and changes' threads, and to all",
		Long: `Prints the messages that reached a holder: sent to it, posted on the thread of a task it claimed
or a change it made, or to everyone. In a checkout the holder is the checkout's and REPO may be
left out; the checkout remembers the last message shown, so that the next call prints only newer
ones (--all: every one again). Outside a checkout, name the repository and --holder LABEL (your
own principal's label), and --after SEQ to skip what you saw. --wait waits up to that long (at
most 60s) for a first message.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if wait < 0 || wait > maxWait {
				return usage("--wait %s: at most %s", wait, maxWait)
			}
			t, err := c.target(cmd.Context(), firstArg(args))
			if err != nil {
				return err
			}
			keep := t.ws != nil && (holder == "" || holder == t.holder())
			if holder == "" {
				holder = t.holder()
			}
			if holder == "" {
				return usage("--holder: name the holder label whose inbox to read (outside a checkout)")
			}
			req := &agwpv1.ListMessagesRequest{Repository: t.repository, Holder: holder, AfterSeq: after}
			if keep && !all && after == 0 {
				s, err := t.ws.Checkout.Tasks()
				if err != nil {
					return err
				}
				req.AfterSeq = s.InboxSeq(t.repository, holder)
			}
			if all {
				req.AfterSeq = 0
			}
			if wait > 0 {
				req.Wait = durationpb.New(wait)
			}
			msgs, last, err := listMessages(cmd.Context(), t.client, req)
			if err != nil {
				return err
			}
			if keep && len(msgs) > 0 {
				if err := t.ws.Checkout.UpdateTasks(func(s *checkout.TaskState) {
					s.SetInboxSeq(t.repository, holder, max(last, s.InboxSeq(t.repository, holder)))
				}); err != nil {
					return err
				}
			}
			if c.env.JSON() {
				return c.printValue(inboxJSON{Messages: rawList(msgs), LastSeq: strconv.FormatUint(last, 10)})
			}
			if len(msgs) == 0 {
				_, err := fmt.Fprintln(c.env.Stdout(), "no new messages")
				return err
			}
			for _, m := range msgs {
				writeMessage(c.env.Stdout(), m)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&holder, "holder", "", "the holder label whose inbox to read (default: the checkout's)")
	f.DurationVar(&wait, "wait", 0, "wait up to this long (at most 60s) for a first message")
	f.BoolVar(&all, "all", false, "every message again, not only those since the last call")
	f.Uint64Var(&after, "after", 0, "only messages with a larger seq (the lastSeq of an earlier --json)")
	return cmd
}
