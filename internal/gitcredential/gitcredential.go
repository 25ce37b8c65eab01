package gitcredential

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"strings"
)

// Program is the name git looks for on PATH when configured with `credential.helper ag`: a
// link to ag under that name must act as `ag git-credential`, so the command line needs to
// know it.
const Program = "git-credential-ag"

// ErrNoToken is a request for the server's URL with no token to give: git must be told why it
// gets nothing, where a request for another host is answered nothing in silence.
var ErrNoToken = errors.New("no token")

// ErrTokenUnsendable refuses a token that would forge lines of the answer: git reads one
// attribute a line, so a newline in it would let the token set attributes of its own.
var ErrTokenUnsendable = errors.New("the token holds a newline or NUL, which git's credential protocol cannot carry")

// maxRequest bounds what a helper reads: git sends a few short lines.
const maxRequest = 64 << 10

// Answer reads git's request for action from in and answers the lines to write back to git:
// for "get" of a URL of the ag server at server, the user name ag (unless git has one) and
// token as the password, which /git/ accepts; "" for any other URL or action (store, erase,
// and those git may add), which git asks helpers to read and ignore, so that git asks its other
// helpers and the token never leaves for another host.
func Answer(in io.Reader, action, server, token string) (string, error) {
	attrs, err := ReadRequest(in)
	if err != nil || action != "get" || !ForServer(server, attrs) {
		return "", err
	}
	switch {
	case token == "":
		return "", ErrNoToken
	case strings.ContainsAny(token, "\n\x00"):
		return "", ErrTokenUnsendable
	}
	var b strings.Builder
	if attrs["username"] == "" {
		b.WriteString("username=ag\n")
	}
	b.WriteString("password=" + token + "\n")
	return b.String(), nil
}

// ReadRequest reads git's "key=value" lines up to a blank line or the end. Keys git repeats
// (wwwauth[], capability[]) keep their last value: none of them decides anything here.
func ReadRequest(in io.Reader) (map[string]string, error) {
	attrs := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(in, maxRequest))
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

// ForServer reports whether git asks for a URL of the ag server at server: the same scheme,
// host and port (a default port written or not), and, when git tells the path
// (credential.useHttpPath), one under the server's /git/. Anything less strict would hand the
// token to a host or a path that is not the server's git endpoint.
func ForServer(server string, attrs map[string]string) bool {
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

// portOf answers a URL's port, its scheme's default when it names none, so that
// https://h and https://h:443 compare equal.
func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}
