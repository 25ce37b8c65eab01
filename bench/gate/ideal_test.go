package main

import "testing"

// TestIdeal ensures the ideal queue needs the rounds worked out by hand for the runs the
// benchmark is made with.
func TestIdeal(t *testing.T) {
	t.Parallel()
	failing := func(n int, at ...int) []bool {
		f := make([]bool, n)
		for _, i := range at {
			f[i] = true
		}
		return f
	}
	for _, tc := range []struct {
		name string
		s    schedule
		want plan
	}{
		{"12 changes, 4 deep", schedule{failing(12), 4, 1, 4}, plan{rounds: 3, jobs: 12}},
		{"40 changes, 8 deep", schedule{failing(40), 8, 1, 8}, plan{rounds: 5, jobs: 40}},
		{"serial", schedule{failing(12), 1, 1, 4}, plan{rounds: 12, jobs: 12}},
		{"deeper than the workers", schedule{failing(12), 8, 1, 4}, plan{rounds: 3, jobs: 12}},
		// 0-3 land; 4-7 validate, 6 fails and 7 with it; 7-10; 11.
		{"the middle one fails", schedule{failing(12, 6), 4, 1, 4}, plan{rounds: 4, jobs: 13}},
		// 0 fails and 1-3 with it; 1-4; 5-8; 9-11.
		{"the first one fails", schedule{failing(12, 0), 4, 1, 4}, plan{rounds: 4, jobs: 15}},
		{"the last one fails", schedule{failing(12, 11), 4, 1, 4}, plan{rounds: 3, jobs: 12}},
		{"batches of 4, one worker", schedule{failing(12), 1, 4, 1}, plan{rounds: 3, jobs: 3}},
		// 0-3; 4-7 fails; 4-5; 6-7 fails; 6 fails; 7; 8-11.
		{"a batch that fails", schedule{failing(12, 6), 1, 4, 1}, plan{rounds: 7, jobs: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ideal(tc.s)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
