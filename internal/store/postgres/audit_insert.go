//go:build !agbench_noaudit

package postgres

// auditRecord answers the insert of the audit record of the events that events, a SELECT of
// (time, principal, holder, action, subject, details), yields: one row holding them all, in the
// order it yields them, and none when it yields none.
func auditRecord(events string) string {
	return `INSERT INTO audit_records (events)
	SELECT '[' || string_agg(` + recordEventJSON + `, ',') || ']'
	FROM (` + events + `) AS e(time, principal, holder, action, subject, details)
	HAVING count(*) > 0`
}
