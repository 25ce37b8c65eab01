package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/repo"
)

// maxResourceBytes bounds a file read as a resource: a model's context is the reader, and the
// file is on disk in the checkout for anything larger.
const maxResourceBytes = 4 << 20

// mainlineListing is the content of the mainline resource.
type mainlineListing struct {
	Repository string         `json:"repository"`
	Revision   string         `json:"revision"`
	Files      []listingEntry `json:"files"`
}

type listingEntry struct {
	Path string `json:"path"`
	Size uint64 `json:"size"`
	// Mode is git's: 100644, 100755 (executable), 120000 (a symbolic link, its target the
	// content) or 160000 (a submodule at Commit, which ag does not hold).
	Mode   string `json:"mode"`
	Commit string `json:"commit,omitempty"`
}

// addResources adds the mainline of the checkout's repository: its file listing, and each
// file's content by a URI template. They read the server's mainline, not the checkout, so an
// agent sees what the others integrated before it syncs.
func addResources(s *mcp.Server, a *agent, repository string) {
	base := "ag://" + repository + "/mainline"
	s.AddResource(&mcp.Resource{
		URI: base, Name: "mainline", MIMEType: "application/json",
		Description: "The files of " + repository + "'s mainline now: its revision, and each file's path, size and git mode (100644, 100755 executable, 120000 a symbolic link, 160000 a submodule with its commit).",
	}, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		tree, err := a.c.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: repository})
		if err != nil {
			return nil, a.resourceError(err)
		}
		l := mainlineListing{Repository: repository, Revision: tree.GetRevision(), Files: []listingEntry{}}
		for _, e := range tree.GetEntries() {
			mode := e.GetMode()
			if mode == "" {
				mode = repo.ModeFile
			}
			l.Files = append(l.Files, listingEntry{Path: e.GetPath(), Size: e.GetSize(), Mode: mode, Commit: e.GetGitlinkCommit()})
		}
		b, err := json.MarshalIndent(l, "", "  ")
		if err != nil {
			return nil, err
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: base, MIMEType: "application/json", Text: string(b)}}}, nil
	})
	// {+path} keeps the slashes of a path as they are (RFC 6570 reserved expansion).
	s.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: base + "/{+path}", Name: "mainline-file",
		Description: "A file of " + repository + "'s mainline as it is now, by its repository path (" + base + "/src/a.go); a symbolic link's content is its target.",
	}, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		uri := req.Params.URI
		p, err := url.PathUnescape(strings.TrimPrefix(uri, base+"/"))
		if err != nil || !strings.HasPrefix(uri, base+"/") {
			return nil, fmt.Errorf("%s is not a file of the mainline: use %s/PATH, with PATH relative to the repository's root", uri, base)
		}
		if err := repo.ValidatePath(p, false); err != nil {
			return nil, fmt.Errorf("the path %q %v: use %s/PATH, with PATH relative to the repository's root, such as src/a.go", checkout.ShortPath(p), err, base)
		}
		tree, err := a.c.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: repository})
		if err != nil {
			return nil, a.resourceError(err)
		}
		var entry *agwpv1.TreeEntry
		for _, e := range tree.GetEntries() {
			if e.GetPath() == p {
				entry = e
				break
			}
		}
		if entry == nil {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		if entry.GetMode() == repo.ModeGitlink {
			return nil, fmt.Errorf("%s is a submodule at commit %s, another repository's: ag holds none of its files", p, entry.GetGitlinkCommit())
		}
		if entry.GetSize() > maxResourceBytes {
			return nil, fmt.Errorf("%s is %d bytes, more than the %d a resource answers: read it from the checkout on disk after sync", p, entry.GetSize(), maxResourceBytes)
		}
		content, err := a.c.Blob(ctx, entry.GetDigest())
		if err != nil {
			return nil, a.resourceError(err)
		}
		rc := &mcp.ResourceContents{URI: uri}
		if utf8.Valid(content) {
			rc.MIMEType, rc.Text = "text/plain; charset=utf-8", string(content)
		} else {
			rc.MIMEType, rc.Blob = "application/octet-stream", content
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{rc}}, nil
	})
}

// resourceError words a server's refusal for the host, without the agent's token.
func (a *agent) resourceError(err error) error {
	return fmt.Errorf("%s", a.scrub(agentError(err)))
}
