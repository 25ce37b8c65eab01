package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// refCanonical is Canonical as it was before the transcoder, kept word for word (its helpers
// renamed) as the definition the fast code must match byte for byte, refusals included.
func refCanonical(e Event) ([]byte, error) {
	details, err := refCanonicalDetailsValue(e.Details)
	if err != nil {
		return nil, err
	}
	return refEncodeJSON(refCanonicalEvent{
		Seq: e.Seq, Time: e.Time.UTC().Format(timeLayout), Principal: e.Principal, Holder: e.Holder,
		Action: e.Action, Subject: e.Subject, Details: details,
	})
}

type refCanonicalEvent struct {
	Seq       uint64 `json:"seq"`
	Time      string `json:"time"`
	Principal string `json:"principal"`
	Holder    string `json:"holder"`
	Action    string `json:"action"`
	Subject   string `json:"subject"`
	Details   any    `json:"details"`
}

func refCanonicalDetails(details []byte) ([]byte, error) {
	v, err := refCanonicalDetailsValue(details)
	if err != nil {
		return nil, err
	}
	return refEncodeJSON(v)
}

func refCanonicalDetailsValue(raw []byte) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("details: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("details: data after the JSON object")
	}
	switch v.(type) {
	case nil, map[string]any:
		return v, nil
	}
	return nil, fmt.Errorf("details: a JSON %T, not an object", v)
}

func refEncodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// trickyStrings are JSON string contents (as they appear between quotes) that decoding or
// re-escaping changes, or that look as if it would.
var trickyStrings = []string{
	``, `a`, `<&>`, `\u003c\u0026\u003e`, `\/`, `/`, `\"`, `\\`, `\b\f\n\r\t`,
	`\u0008\u000c\u000a\u000d\u0009`, `\u0000\u0001\u001f\u001F`, `\u0020\u007f`, "\x7f",
	`\u00e9`, `\u00E9`, "é", "\u2028\u2029", `\u2028\u2029`, `\u2027\u202a`, "\u2027\u202a",
	`\ufffd`, "\ufffd", "\xff", "a\xffb", "\xc3", "\xc3(", "\xe2\x80", "\xe2\x80\xa8x",
	"\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf", `\ud83d\ude00`, `\uD83D\uDE00`, "😀",
	`\ud83d`, `\ud83dx`, `\ud83d\u0041`, `\ude00\ud83d`, `\ud83d\ud83d\ude00`, `\udfff`,
	`\ud800\udc00`, `\udbff\udfff`, `\uffff`, `\uFFFE`, `\u0000`, `\ud83d\`, `\ud83d\n`,
	// a lone continuation byte; an escape in capitals A to F; a pair with text after it
	"\x80", "a\x80b", `\u00A9\u00AB`, `\ud83d\ude00ab`,
}

// badStrings are string contents encoding/json refuses.
var badStrings = []string{
	"\x00", "\x1f", "\n", "\t", `\x`, `\'`, `\u12`, `\u12g4`, `\`, `\U0041`, `\ud83d\u12`,
}

