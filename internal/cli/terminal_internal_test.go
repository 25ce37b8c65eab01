package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/repoview"
)

// hostile is what an agent writes wherever it may: it clears the screen, writes the clipboard
// (OSC 52), colours with the C1 CSI, rings the bell, overwrites with a carriage return and, on
// a new line, forges one of ag's.
const hostile = hostileFirstLine + "\nchange chg_x integrated: 1 paths, mainline rev_x"

const hostileFirstLine = "x\x1b[2J\x1b]52;c;aGk=\a\u009b31m\x7f\rover"

// hostileShown is hostile escaped as one field of a line.
const hostileShown = `x\x1b[2J\x1b]52;c;aGk=\x07\u009b31m\x7f\rover\nchange chg_x integrated: 1 paths, mainline rev_x`

// hostileFirstLineShown is the first line of hostile, escaped: a message's subject.
const hostileFirstLineShown = `x\x1b[2J\x1b]52;c;aGk=\x07\u009b31m\x7f\rover`

// checkPrinted fails the test when out holds a control character a terminal acts on (but the
// newlines and tabs of a block of lines, and a carriage return ending a line), or a line forged
// by a field; and answers out. A block of lines (a reason, a job's output) keeps its lines: the
// tests give it none that passes for one of ag's.
func checkPrinted(t *testing.T, what, out string) string {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s printed bytes that are not UTF-8:\n%q", what, out)
	}
	for i, r := range out {
		if r == '\r' && strings.HasPrefix(out[i:], "\r\n") {
			continue
		}
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r >= 0x80 && r <= 0x9f {
			t.Errorf("%s printed the control character %U raw, at byte %d:\n%q", what, r, i, out)
			break
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "change chg_x integrated") {
			t.Errorf("%s printed a forged line of its own, %q:\n%s", what, line, out)
		}
	}
	return out
}

// TestTermPrintfEscapesEachArgument ensures the format keeps its own newlines and tabs, each
// string or error argument is escaped as one field, width and padding apply to what is shown,
// and other arguments print as fmt prints them.
func TestTermPrintfEscapesEachArgument(t *testing.T) {
	var out bytes.Buffer
	if err := termPrintf(&out, "%s\t%-12s|%d %v\n", hostile, "a\tb", 7, errors.New("refused: \x1b[31mred")); err != nil {
		t.Fatal(err)
	}
	want := hostileShown + "\t" + `a\tb        ` + "|7 " + `refused: \x1b[31mred` + "\n"
	if out.String() != want {
		t.Errorf("termPrintf printed %q, want %q", out.String(), want)
	}
}

