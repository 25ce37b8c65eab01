// Package testlint holds tests over ag's own tests: no test sleeps a fixed time to decide what
// it asserts (issue 41). A test that sleeps to see that something does not happen passes without
// checking anything when that something is merely slower; tests wait on a signal, a counter, the
// fake clock of internal/clock or a synctest bubble instead, and poll with a ticker. The few
// sleeps a test keeps because a real process needs wall time are on an allow-list that says why.
// It has no code of its own.
package testlint
