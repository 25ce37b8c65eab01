package server_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// pushFixture is a server with a repository "app" holding a README and src/a.go, an agent ada
// and a git working tree of ada's cloned from ag, pushing as holder "wt".
type pushFixture struct {
	t     *testing.T
	srv   *agtest.Server
	ada   *client.Client
	token string
	git   *gitRunner
	dir   string
}

func newPushFixture(t *testing.T, backend string, validation *agwpv1.Validation) *pushFixture {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	ctx := context.Background()
	srv := agtest.Start(t, agtest.Options{Backend: backend})
	if _, err := srv.Admin.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "app"}); err != nil {
		t.Fatal(err)
	}
	res, err := srv.Admin.Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: "ada", Role: agwpv1.Role_ROLE_AGENT})
	if err != nil {
		t.Fatal(err)
	}
	f := &pushFixture{t: t, srv: srv, token: res.GetToken(), ada: client.New(srv.URL, res.GetToken(), client.WithRetries(0, 0)),
		git: &gitRunner{t: t, env: gitEnv(t)}}
	f.integrate("seed", map[string]string{"README.md": "# app\n", "src/a.go": "package a\n"})
	if validation != nil {
		if _, err := srv.Admin.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{Repository: "app", Validation: validation}); err != nil {
			t.Fatal(err)
		}
	}
	f.dir = f.clone("wt")
	return f
}

// integrate lands files as ada's holder label through the API.
func (f *pushFixture) integrate(label string, files map[string]string) {
	f.t.Helper()
	ctx := context.Background()
	var paths []string
	var changes []client.FileChange
	for p, c := range files {
		paths = append(paths, p)
		changes = append(changes, client.FileChange{Path: p, Content: []byte(c)})
	}
	l, err := f.ada.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: paths, Holder: label})
	if err != nil {
		f.t.Fatal(err)
	}
	r, err := f.ada.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: "app"})
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.ada.IntegrateFiles(ctx, client.IntegrateOptions{Repository: "app", BaseRevision: r.GetRepository().GetMainline(),
		Holder: label, FencingTokens: []uint64{l.GetFencingToken()}, Message: "integrate " + label, Changes: changes}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.ada.Leases.ReleaseLease(ctx, &agwpv1.ReleaseLeaseRequest{LeaseId: l.GetId(), FencingToken: l.GetFencingToken()}); err != nil {
		f.t.Fatal(err)
	}
}

// auth is the git option that sends ada's token.
func (f *pushFixture) auth() []string {
	return []string{"-c", "http.extraHeader=Authorization: Bearer " + f.token}
}

// clone clones the mainline into a new working tree that pushes to refs/for/main as label.
func (f *pushFixture) clone(label string) string {
	dir := filepath.Join(f.t.TempDir(), label)
	f.git.must("", nil, append(f.auth(), "clone", "-q", f.srv.URL+"/git/app.git", dir)...)
	f.git.must(dir, nil, "config", "remote.origin.push", "HEAD:refs/for/main")
	f.git.must(dir, nil, "config", "push.pushOption", "ag.holder="+label)
	return dir
}

func (f *pushFixture) lease(label string, paths ...string) *agwpv1.Lease {
	f.t.Helper()
	l, err := f.ada.AcquireLease(context.Background(), client.AcquireLeaseOptions{Repository: "app", Paths: paths, Holder: label, TTL: time.Hour})
	if err != nil {
		f.t.Fatal(err)
	}
	return l
}

func (f *pushFixture) commit(dir, msg string, files map[string]string) {
	f.t.Helper()
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			f.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			f.t.Fatal(err)
		}
		f.git.must(dir, nil, "add", p)
	}
	f.git.must(dir, nil, "commit", "-q", "-m", msg)
}

// push runs `git push` in dir and answers what git printed and whether it succeeded.
func (f *pushFixture) push(dir string, args ...string) (string, bool) {
	out, errOut, err := f.git.run(dir, nil, append(append(f.auth(), "push"), args...)...)
	return out + errOut, err == nil
}

