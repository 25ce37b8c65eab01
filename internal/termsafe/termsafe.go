// Package termsafe makes text that others control safe to print to a terminal. A validation's
// output, a change message, a progress line or a path is written by an agent, and a terminal
// acts on the control characters in what it prints: ESC starts sequences that clear the screen,
// move the cursor, set the window title or write the clipboard (OSC 52); the C1 code point
// U+009B, and the single byte 0x9b to a terminal not in UTF-8 mode, is a CSI on its own; a
// lone carriage return lets a line overwrite what came before it. Escaped, such text shows what
// it holds and does nothing.
//
// The escaped form is for people: a backslash the text held is not escaped, so `\x1b` printed
// may have been those four characters. What must stay exact goes out as JSON (--json).
package termsafe

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Text answers s with every control character escaped but the newlines and tabs of a block of
// lines: C0 (U+0000-U+001F), DEL (U+007F) and C1 (U+0080-U+009F) as \x1b, \x7f or \u009b, and
// each byte that is not UTF-8 as \xff.
//
// A carriage return is kept only right before a newline, where it ends a line as a newline
// does (a log written on Windows, a program that writes "\r\n"); anywhere else it sends the
// cursor back to the start of the line, so that what follows prints over what came before it
// (a "FAIL" turned "ok  "), and it is escaped as \r.
func Text(s string) string { return escape(s, false) }

// Line answers s escaped as Text does, and its newlines, tabs and carriage returns too (\n, \t,
// \r): for one field of a line (a path, a label, a message's subject, a table's cell), which must
// neither start a line of its own, forging one of ag's, nor shift a table's columns.
func Line(s string) string { return escape(s, true) }

func escape(s string, oneLine bool) string {
	i := firstUnsafe(s, oneLine)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\r' && !oneLine && i+1 < len(s) && s[i+1] == '\n':
			b.WriteString("\r\n")
			i += 2
			continue
		case (c == '\n' || c == '\t') && !oneLine:
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\r':
			b.WriteString(`\r`)
		case c < 0x20 || c == 0x7f:
			writeByteEscape(&b, c)
		case c < utf8.RuneSelf:
			b.WriteByte(c)
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				writeByteEscape(&b, c)
			case isC1(r):
				b.WriteString(`\u00`)
				b.WriteByte(hexDigits[r>>4])
				b.WriteByte(hexDigits[r&0xf])
			default:
				b.WriteString(s[i : i+size])
			}
			i += size
			continue
		}
		i++
	}
	return b.String()
}

// firstUnsafe answers the index of the first byte of s that escape changes, or -1: most text
// holds none, and is answered as it is, without a copy.
func firstUnsafe(s string, oneLine bool) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 0x20 && c < 0x7f:
		case c == '\n' || c == '\t':
			if oneLine {
				return i
			}
		case c == '\r':
			if oneLine || i+1 == len(s) || s[i+1] != '\n' {
				return i
			}
		case c < utf8.RuneSelf:
			return i
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 || isC1(r) {
				return i
			}
			i += size - 1
		}
	}
	return -1
}

// isC1 reports whether r is a C1 control character: terminals take U+009B as a CSI, U+009D as
// an OSC, just as ESC [ and ESC ].
func isC1(r rune) bool { return r >= 0x80 && r <= 0x9f }

const hexDigits = "0123456789abcdef"

func writeByteEscape(b *strings.Builder, c byte) {
	b.WriteString(`\x`)
	b.WriteByte(hexDigits[c>>4])
	b.WriteByte(hexDigits[c&0xf])
}

// Fprintf is fmt.Fprintf for what people read: each string (or error) argument is escaped as
// one field of a line (Line). The format is ag's own, and keeps its newlines and tabs. A block
// of lines (a rejection's reason, a job's output) goes through Text instead, printed with %s by
// fmt.Fprintf: here its newlines would be escaped.
func Fprintf(w io.Writer, format string, args ...any) error {
	escaped := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			escaped[i] = Line(v)
		case error:
			escaped[i] = Line(v.Error())
		default:
			escaped[i] = a
		}
	}
	_, err := fmt.Fprintf(w, format, escaped...)
	return err
}

// FirstLine answers the first line of s cut to at most n bytes, "..." added when cut, for a
// note in a table's cell. It cuts at the start of a character: a character cut in two would be
// printed as the escapes of its bytes.
func FirstLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > n {
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		return s[:n] + "..."
	}
	return s
}
