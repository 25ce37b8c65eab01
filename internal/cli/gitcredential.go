package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// gitCredentialProgram is the name git looks for on PATH when configured with
// `credential.helper ag`: a link to ag under that name runs `ag git-credential`.
const gitCredentialProgram = "git-credential-ag"

// Args answers the ag command line of a process started with argv (its program name first):
// the arguments after the name, or, when started as git-credential-ag, those of
// `ag git-credential`.
func Args(argv []string) []string {
	if len(argv) == 0 {
		return nil
	}
	if strings.TrimSuffix(filepath.Base(argv[0]), ".exe") == gitCredentialProgram {
		return append([]string{"git-credential"}, argv[1:]...)
	}
	return argv[1:]
}

func newGitCredentialCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "git-credential get|store|erase",
		Short: "git's credential helper for the ag server: gives git the token for its /git/ URLs",
		Long: `A git credential helper: git runs it to ask for the user name and password of a URL it was
answered 401 for. For the ag server's own URLs it answers the user name ag and the token
(--token, or $AG_TOKEN) as the password, which /git/ accepts; for any other host, or another
scheme or port, it answers nothing, so git asks its other helpers. "store" and "erase" do
nothing: the token is not git's to keep.

The server is --server or $AG_SERVER (default http://127.0.0.1:7777), never one a checkout's
.ag/checkout.json names: a directory git works in must not choose where the token goes.

  git config --global credential.helper '!ag git-credential'
  git clone "$AG_SERVER/git/app.git"

or put a link named git-credential-ag to ag on PATH and use credential.helper ag. git passes
its environment to the helper, so AG_SERVER and AG_TOKEN must be set where git runs. The token
is written to git on stdout, and nowhere else.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.gitCredential(cmd.InOrStdin(), args[0])
		},
	}
}

// gitCredential answers git's request for the action. Only "get" answers anything; any other
// action (store, erase, and those git may add) is read and ignored, as git asks of helpers.
func (g *globals) gitCredential(in io.Reader, action string) error {
	attrs, err := readCredentialRequest(in)
	if err != nil || action != "get" {
		return err
	}
	if !credentialForServer(g.server, attrs) {
		return nil
	}
	token := g.token
	if token == "" {
		token = os.Getenv("AG_TOKEN")
	}
	switch {
	case token == "":
		return withExit(ExitAuth, fmt.Errorf("git-credential: no token for %s: set AG_TOKEN or pass --token", g.server))
	case strings.ContainsAny(token, "\n\x00"):
		return withExit(ExitAuth, errors.New("git-credential: the token holds a newline or NUL, which git's credential protocol cannot carry"))
	}
	var b strings.Builder
	if attrs["username"] == "" {
		b.WriteString("username=ag\n")
	}
	b.WriteString("password=" + token + "\n")
	_, err = io.WriteString(g.stdout, b.String())
	return err
}

// maxCredentialRequest bounds what a helper reads: git sends a few short lines.
const maxCredentialRequest = 64 << 10

// readCredentialRequest reads git's "key=value" lines up to a blank line or the end. Keys it
// repeats (wwwauth[], capability[]) keep their last value: none of them is used.
func readCredentialRequest(in io.Reader) (map[string]string, error) {
	attrs := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(in, maxCredentialRequest))
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" {
			break
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			attrs[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("git-credential: read git's request: %w", err)
	}
	return attrs, nil
}

// credentialForServer reports whether git asks for a URL of the ag server at server: the same
// scheme, host and port (a default port written or not), and, when git tells the path
// (credential.useHttpPath), one under the server's /git/.
func credentialForServer(server string, attrs map[string]string) bool {
	s, err := url.Parse(server)
	if err != nil || (s.Scheme != "http" && s.Scheme != "https") || s.Host == "" {
		return false
	}
	if !strings.EqualFold(attrs["protocol"], s.Scheme) || attrs["host"] == "" {
		return false
	}
	asked, err := url.Parse(s.Scheme + "://" + attrs["host"] + "/")
	if err != nil || asked.User != nil || asked.Path != "/" || asked.RawQuery != "" || asked.Fragment != "" {
		return false
	}
	if !strings.EqualFold(asked.Hostname(), s.Hostname()) || portOf(asked) != portOf(s) {
		return false
	}
	if p, ok := attrs["path"]; ok && p != "" {
		prefix := path.Join("/", s.Path, "git") + "/"
		if !strings.HasPrefix(path.Clean("/"+p)+"/", prefix) {
			return false
		}
	}
	return true
}

// portOf answers a URL's port, its scheme's default when it names none.
func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}
