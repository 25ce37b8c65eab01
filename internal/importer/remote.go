package importer

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5"

	"github.com/ag-coord/ag/internal/gitcredential"
)

// IsRemote reports whether an import's source names a repository to fetch over the network
// (https://, http://, git://) rather than a directory.
func IsRemote(src string) bool {
	u, err := url.Parse(src)
	return err == nil && u.Host != "" && (u.Scheme == "https" || u.Scheme == "http" || u.Scheme == "git")
}

// FetchRemote fetches the history the default branch of the repository at src reaches into a
// temporary repository (its objects alone, in DIR/.git, as PlanGit reads a working tree's), over
// git's own protocol, and answers its directory and what removes it. credential ("user:token", or a token alone; nil for none) authenticates to an http(s)
// source. It writes git's progress to log.
func FetchRemote(ctx context.Context, src string, credential []byte, log io.Writer) (dir string, remove func(), err error) {
	dir, err = os.MkdirTemp("", "ag-import-*")
	if err != nil {
		return "", nil, err
	}
	remove = func() { _ = os.RemoveAll(dir) }
	fmt.Fprintf(log, "fetching %s...\n", redacted(src))
	_, err = git.PlainCloneContext(ctx, filepath.Join(dir, ".git"), true, &git.CloneOptions{
		URL: src, Auth: gitcredential.ForgeAuth(credential), Tags: git.NoTags, SingleBranch: true, Progress: log,
	})
	if err != nil {
		remove()
		return "", nil, fmt.Errorf("fetch %s: %w", redacted(src), err)
	}
	return dir, remove, nil
}

// redacted answers src without a password it may hold, for messages.
func redacted(src string) string {
	u, err := url.Parse(src)
	if err != nil {
		return src
	}
	return u.Redacted()
}
