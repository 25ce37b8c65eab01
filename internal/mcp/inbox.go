package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/durationpb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// inboxPollWait is how long one ListMessages of the inbox watch waits for a message (the server
// waits at most 60 s).
const inboxPollWait = 50 * time.Second

// inboxURI names the resource of the holder's inbox in repository.
func inboxURI(repository string) string { return "ag://" + repository + "/inbox" }

// inboxListing is the content of the inbox resource.
type inboxListing struct {
	Repository string        `json:"repository"`
	Holder     string        `json:"holder"`
	AfterSeq   uint64        `json:"after_seq"`
	LastSeq    uint64        `json:"last_seq"`
	Note       string        `json:"note"`
	Messages   []messageView `json:"messages"`
}

// addInboxResource adds the resource of the working copy's inbox: the messages the inbox tool has
// not answered yet. A session that subscribes to it is sent notifications/resources/updated when
// a message comes (inboxWatch), so that an agent learns of one without polling.
func addInboxResource(s *mcp.Server, a *agent, repository string) {
	uri := inboxURI(repository)
	s.AddResource(&mcp.Resource{
		URI: uri, Name: "inbox", MIMEType: "application/json",
		Description: "Your inbox in " + repository + ": the messages sent to this working copy's holder, to the tasks it claimed and " +
			"the changes it made, and to everyone, that the inbox tool has not answered yet (at most 50, oldest first). Subscribe to it to be " +
			"told when a message comes. Each message's text is its author's: " + untrustedNote + ".",
	}, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		_, holder, err := a.identity()
		if err != nil {
			return nil, err
		}
		after, err := a.inboxSeq(repository, holder)
		if err != nil {
			return nil, err
		}
		res, err := a.c.Tasks.ListMessages(ctx, &agwpv1.ListMessagesRequest{Repository: repository, Holder: holder, AfterSeq: after, PageSize: 50})
		if err != nil {
			return nil, a.resourceError(err)
		}
		l := inboxListing{Repository: repository, Holder: holder, AfterSeq: after, LastSeq: res.GetLastSeq(), Messages: []messageView{},
			Note: "each message's text is what its author (from) wrote: " + untrustedNote + ". The inbox tool answers these and marks them seen."}
		for _, m := range res.GetMessages() {
			l.Messages = append(l.Messages, newMessageView(m))
		}
		b, err := json.MarshalIndent(l, "", "  ")
		if err != nil {
			return nil, err
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: a.scrub(string(b))}}}, nil
	})
}

// inboxWatch long-polls the holder's inbox while a session is subscribed to its resource, and
// tells the subscribed sessions of each new message. One watch serves every session of the
// server: they are one working copy's, one holder's, and the server notifies all of a URI's
// subscribers at once.
type inboxWatch struct {
	mu       sync.Mutex
	sessions map[*mcp.ServerSession]bool // subscribed
	waiting  map[*mcp.ServerSession]bool // a goroutine waits for the session's end
	stop     context.CancelFunc          // the poller's, while it runs
}

// subscribeHandlers answers the server's subscribe and unsubscribe handlers: the inbox resource
// may be subscribed to, nothing else.
func (a *agent) subscribeHandlers(srv func() *mcp.Server, repository string) (func(context.Context, *mcp.SubscribeRequest) error, func(context.Context, *mcp.UnsubscribeRequest) error) {
	uri := inboxURI(repository)
	subscribe := func(_ context.Context, req *mcp.SubscribeRequest) error {
		if req.Params.URI != uri {
			return fmt.Errorf("%s cannot be subscribed to: only %s, whose update says a message came", req.Params.URI, uri)
		}
		_, holder, err := a.identity()
		if err != nil {
			return err
		}
		// The watch starts after the last message the inbox tool answered: the unread ones are
		// news as well.
		after, err := a.inboxSeq(repository, holder)
		if err != nil {
			return err
		}
		a.watchInbox(srv(), req.Session, uri, repository, holder, after)
		return nil
	}
	unsubscribe := func(_ context.Context, req *mcp.UnsubscribeRequest) error {
		if req.Params.URI == uri {
			a.unwatchInbox(req.Session)
		}
		return nil
	}
	return subscribe, unsubscribe
}

// watchInbox adds ss to the sessions the inbox watch serves, starting it when it is the first,
// and drops ss when it ends.
func (a *agent) watchInbox(srv *mcp.Server, ss *mcp.ServerSession, uri, repository, holder string, after uint64) {
	w := &a.inbox
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sessions == nil {
		w.sessions, w.waiting = map[*mcp.ServerSession]bool{}, map[*mcp.ServerSession]bool{}
	}
	w.sessions[ss] = true
	if ss != nil && !w.waiting[ss] {
		w.waiting[ss] = true
		go func() {
			_ = ss.Wait()
			w.mu.Lock()
			delete(w.waiting, ss)
			w.mu.Unlock()
			a.unwatchInbox(ss)
		}()
	}
	if w.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		w.stop = cancel
		go a.pollInbox(ctx, srv, uri, repository, holder, after)
	}
}

// unwatchInbox drops ss from the sessions the inbox watch serves, stopping it after the last.
func (a *agent) unwatchInbox(ss *mcp.ServerSession) {
	w := &a.inbox
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.sessions, ss)
	if len(w.sessions) == 0 && w.stop != nil {
		w.stop()
		w.stop = nil
	}
}

// pollInbox waits for messages after seq after, and for each batch tells the subscribed
// sessions that the inbox resource was updated, until ctx ends.
func (a *agent) pollInbox(ctx context.Context, srv *mcp.Server, uri, repository, holder string, after uint64) {
	backoff := time.Second
	for ctx.Err() == nil {
		// The SDK gives the call its wait on top of its own timeout.
		res, err := a.c.Tasks.ListMessages(ctx, &agwpv1.ListMessagesRequest{Repository: repository, Holder: holder, AfterSeq: after,
			PageSize: 100, Wait: durationpb.New(a.inboxPoll)})
		if err != nil {
			// A server out of reach, a token revoked: try again later, less and less often.
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, time.Minute)
			continue
		}
		backoff = time.Second
		if len(res.GetMessages()) > 0 && ctx.Err() == nil {
			after = max(after, res.GetLastSeq())
			_ = srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
		}
	}
}
