package client

import (
	"errors"
	"net"
	"net/url"
	"testing"

	"connectrpc.com/connect"
)

// TestSafeToRetry ensures the SDK sends a call again only when that cannot apply it twice: a
// read, a call that never reached the server, or a write the server says was not applied; and
// not a write that failed as unavailable otherwise (a connection lost during its commit).
func TestSafeToRetry(t *testing.T) {
	safe := connect.NewError(connect.CodeUnavailable, errors.New("the database is unavailable"))
	safe.Meta().Set("Ag-Retry-Safe", "true")
	ambiguous := connect.NewError(connect.CodeUnavailable, errors.New("the database is unavailable"))
	refused := connect.NewError(connect.CodeUnavailable, &url.Error{Op: "Post", URL: "http://127.0.0.1:1", Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}})
	reset := connect.NewError(connect.CodeUnavailable, &url.Error{Op: "Post", URL: "http://127.0.0.1:1", Err: &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}})
	const enqueue, list = "/agwp.v1.JobService/EnqueueJob", "/agwp.v1.JobService/ListJobs"
	for _, c := range []struct {
		what      string
		procedure string
		err       error
		want      bool
	}{
		{"a write the server says was not applied", enqueue, safe, true},
		{"a write that may have been applied", enqueue, ambiguous, false},
		{"a write that never reached the server", enqueue, refused, true},
		{"a write whose connection broke", enqueue, reset, false},
		{"a read, whatever happened", list, reset, true},
		{"content by digest", "/agwp.v1.RepositoryService/UploadBlobs", ambiguous, true},
		{"who am I", "/agwp.v1.AdminService/WhoAmI", ambiguous, true},
		{"a completion, fenced by its claim number", "/agwp.v1.JobService/CompleteJob", ambiguous, true},
		{"an integration", "/agwp.v1.RepositoryService/Integrate", ambiguous, false},
		{"a refusal", list, connect.NewError(connect.CodeInvalidArgument, errors.New("no")), false},
		{"an internal error", enqueue, connect.NewError(connect.CodeInternal, errors.New("bug")), false},
	} {
		if got := safeToRetry(c.procedure, c.err); got != c.want {
			t.Errorf("%s: safeToRetry = %v, want %v", c.what, got, c.want)
		}
	}
}
