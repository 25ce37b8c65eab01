//go:build !agbench_noaudit

package postgres

// auditRecord answers the insert of the audit record of the events that events, a SELECT of
// (principal, holder, action, subject, details), yields at the statement's time: one row holding
// them all, in the order it yields them, and none when it yields none.
func auditRecord(events string) string {
	return `INSERT INTO audit_records (events)
	SELECT '[' || string_agg(` + recordTimeJSON + ` || ` + recordEventJSON + `, ',') || ']'
	FROM (` + events + `) AS e(principal, holder, action, subject, details)
	HAVING count(*) > 0`
}
