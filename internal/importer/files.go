package importer

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
)

// ScanFiles answers the paths of the regular files under dir that an import sends, sorted, and
// what it skips (links and other files that are not regular). What no repository may hold
// (.git, .ag) is left out at any depth.
func ScanFiles(dir string) (paths, skipped []string, err error) {
	files, skipped, err := checkout.ScanTree(dir)
	if err != nil {
		return nil, nil, err
	}
	paths = make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths, skipped, nil
}

// FilesOptions is one import of a folder's files into a repository's mainline.
type FilesOptions struct {
	Repository string
	Dir        string
	// Paths are the files to import, relative to Dir, as ScanFiles answers them.
	Paths   []string
	Holder  string // the holder label of the import's leases
	Message string // the change message; empty: "import of" Dir's name
}

// FilesResult is what an import of files did.
type FilesResult struct {
	Change *agwpv1.Change // the last change, whose revision is the mainline
	Parts  int            // how many changes the files went in as
}

// Files imports o.Paths into the mainline of o.Repository, creating it when there is none, in
// one change or, beyond client.MaxEditsPerChange files, in several in path order, each on the
// revision the one before made, under a lease on the files' top-level entries.
func Files(ctx context.Context, c *client.Client, o FilesOptions) (*FilesResult, error) {
	r, err := c.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: o.Repository})
	if client.IsCode(err, connect.CodeNotFound) {
		created, cerr := c.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: o.Repository})
		if cerr != nil {
			return nil, cerr
		}
		r = &agwpv1.GetRepositoryResponse{Repository: created.GetRepository()}
	} else if err != nil {
		return nil, err
	}
	if v := r.GetRepository().GetValidation(); v != nil && len(o.Paths) > client.MaxEditsPerChange {
		return nil, &checkout.UsageError{Err: fmt.Errorf("%s has %d files, more than the %d a server takes in one change (one Integrate), and %s validates every change: an import in several changes would have each part validated alone. Import into a repository without validation, then set it with ag repo set-validation",
			o.Dir, len(o.Paths), client.MaxEditsPerChange, o.Repository)}
	}
	lease, err := c.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: o.Repository, Paths: topLevel(o.Paths), Holder: o.Holder, TTL: 10 * time.Minute})
	if err != nil {
		return nil, err
	}
	defer c.Leases.ReleaseLease(context.WithoutCancel(ctx), &agwpv1.ReleaseLeaseRequest{LeaseId: lease.GetId(), FencingToken: lease.GetFencingToken()}) //nolint:errcheck // best effort: it expires anyway
	ordered := o.Paths
	message := o.Message
	if message == "" {
		message = "import of " + filepath.Base(o.Dir)
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
			edits = append(edits, client.FileChange{Path: p, LocalPath: filepath.Join(o.Dir, filepath.FromSlash(p))})
		}
		msg := message
		if parts > 1 {
			msg = fmt.Sprintf("%s (part %d of %d)", message, i+1, parts)
			if i > 0 {
				// The lease must outlast the parts still to come.
				if _, err := c.Leases.RenewLease(ctx, &agwpv1.RenewLeaseRequest{LeaseId: lease.GetId(), FencingToken: lease.GetFencingToken(), Ttl: durationpb.New(10 * time.Minute)}); err != nil {
					return nil, importStopped(err, i, parts, change)
				}
			}
		}
		change, err = c.IntegrateFiles(ctx, client.IntegrateOptions{
			Repository: o.Repository, BaseRevision: base, Holder: o.Holder,
			FencingTokens: []uint64{lease.GetFencingToken()}, Message: msg, Changes: edits,
		})
		if err != nil {
			if i == 0 {
				return nil, err
			}
			return nil, importStopped(err, i, parts, change)
		}
		base = change.GetIntegratedRevision()
	}
	return &FilesResult{Change: change, Parts: parts}, nil
}

// topLevel answers the top-level entries of paths, sorted: leased, they cover every path.
func topLevel(paths []string) []string {
	top := map[string]bool{}
	for _, p := range paths {
		if i := strings.IndexByte(p, '/'); i >= 0 {
			top[p[:i+1]] = true
		} else {
			top[p] = true
		}
	}
	entries := make([]string, 0, len(top))
	for p := range top {
		entries = append(entries, p)
	}
	sort.Strings(entries)
	return entries
}

// importStopped explains an import in several changes that failed after done of them.
func importStopped(err error, done, parts int, last *agwpv1.Change) error {
	return fmt.Errorf("the import stopped after %d of its %d changes (the mainline is at %s, holding the first %d files in path order): %w. Run the same import again to finish it",
		done, parts, last.GetIntegratedRevision(), done*client.MaxEditsPerChange, err)
}
