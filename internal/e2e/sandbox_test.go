//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/attest"
)

// The validation sandbox as an attacker meets it: an agent plants a test that tries what a
// validated tree once did to a worker (read its token from its parent's environment, copy its
// key, write outside its checkout, leave a process behind) and passes only when it got
// something. In the sandbox it gets nothing, so its change is rejected, and its output, kept
// by the server, holds no secret.

// runTestsScript is the policy's command: it runs every tests/*.sh and fails if one fails.
const runTestsScript = `status=0
for t in tests/*.sh; do
	if sh "$t"; then echo "ok: $t"; else echo "FAIL: $t"; status=1; fi
done
exit "$status"
`

// attackScript is the planted test. Its %[n]q are the worker's key file, a directory of the
// host, the worker's blob cache, the test's whole temporary directory (where the server's
// database and the worker's files are), and the marker of the process it leaves behind.
const attackScript = `stolen=""
for f in /proc/$PPID/environ /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
	got=$(tr '\0' '\n' < "$f" 2>/dev/null | grep -e '^AG_TOKEN=' -e '^--token' -e '^e2e-')
	if [ -n "$got" ]; then stolen="$stolen $f:$got"; fi
done
key=$(cat %[1]q 2>&1)
echo "attack: the key: $key"
case "$key" in *PRIVATE*) stolen="$stolen key" ;; esac
for d in %[2]q %[3]q; do
	if echo pwned > "$d/pwned" 2>/dev/null; then stolen="$stolen wrote:$d"; fi
done
echo "attack: the test's files: $(ls -R %[4]q 2>&1 | head -20)"
%[5]s setsid sh -c 'sleep 300' > /dev/null 2>&1 &
echo "attack: stolen: [$stolen]"
[ -n "$stolen" ]
`

// sandboxWorker is an ag-worker that runs validate jobs in the sandbox, with its token in its
// environment, as the documentation says to run one, and its key and blob cache where the
// test knows them.
type sandboxWorker struct {
	*proc
	holder, key, cache string
}

func (g *gateEnv) sandboxWorker(t *testing.T, label string, args ...string) *sandboxWorker {
	t.Helper()
	dir := t.TempDir()
	w := &sandboxWorker{holder: "ci|" + label, key: filepath.Join(dir, "ag-data", label+".key"), cache: filepath.Join(dir, "ag-data", "blob-cache")}
	w.proc = startProc(t, "ag-worker "+label, workerBin, dir, cleanEnv("AG_TOKEN="+g.workerToken),
		append([]string{"--server", g.URL, "--label", label, "--key", w.key, "--cache-dir", w.cache, "--work-dir", t.TempDir(),
			"--kinds", "validate", "--lease", "10s", "--wait", "10s"}, args...)...)
	eventually(t, "ag-worker "+label+" to start", func() (bool, string) {
		if w.exited() {
			t.Fatalf("ag-worker %s exited (%v) at start; its stderr:\n%s", label, w.err, w.stderr.String())
		}
		return strings.Contains(w.stderr.String(), `msg="ag-worker started"`), w.stderr.String()
	})
	if !strings.Contains(w.stderr.String(), `msg="validation commands run in a sandbox"`) || strings.Contains(w.stderr.String(), "UNSAFE") {
		t.Fatalf("ag-worker %s did not say it runs validations in a sandbox; its stderr:\n%s", label, w.stderr.String())
	}
	return w
}

