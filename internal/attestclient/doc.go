// Package attestclient is the engine of `ag attestation`: it fetches a stored attestation
// through the SDK and checks that the bytes received have the digest asked for, and verifies
// one offline (its DSSE signature with a worker's key, read from a file or base64, its
// validation statement, and the tree it names) with internal/attest, answering a Report of who
// validated what, with its command as a shell would take it. It is not part of
// internal/auditclient, whose subject is the server's sealed audit log and its checkpoints:
// attestations are per-validation statements signed by workers' keys and verify without a
// server. It may import the SDK, the wire types and internal/attest; it must not import
// internal/cli, internal/server, internal/store, internal/mcp or internal/checkout.
package attestclient
