package gitstore

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

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
// The entries are in git's order and the caller's.
type TreeReader interface {
	TreeEntries(id plumbing.Hash) ([]object.TreeEntry, error)
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
	data, err := ObjectData(o)
	if err != nil {
		return nil, err
	}
	return DecodeTree(data)
}

// DecodeTree parses the content of a tree object: entries of "MODE NAME\0" and a 20-byte id.
func DecodeTree(data []byte) ([]object.TreeEntry, error) {
	t, err := PackTree(data)
	if err != nil {
		return nil, err
	}
	return t.Entries(), nil
}

// PackedTree is a decoded tree held without a pointer per entry: its names stay in its
// encoding. A server caches a million tree entries, and the collector reads every pointer
// of what is cached on each of its cycles: as object.TreeEntry values, that reading was most
// of what a one-file integrate at the top of a 100,000-file repository cost beyond a small one.
type PackedTree struct {
	data    string // the tree's encoding, which holds the names
	entries []packedEntry
}

type packedEntry struct {
	nameStart, nameEnd uint32
	mode               filemode.FileMode
	hash               plumbing.Hash
}

// PackTree parses the content of a tree object, as DecodeTree does.
func PackTree(data []byte) (*PackedTree, error) {
	t := &PackedTree{data: string(data)}
	for pos := 0; pos < len(t.data); {
		sp := strings.IndexByte(t.data[pos:], ' ')
		if sp <= 0 {
			return nil, errors.New("tree: an entry without a mode")
		}
		mode, err := parseMode(t.data[pos : pos+sp])
		if err != nil {
			return nil, err
		}
		pos += sp + 1
		nul := strings.IndexByte(t.data[pos:], 0)
		if nul < 0 || len(t.data)-pos < nul+1+20 {
			return nil, errors.New("tree: an entry cut short")
		}
		e := packedEntry{nameStart: uint32(pos), nameEnd: uint32(pos + nul), mode: filemode.FileMode(mode)}
		copy(e.hash[:], t.data[pos+nul+1:pos+nul+21])
		t.entries = append(t.entries, e)
		pos += nul + 21
	}
	return t, nil
}

// The modes git writes, as it writes them: a one-file change at the top of a large repository
// encodes and decodes a thousand entries, and the number conversions were a tenth of it.
const (
	modeRegular    = "100644"
	modeExecutable = "100755"
	modeDir        = "40000"
	modeSymlink    = "120000"
	modeSubmodule  = "160000"
)

func parseMode(s string) (filemode.FileMode, error) {
	switch s {
	case modeRegular:
		return filemode.Regular, nil
	case modeDir:
		return filemode.Dir, nil
	case modeExecutable:
		return filemode.Executable, nil
	case modeSymlink:
		return filemode.Symlink, nil
	case modeSubmodule:
		return filemode.Submodule, nil
	}
	mode, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return 0, fmt.Errorf("tree: mode %q: %w", s, err)
	}
	return filemode.FileMode(mode), nil
}

func appendMode(b []byte, m filemode.FileMode) []byte {
	if text := modeText(m); text != "" {
		return append(b, text...)
	}
	return strconv.AppendUint(b, uint64(m), 8)
}

// modeText answers the mode as git writes it, for the modes git writes; "" for another.
func modeText(m filemode.FileMode) string {
	switch m {
	case filemode.Regular:
		return modeRegular
	case filemode.Dir:
		return modeDir
	case filemode.Executable:
		return modeExecutable
	case filemode.Symlink:
		return modeSymlink
	case filemode.Submodule:
		return modeSubmodule
	}
	return ""
}

// PackedTreeReader is an object storer that answers trees packed, and keeps those written to
// it: UpdateTree then changes a tree's entries in place in its encoding (spliceDir) instead of
// decoding and encoding all of them.
type PackedTreeReader interface {
	PackedTree(id plumbing.Hash) (*PackedTree, error)
	KeepPacked(id plumbing.Hash, t *PackedTree)
}

// Len answers the number of entries.
func (t *PackedTree) Len() int { return len(t.entries) }

// Data answers the tree's encoding, as git hashes it (without its header).
func (t *PackedTree) Data() string { return t.data }

// Entry answers entry i, its name shared with the tree.
func (t *PackedTree) Entry(i int) object.TreeEntry {
	e := &t.entries[i]
	return object.TreeEntry{Name: t.data[e.nameStart:e.nameEnd], Mode: e.mode, Hash: e.hash}
}

// Entries answers the entries, in a slice of the caller's.
func (t *PackedTree) Entries() []object.TreeEntry {
	out := make([]object.TreeEntry, len(t.entries))
	for i := range out {
		out[i] = t.Entry(i)
	}
	return out
}

// modeStart answers where entry i's mode begins in the encoding.
func (t *PackedTree) modeStart(i int) int {
	if i == 0 {
		return 0
	}
	return int(t.entries[i-1].nameEnd) + 1 + 20
}

// Find answers the position of the entry called name, as FindTreeEntry does.
func (t *PackedTree) Find(name string) (int, bool) {
	return findTreeEntry(len(t.entries), t.Entry, name)
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
	// A file and a directory of one name are apart in git's order ("a", "a.b", "a/"), so the
	// check above passes them; git's fsck does not (duplicateEntries), nor could a checkout
	// hold both. Each directory looks for a file of its name where one would sort.
	for _, e := range entries {
		if e.Mode != filemode.Dir {
			continue
		}
		file := object.TreeEntry{Name: e.Name, Mode: filemode.Regular}
		j := sort.Search(len(entries), func(j int) bool { return compareTreeEntries(entries[j], file) >= 0 })
		if j < len(entries) && entries[j].Name == e.Name && entries[j].Mode != filemode.Dir {
			return nil, fmt.Errorf("tree: %q is both a file and a directory, which git's fsck refuses (duplicateEntries): a tree names each entry once", e.Name)
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
		b = appendMode(b, e.Mode)
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
	return findTreeEntry(len(entries), func(i int) object.TreeEntry { return entries[i] }, name)
}

func findTreeEntry(n int, entry func(int) object.TreeEntry, name string) (int, bool) {
	// In git's order a directory sorts as if its name ended in '/': a name is in one of two
	// places.
	for _, mode := range []filemode.FileMode{filemode.Regular, filemode.Dir} {
		probe := object.TreeEntry{Name: name, Mode: mode}
		i := sort.Search(n, func(i int) bool { return compareTreeEntries(entry(i), probe) >= 0 })
		if i < n {
			if e := entry(i); e.Name == name && compareTreeEntries(e, probe) == 0 {
				return i, true
			}
		}
	}
	return 0, false
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
