// Package gitcredential owns git's credential-helper protocol as ag speaks it: it reads git's
// request, decides whether the URL git asks about is the ag server's own /git/ (its scheme,
// host, port and path, never a host that only looks like it), and words the answer that gives
// git the token; and it turns a forge's credential, as people write one in a file, into the
// HTTP authentication go-git sends (ForgeAuth). Commands, flags, where the token comes from and
// exit codes are the command line's; this package imports only the standard library and
// go-git's HTTP transport, and must not import internal/cli, internal/server, internal/store or
// internal/mcp.
package gitcredential
