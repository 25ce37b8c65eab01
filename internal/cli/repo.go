package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/importer"
	"github.com/ag-coord/ag/internal/repoview"
)

func newRepoCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "repo", Short: "create, list and import repositories"}
	cmd.AddCommand(newRepoCreateCmd(g), newRepoSetValidationCmd(g), newRepoShowCmd(g), newRepoQueueCmd(g), newRepoListCmd(g), newRepoImportCmd(g), newRepoSetMirrorCmd(g))
	return cmd
}

func newRepoCreateCmd(g *globals) *cobra.Command {
	var createPolicy validationFlags
	create := &cobra.Command{
		Use:   "create NAME [-- COMMAND ARGS...]",
		Short: "create a repository with an empty mainline (admin); with a command, changes reach the mainline only after it passed on a worker",
		Example: `  ag repo create app
  ag repo create app --timeout 15m -- go test ./...
  ag repo create app --lane 'web=web/:npm test' -- go test ./...`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			validation, err := createPolicy.validation(args[1:])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Repos.CreateRepository(cmd.Context(), &agwpv1.CreateRepositoryRequest{Name: args[0], Validation: validation})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res)
			}
			termPrintf(g.stdout, "created repository %s (mainline %s)\n", res.GetRepository().GetName(), res.GetRepository().GetMainline())
			if v := res.GetRepository().GetValidation(); v != nil {
				termPrintf(g.stdout, "validation: %s\n", repoview.DescribePolicy(v))
			}
			return nil
		},
	}
	createPolicy.register(create)
	return create
}

func newRepoSetValidationCmd(g *globals) *cobra.Command {
	var setPolicy validationFlags
	var none bool
	setValidation := &cobra.Command{
		Use:   "set-validation NAME {-- COMMAND ARGS... | --none}",
		Short: "set the command every change of a repository must pass before it reaches the mainline (admin)",
		Long: `Sets a repository's validation policy: a worker (ag-worker --kinds validate) runs COMMAND in
a fresh directory holding exactly the candidate tree (the mainline with the change applied), and
the change reaches the mainline only when it exits 0 and the worker's signed attestation
verifies. Changes already queued are validated under the policy in force when their turn comes.
--none removes the policy: changes integrate at once again.

With --lane, a change all of whose paths lie under one lane's prefixes is validated with that
lane's command instead, on the candidate tree without the other lanes' files, and does not wait
for the changes of other lanes; every other change is validated with COMMAND on the whole tree.
No path may belong to two lanes. The policy replaces the one before it whole: name every lane
each time.`,
		Example: `  ag repo set-validation app --timeout 15m --env GOFLAGS=-mod=mod -- go test ./...
  ag repo set-validation app --lane 'web=web/,docs/web/:npm test' --lane 'api=api/:go test ./api/...' -- go test ./...
  ag repo set-validation app --none`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var validation *agwpv1.Validation
			switch {
			case none && (len(args) > 1 || setPolicy.Given()):
				return withExit(ExitUsage, errors.New("--none takes no command, and none of --timeout, --env, --depth, --batch and --lane"))
			case !none && len(args) == 1 && setPolicy.Preset == "":
				return errors.New("name the command after --, e.g. `ag repo set-validation app -- go test ./...`, or a --preset, or pass --none")
			case !none:
				var err error
				if validation, err = setPolicy.validation(args[1:]); err != nil {
					return err
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Repos.SetValidation(cmd.Context(), &agwpv1.SetValidationRequest{Repository: args[0], Validation: validation})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res)
			}
			if v := res.GetRepository().GetValidation(); v != nil {
				termPrintf(g.stdout, "repository %s: validation %s\n", res.GetRepository().GetName(), repoview.DescribePolicy(v))
			} else {
				termPrintf(g.stdout, "repository %s: no validation; changes integrate at once\n", res.GetRepository().GetName())
			}
			return nil
		},
	}
	setPolicy.register(setValidation)
	setValidation.Flags().BoolVar(&none, "none", false, "remove the validation policy")
	return setValidation
}

