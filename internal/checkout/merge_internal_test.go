package checkout

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMerge3 ensures a three-way merge takes a chunk changed on one side, takes a chunk changed
// the same way on both once, and marks a chunk changed differently on both with git's diff3
// markers, counting it.
func TestMerge3(t *testing.T) {
	t.Parallel()
	base := "a\nb\nc\nd\ne\n"
	for _, c := range []struct {
		name, ours, theirs, want string
		conflicts                int
	}{
		{"ours only", "a\nB\nc\nd\ne\n", base, "a\nB\nc\nd\ne\n", 0},
		{"theirs only", base, "a\nb\nc\nD\ne\n", "a\nb\nc\nD\ne\n", 0},
		{"apart", "A\nb\nc\nd\ne\n", "a\nb\nc\nd\nE\n", "A\nb\nc\nd\nE\n", 0},
		{"same change", "a\nx\nc\nd\ne\n", "a\nx\nc\nd\ne\n", "a\nx\nc\nd\ne\n", 0},
		{"insert and delete", "a\nb\nnew\nc\nd\ne\n", "a\nb\nc\nd\n", "a\nb\nnew\nc\nd\n", 0},
		{"same lines", "a\nours\nc\nd\ne\n", "a\ntheirs\nc\nd\ne\n",
			"a\n<<<<<<< ours\nours\n||||||| base\nb\n=======\ntheirs\n>>>>>>> theirs\nc\nd\ne\n", 1},
		{"both append", base + "mine\n", base + "yours", // theirs ends without a newline
			base + "<<<<<<< ours\nmine\n||||||| base\n=======\nyours\n>>>>>>> theirs\n", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, n := merge3([]byte(base), []byte(c.ours), []byte(c.theirs))
			if string(got) != c.want || n != c.conflicts {
				t.Errorf("merge3:\n%s(%d conflicts)\nwant:\n%s(%d conflicts)", got, n, c.want, c.conflicts)
			}
			if hasConflictMarkers(got) != (c.conflicts > 0) {
				t.Errorf("hasConflictMarkers(%q) = %v, want %v", got, !(c.conflicts > 0), c.conflicts > 0)
			}
		})
	}
}

// TestUnifiedDiffMatchesDiffU ensures ag's unified diff is the one `diff -u` prints, hunks,
// context and the missing final newline included, where diff is installed.
func TestUnifiedDiffMatchesDiffU(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("diff"); err != nil {
		t.Skip("no diff(1) to compare with")
	}
	var long []string
	for i := range 40 {
		long = append(long, fmt.Sprintf("line %d\n", i))
	}
	edited := append([]string(nil), long...)
	edited[2] = "changed 2\n"
	edited[20] = "changed 20\n"
	edited = append(edited[:30], edited[31:]...)
	for _, c := range []struct{ name, a, b string }{
		{"two hunks", strings.Join(long, ""), strings.Join(edited, "")},
		{"no final newline", "a\nb\nc", "a\nb\nC"},
		{"added", "", "new\nfile\n"},
		{"deleted", "old\n", ""},
		{"gap of six joins", "1\n2\n3\n4\n5\n6\n7\n8\n9\n", "x\n2\n3\n4\n5\n6\n7\ny\n9\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
			if err := os.WriteFile(a, []byte(c.a), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(b, []byte(c.b), 0o644); err != nil {
				t.Fatal(err)
			}
			out, _ := exec.Command("diff", "-u", "--label", "a/f", "--label", "b/f", a, b).Output()
			if got := unifiedDiff("a/f", "b/f", []byte(c.a), []byte(c.b)); got != string(out) {
				t.Errorf("unifiedDiff:\n%s\ndiff -u:\n%s", got, out)
			}
		})
	}
}
