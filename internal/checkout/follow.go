package checkout

import (
	"context"
	"fmt"
	"github.com/ag-coord/ag/internal/termsafe"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

func CandidateStateName(s agwpv1.CandidateState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "CANDIDATE_STATE_"))
}

// DescribeCandidate says in a line where a candidate is: its place and what it is built on.
func DescribeCandidate(c *agwpv1.Candidate) string {
	s := c.GetId() + " " + CandidateStateName(c.GetState())
	if l := c.GetLane(); l != "" {
		s += ", lane " + l
	}
	if n := len(c.GetChanges()); n > 1 {
		s += fmt.Sprintf(", a batch of %d", n)
	}
	if p := c.GetPosition(); p > 0 {
		s += fmt.Sprintf(", position %d in the queue", p)
	}
	s += ", on " + c.GetParentRevision()
	if w := c.GetWorkers(); len(w) > 0 {
		s += ", run by " + strings.Join(w, ", ")
	}
	return s
}

// FollowChange waits for a change to be final, printing to w (nil: nowhere) each state it passes through
// and, while it is validated, the worker's progress lines. It follows WatchChange, and opens it
// again when the stream ends early (a server restart, a load balancer's idle timeout).
func FollowChange(ctx context.Context, w io.Writer, c *client.Client, change *agwpv1.Change) (*agwpv1.Change, error) {
	var shown *agwpv1.Change
	show := func(ch *agwpv1.Change) {
		if w == nil {
			return
		}
		if ch.GetState() == agwpv1.ChangeState_CHANGE_STATE_VALIDATING && ch.GetCandidate() != nil &&
			(shown == nil || ch.GetCandidate().GetId() != shown.GetCandidate().GetId() ||
				ch.GetCandidate().GetPosition() != shown.GetCandidate().GetPosition()) {
			if before := shown.GetCandidate(); before != nil && before.GetId() != ch.GetCandidate().GetId() {
				// Say why it is validated again.
				for _, c := range ch.GetHistory() {
					if c.GetId() == before.GetId() && c.GetReason() != "" {
						termsafe.Fprintf(w, "change %s: candidate %s %s: %s\n", ch.GetId(), c.GetId(),
							CandidateStateName(c.GetState()), FirstLineOf(c.GetReason()))
					}
				}
			}
			termsafe.Fprintf(w, "change %s: in candidate %s\n", ch.GetId(), DescribeCandidate(ch.GetCandidate()))
			if shown != nil && ch.GetState() == shown.GetState() && ch.GetProgress() == shown.GetProgress() {
				shown = ch
				return
			}
		}
		if shown != nil && ch.GetState() == shown.GetState() && ch.GetProgress() == shown.GetProgress() &&
			ch.GetQueuePosition() == shown.GetQueuePosition() {
			return
		}
		line := "change " + ch.GetId() + ": " + ChangeStateName(ch.GetState())
		switch ch.GetState() {
		case agwpv1.ChangeState_CHANGE_STATE_QUEUED:
			line += QueuePlace(ch)
		case agwpv1.ChangeState_CHANGE_STATE_VALIDATING:
			if p := ch.GetProgress(); p != "" {
				line += ": " + p
			}
		case agwpv1.ChangeState_CHANGE_STATE_AWAITING_APPROVAL:
			line += ": " + ch.GetReason()
		}
		termsafe.Fprintf(w, "%s\n", line)
		shown = ch
	}
	backoff := 200 * time.Millisecond
	for !FinalChange(change.GetState()) {
		show(change)
		stream, err := c.Repos.WatchChange(ctx, &agwpv1.WatchChangeRequest{ChangeId: change.GetId()})
		if err != nil {
			return nil, err
		}
		for stream.Receive() {
			change = stream.Msg().GetChange()
			show(change)
			backoff = 200 * time.Millisecond
		}
		err = stream.Err()
		_ = stream.Close()
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil && !client.IsCode(err, connect.CodeUnavailable) && !client.IsCode(err, connect.CodeDeadlineExceeded):
			return nil, err
		case !FinalChange(change.GetState()):
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
	return change, nil
}

func FirstLineOf(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// QueuePlace describes where a queued change stands in its repository's integration queue.
func QueuePlace(ch *agwpv1.Change) string {
	if ch.GetState() != agwpv1.ChangeState_CHANGE_STATE_QUEUED {
		return ""
	}
	if n := ch.GetQueuePosition(); n > 0 {
		return fmt.Sprintf(" (%d ahead)", n)
	}
	return " (next in line)"
}

func FinalChange(s agwpv1.ChangeState) bool {
	return s == agwpv1.ChangeState_CHANGE_STATE_INTEGRATED || s == agwpv1.ChangeState_CHANGE_STATE_REJECTED || s == agwpv1.ChangeState_CHANGE_STATE_CANCELLED
}

func ChangeStateName(s agwpv1.ChangeState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "CHANGE_STATE_"))
}
