//go:build unix

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// Lanes as their users see them (ADR-0024, docs/validation.md): a repository whose web/ and api/
// are validated apart, each by its own command on its own view of the tree (the tree without the
// other lane's files), by real ag-worker processes; a change of one lane does not wait for the
// other's, a change of no lane (go.mod) is validated on the whole tree and waits for them, and a
// lane commit's attestation is checked offline with git alone.

// laneRootCheck is the policy's own command: it runs on the whole tree, so every file is there.
const laneRootCheck = `echo "root: view: $(find . -type f | LC_ALL=C sort | tr '\n' ' ')"
for f in go.mod cmd/tool.go web/index.html web/check.sh api/main.go api/check.sh cmd/api.go; do
	test -e "$f" || { echo "root: no $f"; exit 1; }
done
echo "root: saw the whole tree"
`

// laneWebCheck is the web lane's command: its view holds web/ and the files of no lane, not the
// api lane's api/ and cmd/api.go. It runs web/spec.sh first when there is one: the check is
// protected (the mainline's copy runs), what it runs is the agents'. It waits until the file $GATE_DIR/go-web exists (at most
// about 30s, so that a command whose worker was killed does not linger); its progress line is
// then "web: waiting for go-web".
const laneWebCheck = `[ -f web/spec.sh ] && . web/spec.sh
echo "web: view: $(find . -type f | LC_ALL=C sort | tr '\n' ' ')"
test ! -e api || { echo "web: saw api/"; exit 1; }
test ! -e cmd/api.go || { echo "web: saw cmd/api.go"; exit 1; }
test -e go.mod && test -e cmd/tool.go || { echo "web: the files of no lane are missing"; exit 1; }
echo "web: waiting for go-web"
i=0
while [ ! -e "$GATE_DIR/go-web" ]; do
	i=$((i+1))
	if [ "$i" -gt 600 ]; then echo "gave up waiting"; exit 3; fi
	sleep 0.05
done
echo "web: ok"
`

// laneAPICheck is the api lane's command: its view holds api/, cmd/api.go and the files of no
// lane, not the web lane's web/. It passes at once.
const laneAPICheck = `echo "api: view: $(find . -type f | LC_ALL=C sort | tr '\n' ' ')"
test ! -e web/index.html || { echo "api: saw web"; exit 1; }
test ! -e web || { echo "api: saw web/"; exit 1; }
test -e go.mod && test -e cmd/tool.go || { echo "api: the files of no lane are missing"; exit 1; }
test -e cmd/api.go || { echo "api: no cmd/api.go"; exit 1; }
echo "api: ok"
`

// apiSecret is in the api lane's files only: no web lane command may see it.
const apiSecret = "API-SECRET-5f3c1d"

// laneFiles is the tree the lane tests start from.
var laneFiles = map[string]string{
	"check.sh":       laneRootCheck,
	"go.mod":         "module app\n",
	"cmd/tool.go":    "package main // of no lane\n",
	"cmd/api.go":     "package main // the api lane's, " + apiSecret + "\n",
	"web/check.sh":   laneWebCheck,
	"web/index.html": "<p>web</p>\n",
	"api/check.sh":   laneAPICheck,
	"api/main.go":    "package api // " + apiSecret + "\n",
}

// The lanes' views, as find lists them.
const (
	webView  = "./check.sh ./cmd/tool.go ./go.mod ./web/check.sh ./web/index.html "
	apiView  = "./api/check.sh ./api/main.go ./check.sh ./cmd/api.go ./cmd/tool.go ./go.mod "
	rootView = "./api/check.sh ./api/main.go ./check.sh ./cmd/api.go ./cmd/tool.go ./go.mod ./web/check.sh ./web/index.html "
)

// startLanes starts a gate of backend on laneFiles whose policy has the lanes web (web/) and api
// (api/, cmd/api.go), with GATE_DIR for the web lane's command, and answers it and the directory
// that lets that command go on ("go-web").
func startLanes(t *testing.T, backend string) (*gateEnv, gateDir) {
	t.Helper()
	dir := gateDir(t.TempDir())
	// Also ends the commands of killed workers, whom nobody stops any more.
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(string(dir), "go-web"), nil, 0o644) })
	g := startGate(t, backend, laneFiles, "--env", "GATE_DIR="+string(dir), "--timeout", "30s",
		"--lane", "web=web/:sh web/check.sh", "--lane", "api=api/,cmd/api.go:sh api/check.sh", "--", "sh", "check.sh")
	return g, dir
}

