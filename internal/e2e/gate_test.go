//go:build unix

package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// The validation gate as its users see it (docs/validation.md): an admin sets a command, real
// ag-worker processes run it on each candidate tree and sign what they saw, agents integrate
// through the ag command line, and anyone checks offline who validated the mainline.

// checkScript fails when a .txt file of the tree says "broken", printing the offending line.
// Files are checked out mode 0644: the policy runs it as `sh check.sh`.
const checkScript = `# Fails when a .txt file says "broken".
status=0
for f in *.txt; do
	if grep -n broken "$f"; then
		echo "FAIL: $f is broken"
		status=1
	fi
done
if [ "$status" = 0 ]; then echo "ok: nothing broken"; fi
exit "$status"
`

// waitScript blocks until the file $GATE_DIR/release exists (at most about 30s, so that a
// command whose worker was killed does not linger), then passes. The sandbox shows GATE_DIR
// only to a worker started with --sandbox-ro GATE_DIR.
const waitScript = `echo "waiting for release"
i=0
while [ ! -e "$GATE_DIR/release" ]; do
	i=$((i+1))
	if [ "$i" -gt 600 ]; then echo "gave up waiting"; exit 3; fi
	sleep 0.05
done
echo "released"
`

// sleepScript outlives any short timeout.
const sleepScript = `echo "sleeping for a minute"
sleep 60
echo "woke up"
`

// gateFiles is the tree the gate tests start from: the check and two files it checks.
var gateFiles = map[string]string{
	"check.sh": checkScript,
	"a.txt":    "a is fine\n",
	"b.txt":    "b is fine\n",
}

var (
	integratedOut = regexp.MustCompile(`^change (\S+) integrated: (\d+) paths, mainline (\S+)\nvalidated: attestation (sha256:[0-9a-f]{64})\n$`)
	rejectedOut   = regexp.MustCompile(`^change (\S+) rejected: (\d+) paths; the mainline did not move\nreason: `)
)

// gateEnv is a server with the repository app under a validation policy, and a worker
// principal ci for its workers.
type gateEnv struct {
	*server
	files       map[string]string // the tree the mainline started from
	imported    string            // its revision
	workerToken string
}

func (g *gateEnv) admin(args ...string) []string {
	return append(args, "--server", g.URL, "--token", g.AdminToken)
}

