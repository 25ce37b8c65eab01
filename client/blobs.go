package client

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// BlobsPerCall is how many blobs Blobs asks for in one GetBlobs call: enough that a checkout
// of 100,000 files takes a few hundred calls, few enough that calls run in parallel.
const BlobsPerCall = 512

// Blobs fetches the blobs of digests (each once, whatever the repeats) with GetBlobs, in
// calls of BlobsPerCall, up to parallel calls at once (at least 1), and calls got with each
// blob once its content is checked against its digest. got runs on the fetching goroutines,
// several at once. The first error, from a call or from got, stops the rest and is answered.
func (c *Client) Blobs(ctx context.Context, digests []string, parallel int, got func(digest string, content []byte) error) error {
	return c.BlobsSized(ctx, digests, nil, parallel, got)
}

// BlobsSized is Blobs, told the sizes of some of the blobs (digest → size): one of
// LargeBlobBytes or more is read alone, streamed (ReadBlob), so that neither side holds it
// more than once.
func (c *Client) BlobsSized(ctx context.Context, digests []string, sizes map[string]uint64, parallel int, got func(digest string, content []byte) error) error {
	seen := make(map[string]bool, len(digests))
	unique := make([]string, 0, len(digests))
	var large [][]string
	for _, d := range digests {
		if seen[d] {
			continue
		}
		seen[d] = true
		if sizes[d] >= LargeBlobBytes {
			large = append(large, []string{d})
		} else {
			unique = append(unique, d)
		}
	}
	batches := large
	for i := 0; i < len(unique); i += BlobsPerCall {
		batches = append(batches, unique[i:min(len(unique), i+BlobsPerCall)])
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(max(parallel, 1), len(batches)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(batches) || ctx.Err() != nil {
					return
				}
				fetch := c.blobBatch
				if i < len(large) {
					fetch = c.largeBlob(sizes)
				}
				if err := fetch(ctx, batches[i], got); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// largeBlob answers a fetch of one large blob with ReadBlob.
func (c *Client) largeBlob(sizes map[string]uint64) func(ctx context.Context, digests []string, got func(digest string, content []byte) error) error {
	return func(ctx context.Context, digests []string, got func(digest string, content []byte) error) error {
		d := digests[0]
		content, err := c.ReadBlobBytes(ctx, d, int64(sizes[d]))
		if connect.CodeOf(err) == connect.CodeNotFound {
			return &BlobNotFoundError{Digest: d, Err: err}
		}
		if err != nil {
			return err
		}
		return got(d, content)
	}
}

// blobBatch fetches one batch with one GetBlobs call, which must answer exactly the digests
// asked for, in order.
func (c *Client) blobBatch(ctx context.Context, digests []string, got func(digest string, content []byte) error) error {
	stream, err := c.Repos.GetBlobs(ctx, &agwpv1.GetBlobsRequest{Digests: digests})
	if err != nil {
		return err
	}
	defer stream.Close()
	n := 0
	for stream.Receive() {
		for _, b := range stream.Msg().GetBlobs() {
			if n >= len(digests) || b.GetDigest() != digests[n] {
				return fmt.Errorf("GetBlobs answered blob %.80q where %s was due", b.GetDigest(), digestAt(digests, n))
			}
			if d := digestOf(b.GetContent()); d != digests[n] {
				return fmt.Errorf("blob %s: the server answered content whose digest is %s", digests[n], d)
			}
			if err := got(digests[n], b.GetContent()); err != nil {
				return err
			}
			n++
		}
	}
	if err := stream.Err(); err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound {
			for _, d := range digests[n:] {
				if strings.Contains(err.Error(), d) {
					return &BlobNotFoundError{Digest: d, Err: err}
				}
			}
		}
		return err
	}
	if n != len(digests) {
		return fmt.Errorf("GetBlobs ended after %d of the %d blobs asked for", n, len(digests))
	}
	return nil
}

// BlobNotFoundError says which blob the server does not hold.
type BlobNotFoundError struct {
	Digest string
	Err    error // the server's not_found
}

func (e *BlobNotFoundError) Error() string { return e.Err.Error() }

func (e *BlobNotFoundError) Unwrap() error { return e.Err }

func digestAt(digests []string, i int) string {
	if i < len(digests) {
		return digests[i]
	}
	return "no blob"
}
