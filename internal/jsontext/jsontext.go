// Package jsontext writes JSON text by hand where encoding/json's reflection costs more than the
// write: the stores build audit details on their write paths with it, and structjson encodes
// job payloads. It imports nothing of ag, so that both may use it without depending on each
// other.
package jsontext

import "unicode/utf8"

// AppendString appends s as a valid JSON string, escaped much as encoding/json does with
// HTML escaping off (it writes \b and \f as \u0008 and \u000c, and leaves U+2028 and U+2029
// as they are); invalid UTF-8 becomes U+FFFD. The stores build audit details with it on
// their write paths, where encoding/json's reflection costs more than the write. The hashes
// cover the audit log's canonical form (audit.Canonical), which re-escapes details as
// encoding/json does.
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
