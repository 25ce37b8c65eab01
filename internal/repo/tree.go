package repo

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The git modes a tree entry may have, as git writes them.
const (
	ModeFile       = "100644"
	ModeExecutable = "100755"
	// ModeSymlink is a symbolic link: its blob holds the link's target.
	ModeSymlink = "120000"
	// ModeGitlink is a submodule: a commit of another repository, which ag does not hold.
	ModeGitlink = "160000"
)

// MaxSymlinkTarget bounds a symbolic link's target: Linux's PATH_MAX, which is all a link's
// target may be where a checkout or a worker writes it.
const MaxSymlinkTarget = 4096

// Entry is one file of a tree.
type Entry struct {
	Path   string
	Digest string // "sha256:<hex>" of the content; "" for a submodule
	Size   uint64
	// Mode is the git mode, "" for ModeFile: every tree before modes had only those, and their
	// entries, digests and encodings stay as they were.
	Mode string
	// GitlinkCommit is a submodule's commit (40 lowercase hex).
	GitlinkCommit string
}

// GitMode answers the entry's git mode, ModeFile for "".
func (e Entry) GitMode() string {
	if e.Mode == "" {
		return ModeFile
	}
	return e.Mode
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

// IsGitID reports whether s is a git object id as ag writes them: 40 lowercase hex digits.
func IsGitID(s string) bool {
	if len(s) != 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
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
// digest and the decimal size, each ended by NUL. An entry whose mode is not ModeFile has its
// mode, a space and then the digest in the digest's place ("100755 sha256:<hex>",
// "120000 sha256:<hex>"), and a submodule its mode and commit ("160000 <40 hex>", size 0).
// Paths cannot hold NUL, and a digest always starts "sha256:", so it is unambiguous; a tree of
// mode 100644 files only is encoded as it was before modes, so the digests that attestations
// signed then still name their trees. The tree's digest is the sha256 of this encoding.
func (t Tree) Encode() []byte {
	var b strings.Builder
	for _, e := range t {
		b.WriteString(e.Path)
		b.WriteByte(0)
		switch mode := e.GitMode(); mode {
		case ModeFile:
			b.WriteString(e.Digest)
		case ModeGitlink:
			b.WriteString(mode + " " + e.GitlinkCommit)
		default:
			b.WriteString(mode + " " + e.Digest)
		}
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
		e := Entry{Path: fields[i], Digest: fields[i+1], Size: size}
		if mode, id, ok := strings.Cut(e.Digest, " "); ok {
			switch mode {
			case ModeExecutable, ModeSymlink:
				e.Mode, e.Digest = mode, id
			case ModeGitlink:
				e.Mode, e.Digest, e.GitlinkCommit = mode, "", id
			default:
				return nil, fmt.Errorf("decode tree: %q has mode %q", e.Path, mode)
			}
		}
		t = append(t, e)
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

// FileEdit writes (Digest set) or deletes (Delete) one file, or moves a submodule to another
// commit (GitlinkCommit set).
type FileEdit struct {
	Path   string `json:"path"`
	Digest string `json:"digest,omitempty"`
	Size   uint64 `json:"size,omitempty"`
	Delete bool   `json:"delete,omitempty"`
	// Mode is the mode a write gives the path: ModeFile, ModeExecutable or ModeSymlink; "" keeps
	// the mode the path has in the base revision (ModeFile for a new path), so that editing a
	// script leaves it executable.
	Mode          string `json:"mode,omitempty"`
	GitlinkCommit string `json:"gitlink_commit,omitempty"`
}

// WritesBlob reports whether the edit writes a file's content (Digest), not a delete or a
// submodule's commit.
func (e FileEdit) WritesBlob() bool { return !e.Delete && e.GitlinkCommit == "" }

// CheckSymlinkTarget checks what a symbolic link may point to: something (an empty target is
// no link a file system makes), no NUL (which ends a path for the kernel), at most
// MaxSymlinkTarget bytes. Where it points is the repository's business: a worker and a checkout
// write a link as a link, and never write through one.
func CheckSymlinkTarget(target []byte) error {
	switch {
	case len(target) == 0:
		return errors.New("the link's target is empty")
	case len(target) > MaxSymlinkTarget:
		return fmt.Errorf("the link's target is %d bytes, more than %d", len(target), MaxSymlinkTarget)
	case bytes.IndexByte(target, 0) >= 0:
		return errors.New("the link's target holds NUL")
	}
	return nil
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

// InvalidEditError says that an edit is one no tree takes: a write or delete of a submodule, a
// new submodule, a symbolic link whose target no file system holds. Reason follows the path:
// "is a submodule: ...".
type InvalidEditError struct {
	Path, Reason string
}

func (e *InvalidEditError) Error() string { return e.Path + " " + e.Reason }

// DoesNotApply reports whether err says edits do not apply to a tree: a *ConflictError, a
// *CollisionError or an *InvalidEditError, which refuse a change rather than fail the store.
func DoesNotApply(err error) bool {
	var conflict *ConflictError
	var collision *CollisionError
	var invalid *InvalidEditError
	return errors.As(err, &conflict) || errors.As(err, &collision) || errors.As(err, &invalid)
}
