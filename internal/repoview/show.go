package repoview

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// Summary is what `ag repo show` says of a repository, fetched before a line is printed so
// that a failure prints nothing half-way.
type Summary struct {
	Repository *agwpv1.GetRepositoryResponse
	Tree       *agwpv1.GetTreeResponse
	LastChange *agwpv1.Change // the change that made the mainline; nil when none did (an empty or imported repository)
}

// Fetch answers the repository name with its mainline's tree and the change behind it.
func Fetch(ctx context.Context, c *client.Client, name string) (*Summary, error) {
	r, err := c.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: name})
	if err != nil {
		return nil, err
	}
	tree, err := c.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: name})
	if err != nil {
		return nil, err
	}
	out := &Summary{Repository: r, Tree: tree}
	if id := tree.GetChangeId(); id != "" {
		res, err := c.Repos.GetChange(ctx, &agwpv1.GetChangeRequest{ChangeId: id})
		if err != nil {
			return nil, err
		}
		out.LastChange = res.GetChange()
	}
	return out, nil
}

// Queue answers the integration queue of the repository name, or nil from a server older than
// GetQueue: a queue is shown when the server has one, and its absence is no failure.
func Queue(ctx context.Context, c *client.Client, name string) (*agwpv1.GetQueueResponse, error) {
	q, err := c.Repos.GetQueue(ctx, &agwpv1.GetQueueRequest{Repository: name})
	if client.IsCode(err, connect.CodeUnimplemented) {
		return nil, nil
	}
	return q, err
}

// DescribeEntries counts a tree's entries by what git calls them: "12 files", or "12 files, 2
// executable, 1 symbolic link, 1 submodule", since a tree's digest alone says nothing of what
// it holds, and links and submodules are what ag treats apart.
func DescribeEntries(entries []*agwpv1.TreeEntry) string {
	var files, exec, links, subs int
	for _, e := range entries {
		switch e.GetMode() {
		case "160000":
			subs++
			continue
		case "120000":
			links++
			continue
		case "100755":
			exec++
		}
		files++
	}
	s := fmt.Sprintf("%d files", files)
	for _, part := range []struct {
		n          int
		one, other string
	}{{exec, "executable", "executable"}, {links, "symbolic link", "symbolic links"}, {subs, "submodule", "submodules"}} {
		switch {
		case part.n == 1:
			s += ", 1 " + part.one
		case part.n > 1:
			s += fmt.Sprintf(", %d %s", part.n, part.other)
		}
	}
	return s
}
