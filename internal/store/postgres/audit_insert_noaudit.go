//go:build agbench_noaudit

package postgres

// auditRecord answers events itself in a build for measuring what the audit log costs
// (docs/benchmarks.md): the events' SELECT is left as a CTE that nothing reads, which
// PostgreSQL does not run, so every statement is the same but writes no record. Never a build
// to deploy: its tests fail.
func auditRecord(events string) string { return events }
