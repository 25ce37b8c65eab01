// Package importer is the engine of `ag repo import`: it reads a git history (every object
// HEAD reaches, to where a shallow clone's history stops, with every entry the server would
// refuse, listed before a byte is uploaded; for --depth and --since, `git clone` makes that
// shallow clone first), asks the server which objects it lacks and uploads those, streaming
// large blobs from a temporary file; and it loads a folder's files into a mainline as one change or several,
// under leases on their top-level entries. It talks to the server only through the client
// SDK; refusals the caller must fix are *checkout.UsageError. It must not import
// internal/server, internal/store or internal/cli.
package importer
