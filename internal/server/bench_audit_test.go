//go:build !agbench_noaudit

package server_test

// benchAudits says whether this build records and seals the audit log, which a benchmark's
// setup waits for.
const benchAudits = true
