package server

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/agwp"
	"github.com/ag-coord/ag/internal/attest"
)

// TestAttestsJobSubject ensures a validate job's completion is refused unless its
// attestation's subject names the job's repository and revision, and that a job naming no tree
// is the server's fault, not the worker's.
func TestAttestsJobSubject(t *testing.T) {
	t.Parallel()
	const gitTree = "89abcdef0123456789abcdef0123456789abcdef"
	job := agwp.ValidatePayload{Repository: "app", CandidateRevision: "rev_42", GitTree: gitTree}
	of := func(repository, revision string) attest.Validation {
		return attest.Validation{Repository: repository, Revision: revision, GitTree: gitTree}
	}
	if err := attestsJobTree(of("app", "rev_42"), job, "job_1"); err != nil {
		t.Errorf("the job's subject: %v, want it accepted", err)
	}
	for _, v := range []attest.Validation{of("app", "rev_41"), of("web", "rev_42")} {
		err := attestsJobTree(v, job, "job_1")
		want := "attestation: its subject is " + v.Subject() + ", but job job_1 validates app@rev_42"
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("subject %s: %v, want invalid_argument: %s", v.Subject(), err, want)
		}
	}
	noTree := agwp.ValidatePayload{Repository: "app", CandidateRevision: "rev_42"}
	if err := attestsJobTree(of("app", "rev_42"), noTree, "job_1"); connect.CodeOf(err) != connect.CodeInternal {
		t.Errorf("a job naming no tree: %v, want internal", err)
	}
}
