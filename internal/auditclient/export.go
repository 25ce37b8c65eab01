package auditclient

import (
	"context"
	"io"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/audit"
)

// Export is a server's log as `ag audit export` writes it: the sealed events up to its newest
// checkpoint, and that checkpoint. Events sealed after it are left out, since nothing signed
// vouches for them yet.
type Export struct {
	Events     []audit.Event
	Checkpoint *agwpv1.GetCheckpointResponse
}

// FetchExport reads the newest checkpoint, then the events it covers.
func FetchExport(ctx context.Context, c *client.Client) (*Export, error) {
	cp, err := c.Audit.GetCheckpoint(ctx, &agwpv1.GetCheckpointRequest{})
	if err != nil {
		return nil, err
	}
	events, err := FetchEvents(ctx, c, cp.GetSize())
	if err != nil {
		return nil, err
	}
	return &Export{Events: events, Checkpoint: cp}, nil
}

// Write writes the export to w in the format `ag audit verify --file` reads.
func (x *Export) Write(w io.Writer) error {
	return audit.WriteExport(w, x.Events, []byte(x.Checkpoint.GetNote()))
}

// WriteFile writes the export to path, replacing it atomically: an export read while it is
// written is the old one or the new one, never half of one that fails to verify.
func (x *Export) WriteFile(path string) error {
	return WriteFileAtomic(path, 0o644, x.Write)
}
