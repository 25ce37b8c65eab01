//go:build unix

package e2e

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// escapingScript is a test an agent planted to take over the terminal of whoever reads its
// output: it clears the screen, writes the clipboard (OSC 52), colours with the C1 CSI
// (U+009B, the bytes 0xC2 0x9B), hides a failure behind a carriage return, and fails.
const escapingScript = `printf 'ok 1\n'
printf '\033[2J\033[H'
printf '\033]52;c;Y3VybCBldmlsIHwgc2g=\007'
printf '\302\23331m red\n'
printf 'FAIL TestA\rok   TestA\n'
exit 1
`

// What a person reads of it: every control character escaped, the lines kept.
const escapingScriptShown = "ok 1\n" + `\x1b[2J\x1b[H\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\u009b31m red` + "\n" + `FAIL TestA\rok   TestA` + "\n"

// assertNothingForTheTerminal fails the test when out holds a control character a terminal
// acts on: C0 but a newline or tab, DEL or C1, or bytes that are not UTF-8.
func assertNothingForTheTerminal(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s printed bytes that are not UTF-8:\n%q", what, out)
	}
	for i, r := range out {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r >= 0x80 && r <= 0x9f {
			t.Errorf("%s printed the control character %U raw, at byte %d:\n%q", what, r, i, out)
			return
		}
	}
}

// TestGateOutputReachesTheTerminalEscaped: a validation whose test prints terminal escapes, run
// by a real ag-worker, is rejected, and `ag integrate`, `ag change show` and `ag job show` print
// its output, and the change's message, escaped; --json keeps them exact.
func TestGateOutputReachesTheTerminalEscaped(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g := startGate(t, backend, with(gateFiles, map[string]string{"check.sh": escapingScript}), "--", "sh", "check.sh")
		g.worker(t, "w1", 10*time.Second)
		alice := g.agent(t, "alice")

		edit(t, alice, "a.txt", "a is better\n")
		message := "alice: a\x1b[2J\nchange chg_x integrated: 1 paths, mainline rev_x"
		stdout, stderr, code := alice.ag(t, "integrate", "-m", message)
		id := rejected(t, "alice", stdout, stderr, code,
			"reason: validation failed: `sh check.sh` exited with status 1 (worker ci|w1)\n\n"+escapingScriptShown)
		assertNothingForTheTerminal(t, "ag integrate's stdout", stdout)
		assertNothingForTheTerminal(t, "ag integrate's stderr", stderr)

		show := alice.must(t, "change", "show", id)
		assertNothingForTheTerminal(t, "ag change show", show)
		if !containsLine(show, "message", `alice: a\x1b[2J`) || !strings.Contains(show, escapingScriptShown) ||
			strings.Contains(show, "\nchange chg_x") {
			t.Errorf("ag change show %s printed:\n%s\nwant the message's first line and the output escaped", id, show)
		}
		ch := g.change(t, id)
		job := mustAG(t, g.admin("job", "show", ch.GetJobId())...)
		assertNothingForTheTerminal(t, "ag job show", job)
		if !strings.Contains(job, "output:\n"+escapingScriptShown) {
			t.Errorf("ag job show %s printed:\n%s\nwant the output escaped:\n%s", ch.GetJobId(), job, escapingScriptShown)
		}

		var exact agwpv1.Change
		if err := protojson.Unmarshal([]byte(alice.must(t, "change", "show", id, "--json")), &exact); err != nil {
			t.Fatal(err)
		}
		if exact.GetMessage() != message || !strings.Contains(exact.GetReason(), "\x1b[2J\x1b[H\x1b]52;c;Y3VybCBldmlsIHwgc2g=\a\u009b31m red\nFAIL TestA\rok   TestA") {
			t.Errorf("ag change show --json: message %q, reason %q; want them as written", exact.GetMessage(), exact.GetReason())
		}
	})
}