// startGate starts a server of backend, imports files into the repository app, and sets its
// validation policy with `ag repo set-validation app POLICY...` (flags, --, the command).
func startGate(t *testing.T, backend string, files map[string]string, policy ...string) *gateEnv {
	t.Helper()
	g := &gateEnv{server: startServer(t, backend), files: files}
	dir := t.TempDir()
	writeTree(t, dir, files)
	out := mustAG(t, g.admin("repo", "import", "app", dir)...)
	m := regexp.MustCompile(`^imported \d+ files into app: change \S+, mainline (\S+)\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ag repo import printed %q, want \"imported N files into app: change ID, mainline REV\"", out)
	}
	g.imported = m[1]
	// The flags go before --: what follows it is the command.
	out = mustAG(t, append(g.admin("repo", "set-validation", "app"), policy...)...)
	cmd := policy[slices.Index(policy, "--")+1:]
	if !strings.HasPrefix(out, "repository app: validation `"+strings.Join(cmd, " ")+"`") {
		t.Fatalf("ag repo set-validation printed %q, want \"repository app: validation `%s` ...\"", out, strings.Join(cmd, " "))
	}
	g.workerToken = g.principal(t, "ci", roleWorker)
	return g
}

// gateWorker is an `ag-worker --kinds validate` process of the principal ci.
type gateWorker struct {
	*proc
	holder string // ci|LABEL
	pub    string // its public key file
}

// worker starts an ag-worker of principal ci that runs validate jobs, with its own key, work
// directory and claim lease, and more flags when given.
func (g *gateEnv) worker(t *testing.T, label string, lease time.Duration, args ...string) *gateWorker {
	t.Helper()
	key := filepath.Join(t.TempDir(), label+".key")
	p := g.startWorker(t, workerOpts{Label: label, Token: g.workerToken, Key: key, Lease: lease,
		Kinds: "validate", WorkDir: t.TempDir(), Args: args})
	if _, err := os.Stat(key + ".pub"); err != nil {
		t.Fatalf("ag-worker %s did not write its public key: %v", label, err)
	}
	return &gateWorker{proc: p, holder: "ci|" + label, pub: key + ".pub"}
}

// agent creates the agent principal name and checks app out for it into a directory of that
// name, where it edits as holder name.
func (g *gateEnv) agent(t *testing.T, name string) *agentShell {
	t.Helper()
	a := &agentShell{s: g.server, holder: name + "|" + name, dir: filepath.Join(t.TempDir(), name), token: createAgent(t, g.server, name)}
	mustAG(t, "checkout", "app", a.dir, "--server", g.URL, "--token", a.token)
	return a
}

// edit leases path in the agent's checkout and writes content to it.
func edit(t *testing.T, a *agentShell, path, content string) {
	t.Helper()
	a.must(t, "lease", "acquire", path)
	writeFile(t, a.dir, path, content)
}

// integrated checks that `ag integrate` printed a validated change of one path and answers the
// change, the new mainline and the attestation's digest.
func integrated(t *testing.T, who, stdout, stderr string, code int) (change, rev, digest string) {
	t.Helper()
	m := integratedOut.FindStringSubmatch(stdout)
	if code != 0 || m == nil || m[2] != "1" {
		t.Fatalf("ag integrate (%s): exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 0 and \"change ID integrated: 1 paths, mainline REV\", then \"validated: attestation DIGEST\"",
			who, code, stdout, stderr)
	}
	if !strings.Contains(stderr, "change "+m[1]+": queued") {
		t.Errorf("ag integrate (%s) did not say the change was queued; its stderr:\n%s", who, stderr)
	}
	return m[1], m[3], m[4]
}

// rejected checks that `ag integrate` printed a rejected change of one path whose reason
// contains every one of want, and exited 1 saying the edits stay; it answers the change.
func rejected(t *testing.T, who, stdout, stderr string, code int, want ...string) string {
	t.Helper()
	m := rejectedOut.FindStringSubmatch(stdout)
	if code != 5 || m == nil || m[2] != "1" || !containsAll(stdout, want...) ||
		!strings.Contains(stderr, "change "+m[1]+" was rejected; your edits are still in the checkout") {
		t.Fatalf("ag integrate (%s): exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 5, \"change ID rejected: 1 paths; the mainline did not move\", a reason with %q, and the edits kept",
			who, code, stdout, stderr, want)
	}
	return m[1]
}

// repoShow is what `ag repo show app` prints of the mainline.
type repoShow struct {
	mainline, tree, attestation string
}

func (g *gateEnv) repoShow(t *testing.T) repoShow {
	t.Helper()
	out := mustAG(t, g.admin("repo", "show", "app")...)
	field := func(re string) string {
		m := regexp.MustCompile(`(?m)^` + re).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("ag repo show app: no line matching %q in:\n%s", re, out)
		}
		return m[1]
	}
	return repoShow{
		mainline:    field(`mainline\s+(\S+)$`),
		tree:        field(`tree\s+(sha256:[0-9a-f]{64}) \(\d+ files\)$`),
		attestation: field(`attestation\s+(sha256:[0-9a-f]{64}) \(ag attestation get `),
	}
}

// attestationFile saves the attestation digest with `ag attestation get DIGEST -o FILE` and
// answers the file.
func (g *gateEnv) attestationFile(t *testing.T, digest string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "att.json")
	out := mustAG(t, g.admin("attestation", "get", digest, "-o", file)...)
	if !strings.HasPrefix(out, "saved attestation "+digest+" (job ") {
		t.Errorf("ag attestation get -o printed %q", out)
	}
	return file
}

// verified is what `ag attestation verify` printed of a verified attestation.
type verified struct {
	result, subject, job, worker string
	claim                        int
}

// verify runs `ag attestation verify FILE --key KEY --subject-digest TREE` (offline: no server,
// no token) and answers what it printed, and its exit code.
func verify(t *testing.T, file, key, tree string) (v verified, stdout, stderr string, code int) {
	t.Helper()
	stdout, stderr, code = runAG(t, "attestation", "verify", file, "--key", key, "--subject-digest", tree)
	if code != 0 {
		return v, stdout, stderr, code
	}
	field := func(re string) []string {
		m := regexp.MustCompile(`(?m)^` + re + `$`).FindStringSubmatch(stdout)
		if m == nil {
			t.Fatalf("ag attestation verify: no line matching %q in:\n%s", re, stdout)
		}
		return m
	}
	v.result = field(`verified: (\S+), signed by key sha256:[0-9a-f]{64}`)[1]
	v.subject = field(`subject:\s+(\S+)`)[1]
	job := field(`job:\s+(\S+) \(claim (\d+)\)`)
	v.job, v.claim = job[1], atoi(t, job[2])
	v.worker = field(`worker:\s+(\S+)`)[1]
	return v, stdout, stderr, code
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// otherKey writes the public key of a new Ed25519 key pair, one no worker has, as a PEM file.
func otherKey(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "other.pub")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// treeDigest answers the tree digest of app's revision rev, through the SDK.
func (g *gateEnv) treeDigest(t *testing.T, rev string) string {
	t.Helper()
	res, err := g.Admin.Repos.GetTree(context.Background(), &agwpv1.GetTreeRequest{Repository: "app", Revision: rev})
	if err != nil {
		t.Fatalf("get the tree of app@%s: %v", rev, err)
	}
	return res.GetTreeDigest()
}

func (g *gateEnv) change(t *testing.T, id string) *agwpv1.Change {
	t.Helper()
	res, err := g.Admin.Repos.GetChange(context.Background(), &agwpv1.GetChangeRequest{ChangeId: id})
	if err != nil {
		t.Fatalf("get change %s: %v", id, err)
	}
	return res.GetChange()
}

func (g *gateEnv) changes(t *testing.T) []*agwpv1.Change {
	t.Helper()
	res, err := g.Admin.Repos.ListChanges(context.Background(), &agwpv1.ListChangesRequest{Repository: "app", PageSize: 1000})
	if err != nil {
		t.Fatalf("list the changes of app: %v", err)
	}
	return res.GetChanges()
}

// waitProgress waits until a running `ag integrate` has printed that its change is being
// validated by holder with the progress line progress, and answers the change.
func waitProgress(t *testing.T, run *agRun, holder, progress string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^change (\S+): validating: ` + regexp.QuoteMeta(holder+": "+progress) + `$`)
	var id string
	eventually(t, "ag integrate to show its change validated by "+holder+" with progress "+strconv.Quote(progress), func() (bool, string) {
		m := re.FindStringSubmatch(run.stderr.String())
		if m == nil {
			return false, "its stderr:\n" + run.stderr.String()
		}
		id = m[1]
		return true, ""
	})
	return id
}

// TestGateAttestedIntegration: a change that passes the validation reaches the mainline, and
// `ag repo show`, `ag attestation get` and `ag attestation verify` show offline that the worker
// validated exactly the mainline's tree; with another key, or about another tree, the
// attestation does not verify.
func TestGateAttestedIntegration(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g := startGate(t, backend, gateFiles, "--", "sh", "check.sh")
		w := g.worker(t, "w1", 10*time.Second)
		alice := g.agent(t, "alice")

		edit(t, alice, "a.txt", "a is better\n")
		stdout, stderr, code := alice.ag(t, "integrate", "-m", "alice: a is better")
		id, rev, digest := integrated(t, "alice", stdout, stderr, code)
		want := with(g.files, map[string]string{"a.txt": "a is better\n"})
		g.assertMainline(t, rev, want)
		assertTree(t, alice.dir, want)

		show := g.repoShow(t)
		if show.mainline != rev || show.attestation != digest {
			t.Errorf("ag repo show app: mainline %s, attestation %s; want %s and %s (the change %s)", show.mainline, show.attestation, rev, digest, id)
		}
		if show.tree != g.treeDigest(t, rev) {
			t.Errorf("ag repo show app: tree %s, but GetTree answers %s for %s", show.tree, g.treeDigest(t, rev), rev)
		}

		file := g.attestationFile(t, digest)
		v, out, errOut, code := verify(t, file, w.pub, show.tree)
		if code != 0 {
			t.Fatalf("ag attestation verify with the worker's key: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		ch := g.change(t, id)
		if v.result != "PASSED" || v.worker != w.holder || v.subject != "app@"+rev || v.job != ch.GetJobId() || v.claim != 1 {
			t.Errorf("ag attestation verify printed:\n%s\nwant PASSED, worker %s, subject app@%s, job %s claim 1", out, w.holder, rev, ch.GetJobId())
		}

		if _, out, errOut, code := verify(t, file, otherKey(t), show.tree); code == 0 || !strings.Contains(errOut, "does not verify with key") {
			t.Errorf("ag attestation verify with another key: exit %d\nstdout:\n%s\nstderr:\n%s\nwant a non-zero exit: the signature does not verify", code, out, errOut)
		}
		before := g.treeDigest(t, g.imported)
		if _, out, errOut, code := verify(t, file, w.pub, before); code == 0 || !strings.Contains(errOut, "it attests tree "+show.tree) {
			t.Errorf("ag attestation verify --subject-digest of the tree before the change: exit %d\nstdout:\n%s\nstderr:\n%s\nwant a non-zero exit naming the attested tree", code, out, errOut)
		}
	})
}

// TestGateFailingChangeRejected: a change that fails the validation is rejected with the
// command's failing output; the mainline keeps the last tree that passed, and the agent keeps
// the edits.
func TestGateFailingChangeRejected(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g := startGate(t, backend, gateFiles, "--", "sh", "check.sh")
		g.worker(t, "w1", 10*time.Second)
		alice := g.agent(t, "alice")

		edit(t, alice, "a.txt", "a is better\n")
		stdout, stderr, code := alice.ag(t, "integrate", "-m", "alice: a is better")
		_, passed, _ := integrated(t, "alice", stdout, stderr, code)
		good := with(g.files, map[string]string{"a.txt": "a is better\n"})

		edit(t, alice, "b.txt", "b is fine\nb is broken now\n")
		stdout, stderr, code = alice.ag(t, "integrate", "-m", "alice: break b")
		id := rejected(t, "alice", stdout, stderr, code,
			"reason: validation failed: `sh check.sh` exited with status 1 (worker ci|w1)",
			"\n2:b is broken now\nFAIL: b.txt is broken\n")

		g.assertMainline(t, passed, good)
		assertTree(t, alice.dir, with(good, map[string]string{"b.txt": "b is fine\nb is broken now\n"}))
		if out := alice.must(t, "sync"); out != "already at the mainline "+passed+"\n" {
			t.Errorf("ag sync after the rejection printed %q, want \"already at the mainline %s\"", out, passed)
		}
		out := alice.must(t, "change", "show", id)
		if !containsLine(out, "state", "rejected") || !containsLine(out, "integrated", "-") || !strings.Contains(out, "FAIL: b.txt is broken") {
			t.Errorf("ag change show %s printed:\n%s\nwant it rejected, not integrated, with the failing output", id, out)
		}
	})
}

