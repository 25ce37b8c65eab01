// Package suggest words what the command line offers for a misspelled command or flag: the
// candidates close to what was typed, by edit distance, phrased for the end of an error
// message. It imports only the standard library.
package suggest

import (
	"fmt"
	"strconv"
	"strings"
)

// DidYouMean phrases suggestions for the end of an error message.
func DidYouMean(suggestions []string) string {
	switch len(suggestions) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf(". Did you mean %q?", suggestions[0])
	}
	quoted := make([]string, len(suggestions))
	for i, s := range suggestions {
		quoted[i] = strconv.Quote(s)
	}
	return ". Did you mean " + strings.Join(quoted[:len(quoted)-1], ", ") + " or " + quoted[len(quoted)-1] + "?"
}

// Distance answers the edit distance (Levenshtein) of two short strings.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
