// Package repoview owns a repository as people set it up and look at it from the command
// line: the values of the validation policy's flags (timeout, environment, depth, batch, lanes
// in their --lane syntax, network, isolation, limits) turned into the contract's
// agwpv1.Validation and a policy said back in one line in the same terms, what `ag repo show`
// and `ag repo queue` fetch and write (the repository, its mainline's tree and the change
// behind it, its forge mirror, its queue), and a tree's entries counted as git names them.
// Registering flags and exit codes stay the command line's, and what a policy means is the
// server's to check. It talks to the server only through the SDK, and must not import
// internal/cli, internal/server, internal/store or internal/mcp.
package repoview
