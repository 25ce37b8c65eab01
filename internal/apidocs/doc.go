// Package apidocs holds the tests that keep the published API documents true to the server:
// the OpenAPI document (gen/openapi/openapi.yaml) is valid and lists every RPC, and the examples
// of docs/api.md and docs/worker-protocol.md run against a real server and answer what they
// show. It has no code of its own; examples/go-leases is a program that docs/api.md shows and a
// test runs.
package apidocs
