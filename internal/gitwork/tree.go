package gitwork

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
)

// The keys of git's configuration that make a git working tree an ag workspace.
const (
	KeyServer     = "ag.server"
	KeyRepository = "ag.repository"
	KeyHolder     = "ag.holder"
)

// MainBranch is the one branch ag serves, the mainline, and PushRef where a push to ag goes.
const (
	MainBranch = "main"
	PushRef    = "refs/for/" + MainBranch
)

// ErrNotGit is Find's answer for a directory in no git working tree.
var ErrNotGit = errors.New("not in a git working tree")

// NotSetUpError is Find's answer for a git working tree ag was not set up in.
type NotSetUpError struct{ Root string }

func (e *NotSetUpError) Error() string {
	return fmt.Sprintf("%s is a git working tree that ag was not set up in: run `ag init --repository REPO` in it, or `ag clone REPO DIR`", e.Root)
}

// Tree is a git working tree set up for ag.
type Tree struct {
	// Root is the working tree's top, named from the directory the command was given (not
	// with symbolic links resolved, as git names it), so that paths given relative to that
	// directory are found in it.
	Root      string `json:"root"`
	GitDir    string `json:"gitDir"`    // this working tree's git directory, absolute
	CommonDir string `json:"commonDir"` // the repository's, shared by its `git worktree add` trees, absolute
	Linked    bool   `json:"linked"`    // a `git worktree add` tree: GitDir is not CommonDir

	Server     string `json:"server"`     // ag.server
	Repository string `json:"repository"` // ag.repository
	// Holder is the label the tree's leases are held under: ag.holder, else DefaultHolder of
	// Root. A linked tree reads ag.holder only from outside the repository's shared config
	// (its own, `git config --worktree`), where the main tree's is, so that two working trees
	// are two holders.
	Holder string `json:"holder"`
}

// URL answers the git URL of the tree's repository on its server.
func (t *Tree) URL() string { return RepoURL(t.Server, t.Repository) }

// RepoURL answers the git URL of repository on the ag server at server (docs/git.md).
func RepoURL(server, repository string) string {
	return strings.TrimRight(server, "/") + "/git/" + repository + ".git"
}

// sameURL reports whether two git URLs name one repository: git takes either with or without
// the trailing .git and /.
func sameURL(a, b string) bool {
	trim := func(u string) string { return strings.TrimSuffix(strings.TrimRight(u, "/"), ".git") }
	return trim(a) == trim(b)
}

// Find answers the git working tree containing dir as ag set it up: ErrNotGit outside any, a
// *NotSetUpError in one without ag.repository.
func Find(dir string) (*Tree, error) {
	loc, err := locate(dir)
	if err != nil {
		return nil, err
	}
	vals, err := git(loc.Root, nil, "config", "--show-scope", "-z", "--get-regexp", `^ag\.`)
	if err != nil && !exitCode(err, 1) { // 1: no such key
		return nil, err
	}
	t := loc
	// "SCOPE NUL KEY NL VALUE NUL", in the order git reads them: the last value wins.
	parts := strings.Split(vals, "\x00")
	for i := 0; i+1 < len(parts); i += 2 {
		scope := parts[i]
		key, value, _ := strings.Cut(parts[i+1], "\n")
		switch key {
		case KeyServer:
			t.Server = value
		case KeyRepository:
			t.Repository = value
		case KeyHolder:
			if !t.Linked || scope != "local" {
				t.Holder = value
			}
		}
	}
	if t.Repository == "" {
		return nil, &NotSetUpError{Root: t.Root}
	}
	if t.Holder == "" {
		t.Holder = checkout.DefaultHolder(t.Root)
	}
	return t, nil
}

// locate answers the git working tree containing dir, ag's settings not yet read.
func locate(dir string) (*Tree, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	out, err := git(abs, nil, "rev-parse", "--path-format=absolute", "--is-inside-work-tree", "--git-dir", "--git-common-dir", "--show-prefix")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", abs, ErrNotGit)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 || lines[0] != "true" {
		// A bare repository, or inside a git directory: no working tree.
		return nil, fmt.Errorf("%s: %w", abs, ErrNotGit)
	}
	// The top, as the directory was named: one level up per segment of its path in the tree.
	root := abs
	for _, seg := range strings.Split(lines[3], "/") {
		if seg != "" {
			root = filepath.Dir(root)
		}
	}
	gitDir, common := filepath.Clean(lines[1]), filepath.Clean(lines[2])
	return &Tree{Root: root, GitDir: gitDir, CommonDir: common, Linked: gitDir != common}, nil
}

