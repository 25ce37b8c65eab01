package gitstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// A one-file change at the top of a repository of 100,000 files rewrites a root tree of 1,000
// entries: decoding and encoding it is most of what Integrate costs there. go-git encodes with
// one fmt.Fprintf per entry and hashes every tree it decodes; the codec here does neither, and
// an object storer that keeps decoded trees (TreeReader) spares decoding the same tree again.

// TreeReader is an object storer that answers trees already decoded, such as from a cache.
// The entries are in git's order and are the caller's to read, never to change.
type TreeReader interface {
	TreeEntries(id plumbing.Hash) ([]object.TreeEntry, error)
}

// TreeKeeper is an object storer that keeps the entries of the trees written to it, decoded,
// so that reading them back costs no decoding. writeTreeObject hands them over: the storer may
// keep the slice, which nobody changes afterwards.
type TreeKeeper interface {
	KeepTree(id plumbing.Hash, entries []object.TreeEntry)
}

// TreeEntries answers the entries of the tree id in s, through s's own TreeEntries when it
// has one. The entries are not to be changed.
func TreeEntries(s storer.EncodedObjectStorer, id plumbing.Hash) ([]object.TreeEntry, error) {
	if r, ok := s.(TreeReader); ok {
		return r.TreeEntries(id)
	}
	o, err := s.EncodedObject(plumbing.TreeObject, id)
	if err != nil {
		return nil, err
	}
	r, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	return DecodeTree(data)
}

// DecodeTree parses the content of a tree object: entries of "MODE NAME\0" and a 20-byte id.
func DecodeTree(data []byte) ([]object.TreeEntry, error) {
	var entries []object.TreeEntry
	for len(data) > 0 {
		sp := bytes.IndexByte(data, ' ')
		if sp <= 0 {
			return nil, errors.New("tree: an entry without a mode")
		}
		mode, err := strconv.ParseUint(string(data[:sp]), 8, 32)
		if err != nil {
			return nil, fmt.Errorf("tree: mode %q: %w", data[:sp], err)
		}
		data = data[sp+1:]
		nul := bytes.IndexByte(data, 0)
		if nul < 0 || len(data) < nul+1+20 {
			return nil, errors.New("tree: an entry cut short")
		}
		var id plumbing.Hash
		copy(id[:], data[nul+1:nul+21])
		entries = append(entries, object.TreeEntry{Name: string(data[:nul]), Mode: filemode.FileMode(mode), Hash: id})
		data = data[nul+21:]
	}
	return entries, nil
}

// DecodeCanonicalTree is DecodeTree for a tree from elsewhere, which every git client will
// read: it also refuses entries out of git's order or named twice, and modes not written as
// git writes them (a zero-padded "040000"), which git's fsck reports.
func DecodeCanonicalTree(data []byte) ([]object.TreeEntry, error) {
	entries, err := DecodeTree(data)
	if err != nil {
		return nil, err
	}
	for i := 1; i < len(entries); i++ {
		if compareTreeEntries(entries[i-1], entries[i]) >= 0 {
			return nil, fmt.Errorf("tree: %q comes after %q: entries must be in git's order, each name once", entries[i].Name, entries[i-1].Name)
		}
	}
	if !bytes.Equal(EncodeTree(entries), data) {
		return nil, errors.New("tree: not encoded as git encodes it (a mode with a leading zero?)")
	}
	return entries, nil
}

// EncodeTree answers the content of a tree object holding entries, which must be in git's
// order (SortTreeEntries).
func EncodeTree(entries []object.TreeEntry) []byte {
	size := 0
	for _, e := range entries {
		size += 7 + len(e.Name) + 1 + 20
	}
	b := make([]byte, 0, size)
	for _, e := range entries {
		b = strconv.AppendUint(b, uint64(e.Mode), 8)
		b = append(b, ' ')
		b = append(b, e.Name...)
		b = append(b, 0)
		b = append(b, e.Hash[:]...)
	}
	return b
}

// SortTreeEntries puts entries in git's order, where a directory's name compares as if it
// ended with '/'. Entries already in order are left as they are.
func SortTreeEntries(entries []object.TreeEntry) {
	if !slices.IsSortedFunc(entries, compareTreeEntries) {
		slices.SortFunc(entries, compareTreeEntries)
	}
}

// FindTreeEntry answers the position of the entry called name among entries, in git's order,
// by binary search: a one-file change to a tree of a thousand entries looks up one name, and a
// map of all of them cost more than the rest of the change.
func FindTreeEntry(entries []object.TreeEntry, name string) (int, bool) {
	// In git's order a directory sorts as if its name ended in '/': a name is in one of two
	// places.
	if i, ok := slices.BinarySearchFunc(entries, object.TreeEntry{Name: name, Mode: filemode.Regular}, compareTreeEntries); ok {
		return i, true
	}
	i, ok := slices.BinarySearchFunc(entries, object.TreeEntry{Name: name, Mode: filemode.Dir}, compareTreeEntries)
	return i, ok && entries[i].Name == name
}

func compareTreeEntries(a, b object.TreeEntry) int {
	an, bn := len(a.Name), len(b.Name)
	for i := 0; i < min(an, bn); i++ {
		if a.Name[i] != b.Name[i] {
			return int(a.Name[i]) - int(b.Name[i])
		}
	}
	// One name is a prefix of the other: the next byte is the longer one's, or '/' for a
	// directory that ends there, or nothing.
	next := func(e object.TreeEntry, n int) int {
		switch {
		case len(e.Name) > n:
			return int(e.Name[n])
		case e.Mode == filemode.Dir:
			return '/'
		}
		return -1
	}
	n := min(an, bn)
	return next(a, n) - next(b, n)
}
