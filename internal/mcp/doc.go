// Package mcp is the Model Context Protocol server of `ag mcp`: it owns the tools (status,
// leases, integrate, sync, diff, revert, changes, jobs, tasks and messages) and the mainline and
// inbox resources through which one agent works in one working copy (an ag checkout, or a git
// working tree set up by ag clone or ag init), on stdio or bearer-guarded streamable HTTP, worded
// for a model and scrubbed of the agent's token. It acts through internal/checkout,
// internal/gitwork and the client SDK, so that a tool does what the matching ag command (or, in a
// git working tree, git) does; it must not import internal/cli, internal/server or
// internal/store. What other agents and people wrote (messages, task titles and bodies) reaches
// the model framed as data and attributed to its author, never as ag's words (tasks.go).
package mcp