// Workspace answers the tree as a checkout workspace for the lease commands: its leases are
// the holder's active ones as the server lists them, since a git working tree keeps none.
func (t *Tree) Workspace(ctx context.Context, c *client.Client) (*checkout.Workspace, error) {
	leases, err := t.listLeases(ctx, c, true)
	if err != nil {
		return nil, err
	}
	held := make([]checkout.HeldLease, 0, len(leases))
	for _, l := range leases {
		held = append(held, checkout.HeldLease{ID: l.GetId(), Token: l.GetFencingToken(), Paths: l.GetPaths(), ExpiresAt: l.GetExpiresAt().AsTime()})
	}
	gitlinks, err := t.gitlinks()
	if err != nil {
		return nil, err
	}
	co := checkout.Stateless(t.Root, t.Repository, t.Server, t.Holder, held, gitlinks)
	return &checkout.Workspace{Checkout: co, Client: c}, nil
}

// listLeases answers the repository's active leases: the holder's alone when mine.
func (t *Tree) listLeases(ctx context.Context, c *client.Client, mine bool) ([]*agwpv1.Lease, error) {
	holder := ""
	if mine {
		who, err := c.Admin.WhoAmI(ctx, &agwpv1.WhoAmIRequest{})
		if err != nil {
			return nil, err
		}
		holder = who.GetPrincipal().GetName() + "|" + t.Holder
	}
	return checkout.AllPages(func(token string) ([]*agwpv1.Lease, string, error) {
		res, err := c.Leases.ListLeases(ctx, &agwpv1.ListLeasesRequest{Repository: t.Repository, Holder: holder, PageSize: 1000, PageToken: token})
		return res.GetLeases(), res.GetNextPageToken(), err
	})
}

// gitlinks answers the paths of the submodules in the tree's index.
func (t *Tree) gitlinks() ([]string, error) {
	out, err := git(t.Root, nil, "ls-files", "--stage", "-z")
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, e := range strings.Split(out, "\x00") {
		// "MODE OBJECT STAGE\tPATH"
		if meta, p, ok := strings.Cut(e, "\t"); ok && strings.HasPrefix(meta, "160000 ") {
			paths = append(paths, p)
		}
	}
	return paths, nil
}

// Remote answers the name of the tree's remote at its repository's URL.
func (t *Tree) Remote() (string, error) {
	name, err := remoteAt(t.Root, t.URL())
	if err == nil && name == "" {
		err = fmt.Errorf("no remote of %s points at %s: run `ag init` in it", t.Root, t.URL())
	}
	return name, err
}

// remoteAt answers the name of the remote of the tree at root whose URL is url, "" when none.
func remoteAt(root, url string) (string, error) {
	out, err := git(root, nil, "config", "-z", "--get-regexp", `^remote\..*\.url$`)
	if err != nil && !exitCode(err, 1) {
		return "", err
	}
	for _, e := range strings.Split(out, "\x00") {
		key, value, _ := strings.Cut(e, "\n")
		if sameURL(value, url) {
			return strings.TrimSuffix(strings.TrimPrefix(key, "remote."), ".url"), nil
		}
	}
	return "", nil
}

// GitError is git failing: its exit status and what it said on stderr.
type GitError struct {
	Args   []string
	Err    error
	Stderr string
}

func (e *GitError) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" {
		msg = e.Err.Error()
	}
	cmd := e.Args[0]
	for i := 0; i+2 < len(e.Args) && e.Args[i] == "-c"; i += 2 {
		cmd = e.Args[i+2]
	}
	// It quotes the server ("remote: ...") and the repository's paths: whoever prints it
	// escapes it for a terminal (termsafe).
	return "git " + cmd + ": " + msg
}

func (e *GitError) Unwrap() error { return e.Err }

// exitCode reports whether err is git's exit with code.
func exitCode(err error, code int) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == code
}

// git runs git in dir with env added to this process's, and answers its stdout. The
// environment is kept: git runs the hooks with GIT_INDEX_FILE and the like, which the commands
// they run must see.
func git(dir string, env []string, args ...string) (string, error) {
	return gitIn(context.Background(), dir, env, nil, args...)
}

// gitCtx is git, ended with ctx.
func gitCtx(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	return gitIn(ctx, dir, env, nil, args...)
}

// gitIn is git with stdin.
func gitIn(ctx context.Context, dir string, env []string, stdin io.Reader, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(cmd.Environ(), env...)
	}
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &GitError{Args: args, Err: err, Stderr: stderr.String()}
	}
	return stdout.String(), nil
}
