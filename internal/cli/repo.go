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

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

func newRepoCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "repo", Short: "create, list and import repositories"}
	var createPolicy validationFlags
	create := &cobra.Command{
		Use:   "create NAME [-- COMMAND ARGS...]",
		Short: "create a repository with an empty mainline (admin); with a command, changes reach the mainline only after it passed on a worker",
		Example: `  ag repo create app
  ag repo create app --timeout 15m -- go test ./...`,
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
			fmt.Fprintf(g.stdout, "created repository %s (mainline %s)\n", res.GetRepository().GetName(), res.GetRepository().GetMainline())
			if v := res.GetRepository().GetValidation(); v != nil {
				fmt.Fprintf(g.stdout, "validation: %s\n", describeValidation(v))
			}
			return nil
		},
	}
	createPolicy.register(create)
	var setPolicy validationFlags
	var none bool
	setValidation := &cobra.Command{
		Use:   "set-validation NAME {-- COMMAND ARGS... | --none}",
		Short: "set the command every change of a repository must pass before it reaches the mainline (admin)",
		Long: `Sets a repository's validation policy: a worker (ag-worker --kinds validate) runs COMMAND in
a fresh directory holding exactly the candidate tree (the mainline with the change applied), and
the change reaches the mainline only when it exits 0 and the worker's signed attestation
verifies. Changes already queued are validated under the policy in force when their turn comes.
--none removes the policy: changes integrate at once again.`,
		Example: `  ag repo set-validation app --timeout 15m --env GOFLAGS=-mod=mod -- go test ./...
  ag repo set-validation app --none`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var validation *agwpv1.Validation
			switch {
			case none && len(args) > 1:
				return errors.New("--none takes no command")
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
				fmt.Fprintf(g.stdout, "repository %s: validation %s\n", res.GetRepository().GetName(), describeValidation(v))
			} else {
				fmt.Fprintf(g.stdout, "repository %s: no validation; changes integrate at once\n", res.GetRepository().GetName())
			}
			return nil
		},
	}
	setPolicy.register(setValidation)
	setValidation.Flags().BoolVar(&none, "none", false, "remove the validation policy")
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "show a repository: its mainline, the change and attestation behind it, and its validation policy",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			return showRepository(cmd.Context(), g, c, args[0])
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "list repositories",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			repos, err := allPages(func(token string) ([]*agwpv1.Repository, string, error) {
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
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.GetName(), r.GetMainline(), v, formatTime(r.GetCreatedAt()))
			}
			return tw.Flush()
		},
	}
	var holder, message string
	importCmd := &cobra.Command{
		Use:   "import NAME DIR",
		Short: "load the files of a local folder into a repository's mainline (creating the repository when missing)",
		Long: `Loads every regular file under DIR into the repository's mainline, in one change, under
leases it takes on DIR's top-level entries and releases afterwards. Symbolic links are skipped,
never followed; .git/ and .ag/ are skipped.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			return importTree(cmd.Context(), g, c, args[0], args[1], holder, message)
		},
	}
	importCmd.Flags().StringVar(&holder, "holder", "import", "holder label of the import's leases")
	importCmd.Flags().StringVarP(&message, "message", "m", "", "change message (default: import of DIR)")
	cmd.AddCommand(create, setValidation, show, list, importCmd)
	return cmd
}

func importTree(ctx context.Context, g *globals, c *client.Client, name, dir, holder, message string) error {
	files, skipped, err := scanTree(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	if len(files) == 0 {
		return fmt.Errorf("%s has no files to import", dir)
	}
	for _, s := range skipped {
		fmt.Fprintf(g.stderr, "skipped %s: not a regular file\n", s)
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
	edits := make([]client.FileChange, 0, len(files))
	for p := range files {
		edits = append(edits, client.FileChange{Path: p, LocalPath: filepath.Join(dir, filepath.FromSlash(p))})
	}
	if message == "" {
		message = "import of " + filepath.Base(dir)
	}
	change, err := c.IntegrateFiles(ctx, client.IntegrateOptions{
		Repository: name, BaseRevision: r.GetRepository().GetMainline(), Holder: holder,
		FencingTokens: []uint64{lease.GetFencingToken()}, Message: message, Changes: edits,
	})
	if err != nil {
		return err
	}
	if g.json {
		return g.printJSON(change)
	}
	fmt.Fprintf(g.stdout, "imported %d files into %s: change %s, mainline %s\n", len(files), name, change.GetId(), change.GetIntegratedRevision())
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
			co := &checkout{Repository: args[0], Server: g.server, Holder: holder, Files: map[string]string{}, root: abs}
			tree, err := c.Repos.GetTree(cmd.Context(), &agwpv1.GetTreeRequest{Repository: args[0]})
			if err != nil {
				return err
			}
			if err := os.MkdirAll(abs, 0o755); err != nil {
				return err
			}
			for _, e := range tree.GetEntries() {
				content, err := c.Blob(cmd.Context(), e.GetDigest())
				if err != nil {
					return err
				}
				if err := writeFile(abs, e.GetPath(), content); err != nil {
					return err
				}
				co.Files[e.GetPath()] = e.GetDigest()
			}
			co.BaseRevision = tree.GetRevision()
			if err := co.save(); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(tree)
			}
			fmt.Fprintf(g.stdout, "checked out %s at %s into %s (%d files); you edit as %s\n", args[0], tree.GetRevision(), dir, len(tree.GetEntries()), holder)
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
