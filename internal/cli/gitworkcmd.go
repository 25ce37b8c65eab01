package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ag-coord/ag/client"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/gitwork"
)

// gitTree answers the git working tree at -C that ag clone or ag init set up, and a client
// for its server: ag.server, as a checkout's, unless --server or AG_SERVER says otherwise.
func (g *globals) gitTree() (*gitwork.Tree, *client.Client, error) {
	t, err := gitwork.Find(g.dir)
	if err != nil {
		return nil, nil, err
	}
	if !g.serverSet && t.Server != "" {
		g.server = t.Server
	}
	c, err := g.client()
	return t, c, err
}

// gitWorkspace is workspace outside a checkout: the git working tree set up for ag there
// (g.tree), whose lease commands act for its holder; notCheckout is the answer elsewhere.
func (g *globals) gitWorkspace(ctx context.Context, notCheckout error) (*checkout.Workspace, error) {
	t, c, err := g.gitTree()
	if errors.Is(err, gitwork.ErrNotGit) {
		return nil, notCheckout
	} else if err != nil {
		return nil, err
	}
	g.tree = t
	return t.Workspace(ctx, c)
}

// newSetupCmds are ag clone and ag init, which set a git working tree up alike.
func newSetupCmds(g *globals) []*cobra.Command {
	var s gitwork.Setup
	setUp := func(d *gitwork.Done, err error) error {
		if err != nil {
			return err
		} else if g.json {
			return g.printValue(d)
		}
		return termPrintf(g.stdout, "%s: a git working tree of %s, holder %s; remote %s (%s) pushes to %s; hooks in %s\n",
			d.Root, d.Repository, d.Holder, d.Remote, d.URL, gitwork.PushRef, d.Hooks)
	}
	clone := &cobra.Command{Use: "clone REPO DIR", Args: cobra.ExactArgs(2),
		Short: "clone a repository's mainline into a git working tree set up for ag, as ag init sets one up",
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.client(); err != nil {
				return err
			}
			s.Server, s.Repository = g.server, args[0]
			return setUp(gitwork.Clone(cmd.Context(), args[1], g.token, s))
		}}
	initCmd := &cobra.Command{Use: "init [--repository R] [--holder L]", Args: cobra.NoArgs,
		Short: "set up the git working tree at -C for ag: ag.* config, credential helper, remote pushing to refs/for/main, lease-checking hooks",
		RunE: func(cmd *cobra.Command, _ []string) error {
			s.Server, s.KeepServer = g.server, !g.serverSet
			return setUp(gitwork.Init(cmd.Context(), g.dir, s))
		}}
	initCmd.Flags().StringVar(&s.Repository, "repository", "", "the ag repository the tree works on (default: its ag.repository)")
	for _, c := range []*cobra.Command{clone, initCmd} {
		c.Flags().StringVar(&s.Holder, "holder", "", "the label the tree's leases are held under (default: its ag.holder, else its directory's name)")
	}
	return []*cobra.Command{clone, initCmd}
}

func newHookCmd(g *globals) *cobra.Command {
	return &cobra.Command{Use: "hook pre-commit|pre-push [REMOTE URL]", Args: cobra.RangeArgs(1, 3), Hidden: true,
		Short: "the check of ag's git hooks: refuse the paths the working tree's holder holds no current lease on",
		RunE: func(cmd *cobra.Command, args []string) error {
			t, c, err := g.gitTree()
			if err == nil {
				err = gitwork.Check(cmd.Context(), t, c, args[0], args[1:], cmd.InOrStdin(), g.stderr)
			}
			if err != nil { // 1, whatever the cause: git only asks whether to go on
				return withExit(ExitError, fmt.Errorf("%s: refused: %w", args[0], err))
			}
			return nil
		}}
}

// gitStatus is ag status in a git working tree: git's status beside the holder's leases.
func (g *globals) gitStatus(ctx context.Context, ws *checkout.Workspace) error {
	st, err := g.tree.Status(ctx, ws)
	if err != nil {
		return err
	} else if g.json {
		return g.printValue(st)
	}
	termPrintf(g.stdout, "repository %s, git working tree %s as %s\n", st.Repository, st.Root, st.Holder)
	if len(st.Changes) == 0 {
		fmt.Fprintln(g.stdout, "nothing to commit (git status)")
	}
	for _, c := range st.Changes {
		termPrintf(g.stdout, "%s\n", c.String())
	}
	return printHeld(g, st.Leases)
}

// gitSync is ag sync in a git working tree: git pull --rebase from ag's remote.
func (g *globals) gitSync(ctx context.Context, checkoutFlags bool) error {
	if checkoutFlags {
		return withExit(ExitUsage, errors.New("--merge, --theirs and --ours are an ag checkout's: in a git working tree git resolves a conflict (git rebase --continue)"))
	}
	res, err := g.tree.Sync(ctx, g.token)
	if res != nil && g.json {
		return errors.Join(g.printValue(res), err)
	} else if err == nil {
		termPrintf(g.stdout, "%s\n", res.Outcome())
	}
	return err
}
