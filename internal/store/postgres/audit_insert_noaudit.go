//go:build agbench_noaudit

package postgres

// auditInsert is empty in a build for measuring what the audit log costs (docs/benchmarks.md):
// the events' SELECT is left as a CTE that nothing reads, which PostgreSQL does not run, so
// every statement is the same but writes no event. Never a build to deploy: its tests fail.
const auditInsert = ``