// laneChange has a new agent edit path to content and answers the change, not yet submitted.
func (g *gateEnv) laneChange(t *testing.T, agent, path, content string) *submitted {
	t.Helper()
	s := &submitted{agent: g.agent(t, agent), path: path}
	edit(t, s.agent, path, content)
	return s
}

// lastCandidate answers the candidate a change was last validated in.
func (g *gateEnv) lastCandidate(t *testing.T, id string) *agwpv1.Candidate {
	t.Helper()
	h := g.change(t, id).GetHistory()
	if len(h) == 0 {
		t.Fatalf("change %s has no candidate", id)
	}
	return h[len(h)-1]
}

// jobOutput answers the output of a change's validate job.
func (g *gateEnv) jobOutput(t *testing.T, id string) string {
	t.Helper()
	return g.job(t, g.change(t, id).GetJobId()).GetOutput()
}

// candidateOf answers the queue's candidate holding change id, or nil.
func candidateOf(q *agwpv1.GetQueueResponse, id string) *agwpv1.Candidate {
	for _, c := range q.GetCandidates() {
		if slices.Contains(c.GetChanges(), id) {
			return c
		}
	}
	return nil
}

// waitWebBlocked waits until change id validates in a web lane candidate whose command waits for
// go-web, and answers that candidate.
func (g *gateEnv) waitWebBlocked(t *testing.T, id string) *agwpv1.Candidate {
	t.Helper()
	var c *agwpv1.Candidate
	eventually(t, "change "+id+" to validate in the web lane, waiting for go-web", func() (bool, string) {
		q := g.queue(t)
		c = candidateOf(q, id)
		return c != nil && c.GetState() == agwpv1.CandidateState_CANDIDATE_STATE_VALIDATING && c.GetLane() == "web" &&
			c.GetProgress() == "web: waiting for go-web", describeLanes(q)
	})
	return c
}

// describeLanes is describeQueue with each candidate's lane.
func describeLanes(q *agwpv1.GetQueueResponse) string {
	var lanes []string
	for _, c := range q.GetCandidates() {
		lanes = append(lanes, fmt.Sprintf("%s: %q", c.GetId(), c.GetLane()))
	}
	return describeQueue(q) + fmt.Sprintf("\n  lanes %v", lanes)
}

// holds checks that cond holds all along d.
func holds(t *testing.T, what string, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(pollEvery) {
		if ok, saw := cond(); !ok {
			t.Fatalf("%s no longer holds; saw: %s", what, saw)
		}
	}
}

