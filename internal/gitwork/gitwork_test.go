package gitwork

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/testutil/agtest"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// gitT runs git in dir for a test, with no configuration of the machine's.
func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestChangedPaths ensures both sides of a rename count, and only the new side of a copy.
func TestChangedPaths(t *testing.T) {
	out := "M\x00a.txt\x00R087\x00old.txt\x00new.txt\x00C100\x00src.txt\x00copy.txt\x00D\x00gone.txt\x00A\x00d/added.txt\x00"
	want := []string{"a.txt", "old.txt", "new.txt", "copy.txt", "gone.txt", "d/added.txt"}
	if got := changedPaths(out); !slices.Equal(got, want) {
		t.Errorf("changedPaths = %q, want %q", got, want)
	}
	if got := changedPaths(""); len(got) != 0 {
		t.Errorf("changedPaths of nothing = %q", got)
	}
}

// TestFind ensures a git working tree is found from any directory in it, its root named as
// the directory was, that a tree without ag's settings or no tree at all is told apart, and
// that a `git worktree add` tree reads no holder from the shared configuration: its own,
// else its directory's name.
func TestFind(t *testing.T) {
	top := t.TempDir()
	if _, err := Find(top); !errors.Is(err, ErrNotGit) {
		t.Errorf("Find outside git: %v, want ErrNotGit", err)
	}
	main := filepath.Join(top, "main")
	gitT(t, top, "init", "-q", main)
	var notSetUp *NotSetUpError
	if _, err := Find(main); !errors.As(err, &notSetUp) || notSetUp.Root != main {
		t.Errorf("Find in a tree without ag: %v, want NotSetUpError", err)
	}
	gitT(t, main, "commit", "-q", "--allow-empty", "-m", "first")
	gitT(t, main, "config", KeyRepository, "app")
	gitT(t, main, "config", KeyServer, "http://ag.example")
	gitT(t, main, "config", KeyHolder, "h1")
	if err := os.MkdirAll(filepath.Join(main, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	tr, err := Find(filepath.Join(main, "a", "b"))
	if err != nil || tr.Root != main || tr.Holder != "h1" || tr.Linked || tr.URL() != "http://ag.example/git/app.git" {
		t.Fatalf("Find in a subdirectory = %+v, %v", tr, err)
	}
	wt := filepath.Join(top, "second")
	gitT(t, main, "worktree", "add", "-q", wt)
	if tr, err = Find(wt); err != nil || !tr.Linked || tr.Holder != "second" || tr.Repository != "app" {
		t.Errorf("Find in the worktree = %+v, %v; want its own holder, second", tr, err)
	}
	gitT(t, wt, "config", "extensions.worktreeConfig", "true")
	gitT(t, wt, "config", "--worktree", KeyHolder, "h2")
	if tr, err = Find(wt); err != nil || tr.Holder != "h2" {
		t.Errorf("Find in the worktree after git config --worktree = %+v, %v", tr, err)
	}
	if tr, err = Find(main); err != nil || tr.Holder != "h1" {
		t.Errorf("Find in the main tree = %+v, %v", tr, err)
	}
}

// TestRefusals ensures each path a commit changes is refused unless a current lease of the
// tree's holder covers it: held by another (named with its expiry), held by the same
// principal under another label, or expired.
func TestRefusals(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			if _, err := srv.Admin.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "app"}); err != nil {
				t.Fatal(err)
			}
			alice := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
			bob := srv.Principal(t, "bob", agwpv1.Role_ROLE_AGENT)
			lease := func(c *client.Client, holder string, paths ...string) *agwpv1.Lease {
				l, err := c.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: paths, Holder: holder})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			lease(alice, "a1", "src/", "README.md")
			other := lease(alice, "a2", "docs/guide.md")
			bobs := lease(bob, "b1", "Makefile")
			tr := &Tree{Repository: "app", Holder: "a1"}
			got, err := tr.Refusals(ctx, alice, []string{"src/x.go", "readme.md", "docs/guide.md", "Makefile", "new.txt", "src/x.go"}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			want := []string{
				repo.LeaseRefusal("Makefile", "bob|b1", bobs.GetExpiresAt().AsTime()),
				repo.LeaseRefusal("docs/guide.md", "alice|a2", other.GetExpiresAt().AsTime()),
				repo.LeaseRefusal("new.txt", "", time.Time{}),
			}
			if !slices.Equal(got, want) {
				t.Errorf("Refusals =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			// Past the leases' expiry none is current, though none was given away.
			got, err = tr.Refusals(ctx, alice, []string{"src/x.go"}, time.Now().Add(time.Hour))
			if err != nil || !slices.Equal(got, []string{repo.LeaseRefusal("src/x.go", "", time.Time{})}) {
				t.Errorf("Refusals past the expiry = %q, %v", got, err)
			}
		})
	}
}
