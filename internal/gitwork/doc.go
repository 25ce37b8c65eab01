// Package gitwork owns a git working tree used as an ag workspace: finding the tree and what
// ag keeps in its git configuration (ag.server, ag.repository, ag.holder, per working tree for
// `git worktree add` trees), setting one up by `ag clone` or `ag init` (the remote at the
// server's /git/, git's credential helper, the push refspec and holder push option, the
// pre-commit and pre-push hooks), the hooks' check of the paths a commit or push changes
// against the holder's current leases (worded by repo.LeaseRefusal, as the server words a
// refused push), the tree as a checkout.Workspace for the lease commands, and status, sync,
// diff, revert and a push into the gate (commit the local changes, push them to refs/for/main,
// read the change and the verdict from the server's lines) through git. It runs the git binary for everything git knows, and talks to the server only
// through the client SDK; it may import client, gen/agwp/v1, internal/repo, internal/checkout,
// internal/gitcredential and internal/termsafe, and must not import internal/server,
// internal/store, internal/cli or internal/mcp.
package gitwork
