package gitstore

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/ag-coord/ag/internal/repo"
)

// EmptyTree is the id of git's empty tree, the root of a repository without files.
var EmptyTree = plumbing.NewHash("4b825dc642cb6eb9a060e54bf8d69288fbee4904")

// BlobID answers the git blob id of content (what `git hash-object` prints).
func BlobID(content []byte) plumbing.Hash {
	return plumbing.ComputeHash(plumbing.BlobObject, content)
}

// WriteBlob stores content as a git blob and answers its id.
func WriteBlob(s storer.EncodedObjectStorer, content []byte) (plumbing.Hash, error) {
	return writeObject(s, plumbing.BlobObject, content)
}

// writeObject stores data as a git object of type t and answers its id.
func writeObject(s storer.EncodedObjectStorer, t plumbing.ObjectType, data []byte) (plumbing.Hash, error) {
	o := s.NewEncodedObject()
	o.SetType(t)
	o.SetSize(int64(len(data)))
	w, err := o.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(data); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(o)
}

// ObjectData answers the content of an object, without git's header.
func ObjectData(o plumbing.EncodedObject) ([]byte, error) {
	r, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// File is one file of a tree: its path, the id of its blob (a submodule's: its commit) and
// its mode (zero: filemode.Regular).
type File struct {
	Path string
	Blob plumbing.Hash
	Mode filemode.FileMode
}

// WriteFiles stores each file's content as a blob, then the trees that hold them, and answers
// the root tree's id.
func WriteFiles(s storer.EncodedObjectStorer, files map[string][]byte) (plumbing.Hash, error) {
	list := make([]File, 0, len(files))
	for p, content := range files {
		id, err := WriteBlob(s, content)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("write blob %s: %w", p, err)
		}
		list = append(list, File{Path: p, Blob: id})
	}
	return WriteTree(s, list)
}

// dir is a directory being built from a flat list of files.
type dir struct {
	files map[string]object.TreeEntry
	dirs  map[string]*dir
}

// WriteTree stores the trees holding files (blobs already stored, in any order) and answers
// the root tree's id; no files is the empty tree. A path that is both a file and a directory
// is a *repo.CollisionError.
func WriteTree(s storer.EncodedObjectStorer, files []File) (plumbing.Hash, error) {
	root := &dir{}
	for _, f := range files {
		if err := repo.ValidatePath(f.Path, false); err != nil {
			return plumbing.ZeroHash, fmt.Errorf("path %q %w", f.Path, err)
		}
		d := root
		segs := strings.Split(f.Path, "/")
		for i, seg := range segs[:len(segs)-1] {
			if _, ok := d.files[seg]; ok {
				return plumbing.ZeroHash, &repo.CollisionError{File: strings.Join(segs[:i+1], "/"), Under: f.Path}
			}
			if d.dirs == nil {
				d.dirs = make(map[string]*dir)
			}
			sub := d.dirs[seg]
			if sub == nil {
				sub = &dir{}
				d.dirs[seg] = sub
			}
			d = sub
		}
		name := segs[len(segs)-1]
		if _, ok := d.dirs[name]; ok {
			return plumbing.ZeroHash, &repo.CollisionError{File: f.Path, Under: f.Path + "/"}
		}
		if _, ok := d.files[name]; ok {
			return plumbing.ZeroHash, fmt.Errorf("path %q is listed twice", f.Path)
		}
		mode := f.Mode
		switch mode {
		case 0:
			mode = filemode.Regular
		case filemode.Regular, filemode.Executable, filemode.Symlink, filemode.Submodule:
		default:
			return plumbing.ZeroHash, fmt.Errorf("path %q has mode %o, which is no file's", f.Path, uint32(mode))
		}
		if d.files == nil {
			d.files = make(map[string]object.TreeEntry)
		}
		d.files[name] = object.TreeEntry{Name: name, Mode: mode, Hash: f.Blob}
	}
	return root.write(s)
}

func (d *dir) write(s storer.EncodedObjectStorer) (plumbing.Hash, error) {
	entries := make([]object.TreeEntry, 0, len(d.files)+len(d.dirs))
	for _, e := range d.files {
		entries = append(entries, e)
	}
	for name, sub := range d.dirs {
		id, err := sub.write(s)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		entries = append(entries, object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: id})
	}
	return writeTreeObject(s, entries)
}

