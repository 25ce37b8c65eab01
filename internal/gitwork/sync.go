package gitwork

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
)

// Change is one entry of `git status`: its two-letter status (index, then working tree, as
// `git status --short` prints it), the path, and the path it was renamed or copied from.
type Change struct {
	Status string `json:"status"`
	Path   string `json:"path"`
	From   string `json:"from,omitempty"`
}

// String is the change as `git status --short` prints it.
func (c Change) String() string {
	if c.From != "" {
		return c.Status + " " + c.From + " -> " + c.Path
	}
	return c.Status + " " + c.Path
}

// Status is where a git working tree stands: git's status beside the holder's leases.
type Status struct {
	Repository string          `json:"repository"`
	Holder     string          `json:"holder"` // the tree's holder label
	Root       string          `json:"root"`
	Changes    []Change        `json:"changes"`
	Leases     []*agwpv1.Lease `json:"-"` // the holder's, as the server has them
}

// MarshalJSON prints the leases as the API's messages, in protobuf's canonical JSON, as the
// other commands print them.
func (s *Status) MarshalJSON() ([]byte, error) {
	type plain Status
	return json.Marshal(struct {
		*plain
		Leases []json.RawMessage `json:"leases"`
	}{(*plain)(s), checkout.LeasesJSON(s.Leases)})
}

// Status answers where the tree stands, its leases those of ws (Workspace).
func (t *Tree) Status(ctx context.Context, ws *checkout.Workspace) (*Status, error) {
	changes, err := t.changes(ctx)
	if err != nil {
		return nil, err
	}
	leases, err := ws.HeldLeases(ctx)
	if err != nil {
		return nil, err
	}
	return &Status{Repository: t.Repository, Holder: t.Holder, Root: t.Root, Changes: changes, Leases: leases}, nil
}

// changes answers the tree's changes as `git status` sees them, untracked files included.
func (t *Tree) changes(ctx context.Context) ([]Change, error) {
	out, err := gitCtx(ctx, t.Root, nil, "status", "--porcelain=v1", "-z", "--untracked-files=normal")
	if err != nil {
		return nil, err
	}
	// "XY PATH NUL", followed by "FROM NUL" for a rename or a copy.
	f := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
	changes := []Change{}
	for i := 0; i < len(f); i++ {
		if len(f[i]) < 4 {
			continue
		}
		c := Change{Status: f[i][:2], Path: f[i][3:]}
		if strings.ContainsAny(c.Status, "RC") && i+1 < len(f) {
			i++
			c.From = f[i]
		}
		changes = append(changes, c)
	}
	return changes, nil
}

// SyncResult is what ag sync did in a git working tree.
type SyncResult struct {
	Remote    string   `json:"remote"`
	From      string   `json:"from"`     // HEAD's commit before ("" on a branch with none yet)
	To        string   `json:"to"`       // HEAD's commit after
	Mainline  string   `json:"mainline"` // the mainline's commit it is on
	Rebased   bool     `json:"rebased"`  // HEAD moved: local commits replayed on the mainline, or fast-forwarded
	Conflicts []string `json:"conflicts"`
}

// Sync brings the tree's branch to the mainline: `git pull --rebase REMOTE main`, from the
// remote at the repository. A rebase stopped by conflicts answers them with a
// *checkout.ConflictError saying what to do; git's other refusals (uncommitted changes among
// them) answer git's own words. token is given to git's credential helper as Clone gives it.
func (t *Tree) Sync(ctx context.Context, token string) (*SyncResult, error) {
	return t.pull(ctx, token, false)
}

// pull is Sync; with autostash, the local changes are set aside for the rebase and put back
// after it, as after a push of some of them, when the rest must not keep the tree from the
// mainline the push landed on. git words it when they do not go back cleanly.
func (t *Tree) pull(ctx context.Context, token string, autostash bool) (*SyncResult, error) {
	remote, err := t.Remote()
	if err != nil {
		return nil, err
	}
	res := &SyncResult{Remote: remote, Conflicts: []string{}}
	res.From = t.head(ctx)
	args := []string{"pull", "--rebase"}
	if autostash {
		args = append(t.identity(ctx), append(args, "--autostash")...)
	}
	_, pullErr := gitCtx(ctx, t.Root, helperEnv(token), append(args, remote, MainBranch)...)
	if out, err := gitCtx(ctx, t.Root, nil, "rev-parse", "--verify", "--quiet", "FETCH_HEAD^{commit}"); err == nil {
		res.Mainline = strings.TrimSpace(out)
	}
	res.To = t.head(ctx)
	res.Rebased = pullErr == nil && res.To != res.From
	if pullErr == nil {
		return res, nil
	}
	if !t.rebasing() {
		return nil, pullErr
	}
	out, err := gitCtx(ctx, t.Root, nil, "diff", "--name-only", "-z", "--diff-filter=U")
	if err != nil {
		return nil, errors.Join(pullErr, err)
	}
	if out = strings.TrimSuffix(out, "\x00"); out != "" {
		res.Conflicts = strings.Split(out, "\x00")
	}
	return res, &checkout.ConflictError{Err: fmt.Errorf("conflict rebasing onto the mainline at %s in %s: resolve the <<<<<<< markers, `git add` the files and `git rebase --continue`, or `git rebase --abort` to go back to where you were",
		short(res.Mainline), strings.Join(res.Conflicts, ", "))}
}

// Outcome words what the sync did, for people.
func (r *SyncResult) Outcome() string {
	if r.Rebased {
		return "rebased onto the mainline at " + short(r.Mainline)
	}
	return "up to date with the mainline at " + short(r.Mainline)
}

// head answers HEAD's commit, "" on a branch with none yet.
func (t *Tree) head(ctx context.Context) string {
	out, err := gitCtx(ctx, t.Root, nil, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// rebasing reports whether a rebase stopped in the tree, and waits to be continued or aborted.
func (t *Tree) rebasing() bool {
	for _, d := range []string{"rebase-merge", "rebase-apply"} {
		if _, err := os.Stat(filepath.Join(t.GitDir, d)); err == nil {
			return true
		}
	}
	return false
}

// short answers a commit's id cut as git shows it.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
