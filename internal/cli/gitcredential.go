package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ag-coord/ag/internal/gitcredential"
)

// Args answers the ag command line of a process started with argv (its program name first):
// the arguments after the name, or, when started as git-credential-ag, those of
// `ag git-credential`.
func Args(argv []string) []string {
	if len(argv) == 0 {
		return nil
	}
	if strings.TrimSuffix(filepath.Base(argv[0]), ".exe") == gitcredential.Program {
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

// gitCredential answers git's request for the action with the token of --token or $AG_TOKEN;
// the protocol is internal/gitcredential's, the wording of a refusal and its exit code ours.
func (g *globals) gitCredential(in io.Reader, action string) error {
	token := g.token
	if token == "" {
		token = os.Getenv("AG_TOKEN")
	}
	answer, err := gitcredential.Answer(in, action, g.server, token)
	switch {
	case errors.Is(err, gitcredential.ErrNoToken):
		return withExit(ExitAuth, fmt.Errorf("git-credential: no token for %s: set AG_TOKEN or pass --token", g.server))
	case errors.Is(err, gitcredential.ErrTokenUnsendable):
		return withExit(ExitAuth, fmt.Errorf("git-credential: %w", err))
	case err != nil || answer == "":
		return err
	}
	_, err = io.WriteString(g.stdout, answer)
	return err
}
