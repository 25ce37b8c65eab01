package suggest_test

import (
	"testing"

	"github.com/ag-coord/ag/internal/suggest"
)

func TestDistanceAndDidYouMean(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		want int
	}{{"aquire", "acquire", 1}, {"lease", "lease", 0}, {"", "ttl", 3}, {"ttl", "wait", 4}} {
		if got := suggest.Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	for _, c := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"acquire"}, `. Did you mean "acquire"?`},
		{[]string{"--ttl", "--tag", "--to"}, `. Did you mean "--ttl", "--tag" or "--to"?`},
	} {
		if got := suggest.DidYouMean(c.in); got != c.want {
			t.Errorf("DidYouMean(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
