package gitcredential

import (
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// ForgeAuth answers the HTTP authentication ag sends a forge with a credential as people write
// one in a file: "user:token", or a token alone, sent with the user name "ag" (GitHub, GitLab and
// Gitea look at the token only). nil for an empty credential. The forge mirror pushes with it,
// and `ag repo import` fetches with it.
func ForgeAuth(credential []byte) transport.AuthMethod {
	c := strings.TrimSpace(string(credential))
	if c == "" {
		return nil
	}
	user, token, ok := strings.Cut(c, ":")
	if !ok {
		user, token = "ag", c
	}
	return &githttp.BasicAuth{Username: user, Password: token}
}
