package cli_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// gitUser is someone working in git working trees of the server's repository app with the
// token of one principal: git and ag run as processes, as a shell runs them, in an
// environment with no git configuration of the machine's, so that git runs ag (this test
// binary, runAsAg) as its credential helper and hooks.
type gitUser struct {
	t     *testing.T
	token string
	env   []string
}

// gitServer is a server holding the repository app with a.txt and d/b.txt.
func gitServer(t *testing.T, backend string) *agtest.Server {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	srv := agtest.Start(t, agtest.Options{Backend: backend})
	src := t.TempDir()
	mkfile(t, filepath.Join(src, "a.txt"), "a\n")
	mkfile(t, filepath.Join(src, "d", "b.txt"), "b\n")
	if out, errOut, code := runCLI("repo", "import", "app", src, "--server", srv.URL, "--token", srv.AdminToken); code != 0 {
		t.Fatalf("ag repo import: exit %d\n%s%s", code, out, errOut)
	}
	return srv
}

// newGitUser creates the principal name (an agent) and answers it as a git user.
func newGitUser(t *testing.T, srv *agtest.Server, name string) *gitUser {
	t.Helper()
	res, err := srv.Admin.Admin.CreatePrincipal(context.Background(), &agwpv1.CreatePrincipalRequest{Name: name, Role: agwpv1.Role_ROLE_AGENT})
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	return &gitUser{t: t, token: res.GetToken(), env: []string{
		"HOME=" + home, "XDG_CONFIG_HOME=" + home, "PATH=" + os.Getenv("PATH"), "LC_ALL=C", "TZ=UTC",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "GIT_AUTHOR_NAME=" + name, "GIT_AUTHOR_EMAIL=" + name + "@example.com",
		"GIT_COMMITTER_NAME=" + name, "GIT_COMMITTER_EMAIL=" + name + "@example.com",
		runAsAg + "=1", "AG_SERVER=" + srv.URL, "AG_TOKEN=" + res.GetToken(),
	}}
}

// run runs a program in dir with stdin, and answers what it printed and its exit code.
func (u *gitUser) run(dir, stdin, program string, args ...string) (stdout, stderr string, code int) {
	cmd := exec.Command(program, args...)
	cmd.Dir, cmd.Env, cmd.Stdin = dir, u.env, strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		u.t.Fatalf("%s %s: %v", program, strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// ag runs ag (this test binary) in dir.
func (u *gitUser) ag(dir string, args ...string) (stdout, stderr string, code int) {
	return u.run(dir, "", os.Args[0], args...)
}

// must runs program in dir and fails the test unless it exits 0.
func (u *gitUser) must(dir, program string, args ...string) string {
	u.t.Helper()
	if program == "ag" {
		program = os.Args[0]
	}
	out, errOut, code := u.run(dir, "", program, args...)
	if code != 0 {
		u.t.Fatalf("%s %s in %s: exit %d\nstdout:\n%s\nstderr:\n%s", filepath.Base(program), strings.Join(args, " "), dir, code, out, errOut)
	}
	return out
}

// acquire leases path for the tree at dir and answers the lease.
func (u *gitUser) acquire(dir, path string) *agwpv1.Lease {
	u.t.Helper()
	l := &agwpv1.Lease{}
	if err := protojson.Unmarshal([]byte(u.must(dir, "ag", "lease", "acquire", path, "--json")), l); err != nil {
		u.t.Fatalf("ag lease acquire --json: %v", err)
	}
	return l
}

// refused commits in dir what is staged, expecting the pre-commit hook to refuse it with
// exactly the lines want on stderr (besides git's and ag's last line).
func (u *gitUser) refused(dir string, want ...string) string {
	u.t.Helper()
	out, errOut, code := u.run(dir, "", "git", "commit", "-q", "-m", "refused")
	if code == 0 {
		u.t.Fatalf("git commit in %s: exit 0, want the hook to refuse\n%s%s", dir, out, errOut)
	}
	for _, w := range want {
		if !strings.Contains(errOut, w+"\n") {
			u.t.Errorf("git commit in %s: stderr lacks %q:\n%s", dir, w, errOut)
		}
	}
	return errOut
}

// TestGitClone ensures ag clone makes a git working tree of the mainline whose configuration
// holds no token, whose hooks refuse a commit of a path not under a current lease of its
// holder (naming another holder's lease, as the server would) and let a leased one through,
// and in which the lease commands, ag status and ag sync work as in a checkout.
func TestGitClone(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			srv := gitServer(t, backend)
			alice, bob := newGitUser(t, srv, "alice"), newGitUser(t, srv, "bob")
			top := t.TempDir()
			dir := filepath.Join(top, "alice")
			out := alice.must(top, "ag", "clone", "app", "alice", "--holder", "a1")
			if !strings.Contains(out, "holder a1; remote origin ("+srv.URL+"/git/app.git) pushes to refs/for/main") {
				t.Errorf("ag clone printed %q", out)
			}
			if log := alice.must(dir, "git", "log", "--format=%s"); !strings.HasSuffix(log, "Create repository app\n") || !strings.HasPrefix(log, "import of ") {
				t.Errorf("git log of the clone:\n%s", log)
			}
			checkCloneConfig(t, alice, dir, srv.URL)

			// An unleased path, then a leased one.
			mkfile(t, filepath.Join(dir, "a.txt"), "a by alice\n")
			alice.must(dir, "git", "add", "a.txt")
			alice.refused(dir, repo.LeaseRefusal("a.txt", "", time.Time{}))
			alice.acquire(dir, "a.txt")
			alice.must(dir, "git", "commit", "-q", "-m", "a by alice")

			// A path another holder leases is refused naming it; a rename needs both sides.
			bobDir := filepath.Join(top, "bob")
			bob.must(top, "ag", "clone", "app", bobDir, "--holder", "b1")
			held := bob.acquire(bobDir, "d/")
			mkfile(t, filepath.Join(dir, "d", "b.txt"), "b by alice\n")
			alice.must(dir, "git", "mv", "a.txt", "e.txt")
			alice.must(dir, "git", "add", "d/b.txt")
			alice.refused(dir, repo.LeaseRefusal("d/b.txt", "bob|b1", held.GetExpiresAt().AsTime()),
				repo.LeaseRefusal("e.txt", "", time.Time{}))
			alice.acquire(dir, "e.txt")
			alice.refused(dir, repo.LeaseRefusal("d/b.txt", "bob|b1", held.GetExpiresAt().AsTime()))
			alice.must(dir, "git", "reset", "-q", "d/b.txt")
			alice.must(dir, "git", "checkout", "d/b.txt")
			alice.must(dir, "git", "commit", "-q", "-m", "rename a")

			checkTreeLeases(t, alice, dir)
			checkPrePush(t, alice, dir, srv.URL, held)
			checkGitSync(t, srv, alice, dir)
		})
	}
}

