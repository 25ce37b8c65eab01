// Package gitpush turns what `git push` sends into what a change is made of, free of any
// database and of the wire: it reads a push's pack over the objects the server holds (a thin
// pack's bases among them), refusing before anything is kept a pack that declares too many
// objects, carries too many bytes, names objects nobody holds, or holds trees and commits git's
// fsck and ag's entry rules refuse; it walks the pushed history to where it meets the mainline;
// and it diffs two trees into the edits of a change. The server (internal/server) decides what a
// push may do and makes the change; this package imports only internal/gitstore and go-git.
package gitpush

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/ag-coord/ag/internal/gitstore"
)

// Limits bound what one push may carry.
type Limits struct {
	// PackBytes bounds the pack as sent; ObjectBytes each object's content.
	PackBytes, ObjectBytes int64
	// Objects bounds the objects the pack declares.
	Objects uint32
}

// RefusalError is a push refused for what it carries: its message is for the pusher.
type RefusalError struct{ Msg string }

func (e *RefusalError) Error() string { return e.Msg }

func refuse(format string, args ...any) error {
	return &RefusalError{Msg: fmt.Sprintf(format, args...)}
}

// Objects are a push's objects, read from its pack, over the objects the server holds, which
// are read through and never written.
type Objects struct {
	held  storer.EncodedObjectStorer
	mem   map[plumbing.Hash]plumbing.EncodedObject
	limit int64
}

// ReadPack reads a push's pack from r over held (the server's objects, for a thin pack's
// bases), checks each object it carries, and answers them. A pack that breaks a rule is a
// *RefusalError; nothing of it is kept anywhere but in the answer.
func ReadPack(r io.Reader, held storer.EncodedObjectStorer, lim Limits) (*Objects, error) {
	header := make([]byte, 12)
	if _, err := io.ReadFull(r, header); err != nil {
		return nil, refuse("the pack ended before its header: %v", err)
	}
	if !bytes.Equal(header[:4], []byte("PACK")) {
		return nil, refuse("the push carries no pack")
	}
	if v := binary.BigEndian.Uint32(header[4:8]); v != 2 && v != 3 {
		return nil, refuse("a pack of version %d: git writes 2", v)
	}
	count := binary.BigEndian.Uint32(header[8:12])
	if count > lim.Objects {
		return nil, refuse("the pack declares %d objects, more than the %d one push may carry: integrate in several pushes", count, lim.Objects)
	}
	body := &limitedReader{r: r, left: lim.PackBytes - int64(len(header))}
	objs := &Objects{held: held, mem: make(map[plumbing.Hash]plumbing.EncodedObject, count), limit: lim.ObjectBytes}
	parser, err := packfile.NewParserWithStorage(packfile.NewScanner(io.MultiReader(bytes.NewReader(header), body)), objs)
	if err != nil {
		return nil, err
	}
	if _, err := parser.Parse(); err != nil {
		var refusal *RefusalError
		switch {
		case body.over:
			return nil, refuse("the pack is larger than the %d MiB one push may carry: integrate in several pushes", lim.PackBytes>>20)
		case errors.As(err, &refusal):
			return nil, refusal
		case errors.Is(err, packfile.ErrReferenceDeltaNotFound), errors.Is(err, plumbing.ErrObjectNotFound):
			return nil, refuse("the pack's deltas are against objects the server does not hold: push again without --thin, or fetch first")
		}
		return nil, refuse("the pack cannot be read: %v", err)
	}
	if err := objs.check(); err != nil {
		return nil, err
	}
	return objs, nil
}

// check applies git's fsck and ag's entry rules to the trees and commits of the pack, as an
// import's are: canonical trees of entries ag takes, commits that decode.
func (o *Objects) check() error {
	for id, obj := range o.mem {
		if obj.Type() != plumbing.TreeObject && obj.Type() != plumbing.CommitObject {
			continue
		}
		data, err := gitstore.ObjectData(obj)
		if err != nil {
			return err
		}
		if _, err := gitstore.References(obj, data); err != nil {
			return refuse("%s %s: %v", obj.Type(), id, err)
		}
	}
	return nil
}

// NewEncodedObject answers an object to fill, as a storer does.
func (o *Objects) NewEncodedObject() plumbing.EncodedObject { return &plumbing.MemoryObject{} }

// SetEncodedObject keeps an object of the pack, refusing one larger than the limit.
func (o *Objects) SetEncodedObject(obj plumbing.EncodedObject) (plumbing.Hash, error) {
	if o.limit > 0 && obj.Size() > o.limit {
		return plumbing.ZeroHash, refuse("the %s %s holds %d MiB, more than the %d MiB a pushed file may: integrate it with `ag integrate`",
			obj.Type(), obj.Hash(), obj.Size()>>20, o.limit>>20)
	}
	h := obj.Hash()
	o.mem[h] = obj
	return h, nil
}

// EncodedObject answers an object of the pack, or one the server holds.
func (o *Objects) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if obj, ok := o.mem[h]; ok {
		if t != plumbing.AnyObject && obj.Type() != t {
			return nil, plumbing.ErrObjectNotFound
		}
		return obj, nil
	}
	return o.held.EncodedObject(t, h)
}

// IterEncodedObjects is not needed by the parser, nor offered.
func (o *Objects) IterEncodedObjects(plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return nil, errors.New("gitpush: objects are not listed")
}

// HasEncodedObject reports whether the pack carried h or the server holds it.
func (o *Objects) HasEncodedObject(h plumbing.Hash) error {
	if _, ok := o.mem[h]; ok {
		return nil
	}
	return o.held.HasEncodedObject(h)
}

// EncodedObjectSize answers an object's size.
func (o *Objects) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	if obj, ok := o.mem[h]; ok {
		return obj.Size(), nil
	}
	return o.held.EncodedObjectSize(h)
}

// AddAlternate is not offered.
func (o *Objects) AddAlternate(string) error { return errors.New("gitpush: no alternates") }

// limitedReader reads at most left bytes, then fails, remembering that it did.
type limitedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// At the limit: the pack may end right there.
		var one [1]byte
		if n, err := l.r.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		l.over = true
		return 0, errors.New("the pack is larger than a push may carry")
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// Closure answers the objects of the pack that tip reaches through objects of the pack, in no
// order: what the server must keep to hold tip whole, given that it holds the rest. held
// answers which of the other ids tip reaches the server does not hold; ok is false when it holds
// not all of them, and then nothing should be kept.
func (o *Objects) Closure(tip plumbing.Hash, missing func([]plumbing.Hash) ([]plumbing.Hash, error)) (objs []plumbing.EncodedObject, ok bool, err error) {
	seen := map[plumbing.Hash]bool{tip: true}
	stack := []plumbing.Hash{tip}
	var outside []plumbing.Hash
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		obj, carried := o.mem[id]
		if !carried {
			outside = append(outside, id)
			continue
		}
		objs = append(objs, obj)
		if obj.Type() != plumbing.TreeObject && obj.Type() != plumbing.CommitObject {
			continue
		}
		data, err := gitstore.ObjectData(obj)
		if err != nil {
			return nil, false, err
		}
		refs, err := gitstore.References(obj, data)
		if err != nil {
			return nil, false, err
		}
		for _, r := range refs {
			if !seen[r.ID] {
				seen[r.ID] = true
				stack = append(stack, r.ID)
			}
		}
	}
	if len(outside) > 0 {
		lost, err := missing(outside)
		if err != nil || len(lost) > 0 {
			return nil, false, err
		}
	}
	return objs, true, nil
}
