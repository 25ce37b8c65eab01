package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/cli"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// runCLI runs the ag command line as the process does and answers what it printed and its
// exit code.
func runCLI(args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	code = cli.Main(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

// cliEnv is a real server holding the repository app, and agents with checkouts of it.
type cliEnv struct {
	t   *testing.T
	srv *agtest.Server
}

func newCLIEnv(t *testing.T, files map[string]string) *cliEnv {
	t.Helper()
	e := &cliEnv{t: t, srv: agtest.Start(t, agtest.Options{})}
	src := t.TempDir()
	for p, c := range files {
		mkfile(t, filepath.Join(src, filepath.FromSlash(p)), c)
	}
	e.admin("repo", "import", "app", src)
	return e
}

// admin runs a command as the admin and fails the test unless it exits 0.
func (e *cliEnv) admin(args ...string) string {
	e.t.Helper()
	out, errOut, code := runCLI(append(args, "--server", e.srv.URL, "--token", e.srv.AdminToken)...)
	if code != 0 {
		e.t.Fatalf("ag %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// agentCO is an agent's checkout of app.
type agentCO struct {
	t          *testing.T
	dir, token string
	url        string
}

// agent creates the principal name, of role agent, and checks app out for it.
func (e *cliEnv) agent(name string) *agentCO {
	e.t.Helper()
	res, err := e.srv.Admin.Admin.CreatePrincipal(context.Background(), &agwpv1.CreatePrincipalRequest{Name: name, Role: agwpv1.Role_ROLE_AGENT})
	if err != nil {
		e.t.Fatalf("create principal %s: %v", name, err)
	}
	a := &agentCO{t: e.t, dir: filepath.Join(e.t.TempDir(), name), token: res.GetToken(), url: e.srv.URL}
	if out, errOut, code := runCLI("checkout", "app", a.dir, "--server", a.url, "--token", a.token); code != 0 {
		e.t.Fatalf("ag checkout for %s: exit %d\n%s%s", name, code, out, errOut)
	}
	return a
}

func (a *agentCO) run(args ...string) (stdout, stderr string, code int) {
	return runCLI(append(args, "-C", a.dir, "--server", a.url, "--token", a.token)...)
}

// must runs a command in the checkout and fails the test unless it exits 0.
func (a *agentCO) must(args ...string) string {
	a.t.Helper()
	out, errOut, code := a.run(args...)
	if code != 0 {
		a.t.Fatalf("ag %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// write writes a file of the checkout.
func (a *agentCO) write(path, content string) {
	a.t.Helper()
	mkfile(a.t, filepath.Join(a.dir, filepath.FromSlash(path)), content)
}

// read answers a file of the checkout, "" when it is missing.
func (a *agentCO) read(path string) string {
	b, _ := os.ReadFile(filepath.Join(a.dir, filepath.FromSlash(path)))
	return string(b)
}

// integrate leases paths, integrates and releases, failing the test on any refusal.
func (a *agentCO) integrate(message string, paths ...string) {
	a.t.Helper()
	a.must(append([]string{"lease", "acquire"}, paths...)...)
	a.must("integrate", "-m", message)
	a.must("lease", "release")
}

// decode parses a command's JSON output into v, failing the test when it is not JSON.
func decode(t *testing.T, what, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%s printed %q, not the JSON documented: %v", what, out, err)
	}
}

// TestUnknownCommandsAndFlags ensures a mistyped subcommand or flag, at any level, exits with
// the usage code 2 and a suggestion, instead of a group's help and exit 0, and that with --json
// the error is one JSON object saying so.
func TestUnknownCommandsAndFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"lease", "aquire", "src/a.go"}, `unknown command "aquire" for "ag lease". Did you mean "acquire"?`},
		{[]string{"job", "enqueu", "ag.noop"}, `unknown command "enqueu" for "ag job". Did you mean "enqueue"?`},
		{[]string{"token", "revokee", "tok_1"}, `unknown command "revokee" for "ag token". Did you mean "revoke"?`},
		{[]string{"statuss"}, `unknown command "statuss" for "ag". Did you mean "status"?`},
		{[]string{"repo", "set-validaton", "app"}, `Did you mean "set-validation"?`},
		{[]string{"lease", "aquire", "--ttl", "5m", "a"}, `unknown command "aquire" for "ag lease". Did you mean "acquire"?`},
		{[]string{"lease", "acquire", "--tll", "5m", "a"}, `unknown flag: --tll. Did you mean "--ttl"?`},
		{[]string{"integrate", "--mesage", "x"}, `unknown flag: --mesage. Did you mean "--message"?`},
		{[]string{"status", "extra"}, `unknown command "extra" for "ag status"`},
		{[]string{"lease", "acquire"}, "requires at least 1 arg(s)"},
		{[]string{"principal", "create", "bob"}, `required flag(s) "role" not set`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			out, errOut, code := runCLI(c.args...)
			if code != cli.ExitUsage || !strings.Contains(errOut, c.want) || out != "" {
				t.Errorf("ag %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), code, out, errOut, c.want)
			}
			_, errOut, code = runCLI(append(c.args, "--json")...)
			var e struct {
				Error    string `json:"error"`
				Kind     string `json:"kind"`
				ExitCode int    `json:"exitCode"`
			}
			decode(t, "ag "+strings.Join(c.args, " ")+" --json (stderr)", errOut, &e)
			if code != 2 || e.ExitCode != 2 || e.Kind != "usage" || !strings.Contains(e.Error, c.want) {
				t.Errorf("ag %s --json: exit %d, stderr %+v; want exit 2, kind usage, exitCode 2 and %q", strings.Join(c.args, " "), code, e, c.want)
			}
		})
	}
	// A group alone is a request for its help.
	if out, errOut, code := runCLI("lease"); code != 0 || !strings.Contains(out, "acquire") {
		t.Errorf("ag lease: exit %d, stdout %q, stderr %q; want its help and exit 0", code, out, errOut)
	}
}

// TestExitCodes ensures each kind of failure ends with its documented exit code: no token or a
// wrong one 7, an unreachable server 6, a lease held by another 3, an unleased edit 3, an
// integrate or sync conflict 4.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	alice, bob := e.agent("alice"), e.agent("bob")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	for _, c := range []struct {
		name string
		args []string
		want int
	}{
		{"no token", []string{"job", "list", "--server", e.srv.URL}, cli.ExitAuth},
		{"wrong token", []string{"job", "list", "--server", e.srv.URL, "--token", "agt_wrong"}, cli.ExitAuth},
		{"unreachable", []string{"job", "list", "--server", closed, "--token", "agt_x"}, cli.ExitUnavailable},
		{"not allowed", []string{"principal", "create", "eve", "--role", "admin", "--server", e.srv.URL, "--token", alice.token}, cli.ExitAuth},
	} {
		if c.name == "no token" && os.Getenv("AG_TOKEN") != "" {
			continue
		}
		if out, errOut, code := runCLI(c.args...); code != c.want {
			t.Errorf("%s: ag %s: exit %d, want %d\n%s%s", c.name, strings.Join(c.args, " "), code, c.want, out, errOut)
		}
	}

	alice.must("lease", "acquire", "a.txt")
	if _, errOut, code := bob.run("lease", "acquire", "a.txt"); code != cli.ExitLease {
		t.Errorf("bob leases alice's a.txt: exit %d, want 3\n%s", code, errOut)
	}
	bob.write("a.txt", "bob's a\n")
	bob.must("lease", "acquire", "b.txt")
	if _, errOut, code := bob.run("integrate", "-m", "unleased a"); code != cli.ExitLease || !strings.Contains(errOut, "a.txt") {
		t.Errorf("bob integrates an edit of a.txt he holds no lease on: exit %d, want 3 naming a.txt\n%s", code, errOut)
	}
	if _, errOut, code := alice.run("integrate", "-m", "nothing leased in b", "b.txt"); code != 0 {
		t.Errorf("integrate of a path without edits: exit %d, want 0\n%s", code, errOut)
	}
	alice.write("a.txt", "alice's a\n")
	alice.must("integrate", "-m", "alice's a")
	// Bob's edit of a.txt and alice's conflict on the same line.
	if out, errOut, code := bob.run("sync"); code != cli.ExitConflict || !strings.Contains(errOut, "a.txt") || out != "" {
		t.Errorf("bob's sync over his conflicting edit of a.txt: exit %d, want 4 naming a.txt\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if got := bob.read("a.txt"); got != "bob's a\n" {
		t.Errorf("after the refused sync, bob's a.txt holds %q, want his edit", got)
	}
	// Integrating over a mainline that moved on the same path is a conflict too (his lease on
	// a.txt comes after alice's, so the token is current).
	alice.must("lease", "release")
	bob.must("lease", "acquire", "a.txt")
	if _, errOut, code := bob.run("integrate", "-m", "bob's a", "a.txt"); code != cli.ExitConflict || !strings.Contains(errOut, "a.txt") {
		t.Errorf("bob integrates a.txt, changed in the mainline since his base: exit %d, want 4 naming a.txt\n%s", code, errOut)
	}
}

// removeAll removes a file or directory of a checkout.
func removeAll(dir, path string) error {
	return os.RemoveAll(filepath.Join(dir, filepath.FromSlash(path)))
}

// mkfile writes a file, creating its directory.
func mkfile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
