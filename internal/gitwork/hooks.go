package gitwork

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/termsafe"
)

// zeroID is git's name for no commit: a ref being created or deleted.
const zeroID = "0000000000000000000000000000000000000000"

// Check is the check of ag's hook name ("pre-commit" or "pre-push"), with git's arguments and
// stdin: it refuses the paths the commit or push changes that the tree's holder holds no
// current lease on, writing to stderr, which git shows, one line for each, worded as the
// server words a refused push (repo.LeaseRefusal). A push to another remote than ag's is not
// ag's to check.
func Check(ctx context.Context, t *Tree, c *client.Client, name string, args []string, stdin io.Reader, stderr io.Writer) error {
	var paths []string
	var err error
	switch name {
	case "pre-commit":
		paths, err = t.StagedPaths(ctx)
	case "pre-push":
		if len(args) < 2 || !sameURL(args[1], t.URL()) {
			return nil
		}
		if err := t.pushesHolder(); err != nil {
			return err
		}
		paths, err = t.PushedPaths(ctx, args[0], stdin)
	default:
		return &checkout.UsageError{Err: fmt.Errorf("no hook %q: ag's hooks are %s", name, strings.Join(Hooks, " and "))}
	}
	if err != nil || len(paths) == 0 {
		return err
	}
	refused, err := t.Refusals(ctx, c, paths, time.Now())
	if err != nil || len(refused) == 0 {
		return err
	}
	for _, r := range refused {
		// Paths are the repository's, the holder another agent's label.
		fmt.Fprintln(stderr, termsafe.Line(r))
	}
	what := fmt.Sprintf("%d paths", len(refused))
	if len(refused) == 1 {
		what = "1 path"
	}
	return &checkout.LeaseError{Err: fmt.Errorf("%s not under a current lease of %s (`--no-verify` skips this hook; the server still refuses a push of them)", what, t.Holder)}
}

// StagedPaths answers the paths the index changes from HEAD: what `git commit` would commit,
// both sides of a rename.
func (t *Tree) StagedPaths(ctx context.Context) ([]string, error) {
	out, err := gitCtx(ctx, t.Root, nil, "diff", "--cached", "--name-status", "-z", "--no-ext-diff")
	if err != nil {
		return nil, err
	}
	return changedPaths(out), nil
}

// PushedPaths answers the paths each commit of git's pre-push lines (stdin: "LOCAL_REF
// LOCAL_ID REMOTE_REF REMOTE_ID") changes since the last commit it has in common with the
// mainline as the tree last fetched it from remote: a push to refs/for/main brings the
// mainline those changes, whatever commits the tree made them in.
func (t *Tree) PushedPaths(ctx context.Context, remote string, stdin io.Reader) ([]string, error) {
	if _, err := git(t.Root, nil, "config", "--get", "remote."+remote+".url"); err != nil {
		// Pushed to by its URL: the remote the tree has at that URL.
		var rerr error
		if remote, rerr = t.Remote(); rerr != nil {
			return nil, rerr
		}
	}
	mainline := "refs/remotes/" + remote + "/" + MainBranch
	if _, err := gitCtx(ctx, t.Root, nil, "rev-parse", "--verify", "--quiet", mainline+"^{commit}"); err != nil {
		return nil, fmt.Errorf("%s is not known: `git fetch %s` first, so that the hook can tell which paths the push changes", mainline, remote)
	}
	var paths []string
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[1] == zeroID {
			continue // a deletion sends no content
		}
		base, err := gitCtx(ctx, t.Root, nil, "merge-base", f[1], mainline)
		if err != nil {
			return nil, fmt.Errorf("%s has no commit in common with %s: `git pull --rebase %s %s` (ag sync) first", f[0], mainline, remote, MainBranch)
		}
		out, err := gitCtx(ctx, t.Root, nil, "diff", "--name-status", "-z", "--no-ext-diff", strings.TrimSpace(base), f[1])
		if err != nil {
			return nil, err
		}
		paths = append(paths, changedPaths(out)...)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read git's pre-push lines: %w", err)
	}
	return paths, nil
}

// changedPaths reads `git diff --name-status -z`: "STATUS NUL PATH NUL", with a second path
// after a rename's or copy's status. A rename changes both paths; a copy only the new one.
func changedPaths(out string) []string {
	f := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
	var paths []string
	for i := 0; i+1 < len(f); i += 2 {
		switch status := f[i]; {
		case strings.HasPrefix(status, "R") && i+2 < len(f):
			paths = append(paths, f[i+1], f[i+2])
			i++
		case strings.HasPrefix(status, "C") && i+2 < len(f):
			paths = append(paths, f[i+2])
			i++
		default:
			paths = append(paths, f[i+1])
		}
	}
	return paths
}

// pushesHolder refuses a push that would carry another holder than the tree's: the one its
// push options name, which the server checks the leases of. A linked tree reads the main
// tree's until ag init runs in it.
func (t *Tree) pushesHolder() error {
	out, err := git(t.Root, nil, "config", "-z", "--get-all", "push.pushOption")
	if err != nil && !exitCode(err, 1) {
		return err
	}
	sends := ""
	for _, o := range strings.Split(strings.TrimSuffix(out, "\x00"), "\x00") {
		switch {
		case o == "":
			sends = "" // git's reset of the values read before
		case strings.HasPrefix(o, "ag.holder="):
			sends = strings.TrimPrefix(o, "ag.holder=")
		}
	}
	if sends == t.Holder {
		return nil
	}
	return fmt.Errorf("this working tree's holder is %s, but its pushes would say %s (push.pushOption): run `ag init` in %s",
		t.Holder, cmp(sends, "none"), t.Root)
}

// Refusals answers, for each of paths (once, sorted) that no current lease of the tree's
// holder covers at now, the line saying why: held by another, and until when, or not leased.
// A current lease is active and not expired: a commit is refused a lease that the server could
// give away before the push.
func (t *Tree) Refusals(ctx context.Context, c *client.Client, paths []string, now time.Time) ([]string, error) {
	who, err := c.Admin.WhoAmI(ctx, &agwpv1.WhoAmIRequest{})
	if err != nil {
		return nil, err
	}
	mine := who.GetPrincipal().GetName() + "|" + t.Holder
	leases, err := t.listLeases(ctx, c, false)
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	var refused []string
	for _, p := range slices.Compact(paths) {
		covered := false
		var other *agwpv1.Lease
		for _, l := range leases {
			if l.GetState() != agwpv1.LeaseState_LEASE_STATE_ACTIVE || !l.GetExpiresAt().AsTime().After(now) {
				continue
			}
			for _, lp := range l.GetPaths() {
				switch {
				case l.GetHolder() == mine && repo.FoldCovers(lp, p):
					covered = true
				case l.GetHolder() != mine && other == nil && repo.FoldOverlap(lp, p):
					other = l
				}
			}
		}
		if covered {
			continue
		}
		if other != nil {
			refused = append(refused, repo.LeaseRefusal(p, other.GetHolder(), other.GetExpiresAt().AsTime()))
		} else {
			refused = append(refused, repo.LeaseRefusal(p, "", time.Time{}))
		}
	}
	return refused, nil
}
