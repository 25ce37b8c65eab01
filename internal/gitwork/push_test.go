package gitwork

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// standInHelper writes a program that answers git's credential requests as ag's helper does
// (user ag, the token of AG_TOKEN) and lets ag's hooks through: this package cannot run the
// command line, and a push's leases are the server's to check.
func standInHelper(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ag")
	script := "#!/bin/sh\nfor a; do last=$a; done\nif [ \"$1\" = git-credential ] && [ \"$last\" = get ]; then\n" +
		"  cat >/dev/null\n  printf 'username=ag\\npassword=%s\\n' \"$AG_TOKEN\"\nfi\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// isolateGit keeps the machine's git configuration out of the git this process runs.
func isolateGit(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", os.DevNull)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
}

// TestPush ensures Push makes the tree's local changes one change through a real server: with
// nothing to send it says so; a path not under a lease of the holder is refused in the server's
// words, nothing committed; a leased one (selected by path, another change left local) lands,
// and the tree is then at the mainline's commit with the other change still local; without
// waiting, on a repository that validates, it answers the change queued, not final.
func TestPush(t *testing.T) {
	isolateGit(t)
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			if _, err := srv.Admin.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "app"}); err != nil {
				t.Fatal(err)
			}
			p, err := srv.Admin.Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: "alice", Role: agwpv1.Role_ROLE_AGENT})
			if err != nil {
				t.Fatal(err)
			}
			token, alice := p.GetToken(), client.New(srv.URL, p.GetToken())
			dir := filepath.Join(t.TempDir(), "alice")
			if _, err := Clone(ctx, dir, token, Setup{Server: srv.URL, Repository: "app", Holder: "a1", Exe: standInHelper(t)}); err != nil {
				t.Fatal(err)
			}
			tr, err := Find(dir)
			if err != nil {
				t.Fatal(err)
			}
			start := tr.Head(ctx)

			var nothing *checkout.NothingError
			if _, err := tr.Push(ctx, token, PushRequest{Message: "nothing", Wait: true}); !errors.As(err, &nothing) {
				t.Fatalf("Push of a clean tree: %v, want a NothingError", err)
			}

			write(t, filepath.Join(dir, "src", "a.go"), "package a\n")
			write(t, filepath.Join(dir, "notes.txt"), "mine\n")
			_, err = tr.Push(ctx, token, PushRequest{Message: "unleased", Paths: []string{"src/"}, Wait: true})
			var refused *PushRefusedError
			want := repo.LeaseRefusal("src/a.go", "", time.Time{})
			if !errors.As(err, &refused) || !slices.Contains(refused.Lines, want) {
				t.Fatalf("Push of an unleased path: %v, want it refused with %q", err, want)
			}
			if tr.Head(ctx) != start || !slices.ContainsFunc(changes(t, tr), func(c LocalChange) bool { return c.Path == "src/a.go" }) {
				t.Errorf("after the refusal HEAD is %s (want %s) and the changes are %+v: the commit must be taken back", tr.Head(ctx), start, changes(t, tr))
			}

			if _, err := alice.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "app", Paths: []string{"src/"}, Holder: "a1"}); err != nil {
				t.Fatal(err)
			}
			var progress strings.Builder
			res, err := tr.Push(ctx, token, PushRequest{Message: "Add a", Paths: []string{"src/"}, Wait: true, Progress: &progress})
			if err != nil {
				t.Fatalf("Push under the lease: %v", err)
			}
			r, err := alice.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: "app"})
			if err != nil {
				t.Fatal(err)
			}
			main := r.GetRepository().GetMainlineCommit()
			if res.Landed != main || !strings.HasPrefix(res.ChangeID, "chg_") || !res.Committed || res.SyncErr != nil || tr.Head(ctx) != main {
				t.Errorf("Push = %+v (sync error %v), HEAD %s; want it landed as the mainline's %s and the tree there", res, res.SyncErr, tr.Head(ctx), main)
			}
			if !strings.Contains(progress.String(), "landed as "+main+" ("+res.ChangeID+")") {
				t.Errorf("the progress said %q, want the landing", progress.String())
			}
			if got := gitT(t, dir, "show", main+":src/a.go"); got != "package a\n" {
				t.Errorf("the mainline's src/a.go: %q", got)
			}
			if got := changes(t, tr); len(got) != 1 || got[0].Path != "notes.txt" || !got[0].Untracked {
				t.Errorf("local changes after the landing: %+v, want notes.txt alone, untouched", got)
			}

			// Without waiting, a repository that validates answers the change queued.
			if _, err := srv.Admin.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{Repository: "app",
				Validation: &agwpv1.Validation{Command: []string{"true"}}}); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, "src", "a.go"), "package a // again\n")
			res, err = tr.Push(ctx, token, PushRequest{Message: "Again", Paths: []string{"src/a.go"}})
			if err != nil {
				t.Fatalf("Push without waiting: %v", err)
			}
			c, err := alice.Repos.GetChange(ctx, &agwpv1.GetChangeRequest{ChangeId: res.ChangeID})
			if err != nil || checkout.FinalChange(c.GetChange().GetState()) || res.Landed != "" ||
				!slices.ContainsFunc(res.Lines, func(l string) bool { return strings.HasPrefix(l, "queued as "+res.ChangeID+" at position ") }) {
				t.Errorf("Push without waiting = %+v; change %v, %v; want it queued, not final", res, c.GetChange(), err)
			}

			// The gate rejects it, and the next push, followed to its verdict: the commit that
			// push made is taken back, the failing output said.
			worker := srv.Principal(t, "ci", agwpv1.Role_ROLE_WORKER)
			failed := make(chan error, 1)
			go func() { failed <- failJobs(ctx, worker, 2) }()
			if _, err := alice.Repos.GetChange(ctx, &agwpv1.GetChangeRequest{ChangeId: res.ChangeID, Wait: durationpb.New(30 * time.Second)}); err != nil {
				t.Fatal(err)
			}
			queued := tr.Head(ctx)
			write(t, filepath.Join(dir, "src", "b.go"), "package a // b\n")
			res, err = tr.Push(ctx, token, PushRequest{Message: "Add b", Paths: []string{"src/"}, Wait: true})
			if err := <-failed; err != nil {
				t.Fatalf("the worker: %v", err)
			}
			if err != nil || res.Refusal != "rejected by the gate ("+res.ChangeID+")" || !res.TakenBack || tr.Head(ctx) != queued ||
				!slices.Contains(res.Lines, "--- FAIL: TestA (0.00s)") || !slices.Contains(res.Lines, "rejected by the gate: "+res.ChangeID+" (`ag change show "+res.ChangeID+"`)") {
				t.Errorf("Push of a change the gate rejects = %+v, %v; HEAD %s, want the commit taken back to %s", res, err, tr.Head(ctx), queued)
			}
		})
	}
}

// failJobs fails n validate jobs for good, as a worker whose test run fails.
func failJobs(ctx context.Context, worker *client.Client, n int) error {
	for range n {
		res, err := worker.Jobs.ClaimJob(ctx, &agwpv1.ClaimJobRequest{Worker: "ci-1", Kinds: []string{"validate"}, Wait: durationpb.New(10 * time.Second)})
		if err == nil && res.GetJob() == nil {
			err = errors.New("no validate job to claim")
		}
		if err != nil {
			return err
		}
		if _, err := worker.Jobs.FailJob(ctx, &agwpv1.FailJobRequest{JobId: res.GetJob().GetId(), Worker: "ci-1", Final: true,
			FencingToken: uint64(res.GetJob().GetAttempts()), Error: "go test exited 1", Output: "--- FAIL: TestA (0.00s)\nFAIL\n"}); err != nil {
			return err
		}
	}
	return nil
}

func write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func changes(t *testing.T, tr *Tree) []LocalChange {
	t.Helper()
	c, err := tr.LocalChanges(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}
