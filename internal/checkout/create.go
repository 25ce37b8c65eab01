package checkout

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// CreateOptions is one checkout to write.
type CreateOptions struct {
	Repository string
	Dir        string // a new or empty directory, as the caller named it
	Server     string // the server the checkout's commands talk to
	Holder     string // the label its leases are held under; "": DefaultHolder of Dir
	// Progress (nil: none) answers the line that counts the files and bytes fetched, which
	// only the caller knows whether to draw.
	Progress func(files int, bytes int64) *Progress
}

// Create writes the mainline of o.Repository into o.Dir as a checkout, and answers the tree it
// wrote and the holder label it is edited under. A directory that holds anything is refused:
// the checkout's files would mix with others that look like local edits. The tree is checked
// before a file is written, and written in full or not at all (WriteFiles).
func Create(ctx context.Context, c *client.Client, o CreateOptions) (*agwpv1.GetTreeResponse, string, error) {
	if entries, err := os.ReadDir(o.Dir); err == nil && len(entries) > 0 {
		return nil, "", fmt.Errorf("%s is not empty: check out into a new or empty directory", o.Dir)
	}
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, "", err
	}
	holder := o.Holder
	if holder == "" {
		holder = DefaultHolder(abs)
	}
	if err := CheckHolder(holder); err != nil {
		return nil, "", err
	}
	tree, err := c.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: o.Repository})
	if err != nil {
		return nil, "", err
	}
	files, err := TreeFiles(tree.GetEntries())
	if err != nil {
		return nil, "", err
	}
	co := New(abs, o.Repository, o.Server, holder)
	co.SetBase(tree.GetRevision(), files)
	co.SetBlobSizes(BlobSizes(tree.GetEntries()))
	var size int64
	for _, e := range tree.GetEntries() {
		size += int64(e.GetSize())
	}
	var prog *Progress
	if o.Progress != nil {
		prog = o.Progress(len(files), size)
	}
	err = WriteFiles(ctx, c, co, prog)
	prog.Done()
	if err != nil {
		return nil, "", err
	}
	return tree, holder, nil
}

// holderByte reports whether ch may be part of a holder label: the server takes 1-128 of
// [A-Za-z0-9._:@/-], and a checkout must not be made under a label its leases cannot carry.
func holderByte(ch byte) bool {
	return ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || strings.IndexByte("._:@/-", ch) >= 0
}

// DefaultHolder derives a holder label from the name of the directory abs, so that two
// checkouts (or git working trees) of one principal are told apart in leases without being
// named.
func DefaultHolder(abs string) string {
	b := []byte(filepath.Base(abs))
	for i, ch := range b {
		if !holderByte(ch) {
			b[i] = '-'
		}
	}
	if len(b) == 0 || len(b) > 128 {
		return "checkout"
	}
	return string(b)
}

// CheckHolder refuses a --holder label the server would refuse, before a checkout or a git
// working tree is set up under it.
func CheckHolder(h string) error {
	if h == "" || len(h) > 128 {
		return errors.New("--holder: use 1-128 characters of [A-Za-z0-9._:@/-]")
	}
	for _, ch := range []byte(h) {
		if !holderByte(ch) {
			return fmt.Errorf("--holder %q: use 1-128 characters of [A-Za-z0-9._:@/-]", h)
		}
	}
	return nil
}