// TestGateTimeoutKillsCommand: a validation that outlives the policy's timeout is killed, every
// process of it, and the change is rejected saying that it timed out.
func TestGateTimeoutKillsCommand(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc to find the command's processes")
	}
	forEachBackend(t, func(t *testing.T, backend string) {
		// Every process of the command has the marker in its environment, and no other has.
		marker := "GATE_MARKER=" + randomHex(16)
		t.Cleanup(func() { // what a failed test leaves behind
			for pid := range procsWithEnv(marker) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		files := with(gateFiles, map[string]string{"check.sh": sleepScript})
		g := startGate(t, backend, files, "--timeout", "2s", "--env", marker, "--", "sh", "check.sh")
		g.worker(t, "w1", 10*time.Second)
		alice := g.agent(t, "alice")

		edit(t, alice, "a.txt", "a is better\n")
		run := startAG(t, alice.args([]string{"integrate", "-m", "alice: a is better"})...)
		eventually(t, "the command's sleep to run", func() (bool, string) {
			if run.exited() {
				t.Fatalf("ag integrate ended before the command's sleep was seen running\nstdout:\n%s\nstderr:\n%s", run.stdout, run.stderr)
			}
			procs := procsWithEnv(marker)
			for _, name := range procs {
				if name == "sleep" {
					return true, ""
				}
			}
			return false, fmt.Sprintf("processes with %s: %v", marker, procs)
		})
		stdout, stderr, code := run.wait(t)
		rejected(t, "alice", stdout, stderr, code,
			"reason: validation failed: `sh check.sh` timed out after 2s (worker ci|w1)", "\nsleeping for a minute")
		if strings.Contains(stdout, "woke up") {
			t.Errorf("the command went on after its timeout: ag integrate printed\n%s", stdout)
		}
		// The worker reports only after the whole process group is gone.
		if procs := procsWithEnv(marker); len(procs) > 0 {
			t.Errorf("processes of the timed-out command survive: %v", procs)
		}
		g.assertMainline(t, g.imported, g.files)
	})
}

// procsWithEnv answers the live processes (pid: name) whose environment holds kv.
func procsWithEnv(kv string) map[int]string {
	out := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue // gone meanwhile, or not ours
		}
		found := false
		for _, v := range strings.Split(string(env), "\x00") {
			found = found || v == kv
		}
		if !found {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ...": a zombie runs nothing.
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || strings.HasPrefix(strings.TrimSpace(s[end+1:]), "Z") {
			continue
		}
		out[pid] = s[open+1 : end]
	}
	return out
}

