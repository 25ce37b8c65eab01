package audit

import (
	"bytes"
	"slices"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// The canonical form is defined as what encoding/json writes after decoding details into
// map[string]any with UseNumber (canonicalDetails). That costs a map, an interface and a string
// per value, and sealing runs it for every event, so the functions here produce the same bytes
// by transcoding the details in one pass. They accept only what they can prove encoding/json
// accepts: anything else (a syntax error, details that are not an object, nesting deeper than
// maxTranscodeDepth) makes them give up, and appendDetails takes the slow path, which answers
// the same bytes or the same refusal as ever. canonical_test.go holds the slow path's exact former
// code and compares the two, in a table and under the fuzzer.

// appendCanonical appends the canonical form of e to dst.
func appendCanonical(dst []byte, e Event) ([]byte, error) {
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, e.Seq, 10)
	dst = append(dst, `,"time":"`...)
	dst = appendTime(dst, e.Time)
	dst = append(dst, `","principal":`...)
	dst = appendString(dst, e.Principal)
	dst = append(dst, `,"holder":`...)
	dst = appendString(dst, e.Holder)
	dst = append(dst, `,"action":`...)
	dst = appendString(dst, e.Action)
	dst = append(dst, `,"subject":`...)
	dst = appendString(dst, e.Subject)
	dst = append(dst, `,"details":`...)
	dst, err := appendDetails(dst, e.Details)
	if err != nil {
		return nil, err
	}
	return append(dst, '}'), nil
}

// appendTime appends t as t.UTC().Format(timeLayout) writes it. Format interprets its layout
// for every call, which cost sealing as much as all the rest of the fixed fields.
func appendTime(dst []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		// Format writes a sign or a fifth digit: only digits, '-', ':', '.', 'T' and 'Z' all
		// the same, none of which a JSON string escapes.
		return t.AppendFormat(dst, timeLayout)
	}
	hour, minute, sec := t.Clock()
	micro := t.Nanosecond() / 1000 // Format truncates too
	return append(dst,
		byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-',
		byte('0'+month/10), byte('0'+month%10), '-', byte('0'+day/10), byte('0'+day%10), 'T',
		byte('0'+hour/10), byte('0'+hour%10), ':', byte('0'+minute/10), byte('0'+minute%10), ':',
		byte('0'+sec/10), byte('0'+sec%10), '.',
		byte('0'+micro/100000), byte('0'+micro/10000%10), byte('0'+micro/1000%10),
		byte('0'+micro/100%10), byte('0'+micro/10%10), byte('0'+micro%10), 'Z')
}

// appendDetails appends the canonical form of details to dst.
func appendDetails(dst, details []byte) ([]byte, error) {
	if out, ok := transcodeDetails(dst, details); ok {
		return out, nil
	}
	v, err := canonicalDetails(details)
	if err != nil {
		return nil, err
	}
	b, err := encodeJSON(v)
	if err != nil {
		return nil, err
	}
	return append(dst, b...), nil
}

// maxTranscodeDepth bounds the transcoder's recursion. encoding/json's own limit is 10000 (its
// scanner's maxNestingDepth); deeper details than this one are left to it, so that both the
// details it takes and those it refuses keep their fate.
const maxTranscodeDepth = 1000

// transcoder writes JSON the way encoding/json re-encodes it after decoding it into any with
// UseNumber: no whitespace, object keys sorted by their decoded bytes with the last of equal
// keys kept (a map's), numbers as written, strings decoded and re-escaped.
type transcoder struct {
	in  []byte
	pos int
	out []byte
	// sorting is set for a second pass once the first found an object's keys out of order
	// (unsorted): the first pass keeps only the last key of each object, which costs nothing,
	// while sorting has to remember every member of the objects it is in.
	sorting, unsorted bool
	members           []member
	// keys holds the decoded keys that differ from their raw bytes (escaped or not valid
	// UTF-8), for comparison; scratch holds a string value's decoded bytes, and moved an
	// object's bytes while they are sorted.
	keys, scratch, moved []byte
}

// member is an object member already written: its decoded key and where out holds it.
type member struct {
	key        []byte
	start, end int
}

// transcodeDetails appends the canonical form of details to dst, or answers false when it
// cannot tell that encoding/json would take them.
func transcodeDetails(dst, details []byte) ([]byte, bool) {
	t := transcoder{in: details, out: dst}
	t.skipSpace()
	if t.pos == len(t.in) {
		// Only JSON whitespace, which bytes.TrimSpace removes too: no details.
		return append(dst, "null"...), true
	}
	if t.consume("null") {
		t.skipSpace()
		if t.pos != len(t.in) {
			return nil, false
		}
		return append(dst, "null"...), true
	}
	if t.in[t.pos] != '{' {
		return nil, false
	}
	if !t.value(0) {
		if !t.unsorted {
			return nil, false
		}
		// Some object's keys were out of order: start again, sorting them.
		t = transcoder{in: details, out: dst, sorting: true}
		t.skipSpace()
		if !t.value(0) {
			return nil, false
		}
	}
	t.skipSpace()
	if t.pos != len(t.in) {
		return nil, false
	}
	return t.out, true
}

