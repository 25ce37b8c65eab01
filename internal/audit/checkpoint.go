package audit

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Checkpoint is what a checkpoint note states: the log named Origin has Size sealed events
// whose Merkle tree hash is Root and whose last event's hash is Head.
type Checkpoint struct {
	Origin string
	Size   uint64
	Root   tlog.Hash
	Head   []byte
}

// ErrSignature is wrapped by OpenCheckpoint's errors when the note does not verify with the
// key: another key signed it, or the note was changed.
var ErrSignature = errors.New("checkpoint signature does not verify")

// FormatCheckpoint answers the text of c's note (docs/audit.md), which the signature covers:
//
//	<origin>
//	<size>
//	<base64 Merkle root>
//	head <base64 hash of event <size>>
func FormatCheckpoint(c Checkpoint) []byte {
	return fmt.Appendf(nil, "%s\n%d\n%s\nhead %s\n", c.Origin, c.Size,
		base64.StdEncoding.EncodeToString(c.Root[:]), base64.StdEncoding.EncodeToString(c.Head))
}

// ParseCheckpoint reads a checkpoint's text strictly: exactly the four lines FormatCheckpoint
// writes, a size of at least 1 in canonical decimal, hashes of 32 bytes in canonical base64.
// It checks no signature: see OpenCheckpoint.
func ParseCheckpoint(text []byte) (Checkpoint, error) {
	bad := func(format string, args ...any) (Checkpoint, error) {
		return Checkpoint{}, fmt.Errorf("malformed checkpoint: "+format, args...)
	}
	if !bytes.HasSuffix(text, []byte("\n")) {
		return bad("the text does not end in a newline")
	}
	lines := strings.Split(string(text[:len(text)-1]), "\n")
	if len(lines) != 4 {
		return bad("%d lines, want 4 (origin, size, root hash, head hash)", len(lines))
	}
	var c Checkpoint
	c.Origin = lines[0]
	if c.Origin == "" || strings.ContainsFunc(c.Origin, func(r rune) bool { return r < 0x20 }) {
		return bad("origin %q", c.Origin)
	}
	size, err := strconv.ParseUint(lines[1], 10, 63)
	if err != nil || size == 0 || lines[1] != strconv.FormatUint(size, 10) {
		return bad("size %q: want a decimal number of events, at least 1", lines[1])
	}
	c.Size = size
	root, err := decodeHash(lines[2])
	if err != nil {
		return bad("root hash %q: %v", lines[2], err)
	}
	copy(c.Root[:], root)
	head, ok := strings.CutPrefix(lines[3], "head ")
	if !ok {
		return bad("fourth line %q: want \"head <base64 hash>\"", lines[3])
	}
	if c.Head, err = decodeHash(head); err != nil {
		return bad("head hash %q: %v", head, err)
	}
	return c, nil
}

func decodeHash(s string) ([]byte, error) {
	h, err := base64.StdEncoding.DecodeString(s)
	switch {
	case err != nil:
		return nil, errors.New("not base64")
	case len(h) != HashSize:
		return nil, fmt.Errorf("%d bytes, want %d", len(h), HashSize)
	case base64.StdEncoding.EncodeToString(h) != s:
		return nil, errors.New("not canonical base64")
	}
	return h, nil
}

// SignCheckpoint answers c's signed note. c.Origin may be empty (the key's name); any other
// origin than the key's name is an error.
func (s *Signer) SignCheckpoint(c Checkpoint) ([]byte, error) {
	if c.Origin == "" {
		c.Origin = s.Origin()
	}
	if c.Origin != s.Origin() {
		return nil, fmt.Errorf("checkpoint of origin %q signed by key %s: the origin is the key's name", c.Origin, s.KeyID())
	}
	if c.Size == 0 || len(c.Head) != HashSize {
		return nil, fmt.Errorf("checkpoint of %d events with a head of %d bytes", c.Size, len(c.Head))
	}
	return note.Sign(&note.Note{Text: string(FormatCheckpoint(c))}, s.signer)
}

// OpenCheckpoint verifies a checkpoint note's signature with verifierKey and parses its text
// strictly; its origin must be the key's name. A note that the key did not sign (or that was
// changed after signing) is refused with an error wrapping ErrSignature that names the keys.
func OpenCheckpoint(msg []byte, verifierKey string) (Checkpoint, error) {
	v, err := note.NewVerifier(strings.TrimSpace(verifierKey))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("not a note verifier key (<name>+<hash>+<key>): %w", err)
	}
	want := keyID(v.Name(), v.KeyHash())
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		var unverified *note.UnverifiedNoteError
		var invalid *note.InvalidSignatureError
		switch {
		case errors.As(err, &unverified):
			var by []string
			for _, sig := range unverified.Note.UnverifiedSigs {
				by = append(by, keyID(sig.Name, sig.Hash))
			}
			return Checkpoint{}, fmt.Errorf("%w: the checkpoint is signed by %s, not by key %s", ErrSignature, strings.Join(by, ", "), want)
		case errors.As(err, &invalid):
			return Checkpoint{}, fmt.Errorf("%w: the signature of key %s does not match the checkpoint's text: the checkpoint was changed", ErrSignature, want)
		}
		return Checkpoint{}, fmt.Errorf("checkpoint note: %w", err)
	}
	c, err := ParseCheckpoint([]byte(n.Text))
	if err != nil {
		return Checkpoint{}, err
	}
	if c.Origin != v.Name() {
		return Checkpoint{}, fmt.Errorf("checkpoint of origin %q signed by key %s: the origin must be the key's name", c.Origin, want)
	}
	return c, nil
}

// NoteSignature answers the first signature of a signed note, without verifying it: the id of
// its key ("<name>+<8 hex digits>") and the signature bytes.
func NoteSignature(msg []byte) (id string, sig []byte, err error) {
	_, err = note.Open(msg, note.VerifierList())
	var unverified *note.UnverifiedNoteError
	if !errors.As(err, &unverified) || len(unverified.Note.UnverifiedSigs) == 0 {
		return "", nil, fmt.Errorf("checkpoint note: no signature: %v", err)
	}
	s := unverified.Note.UnverifiedSigs[0]
	raw, err := base64.StdEncoding.DecodeString(s.Base64)
	if err != nil || len(raw) <= 4 {
		return "", nil, fmt.Errorf("checkpoint note: malformed signature of %s", s.Name)
	}
	// The signature's first four bytes are the key hash, which keyID names.
	return keyID(s.Name, s.Hash), raw[4:], nil
}
