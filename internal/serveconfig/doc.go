// Package serveconfig owns the settings of `ag serve` that are worked out before the store is
// opened or the server made: where the database and the audit key are by default (the key
// beside a SQLite file), the Go processors it runs with, the logger its --log-level and --log-format name, whether an address
// may be served without TLS, the e-mail domain of the mainline's commits checked, and a
// database URL with its password hidden for the log. Opening the store and running the server
// stay in internal/cli's serve.go, the one file of the command line that needs them; this
// package imports only the standard library, and must not import internal/cli, internal/server,
// internal/store or internal/mcp.
package serveconfig