// TestGateKilledWorkerJobRedone: a worker killed (SIGKILL) while its validation runs loses the
// job when its claim's lease runs out; another worker validates the change again under the
// next claim, and the change is integrated once.
func TestGateKilledWorkerJobRedone(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		gateDir := t.TempDir()
		release := filepath.Join(gateDir, "release")
		// Also ends the command of the killed worker, whom nobody stops any more.
		t.Cleanup(func() { _ = os.WriteFile(release, nil, 0o644) })
		files := with(gateFiles, map[string]string{"check.sh": waitScript})
		g := startGate(t, backend, files, "--env", "GATE_DIR="+gateDir, "--", "sh", "check.sh")
		a := g.worker(t, "a", 2*time.Second, "--sandbox-ro", gateDir)
		alice := g.agent(t, "alice")

		edit(t, alice, "a.txt", "a is better\n")
		run := startAG(t, alice.args([]string{"integrate", "-m", "alice: a is better"})...)
		id := waitProgress(t, run, a.holder, "waiting for release")
		jobID := g.change(t, id).GetJobId()
		g.waitJob(t, jobID, "claimed by ci|a (claim 1)", isClaim(a.holder, 1))
		a.signal(t, syscall.SIGKILL)
		if st := a.wait(t, 10*time.Second); st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("worker a ended with %v, want killed by SIGKILL", st)
		}

		b := g.worker(t, "b", 2*time.Second, "--sandbox-ro", gateDir)
		waitProgress(t, run, b.holder, "waiting for release")
		g.waitJob(t, jobID, "claimed by ci|b (claim 2)", isClaim(b.holder, 2))
		if err := os.WriteFile(release, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := run.wait(t)
		cid, rev, digest := integrated(t, "alice", stdout, stderr, code)
		if cid != id {
			t.Fatalf("ag integrate followed change %s, then printed change %s", id, cid)
		}

		// Integrated once: one change of alice's, INTEGRATED, which the mainline's history
		// holds once, after a validate job of two claims.
		var mine []string
		for _, c := range g.changes(t) {
			if c.GetAuthor() == alice.holder {
				mine = append(mine, c.GetId()+" "+c.GetState().String())
			}
		}
		if len(mine) != 1 || mine[0] != id+" CHANGE_STATE_INTEGRATED" {
			t.Errorf("alice's changes: %q, want %s integrated, once", mine, id)
		}
		if n := g.historyCount(t, rev, id); n != 1 {
			t.Errorf("the mainline's history holds change %s %d times, want once", id, n)
		}
		j := g.job(t, jobID)
		if j.GetState() != stateCompleted || j.GetAttempts() != 2 || j.GetClaimedBy() != b.holder || j.GetAttestationDigest() != digest {
			t.Errorf("validate job %s: %s attestation=%s; want completed by %s under claim 2 with attestation %s",
				jobID, describeJob(j), j.GetAttestationDigest(), b.holder, digest)
		}
		v, out, errOut, code := verify(t, g.attestationFile(t, digest), b.pub, g.repoShow(t).tree)
		if code != 0 || v.result != "PASSED" || v.worker != b.holder || v.job != jobID || v.claim != 2 {
			t.Errorf("ag attestation verify with b's key: exit %d\nstdout:\n%s\nstderr:\n%s\nwant PASSED by %s, job %s claim 2", code, out, errOut, b.holder, jobID)
		}
		if lines := a.stderr.Lines("msg=completed "); len(lines) > 0 {
			t.Errorf("the killed worker a logged a completion: %q", lines)
		}
		g.assertMainline(t, rev, with(files, map[string]string{"a.txt": "a is better\n"}))
	})
}

