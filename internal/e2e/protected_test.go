//go:build unix

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// TestAChangeCannotReplaceTheCheckThatJudgesIt is the attack of issue "the gate judges by the
// team's rules": an agent breaks a file and rewrites the policy's script to `exit 0` in one
// change. The script the command runs is protected without being listed, so the worker runs
// the mainline's copy, which finds the broken file: the change is rejected. A change that only
// improves the script passes on the mainline's copy, then waits for a reviewer; the agent
// cannot approve it, a reviewer does, and it lands with the reviewer named in its commit.
func TestAChangeCannotReplaceTheCheckThatJudgesIt(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g := startGate(t, backend, gateFiles, "--", "sh", "check.sh")
		g.worker(t, "w1", 10*time.Second)
		mallory := g.agent(t, "mallory")

		edit(t, mallory, "a.txt", "a is broken\n")
		edit(t, mallory, "check.sh", "exit 0\n")
		stdout, stderr, code := mallory.ag(t, "integrate", "-m", "mallory: the check always passes now")
		if code != 5 || !strings.Contains(stdout, "rejected: 2 paths; the mainline did not move") ||
			!strings.Contains(stdout, "FAIL: a.txt is broken") {
			t.Fatalf("ag integrate of a broken file with a check rewritten to pass: exit %d\nstdout:\n%s\nstderr:\n%s\n"+
				"want exit 5: rejected by the mainline's check.sh, which finds a.txt broken", code, stdout, stderr)
		}

		mallory.must(t, "lease", "release")
		alice := g.agent(t, "alice")
		better := checkScript + "# checked by the gate\n"
		edit(t, alice, "check.sh", better)
		stdout, stderr, code = alice.ag(t, "integrate", "--no-wait", "-m", "alice: document the check")
		m := regexp.MustCompile(`^change (\S+) `).FindStringSubmatch(stdout)
		if code != 0 || m == nil || !strings.Contains(stdout, "it changes the protected check.sh: validated with the mainline's copy, it lands once a reviewer approves it (ag change approve "+m[1]+")") {
			t.Fatalf("ag integrate --no-wait of a change to check.sh: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 0 saying it waits for a reviewer", code, stdout, stderr)
		}
		id := m[1]
		eventually(t, "the change to check.sh to pass and wait for an approval", func() (bool, string) {
			c := g.change(t, id)
			return c.GetState() == agwpv1.ChangeState_CHANGE_STATE_AWAITING_APPROVAL, c.GetState().String() + ": " + c.GetReason()
		})
		if r, err := g.Admin.Repos.GetRepository(context.Background(), &agwpv1.GetRepositoryRequest{Name: "app"}); err != nil || r.GetRepository().GetMainline() != g.imported {
			t.Fatalf("the mainline is %s (%v) before anyone approved the change to check.sh, want %s", r.GetRepository().GetMainline(), err, g.imported)
		}

		if _, errOut, code := alice.ag(t, "change", "approve", id); code != 7 || !strings.Contains(errOut, "permission") {
			t.Errorf("ag change approve by the agent itself: exit %d, stderr %q; want exit 7, refused", code, errOut)
		}
		rita := g.principal(t, "rita", agwpv1.Role_ROLE_REVIEWER)
		as := func(args ...string) []string { return append(args, "--server", g.URL, "--token", rita) }
		if out := mustAG(t, as("change", "list", "app", "--awaiting-approval")...); !strings.Contains(out, id) || !strings.Contains(out, "awaiting_approval") {
			t.Errorf("ag change list app --awaiting-approval printed:\n%s\nwant the waiting change %s", out, id)
		}
		if out := mustAG(t, as("change", "approve", id)...); out != "change "+id+": approved by rita; queued\n" {
			t.Errorf("ag change approve printed %q, want \"change %s: approved by rita; queued\"", out, id)
		}
		stdout = mustAG(t, as("change", "show", "--wait", id)...)
		if !containsLine(stdout, "state", "integrated") || !containsLine(stdout, "approved by", "rita") {
			t.Fatalf("ag change show --wait %s printed:\n%s\nwant it integrated, approved by rita", id, stdout)
		}

		git := gitRunner(t)
		clone := filepath.Join(t.TempDir(), "app")
		git(filepath.Dir(clone), "-c", "http.extraHeader=Authorization: Bearer "+rita, "clone", "-q", g.URL+"/git/app.git", clone)
		log := git(clone, "log", "-1", "--format=%s%n%(trailers:only,unfold)")
		if !strings.Contains(log, "alice: document the check\n") || !strings.Contains(log, "Ag-Approved-By: rita\n") {
			t.Errorf("the landed commit reads:\n%s\nwant alice's message and the trailer Ag-Approved-By: rita", log)
		}
		if got, err := os.ReadFile(filepath.Join(clone, "check.sh")); err != nil || string(got) != better {
			t.Errorf("the clone's check.sh = %q, %v; want alice's", got, err)
		}
	})
}
