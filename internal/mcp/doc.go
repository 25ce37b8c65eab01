// Package mcp is the Model Context Protocol server of `ag mcp`: it owns the tools (status,
// leases, integrate, sync, diff, revert, changes and jobs) and the mainline resources through
// which one agent works in one checkout, on stdio or bearer-guarded streamable HTTP, worded for
// a model and scrubbed of the agent's token. It acts through internal/checkout and the client
// SDK, so that a tool does what the matching ag command does; it must not import internal/cli,
// internal/server or internal/store.
package mcp
