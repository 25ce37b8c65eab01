package termsafe

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestEscapes ensures each kind of control character comes out in a form a terminal prints and
// does not act on, and that Text keeps the newlines and tabs of a block while Line keeps none.
func TestEscapes(t *testing.T) {
	cases := []struct {
		in, text, line string
	}{
		{"ok: all tests passed", "ok: all tests passed", "ok: all tests passed"},
		{"ünïcode, 日本, \ufffd", "ünïcode, 日本, \ufffd", "ünïcode, 日本, \ufffd"},
		{"\x1b[2J\x1b[H", `\x1b[2J\x1b[H`, `\x1b[2J\x1b[H`},
		{"\x1b]52;c;ZWNobyBoaQ==\a", `\x1b]52;c;ZWNobyBoaQ==\x07`, `\x1b]52;c;ZWNobyBoaQ==\x07`},
		{"\u009b31mred", `\u009b31mred`, `\u009b31mred`},
		{"\u0080\u009f\u00a0", `\u0080\u009f` + "\u00a0", `\u0080\u009f` + "\u00a0"},
		{"nul\x00del\x7f", `nul\x00del\x7f`, `nul\x00del\x7f`},
		{"bad \xff\x9b byte", `bad \xff\x9b byte`, `bad \xff\x9b byte`},
		{"cut \xe2\x82", `cut \xe2\x82`, `cut \xe2\x82`},
		{"FAIL\rok  ", `FAIL\rok  `, `FAIL\rok  `},
		{"a\r\nb\n", "a\r\nb\n", `a\r\nb\n`},
		{"trailing\r", `trailing\r`, `trailing\r`},
		{"\r\r\n", `\r` + "\r\n", `\r\r\n`},
		{"one\nchange chg_x integrated", "one\nchange chg_x integrated", `one\nchange chg_x integrated`},
		{"col\tumn", "col\tumn", `col\tumn`},
		{`already \x1b escaped`, `already \x1b escaped`, `already \x1b escaped`},
		{"", "", ""},
		// What follows an escape is read as carefully as what precedes it: the lines and tabs
		// of a block, a line end, a literal U+FFFD, a byte that is no character.
		{"\x1b[1mbold\n\tnext", `\x1b[1mbold` + "\n\tnext", `\x1b[1mbold\n\tnext`},
		{"\x1b\r\nnext line", `\x1b` + "\r\nnext line", `\x1b\r\nnext line`},
		{"\x1b \ufffd", `\x1b` + " \ufffd", `\x1b` + " \ufffd"},
		{"lone \x80 byte", `lone \x80 byte`, `lone \x80 byte`},
		{"del\x7f", `del\x7f`, `del\x7f`},
	}
	for _, c := range cases {
		if got := Text(c.in); got != c.text {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.text)
		}
		if got := Line(c.in); got != c.line {
			t.Errorf("Line(%q) = %q, want %q", c.in, got, c.line)
		}
	}
}

// TestSafeTextIsNotCopied ensures text without anything to escape is answered as it is.
func TestSafeTextIsNotCopied(t *testing.T) {
	for _, s := range []string{strings.Repeat("go test ./... ok\n", 100), "ünïcode, 日本, \ufffd\r\n"} {
		if allocs := testing.AllocsPerRun(100, func() { _ = Text(s) }); allocs != 0 {
			t.Errorf("Text(%q) allocates %v times, want none", s, allocs)
		}
	}
}

// FuzzEscape ensures that nothing a terminal acts on survives either form, that the answer is
// UTF-8, that escaping twice changes nothing more, and that text with nothing to escape comes
// back unchanged.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"plain", "\x1b[2J", "\x1b]52;c;aGk=\a", "\u009b1m", "a\r\nb", "a\rb", "\xff\xc2", "x\ny\tz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, form := range []struct {
			name    string
			escape  func(string) string
			oneLine bool
		}{{"Text", Text, false}, {"Line", Line, true}} {
			out := form.escape(s)
			if !utf8.ValidString(out) {
				t.Fatalf("%s(%q) = %q: not UTF-8", form.name, s, out)
			}
			for i, r := range out {
				switch {
				case r == '\n' || r == '\t':
					if form.oneLine {
						t.Fatalf("Line(%q) = %q keeps %q", s, out, r)
					}
				case r == '\r':
					if form.oneLine || !strings.HasPrefix(out[i:], "\r\n") {
						t.Fatalf("%s(%q) = %q keeps a carriage return not before a newline", form.name, s, out)
					}
				case r < 0x20 || r == 0x7f || isC1(r):
					t.Fatalf("%s(%q) = %q keeps the control character %U", form.name, s, out, r)
				}
			}
			if again := form.escape(out); again != out {
				t.Fatalf("%s(%q) = %q, and again %q", form.name, s, out, again)
			}
			if firstUnsafe(s, form.oneLine) < 0 && out != s {
				t.Fatalf("%s(%q) = %q, changed with nothing to escape", form.name, s, out)
			}
		}
	})
}

// TestFirstLineKeepsCharactersWhole ensures a note cut short ends before a character it would
// split, which would be printed as the escapes of its bytes.
func TestFirstLineKeepsCharactersWhole(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"ééé", 3, "é..."},
		{"ééé", 4, "éé..."},
		{"abc\ndef", 10, "abc"},
		{"abcdef", 3, "abc..."},
		{"日本", 2, "..."},
		{"abc", 3, "abc"},
		{"\nsecond line", 10, ""},
		// bytes that are no character are cut anywhere, and never before the start
		{"\x80\x80\x80abc", 2, "..."},
	} {
		if got := FirstLine(c.in, c.n); got != c.want {
			t.Errorf("FirstLine(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
