package store_test

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/store"
)

// TestStoredFormsRoundTrip: what EncodeStored keeps, DecodeStored answers as the bytes given;
// text is kept compressed, what does not shrink by an eighth is kept as it is, and a stored
// form that is damaged or of another length than its row says is an error, never other bytes.
func TestStoredFormsRoundTrip(t *testing.T) {
	t.Parallel()
	text := []byte(strings.Repeat("package main // a line of Go\n", 200))
	noise := make([]byte, 4096)
	_, _ = rand.NewChaCha8([32]byte{7}).Read(noise)
	for _, tc := range []struct {
		name    string
		content []byte
		form    int
	}{
		{"text", text, store.StoredZlib},
		{"short", []byte("short"), store.StoredPlain},
		{"empty", []byte{}, store.StoredPlain},
		{"noise", noise, store.StoredPlain},
	} {
		data, form := store.EncodeStored(tc.content)
		if form != tc.form {
			t.Errorf("%s: stored as %d, want %d", tc.name, form, tc.form)
		}
		if form == store.StoredZlib && len(data) >= len(tc.content)*7/8 {
			t.Errorf("%s: compressed to %d of %d bytes", tc.name, len(data), len(tc.content))
		}
		got, err := store.DecodeStored(data, form, int64(len(tc.content)))
		if err != nil || !bytes.Equal(got, tc.content) {
			t.Errorf("%s: read back %d bytes, %v; want its %d", tc.name, len(got), err, len(tc.content))
		}
		if got, err := store.DecodeStored(tc.content, store.StoredUnexamined, -1); err != nil || !bytes.Equal(got, tc.content) {
			t.Errorf("%s: an unexamined row read back %d bytes, %v; want them as they are", tc.name, len(got), err)
		}
	}
	data, _ := store.EncodeStored(text)
	if _, err := store.DecodeStored(data, store.StoredZlib, int64(len(text))+1); err == nil {
		t.Error("a compressed content one byte shorter than its row says read back without an error")
	}
	damaged := bytes.Clone(data)
	damaged[len(damaged)/2] ^= 0xff
	if got, err := store.DecodeStored(damaged, store.StoredZlib, int64(len(text))); err == nil {
		t.Errorf("a damaged compressed content read back as %d bytes without an error", len(got))
	}
	if _, err := store.DecodeStored(text, 7, -1); err == nil {
		t.Error("a row of an unknown form read back without an error")
	}
}
