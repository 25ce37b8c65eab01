package repo

import (
	"strings"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Fold answers the key under which a case-insensitive, normalization-insensitive file system
// stores path p: two paths with the same fold are one file (or one directory) on a checkout on
// macOS (APFS, HFS+) or Windows (NTFS), though git and Linux keep them apart. Leases compare
// folds (FoldOverlap), so that one agent's lease on "café.txt" written in NFC also covers
// another's "cafe\u0301.txt" (NFD) and "CAFÉ.TXT", which such a checkout would write to the
// same file; Integrate refuses a change that adds a second spelling of a name the tree holds.
//
// Each segment between '/' is folded on its own, and the separators and a trailing '/' are
// kept: a fold has as many segments as p, a directory lease stays a directory lease, and the
// prefix ranges of directory leases hold on folds as on paths. A segment is put in canonical
// decomposition, case-folded with Unicode's full case folding (CaseFolding.txt, statuses C
// and F), then composed (NFC): Unicode's canonical caseless match (D145), closed under
// itself so that Fold(Fold(p)) == Fold(p).
//
// What it joins: canonically equivalent spellings (precomposed "é" and "e" + U+0301, Hangul
// syllables and their jamo, in any order of combining marks), which APFS and HFS+ treat as
// one name; and upper, lower and title case of every script (Latin, Greek, Cyrillic,
// Armenian, Cherokee, Deseret, ...), which APFS, HFS+ and NTFS as formatted by default treat
// as one name. Full folding also joins a few spellings those file systems keep apart ("ß" and
// "ss", "ﬁ" and "fi", final and medial sigma): the fold errs toward calling two names one,
// which costs a lease conflict or a refused second spelling, never two "exclusive" leases on
// one file.
//
// What it does not join, though some file system does: compatibility equivalents (NFKC:
// full-width "Ａ" and "A", "①" and "1"), the code points HFS+ ignores (U+200C-U+200F, ...),
// the trailing dots and spaces NTFS drops, the Turkic dotted and dotless i (folded as in
// every other language), and NTFS's short names ("PROGRA~1"). ReservedSegment handles those
// for .git and .ag, where they matter most.
//
// p is a path ValidatePath accepts (valid UTF-8); an ASCII path answers its lower case.
func Fold(p string) string {
	if ascii(p) {
		if !hasUpperASCII(p) {
			return p
		}
		return strings.ToLower(p)
	}
	var b strings.Builder
	b.Grow(len(p))
	for rest := p; ; {
		seg, tail, more := strings.Cut(rest, "/")
		b.WriteString(foldSegment(seg))
		if !more {
			return b.String()
		}
		b.WriteByte('/')
		rest = tail
	}
}

// foldSegment folds one segment until it no longer changes: a composition can make a
// character that folds again (a capital letter's precomposed form), so one pass is not always
// a fixed point. The bound is generous; no known string needs more than two passes.
func foldSegment(seg string) string {
	folder := cases.Fold()
	for range 4 {
		next := norm.NFC.String(folder.String(norm.NFD.String(seg)))
		if next == seg {
			break
		}
		seg = next
	}
	return seg
}

func hasUpperASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// FoldOverlap reports whether two lease paths overlap on a case-insensitive,
// normalization-insensitive file system: their folds overlap (Overlap).
func FoldOverlap(p, q string) bool { return Overlap(Fold(p), Fold(q)) }

// FoldCovers reports whether lease path l covers the file path f on such a file system: l's
// fold covers f's (Covers).
func FoldCovers(l, f string) bool { return Covers(Fold(l), Fold(f)) }
