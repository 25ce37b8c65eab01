package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// The server's limits on one content request (docs/api.md, Limits), which IntegrateFiles keeps
// to by splitting its calls. A change is one Integrate call: MaxEditsPerChange is a limit on a
// change, not on a call that can be split.
const (
	// MaxDigestsPerCall is how many digests one FindMissingBlobs may ask about.
	MaxDigestsPerCall = 10000
	// MaxBlobsPerUpload is how many blobs one UploadBlobs may carry.
	MaxBlobsPerUpload = 10000
	// MaxEditsPerChange is how many paths one Integrate may change.
	MaxEditsPerChange = 10000
)

// uploadChunkBytes bounds one UploadBlobs request, well under the server's 64 MiB of content.
const uploadChunkBytes = 16 << 20

// AcquireLeaseOptions describe a lease request.
type AcquireLeaseOptions struct {
	Repository string
	Paths      []string      // "a/b.go" for a file, "a/" for everything under a/
	Holder     string        // the holder label
	TTL        time.Duration // 0 = the server's default (5m)
	Wait       time.Duration // wait up to this long for conflicting leases to go (max 60s)
}

// AcquireLease asks for a lease; a conflict is an error with code aborted naming the holder.
func (c *Client) AcquireLease(ctx context.Context, o AcquireLeaseOptions) (*agwpv1.Lease, error) {
	req := &agwpv1.AcquireLeaseRequest{Repository: o.Repository, Paths: o.Paths, Holder: o.Holder}
	if o.TTL > 0 {
		req.Ttl = durationpb.New(o.TTL)
	}
	if o.Wait > 0 {
		req.Wait = durationpb.New(o.Wait)
	}
	res, err := c.Leases.AcquireLease(ctx, req)
	if err != nil {
		return nil, err
	}
	return res.GetLease(), nil
}

// FileChange is one path of an integration: its new content (from LocalPath or Content) and
// mode, its deletion, or a submodule's new commit.
type FileChange struct {
	Path      string
	LocalPath string
	Content   []byte
	Delete    bool
	// Mode is the path's git mode after the write: "100644", "100755" (executable) or "120000"
	// (a symbolic link, Content its target). Empty keeps the mode the path has in the base
	// revision (100644 for a new path), so that editing a script leaves it executable.
	Mode string
	// GitlinkCommit moves the submodule at Path to this commit (40 lowercase hex): the one
	// change of a submodule there is. Content, LocalPath and Mode are then unused.
	GitlinkCommit string
}

// IntegrateOptions describe an integration.
type IntegrateOptions struct {
	Repository    string
	BaseRevision  string
	Holder        string
	FencingTokens []uint64
	Message       string
	Changes       []FileChange
	// TaskID and TaskClaimNumber name the task claim the change carries and finishes
	// (TaskService): refused unless it is current and the holder's.
	TaskID          string
	TaskClaimNumber uint64
}

// IntegrateFiles uploads the contents the server lacks and integrates the changes by digest, in
// one change. The contents go in as many FindMissingBlobs and UploadBlobs calls as the server's
// limits ask; more than MaxEditsPerChange changes is refused before anything is read or sent.
func (c *Client) IntegrateFiles(ctx context.Context, o IntegrateOptions) (*agwpv1.Change, error) {
	if len(o.Changes) > MaxEditsPerChange {
		return nil, fmt.Errorf("%d paths in one change, more than the %d a server takes in one Integrate: send them as several changes", len(o.Changes), MaxEditsPerChange)
	}
	edits := make([]*agwpv1.Edit, 0, len(o.Changes))
	byDigest := map[string][]byte{}
	var digests []string
	for _, ch := range o.Changes {
		if ch.Delete {
			edits = append(edits, &agwpv1.Edit{Path: ch.Path, Action: &agwpv1.Edit_Delete{Delete: true}})
			continue
		}
		if ch.GitlinkCommit != "" {
			edits = append(edits, &agwpv1.Edit{Path: ch.Path, Action: &agwpv1.Edit_GitlinkCommit{GitlinkCommit: ch.GitlinkCommit}})
			continue
		}
		content := ch.Content
		if ch.LocalPath != "" {
			b, err := os.ReadFile(ch.LocalPath)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", ch.LocalPath, err)
			}
			content = b
		}
		d := digestOf(content)
		if _, ok := byDigest[d]; !ok {
			byDigest[d] = content
			digests = append(digests, d)
		}
		edits = append(edits, &agwpv1.Edit{Path: ch.Path, Action: &agwpv1.Edit_BlobDigest{BlobDigest: d}, Mode: ch.Mode})
	}
	if err := c.uploadMissing(ctx, digests, byDigest); err != nil {
		return nil, err
	}
	res, err := c.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{
		Repository: o.Repository, BaseRevision: o.BaseRevision, Holder: o.Holder,
		FencingTokens: o.FencingTokens, Message: o.Message, Edits: edits, TaskId: o.TaskID, TaskClaimNumber: o.TaskClaimNumber,
	})
	if err != nil {
		return nil, err
	}
	return res.GetChange(), nil
}

// uploadMissing asks which of digests the server lacks, MaxDigestsPerCall at a time, and uploads
// their contents (from byDigest) in calls of at most uploadChunkBytes and MaxBlobsPerUpload
// blobs; a blob of LargeBlobBytes or more goes in parts (UploadBlob).
func (c *Client) uploadMissing(ctx context.Context, digests []string, byDigest map[string][]byte) error {
	var chunk [][]byte
	var size int
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		_, err := c.Repos.UploadBlobs(ctx, &agwpv1.UploadBlobsRequest{Blobs: chunk})
		chunk, size = nil, 0
		return err
	}
	for len(digests) > 0 {
		ask := digests[:min(len(digests), MaxDigestsPerCall)]
		digests = digests[len(ask):]
		missing, err := c.Repos.FindMissingBlobs(ctx, &agwpv1.FindMissingBlobsRequest{Digests: ask})
		if err != nil {
			return err
		}
		for _, d := range missing.GetMissing() {
			b, ok := byDigest[d]
			if !ok {
				return fmt.Errorf("FindMissingBlobs answered %.80q, a digest it was not asked about", d)
			}
			if len(b) >= LargeBlobBytes {
				if err := c.UploadBlob(ctx, bytes.NewReader(b), int64(len(b)), d); err != nil {
					return err
				}
				continue
			}
			if size+len(b) > uploadChunkBytes || len(chunk) == MaxBlobsPerUpload {
				if err := flush(); err != nil {
					return err
				}
			}
			chunk = append(chunk, b)
			size += len(b)
		}
	}
	return flush()
}

// Blob fetches a blob and checks that its content has the digest asked for.
func (c *Client) Blob(ctx context.Context, digest string) ([]byte, error) {
	res, err := c.Repos.GetBlob(ctx, &agwpv1.GetBlobRequest{Digest: digest})
	if err != nil {
		return nil, err
	}
	if got := digestOf(res.GetContent()); got != digest {
		return nil, fmt.Errorf("blob %s: the server answered content whose digest is %s", digest, got)
	}
	return res.GetContent(), nil
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
