package main

import (
	"slices"
	"testing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// TestFailing ensures the failing changes are spread over the submission, the middle one for
// one.
func TestFailing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n, k int
		want []int
	}{
		{12, 0, nil},
		{12, 1, []int{6}},
		{12, 2, []int{3, 9}},
		{12, 3, []int{2, 6, 10}},
		{3, 3, []int{0, 1, 2}},
	} {
		var got []int
		for i, f := range failing(tc.n, tc.k) {
			if f {
				got = append(got, i)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("failing(%d, %d): got %v, want %v", tc.n, tc.k, got, tc.want)
		}
	}
}

// TestCheck ensures a round passes only when exactly the failing changes were rejected, by a
// failed validation, and the others integrated.
func TestCheck(t *testing.T) {
	t.Parallel()
	integrated := &agwpv1.Change{State: agwpv1.ChangeState_CHANGE_STATE_INTEGRATED}
	rejected := &agwpv1.Change{State: agwpv1.ChangeState_CHANGE_STATE_REJECTED, Reason: "validation failed: `sh -c ...` exited with status 1"}
	conflict := &agwpv1.Change{State: agwpv1.ChangeState_CHANGE_STATE_REJECTED, Reason: "conflict on f001.txt"}
	fails := []bool{false, true}
	if err := check([]*agwpv1.Change{integrated, rejected}, fails); err != nil {
		t.Errorf("as expected: %v", err)
	}
	for _, ended := range [][]*agwpv1.Change{
		{integrated, integrated},
		{rejected, rejected},
		{integrated, conflict},
	} {
		if err := check(ended, fails); err == nil {
			t.Errorf("%v: no error", ended)
		}
	}
}