// historyCount answers how many revisions of the chain from rev to the first revision of app
// were made by change.
func (g *gateEnv) historyCount(t *testing.T, rev, change string) int {
	t.Helper()
	n := 0
	for seen := 0; rev != ""; seen++ {
		if seen > 1000 {
			t.Fatalf("the history of app does not end within 1000 revisions")
		}
		res, err := g.Admin.Repos.GetTree(context.Background(), &agwpv1.GetTreeRequest{Repository: "app", Revision: rev})
		if err != nil {
			t.Fatalf("get the tree of app@%s: %v", rev, err)
		}
		if res.GetChangeId() == change {
			n++
		}
		rev = res.GetParent()
	}
	return n
}

// TestGatePausedWorkerFencedOff: a worker paused (SIGSTOP) past its lease while another worker
// validates the change again is refused when it wakes up: the change is integrated with the
// other worker's attestation, and the paused one's is not stored.
func TestGatePausedWorkerFencedOff(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		gateDir := t.TempDir()
		release := filepath.Join(gateDir, "release")
		t.Cleanup(func() { _ = os.WriteFile(release, nil, 0o644) })
		files := with(gateFiles, map[string]string{"check.sh": waitScript})
		g := startGate(t, backend, files, "--env", "GATE_DIR="+gateDir, "--", "sh", "check.sh")
		a := g.worker(t, "a", 2*time.Second, "--sandbox-ro", gateDir)
		alice := g.agent(t, "alice")

		edit(t, alice, "a.txt", "a is better\n")
		run := startAG(t, alice.args([]string{"integrate", "-m", "alice: a is better"})...)
		id := waitProgress(t, run, a.holder, "waiting for release")
		jobID := g.change(t, id).GetJobId()
		g.waitJob(t, jobID, "claimed by ci|a (claim 1)", isClaim(a.holder, 1))
		a.signal(t, syscall.SIGSTOP)
		g.waitJob(t, jobID, "to have its lease expired", func(j *agwpv1.Job) bool {
			return j.GetLeaseExpiresAt() != nil && j.GetLeaseExpiresAt().AsTime().Before(time.Now())
		})

		// b validates the change again and finishes while a sleeps; a's command finishes too.
		b := g.worker(t, "b", 2*time.Second, "--sandbox-ro", gateDir)
		waitProgress(t, run, b.holder, "waiting for release")
		g.waitJob(t, jobID, "claimed by ci|b (claim 2)", isClaim(b.holder, 2))
		if err := os.WriteFile(release, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := run.wait(t)
		_, rev, digest := integrated(t, "alice", stdout, stderr, code)

		a.signal(t, syscall.SIGCONT)
		const (
			heartbeatRefused  = `msg="claim lost; stopped the job"`
			completionRefused = `msg="completed refused: the claim was lost"`
		)
		eventually(t, "the woken worker a to be refused", func() (bool, string) {
			if lines := a.stderr.Lines("msg=completed ", "job="+jobID); len(lines) > 0 {
				t.Fatalf("the woken worker completed the job it no longer holds: %q", lines)
			}
			refused := len(a.stderr.Lines(heartbeatRefused, "job="+jobID, "claim=1")) +
				len(a.stderr.Lines(completionRefused, "job="+jobID, "claim=1"))
			return refused > 0, "its stderr:\n" + a.stderr.String()
		})
		if a.exited() {
			t.Errorf("the woken worker exited (%v); it should go on claiming", a.err)
		}

		// The change, the job and the mainline keep b's attestation.
		ch := g.change(t, id)
		j := g.job(t, jobID)
		if ch.GetState() != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED || ch.GetIntegratedRevision() != rev || ch.GetAttestationDigest() != digest {
			t.Errorf("change %s: state %s, revision %s, attestation %s; want integrated as %s with attestation %s",
				id, ch.GetState(), ch.GetIntegratedRevision(), ch.GetAttestationDigest(), rev, digest)
		}
		if j.GetState() != stateCompleted || j.GetAttempts() != 2 || j.GetClaimedBy() != b.holder || j.GetAttestationDigest() != digest {
			t.Errorf("validate job %s: %s attestation=%s; want completed by %s under claim 2 with the change's attestation %s",
				jobID, describeJob(j), j.GetAttestationDigest(), b.holder, digest)
		}
		show := g.repoShow(t)
		if show.mainline != rev || show.attestation != digest {
			t.Errorf("ag repo show app: mainline %s, attestation %s; want %s and %s", show.mainline, show.attestation, rev, digest)
		}
		file := g.attestationFile(t, digest)
		v, out, errOut, code := verify(t, file, b.pub, show.tree)
		if code != 0 || v.result != "PASSED" || v.worker != b.holder || v.job != jobID || v.claim != 2 {
			t.Errorf("ag attestation verify with b's key: exit %d\nstdout:\n%s\nstderr:\n%s\nwant PASSED by %s, job %s claim 2", code, out, errOut, b.holder, jobID)
		}
		if _, out, errOut, code := verify(t, file, a.pub, show.tree); code == 0 {
			t.Errorf("the mainline's attestation verifies with the paused worker a's key:\n%s%s", out, errOut)
		}
	})
}

