package repo_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ag-coord/ag/internal/repo"
)

func TestFoldJoinsWhatCaseAndNormalizationInsensitiveFileSystemsJoin(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"café.txt", "cafe\u0301.txt"},
		{"café.txt", "CAFÉ.TXT"},
		{"cafe\u0301.txt", "CAFE\u0301.TXT"},
		{"Docs/", "docs/"},
		{"Docs/a.txt", "docs/A.TXT"},
		{"ΣΊΣΥΦΟΣ", "σίσυφος"},
		{"Привет/мир", "ПРИВЕТ/МИР"},
		{"\u1112\u1161\u11ab", "\ud55c"}, // Hangul jamo and the syllable 한
		{"a\u0323\u0307", "a\u0307\u0323"},
		// ASCII paths take a shorter way: every capital letter, A and Z included
		{"README.md", "readme.md"},
		{"A", "a"},
		{"Z", "z"},
	} {
		if fa, fb := repo.Fold(c.a), repo.Fold(c.b); fa != fb {
			t.Errorf("Fold(%q) = %q, Fold(%q) = %q: want one fold", c.a, fa, c.b, fb)
		}
	}
}

func TestFoldKeepsApartWhatItDoesNotJoin(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"a", "b"},
		{"Ａ", "a"}, // full-width: a compatibility equivalent, not a canonical one
		{"docs/a", "docsa"},
		{"docs/", "docs"},
		{"e\u0301", "e"},
	} {
		if fa, fb := repo.Fold(c.a), repo.Fold(c.b); fa == fb {
			t.Errorf("Fold(%q) = Fold(%q) = %q: want different folds", c.a, c.b, fa)
		}
	}
}

func TestFoldOverlap(t *testing.T) {
	for _, c := range []struct {
		p, q    string
		overlap bool
	}{
		{"café.txt", "cafe\u0301.txt", true},
		{"café.txt", "CAFÉ.TXT", true},
		{"Docs/", "docs/a", true},
		{"docs/", "DOCS/SUB/", true},
		{"Docs/", "docsa", false},
		{"a.txt", "b.txt", false},
	} {
		if got := repo.FoldOverlap(c.p, c.q); got != c.overlap {
			t.Errorf("FoldOverlap(%q, %q) = %v, want %v", c.p, c.q, got, c.overlap)
		}
	}
	if !repo.FoldCovers("Docs/", "docs/a") || repo.FoldCovers("docs/a", "Docs/") {
		t.Error("FoldCovers: a directory covers its other-case children, not the other way round")
	}
}

func FuzzFold(f *testing.F) {
	for _, s := range []string{"café.txt", "cafe\u0301.txt", "CAFÉ/TXT/", "ß/ẞ", "ǅ/ǆ", "ΐ/ι\u0308\u0301", "a//b", "/", "", "Ω\u0345/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if !utf8.ValidString(p) {
			return
		}
		fp := repo.Fold(p)
		if again := repo.Fold(fp); again != fp {
			t.Fatalf("Fold is not idempotent: Fold(%q) = %q, Fold of that = %q", p, fp, again)
		}
		if strings.Count(fp, "/") != strings.Count(p, "/") {
			t.Fatalf("Fold(%q) = %q: the segment count changed", p, fp)
		}
		if strings.HasSuffix(fp, "/") != strings.HasSuffix(p, "/") || strings.HasPrefix(fp, "/") != strings.HasPrefix(p, "/") {
			t.Fatalf("Fold(%q) = %q: a leading or trailing '/' changed", p, fp)
		}
		ps, fs := strings.Split(p, "/"), strings.Split(fp, "/")
		for i := range ps {
			if (ps[i] == "") != (fs[i] == "") {
				t.Fatalf("Fold(%q) = %q: segment %d became empty or filled", p, fp, i)
			}
			if repo.Fold(ps[i]) != fs[i] {
				t.Fatalf("Fold(%q) = %q: segment %d is not folded on its own", p, fp, i)
			}
		}
		if !utf8.ValidString(fp) {
			t.Fatalf("Fold(%q) = %q: not valid UTF-8", p, fp)
		}
	})
}