func (f *pushFixture) mainline() (*agwpv1.Repository, string) {
	f.t.Helper()
	r, err := f.ada.Repos.GetRepository(context.Background(), &agwpv1.GetRepositoryRequest{Name: "app"})
	if err != nil {
		f.t.Fatal(err)
	}
	return r.GetRepository(), r.GetRepository().GetMainlineCommit()
}

// TestGitPushLandsUnderLeases ensures a plain `git push` to refs/for/main of a commit whose
// paths the pusher leases lands as a mainline commit holding the pushed tree and message, the
// push printing where it landed and exiting 0; a second push from the same tree, made without
// pulling, sends and lands only its own edits on top; and a push of a path the pusher does not lease, of
// a path another holder leases, or by a reader is refused with a line saying what to do,
// storing nothing.
func TestGitPushLandsUnderLeases(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			f := newPushFixture(t, backend, nil)
			f.lease("wt", "src/")
			f.commit(f.dir, "Make a better\n\nWith a body.", map[string]string{"src/a.go": "package a // better\n", "src/b.go": "package a\n"})
			out, ok := f.push(f.dir)
			if !ok || !strings.Contains(out, "remote: landed as ") || !strings.Contains(out, "git pull --rebase") {
				t.Fatalf("git push = ok %v:\n%s\nwant it landed", ok, out)
			}
			_, first := f.mainline()
			check := f.clone("check")
			if got := f.git.must(check, nil, "show", "HEAD:src/a.go"); got != "package a // better\n" {
				t.Fatalf("the mainline's src/a.go after the push is %q", got)
			}
			if got, want := f.git.must(check, nil, "rev-parse", "HEAD^{tree}"), f.git.must(f.dir, nil, "rev-parse", "HEAD^{tree}"); got != want {
				t.Fatalf("the mainline's tree is %s, the pushed tree %s", got, want)
			}
			if msg := f.git.must(check, nil, "log", "-1", "--format=%B"); !strings.HasPrefix(msg, "Make a better\n\nWith a body.") ||
				!strings.Contains(msg, "Ag-Author: ada|wt") {
				t.Fatalf("the landed commit's message is %q", msg)
			}

			// A second commit pushed without pulling: only its edit is new.
			f.integrate("other", map[string]string{"README.md": "# app, by another\n"})
			f.commit(f.dir, "And b", map[string]string{"src/b.go": "package a // b\n"})
			out, ok = f.push(f.dir, "--progress")
			if !ok || !strings.Contains(out, "landed as") {
				t.Fatalf("a second push without pulling = ok %v:\n%s", ok, out)
			}
			// The server offered the first pushed commit: git sent the new commit, its two
			// trees and its one blob, nothing of the first.
			if !strings.Contains(out, "Writing objects: 100% (4/4)") {
				t.Fatalf("the second push sent more than its own objects:\n%s", out)
			}
			f.git.must(check, nil, append(f.auth(), "pull", "-q", "--rebase")...)
			if got := f.git.must(check, nil, "show", "HEAD:README.md"); got != "# app, by another\n" {
				t.Fatalf("README.md after the second push is %q: the push undid another's change", got)
			}
			if got := f.git.must(check, nil, "show", "HEAD:src/b.go"); got != "package a // b\n" {
				t.Fatalf("src/b.go after the second push is %q", got)
			}
			_, second := f.mainline()

			// A path the mainline changed since the pushed commit landed is a conflict.
			f.commit(f.dir, "Touch the README", map[string]string{"README.md": "# mine\n"})
			out, ok = f.push(f.dir)
			if ok || !strings.Contains(out, "remote: README.md: changed on the mainline since your last pull; `git pull --rebase`, then push") {
				t.Fatalf("a push over another's landed change = ok %v:\n%s", ok, out)
			}
			f.git.must(f.dir, nil, "reset", "-q", "--hard", "HEAD^")

			// Refusals: a path outside the leases, a path another holds, a reader.
			f.commit(f.dir, "Add docs", map[string]string{"docs/new.md": "# new\n"})
			out, ok = f.push(f.dir)
			if ok || !strings.Contains(out, "remote: docs/new.md: not under a current lease of yours; `ag lease acquire docs/new.md`") {
				t.Fatalf("a push of an unleased path = ok %v:\n%s", ok, out)
			}
			f.lease("bob", "docs/")
			out, ok = f.push(f.dir)
			if ok || !strings.Contains(out, "remote: docs/new.md: leased by ada|bob until ") {
				t.Fatalf("a push of a path another holds = ok %v:\n%s", ok, out)
			}
			if _, now := f.mainline(); now != second || now == first {
				t.Fatalf("the mainline is %s after refused pushes, want %s", now, second)
			}
			reader, err := f.srv.Admin.Admin.CreatePrincipal(context.Background(), &agwpv1.CreatePrincipalRequest{Name: "rita", Role: agwpv1.Role_ROLE_READER})
			if err != nil {
				t.Fatal(err)
			}
			_, errOut, err := f.git.run(f.dir, nil, "-c", "http.extraHeader=Authorization: Bearer "+reader.GetToken(), "push")
			if err == nil || !strings.Contains(errOut, "403") && !strings.Contains(errOut, "may not push") {
				t.Fatalf("a reader's push = %v:\n%s", err, errOut)
			}
		})
	}
}

