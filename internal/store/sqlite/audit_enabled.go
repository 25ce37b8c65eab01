//go:build !agbench_noaudit

package sqlite

// auditEnabled is false only in a build for measuring what the audit log costs.
const auditEnabled = true
