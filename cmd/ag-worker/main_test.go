package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
	"github.com/ag-coord/ag/internal/testutil/syncbuf"
)

// TestHelpHidesTheToken ensures -help names where the token comes from without printing it:
// whoever sees a worker's help output must not get its token.
func TestHelpHidesTheToken(t *testing.T) {
	const token = "secret-token-of-the-worker"
	t.Setenv("AG_TOKEN", token)
	var help bytes.Buffer
	err := run(context.Background(), []string{"-help"}, &help, &help)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run -help = %v, want flag.ErrHelp", err)
	}
	if strings.Contains(help.String(), token) {
		t.Errorf("-help printed the token:\n%s", help.String())
	}
	if !strings.Contains(help.String(), "(default $AG_TOKEN)") {
		t.Errorf("-help does not say the token comes from $AG_TOKEN:\n%s", help.String())
	}
}

// TestHelpDescribesTheWorker ensures --help and -h say on stdout what ag-worker is, show an
// example and the flags, and exit 0; a flag it does not know exits 2, with the usage on stderr,
// and an error 1.
func TestHelpDescribesTheWorker(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--help", "-h"} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{arg}, &out, &errOut)
		if code := exitCode(err, &errOut); code != 0 || errOut.Len() != 0 {
			t.Errorf("ag-worker %s: exit %d, stderr %q; want 0 and nothing\n%s", arg, code, errOut.String(), out.String())
		}
		for _, want := range []string{"ag-worker runs the jobs of an ag server", "validate ", "ag.noop ",
			"Without --kinds it runs both", "Example:\n", "ag-worker --label builder-1", "Flags:\n", "-kinds", "-unsafe-no-sandbox"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("ag-worker %s does not say %q:\n%s", arg, want, out.String())
			}
		}
		if strings.Contains(out.String(), "help requested") {
			t.Errorf("ag-worker %s printed an error:\n%s", arg, out.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := exitCode(run(context.Background(), []string{"--no-such-flag"}, &out, &errOut), &errOut); code != 2 ||
		out.Len() != 0 || !strings.Contains(errOut.String(), "flag provided but not defined: -no-such-flag") || !strings.Contains(errOut.String(), "Flags:") {
		t.Errorf("ag-worker --no-such-flag: exit %d, stdout %q, stderr:\n%s\nwant 2, the error and the usage on stderr", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := exitCode(errors.New("boom"), &out); code != 1 || out.String() != "ag-worker: boom\n" {
		t.Errorf("an error: exit %d and %q, want 1 and \"ag-worker: boom\"", code, out.String())
	}
}

// workerToken creates a worker principal on s and answers its token.
func workerToken(t *testing.T, s *agtest.Server, name string) string {
	t.Helper()
	res, err := s.Admin.Admin.CreatePrincipal(context.Background(), &agwpv1.CreatePrincipalRequest{Name: name, Role: agwpv1.Role_ROLE_WORKER})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetToken()
}

// TestDefaultKindsWithoutASandbox ensures a worker started without --kinds on a machine where the
// sandbox does not work says, as an error, that validate jobs are off and why, and runs ag.noop
// jobs; with --kinds validate it refuses to start.
func TestDefaultKindsWithoutASandbox(t *testing.T) {
	t.Parallel()
	s := agtest.Start(t, agtest.Options{})
	token := workerToken(t, s, "builder")
	dir := t.TempDir()
	args := []string{"--server", s.URL, "--token", token, "--label", "w1", "--key", filepath.Join(dir, "w1.key"),
		"--work-dir", dir, "--cache-dir", filepath.Join(dir, "cache"), "--bwrap", filepath.Join(dir, "no-bwrap"), "--wait", "1s"}

	var refused bytes.Buffer
	err := run(context.Background(), append(args, "--kinds", "validate"), &refused, &refused)
	if err == nil || !strings.Contains(err.Error(), "validate jobs run in a bubblewrap sandbox, and it does not work here") ||
		!strings.Contains(err.Error(), "apt-get install bubblewrap") {
		t.Errorf("--kinds validate without a sandbox: %v, want a refusal that says to install bubblewrap", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, &out, &out) }()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(20 * time.Second); !ok(); <-tick.C {
			if time.Now().After(deadline) {
				t.Fatalf("waited for %s; the worker's log:\n%s", what, out.String())
			}
		}
	}
	waitFor("the worker to start", func() bool { return strings.Contains(out.String(), `msg="ag-worker started"`) })
	log := out.String()
	off := strings.Index(log, `level=ERROR msg="validate jobs are OFF on this worker`)
	started := strings.Index(log, `msg="ag-worker started"`)
	if off < 0 || off > started || !strings.Contains(log, "apt-get install bubblewrap") || !strings.Contains(log, "no-bwrap") {
		t.Errorf("the worker did not say, before it started, that validate jobs are off and why:\n%s", log)
	}
	if !strings.Contains(log[started:], "kinds=ag.noop ") {
		t.Errorf("the worker does not say it runs ag.noop only:\n%s", log)
	}

	payload, _ := structpb.NewStruct(map[string]any{"ms": 1})
	res, err := s.Admin.Jobs.EnqueueJob(context.Background(), &agwpv1.EnqueueJobRequest{Kind: "ag.noop", Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	waitFor("the ag.noop job to complete", func() bool {
		j, err := s.Admin.Jobs.GetJob(context.Background(), &agwpv1.GetJobRequest{JobId: res.GetJob().GetId()})
		return err == nil && j.GetJob().GetState() == agwpv1.JobState_JOB_STATE_COMPLETED
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the worker stopped with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not stop when its context ended")
	}
}

// TestBadTokenStopsAtOnce ensures a worker whose token the server does not accept exits at start
// saying so, instead of waiting for a server that answered.
func TestBadTokenStopsAtOnce(t *testing.T) {
	t.Parallel()
	s := agtest.Start(t, agtest.Options{})
	dir := t.TempDir()
	var out bytes.Buffer
	err := run(context.Background(), []string{"--server", s.URL, "--token", "agt_wrong", "--label", "w1", "--kinds", "ag.noop",
		"--key", filepath.Join(dir, "w1.key")}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "does not accept this token") {
		t.Errorf("a wrong token: %v, want \"does not accept this token\"\n%s", err, out.String())
	}
}

// TestGoSeedFillFailureIsAWarning ensures a worker started with --sandbox-go-seed that cannot
// fill the seed (no go in the sandbox) removes what an earlier start left, says so as a
// warning, and starts anyway, its validations with an empty build cache. Not parallel: it
// sets PATH.
func TestGoSeedFillFailureIsAWarning(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("bwrap is not on PATH: install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap): %v", err)
	}
	t.Setenv("PATH", "/usr/bin:/bin") // bwrap, and no go
	s := agtest.Start(t, agtest.Options{})
	token := workerToken(t, s, "builder")
	dir := t.TempDir()
	old := filepath.Join(dir, "cache", "go-build-seed-w1", "00")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--server", s.URL, "--token", token, "--label", "w1", "--key", filepath.Join(dir, "w1.key"),
			"--work-dir", dir, "--cache-dir", filepath.Join(dir, "cache"), "--kinds", "validate", "--sandbox-go-seed", "--wait", "1s"}, &out, &out)
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), `msg="ag-worker started"`); <-tick.C {
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not start:\n%s", out.String())
		}
	}
	log := out.String()
	warn := strings.Index(log, `level=WARN msg="--sandbox-go-seed: could not fill the Go build cache seed; validations start with an empty build cache"`)
	if warn < 0 || warn > strings.Index(log, `msg="ag-worker started"`) {
		t.Errorf("the worker did not warn, before it started, that it has no seed:\n%s", log)
	}
	if _, err := os.Stat(old); err == nil {
		t.Errorf("the seed an earlier start left is still there")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the worker stopped with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not stop when its context ended")
	}
}