// trickyDetails are details for the differential test: accepted ones in every shape the
// transcoder has to get right, and refused ones it must leave to encoding/json.
var trickyDetails = []string{
	// none
	``, ` `, "\t\r\n ", `null`, ` null `, "\u00a0", " \u0085 ", "\u2028", "\ufeff{}",
	`nul`, `nullx`, `null null`, `NULL`,
	// not an object
	`[]`, `[1,2]`, `"x"`, `1`, `-0`, `true`, `false`, ` [] `, `{`, `}`, `]`,
	// objects
	`{}`, ` {} `, `{ }`, "{\n}", `{"a":1}`, `{"a" : 1 }`, "{\"a\":1}\n", `{"b":1,"a":2}`,
	`{"a":1,"a":2}`, `{"a":2,"a":1}`, `{"a":1,"b":2,"a":3}`, `{"b":1,"a":2,"b":3,"a":4}`,
	`{"a":{"y":1,"x":2},"b":[{"d":1,"c":2},{}]}`, `{"z":{"b":{"d":1,"c":2},"a":0}}`,
	`{"a":{"x":1,"x":{"q":1,"p":2}}}`, `{"a":[1,{"b":2,"b":[3,{"d":4,"c":5}]}]}`,
	`{"":1}`, `{"":1,"":2}`, `{" ":1,"":2}`, `{"a":1,"a ":2,"a\u0000":3,"a\t":4}`,
	`{"\u0061":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"\u0062":1,"a":2}`, `{"\\":1,"\"":2}`,
	`{"é":1,"e":2,"f":3}`, `{"\u00e9":1,"é":2}`, "{\"\xff\":1,\"\ufffd\":2}",
	"{\"\ufffd\":1,\"\xff\":2}", "{\"\xfe\":1,\"\xff\":2}", `{"\ud800":1,"\ufffd":2}`,
	`{"\ud83d\ude00":1,"😀":2}`, `{"\u2028":1,"` + "\u2028" + `":2}`, `{"~":1,"\u007f":2,"é":3}`,
	`{"a":"x","b":"y"}`, `{"b":"x","a":"y"}`, `{"<":"&","&":">"}`, `{"a":"\u003c"}`,
	// numbers
	`{"n":0}`, `{"n":-0}`, `{"n":1e2}`, `{"n":1E+2}`, `{"n":1e-2}`, `{"n":1.50}`, `{"n":-1.5e-0}`,
	`{"n":12345678901234567890123}`, `{"n":0.0000}`, `{"n":[0,-0,1,-1,1.0,1e0,0e0]}`,
	`{"n":01}`, `{"n":-}`, `{"n":1.}`, `{"n":.5}`, `{"n":+1}`, `{"n":1e}`, `{"n":1e+}`,
	`{"n":0x1}`, `{"n":1_0}`, `{"n":NaN}`, `{"n":Infinity}`, `{"n":-01}`, `{"n":1.e2}`,
	`{"n":00}`, `{"n":1 2}`, `{"n":1,}`, `{"n":-0.0e+00}`, `{"n":9}`, `{"n":[98,-9.9e9]}`,
	// cut short right after a sign, an exponent, an array's bracket or value, a backslash
	`{"n":-`, `{"n":1e`, `{"n":1e+`, `{"a":[`, `{"a":[1`, `{"a":[1,`, `{"k":"\`, `{"k":"\u00`,
	// literals
	`{"t":true,"f":false,"n":null}`, `{"t":tru}`, `{"t":truee}`, `{"t":True}`, `{"n":nul}`,
	// arrays
	`{"a":[]}`, `{"a":[ ]}`, `{"a":[1, 2 ,3]}`, `{"a":[,]}`, `{"a":[1,]}`, `{"a":[1 2]}`,
	`{"a":[[[]],[{}]]}`, `{"a":[}`, `{"a":]}`, `{"a":[1}`, `{"a":{]}`,
	// structure, whitespace, trailing data
	`{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a"::1}`, `{a:1}`, `{'a':1}`, `{"a":1 "b":2}`,
	`{"a":1}{}`, `{"a":1} {"b":2}`, `{"a":1}x`, `{"a":1} x`, `{"a":1}]`, `{"a":1}}`,
	`{"a":1} null`, `{"a":1}` + "\u00a0", "\u00a0{\"a\":1}", "{\"a\":1}\x00", "{\"a\"\v:1}",
	"{\"a\":\f1}", "\t{ \"b\" :\r\n[ 1 , { \"d\" : 2 , \"c\" : 3 } ] , \"a\" : \"x\" }\n",
	`{"a":1`, `{"a":`, `{"a"`, `{"a`, `{"`, `{"a":"`, `{"a":"x`, `{"a":1,"b"`,
	// what the stores write
	`{"attestation_digest":"sha256:abc","claim":1,"output_digest":"sha256:def"}`,
	`{"kind":"build","max_attempts":5,"paths":["src/<a>&b","docs/ü"],"priority":3}`,
	`{"lease_expires_at":"2026-11-30T18:00:00.123456Z","reason":"exp\u0008ired\u000c"}`,
	`{"kind":"build","max_attempts":5,"paths":["src/\u003ca\u003e\u0026b","docs/ü"]}`,
}

// trickyEvents are the events the differential test runs every details of trickyDetails in.
func trickyEvents() []Event {
	cet := time.FixedZone("CET", 3600)
	var events []Event
	for i, s := range append([]string{"", "ci|ci-1", "job/job_1"}, trickyStringValues()...) {
		events = append(events, Event{
			ID: int64(i), Seq: uint64(i), Time: time.Date(2026, 11, 30, 19, 0, 0, 123456789, cet),
			Principal: s, Holder: "h" + s, Action: s + "a", Subject: s,
		})
	}
	for _, tm := range []time.Time{
		{}, time.Unix(0, 0), time.Date(-5, 1, 2, 3, 4, 5, 6, time.UTC), time.Date(12345, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(9999, 12, 31, 23, 0, 0, 0, time.FixedZone("", -3600)), time.Date(2026, 1, 1, 0, 0, 0, 999, time.Local),
	} {
		events = append(events, Event{Seq: ^uint64(0), Time: tm, Principal: "p", Action: "a", Subject: "s"})
	}
	return events
}

// trickyStringValues answers the Go strings that trickyStrings and badStrings stand for (raw,
// not decoded: invalid UTF-8 and control characters included), for the event's own fields.
func trickyStringValues() []string {
	out := append([]string{"\x00\x01\x1f\x7f", "\"\\", "<&>"}, trickyStrings...)
	return append(out, badStrings...)
}

// checkSame fails t unless Canonical and CanonicalDetails agree with the reference on details,
// in e.
func checkSame(t *testing.T, e Event, details []byte) {
	t.Helper()
	e.Details = details
	want, wantErr := refCanonical(e)
	got, err := Canonical(e)
	if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
		t.Errorf("Canonical(%+q, principal %+q, time %v):\n got %s, %v\nwant %s, %v", details, e.Principal, e.Time, got, err, want, wantErr)
	}
	want, wantErr = refCanonicalDetails(details)
	got, err = CanonicalDetails(details)
	if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
		t.Errorf("CanonicalDetails(%+q):\n got %s, %v\nwant %s, %v", details, got, err, want, wantErr)
	}
	// The same bytes from the slow path would pass the comparisons above: a transcoder that
	// gives up too soon is caught here, where it would only make sealing slower.
	if wantErr == nil && transcoderMustTake(details) {
		if _, ok := transcodeDetails(nil, details); !ok {
			t.Errorf("transcodeDetails(%+q) gave up on details encoding/json takes: sealing them takes the slow path", details)
		}
	}
}