// attestation fetches the attestation of the job, checks its signature with w's key, and
// answers what it attests.
func (w *sandboxWorker) attestation(t *testing.T, g *gateEnv, job *agwpv1.Job) attest.Validation {
	t.Helper()
	res, err := g.Admin.Jobs.GetAttestation(context.Background(), &agwpv1.GetAttestationRequest{Digest: job.GetAttestationDigest()})
	if err != nil {
		t.Fatalf("get the attestation of job %s: %v", job.GetId(), err)
	}
	pemPub, err := os.ReadFile(w.key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := attest.ParsePublicKey(pemPub)
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := attest.VerifyValidation(context.Background(), attest.FromProto(res.GetEnvelope()), [][]byte{pub})
	if err != nil {
		t.Fatalf("the attestation of job %s does not verify with %s's key: %v", job.GetId(), w.holder, err)
	}
	return v
}

// TestSandboxValidation: an honest change passes in the sandbox and lands, attested as
// isolated; a planted test that tries to steal the worker's token and key, write outside its
// checkout and leave a process behind gets nothing, so its change is rejected, and neither the
// job's output nor the host holds a trace of it.
func TestSandboxValidation(t *testing.T) {
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
		g := startGate(t, backend, files, "--timeout", "30s", "--", "sh", "run-tests.sh")
		w := g.sandboxWorker(t, "w1")

		alice := g.agent(t, "alice")
		edit(t, alice, "a.txt", "a is still fine\n")
		stdout, stderr, code := alice.ag(t, "integrate", "-m", "alice: an honest change")
		id, rev, _ := integrated(t, "alice", stdout, stderr, code)
		g.assertMainline(t, rev, with(files, map[string]string{"a.txt": "a is still fine\n"}))
		job := g.job(t, g.change(t, id).GetJobId())
		if v := w.attestation(t, g, job); v.Result != attest.ResultPassed || v.Isolation != attest.IsolationBubblewrap {
			t.Errorf("the honest change's attestation: result %s, isolation %q; want PASSED in %s", v.Result, v.Isolation, attest.IsolationBubblewrap)
		}

		outside := t.TempDir()
		escape := "AG_E2E_ESCAPE=" + randomHex(16)
		t.Cleanup(func() { // what a failed test leaves behind
			for pid := range procsWithEnv(escape) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		mallory := g.agent(t, "mallory")
		edit(t, mallory, "tests/b.sh", fmt.Sprintf(attackScript, w.key, outside, w.cache, filepath.Dir(outside), escape))
		stdout, stderr, code = mallory.ag(t, "integrate", "-m", "mallory: one more test")
		id = rejected(t, "mallory", stdout, stderr, code,
			"validation failed: `sh run-tests.sh` exited with status 1 (worker "+w.holder+")", "attack: stolen: []", "FAIL: tests/b.sh")

		job = g.job(t, g.change(t, id).GetJobId())
		out := job.GetOutput()
		key, err := os.ReadFile(w.key)
		if err != nil {
			t.Fatal(err)
		}
		keyBody := strings.Split(strings.TrimSpace(string(key)), "\n")[1] // the base64 line
		for what, secret := range map[string]string{
			"the worker's token": g.workerToken, "the worker's key": keyBody, "the admin's token": g.AdminToken,
			"the server's database": "ag.db",
		} {
			if strings.Contains(out, secret) || strings.Contains(stdout, secret) {
				t.Errorf("the planted test got %s into the job's output:\n%s", what, out)
			}
		}
		if !strings.Contains(out, "attack: the test's files: ls: cannot access") {
			t.Errorf("the planted test did not try to list the test's files:\n%s", out)
		}
		for _, d := range []string{outside, w.cache} {
			if _, err := os.Stat(filepath.Join(d, "pwned")); err == nil {
				t.Errorf("the planted test wrote into %s", d)
			}
		}
		if left := procsWithEnv(escape); len(left) > 0 {
			t.Errorf("the planted test's setsid child outlived its validation: %v", left)
		}
		v := w.attestation(t, g, job)
		if v.Result != attest.ResultFailed || v.Isolation != attest.IsolationBubblewrap {
			t.Errorf("the planted test's attestation: result %s, isolation %q; want FAILED in %s", v.Result, v.Isolation, attest.IsolationBubblewrap)
		}
		g.assertMainline(t, rev, with(files, map[string]string{"a.txt": "a is still fine\n"}))
	})
}
