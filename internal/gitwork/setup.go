package gitwork

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ag-coord/ag/internal/checkout"
)

// Hooks are the git hooks ag installs, each running `ag hook NAME` with git's arguments.
var Hooks = []string{"pre-commit", "pre-push"}

// hookMarker is the line that marks a hook as ag's own, which ag init may write over.
const hookMarker = "# ag: installed by ag clone or ag init; `git commit --no-verify` skips it."

// Setup is what ag clone and ag init make a git working tree an ag workspace with.
type Setup struct {
	Server string
	// KeepServer keeps the server of a tree set up before, when it has one: Server was not
	// named on the command line.
	KeepServer bool
	Repository string // "": the tree's ag.repository
	Holder     string // "": the tree's own ag.holder, else DefaultHolder of its top
	// Exe is the ag the hooks and the credential helper run, by its absolute path so that
	// they work without ag on git's PATH; "": this process's executable.
	Exe string
}

// Done is a tree set up: the tree, and the remote at the server.
type Done struct {
	*Tree
	Remote      string `json:"remote"`      // the remote at the repository's URL
	RemoteAdded bool   `json:"remoteAdded"` // ag init added it
	URL         string `json:"url"`
	Hooks       string `json:"hooks"` // the directory of the hooks
}

// Clone clones repository from the server into dir (git clone, the token given to git only
// through the credential helper, from the environment) and sets the tree up as Init does.
// token is the one ag runs with, passed to git's helper in AG_TOKEN and written nowhere.
func Clone(ctx context.Context, dir, token string, s Setup) (*Done, error) {
	if s.Repository == "" {
		return nil, &checkout.UsageError{Err: errors.New("name the repository to clone")}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if s.Holder == "" {
		s.Holder = checkout.DefaultHolder(abs)
	}
	if err := checkout.CheckHolder(s.Holder); err != nil {
		return nil, &checkout.UsageError{Err: err}
	}
	if s.Exe, err = exe(s.Exe); err != nil {
		return nil, err
	}
	// Only ag's helper, for this clone: a helper of the user's configuration would be asked
	// too, and told to store the token git got.
	if _, err := gitCtx(ctx, "", helperEnv(token), "-c", "credential.helper=", "-c", "credential.helper="+helper(s.Exe, s.Server),
		"clone", "--origin", "origin", "--", RepoURL(s.Server, s.Repository), abs); err != nil {
		return nil, err
	}
	return Init(ctx, abs, s)
}

// Init sets up the git working tree at dir (or above it) for ag: ag.server and
// ag.repository, the holder in the tree's own configuration with the push option that sends
// it, git's credential helper for the server, a remote at the repository (the one there is,
// else "ag", added) pushing HEAD to refs/for/main, and the hooks. It checks everything before
// it writes anything: a hook of the user's is not overwritten. In a `git worktree add` tree it
// turns on extensions.worktreeConfig, so that the tree's holder is its own.
func Init(ctx context.Context, dir string, s Setup) (*Done, error) {
	t, err := locate(dir)
	if err != nil {
		return nil, &checkout.UsageError{Err: fmt.Errorf("%w: git init or git clone one first, or ag clone REPO DIR", err)}
	}
	if old, err := Find(t.Root); err == nil {
		s.Repository = cmp(s.Repository, old.Repository)
		s.Holder = cmp(s.Holder, old.Holder)
		if s.KeepServer && old.Server != "" {
			s.Server = old.Server
		}
	}
	if s.Repository == "" {
		return nil, &checkout.UsageError{Err: fmt.Errorf("--repository: name the ag repository %s works on", t.Root)}
	}
	t.Server, t.Repository, t.Holder = s.Server, s.Repository, cmp(s.Holder, checkout.DefaultHolder(t.Root))
	if err := checkout.CheckHolder(t.Holder); err != nil {
		return nil, &checkout.UsageError{Err: err}
	}
	if s.Exe, err = exe(s.Exe); err != nil {
		return nil, err
	}
	d := &Done{Tree: t, URL: t.URL(), Hooks: filepath.Join(t.CommonDir, "hooks")}
	if err := checkHooks(t.Root, d.Hooks, s.Exe); err != nil {
		return nil, err
	}
	if d.Remote, err = remoteAt(t.Root, d.URL); err != nil {
		return nil, err
	}
	if d.Remote == "" {
		if taken, _ := git(t.Root, nil, "config", "remote.ag.url"); taken != "" {
			return nil, &checkout.UsageError{Err: fmt.Errorf("the remote ag of %s points at %s, not %s: rename it (git remote rename ag OTHER) and run ag init again", t.Root, strings.TrimSpace(taken), d.URL)}
		}
		d.Remote, d.RemoteAdded = "ag", true
		if _, err := gitCtx(ctx, t.Root, nil, "remote", "add", "ag", d.URL); err != nil {
			return nil, err
		}
	}
	if err := writeConfig(ctx, t, d.Remote, s.Exe); err != nil {
		return nil, err
	}
	return d, writeHooks(d.Hooks, s.Exe)
}

// writeConfig writes ag's settings into the tree's git configuration: the repository's in the
// shared one, the holder and its push option in the tree's own.
func writeConfig(ctx context.Context, t *Tree, remote, exe string) error {
	cred := "credential." + t.Server + ".helper"
	scope := "--local"
	if on, _ := git(t.Root, nil, "config", "--bool", "extensions.worktreeConfig"); t.Linked || strings.TrimSpace(on) == "true" {
		scope = "--worktree"
	}
	steps := [][]string{
		{"--local", KeyServer, t.Server},
		{"--local", KeyRepository, t.Repository},
		{"--local", "remote." + remote + ".push", "HEAD:" + PushRef},
		// The empty helper first: git then asks ag's helper alone for the server's URLs, and
		// no helper of the user's is told to store the token.
		{"--local", "--unset-all", cred},
		{"--local", "--add", cred, ""},
		{"--local", "--add", cred, helper(exe, t.Server)},
	}
	if t.Linked {
		steps = append([][]string{{"--local", "extensions.worktreeConfig", "true"}}, steps...)
	}
	steps = append(steps,
		[]string{scope, KeyHolder, t.Holder},
		// The empty value drops the push options read before, the shared configuration's
		// holder among them in a linked tree.
		[]string{scope, "--unset-all", "push.pushOption"},
		[]string{scope, "--add", "push.pushOption", ""},
		[]string{scope, "--add", "push.pushOption", "ag.holder=" + t.Holder},
	)
	for _, step := range steps {
		_, err := gitCtx(ctx, t.Root, nil, append([]string{"config"}, step...)...)
		if err != nil && !(step[1] == "--unset-all" && exitCode(err, 5)) { // 5: nothing to unset
			return err
		}
	}
	return nil
}

// helperEnv answers the environment git runs ag's credential helper in: the token ag runs
// with (from --token, which the helper would not see, or AG_TOKEN), and no prompt for a
// password when the server refuses it.
func helperEnv(token string) []string {
	env := []string{"GIT_TERMINAL_PROMPT=0"}
	if token != "" {
		env = append(env, "AG_TOKEN="+token)
	}
	return env
}

// helper answers the credential.helper value that runs ag's helper for server: the server is
// named, so that it answers whatever AG_SERVER says where git runs.
func helper(exe, server string) string {
	return "!" + shellQuote(exe) + " git-credential --server " + shellQuote(server)
}

// hookScript answers the hook name that runs ag.
func hookScript(exe, name string) string {
	args := ""
	if name == "pre-push" {
		args = ` "$@"`
	}
	return "#!/bin/sh\n" + hookMarker + "\nexec " + shellQuote(exe) + " hook " + name + args + "\n"
}

// checkHooks refuses to set up a tree whose hooks ag would not run or would overwrite: git
// runs those of core.hooksPath instead, or one is the user's own and does not run ag's check.
func checkHooks(root, dir, exe string) error {
	if p, _ := git(root, nil, "config", "core.hooksPath"); strings.TrimSpace(p) != "" {
		return &checkout.UsageError{Err: fmt.Errorf("core.hooksPath is set (%s): git runs the hooks there, not ag's in %s: unset it, or have its pre-commit and pre-push hooks run `ag hook pre-commit` and `ag hook pre-push \"$@\"`", strings.TrimSpace(p), dir)}
	}
	for _, name := range Hooks {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if s := string(b); !strings.Contains(s, hookMarker) && !strings.Contains(s, " hook "+name) {
			run := strings.TrimPrefix(hookScript(exe, name), "#!/bin/sh\n"+hookMarker+"\nexec ")
			return &checkout.UsageError{Err: fmt.Errorf("%s is a hook of yours, which ag does not overwrite: add the line `%s || exit 1` to it (ag then leaves it as it is), or move it aside, and run ag init again",
				filepath.Join(dir, name), strings.TrimSuffix(run, "\n"))}
		}
	}
	return nil
}

// writeHooks writes ag's hooks into dir, over older ones of ag's; a hook of the user's that
// runs ag's check (checkHooks let it through) stays.
func writeHooks(dir, exe string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range Hooks {
		p := filepath.Join(dir, name)
		if b, err := os.ReadFile(p); err == nil && !strings.Contains(string(b), hookMarker) {
			continue
		}
		// A new file renamed over the old: git never runs half a hook.
		tmp := p + ".ag-new"
		if err := os.WriteFile(tmp, []byte(hookScript(exe, name)), 0o755); err != nil {
			return err
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			return err
		}
		if err := os.Rename(tmp, p); err != nil {
			return err
		}
	}
	return nil
}

// exe answers the ag to run: given, or this process's executable.
func exe(given string) (string, error) {
	if given != "" {
		return given, nil
	}
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the ag binary the hooks run: %w", err)
	}
	return filepath.Abs(p)
}

// shellQuote quotes s for sh, which runs git's hooks and "!" helpers.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// cmp answers a, or b when a is empty.
func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
