package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// runGitCredential runs `ag ARGS...` with stdin and the environment's AG_SERVER and AG_TOKEN as
// given, and answers what it printed and its exit code.
func runGitCredential(t *testing.T, server, token, stdin string, args ...string) (string, string, int) {
	t.Setenv("AG_SERVER", server)
	t.Setenv("AG_TOKEN", token)
	var stdout, stderr bytes.Buffer
	root := newRoot(&stdout, &stderr)
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	err := usageOf(root.ExecuteContext(context.Background()))
	if err != nil {
		stderr.WriteString("ag: " + Explain(err) + "\n")
	}
	return stdout.String(), stderr.String(), ExitCode(err)
}

// TestGitCredentialAnswersForItsServerOnly ensures `ag git-credential get` gives the token for
// the server's own scheme, host and port (and path under /git/ when git tells it), nothing for
// any other URL, and nothing for store and erase; and that it never prints the token but in
// its answer.
func TestGitCredentialAnswersForItsServerOnly(t *testing.T) {
	const token = "agt_the-token-of-this-agent"
	answer := "username=ag\npassword=" + token + "\n"
	for _, c := range []struct {
		name, server, stdin string
		args                []string
		want                string
	}{
		{"its server", "http://127.0.0.1:7777", "protocol=http\nhost=127.0.0.1:7777\n\n", nil, answer},
		{"without the final blank line", "http://127.0.0.1:7777", "protocol=http\nhost=127.0.0.1:7777\n", nil, answer},
		{"the path under /git/", "https://ag.example", "protocol=https\nhost=ag.example\npath=git/app.git\n\n", nil, answer},
		{"the default port written", "https://ag.example", "protocol=https\nhost=ag.example:443\n\n", nil, answer},
		{"the default port left out", "https://ag.example:443/", "protocol=https\nhost=ag.example\n\n", nil, answer},
		{"the host in capitals", "https://ag.example", "protocol=https\nhost=AG.example\n\n", nil, answer},
		{"IPv6", "http://[::1]:7777", "protocol=http\nhost=[::1]:7777\n\n", nil, answer},
		{"a server under a path", "https://ag.example/team/", "protocol=https\nhost=ag.example\npath=team/git/app.git\n\n", nil, answer},
		{"git's newer attributes", "https://ag.example", "capability[]=authtype\nprotocol=https\nhost=ag.example\nwwwauth[]=Basic realm=\"ag\"\n\n", nil, answer},
		{"a user name git has", "https://ag.example", "protocol=https\nhost=ag.example\nusername=bob\n\n", nil, "password=" + token + "\n"},
		{"the flag's server", "https://other.example", "protocol=https\nhost=ag.example\n\n", []string{"--server", "https://ag.example", "git-credential", "get"}, answer},

		{"another host", "https://ag.example", "protocol=https\nhost=github.com\n\n", nil, ""},
		{"a host that ends like it", "https://ag.example", "protocol=https\nhost=evil-ag.example\n\n", nil, ""},
		{"another port", "https://ag.example", "protocol=https\nhost=ag.example:8443\n\n", nil, ""},
		{"plain HTTP to an HTTPS server", "https://ag.example", "protocol=http\nhost=ag.example\n\n", nil, ""},
		{"ssh", "https://ag.example", "protocol=ssh\nhost=ag.example\n\n", nil, ""},
		{"no host", "https://ag.example", "protocol=https\n\n", nil, ""},
		{"a host with a user", "https://ag.example", "protocol=https\nhost=x@ag.example\n\n", nil, ""},
		{"a path outside /git/", "https://ag.example", "protocol=https\nhost=ag.example\npath=other/app.git\n\n", nil, ""},
		{"a path climbing out of /git/", "https://ag.example", "protocol=https\nhost=ag.example\npath=git/../admin\n\n", nil, ""},
		{"a path outside the server's", "https://ag.example/team", "protocol=https\nhost=ag.example\npath=git/app.git\n\n", nil, ""},
		{"attributes after the blank line", "https://ag.example", "protocol=https\n\nhost=ag.example\n", nil, ""},
		{"store", "https://ag.example", "protocol=https\nhost=ag.example\nusername=ag\npassword=x\n\n", []string{"git-credential", "store"}, ""},
		{"erase", "https://ag.example", "protocol=https\nhost=ag.example\n\n", []string{"git-credential", "erase"}, ""},
		{"an action git may add", "https://ag.example", "protocol=https\nhost=ag.example\n\n", []string{"git-credential", "capabilities"}, ""},
	} {
		args := c.args
		if args == nil {
			args = []string{"git-credential", "get"}
		}
		out, errOut, code := runGitCredential(t, c.server, token, c.stdin, args...)
		if code != 0 || out != c.want {
			t.Errorf("%s: exit %d, printed %q (stderr %q), want %q", c.name, code, out, errOut, c.want)
		}
		if strings.Contains(errOut, token) {
			t.Errorf("%s: stderr holds the token: %q", c.name, errOut)
		}
	}
}

// TestGitCredentialWithoutAToken ensures a request for the server's URL without a token says
// so on stderr (which git shows its user) with the auth exit code, and answers nothing, and
// that a token git's protocol cannot carry is refused without being printed.
func TestGitCredentialWithoutAToken(t *testing.T) {
	out, errOut, code := runGitCredential(t, "https://ag.example", "", "protocol=https\nhost=ag.example\n\n", "git-credential", "get")
	if code != ExitAuth || out != "" || !strings.Contains(errOut, "AG_TOKEN") {
		t.Errorf("no token: exit %d, printed %q, stderr %q; want exit %d, nothing, and a message naming AG_TOKEN", code, out, errOut, ExitAuth)
	}
	out, errOut, code = runGitCredential(t, "https://ag.example", "", "protocol=https\nhost=github.com\n\n", "git-credential", "get")
	if code != 0 || out != "" || errOut != "" {
		t.Errorf("no token, another host: exit %d, printed %q, stderr %q; want nothing at all", code, out, errOut)
	}
	const broken = "agt_one\npassword=agt_two"
	out, errOut, code = runGitCredential(t, "https://ag.example", broken, "protocol=https\nhost=ag.example\n\n", "git-credential", "get")
	if code != ExitAuth || out != "" || strings.Contains(errOut, "agt_") {
		t.Errorf("a token with a newline: exit %d, printed %q, stderr %q; want exit %d, nothing, and no token", code, out, errOut, ExitAuth)
	}
}

// TestArgsOfGitCredentialAg ensures ag started as git-credential-ag (what `credential.helper
// ag` runs) is `ag git-credential`, and under any other name takes its arguments as they are.
func TestArgsOfGitCredentialAg(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"/usr/local/bin/git-credential-ag", "get"}, "git-credential get"},
		{[]string{"/c/bin/git-credential-ag.exe", "erase"}, "git-credential erase"},
		{[]string{"/usr/local/bin/ag", "status"}, "status"},
		{[]string{"ag"}, ""},
		{nil, ""},
	} {
		if got := strings.Join(Args(c.argv), " "); got != c.want {
			t.Errorf("Args(%q) = %q, want %q", c.argv, got, c.want)
		}
	}
}