// laneClone clones app's mainline with the real git client, as a reader, and answers the clone
// and a function that runs git in it with more environment.
func (g *gateEnv) laneClone(t *testing.T) (string, func(env []string, args ...string) string) {
	t.Helper()
	git := gitRunner(t)
	reader := g.principal(t, "reviewer", agwpv1.Role_ROLE_READER)
	clone := filepath.Join(t.TempDir(), "app")
	git(filepath.Dir(clone), "-c", "http.extraHeader=Authorization: Bearer "+reader, "clone", "-q", g.URL+"/git/app.git", clone)
	home := t.TempDir()
	return clone, func(env []string, args ...string) string {
		t.Helper()
		cmd := gitCmd(home, clone, args...)
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
}

// commitOf answers the mainline commit of revision rev.
func (g *gateEnv) commitOf(t *testing.T, rev string) string {
	t.Helper()
	c := g.tree(t, rev).GetGitCommit()
	if c == "" {
		t.Fatalf("revision %s has no mainline commit", rev)
	}
	return c
}

func (g *gateEnv) tree(t *testing.T, rev string) *agwpv1.GetTreeResponse {
	t.Helper()
	res, err := g.Admin.Repos.GetTree(context.Background(), &agwpv1.GetTreeRequest{Repository: "app", Revision: rev})
	if err != nil {
		t.Fatalf("get the tree of app@%s: %v", rev, err)
	}
	return res
}

// trailerValues answers the values of the commit's trailers key, in order.
func trailerValues(git func(env []string, args ...string) string, commit, key string) []string {
	return strings.Fields(git(nil, "log", "-1", "--format=%(trailers:key="+key+",valueonly)", commit))
}

// TestLanesDoNotWaitForEachOther: a web change whose validation blocks does not hold up an api
// change queued after it: the api change lands while the web change still validates in its
// lane, and the web change lands once let go, on the mainline holding the api change. Each
// commit names its lane and the paths its view left out.
func TestLanesDoNotWaitForEachOther(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g, dir := startLanes(t, backend)
		g.workers(t, 2, 2*time.Second, "--sandbox-ro", string(dir))
		web := g.laneChange(t, "a1", "web/index.html", "<p>web, better</p>\n")
		api := g.laneChange(t, "a2", "api/main.go", "package api // better, "+apiSecret+"\n")

		web.submit(t)
		g.waitWebBlocked(t, web.id)
		api.submit(t)
		apiRev, apiDigest := api.integrated(t)

		// The api change landed while the web change, queued before it, still validates.
		if ch := g.change(t, web.id); ch.GetState() != agwpv1.ChangeState_CHANGE_STATE_VALIDATING {
			t.Fatalf("change %s of the web lane is %s once the api change %s landed; want still validating", web.id, ch.GetState(), api.id)
		}
		q := g.queue(t)
		c := candidateOf(q, web.id)
		if c == nil || c.GetLane() != "web" || c.GetState() != agwpv1.CandidateState_CANDIDATE_STATE_VALIDATING {
			t.Fatalf("the queue once the api change landed: %s\nwant change %s validating in a candidate of lane web", describeLanes(q), web.id)
		}
		if out := mustAG(t, g.admin("repo", "queue", "app")...); !containsLine(out, c.GetId(), "validating", "web", web.id) ||
			!containsLine(out, "LANE", "CHANGES") {
			t.Errorf("ag repo queue app printed:\n%s\nwant a LANE column, and candidate %s of change %s validating in lane web", out, c.GetId(), web.id)
		}
		if out := mustAG(t, g.admin("change", "show", web.id)...); !containsLine(out, "in candidate", c.GetId(), "validating, lane web") {
			t.Errorf("ag change show %s printed:\n%s\nwant it in candidate %s validating, lane web", web.id, out, c.GetId())
		}
		if !strings.Contains(web.run.stderr.String(), "change "+web.id+": in candidate "+c.GetId()+" validating, lane web") {
			t.Errorf("ag integrate (a1) did not say its change validates in lane web; its stderr:\n%s", web.run.stderr)
		}
		if l := g.lastCandidate(t, api.id); l.GetLane() != "api" || l.GetState() != agwpv1.CandidateState_CANDIDATE_STATE_LANDED {
			t.Errorf("the api change's candidate %s: lane %q, %s; want landed in lane api", l.GetId(), l.GetLane(), l.GetState())
		}
		if g.mainline(t) != apiRev {
			t.Errorf("the mainline is %s while the web change validates, want the api change's %s", g.mainline(t), apiRev)
		}

		dir.open(t, "go-web")
		webRev, webDigest := web.integrated(t)
		if got := g.mainlineChanges(t); !slices.Equal(got, []string{api.id, web.id}) {
			t.Errorf("the mainline's changes after the import: %v, want %v: the api change landed first", got, []string{api.id, web.id})
		}
		g.assertMainline(t, webRev, with(laneFiles, map[string]string{
			"web/index.html": "<p>web, better</p>\n", "api/main.go": "package api // better, " + apiSecret + "\n",
		}))

		// Each commit names its attestation, its lane and what its view left out.
		_, git := g.laneClone(t)
		for _, want := range []struct {
			rev, digest, lane string
			excluded          []string
		}{
			{apiRev, apiDigest, "api", []string{"web/"}},
			{webRev, webDigest, "web", []string{"api/", "cmd/api.go"}},
		} {
			commit := g.commitOf(t, want.rev)
			log := git(nil, "log", "-1", "--format=%(trailers:only,unfold)", commit)
			for _, line := range []string{"Ag-Attestation: " + want.digest, "Ag-Lane: " + want.lane} {
				if !containsLine(log, line) {
					t.Errorf("the trailers of commit %s (revision %s):\n%s\nwant %q", commit, want.rev, log, line)
				}
			}
			if got := trailerValues(git, commit, "Ag-Lane-Excluded"); !slices.Equal(got, want.excluded) {
				t.Errorf("the Ag-Lane-Excluded trailers of commit %s (lane %s): %q, want %q", commit, want.lane, got, want.excluded)
			}
		}
	})
}

