// Package structjson encodes google.protobuf.Struct values as JSON and decodes them back, as
// protojson does for that one message, at a fraction of its cost: ag serve encodes the payload
// and result of every job that comes in and decodes the payload of every job it hands out, and
// protojson's reflection was an eighth of the server's CPU in a drain of jobs.
package structjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/internal/jsontext"
)

// Marshal answers s as a JSON object, its keys sorted. Like protojson it refuses numbers that
// JSON cannot hold (NaN, infinities), strings that are not UTF-8 and values of no kind.
func Marshal(s *structpb.Struct) ([]byte, error) {
	return appendStruct(make([]byte, 0, 64), s)
}

// Unmarshal decodes a JSON object into a Struct.
func Unmarshal(b []byte) (*structpb.Struct, error) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("structjson: not a JSON object")
	}
	return structpb.NewStruct(m)
}

func appendStruct(b []byte, s *structpb.Struct) ([]byte, error) {
	fields := s.GetFields()
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	var err error
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendString(b, k); err != nil {
			return nil, err
		}
		b = append(b, ':')
		if b, err = appendValue(b, fields[k]); err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
	}
	return append(b, '}'), nil
}

func appendValue(b []byte, v *structpb.Value) ([]byte, error) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return append(b, "null"...), nil
	case *structpb.Value_BoolValue:
		return strconv.AppendBool(b, k.BoolValue), nil
	case *structpb.Value_NumberValue:
		return appendNumber(b, k.NumberValue)
	case *structpb.Value_StringValue:
		return appendString(b, k.StringValue)
	case *structpb.Value_StructValue:
		return appendStruct(b, k.StructValue)
	case *structpb.Value_ListValue:
		b = append(b, '[')
		var err error
		for i, e := range k.ListValue.GetValues() {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendValue(b, e); err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return append(b, ']'), nil
	}
	return nil, errors.New("a value of no kind")
}

// appendNumber writes f as encoding/json does: shortest form, exponents only for very small
// and very large magnitudes.
func appendNumber(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("the number %v has no JSON form", f)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-07 to e-7, as JSON writers do.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

// appendString writes s as a JSON string, as the stores write audit details; s must be UTF-8,
// which jsontext.AppendString would otherwise mend rather than refuse.
func appendString(b []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return nil, errors.New("a string that is not UTF-8")
	}
	return jsontext.AppendString(b, s), nil
}
