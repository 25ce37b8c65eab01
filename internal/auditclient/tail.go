package auditclient

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/audit"
)

// FollowWait is how long a followed tail long-polls for the next event: long enough that an
// idle log costs a call every half minute, short enough that a dropped connection is noticed.
const FollowWait = 30 * time.Second

// TailOptions says where a tail starts and whether it follows.
type TailOptions struct {
	FromLast bool   // start with the last Last sealed events, whatever their seqs
	Last     int    // with FromLast
	After    uint64 // otherwise, start after this seq
	Follow   bool   // then wait for new events until the context ends
}

// Tail hands each sealed event to each, oldest first, from where o starts; with o.Follow it
// then waits for the events sealed later, long-polling the server, until ctx ends, which is no
// error: following is ended by interrupting it. Pages are read in full before waiting, so a
// backlog is read at once and only an idle log is waited on.
func Tail(ctx context.Context, c *client.Client, o TailOptions, each func(audit.Event) error) error {
	after := o.After
	if o.FromLast {
		kept, last, err := LastEvents(ctx, c, o.Last)
		if err != nil {
			return err
		}
		for _, e := range kept {
			if err := each(e); err != nil {
				return err
			}
		}
		if !o.Follow {
			return nil
		}
		after = last
	}
	wait := false
	for {
		req := &agwpv1.ListAuditEventsRequest{AfterSeq: after, PageSize: PageSize}
		if wait {
			req.Wait = durationpb.New(FollowWait)
		}
		res, err := c.Audit.ListAuditEvents(ctx, req)
		if err != nil {
			if o.Follow && ctx.Err() != nil {
				return nil // interrupted
			}
			return err
		}
		for _, pe := range res.GetEvents() {
			e, err := EventOf(pe)
			if err != nil {
				return err
			}
			if err := each(e); err != nil {
				return err
			}
			after = e.Seq
		}
		n := len(res.GetEvents())
		if n == 0 && !o.Follow {
			return nil
		}
		wait = o.Follow && n < PageSize
	}
}
