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
)
