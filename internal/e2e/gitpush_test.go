//go:build linux

package e2e

import (
	"bytes"
	"context"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// gitAgent is an agent that knows git and `ag lease` only: a working tree from `ag clone`,
// where git runs with the agent's token in its environment (for ag's credential helper and
// hooks) and nothing else of ag's.
type gitAgent struct {
	name, dir, token, url, home string
}

func (g *gateEnv) gitAgent(t *testing.T, name string) *gitAgent {
	t.Helper()
	a := &gitAgent{name: name, dir: filepath.Join(t.TempDir(), name), token: createAgent(t, g.server, name), url: g.URL, home: t.TempDir()}
	if out, errOut, code := runAG(t, "clone", "app", a.dir, "--holder", name, "--server", g.URL, "--token", a.token); code != 0 {
		t.Fatalf("ag clone for %s: exit %d\n%s%s", name, code, out, errOut)
	}
	return a
}

// git runs git in the agent's tree and answers all it printed and whether it succeeded.
func (a *gitAgent) git(args ...string) (string, bool) {
	cmd := gitCmd(a.home, a.dir, args...)
	cmd.Env = append(cmd.Env, "AG_TOKEN="+a.token, "AG_SERVER="+a.url, "GIT_AUTHOR_NAME="+a.name)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// mcp starts `ag mcp` in the agent's tree, as an MCP host would, with its token in the
// environment: the agent then reaches ag only through MCP tools.
func (a *gitAgent) mcp(t *testing.T) *mcpAgent {
	t.Helper()
	cmd := exec.Command(agBin, "mcp")
	cmd.Dir = a.dir
	cmd.Env = cleanEnv("AG_TOKEN="+a.token, "AG_SERVER="+a.url, "HOME="+a.home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME="+a.name, "GIT_AUTHOR_EMAIL="+a.name+"@example.com", "GIT_COMMITTER_NAME="+a.name, "GIT_COMMITTER_EMAIL="+a.name+"@example.com")
	cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "e2e-host", Version: "1"}, nil).
		Connect(context.Background(), &mcpsdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to ag mcp for %s: %v", a.name, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return &mcpAgent{name: a.name, dir: a.dir, cs: cs}
}

func (a *gitAgent) must(t *testing.T, args ...string) string {
	t.Helper()
	out, ok := a.git(args...)
	if !ok {
		t.Fatalf("%s: git %s:\n%s", a.name, strings.Join(args, " "), out)
	}
	return out
}

func (a *gitAgent) ag(t *testing.T, args ...string) string {
	t.Helper()
	return mustAG(t, append(args, "-C", a.dir, "--server", a.url, "--token", a.token)...)
}

// commit writes files and commits them; extra goes to git commit (--no-verify).
func (a *gitAgent) commit(t *testing.T, msg string, files map[string]string, extra ...string) {
	t.Helper()
	for p, c := range files {
		writeFile(t, a.dir, p, c)
		a.must(t, "add", p)
	}
	a.must(t, append([]string{"commit", "-q", "-m", msg}, extra...)...)
}

// forgeServer is the team's forge on loopback: `git http-backend` behind Go's CGI handler,
// taking pushes with the token "forge-secret".
func forgeServer(t *testing.T, run func(dir string, args ...string) string) string {
	t.Helper()
	root := t.TempDir()
	run(root, "init", "-q", "--bare", "-b", "main", "app.git")
	run(filepath.Join(root, "app.git"), "config", "http.receivepack", "true")
	execPath := strings.TrimSpace(run(root, "--exec-path"))
	h := &cgi.Handler{Path: filepath.Join(execPath, "git-http-backend"),
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=ag"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pass, ok := r.BasicAuth(); !ok || pass != "forge-secret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="forge"`)
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/app.git"
}

// TestAgentsThatKnowGit is the "done when" of git push into the gate: three agents in three git
// working trees from `ag clone` change one repository at once, two through git alone (commit,
// push, pull --rebase) and `ag lease`, one over `ag mcp`: a push of a path another holds is refused saying who holds it, a
// push the gate rejects prints the failing test's output as remote: lines and exits non-zero,
// the other changes land, and the team's forge, mirrored on loopback, holds exactly the commits
// a clone from ag shows.
func TestAgentsThatKnowGit(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		files := map[string]string{
			"check.sh": "! grep -n BROKEN *.txt\n",
			"a.txt":    "a\n",
			"b.txt":    "b\n",
			"c.txt":    "c\n",
		}
		g := startGate(t, backend, files, "--timeout", "30s", "--", "sh", "check.sh")
		g.sandboxWorker(t, "w1")
		run := gitRunner(t)
		forge := forgeServer(t, run)
		cred := filepath.Join(t.TempDir(), "forge.token")
		if err := os.WriteFile(cred, []byte("ag:forge-secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		mustAG(t, g.admin("repo", "set-mirror", "app", forge, "--credential-file", cred)...)

		alice, bob := g.gitAgent(t, "alice"), g.gitAgent(t, "bob")
		carol := g.gitAgent(t, "carol").mcp(t)
		alice.ag(t, "lease", "acquire", "a.txt")
		carol.ok(t, "lease_acquire", map[string]any{"paths": []string{"c.txt"}}, nil)

		// Bob commits a path alice holds past his own hook: the server refuses the push.
		bob.commit(t, "Bob takes a", map[string]string{"a.txt": "a by bob\n"}, "--no-verify")
		out, ok := bob.git("push", "--no-verify")
		if ok || !strings.Contains(out, "remote: a.txt: leased by alice|alice until ") {
			t.Fatalf("bob's push of a path alice holds = ok %v:\n%s", ok, out)
		}

		// At once: alice pushes a broken a.txt, carol integrates c.txt over MCP.
		alice.commit(t, "Break a", map[string]string{"a.txt": "BROKEN\n"})
		var wg sync.WaitGroup
		var broken string
		var brokenOK bool
		wg.Go(func() { broken, brokenOK = alice.git("push") })
		writeFile(t, carol.dir, "c.txt", "c by carol\n")
		var landed mcpChange
		carol.ok(t, "integrate", map[string]any{"message": "carol: c", "wait": true}, &landed)
		wg.Wait()
		if brokenOK || !strings.Contains(broken, "remote: a.txt:1:BROKEN") || !strings.Contains(broken, "rejected by the gate") {
			t.Fatalf("alice's broken push = ok %v:\n%s", brokenOK, broken)
		}
		if landed.Change.State != "integrated" {
			t.Fatalf("carol's change over MCP: %+v", landed.Change)
		}

		// Alice mends it on top of what landed, and it lands.
		alice.must(t, "reset", "-q", "--hard", "HEAD^")
		alice.ag(t, "sync")
		alice.commit(t, "Better a", map[string]string{"a.txt": "a by alice\n"})
		if out, ok := alice.git("push"); !ok || !strings.Contains(out, "remote: landed as ") {
			t.Fatalf("alice's mended push = ok %v:\n%s", ok, out)
		}
		bob.must(t, "reset", "-q", "--hard", "origin/main")
		bob.ag(t, "sync")
		if got := fileContent(t, filepath.Join(bob.dir, "a.txt")) + fileContent(t, filepath.Join(bob.dir, "c.txt")); got != "a by alice\nc by carol\n" {
			t.Fatalf("bob's tree after ag sync holds %q", got)
		}

		// The forge holds exactly the commits a clone from ag shows.
		fromAg := bob.must(t, "log", "--format=%H %T %s", "origin/main")
		eventually(t, "the forge mirrors the mainline", func() (bool, string) {
			dir := filepath.Join(t.TempDir(), "forge")
			cmd := gitCmd(t.TempDir(), "", "clone", "-q", strings.Replace(forge, "http://", "http://ag:forge-secret@", 1), dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				return false, string(out)
			}
			out, err := exec.Command("git", "-C", dir, "log", "--format=%H %T %s", "main").Output()
			return err == nil && bytes.Equal(out, []byte(fromAg)), "the forge has:\n" + string(out) + "ag has:\n" + fromAg
		})
	})
}
