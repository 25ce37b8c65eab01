package store

import "strings"

// Holder is who holds a lease, claims a job or authors a change: a principal and the label it
// gives one of its agents or workers (a checkout, a worker process), so that two agents of one
// principal hold apart. It is written "<principal>|<label>" wherever it is kept or sent: a
// principal's name holds no "|", a label may.
type Holder struct {
	Principal string
	Label     string
}

// String answers the holder as it is kept: "<principal>|<label>".
func (h Holder) String() string { return h.Principal + "|" + h.Label }

// ParseHolder reads "<principal>|<label>", cut at the first "|"; ok is false when s has none.
// It does not check the names: a caller at the edge validates them by its own rules.
func ParseHolder(s string) (h Holder, ok bool) {
	h.Principal, h.Label, ok = strings.Cut(s, "|")
	return h, ok
}

// PrincipalOf answers the principal part of a holder "<principal>|<label>".
func PrincipalOf(holder string) string {
	h, _ := ParseHolder(holder)
	return h.Principal
}