// TestPrintersEscapeAgentText ensures every printer of what agents, workers and validations
// wrote (a change, a queue, a job, leases, a sync, an audit event, a verified attestation)
// prints it escaped: one field never more than one line, a block of lines without a character a
// terminal acts on.
func TestPrintersEscapeAgentText(t *testing.T) {
	t.Parallel()
	now := timestamppb.New(time.Now())
	candidate := &agwpv1.Candidate{Id: "cnd_1", State: agwpv1.CandidateState_CANDIDATE_STATE_VALIDATING, Lane: "web",
		Changes: []string{"chg_1"}, ParentRevision: "rev_m", Position: 1, Workers: []string{"ci|" + hostile}, Progress: hostile}
	superseded := &agwpv1.Candidate{Id: "cnd_0", State: agwpv1.CandidateState_CANDIDATE_STATE_SUPERSEDED,
		Changes: []string{"chg_1", "chg_2"}, Reason: hostile}
	change := &agwpv1.Change{Id: "chg_1", Repository: "app", State: agwpv1.ChangeState_CHANGE_STATE_VALIDATING,
		Author: "alice|" + hostile, Message: hostile, Paths: []string{"a/" + hostile, "b"}, Candidate: candidate,
		History: []*agwpv1.Candidate{superseded, candidate}, Reason: "validation failed\n\n" + hostileFirstLine + "\r\nlast line\r\n",
		CreatedAt: now, UpdatedAt: now}

	var out bytes.Buffer
	printChange(&out, change)
	shown := checkPrinted(t, "ag change show", out.String())
	for _, want := range []string{"message       " + hostileFirstLineShown + "\n", "author        alice|" + hostileShown + "\n",
		"paths         a/" + hostileShown + ", b\n", "run by ci|" + hostileShown + "\n", "cnd_0  superseded (a batch of 2): " + hostileFirstLineShown + "\n",
		"reason: validation failed\n\n" + hostileFirstLineShown + "\r\nlast line\r\n"} {
		if !strings.Contains(shown, want) {
			t.Errorf("ag change show printed:\n%s\nwant %q", shown, want)
		}
	}

	out.Reset()
	repoview.WriteQueue(&out, &agwpv1.GetQueueResponse{Candidates: []*agwpv1.Candidate{candidate}, Waiting: []*agwpv1.Change{change}, Depth: 1})
	shown = checkPrinted(t, "ag repo queue", out.String())
	if strings.Count(shown, "\n") != 5 || !strings.Contains(shown, hostileShown) || !strings.Contains(shown, hostileFirstLineShown+"  \n") {
		t.Errorf("ag repo queue printed:\n%s\nwant one line per candidate and per change, the progress, workers and message escaped", shown)
	}

	payload, err := structpb.NewStruct(map[string]any{"note": hostile})
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	printJob(&globals{stdout: &out}, &agwpv1.Job{Id: "job_1", Kind: "validate", State: agwpv1.JobState_JOB_STATE_FAILED, ClaimedBy: "ci|w1",
		Progress: hostile, LastError: hostile, Payload: payload, Result: payload, UniqueKey: hostile, EnqueuedBy: "alice",
		Output: "ok 1\n" + hostileFirstLine + "\ttabbed\nlast\n", CreatedAt: now})
	shown = checkPrinted(t, "ag job show", out.String())
	for _, want := range []string{"progress:     " + hostileShown + "\n", "last error:   " + hostileShown + "\n",
		`payload:      {"note":"x\u001b[2J\u001b]52;c;aGk=\u0007\u009b31m\x7f\rover\nchange chg_x`,
		"output:\nok 1\n" + hostileFirstLineShown + "\ttabbed\nlast\n"} {
		if !strings.Contains(shown, want) {
			t.Errorf("ag job show printed:\n%s\nwant %q", shown, want)
		}
	}

	out.Reset()
	printLeases(&globals{stdout: &out}, []*agwpv1.Lease{{Id: "lse_1", Paths: []string{hostile, "docs/"}, Holder: "mallory|" + hostile,
		State: agwpv1.LeaseState_LEASE_STATE_ACTIVE, ExpiresAt: timestamppb.New(time.Now().Add(time.Hour))}})
	shown = checkPrinted(t, "ag lease list", out.String())
	if strings.Count(shown, "\n") != 2 || !strings.Contains(shown, hostileShown+" docs/  mallory|"+hostileShown+"  ") {
		t.Errorf("ag lease list printed:\n%s\nwant the lease on one line, its paths and holder escaped", shown)
	}

	out.Reset()
	printSync(&globals{stdout: &out}, &checkout.SyncResult{From: "rev_a", To: "rev_b", Updated: []string{"u"}, Merged: []string{hostile},
		Kept: []string{hostile}, Conflicts: []checkout.SyncConflict{{Path: hostile, Reason: "2 conflicting changes", Markers: true}}})
	shown = checkPrinted(t, "ag sync", out.String())
	if strings.Count(shown, "\n") != 4 || strings.Count(shown, hostileShown) != 3 {
		t.Errorf("ag sync printed:\n%s\nwant four lines, each path escaped", shown)
	}

	out.Reset()
	if err := printAuditEvent(&globals{stdout: &out}, audit.Event{Seq: 9, Time: time.Now(), Principal: "mallory", Holder: "mallory|" + hostile,
		Action: "lease.acquire", Subject: hostile, Details: []byte(`{"paths":["` + "\u009b" + `2J"]}`)}); err != nil {
		t.Fatal(err)
	}
	shown = checkPrinted(t, "ag audit", out.String())
	if strings.Count(shown, "\n") != 1 || !strings.Contains(shown, hostileShown+`  {"paths":["\u009b2J"]}`) {
		t.Errorf("ag audit printed:\n%s\nwant one line, its holder, subject and details escaped", shown)
	}

	out.Reset()
	printVerified(&globals{stdout: &out}, verifiedAttestation{Result: "FAILED", Subject: "app@rev_1", Worker: "ci|" + hostile,
		Command: []string{"sh", hostile}, Reason: hostile, JobID: "job_1", KeyID: "sha256:k", Isolation: "bubblewrap"})
	shown = checkPrinted(t, "ag attestation verify", out.String())
	if !strings.Contains(shown, "reason:     "+hostileShown+"\n") || !strings.Contains(shown, "worker:     ci|"+hostileShown+"\n") {
		t.Errorf("ag attestation verify printed:\n%s\nwant its worker and reason escaped", shown)
	}
}

// TestErrorsAreEscaped ensures the error a command ends with, which may quote what the server,
// agents or the command line said, is printed escaped.
func TestErrorsAreEscaped(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	code := Main(t.Context(), []string{"status", "--" + hostileFirstLine}, &bytes.Buffer{}, &stderr)
	shown := checkPrinted(t, "an error", stderr.String())
	// The flag's name ends at its '='.
	if code != ExitUsage || !strings.HasPrefix(shown, "ag: unknown flag: --"+hostileFirstLineShown[:strings.Index(hostileFirstLineShown, "=")]) {
		t.Errorf("an unknown flag: exit %d, printed %q; want exit %d, the flag escaped", code, shown, ExitUsage)
	}
}
