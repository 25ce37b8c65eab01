package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
)

func newRepoCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "repo", Short: "create, list and import repositories"}
	cmd.AddCommand(newRepoCreateCmd(g), newRepoSetValidationCmd(g), newRepoShowCmd(g), newRepoQueueCmd(g), newRepoListCmd(g), newRepoImportCmd(g))
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
				termPrintf(g.stdout, "validation: %s\n", describeValidation(v))
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
			case none && (len(args) > 1 || setPolicy.given()):
				return withExit(ExitUsage, errors.New("--none takes no command, and none of --timeout, --env, --depth, --batch and --lane"))
			case !none && len(args) == 1:
				return errors.New("name the command after --, e.g. `ag repo set-validation app -- go test ./...`, or pass --none")
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
				termPrintf(g.stdout, "repository %s: validation %s\n", res.GetRepository().GetName(), describeValidation(v))
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
					v = describeValidation(r.GetValidation())
				}
				termPrintf(tw, "%s\t%s\t%s\t%s\n", r.GetName(), r.GetMainline(), v, formatTime(r.GetCreatedAt()))
			}
			return tw.Flush()
		},
	}
	return list
}

func newRepoImportCmd(g *globals) *cobra.Command {
	var holder, message string
	var filesOnly, dryRun bool
	importCmd := &cobra.Command{
		Use:   "import NAME DIR",
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
the import would upload, uploading nothing.

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
			if !filesOnly && isGitRepository(args[1]) {
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
			printQueue(g.stdout, q)
			return nil
		},
	}
	return queue
}

// importTreeDryRun says what an import of dir's files would send, or every name it would
// refuse, sending nothing.
func importTreeDryRun(g *globals, name, dir string) error {
	files, skipped, err := checkout.ScanTree(dir)
	if err != nil {
		return withExit(ExitUsage, fmt.Errorf("read %s: %w", dir, err))
	}
	for _, s := range skipped {
		termPrintf(g.stderr, "would skip %s: not a regular file\n", s)
	}
	termPrintf(g.stdout, "the import of %s into %s would send %d files; nothing was sent\n", dir, name, len(files))
	return nil
}

func importTree(ctx context.Context, g *globals, c *client.Client, name, dir, holder, message string) error {
	files, skipped, err := checkout.ScanTree(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	if len(files) == 0 {
		return fmt.Errorf("%s has no files to import", dir)
	}
	for _, s := range skipped {
		termPrintf(g.stderr, "skipped %s: not a regular file\n", s)
	}
	r, err := c.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: name})
	if client.IsCode(err, connect.CodeNotFound) {
		created, cerr := c.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: name})
		if cerr != nil {
			return cerr
		}
		r = &agwpv1.GetRepositoryResponse{Repository: created.GetRepository()}
	} else if err != nil {
		return err
	}
	if v := r.GetRepository().GetValidation(); v != nil && len(files) > client.MaxEditsPerChange {
		return withExit(ExitUsage, fmt.Errorf("%s has %d files, more than the %d a server takes in one change (one Integrate), and %s validates every change: an import in several changes would have each part validated alone. Import into a repository without validation, then set it with ag repo set-validation",
			dir, len(files), client.MaxEditsPerChange, name))
	}
	// Lease the top-level entries: they cover every imported path.
	top := map[string]bool{}
	for p := range files {
		if i := strings.IndexByte(p, '/'); i >= 0 {
			top[p[:i+1]] = true
		} else {
			top[p] = true
		}
	}
	paths := make([]string, 0, len(top))
	for p := range top {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	lease, err := c.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: name, Paths: paths, Holder: holder, TTL: 10 * time.Minute})
	if err != nil {
		return err
	}
	defer c.Leases.ReleaseLease(context.WithoutCancel(ctx), &agwpv1.ReleaseLeaseRequest{LeaseId: lease.GetId(), FencingToken: lease.GetFencingToken()}) //nolint:errcheck // best effort: it expires anyway
	ordered := make([]string, 0, len(files))
	for p := range files {
		ordered = append(ordered, p)
	}
	sort.Strings(ordered)
	if message == "" {
		message = "import of " + filepath.Base(dir)
	}
	// One change holds at most client.MaxEditsPerChange paths: a larger import goes in as several,
	// in path order, each on the revision the one before made.
	parts := (len(ordered) + client.MaxEditsPerChange - 1) / client.MaxEditsPerChange
	base := r.GetRepository().GetMainline()
	var change *agwpv1.Change
	for i := range parts {
		part := ordered[i*client.MaxEditsPerChange : min(len(ordered), (i+1)*client.MaxEditsPerChange)]
		edits := make([]client.FileChange, 0, len(part))
		for _, p := range part {
			edits = append(edits, client.FileChange{Path: p, LocalPath: filepath.Join(dir, filepath.FromSlash(p))})
		}
		msg := message
		if parts > 1 {
			msg = fmt.Sprintf("%s (part %d of %d)", message, i+1, parts)
			if i > 0 {
				// The lease must outlast the parts still to come.
				if _, err := c.Leases.RenewLease(ctx, &agwpv1.RenewLeaseRequest{LeaseId: lease.GetId(), FencingToken: lease.GetFencingToken(), Ttl: durationpb.New(10 * time.Minute)}); err != nil {
					return importStopped(err, i, parts, change)
				}
			}
		}
		change, err = c.IntegrateFiles(ctx, client.IntegrateOptions{
			Repository: name, BaseRevision: base, Holder: holder,
			FencingTokens: []uint64{lease.GetFencingToken()}, Message: msg, Changes: edits,
		})
		if err != nil {
			if i == 0 {
				return err
			}
			return importStopped(err, i, parts, change)
		}
		base = change.GetIntegratedRevision()
	}
	if g.json {
		return g.printJSON(change)
	}
	if parts > 1 {
		termPrintf(g.stdout, "imported %d files into %s in %d changes of at most %d files: the last %s, mainline %s\n", len(files), name, parts, client.MaxEditsPerChange, change.GetId(), change.GetIntegratedRevision())
		return nil
	}
	termPrintf(g.stdout, "imported %d files into %s: change %s, mainline %s\n", len(files), name, change.GetId(), change.GetIntegratedRevision())
	return nil
}

