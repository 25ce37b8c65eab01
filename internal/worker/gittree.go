package worker

import (
	"errors"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// hashOnly is an object storer that keeps nothing: it answers the id of each object given to
// it, which is all gitstore.WriteTree needs to compute the id of a tree whose blob ids are
// known. A validator computes the git tree id of a checkout with it, without holding the
// tree's objects.
type hashOnly struct{}

var _ storer.EncodedObjectStorer = hashOnly{}

var errHashOnly = errors.New("a hashing object storer keeps no objects")

func (hashOnly) NewEncodedObject() plumbing.EncodedObject { return &plumbing.MemoryObject{} }

func (hashOnly) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	return o.Hash(), nil
}

func (hashOnly) EncodedObject(plumbing.ObjectType, plumbing.Hash) (plumbing.EncodedObject, error) {
	return nil, plumbing.ErrObjectNotFound
}

func (hashOnly) IterEncodedObjects(plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return nil, errHashOnly
}

func (hashOnly) HasEncodedObject(plumbing.Hash) error { return plumbing.ErrObjectNotFound }

func (hashOnly) EncodedObjectSize(plumbing.Hash) (int64, error) {
	return 0, plumbing.ErrObjectNotFound
}

func (hashOnly) AddAlternate(string) error { return errHashOnly }