// writeTreeObject sorts entries in git's order (a directory's name compares as if it ended
// with '/') and stores the tree.
func writeTreeObject(s storer.EncodedObjectStorer, entries []object.TreeEntry) (plumbing.Hash, error) {
	SortTreeEntries(entries)
	return writeTreeData(s, EncodeTree(entries))
}

// writeTreeData stores a tree encoded as data.
func writeTreeData(s storer.EncodedObjectStorer, data []byte) (plumbing.Hash, error) {
	return writeObject(s, plumbing.TreeObject, data)
}

// Trailer is one "Key: value" line of a commit message's trailer block, as
// `git interpret-trailers` reads it: Ag-Change, Ag-Lease-Tokens, Ag-Attestation, ...
type Trailer struct {
	Key, Value string
}

// Commit is what a commit object says.
type Commit struct {
	Tree      plumbing.Hash
	Parents   []plumbing.Hash
	Author    object.Signature
	Committer object.Signature
	Message   string    // the subject, then optionally a blank line and a body
	Trailers  []Trailer // appended as the message's last paragraph
}

// FormatMessage answers a commit message: msg without its trailing white space, then a blank
// line and one "Key: value" line per trailer. An empty msg is "(no message)": git reads the
// first line as the subject, so a trailer there would not be a trailer.
//
// msg is the agent's and the trailers are ag's, so nothing in msg may pass for a trailer.
// git reads trailers from the last paragraph, which is ag's, except that `git
// interpret-trailers` first cuts a message at a line starting "---" (a patch's divider): a
// message holding "Ag-Attestation: ..." and then such a line would have its forged paragraph
// read as the trailers. Such lines get a leading space, which git does not take for a
// divider. NUL, which git's fsck reports in a commit, becomes U+FFFD.
func FormatMessage(msg string, trailers []Trailer) (string, error) {
	msg = strings.TrimRight(msg, " \t\r\n")
	if msg == "" {
		msg = "(no message)"
	}
	msg = strings.ReplaceAll(msg, "\x00", "\uFFFD")
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		if rest, ok := strings.CutPrefix(l, "---"); ok && (rest == "" || strings.ContainsAny(rest[:1], " \t\r\v\f")) {
			lines[i] = " " + l
		}
	}
	msg = strings.Join(lines, "\n")
	var b strings.Builder
	b.WriteString(msg)
	b.WriteByte('\n')
	for i, t := range trailers {
		if err := checkTrailer(t); err != nil {
			return "", err
		}
		if i == 0 {
			b.WriteByte('\n')
		}
		b.WriteString(t.Key)
		b.WriteString(": ")
		b.WriteString(t.Value)
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// checkTrailer keeps a trailer to one line that git parses back to the same key and value.
func checkTrailer(t Trailer) error {
	if t.Key == "" {
		return errors.New("trailer: empty key")
	}
	for _, r := range t.Key {
		if !(r == '-' || r >= '0' && r <= '9' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z') {
			return fmt.Errorf("trailer %q: a key holds only letters, digits and '-'", t.Key)
		}
	}
	if t.Value == "" || strings.ContainsAny(t.Value, "\r\n") || strings.TrimSpace(t.Value) != t.Value {
		return fmt.Errorf("trailer %s: the value must be one line, not empty, without leading or trailing space", t.Key)
	}
	return nil
}

// WriteCommit stores c as a commit object and answers its id.
func WriteCommit(s storer.EncodedObjectStorer, c Commit) (plumbing.Hash, error) {
	msg, err := FormatMessage(c.Message, c.Trailers)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if c.Tree.IsZero() {
		return plumbing.ZeroHash, errors.New("commit: no tree")
	}
	oc := object.Commit{
		Author:       c.Author,
		Committer:    c.Committer,
		Message:      msg,
		TreeHash:     c.Tree,
		ParentHashes: c.Parents,
	}
	o := s.NewEncodedObject()
	if err := oc.Encode(o); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(o)
}

// DeltaSizes reads the sizes a git delta begins with, each git's little-endian base-128: the
// size of its base, and of what it makes.
func DeltaSizes(delta []byte) (src, target uint64, ok bool) {
	src, n := deltaSize(delta)
	if n == 0 {
		return 0, 0, false
	}
	target, m := deltaSize(delta[n:])
	return src, target, m != 0
}

// deltaSize reads one size of a delta's header, answering 0 bytes read when it is damaged.
func deltaSize(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}