// importStopped explains an import in several changes that failed after done of them.
func importStopped(err error, done, parts int, last *agwpv1.Change) error {
	return fmt.Errorf("the import stopped after %d of its %d changes (the mainline is at %s, holding the first %d files in path order): %w. Run the same import again to finish it",
		done, parts, last.GetIntegratedRevision(), done*client.MaxEditsPerChange, err)
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
			dir := args[1]
			if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
				return fmt.Errorf("%s is not empty: check out into a new or empty directory", dir)
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			if holder == "" {
				holder = defaultHolder(abs)
			}
			if err := validateHolderLabel(holder); err != nil {
				return err
			}
			tree, err := c.Repos.GetTree(cmd.Context(), &agwpv1.GetTreeRequest{Repository: args[0]})
			if err != nil {
				return err
			}
			files, err := checkout.TreeFiles(tree.GetEntries())
			if err != nil {
				return err
			}
			co := checkout.New(abs, args[0], g.server, holder)
			co.SetBase(tree.GetRevision(), files)
			co.SetBlobSizes(checkout.BlobSizes(tree.GetEntries()))
			var size int64
			for _, e := range tree.GetEntries() {
				size += int64(e.GetSize())
			}
			prog := newProgress(g, "checkout:", len(files), size)
			err = checkout.WriteFiles(cmd.Context(), c, co, prog)
			prog.Done()
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(tree)
			}
			termPrintf(g.stdout, "checked out %s at %s into %s (%d files); you edit as %s\n", args[0], tree.GetRevision(), dir, len(tree.GetEntries()), holder)
			return nil
		},
	}
	cmd.Flags().StringVar(&holder, "holder", "", "your holder label in this checkout (default: the directory's name)")
	return cmd
}

// defaultHolder derives a holder label from a directory name.
func defaultHolder(abs string) string {
	b := []byte(filepath.Base(abs))
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || strings.IndexByte("._:@/-", ch) >= 0) {
			b[i] = '-'
		}
	}
	if len(b) == 0 || len(b) > 128 {
		return "checkout"
	}
	return string(b)
}

func validateHolderLabel(h string) error {
	if h == "" || len(h) > 128 {
		return errors.New("--holder: use 1-128 characters of [A-Za-z0-9._:@/-]")
	}
	for _, ch := range []byte(h) {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || strings.IndexByte("._:@/-", ch) >= 0) {
			return fmt.Errorf("--holder %q: use 1-128 characters of [A-Za-z0-9._:@/-]", h)
		}
	}
	return nil
}
