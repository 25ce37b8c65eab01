// Package checkout is the working-copy engine behind `ag` and `ag mcp`: it owns a checkout's
// state under .ag (the base revision, the index, leases held, files in conflict), creates a
// checkout, acquires, renews and releases its leases (explaining a refusal by who holds what),
// finds the local edits by scanning or asking the watcher (which it starts and stops), writes a
// revision's files, syncs with a three-way merge, reverts, and sends edits to the mainline
// (Integrate). A git working tree set up for ag (internal/gitwork) borrows its lease
// operations as a Stateless checkout, whose state is what the server lists and which keeps
// nothing under .ag. It talks to the server only through the client SDK, and answers refusals as
// typed errors (*ConflictError, *LeaseError, *UsageError, *LeaseRefusedError) that the command
// line maps to exit codes and the MCP server to tool errors; it must not import
// internal/server, internal/store, internal/cli or internal/mcp.
package checkout
