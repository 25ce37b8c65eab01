package cli_test

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/cli"
	"github.com/ag-coord/ag/internal/testutil/agtest"
	"github.com/ag-coord/ag/internal/testutil/syncbuf"
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

// TestBenchTimesWorkersOutside ensures `ag bench --workers 0` leaves the jobs to workers of
// their own, says when they may start, and times the drain from their first claim to the last
// job finished: the workers here start two seconds after "ready", and the time reported does not
// hold those two seconds.
func TestBenchTimesWorkersOutside(t *testing.T) {
	t.Parallel()
	srv := agtest.Start(t, agtest.Options{})
	var out syncbuf.Buffer
	var errb bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- cli.Run(context.Background(), []string{"bench", "--server", srv.URL, "--token", srv.AdminToken,
			"--jobs", "60", "--workers", "0", "--kind", "ag.noop", "--latency-jobs", "0"}, &out, &errb)
	}()
	for !strings.Contains(out.String(), "ready:") {
		select {
		case err := <-done:
			t.Fatalf("ag bench ended before it was ready: %v\n%s%s", err, out.String(), errb.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	res, err := srv.Admin.Jobs.CountJobs(context.Background(), &agwpv1.CountJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var queued uint64
	for _, c := range res.GetCounts() {
		if c.GetState() == agwpv1.JobState_JOB_STATE_QUEUED {
			queued = c.GetCount()
		}
	}
	if queued != 60 {
		t.Fatalf("ready with %d jobs queued, want 60: %v", queued, res.GetCounts())
	}
	// What is timed is wall time, so the wait it must leave out is too (internal/testlint's
	// allow-list).
	time.Sleep(2 * time.Second)
	ctx := context.Background()
	for finished := 0; finished < 60; {
		claims, err := srv.Admin.ClaimMany(ctx, client.ClaimOptions{Worker: "outside", Kinds: []string{"ag.noop"}, Lease: time.Minute}, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claims {
			if _, err := c.Complete(ctx, client.CompleteOptions{}); err != nil {
				t.Fatal(err)
			}
			finished++
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("ag bench: %v\n%s%s", err, out.String(), errb.String())
	}
	m := regexp.MustCompile(`claim\+complete: +60 jobs in (\S+): \d+ jobs/s \(workers outside; 0 failed, 0 cancelled in all\)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("output lacks the drain of the workers outside:\n%s", out.String())
	}
	if d, err := time.ParseDuration(m[1]); err != nil || d >= 2*time.Second {
		t.Fatalf("drain reported as %s: it holds the wait before the first claim", m[1])
	}
	if !regexp.MustCompile(`sealed: +every event \S+ after the last job was seen finished`).MatchString(out.String()) {
		t.Errorf("output lacks the sealing of the drain:\n%s", out.String())
	}
}
