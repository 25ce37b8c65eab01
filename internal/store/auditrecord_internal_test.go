package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// randomRecord writes a record of events with fields chosen by rng: plain strings, non-ASCII
// text and, unless plain, strings to escape; no details, flat and nested details with escapes
// and number forms.
func randomRecord(rng *rand.Rand, plain bool) []byte {
	words := []string{"alice", "bob|w1", "", "job/job_9x2k", "é ü 日本", "<&>", "\u2028", "ok"}
	if !plain {
		words = append(words, "a\"b", "back\\slash", "new\nline", "tab\t")
	}
	details := [][]byte{nil, []byte(`{}`), []byte(`{"claim":1,"output_digest":"sha256:0"}`),
		[]byte(`{ "n" : 1e2, "s": "a\u00e9\"}" }`), []byte(`{"paths":["src/","a]b"],"v":{"x":[1,{"y":null}]},"z":-0.5}`),
		[]byte(`{"q":"\\\"{["}`), []byte(`not json`), []byte(`"a string"`)}
	var b AuditRecordBuilder
	for range 1 + rng.IntN(5) {
		pick := func() string { return words[rng.IntN(len(words))] }
		b.Add(rng.Int64N(4e15)-1e15, Actor{Principal: pick(), Holder: pick()}, pick(), pick(), details[rng.IntN(len(details))])
	}
	return []byte(b.Text())
}

// TestRecordDecodersAgree ensures that the decoder of records as written answers exactly what
// encoding/json answers whenever it answers at all, and answers for records without escapes.
func TestRecordDecodersAgree(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	fast := 0
	for i := range 20000 {
		text := randomRecord(rng, i%2 == 0)
		want, err := decodeRecordJSON(int64(i), text)
		if err != nil {
			t.Fatalf("encoding/json cannot read a builder's record %s: %v", text, err)
		}
		got, ok := appendRecordAsWritten(nil, int64(i), text)
		if !ok {
			if !bytes.ContainsAny(text, "\\") && !bytes.Contains(text, []byte(`"d":"`)) {
				t.Fatalf("a record without escapes or string details was not read as written: %s", text)
			}
			continue
		}
		fast++
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("record %s:\n  as written %+v\n  encoding/json %+v", text, got, want)
		}
	}
	if fast < 4000 {
		t.Fatalf("only %d of 20000 records were read as written", fast)
	}
}

// FuzzRecordDecoders checks that on any text, the decoder of records as written either declines
// or agrees with encoding/json.
func FuzzRecordDecoders(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		f.Add(randomRecord(rng, false))
		f.Add(randomRecord(rng, true))
	}
	f.Add([]byte(`[{"t":1,"p":"","h":"","a":"","s":"","d":{"a":[}]}]`))
	f.Add([]byte(`[{"t":-1234567890123456789,"p":"x","h":"","a":"","s":""}]`))
	f.Fuzz(func(t *testing.T, text []byte) {
		got, ok := appendRecordAsWritten(nil, 7, text)
		if !ok {
			return
		}
		want, err := decodeRecordJSON(7, text)
		if err != nil {
			// Details that only nest correctly pass as written; the canonical form refuses them.
			for _, e := range got {
				if e.Details != nil && !jsonValid(e.Details) {
					return
				}
			}
			t.Fatalf("read as written %+v, but encoding/json refuses %q: %v", got, text, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n  as written %+v\n  encoding/json %+v", text, got, want)
		}
	})
}

// BenchmarkDecodeAuditRecord measures reading a record of 32 completions, as a batch of
// CompleteJobs writes it.
func BenchmarkDecodeAuditRecord(b *testing.B) {
	var r AuditRecordBuilder
	for i := range 32 {
		r.Add(time.Now().UnixMicro(), Actor{Principal: "bench", Holder: "bench|bench-3"}, "job.completed",
			fmt.Sprintf("job/job_%026d", i), []byte(`{"claim":1,"output_digest":"sha256:0123456789abcdef"}`))
	}
	text := []byte(r.Text())
	for _, d := range []struct {
		name   string
		decode func(int64, []byte) ([]AuditEvent, error)
	}{{"as_written", DecodeAuditRecord}, {"encoding_json", decodeRecordJSON}} {
		b.Run(d.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := d.decode(1, text); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*32), "ns/event")
		})
	}
}

func jsonValid(b []byte) bool { return json.Valid(b) }
