// Package loadbench is the load generator behind `ag bench`: it enqueues a batch of jobs (the
// first and the last on their own, so that they are first and last in claim order), drains them
// with concurrent claiming workers or times workers outside draining them, measures
// enqueue→claim with workers already waiting, and waits for the server's audit checkpoint to
// settle between phases. It answers what it measured and leaves the printing to the command
// line. It talks to the server only through the client SDK and the wire types; it must not
// import internal/cli, internal/server, internal/store or internal/mcp.
package loadbench
