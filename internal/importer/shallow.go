package importer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ag-coord/ag/internal/checkout"
)

// Shallow is how much of a source's history an import takes: all of it (the zero value), the
// newest Depth commits of HEAD's history (git clone --depth), or the commits since Since, a
// date as git reads one (git clone --shallow-since: "2025-01-01", "6 months ago").
type Shallow struct {
	Depth int
	Since string
}

// Given reports whether s asks for less than the whole history.
func (s Shallow) Given() bool { return s.Depth != 0 || s.Since != "" }

// String says what s asks for, as the flags say it.
func (s Shallow) String() string {
	if s.Since != "" {
		return "--since " + s.Since
	}
	return "--depth " + strconv.Itoa(s.Depth)
}

func (s Shallow) check() error {
	switch {
	case s.Depth < 0:
		return &checkout.UsageError{Err: fmt.Errorf("--depth %d: the number of commits to import, 1 or more", s.Depth)}
	case s.Depth > 0 && s.Since != "":
		return &checkout.UsageError{Err: errors.New("--depth and --since each make a shallow clone: give one")}
	case s.Since != "" && strings.TrimSpace(s.Since) == "":
		return &checkout.UsageError{Err: errors.New("--since: a date, such as 2025-01-01 or \"6 months ago\"")}
	}
	return nil
}

// Fetch answers the git repository an import of src reads, in a temporary directory that remove
// removes: with shallow given, a shallow clone of src (a URL or a local git working tree) that
// CloneShallow makes; otherwise src's history fetched whole over git's protocol (FetchRemote),
// src being a URL.
func Fetch(ctx context.Context, src string, credential []byte, shallow Shallow, log io.Writer) (dir string, remove func(), err error) {
	if !shallow.Given() {
		return FetchRemote(ctx, src, credential, log)
	}
	return CloneShallow(ctx, src, credential, shallow, log)
}

// CloneShallow makes a shallow clone of src's HEAD with the git binary (`git clone --bare
// --depth N` or `--shallow-since DATE`, no tags) into a temporary repository (DIR/.git, as
// PlanGit reads a working tree's), and answers its directory and what removes it. src is a URL
// (https://, http://, git://), authenticated with credential ("user:token", or a token alone;
// nil for none) through a credential helper for src's host alone, given to git in its
// environment, never on its command line; or a local git working tree, cloned through git's
// protocol (file://) so that the clone is shallow. It writes git's messages to log.
func CloneShallow(ctx context.Context, src string, credential []byte, shallow Shallow, log io.Writer) (dir string, remove func(), err error) {
	if err := shallow.check(); err != nil {
		return "", nil, err
	}
	if _, err := exec.LookPath("git"); err != nil {
		return "", nil, fmt.Errorf("%s clones with git, which is not found: %w", shallow, err)
	}
	from := src
	env := append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	if IsRemote(src) {
		env = append(env, credentialEnv(src, credential)...)
	} else {
		abs, err := filepath.Abs(src)
		if err != nil {
			return "", nil, err
		}
		if !IsGitRepository(abs) {
			return "", nil, &checkout.UsageError{Err: fmt.Errorf("%s is not a git working tree: %s imports a git history, from a working tree or a URL", src, shallow)}
		}
		from = "file://" + filepath.ToSlash(abs)
	}
	dir, err = os.MkdirTemp("", "ag-import-*")
	if err != nil {
		return "", nil, err
	}
	remove = func() { _ = os.RemoveAll(dir) }
	args := []string{"clone", "--bare", "--no-tags", "--single-branch"}
	if shallow.Depth > 0 {
		args = append(args, "--depth", strconv.Itoa(shallow.Depth))
	} else {
		args = append(args, "--shallow-since="+shallow.Since)
	}
	args = append(args, "--", from, filepath.Join(dir, ".git"))
	fmt.Fprintf(log, "cloning %s with %s...\n", redacted(src), shallow)
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		remove()
		return "", nil, fmt.Errorf("git clone %s %s: %w", shallow, redacted(src), err)
	}
	return dir, remove, nil
}

// credentialEnv answers the environment that has git authenticate to src's host, and to no
// other, with credential (as gitcredential.ForgeAuth reads one), asking no other credential
// helper and storing it nowhere. Nothing for an empty credential.
func credentialEnv(src string, credential []byte) []string {
	c := strings.TrimSpace(string(credential))
	u, err := url.Parse(src)
	if c == "" || err != nil {
		return nil
	}
	user, token, ok := strings.Cut(c, ":")
	if !ok {
		user, token = "ag", c
	}
	const helper = `!f() { test "$1" = get || exit 0; printf 'username=%s\npassword=%s\n' "$AG_IMPORT_USERNAME" "$AG_IMPORT_PASSWORD"; }; f`
	return []string{
		"GIT_CONFIG_COUNT=2",
		"GIT_CONFIG_KEY_0=credential.helper", "GIT_CONFIG_VALUE_0=",
		"GIT_CONFIG_KEY_1=credential." + u.Scheme + "://" + u.Host + ".helper", "GIT_CONFIG_VALUE_1=" + helper,
		"AG_IMPORT_USERNAME=" + user, "AG_IMPORT_PASSWORD=" + token,
	}
}