// TestGateTwoAgents is the gate's "done when": an admin sets the validation command, two agents
// integrate at once, one of them breaking the check; the breaking change is rejected with its
// failing output, the other reaches the mainline, and `ag attestation verify` tells which of
// two workers validated the mainline's tree.
func TestGateTwoAgents(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g := startGate(t, backend, gateFiles, "--", "sh", "check.sh")
		alice, bob := g.agent(t, "alice"), g.agent(t, "bob")
		edit(t, alice, "a.txt", "a is broken\n")
		edit(t, bob, "b.txt", "b is better\n")

		// Both changes are in the queue before any worker runs.
		runA := startAG(t, alice.args([]string{"integrate", "-m", "alice: a"})...)
		runB := startAG(t, bob.args([]string{"integrate", "-m", "bob: b"})...)
		eventually(t, "both changes to be queued", func() (bool, string) {
			return strings.Contains(runA.stderr.String(), ": queued") && strings.Contains(runB.stderr.String(), ": queued"),
				fmt.Sprintf("alice's stderr:\n%s\nbob's stderr:\n%s", runA.stderr, runB.stderr)
		})
		workers := []*gateWorker{g.worker(t, "w1", 10*time.Second), g.worker(t, "w2", 10*time.Second)}

		stdout, stderr, code := runA.wait(t)
		rejected(t, "alice", stdout, stderr, code,
			"validation failed: `sh check.sh` exited with status 1 (worker ci|w", "\n1:a is broken\nFAIL: a.txt is broken\n")
		stdout, stderr, code = runB.wait(t)
		bobChange, rev, digest := integrated(t, "bob", stdout, stderr, code)

		want := with(g.files, map[string]string{"b.txt": "b is better\n"})
		g.assertMainline(t, rev, want)
		assertTree(t, bob.dir, want)
		assertTree(t, alice.dir, with(g.files, map[string]string{"a.txt": "a is broken\n"}))

		// Which worker validated the mainline: the attestation verifies with its key alone,
		// and names it; it is the worker that completed the change's validate job.
		show := g.repoShow(t)
		if show.mainline != rev || show.attestation != digest {
			t.Fatalf("ag repo show app: mainline %s, attestation %s; want bob's %s and %s", show.mainline, show.attestation, rev, digest)
		}
		file := g.attestationFile(t, digest)
		job := g.job(t, g.change(t, bobChange).GetJobId())
		var by []string
		for _, w := range workers {
			v, out, errOut, code := verify(t, file, w.pub, show.tree)
			if code != 0 {
				continue
			}
			by = append(by, w.holder)
			if v.result != "PASSED" || v.worker != w.holder || v.subject != "app@"+rev || v.job != job.GetId() {
				t.Errorf("ag attestation verify with %s's key:\n%s%s\nwant PASSED by %s of app@%s, job %s", w.holder, out, errOut, w.holder, rev, job.GetId())
			}
		}
		if len(by) != 1 || by[0] != job.GetClaimedBy() {
			t.Errorf("the mainline's attestation verifies with the keys of %q; want exactly the worker that completed job %s: %s",
				by, job.GetId(), job.GetClaimedBy())
		}
	})
}