// checkCloneConfig checks what ag clone wrote into the clone's configuration, and that the
// token is nowhere in .git.
func checkCloneConfig(t *testing.T, u *gitUser, dir, server string) {
	t.Helper()
	for key, want := range map[string]string{
		"ag.server": server, "ag.repository": "app", "ag.holder": "a1", "remote.origin.push": "HEAD:refs/for/main",
	} {
		if got := strings.TrimSpace(u.must(dir, "git", "config", "--get", key)); got != want {
			t.Errorf("git config %s = %q, want %q", key, got, want)
		}
	}
	if got := u.must(dir, "git", "config", "--get-all", "push.pushOption"); got != "\nag.holder=a1\n" {
		t.Errorf("push.pushOption = %q, want the reset and ag.holder=a1", got)
	}
	helper := u.must(dir, "git", "config", "--get-all", "credential."+server+".helper")
	if !strings.Contains(helper, "'"+os.Args[0]+"' git-credential --server '"+server+"'") {
		t.Errorf("credential helper %q does not run this ag for %s", helper, server)
	}
	for _, hook := range []string{"pre-commit", "pre-push"} {
		if info, err := os.Stat(filepath.Join(dir, ".git", "hooks", hook)); err != nil || info.Mode()&0o111 == 0 {
			t.Errorf("hook %s: %v, %v", hook, info, err)
		}
	}
	err := filepath.WalkDir(filepath.Join(dir, ".git"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(u.token)) {
			t.Errorf("%s holds the token", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkTreeLeases checks the lease commands and ag status in a git working tree: the holder's
// leases, as in a checkout.
func checkTreeLeases(t *testing.T, u *gitUser, dir string) {
	t.Helper()
	mkfile(t, filepath.Join(dir, "new.txt"), "untracked\n")
	status := u.must(filepath.Join(dir, "d"), "ag", "status")
	for _, want := range []string{"repository app, git working tree " + dir + " as a1\n", "?? new.txt\n", "leases:\n", "alice|a1", "a.txt", "e.txt"} {
		if !strings.Contains(status, want) {
			t.Errorf("ag status lacks %q:\n%s", want, status)
		}
	}
	var st struct {
		Holder  string
		Changes []struct{ Status, Path string }
		Leases  []map[string]any
	}
	decode(t, "ag status --json", u.must(dir, "ag", "status", "--json"), &st)
	if st.Holder != "a1" || len(st.Changes) != 1 || st.Changes[0].Path != "new.txt" || len(st.Leases) != 2 {
		t.Errorf("ag status --json: %+v", st)
	}
	if out := u.must(dir, "ag", "lease", "renew", "--ttl", "10m"); strings.Count(out, "renewed ") != 2 {
		t.Errorf("ag lease renew:\n%s", out)
	}
	if out := u.must(dir, "ag", "lease", "list"); !strings.Contains(out, "alice|a1") || !strings.Contains(out, "bob|b1") {
		t.Errorf("ag lease list:\n%s", out)
	}
	// A path relative to the directory the command works in, as in a checkout.
	u.acquire(filepath.Join(dir, "d"), "../new.txt")
	if out := u.must(dir, "ag", "lease", "release"); strings.Count(out, "released ") != 3 {
		t.Errorf("ag lease release:\n%s", out)
	}
	if out := u.must(dir, "ag", "status"); !strings.Contains(out, "no leases held") {
		t.Errorf("ag status after release:\n%s", out)
	}
	if err := os.Remove(filepath.Join(dir, "new.txt")); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := u.ag(dir, "integrate", "-m", "x"); code != 2 || !strings.Contains(errOut, "is a git working tree") {
		t.Errorf("ag integrate in a git working tree: exit %d, %s", code, errOut)
	}
}

// checkPrePush checks ag's pre-push hook as git runs it: the paths the pushed commit changes
// since the mainline as the tree knows it, each under a current lease of the holder; a push
// to another remote is not ag's.
func checkPrePush(t *testing.T, u *gitUser, dir, server string, held *agwpv1.Lease) {
	t.Helper()
	mkfile(t, filepath.Join(dir, "d", "b.txt"), "b by alice\n")
	u.must(dir, "git", "commit", "-q", "--no-verify", "-am", "b by alice")
	head := strings.TrimSpace(u.must(dir, "git", "rev-parse", "HEAD"))
	line := "refs/heads/main " + head + " refs/for/main 0000000000000000000000000000000000000000\n"
	_, errOut, code := u.run(dir, line, os.Args[0], "hook", "pre-push", "origin", server+"/git/app.git")
	for _, want := range []string{
		repo.LeaseRefusal("d/b.txt", "bob|b1", held.GetExpiresAt().AsTime()),
		repo.LeaseRefusal("a.txt", "", time.Time{}), repo.LeaseRefusal("e.txt", "", time.Time{}),
	} {
		if code != 1 || !strings.Contains(errOut, want+"\n") {
			t.Errorf("ag hook pre-push: exit %d, want 1 and %q:\n%s", code, want, errOut)
		}
	}
	if out, errOut, code := u.run(dir, line, os.Args[0], "hook", "pre-push", "github", "https://github.com/x/app.git"); code != 0 {
		t.Errorf("ag hook pre-push to another remote: exit %d\n%s%s", code, out, errOut)
	}
	u.must(dir, "git", "reset", "-q", "--hard", "HEAD~1")
}

// checkGitSync checks ag sync in a git working tree: the local commits rebased onto a
// mainline that moved, then a conflict worded with what to do.
func checkGitSync(t *testing.T, srv *agtest.Server, u *gitUser, dir string) {
	t.Helper()
	if out := u.must(dir, "ag", "sync"); !strings.HasPrefix(out, "up to date with the mainline at ") {
		t.Errorf("ag sync on the mainline: %q", out)
	}
	carol := &agentCO{t: t, dir: filepath.Join(t.TempDir(), "carol"), url: srv.URL, token: newGitUser(t, srv, "carol").token}
	carol.must("checkout", "app", carol.dir)
	carol.write("c.txt", "c\n")
	carol.integrate("add c", "c.txt")
	out := u.must(dir, "ag", "sync")
	mainline := strings.TrimSpace(u.must(dir, "git", "rev-parse", "origin/main"))
	if out != "rebased onto the mainline at "+mainline[:12]+"\n" {
		t.Errorf("ag sync: %q, want rebased onto %s", out, mainline)
	}
	if log := u.must(dir, "git", "log", "--format=%s", "-3"); log != "rename a\na by alice\nadd c\n" {
		t.Errorf("git log after ag sync:\n%s", log)
	}

	mkfile(t, filepath.Join(dir, "c.txt"), "c by alice\n")
	u.must(dir, "git", "commit", "-q", "--no-verify", "-am", "c by alice")
	carol.write("c.txt", "c again\n")
	carol.integrate("c again", "c.txt")
	_, errOut, code := u.ag(dir, "sync")
	if code != 4 || !strings.Contains(errOut, "conflict rebasing onto the mainline at ") || !strings.Contains(errOut, "in c.txt: ") ||
		!strings.Contains(errOut, "git rebase --continue") {
		t.Errorf("ag sync with a conflict: exit %d, want 4:\n%s", code, errOut)
	}
	u.must(dir, "git", "rebase", "--abort")
}

// TestGitInitAndWorktrees ensures ag init sets up a working tree made by git init as ag clone
// does, refuses to overwrite a hook of the user's, and that a `git worktree add` tree of a
// clone is a holder of its own, for its leases, hooks and pushes.
func TestGitInitAndWorktrees(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			srv := gitServer(t, backend)
			u := newGitUser(t, srv, "alice")
			plain := t.TempDir()
			u.must(plain, "git", "init", "-q")
			if _, errOut, code := u.ag(plain, "init"); code != 2 || !strings.Contains(errOut, "--repository") {
				t.Errorf("ag init without a repository: exit %d, %s", code, errOut)
			}
			out := u.must(plain, "ag", "init", "--repository", "app")
			if !strings.Contains(out, "; remote ag ("+srv.URL+"/git/app.git) pushes to refs/for/main") {
				t.Errorf("ag init printed %q", out)
			}
			u.must(plain, "git", "fetch", "-q", "ag")
			if log := u.must(plain, "git", "log", "--format=%s", "ag/main"); !strings.HasSuffix(log, "Create repository app\n") {
				t.Errorf("git log ag/main:\n%s", log)
			}
			u.must(plain, "ag", "init") // again: the same settings, ag's hooks rewritten
			mkfile(t, filepath.Join(plain, "x.txt"), "x\n")
			u.must(plain, "git", "add", "x.txt")
			u.refused(plain, repo.LeaseRefusal("x.txt", "", time.Time{}))

			mine := t.TempDir()
			u.must(mine, "git", "init", "-q")
			hook := filepath.Join(mine, ".git", "hooks", "pre-commit")
			mkfile(t, hook, "#!/bin/sh\nexit 0\n")
			if _, errOut, code := u.ag(mine, "init", "--repository", "app"); code != 2 || !strings.Contains(errOut, hook+" is a hook of yours") {
				t.Errorf("ag init over a hook of the user's: exit %d, %s", code, errOut)
			}
			if b, _ := os.ReadFile(hook); string(b) != "#!/bin/sh\nexit 0\n" {
				t.Errorf("the user's hook became %q", b)
			}
			checkWorktree(t, u)
		})
	}
}

// checkWorktree checks that a `git worktree add` tree of a clone is a second holder.
func checkWorktree(t *testing.T, u *gitUser) {
	t.Helper()
	top := t.TempDir()
	main, wt := filepath.Join(top, "main"), filepath.Join(top, "wt")
	u.must(top, "ag", "clone", "app", "main")
	u.must(main, "git", "worktree", "add", "-q", wt)
	if out := u.must(wt, "ag", "status"); !strings.HasPrefix(out, "repository app, git working tree "+wt+" as wt\n") {
		t.Errorf("ag status in the worktree:\n%s", out)
	}
	held := u.acquire(main, "a.txt")
	u.acquire(wt, "d/b.txt")
	mkfile(t, filepath.Join(wt, "a.txt"), "a in wt\n")
	mkfile(t, filepath.Join(wt, "d", "b.txt"), "b in wt\n")
	u.must(wt, "git", "add", "a.txt", "d/b.txt")
	u.refused(wt, repo.LeaseRefusal("a.txt", "alice|main", held.GetExpiresAt().AsTime()))
	u.must(wt, "git", "reset", "-q", "a.txt")
	u.must(wt, "git", "commit", "-q", "-m", "b in wt")

	// Its pushes would say the main tree's holder until ag init runs in it.
	head := strings.TrimSpace(u.must(wt, "git", "rev-parse", "HEAD"))
	url := strings.TrimSpace(u.must(wt, "git", "remote", "get-url", "origin"))
	line := "refs/heads/wt " + head + " refs/for/main 0000000000000000000000000000000000000000\n"
	if _, errOut, code := u.run(wt, line, os.Args[0], "hook", "pre-push", "origin", url); code != 1 || !strings.Contains(errOut, "holder is wt, but its pushes would say main") {
		t.Errorf("ag hook pre-push before ag init in the worktree: exit %d\n%s", code, errOut)
	}
	u.must(wt, "ag", "init")
	if out, errOut, code := u.run(wt, line, os.Args[0], "hook", "pre-push", "origin", url); code != 0 {
		t.Errorf("ag hook pre-push after ag init in the worktree: exit %d\n%s%s", code, out, errOut)
	}
	for dir, want := range map[string]string{main: "\nag.holder=main\n", wt: "\nag.holder=wt\n"} {
		if got := u.must(dir, "git", "config", "--get-all", "push.pushOption"); !strings.HasSuffix(got, want) {
			t.Errorf("push.pushOption in %s = %q, want it to end with %q", dir, got, want)
		}
	}
}
