package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// uploadChunkBytes bounds one UploadBlobs request, well under the server's content limit.
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

// FileChange is one path of an integration: its new content (from LocalPath or Content), or
// its deletion.
type FileChange struct {
	Path      string
	LocalPath string
	Content   []byte
	Delete    bool
}

// IntegrateOptions describe an integration.
type IntegrateOptions struct {
	Repository    string
	BaseRevision  string
	Holder        string
	FencingTokens []uint64
	Message       string
	Changes       []FileChange
}

// IntegrateFiles uploads the contents the server lacks and integrates the changes by digest.
func (c *Client) IntegrateFiles(ctx context.Context, o IntegrateOptions) (*agwpv1.Change, error) {
	edits := make([]*agwpv1.Edit, 0, len(o.Changes))
	byDigest := map[string][]byte{}
	var digests []string
	for _, ch := range o.Changes {
		if ch.Delete {
			edits = append(edits, &agwpv1.Edit{Path: ch.Path, Action: &agwpv1.Edit_Delete{Delete: true}})
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
		edits = append(edits, &agwpv1.Edit{Path: ch.Path, Action: &agwpv1.Edit_BlobDigest{BlobDigest: d}})
	}
	if len(digests) > 0 {
		missing, err := c.Repos.FindMissingBlobs(ctx, &agwpv1.FindMissingBlobsRequest{Digests: digests})
		if err != nil {
			return nil, err
		}
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
		for _, d := range missing.GetMissing() {
			b := byDigest[d]
			if size+len(b) > uploadChunkBytes {
				if err := flush(); err != nil {
					return nil, err
				}
			}
			chunk = append(chunk, b)
			size += len(b)
		}
		if err := flush(); err != nil {
			return nil, err
		}
	}
	res, err := c.Repos.Integrate(ctx, &agwpv1.IntegrateRequest{
		Repository: o.Repository, BaseRevision: o.BaseRevision, Holder: o.Holder,
		FencingTokens: o.FencingTokens, Message: o.Message, Edits: edits,
	})
	if err != nil {
		return nil, err
	}
	return res.GetChange(), nil
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