// TestGitPushWaitsForTheGate ensures a push into a repository with a validation policy prints
// the change's way through the queue as "remote:" lines and ends with its verdict: exit 0 once
// a worker's attested pass landed it, non-zero with the failing run's output when the gate
// rejected it, at once with -o ag.wait=false, and after the wait with -o ag.wait=DURATION.
func TestGitPushWaitsForTheGate(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			f := newPushFixture(t, backend, &agwpv1.Validation{Command: []string{"make", "test"}, Timeout: durationpb.New(time.Minute)})
			ci := newValidator(t, f.srv, "ci")
			f.lease("wt", "src/")

			pushed := func() <-chan string {
				done := make(chan string, 1)
				go func() {
					out, ok := f.push(f.dir)
					done <- fmt.Sprintf("ok=%v\n%s", ok, out)
				}()
				return done
			}
			f.commit(f.dir, "Pass", map[string]string{"src/a.go": "package a // passes\n"})
			done := pushed()
			cl, p := ci.claim()
			if _, err := ci.complete(cl, ci.statement(cl, p, attest.ResultPassed), "ok\n"); err != nil {
				t.Fatal(err)
			}
			out := <-done
			if !strings.HasPrefix(out, "ok=true") || !strings.Contains(out, "remote: chg_") || !strings.Contains(out, "validating (job "+cl.Job.GetId()+")") ||
				!strings.Contains(out, "remote: landed as ") {
				t.Fatalf("a push that passes the gate printed:\n%s", out)
			}
			if _, main := f.mainline(); !strings.Contains(out, main) {
				t.Fatalf("the push did not name the mainline commit %s it landed as:\n%s", main, out)
			}

			f.commit(f.dir, "Break", map[string]string{"src/a.go": "package a // broken\n"})
			done = pushed()
			cl, p = ci.claim()
			if _, err := ci.complete(cl, ci.statement(cl, p, attest.ResultFailed), "--- FAIL: TestBroken\n\x1b[31mbroken\x1b[0m\n"); err != nil {
				t.Fatal(err)
			}
			out = <-done
			if !strings.HasPrefix(out, "ok=false") || !strings.Contains(out, "remote: --- FAIL: TestBroken") ||
				!strings.Contains(out, "rejected by the gate") || strings.Contains(out, "\x1b[31m") {
				t.Fatalf("a push the gate rejects printed:\n%q", out)
			}

			f.git.must(f.dir, nil, "reset", "-q", "--hard", "HEAD^")
			f.commit(f.dir, "Later", map[string]string{"src/c.go": "package a\n"})
			out, ok := f.push(f.dir, "-o", "ag.holder=wt", "-o", "ag.wait=false") // -o replaces push.pushOption
			if !ok || !strings.Contains(out, "remote: queued as chg_") {
				t.Fatalf("a push with -o ag.wait=false = ok %v:\n%s", ok, out)
			}

			// A bounded wait answers the change as it stands: nobody validates it now. (It is
			// not built on the queued commit, which would be refused while that one waits.)
			f.git.must(f.dir, nil, "reset", "-q", "--hard", "HEAD^")
			f.commit(f.dir, "Bounded", map[string]string{"src/d.go": "package a\n"})
			out, ok = f.push(f.dir, "-o", "ag.holder=wt", "-o", "ag.wait=1s")
			if !ok || !strings.Contains(out, "after 1s: `ag change show chg_") {
				t.Fatalf("a push with -o ag.wait=1s = ok %v:\n%s", ok, out)
			}
		})
	}
}

