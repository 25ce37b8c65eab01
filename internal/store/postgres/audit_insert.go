//go:build !agbench_noaudit

package postgres

// auditInsert starts the insert of audit events; a SELECT or VALUES of (time, principal, holder,
// action, subject, details) follows.
const auditInsert = `INSERT INTO audit_events (time, principal, holder, action, subject, details) `
