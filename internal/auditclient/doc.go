// Package auditclient is the client side of `ag audit`: it reads a server's sealed events and
// checkpoints through the SDK, verifies a log (from the server or an export file) with
// internal/audit, checks it against the checkpoint verified before with the server's
// consistency proof, and keeps that checkpoint in a state file. It is not part of internal/audit
// because the server imports that package and must not need the SDK; it must not import
// internal/server, internal/store or internal/cli.
package auditclient
