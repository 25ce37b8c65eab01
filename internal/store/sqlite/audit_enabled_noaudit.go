//go:build agbench_noaudit

package sqlite

// auditEnabled is false in a build for measuring what the audit log costs
// (docs/benchmarks.md): record writes no event, and claims and completions do not build theirs.
// Never a build to deploy: its tests fail.
const auditEnabled = false