// TestLaneSandboxSeesOnlyItsView: a lane's command runs on its view: the api lane's command sees
// api/, cmd/api.go and the files of no lane, and no web/; a web change that rewrites the web
// lane's command to read the api lane's files finds nothing to read. A change of no lane (go.mod)
// is validated with the policy's command on the whole tree.
func TestLaneSandboxSeesOnlyItsView(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g, dir := startLanes(t, backend)
		dir.open(t, "go-web")
		g.worker(t, "w1", 2*time.Second, "--sandbox-ro", string(dir))

		api := g.laneChange(t, "a1", "api/main.go", "package api // better, "+apiSecret+"\n")
		stdout, stderr, code := api.agent.ag(t, "integrate", "-m", "a1: api")
		api.id, _, _ = integrated(t, "a1", stdout, stderr, code)
		if out := g.jobOutput(t, api.id); !strings.Contains(out, "api: view: "+apiView+"\n") || !strings.Contains(out, "\napi: ok") {
			t.Errorf("the api change's validation printed:\n%s\nwant the api lane's command to see exactly %q, and pass", out, apiView)
		}
		if l := g.lastCandidate(t, api.id); l.GetLane() != "api" {
			t.Errorf("the api change's candidate %s is of lane %q, want api", l.GetId(), l.GetLane())
		}

		// A web change whose check (run by the lane's protected command) tries to read the api
		// lane's files.
		const spy = `echo "web: view: $(find . -type f | LC_ALL=C sort | tr '\n' ' ')"
cat api/main.go cmd/api.go 2>&1
grep -rn 'API-SECRET-[0-9a-f]' . 2>&1 || echo "web: no secret found"
echo "web: spied"
`
		mallory := g.laneChange(t, "mallory", "web/spec.sh", spy)
		stdout, stderr, code = mallory.agent.ag(t, "integrate", "-m", "mallory: a web check that reads api/")
		mallory.id, _, _ = integrated(t, "mallory", stdout, stderr, code)
		out := g.jobOutput(t, mallory.id)
		spyView := webView + "./web/spec.sh "
		if !strings.Contains(out, "web: view: "+spyView+"\n") || !strings.Contains(out, "web: spied") {
			t.Errorf("the spying web change's validation printed:\n%s\nwant the web lane's command to see exactly %q", out, spyView)
		}
		if strings.Contains(out, apiSecret) || !strings.Contains(out, "api/main.go: No such file") || !strings.Contains(out, "web: no secret found") {
			t.Errorf("the web lane's command read the api lane's files:\n%s", out)
		}
		if l := g.lastCandidate(t, mallory.id); l.GetLane() != "web" {
			t.Errorf("the web change's candidate %s is of lane %q, want web", l.GetId(), l.GetLane())
		}

		// A change of no lane: the policy's command, on the whole tree.
		root := g.laneChange(t, "a2", "go.mod", "module app\n\ngo 1.22\n")
		stdout, stderr, code = root.agent.ag(t, "integrate", "-m", "a2: go.mod")
		root.id, _, _ = integrated(t, "a2", stdout, stderr, code)
		// The whole tree holds mallory's web/spec.sh, landed above.
		wholeTree := rootView + "./web/spec.sh "
		if out := g.jobOutput(t, root.id); !strings.Contains(out, "root: view: "+wholeTree+"\n") || !strings.Contains(out, "root: saw the whole tree") {
			t.Errorf("the go.mod change's validation printed:\n%s\nwant the policy's command to see the whole tree %q", out, wholeTree)
		}
		if l := g.lastCandidate(t, root.id); l.GetLane() != "" {
			t.Errorf("the go.mod change's candidate %s is of lane %q, want the root lane (\"\")", l.GetId(), l.GetLane())
		}
	})
}