// transcoderMustTake reports whether transcodeDetails has to take details when encoding/json
// does: all but those nested deeper than maxTranscodeDepth and those that bytes.TrimSpace
// (the slow path's test for no details) finds empty but JSON does not (U+00A0, U+0085).
func transcoderMustTake(details []byte) bool {
	if len(bytes.TrimSpace(details)) == 0 {
		return len(bytes.Trim(details, " \t\r\n")) == 0
	}
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(details); i++ {
		switch c := details[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest <= maxTranscodeDepth
}

// TestCanonicalMatchesReference ensures that Canonical and CanonicalDetails answer, for tricky
// details and event fields, the bytes encoding/json's decoding and encoding answer, and refuse
// what it refuses.
func TestCanonicalMatchesReference(t *testing.T) {
	t.Parallel()
	var all []string
	all = append(all, trickyDetails...)
	for _, s := range trickyStrings {
		all = append(all, `{"k":"`+s+`"}`, `{"`+s+`":1,"k":"`+s+`"}`, `{"k":["`+s+`"],"`+s+`":{"`+s+`":"`+s+`"}}`)
	}
	for _, s := range badStrings {
		all = append(all, `{"k":"`+s+`"}`, `{"`+s+`":1}`)
	}
	for _, s := range []string{`"a"`, `"a\u0000"`, `"\u0000"`, `"\/"`, `"\u00e9"`, `"é"`, "\"\xff\""} {
		for _, u := range []string{`"a"`, `"b"`, `""`, `"a\u0000"`, "\"\xff\"", `"\ufffd"`} {
			all = append(all, `{`+s+`:1,`+u+`:2}`, `{`+u+`:1,`+s+`:2,`+u+`:3}`)
		}
	}
	for _, depth := range []int{maxTranscodeDepth - 1, maxTranscodeDepth, maxTranscodeDepth + 1, 10000, 10001} {
		all = append(all,
			`{"a":`+strings.Repeat("[", depth-1)+strings.Repeat("]", depth-1)+`}`,
			strings.Repeat(`{"a":`, depth)+"1"+strings.Repeat("}", depth),
			strings.Repeat(`{"b":1,"a":`, depth)+"1"+strings.Repeat("}", depth))
	}
	// Escaped keys around an object with escaped keys, whose decoded bytes the transcoder keeps
	// aside while the inner object comes and goes.
	all = append(all, `{"\u0062":{"\u0078":1,"\u0077":2},"\u0061":2,"\u0063":{"\u0079":[{"\u007a":0}]}}`,
		`{"\u0061":{"\u0078":1},"\u0062":2,"\u0063":3}`, `{"\u0061":{"\u0078":1},"\u0061":2,"\u0063":3}`)
	// Many members with few keys, out of order: the last of each key has to win whatever the
	// sort does with equal keys.
	rng := rand.New(rand.NewPCG(5, 6))
	for range 50 {
		var b strings.Builder
		b.WriteString("{")
		for i := range 2 + rng.IntN(60) {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"%c":%d`, 'a'+rng.IntN(4), i)
		}
		b.WriteString("}")
		all = append(all, b.String(), `{"x":[`+b.String()+`]}`)
	}
	events := trickyEvents()
	for _, d := range all {
		checkSame(t, events[1], []byte(d))
	}
	for _, e := range events {
		for _, d := range []string{"", `{"a":1}`, `{"b":1,"a":"\u2028"}`, `[1]`} {
			checkSame(t, e, []byte(d))
		}
	}
}

// TestCanonicalFastPath ensures that the details stores write, and others encoding/json takes,
// go through the transcoder rather than the slow path: a regression here is only one of speed.
func TestCanonicalFastPath(t *testing.T) {
	t.Parallel()
	for _, d := range []string{
		``, `null`, `{}`, `{"a":1}`, `{"b":1,"a":2}`, `{"a":1,"a":2}`, ` {"a" : [1, {"c":"\u003c","b":null}]} `,
		`{"attestation_digest":"sha256:abc","claim":1,"output_digest":"sha256:def"}`,
		`{"kind":"build","max_attempts":5,"paths":["src/\u003ca\u003e\u0026b","docs/ü"]}`,
		"{\"k\":\"\xff\\ud800\u2028\"}",
	} {
		out, ok := transcodeDetails(nil, []byte(d))
		want, err := refCanonicalDetails([]byte(d))
		if !ok || err != nil || !bytes.Equal(out, want) {
			t.Errorf("transcodeDetails(%q) = %s, %v; want %s (%v)", d, out, ok, want, err)
		}
	}
}

// TestAppendString ensures appendString escapes every rune, and each byte that is not one, as
// encoding/json does with HTML escaping off.
func TestAppendString(t *testing.T) {
	t.Parallel()
	var inputs []string
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if r < 0x3000 || r >= 0xd700 && r < 0xe100 || r > utf8.MaxRune-0x100 {
			inputs = append(inputs, string(r))
		}
	}
	for b := 0; b < 256; b++ {
		inputs = append(inputs, string([]byte{byte(b)}), "x"+string([]byte{byte(b)})+"y")
	}
	inputs = append(inputs, trickyStringValues()...)
	for _, s := range inputs {
		want, err := refEncodeJSON(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("appendString(%+q) = %s, want %s", s, got, want)
		}
		if got := appendString(nil, []byte(s)); !bytes.Equal(got, want) {
			t.Errorf("appendString([]byte(%+q)) = %s, want %s", s, got, want)
		}
	}
}

// FuzzCanonicalDetails compares Canonical and CanonicalDetails with the reference on any
// details.
func FuzzCanonicalDetails(f *testing.F) {
	for _, d := range trickyDetails {
		f.Add([]byte(d))
	}
	for _, s := range trickyStrings {
		f.Add([]byte(`{"b":"` + s + `","` + s + `":[1,{"y":2,"x":"` + s + `"}]}`))
	}
	e := Event{Seq: 7, Time: time.Date(2026, 11, 30, 18, 0, 0, 123456789, time.UTC), Principal: "p", Action: "a", Subject: "s"}
	f.Fuzz(func(t *testing.T, details []byte) {
		checkSame(t, e, details)
	})
}

// FuzzCanonical compares Canonical with the reference on any event fields.
func FuzzCanonical(f *testing.F) {
	for i, s := range trickyStringValues() {
		f.Add(uint64(i), int64(i)*1e15+int64(i), s, "holder", "action", s, []byte(`{"a":"`+s+`"}`))
	}
	f.Fuzz(func(t *testing.T, seq uint64, nanos int64, principal, holder, action, subject string, details []byte) {
		e := Event{Seq: seq, Time: time.Unix(0, nanos), Principal: principal, Holder: holder, Action: action, Subject: subject}
		checkSame(t, e, details)
	})
}

// benchmarkEvents are events with the details of each kind a seal meets: none, those the stores
// build (canonical already), encoding/json's (HTML-escaped), and hand-written (spaced, unsorted).
func benchmarkEvents() []Event {
	base := Event{Seq: 123456, Time: time.Date(2026, 11, 30, 18, 0, 0, 123456000, time.UTC), Principal: "ci", Holder: "ci|w1", Action: "job.completed", Subject: "job/job_0123456789"}
	var events []Event
	for _, d := range []string{
		``,
		`{"attestation_digest":"sha256:0123456789abcdef0123456789abcdef","claim":1,"output_digest":"sha256:fedcba9876543210fedcba9876543210"}`,
		`{"kind":"build","max_attempts":5,"nested":{"a":null,"z":1.5},"paths":["src/\u003ca\u003e\u0026b","docs/ü"],"priority":3}`,
		`{"reason": "manual", "requested_by": "alice", "metadata": {"ticket": "OPS-12", "urgent": true}}`,
	} {
		e := base
		if d != "" {
			e.Details = []byte(d)
		}
		events = append(events, e)
	}
	return events
}

// BenchmarkCanonical compares Canonical with the reference on each kind of details.
func BenchmarkCanonical(b *testing.B) {
	for i, e := range benchmarkEvents() {
		for _, impl := range []struct {
			name string
			f    func(Event) ([]byte, error)
		}{{"new", Canonical}, {"ref", refCanonical}} {
			b.Run(fmt.Sprintf("details=%d/%s", i, impl.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := impl.f(e); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestAppendTime ensures appendTime writes what t.UTC().Format(timeLayout) does, across the
// years Format pads, signs or lengthens and in other zones than UTC.
func TestAppendTime(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("", -12*3600-59), time.FixedZone("", 14*3600)}
	times := []time.Time{{}, time.Unix(0, 0), time.Unix(0, -1), time.Unix(1<<62, 999999999), time.Unix(-1<<62, 0)}
	for _, y := range []int{-10000, -1, 0, 1, 999, 1000, 9999, 10000, 292277026596} {
		times = append(times, time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(y, 12, 31, 23, 59, 59, 999999999, time.UTC))
	}
	for range 100000 {
		times = append(times, time.Unix(rng.Int64N(400000000000)-200000000000, rng.Int64N(1e9)))
	}
	for i, tm := range times {
		tm = tm.In(zones[i%len(zones)])
		if got, want := string(appendTime(nil, tm)), tm.UTC().Format(timeLayout); got != want {
			t.Errorf("appendTime(%v) = %s, want %s", tm, got, want)
		}
	}
}

// TestCanonicalRandomDetails compares Canonical with the reference on random details built from
// JSON's pieces, valid and broken: coverage-guided fuzzing, byte by byte, seldom reaches deep
// into nested objects with out-of-order, duplicate or escaped keys.
func TestCanonicalRandomDetails(t *testing.T) {
	t.Parallel()
	n := 20000
	if testing.Short() {
		n = 2000
	}
	rng := rand.New(rand.NewPCG(3, 4))
	strs := append([]string{`a`, `b`, `a`, `c`, `ab`, ``}, trickyStrings...)
	nums := []string{`0`, `-0`, `1`, `1.50`, `1e2`, `-1E-2`, `123456789012345678901234567890`, `01`, `1.`, `-`}
	pieces := []string{" ", "\n", ",", ":", "{", "}", "[", "]", "x", "\x00", "\xff"}
	var gen func(b []byte, depth int) []byte
	gen = func(b []byte, depth int) []byte {
		if rng.IntN(200) == 0 { // something out of place
			b = append(b, pieces[rng.IntN(len(pieces))]...)
		}
		if rng.IntN(8) == 0 {
			b = append(b, ' ')
		}
		k := rng.IntN(10)
		if depth > 4 {
			k = 4 + rng.IntN(6)
		}
		switch k {
		case 0, 1, 2:
			b = append(b, '{')
			for i := range rng.IntN(5) {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, '"')
				b = append(b, strs[rng.IntN(len(strs))]...)
				b = append(b, `":`...)
				b = gen(b, depth+1)
			}
			b = append(b, '}')
		case 3:
			b = append(b, '[')
			for i := range rng.IntN(4) {
				if i > 0 {
					b = append(b, ',')
				}
				b = gen(b, depth+1)
			}
			b = append(b, ']')
		case 4, 5:
			b = append(b, '"')
			b = append(b, strs[rng.IntN(len(strs))]...)
			b = append(b, '"')
		case 6, 7:
			b = append(b, nums[rng.IntN(len(nums))]...)
		case 8:
			b = append(b, [...]string{"true", "false", "null"}[rng.IntN(3)]...)
		default:
			b = append(b, `{}`...)
		}
		return b
	}
	e := Event{Seq: 7, Time: time.Date(2026, 11, 30, 18, 0, 0, 123456789, time.UTC), Principal: "p", Action: "a", Subject: "s"}
	var b []byte
	for range n {
		b = append(gen(append(b[:0], '{', '"', 'k', '"', ':'), 0), '}')
		checkSame(t, e, b)
		if t.Failed() {
			return
		}
	}
}

// TestCanonicalAllocatesOnce ensures Canonical sizes its buffer for the whole event at once,
// as its comment promises and sealing (which runs it for every event) relies on: fields and
// details that need no escaping cost one allocation however long they are.
func TestCanonicalAllocatesOnce(t *testing.T) {
	long := strings.Repeat("x", 40)
	e := Event{
		Seq: 1, Time: time.Date(2026, 11, 30, 18, 0, 0, 123456000, time.UTC),
		Principal: "p" + long, Holder: "h" + long, Action: "a" + long, Subject: "s" + long,
		// Text beyond ASCII, U+FFFD written as itself among it, needs no escaping either.
		Details: []byte(`{"a":"` + long + `","b":[1,2,3],"é€😀":"ü` + "\ufffd" + `"}`),
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := Canonical(e); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 1 {
		t.Errorf("Canonical allocates %v times for an event, want 1", allocs)
	}
}
