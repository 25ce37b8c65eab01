package store_test

import (
	"testing"

	"github.com/ag-coord/ag/internal/store"
)

// TestHolderRoundTrips ensures a holder reads back as written, a label holding "|" included
// (a principal's name cannot), and that a string without "|" is no holder.
func TestHolderRoundTrips(t *testing.T) {
	for _, h := range []store.Holder{{"alice", "w1"}, {"alice", ""}, {"ci", "w|1"}} {
		got, ok := store.ParseHolder(h.String())
		if !ok || got != h {
			t.Errorf("ParseHolder(%q) = %+v, %v; want %+v", h.String(), got, ok, h)
		}
		if p := store.PrincipalOf(h.String()); p != h.Principal {
			t.Errorf("PrincipalOf(%q) = %q, want %q", h.String(), p, h.Principal)
		}
	}
	if h, ok := store.ParseHolder("alice"); ok {
		t.Errorf("ParseHolder(%q) = %+v, true; want no holder", "alice", h)
	}
}