// TestLaneAttestationVerifiesOffline: with a clone and git alone, the tree a lane commit's
// attestation is about is rebuilt from the commit's Ag-Lane-Excluded trailers (the recipe of
// docs/validation.md, with git rm's -f and --literal-pathspecs), also for a commit that is not
// the clone's HEAD, and `ag attestation verify` accepts the attestation for exactly that tree,
// and not for the commit's whole tree.
func TestLaneAttestationVerifiesOffline(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g, dir := startLanes(t, backend)
		dir.open(t, "go-web")
		w := g.worker(t, "w1", 2*time.Second, "--sandbox-ro", string(dir))

		type landed struct{ id, rev, digest string }
		var lanes []landed
		for _, c := range []struct{ agent, path, content string }{
			{"a1", "api/main.go", "package api // better, " + apiSecret + "\n"},
			{"a2", "web/index.html", "<p>web, better</p>\n"},
		} {
			s := g.laneChange(t, c.agent, c.path, c.content)
			stdout, stderr, code := s.agent.ag(t, "integrate", "-m", c.agent+": "+c.path)
			id, rev, digest := integrated(t, c.agent, stdout, stderr, code)
			lanes = append(lanes, landed{id, rev, digest})
		}

		clone, git := g.laneClone(t)
		for _, l := range lanes {
			commit := g.commitOf(t, l.rev)
			excluded := trailerValues(git, commit, "Ag-Lane-Excluded")
			if len(excluded) == 0 {
				t.Fatalf("commit %s of lane change %s has no Ag-Lane-Excluded trailer", commit, l.id)
			}
			idx := []string{"GIT_INDEX_FILE=" + filepath.Join(t.TempDir(), "idx")}
			git(idx, "read-tree", commit)
			// -f: the index holds COMMIT's files, which differ from the clone's HEAD and work tree
			// for a commit before HEAD (the api one), and git rm refuses those without it.
			// --literal-pathspecs: a lease path may hold '*', '?', '[' or start with ':', which git
			// would read as a pattern or as magic, removing other files.
			git(idx, append([]string{"--literal-pathspecs", "rm", "-r", "-q", "-f", "--cached", "--ignore-unmatch", "--"}, excluded...)...)
			view := strings.TrimSpace(git(idx, "write-tree"))
			whole := strings.TrimSpace(git(nil, "rev-parse", commit+"^{tree}"))

			// The view is the tree the worker validated: the landed candidate's.
			cand := g.lastCandidate(t, l.id)
			if got := g.tree(t, cand.GetRevision()).GetGitTree(); got != view {
				t.Errorf("change %s: git rebuilt the view %s from commit %s, but its candidate %s validated the tree %s", l.id, view, commit, cand.GetId(), got)
			}
			file := g.attestationFile(t, l.digest)
			v, out, errOut, code := verify(t, file, w.pub, view)
			if code != 0 || v.result != "PASSED" || v.worker != w.holder || v.subject != "app@"+cand.GetRevision() {
				t.Errorf("ag attestation verify --subject-digest %s (commit %s without %q): exit %d\nstdout:\n%s\nstderr:\n%s\nwant PASSED by %s of app@%s",
					view, commit, excluded, code, out, errOut, w.holder, cand.GetRevision())
			}
			if _, out, errOut, code := verify(t, file, w.pub, whole); code == 0 || !strings.Contains(errOut, "it attests git tree "+view) {
				t.Errorf("ag attestation verify --subject-digest %s (the whole tree of commit %s): exit %d\nstdout:\n%s\nstderr:\n%s\nwant a non-zero exit naming the attested tree %s",
					whole, commit, code, out, errOut, view)
			}

			// The recipe of docs/validation.md, as a shell runs it (without git rm's -f, git
			// refuses the api commit: see above).
			script := `export GIT_INDEX_FILE=$(mktemp -u)
git read-tree "$COMMIT"
git log -1 --format='%(trailers:key=Ag-Lane-Excluded,valueonly)' "$COMMIT" | while IFS= read -r p; do
  [ -z "$p" ] || git --literal-pathspecs rm -r -q -f --cached --ignore-unmatch -- "$p"
done
view=$(git write-tree); rm -f "$GIT_INDEX_FILE"; unset GIT_INDEX_FILE
"$AG" attestation verify "$ATT" --key "$KEY" --subject-digest "$view"
`
			sh := exec.Command("sh", "-c", script)
			sh.Dir = clone
			sh.Env = append(gitCmd(t.TempDir(), clone).Env, "COMMIT="+commit, "AG="+agBin, "ATT="+file, "KEY="+w.pub)
			if out, err := sh.CombinedOutput(); err != nil || !strings.Contains(string(out), "verified: PASSED") {
				t.Errorf("the recipe of docs/validation.md for commit %s: %v\n%s", commit, err, out)
			}
		}
	})
}