func newRepoShowCmd(g *globals) *cobra.Command {
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "show a repository: its mainline, the change and attestation behind it, its validation policy and its queue",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			return showRepository(cmd.Context(), g, c, args[0])
		},
	}
	return show
}

func newRepoListCmd(g *globals) *cobra.Command {
	list := &cobra.Command{
		Use:   "list",
		Short: "list repositories",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			repos, err := checkout.AllPages(func(token string) ([]*agwpv1.Repository, string, error) {
				res, err := c.Repos.ListRepositories(cmd.Context(), &agwpv1.ListRepositoriesRequest{PageSize: 1000, PageToken: token})
				return res.GetRepositories(), res.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			out := &agwpv1.ListRepositoriesResponse{Repositories: repos}
			if g.json {
				return g.printJSON(out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tMAINLINE\tVALIDATION\tCREATED")
			for _, r := range out.GetRepositories() {
				v := "-"
				if r.GetValidation() != nil {
					v = repoview.DescribePolicy(r.GetValidation())
				}
				termPrintf(tw, "%s\t%s\t%s\t%s\n", r.GetName(), r.GetMainline(), v, formatTime(r.GetCreatedAt()))
			}
			return tw.Flush()
		},
	}
	return list
}

func newRepoImportCmd(g *globals) *cobra.Command {
	var holder, message, credentialFile string
	var filesOnly, dryRun bool
	var shallow importer.Shallow
	importCmd := &cobra.Command{
		Use:   "import NAME DIR|URL",
		Short: "start a repository from a git history, or load a folder's files into a repository's mainline",
		Long: `When DIR is a git repository (it holds .git), creates the repository NAME from the history
its HEAD reaches, keeping every commit's id: the mainline is HEAD, agents' changes become
commits on top of it, and the clone in DIR fetches them from ag and fast-forwards (git remote
add ag SERVER/git/NAME.git). Uncommitted changes in DIR are not imported. Objects the server
holds are not sent again: an import that stopped is finished by running it again. Files,
executable files, symbolic links and submodules are kept as git has them. Before anything is
uploaded, every tree of the history is checked: when some name is one ag refuses (not UTF-8, a
control character, .git or .ag, too long), the import lists every such path with its rule and
the commit that brings it in, and writes nothing. --dry-run does the same checks and says what
the import would upload, uploading nothing. A URL (https://, http://, git://) is fetched over
git's protocol first, its default branch's history, with --credential-file for a forge that
asks for one. A shallow clone is imported as it is, every commit id kept: the repository's
history starts where the clone's does (ag repo show: "history from COMMIT on"), and git clones
of it are shallow there. --depth N or --since DATE makes that shallow clone of DIR or URL first.

Otherwise, or with --files, loads every regular file under DIR into the repository's mainline, in one change, under
leases it takes on DIR's top-level entries and releases afterwards. Symbolic links are skipped,
never followed; so is what no repository may hold, at any depth: .git and .ag (a nested
repository's .git among them).

One change holds at most 10,000 files: more go in as several changes, in path order, each on
the revision the one before made; if one fails, those before it stay, and the same import run
again finishes it. A repository with a validation policy takes no import of more than 10,000
files: import first, then set the policy.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if filesOnly && shallow.Given() {
				return withExit(ExitUsage, errors.New("--depth and --since import part of a git history, not files (--files)"))
			}
			if importer.IsRemote(args[1]) || shallow.Given() {
				credential, err := readCredential(credentialFile)
				if err != nil {
					return err
				}
				dir, remove, err := importer.Fetch(cmd.Context(), args[1], credential, shallow, g.stderr)
				if err != nil {
					return err
				}
				defer remove()
				return importGit(cmd.Context(), g, c, args[0], dir, dryRun)
			}
			if !filesOnly && importer.IsGitRepository(args[1]) {
				if cmd.Flags().Changed("message") || cmd.Flags().Changed("holder") {
					return withExit(ExitUsage, errors.New("-m and --holder are for a files import: a git history keeps its commits' messages and authors (add --files to import the files as one change)"))
				}
				return importGit(cmd.Context(), g, c, args[0], args[1], dryRun)
			}
			if dryRun {
				return importTreeDryRun(g, args[0], args[1])
			}
			return importTree(cmd.Context(), g, c, args[0], args[1], holder, message)
		},
	}
	importCmd.Flags().BoolVar(&filesOnly, "files", false, "import DIR's files as a change even when DIR is a git repository")
	importCmd.Flags().BoolVar(&dryRun, "dry-run", false, "check what the import would refuse (every name, with its rule) or send, sending nothing")
	importCmd.Flags().StringVar(&holder, "holder", "import", "holder label of the import's leases")
	importCmd.Flags().StringVarP(&message, "message", "m", "", "change message (default: import of DIR)")
	importCmd.Flags().StringVar(&credentialFile, "credential-file", "", "a file holding the forge's credential for a URL: user:token, or a token")
	importCmd.Flags().IntVar(&shallow.Depth, "depth", 0, "import a shallow clone of DIR or URL with the newest N commits (git clone --depth)")
	importCmd.Flags().StringVar(&shallow.Since, "since", "", "import a shallow clone of DIR or URL with the commits since DATE (git clone --shallow-since)")
	return importCmd
}

func newRepoQueueCmd(g *globals) *cobra.Command {
	queue := &cobra.Command{
		Use:   "queue NAME",
		Short: "show a repository's integration queue: the candidates validating, with their workers, and the changes waiting",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			q, err := c.Repos.GetQueue(cmd.Context(), &agwpv1.GetQueueRequest{Repository: args[0]})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(q)
			}
			termPrintf(g.stdout, "mainline %s\n", q.GetMainline())
			repoview.WriteQueue(g.stdout, q)
			return nil
		},
	}
	return queue
}

// importTreeDryRun says what an import of dir's files would send, or every name it would
// refuse, sending nothing.
func importTreeDryRun(g *globals, name, dir string) error {
	paths, skipped, err := importer.ScanFiles(dir)
	if err != nil {
		return withExit(ExitUsage, fmt.Errorf("read %s: %w", dir, err))
	}
	for _, s := range skipped {
		termPrintf(g.stderr, "would skip %s: not a regular file\n", s)
	}
	termPrintf(g.stdout, "the import of %s into %s would send %d files; nothing was sent\n", dir, name, len(paths))
	return nil
}

func importTree(ctx context.Context, g *globals, c *client.Client, name, dir, holder, message string) error {
	paths, skipped, err := importer.ScanFiles(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	if len(paths) == 0 {
		return fmt.Errorf("%s has no files to import", dir)
	}
	for _, s := range skipped {
		termPrintf(g.stderr, "skipped %s: not a regular file\n", s)
	}
	res, err := importer.Files(ctx, c, importer.FilesOptions{Repository: name, Dir: dir, Paths: paths, Holder: holder, Message: message})
	if err != nil {
		return err
	}
	change := res.Change
	if g.json {
		return g.printJSON(change)
	}
	if res.Parts > 1 {
		termPrintf(g.stdout, "imported %d files into %s in %d changes of at most %d files: the last %s, mainline %s\n", len(paths), name, res.Parts, client.MaxEditsPerChange, change.GetId(), change.GetIntegratedRevision())
		return nil
	}
	termPrintf(g.stdout, "imported %d files into %s: change %s, mainline %s\n", len(paths), name, change.GetId(), change.GetIntegratedRevision())
	return nil
}

// importGit starts the repository name from the history that the HEAD of the git repository
// in dir reaches (internal/importer), or with dryRun says what that would upload.
func importGit(ctx context.Context, g *globals, c *client.Client, name, dir string, dryRun bool) error {
	plan, err := importer.PlanGit(ctx, c, name, dir, g.stderr)
	if err != nil {
		return err
	}
	h, missing := plan.History, plan.Missing
	if dryRun {
		if g.json {
			return g.printValue(map[string]any{"head": h.Head.String(), "shallow": h.ShallowIDs(), "commits": len(h.Commits), "trees": len(h.Trees), "blobs": len(h.Blobs),
				"files": h.Files, "missing": map[string]int{"commits": importer.CountMissing(h.Commits, missing), "trees": importer.CountMissing(h.Trees, missing), "blobs": importer.CountMissing(h.Blobs, missing)}})
		}
		fmt.Fprintf(g.stdout, "the import of %s into %s would upload %d blobs, %d trees and %d commits the server lacks (of %d, %d, %d), and start %s at %s; nothing was uploaded\n",
			dir, name, importer.CountMissing(h.Blobs, missing), importer.CountMissing(h.Trees, missing), importer.CountMissing(h.Commits, missing),
			len(h.Blobs), len(h.Trees), len(h.Commits), name, h.HeadLabel())
		return nil
	}
	repo, err := plan.Start(ctx, c, func(verb string, files int, bytes int64) *checkout.Progress {
		return newProgress(g, verb, files, bytes)
	})
	if err != nil {
		return err
	}
	if g.json {
		return g.printJSON(repo)
	}
	fmt.Fprintf(g.stdout, "imported the git history of %s into %s: %d commits, %d files at %s; mainline %s\n",
		dir, name, len(h.Commits), h.Files, h.HeadLabel(), repo.GetMainline())
	fmt.Fprintf(g.stdout, "fetch from ag in that clone: git remote add ag %s/git/%s.git\n", c.BaseURL(), name)
	return nil
}

func newCheckoutCmd(g *globals) *cobra.Command {
	var holder string
	cmd := &cobra.Command{
		Use:   "checkout REPO DIR",
		Short: "write a repository's mainline into DIR and remember it as the base of your edits",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			tree, as, err := checkout.Create(cmd.Context(), c, checkout.CreateOptions{Repository: args[0], Dir: args[1], Server: g.server, Holder: holder,
				Progress: func(files int, bytes int64) *checkout.Progress { return newProgress(g, "checkout:", files, bytes) }})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(tree)
			}
			termPrintf(g.stdout, "checked out %s at %s into %s (%d files); you edit as %s\n", args[0], tree.GetRevision(), args[1], len(tree.GetEntries()), as)
			return nil
		},
	}
	cmd.Flags().StringVar(&holder, "holder", "", "your holder label in this checkout (default: the directory's name)")
	return cmd
}

// readCredential reads a forge's credential from file, none for "".
func readCredential(file string) ([]byte, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, withExit(ExitUsage, err)
	}
	return b, nil
}

func newRepoSetMirrorCmd(g *globals) *cobra.Command {
	var credentialFile, branch string
	var remove bool
	cmd := &cobra.Command{
		Use:   "set-mirror NAME [URL]",
		Short: "push the repository's mainline to the team's forge after every landing, never forcing",
		Long: `After every landing, and at once, the server pushes the mainline to URL's branch (--branch,
default main) over git's smart HTTP protocol. A forge branch holding a commit the mainline does
not is never overwritten: the mirror is said to have diverged (ag repo show, the console, the
ag_mirror_state metric, an audit event) and ag keeps landing. --credential-file names a file
holding user:token (or a token alone), which the server keeps and never shows. --remove
removes the mirror. Admins only.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &agwpv1.SetMirrorRequest{Repository: args[0], Branch: branch}
			switch {
			case remove == (len(args) == 2):
				return withExit(ExitUsage, errors.New("give the forge's URL, or --remove"))
			case len(args) == 2:
				req.Url = args[1]
			}
			credential, err := readCredential(credentialFile)
			if err != nil {
				return err
			}
			req.Credential = string(credential)
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Repos.SetMirror(cmd.Context(), req)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res.GetRepository())
			}
			if m := res.GetRepository().GetMirror(); m != nil {
				return termPrintf(g.stdout, "%s mirrors to %s\n", args[0], repoview.DescribeMirror(m))
			}
			return termPrintf(g.stdout, "%s has no forge mirror now\n", args[0])
		},
	}
	cmd.Flags().StringVar(&credentialFile, "credential-file", "", "a file holding the forge's credential: user:token, or a token")
	cmd.Flags().StringVar(&branch, "branch", "main", "the forge's branch")
	cmd.Flags().BoolVar(&remove, "remove", false, "remove the mirror")
	return cmd
}
