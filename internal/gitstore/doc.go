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
// A file's mode is part of its content, as in git: 100644, 100755 (executable) or 120000 (a
// symbolic link, whose blob is its target); a submodule is a 160000 entry naming a commit of
// another repository, which no store here holds and nothing here follows (modes.go). Paths are
// ag's clean paths (repo.ValidatePath), so no tree holds ".git", an empty name or a '/'.
package gitstore