// TestLaneRootChangeWaits: a change of no lane (go.mod) queued behind a web change that
// validates waits for it, and an api change behind it waits too, though a worker is idle; once
// the web change lands, the go.mod change is validated on the whole tree and lands, then the api
// change.
func TestLaneRootChangeWaits(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g, dir := startLanes(t, backend)
		g.workers(t, 2, 2*time.Second, "--sandbox-ro", string(dir))
		web := g.laneChange(t, "a1", "web/index.html", "<p>web, better</p>\n")
		root := g.laneChange(t, "a2", "go.mod", "module app\n\ngo 1.22\n")
		api := g.laneChange(t, "a3", "api/main.go", "package api // better, "+apiSecret+"\n")

		web.submit(t)
		g.waitWebBlocked(t, web.id)
		root.submit(t)
		api.submit(t)
		// The queue is advanced at once when a change comes, and swept every 2s: a second is
		// ample for a wrong build to show.
		holds(t, "the go.mod and api changes waiting while the web change validates", time.Second, func() (bool, string) {
			q := g.queue(t)
			var waiting []string
			for _, c := range q.GetWaiting() {
				waiting = append(waiting, c.GetId())
			}
			ok := len(q.GetCandidates()) == 1 && candidateOf(q, web.id) != nil && slices.Equal(waiting, []string{root.id, api.id}) &&
				g.change(t, root.id).GetState() == agwpv1.ChangeState_CHANGE_STATE_QUEUED &&
				g.change(t, api.id).GetState() == agwpv1.ChangeState_CHANGE_STATE_QUEUED
			return ok, fmt.Sprintf("%s\n  changes: web %s, go.mod %s, api %s", describeLanes(q),
				g.change(t, web.id).GetState(), g.change(t, root.id).GetState(), g.change(t, api.id).GetState())
		})

		dir.open(t, "go-web")
		web.integrated(t)
		rootRev, _ := root.integrated(t)
		api.integrated(t)
		if got, want := g.mainlineChanges(t), []string{web.id, root.id, api.id}; !slices.Equal(got, want) {
			t.Errorf("the mainline's changes after the import: %v, want %v", got, want)
		}
		g.assertMainline(t, g.mainline(t), with(laneFiles, map[string]string{
			"web/index.html": "<p>web, better</p>\n", "go.mod": "module app\n\ngo 1.22\n", "api/main.go": "package api // better, " + apiSecret + "\n",
		}))
		if l := g.lastCandidate(t, root.id); l.GetLane() != "" || l.GetRevision() != rootRev {
			t.Errorf("the go.mod change's candidate %s: lane %q, revision %s; want the root lane, landed as the mainline's %s", l.GetId(), l.GetLane(), l.GetRevision(), rootRev)
		}
		if out := g.jobOutput(t, root.id); !strings.Contains(out, "root: view: "+rootView+"\n") || !strings.Contains(out, "root: saw the whole tree") {
			t.Errorf("the go.mod change's validation printed:\n%s\nwant the policy's command on the whole tree, with the web change", out)
		}
		if l := g.lastCandidate(t, api.id); l.GetLane() != "api" {
			t.Errorf("the api change's candidate %s is of lane %q, want api", l.GetId(), l.GetLane())
		}
	})
}
