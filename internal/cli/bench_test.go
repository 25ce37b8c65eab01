package cli_test

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/cli"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestBench ensures `ag bench` drives a real server to the end of both phases and reports what
// it measured, and that every job it enqueued was completed.
func TestBench(t *testing.T) {
	t.Parallel()
	srv := agtest.Start(t, agtest.Options{})
	var out, errb bytes.Buffer
	err := cli.Run(context.Background(), []string{"bench", "--server", srv.URL, "--token", srv.AdminToken,
		"--jobs", "300", "--workers", "4", "--latency-jobs", "20"}, &out, &errb)
	if err != nil {
		t.Fatalf("ag bench: %v\n%s%s", err, out.String(), errb.String())
	}
	for _, want := range []string{
		`enqueue: +300 jobs in `,
		`sealed: +\d+ audit events before the drain`,
		`claim\+complete: +300 jobs in .*: \d+ jobs/s`,
		`sealed: +every event \S+ after the last completion`,
		`claim→complete: +p50 \S+ +p90 \S+ +p99 \S+ +\(n=300\)`,
		`enqueue→claim: +p50 \S+ +p90 \S+ +p99 \S+ +\(n=20\) \(workers waiting\)`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The drain starts once the enqueues are sealed: 300 enqueue events and the bootstrap's.
	m := regexp.MustCompile(`sealed: +(\d+) audit events`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no count of sealed events:\n%s", out.String())
	}
	if n, _ := strconv.Atoi(m[1]); n < 300 {
		t.Errorf("sealed before the drain: %d events, want at least the 300 enqueues", n)
	}
	res, err := srv.Admin.Jobs.ListJobs(context.Background(), &agwpv1.ListJobsRequest{
		States: []agwpv1.JobState{agwpv1.JobState_JOB_STATE_QUEUED, agwpv1.JobState_JOB_STATE_CLAIMED}})
	if err != nil || len(res.GetJobs()) != 0 {
		t.Fatalf("after ag bench: %d jobs unfinished, %v; want none", len(res.GetJobs()), err)
	}
}
