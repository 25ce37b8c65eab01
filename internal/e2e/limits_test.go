//go:build linux

package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/attest"
)

// TestWorkerLimits: a worker holds each validation run to its memory, process and disk limits.
// A change whose test hogs memory, one whose test forks without end and one whose test fills
// the disk are each rejected with the limit it reached as the reason, in `ag integrate`'s
// output and in the signed attestation, and after each an honest change lands, validated by
// the same worker: its machine is none the worse.
func TestWorkerLimits(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("bwrap is not on PATH: install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap) to run the sandbox tests: %v", err)
	}
	forEachBackend(t, func(t *testing.T, backend string) {
		files := map[string]string{
			"run-tests.sh": runTestsScript,
			"tests/a.sh":   "grep -q fine a.txt\n",
			"a.txt":        "a is fine\n",
		}
		g := startGate(t, backend, files, "--timeout", "60s", "--", "sh", "run-tests.sh")
		w := g.sandboxWorker(t, "w1", "--max-memory", "64MiB", "--max-pids", "64", "--max-disk", "32MiB")
		for _, want := range []string{
			`limit=memory value="64 MiB"`, `limit=processes value=64`, `limit=disk value="32 MiB"`, `limit="cpu weight"`,
		} {
			said := false
			for line := range strings.SplitSeq(w.stderr.String(), "\n") {
				said = said || strings.Contains(line, `msg="validation runs are limited"`) && strings.Contains(line, " "+want)
			}
			if !said {
				t.Fatalf("ag-worker did not say it keeps %s; its stderr:\n%s", want, w.stderr.String())
			}
		}
		if strings.Contains(w.stderr.String(), "NOT limited") {
			t.Fatalf("ag-worker cannot keep a limit here (the limits need root, or a delegated cgroup v2, and mkfs.ext4); its stderr:\n%s", w.stderr.String())
		}

		mainline := files
		for i, attack := range []struct{ name, test, reason string }{
			// tail keeps its last lines, and zeros are one line: it holds all it reads.
			{"memory", "head -c 3G /dev/zero | tail\n", "worker limit: memory 64 MiB"},
			{"fork", "bomb() { bomb | bomb & }; bomb; wait; sleep 600\n", "worker limit: processes 64"},
			{"disk", "head -c 200M /dev/zero > /tmp/big; head -c 200M /dev/zero > big\n", "worker limit: disk 32 MiB"},
		} {
			mallory := g.agent(t, "mallory"+attack.name)
			edit(t, mallory, "tests/"+attack.name+".sh", attack.test)
			stdout, stderr, code := mallory.ag(t, "integrate", "-m", "mallory: a test of "+attack.name)
			id := rejected(t, "mallory"+attack.name, stdout, stderr, code,
				"reason: validation failed: `sh run-tests.sh` "+attack.reason+" (worker "+w.holder+")")
			if v := w.attestation(t, g, g.job(t, g.change(t, id).GetJobId())); v.Result != attest.ResultFailed || v.Reason != attack.reason {
				t.Errorf("the %s attack's attestation: result %s, reason %q; want FAILED, %q", attack.name, v.Result, v.Reason, attack.reason)
			}

			alice := g.agent(t, fmt.Sprintf("alice%d", i))
			note := fmt.Sprintf("notes/%d.txt", i)
			edit(t, alice, note, "after the "+attack.name+" attack\n")
			stdout, stderr, code = alice.ag(t, "integrate", "-m", "alice: an honest change after the "+attack.name+" attack")
			_, rev, _ := integrated(t, "alice", stdout, stderr, code)
			mainline = with(mainline, map[string]string{note: "after the " + attack.name + " attack\n"})
			g.assertMainline(t, rev, mainline)
		}
	})
}
