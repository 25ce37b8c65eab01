package jsontext_test

import (
	"encoding/json"
	"testing"

	"github.com/ag-coord/ag/internal/jsontext"
)

// FuzzAppendStringReadsBackAsEncodingJSON ensures what AppendString writes is one valid JSON
// string that reads back as the string encoding/json writes for the same input (invalid UTF-8
// mended the same way), after whatever the buffer held.
func FuzzAppendStringReadsBackAsEncodingJSON(f *testing.F) {
	for _, s := range []string{"", "plain", "quote \" and \\ back", "\x00\x01\b\f\n\r\t\x1f\x7f", "\u2028\u2029", "café 😀", "\xff\xfe bad", "a\xc3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := jsontext.AppendString([]byte("x"), s)
		if b[0] != 'x' {
			t.Fatalf("AppendString overwrote the buffer: %q", b)
		}
		var got string
		if err := json.Unmarshal(b[1:], &got); err != nil {
			t.Fatalf("AppendString(%q) = %s, not a JSON string: %v", s, b[1:], err)
		}
		want, _ := json.Marshal(s)
		var wantS string
		if err := json.Unmarshal(want, &wantS); err != nil {
			t.Fatal(err)
		}
		if got != wantS {
			t.Fatalf("AppendString(%q) reads back as %q, encoding/json's as %q", s, got, wantS)
		}
	})
}
