package checkout

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/sergi/go-diff/diffmatchpatch"
)

// Text diffs and three-way merges of a checkout's files, line by line. The line diff is
// go-diff's Myers diff with every distinct line mapped to one rune; the three-way merge on top
// of it is diff3's (Khanna, Kuber and Pierce, "A formal investigation of Diff3"): the base lines
// both sides kept cut the files into chunks, a chunk changed on one side takes that side, and a
// chunk changed differently on both is a conflict, written with git's diff3 markers.

// Conflict markers, as git writes them with merge.conflictStyle=diff3.
const (
	markerOurs   = "<<<<<<< ours"
	markerBase   = "||||||| base"
	markerSep    = "======="
	markerTheirs = ">>>>>>> theirs"
)

// isBinary reports whether content is not text to merge or diff line by line: it holds a NUL
// byte in its first 8000 bytes, as git decides.
func isBinary(content []byte) bool {
	return bytes.IndexByte(content[:min(len(content), 8000)], 0) >= 0
}

// splitLines cuts content into lines, each with its "\n" but a last one without.
func splitLines(content []byte) []string {
	if len(content) == 0 {
		return nil
	}
	s := string(content)
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// lineOp is one step of a line diff from a to b: lines equal on both sides, deleted from a, or
// inserted from b.
type lineOp struct {
	kind byte // '=', '-', '+'
	n    int  // lines
}

// diffLines answers the steps that turn a into b.
func diffLines(a, b []string) []lineOp {
	ids := map[string]rune{}
	encode := func(lines []string) []rune {
		out := make([]rune, len(lines))
		for i, l := range lines {
			r, ok := ids[l]
			if !ok {
				r = rune(len(ids) + 1)
				if r >= 0xD800 { // no surrogate halves: every rune stays a valid one
					r += 0x800
				}
				ids[l] = r
			}
			out[i] = r
		}
		return out
	}
	ra, rb := encode(a), encode(b)
	if len(ids) > 0x10FFFF-0x800 {
		// More distinct lines than runes: all of a replaced by all of b, still a correct diff.
		return []lineOp{{'-', len(a)}, {'+', len(b)}}
	}
	dmp := diffmatchpatch.New()
	dmp.DiffTimeout = 10 * time.Second // past it, a correct but longer diff
	var ops []lineOp
	for _, d := range dmp.DiffMainRunes(ra, rb, false) {
		n := len([]rune(d.Text))
		kind := byte('=')
		switch d.Type {
		case diffmatchpatch.DiffDelete:
			kind = '-'
		case diffmatchpatch.DiffInsert:
			kind = '+'
		}
		if n > 0 {
			ops = append(ops, lineOp{kind, n})
		}
	}
	return ops
}

// matchLines answers, for each line of base, the index of the line of other it is kept as, or
// -1 when other does not keep it.
func matchLines(base, other []string) []int {
	m := make([]int, len(base))
	i, j := 0, 0
	for _, op := range diffLines(base, other) {
		switch op.kind {
		case '=':
			for k := 0; k < op.n; k++ {
				m[i] = j
				i, j = i+1, j+1
			}
		case '-':
			for k := 0; k < op.n; k++ {
				m[i] = -1
				i++
			}
		case '+':
			j += op.n
		}
	}
	return m
}

// merge3 merges ours and theirs, both changed from base, and answers the merged content and
// how many conflicts it holds, written between diff3 markers.
func merge3(base, ours, theirs []byte) ([]byte, int) {
	b, o, t := splitLines(base), splitLines(ours), splitLines(theirs)
	mo, mt := matchLines(b, o), matchLines(b, t)
	var out bytes.Buffer
	conflicts := 0
	i, a, c := 0, 0, 0 // the next line of base, ours and theirs
	for i < len(b) || a < len(o) || c < len(t) {
		// A stable chunk: base lines both sides keep, at the lines next on each side.
		j := 0
		for i+j < len(b) && mo[i+j] == a+j && mt[i+j] == c+j {
			j++
		}
		if j > 0 {
			writeLines(&out, b[i:i+j])
			i, a, c = i+j, a+j, c+j
			continue
		}
		// An unstable chunk, up to the next base line both sides keep (or the end).
		k := i
		for k < len(b) && (mo[k] < 0 || mt[k] < 0) {
			k++
		}
		ea, ec := len(o), len(t)
		if k < len(b) {
			ea, ec = mo[k], mt[k]
		}
		cb, co, ct := b[i:k], o[a:ea], t[c:ec]
		switch {
		case equalLines(co, cb):
			writeLines(&out, ct)
		case equalLines(ct, cb), equalLines(co, ct):
			writeLines(&out, co)
		default:
			conflicts++
			writeMarked(&out, markerOurs, co)
			writeMarked(&out, markerBase, cb)
			writeMarked(&out, markerSep, ct)
			out.WriteString(markerTheirs + "\n")
		}
		i, a, c = k, ea, ec
	}
	return out.Bytes(), conflicts
}

func equalLines(x, y []string) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

func writeLines(w *bytes.Buffer, lines []string) {
	for _, l := range lines {
		w.WriteString(l)
	}
}

// writeMarked writes a marker line, then lines, ending the last with a newline so the next
// marker starts a line of its own.
func writeMarked(w *bytes.Buffer, marker string, lines []string) {
	w.WriteString(marker + "\n")
	writeLines(w, lines)
	if len(lines) > 0 && !strings.HasSuffix(lines[len(lines)-1], "\n") {
		w.WriteByte('\n')
	}
}

// hasConflictMarkers reports whether content still holds a conflict merge3 wrote: a line that
// opens one and a line that closes one.
func hasConflictMarkers(content []byte) bool {
	s := "\n" + string(content)
	return strings.Contains(s, "\n"+markerOurs+"\n") && strings.Contains(s, "\n"+markerTheirs+"\n")
}

// unifiedDiff answers the unified diff (three lines of context) that turns a, named aName, into
// b, named bName ("/dev/null" for a file that is not there); empty when they are equal.
func unifiedDiff(aName, bName string, a, b []byte) string {
	if bytes.Equal(a, b) {
		return ""
	}
	var w strings.Builder
	fmt.Fprintf(&w, "--- %s\n+++ %s\n", aName, bName)
	if isBinary(a) || isBinary(b) {
		fmt.Fprintf(&w, "Binary files %s and %s differ\n", aName, bName)
		return w.String()
	}
	al, bl := splitLines(a), splitLines(b)
	// Each line of the diff, tagged, then cut into hunks around the changes.
	type line struct {
		kind   byte
		text   string
		ai, bi int // line numbers (0-based) in a and b before this line
	}
	var lines []line
	ai, bi := 0, 0
	for _, op := range diffLines(al, bl) {
		for k := 0; k < op.n; k++ {
			switch op.kind {
			case '=':
				lines = append(lines, line{'=', al[ai], ai, bi})
				ai, bi = ai+1, bi+1
			case '-':
				lines = append(lines, line{'-', al[ai], ai, bi})
				ai++
			case '+':
				lines = append(lines, line{'+', bl[bi], ai, bi})
				bi++
			}
		}
	}
	const context = 3
	for start := 0; start < len(lines); {
		// The next change, and the hunk around it: changes closer than 2*context lines join.
		first := start
		for first < len(lines) && lines[first].kind == '=' {
			first++
		}
		if first == len(lines) {
			break
		}
		from := max(first-context, start)
		end := first
		for k := first; k < len(lines); k++ {
			if lines[k].kind != '=' {
				end = k + 1
			} else if k-end >= 2*context {
				break
			}
		}
		to := min(end+context, len(lines))
		na, nb := 0, 0
		for _, l := range lines[from:to] {
			if l.kind != '+' {
				na++
			}
			if l.kind != '-' {
				nb++
			}
		}
		fmt.Fprintf(&w, "@@ -%s +%s @@\n", hunkRange(lines[from].ai, na), hunkRange(lines[from].bi, nb))
		for _, l := range lines[from:to] {
			prefix := map[byte]string{'=': " ", '-': "-", '+': "+"}[l.kind]
			w.WriteString(prefix + l.text)
			if !strings.HasSuffix(l.text, "\n") {
				w.WriteString("\n\\ No newline at end of file\n")
			}
		}
		start = to
	}
	return w.String()
}

// hunkRange formats a hunk's start and length as diff -u does: 1-based, the line before an
// empty range, and ",1" left out.
func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}