// TestGitPushToMainWhenItFastForwards ensures a push to main itself is taken when it
// fast-forwards from the mainline's commit, and refused, saying to fetch, when main moved on
// since; a push to another branch is refused naming what is allowed.
func TestGitPushToMainWhenItFastForwards(t *testing.T) {
	t.Parallel()
	f := newPushFixture(t, "sqlite", nil)
	f.lease("wt", "src/")
	f.commit(f.dir, "Straight to main", map[string]string{"src/a.go": "package a // main\n"})
	if out, ok := f.push(f.dir, "origin", "HEAD:main"); !ok || !strings.Contains(out, "remote: landed as ") {
		t.Fatalf("a fast-forward push to main = ok %v:\n%s", ok, out)
	}
	out, ok := f.push(f.dir, "origin", "HEAD:refs/heads/topic")
	if ok || !strings.Contains(out, "ag takes pushes to refs/for/main (or main when it fast-forwards), not refs/heads/topic") {
		t.Fatalf("a push to another branch = ok %v:\n%s", ok, out)
	}
	// main moved on (ag wrote its own commit): a push to main from the old one is not a
	// fast-forward, and git, told main's new commit, refuses it itself.
	f.commit(f.dir, "More", map[string]string{"src/b.go": "package a\n"})
	if out, ok := f.push(f.dir, "origin", "HEAD:main"); ok || !strings.Contains(out, "rejected") {
		t.Fatalf("a push to main that does not fast-forward = ok %v:\n%s", ok, out)
	}
	if out, ok := f.push(f.dir); !ok || !strings.Contains(out, "landed as") {
		t.Fatalf("the same commits pushed to refs/for/main = ok %v:\n%s", ok, out)
	}
}

// TestGitPushOfSeveralRefsIsRefusedWhole ensures a push naming two refs lands neither: one push
// is one change, and taking one of two would land part of what the pusher meant.
func TestGitPushOfSeveralRefsIsRefusedWhole(t *testing.T) {
	t.Parallel()
	f := newPushFixture(t, "sqlite", nil)
	f.lease("wt", "src/")
	f.commit(f.dir, "Two refs", map[string]string{"src/a.go": "package a // two\n"})
	_, before := f.mainline()
	out, ok := f.push(f.dir, "origin", "HEAD:refs/for/main", "HEAD:main")
	if ok || strings.Count(out, "(ag takes one ref per push)") != 2 || !strings.Contains(out, "remote: the push names 2 refs") {
		t.Fatalf("a push of two refs = ok %v:\n%s", ok, out)
	}
	if _, after := f.mainline(); after != before {
		t.Fatalf("the mainline moved to %s on a refused push of two refs", after)
	}
}
