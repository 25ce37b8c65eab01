package mcp

import (
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewServer is the server Serve runs, for a test to connect to in process.
func NewServer(dir, server, token string) (*mcp.Server, error) {
	return newServer(newAgent(dir, server, token))
}

// NewServerWaiting is NewServer with its tool calls' waits bounded by wait, not maxToolWait.
func NewServerWaiting(dir, server, token string, wait time.Duration) (*mcp.Server, error) {
	a := newAgent(dir, server, token)
	a.toolWait = wait
	return newServer(a)
}

// NewServerWatched is NewServer with a function that reports whether its inbox watch runs (a
// session is subscribed to the inbox resource).
func NewServerWatched(dir, server, token string) (*mcp.Server, func() bool, error) {
	a := newAgent(dir, server, token)
	s, err := newServer(a)
	return s, func() bool {
		a.inbox.mu.Lock()
		defer a.inbox.mu.Unlock()
		return a.inbox.stop != nil
	}, err
}

var (
	HTTPHandler = httpHandler
	ServeHTTP   = serveHTTP
)

// The tools' structured outputs, for tests to decode answers into.
type (
	StatusOut       = statusOut
	FileView        = fileView
	ChangeView      = changeView
	LeaseAcquireOut = leaseAcquireOut
	LeaseRenewOut   = leaseRenewOut
	LeaseReleaseOut = leaseReleaseOut
	LeaseListOut    = leaseListOut
	IntegrateOut    = integrateOut
	SyncOut         = syncOut
	DiffOut         = diffOut
	RevertOut       = revertOut
	JobView         = jobView
	MainlineListing = mainlineListing
	TaskView        = taskView
	MessageView     = messageView
	TaskReadyOut    = taskReadyOut
	TaskClaimOut    = taskClaimOut
	TaskUpdateOut   = taskUpdateOut
	TaskCreateOut   = taskCreateOut
	MessageSendOut  = messageSendOut
	InboxOut        = inboxOut
	InboxListing    = inboxListing
)
