package repo

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Entry is one file of a tree.
type Entry struct {
	Path   string
	Digest string // "sha256:<hex>" of the content
	Size   uint64
}

// IsDigest reports whether s is a digest as ag writes them: "sha256:" and 64 lowercase hex
// digits.
func IsDigest(s string) bool {
	hexPart, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(hexPart) != 64 {
		return false
	}
	for i := 0; i < len(hexPart); i++ {
		if c := hexPart[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Tree is a revision's files, sorted by path.
type Tree []Entry

// Digest answers "sha256:<hex>" of b.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Encode answers the tree's canonical encoding: for each entry in path order, the path, the
// digest and the decimal size, each ended by NUL. Paths cannot hold NUL, so it is unambiguous;
// the tree's digest is the sha256 of this encoding.
func (t Tree) Encode() []byte {
	var b strings.Builder
	for _, e := range t {
		b.WriteString(e.Path)
		b.WriteByte(0)
		b.WriteString(e.Digest)
		b.WriteByte(0)
		b.WriteString(strconv.FormatUint(e.Size, 10))
		b.WriteByte(0)
	}
	return []byte(b.String())
}

// Digest answers the sha256 of the canonical encoding.
func (t Tree) Digest() string { return Digest(t.Encode()) }

// DecodeTree reads a canonical encoding.
func DecodeTree(b []byte) (Tree, error) {
	fields := strings.Split(string(b), "\x00")
	if len(fields)%3 != 1 || fields[len(fields)-1] != "" {
		return nil, errors.New("decode tree: truncated encoding")
	}
	t := make(Tree, 0, len(fields)/3)
	for i := 0; i+2 < len(fields); i += 3 {
		size, err := strconv.ParseUint(fields[i+2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("decode tree: size of %q: %w", fields[i], err)
		}
		if i > 0 && fields[i] <= fields[i-3] {
			return nil, errors.New("decode tree: paths out of order")
		}
		t = append(t, Entry{Path: fields[i], Digest: fields[i+1], Size: size})
	}
	return t, nil
}

// Lookup answers the entry at path.
func (t Tree) Lookup(path string) (Entry, bool) {
	i := sort.Search(len(t), func(i int) bool { return t[i].Path >= path })
	if i < len(t) && t[i].Path == path {
		return t[i], true
	}
	return Entry{}, false
}

// FileEdit writes (Digest set) or deletes (Delete) one file.
type FileEdit struct {
	Path   string `json:"path"`
	Digest string `json:"digest,omitempty"`
	Size   uint64 `json:"size,omitempty"`
	Delete bool   `json:"delete,omitempty"`
}

// ConflictError says that an edited path moved on in the mainline since the base revision.
type ConflictError struct {
	Path string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s changed in the mainline since your base revision: sync, redo the edit, and integrate again", e.Path)
}

// CollisionError says that a path would be both a file and a directory.
type CollisionError struct {
	File, Under string
}

func (e *CollisionError) Error() string {
	return fmt.Sprintf("%s would be a file and also the directory of %s", e.File, e.Under)
}

// DoesNotApply reports whether err says edits do not apply to a tree: a *ConflictError or a
// *CollisionError, which refuse a change rather than fail the store.
func DoesNotApply(err error) bool {
	var conflict *ConflictError
	var collision *CollisionError
	return errors.As(err, &conflict) || errors.As(err, &collision)
}
