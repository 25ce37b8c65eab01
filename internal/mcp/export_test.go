package mcp

import "github.com/modelcontextprotocol/go-sdk/mcp"

// NewServer is the server Serve runs, for a test to connect to in process.
func NewServer(dir, server, token string) (*mcp.Server, error) {
	return newServer(newAgent(dir, server, token))
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