func (t *transcoder) skipSpace() {
	for t.pos < len(t.in) {
		switch t.in[t.pos] {
		case ' ', '\t', '\n', '\r':
			t.pos++
		default:
			return
		}
	}
}

// consume skips lit when the input goes on with it.
func (t *transcoder) consume(lit string) bool {
	if !bytes.HasPrefix(t.in[t.pos:], []byte(lit)) {
		return false
	}
	t.pos += len(lit)
	return true
}

// value transcodes the value at t.pos, nested depth objects and arrays deep.
func (t *transcoder) value(depth int) bool {
	if t.pos >= len(t.in) {
		return false
	}
	switch c := t.in[t.pos]; {
	case c == '{':
		return t.object(depth + 1)
	case c == '[':
		return t.array(depth + 1)
	case c == '"':
		return t.stringValue()
	case c == '-' || '0' <= c && c <= '9':
		return t.number()
	case c == 't':
		return t.literal("true")
	case c == 'f':
		return t.literal("false")
	case c == 'n':
		return t.literal("null")
	}
	return false
}

func (t *transcoder) literal(lit string) bool {
	if !t.consume(lit) {
		return false
	}
	t.out = append(t.out, lit...)
	return true
}

// number copies a number as written, which is what json.Number keeps and writes back, once it
// has checked the grammar that both encoding/json's scanner and its encoder enforce.
func (t *transcoder) number() bool {
	in, i := t.in, t.pos
	digits := func() bool {
		j := i
		for i < len(in) && '0' <= in[i] && in[i] <= '9' {
			i++
		}
		return i > j
	}
	if in[i] == '-' {
		i++
	}
	if i < len(in) && in[i] == '0' {
		i++
	} else if i >= len(in) || in[i] < '1' || in[i] > '9' || !digits() {
		return false
	}
	if i < len(in) && in[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	// What follows (a digit after a leading 0, a letter) is the caller's to refuse.
	t.out = append(t.out, in[t.pos:i]...)
	t.pos = i
	return true
}

func (t *transcoder) array(depth int) bool {
	if depth > maxTranscodeDepth {
		return false
	}
	t.pos++
	t.out = append(t.out, '[')
	t.skipSpace()
	if t.pos < len(t.in) && t.in[t.pos] == ']' {
		t.pos++
		t.out = append(t.out, ']')
		return true
	}
	for {
		if !t.value(depth) {
			return false
		}
		t.skipSpace()
		if t.pos >= len(t.in) {
			return false
		}
		switch t.in[t.pos] {
		case ',':
			t.pos++
			t.out = append(t.out, ',')
			t.skipSpace()
		case ']':
			t.pos++
			t.out = append(t.out, ']')
			return true
		default:
			return false
		}
	}
}

func (t *transcoder) object(depth int) bool {
	if depth > maxTranscodeDepth {
		return false
	}
	start := len(t.out)
	t.pos++
	t.out = append(t.out, '{')
	t.skipSpace()
	if t.pos < len(t.in) && t.in[t.pos] == '}' {
		t.pos++
		t.out = append(t.out, '}')
		return true
	}
	keysMark, base := len(t.keys), len(t.members)
	var prev []byte
	inOrder := true
	for first := true; ; first = false {
		if t.pos >= len(t.in) || t.in[t.pos] != '"' {
			return false
		}
		memberStart := len(t.out)
		key, ok := t.key()
		if !ok {
			return false
		}
		// Strictly increasing keys are the map's order already, and have no duplicates whose
		// last one a map would keep.
		if !first && bytes.Compare(prev, key) >= 0 {
			if !t.sorting {
				t.unsorted = true
				return false
			}
			inOrder = false
		}
		prev = key
		t.skipSpace()
		if t.pos >= len(t.in) || t.in[t.pos] != ':' {
			return false
		}
		t.pos++
		t.out = append(t.out, ':')
		t.skipSpace()
		if !t.value(depth) {
			return false
		}
		if t.sorting {
			t.members = append(t.members, member{key: key, start: memberStart, end: len(t.out)})
		}
		t.skipSpace()
		if t.pos >= len(t.in) {
			return false
		}
		if t.in[t.pos] == '}' {
			t.pos++
			break
		}
		if t.in[t.pos] != ',' {
			return false
		}
		t.pos++
		t.out = append(t.out, ',')
		t.skipSpace()
	}
	if !inOrder {
		t.sortMembers(start, base)
	}
	t.members = t.members[:base]
	t.keys = t.keys[:keysMark]
	t.out = append(t.out, '}')
	return true
}

// sortMembers rewrites the object written from out[start] (its '{') with members[base:] in
// key order, keeping only the last member of each key, as decoding into a map and encoding
// the map do.
func (t *transcoder) sortMembers(start, base int) {
	ms := t.members[base:]
	// Stable, so that the last of equal keys is the one that came last.
	slices.SortStableFunc(ms, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	t.moved = append(t.moved[:0], t.out[start:]...)
	t.out = t.out[:start+1]
	for i, m := range ms {
		if i+1 < len(ms) && bytes.Equal(m.key, ms[i+1].key) {
			continue
		}
		if len(t.out) > start+1 {
			t.out = append(t.out, ',')
		}
		t.out = append(t.out, t.moved[m.start-start:m.end-start]...)
	}
}

// key transcodes the key at t.pos and answers its decoded bytes, by which maps are sorted.
func (t *transcoder) key() ([]byte, bool) {
	raw, plain, ok := t.scanString()
	if !ok {
		return nil, false
	}
	if plain {
		t.out = append(t.out, '"')
		t.out = append(t.out, raw...)
		t.out = append(t.out, '"')
		return raw, true
	}
	mark := len(t.keys)
	t.keys = appendDecoded(t.keys, raw)
	key := t.keys[mark:len(t.keys):len(t.keys)]
	t.out = appendString(t.out, key)
	return key, true
}

func (t *transcoder) stringValue() bool {
	raw, plain, ok := t.scanString()
	if !ok {
		return false
	}
	if plain {
		t.out = append(t.out, '"')
		t.out = append(t.out, raw...)
		t.out = append(t.out, '"')
		return true
	}
	t.scratch = appendDecoded(t.scratch[:0], raw)
	t.out = appendString(t.out, t.scratch)
	return true
}

// scanString checks the string at t.pos as encoding/json's scanner does, moves past it, and
// answers its contents. plain reports contents that decode to themselves and that
// appendString writes back unchanged: no escapes, no invalid UTF-8, no U+2028 or U+2029.
func (t *transcoder) scanString() (raw []byte, plain, ok bool) {
	in := t.in
	start := t.pos + 1
	plain = true
	for i := start; i < len(in); {
		c := in[i]
		if safeASCII[c] {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(in[i:])
			if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				plain = false
			}
			i += size
			continue
		}
		switch {
		case c == '"':
			t.pos = i + 1
			return in[start:i], plain, true
		case c == '\\':
			plain = false
			if i+1 >= len(in) {
				return nil, false, false
			}
			switch in[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if getu4(in[i:]) < 0 {
					return nil, false, false
				}
				i += 6
			default:
				return nil, false, false
			}
		default: // a control character
			return nil, false, false
		}
	}
	return nil, false, false
}

// safeASCII holds the bytes a JSON string holds as they are, and that encoding/json writes as
// they are with HTML escaping off (its safeSet): ASCII but control characters, '"' and '\\'.
var safeASCII = func() (set [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		set[c] = c != '"' && c != '\\'
	}
	return set
}()

// getu4 decodes \uXXXX from the beginning of s, or answers -1 (encoding/json's getu4).
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c = c - '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// appendDecoded appends the decoded contents of a string that scanString took, as
// encoding/json's unquoteBytes decodes them: invalid UTF-8 and lone surrogates become U+FFFD.
func appendDecoded(dst, s []byte) []byte {
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\':
			switch e := s[r+1]; e {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				rr := getu4(s[r:])
				r += 6
				if utf16.IsSurrogate(rr) {
					// A pair only when the next escape completes it; otherwise only the first
					// escape is consumed.
					if dec := utf16.DecodeRune(rr, getu4(s[r:])); dec != utf8.RuneError {
						r += 6
						dst = utf8.AppendRune(dst, dec)
						continue
					}
					rr = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, rr)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, e)
			}
			r += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			dst = utf8.AppendRune(dst, rr)
			r += size
		}
	}
	return dst
}

// appendString appends s as a JSON string as encoding/json writes it with HTML escaping off
// (its appendString): \b \f \n \r \t \" \\ short, other control characters as \u00XX, U+2028
// and U+2029 escaped, invalid UTF-8 as \ufffd. jsontext.AppendString differs (it writes \b and
// \f as \u0008 and \u000c and leaves U+2028 and U+2029 alone), so it cannot serve here.
func appendString[S []byte | string](dst []byte, s S) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if safeASCII[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		n := min(len(s)-i, utf8.UTFMax)
		r, size := utf8.DecodeRuneInString(string(s[i : i+n]))
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
