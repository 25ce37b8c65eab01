package structjson

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

func sample(t testing.TB) *structpb.Struct {
	s, err := structpb.NewStruct(map[string]any{
		"ms": 0, "name": "a \"quoted\" \\ line\n\ttab \x01 é ✓ </script>", "tiny": 1e-9, "huge": 3e25,
		"neg": -12.5, "int": 42, "flag": true, "none": nil, "empty": map[string]any{}, "list": []any{1, "two", false, nil, []any{}, map[string]any{"k": "v"}},
		"nested": map[string]any{"b": map[string]any{"c": []any{1.5, -0.0}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRoundTripsAsProtojsonReadsIt ensures that what Marshal writes is JSON protojson decodes to
// the same Struct, and that Unmarshal reads protojson's JSON to the same Struct.
func TestRoundTripsAsProtojsonReadsIt(t *testing.T) {
	s := sample(t)
	b, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	back := &structpb.Struct{}
	if err := protojson.Unmarshal(b, back); err != nil {
		t.Fatalf("protojson cannot read %s: %v", b, err)
	}
	if !proto.Equal(s, back) {
		t.Fatalf("protojson read %s as %v, want %v", b, back, s)
	}
	pj, err := protojson.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := Unmarshal(pj)
	if err != nil {
		t.Fatalf("Unmarshal(%s): %v", pj, err)
	}
	if !proto.Equal(s, ours) {
		t.Fatalf("Unmarshal read %s as %v, want %v", pj, ours, s)
	}
}

// TestKeysAreSorted ensures the same Struct always encodes to the same bytes.
func TestKeysAreSorted(t *testing.T) {
	b, err := Marshal(sample(t))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, _ := Marshal(sample(t))
		if string(again) != string(b) {
			t.Fatalf("encoded %s, then %s", b, again)
		}
	}
	if !strings.HasPrefix(string(b), `{"empty":{},"flag":true,"huge":3e+25,"int":42,"list":[1,"two",false,null,[],{"k":"v"}]`) {
		t.Fatalf("encoded %s", b)
	}
}

// TestRefusesWhatProtojsonRefuses ensures values JSON cannot carry are refused, as protojson
// refuses them, rather than written as JSON no one can read.
func TestRefusesWhatProtojsonRefuses(t *testing.T) {
	for name, v := range map[string]*structpb.Value{
		"NaN":           structpb.NewNumberValue(math.NaN()),
		"infinity":      structpb.NewNumberValue(math.Inf(-1)),
		"invalid UTF-8": structpb.NewStringValue("\xff"),
		"no kind":       {},
	} {
		s := &structpb.Struct{Fields: map[string]*structpb.Value{"k": v}}
		if _, err := protojson.Marshal(s); err == nil {
			t.Fatalf("%s: protojson encodes it; the test's premise is wrong", name)
		}
		if b, err := Marshal(s); err == nil {
			t.Fatalf("%s: encoded as %s", name, b)
		}
	}
	if _, err := Unmarshal([]byte(`[1]`)); err == nil {
		t.Fatal("a JSON list was read as a Struct")
	}
	if _, err := Unmarshal([]byte(`null`)); err == nil {
		t.Fatal("JSON null was read as a Struct")
	}
}

// FuzzMatchesProtojson ensures that for any JSON object protojson accepts, Marshal of its Struct
// decodes back to the same Struct, and Unmarshal reads it as protojson does.
func FuzzMatchesProtojson(f *testing.F) {
	f.Add(`{"a":1,"b":[true,null,"x"],"c":{"d":-1.5e-8}}`)
	f.Add(`{"s":"\u0000\u001f\"\\ é"}`)
	f.Fuzz(func(t *testing.T, in string) {
		want := &structpb.Struct{}
		if protojson.Unmarshal([]byte(in), want) != nil {
			return
		}
		b, err := Marshal(want)
		if err != nil {
			t.Fatalf("Marshal(%v): %v", want, err)
		}
		back := &structpb.Struct{}
		if err := protojson.Unmarshal(b, back); err != nil || !proto.Equal(want, back) {
			t.Fatalf("%s encoded as %s, which protojson reads as %v (%v)", in, b, back, err)
		}
		got, err := Unmarshal([]byte(in))
		if err != nil || !proto.Equal(want, got) {
			t.Fatalf("Unmarshal(%s) = %v, %v; protojson reads %v", in, got, err, want)
		}
	})
}

func BenchmarkMarshal(b *testing.B) {
	s := sample(b)
	b.Run("structjson", func(b *testing.B) {
		for b.Loop() {
			_, _ = Marshal(s)
		}
	})
	b.Run("protojson", func(b *testing.B) {
		for b.Loop() {
			_, _ = protojson.Marshal(s)
		}
	})
}

func BenchmarkUnmarshal(b *testing.B) {
	in, _ := Marshal(sample(b))
	b.Run("structjson", func(b *testing.B) {
		for b.Loop() {
			_, _ = Unmarshal(in)
		}
	})
	b.Run("protojson", func(b *testing.B) {
		for b.Loop() {
			_ = protojson.Unmarshal(in, &structpb.Struct{})
		}
	})
}
