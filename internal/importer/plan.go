package importer

import (
	"context"
	"fmt"
	"io"

	"connectrpc.com/connect"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
)

// GitImport is the import of a git history into a new repository, read, checked and compared
// with what the server holds, before anything is sent: a dry run reports it, Start sends it.
type GitImport struct {
	Repository string
	Dir        string
	History    *GitHistory
	Missing    map[plumbing.Hash]bool // the history's objects the server lacks
	storage    *filesystem.Storage
	packs      *Packs
}

// PlanGit reads the history that the HEAD of the git repository in dir reaches, for a new
// repository name, and asks the server which of its objects it lacks. It writes to log what it
// reads as it reads it, since a long history takes a while. A history starts a repository and
// never joins one, so that every commit keeps its id; an existing name, or a history holding
// paths the server would refuse, is a *checkout.UsageError.
func PlanGit(ctx context.Context, c *client.Client, name, dir string, log io.Writer) (*GitImport, error) {
	if _, err := c.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: name}); err == nil {
		return nil, &checkout.UsageError{Err: fmt.Errorf("repository %s exists: a git history starts a new repository (ag repo import --files imports %s's files as one change instead)", name, dir)}
	} else if !client.IsCode(err, connect.CodeNotFound) {
		return nil, err
	}
	st, err := OpenGitStorage(dir)
	if err != nil {
		return nil, fmt.Errorf("open the git repository %s: %w", dir, err)
	}
	fmt.Fprintf(log, "reading the history of %s...\n", dir)
	h, err := ReadGitHistory(ctx, st)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "%d commits, %d trees, %d blobs; %d files at HEAD %s\n",
		len(h.Commits), len(h.Trees), len(h.Blobs), h.Files, h.HeadLabel())
	if len(h.Refused) > 0 {
		return nil, h.Refusal(dir)
	}
	missing, err := MissingGitObjects(ctx, c, h)
	if err != nil {
		return nil, err
	}
	packs, err := OpenPacks(st.Filesystem().Root())
	if err != nil {
		return nil, fmt.Errorf("open the packs of %s: %w", dir, err)
	}
	return &GitImport{Repository: name, Dir: dir, History: h, Missing: missing, storage: st, packs: packs}, nil
}

// Start uploads the objects the server lacks and creates the repository with the history's
// HEAD as its mainline, so that a clone of Dir fetches from ag and fast-forwards. Objects the
// server holds are not sent again: an import that stopped is finished by running it again. A
// shallow history's repository keeps where it stops (CreateRepositoryRequest.shallow).
func (gi *GitImport) Start(ctx context.Context, c *client.Client, progress ProgressFunc) (*agwpv1.Repository, error) {
	defer gi.packs.Close()
	if err := UploadGitHistory(ctx, c, gi.storage, gi.packs, gi.History, gi.Missing, progress); err != nil {
		return nil, err
	}
	created, err := c.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: gi.Repository, GitCommit: gi.History.Head.String(),
		Shallow: gi.History.ShallowIDs()})
	if err != nil {
		return nil, err
	}
	return created.GetRepository(), nil
}
