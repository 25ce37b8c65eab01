// Package gitstore makes ag's content speak git, free of any database: git blob, tree and
// commit objects computed from ag's files (objects.go), trees updated along the changed paths
// only (update.go), and a read-only smart HTTP upload-pack over any object storer, so that
// `git clone` and `git fetch` work against ag (uploadpack.go).
//
// Objects are SHA-1 git objects with collision detection (go-git hashes with sha1cd), built
// and encoded by go-git's plumbing (plumbing/object, plumbing.MemoryObject,
// storer.EncodedObjectStorer, packfile.Encoder, packp); this package only decides what to
// build and what to send.
//
// Files are mode 100644: ag has no executable bit or symbolic links yet. Paths are ag's clean
// paths (repo.ValidatePath), so no tree holds ".git", an empty name or a '/'.
package gitstore
