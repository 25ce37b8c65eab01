package store_test

import (
	"testing"

	"github.com/ag-coord/ag/agwp"
	"github.com/ag-coord/ag/internal/store"
)

// TestKindValidateIsTheContracts ensures the kind whose completions the store holds to an
// attestation is the kind the contract gives validate jobs.
func TestKindValidateIsTheContracts(t *testing.T) {
	if store.KindValidate != agwp.KindValidate {
		t.Fatalf("store.KindValidate is %q, the contract's agwp.KindValidate %q", store.KindValidate, agwp.KindValidate)
	}
}
