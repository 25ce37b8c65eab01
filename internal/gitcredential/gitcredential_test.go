package gitcredential_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/gitcredential"
)

// TestAnswer ensures the protocol's answer without the command around it: the token for the
// server's own URL, nothing for another host or action, and the two refusals as the errors
// the command line words (internal/cli's git-credential tests cover the cases at length).
func TestAnswer(t *testing.T) {
	const server, token = "https://ag.example", "agt_x"
	for _, c := range []struct {
		name, action, stdin, token, want string
		err                              error
	}{
		{"its server", "get", "protocol=https\nhost=ag.example\n\n", token, "username=ag\npassword=agt_x\n", nil},
		{"a user name git has", "get", "protocol=https\nhost=ag.example\nusername=bob\n", token, "password=agt_x\n", nil},
		{"another host", "get", "protocol=https\nhost=github.com\n\n", token, "", nil},
		{"store", "store", "protocol=https\nhost=ag.example\n\n", token, "", nil},
		{"no token", "get", "protocol=https\nhost=ag.example\n\n", "", "", gitcredential.ErrNoToken},
		{"no token, another host", "get", "protocol=https\nhost=github.com\n\n", "", "", nil},
		{"a token with a newline", "get", "protocol=https\nhost=ag.example\n\n", "a\npassword=b", "", gitcredential.ErrTokenUnsendable},
	} {
		got, err := gitcredential.Answer(strings.NewReader(c.stdin), c.action, server, c.token)
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("%s: Answer = %q, %v; want %q, %v", c.name, got, err, c.want, c.err)
		}
	}
}
