//go:build agbench_noaudit

package server_test

// benchAudits is false in the build that measures what the audit log costs: it records no event.
const benchAudits = false
