package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"github.com/ag-coord/ag/internal/secretfile"
)

// Signer signs the audit log's checkpoints with a note signer key (Ed25519).
type Signer struct {
	signer      note.Signer
	verifierKey string
}

// LoadOrCreateKey reads the note signer key ("PRIVATE+KEY+<name>+<hash>+<key>") at path,
// creating it for origin when the file does not exist: mode 0600 (its directory 0700), and it
// appears with its whole content or not at all, so that of two processes starting at once on
// the same path the loser reads the winner's key. It (re)writes path+".pub" with the verifier
// key when that file is missing or holds another key. An existing key keeps its own name: origin
// only names a new one.
func LoadOrCreateKey(path, origin string) (*Signer, error) {
	s, err := readKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := createKey(path, origin); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		s, err = readKey(path)
	}
	if err != nil {
		return nil, err
	}
	if err := writePublicKey(path+".pub", s.verifierKey); err != nil {
		return nil, err
	}
	return s, nil
}

// NewSigner answers the signer of a note signer key string.
func NewSigner(skey string) (*Signer, error) {
	skey = strings.TrimSpace(skey)
	ns, err := note.NewSigner(skey)
	if err != nil {
		return nil, fmt.Errorf("not a note signer key (PRIVATE+KEY+<name>+<hash>+<key>): %w", err)
	}
	// note.NewSigner checked the form: PRIVATE+KEY+<name>+<hash>+<base64 of the algorithm
	// byte and the seed>, whose base64 may hold '+' too.
	raw, err := base64.StdEncoding.DecodeString(strings.SplitN(skey, "+", 5)[4])
	if err != nil || len(raw) != 1+ed25519.SeedSize {
		return nil, errors.New("not an Ed25519 note signer key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	vkey, err := note.NewEd25519VerifierKey(ns.Name(), pub)
	if err != nil {
		return nil, err
	}
	return &Signer{signer: ns, verifierKey: vkey}, nil
}

func readKey(path string) (*Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := NewSigner(string(data))
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	return s, nil
}

// createKey writes a new key to a temporary file and links it into place, which fails with
// fs.ErrExist (as O_EXCL would) when someone else created the key first.
func createKey(path, origin string) error {
	skey, _, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		return err
	}
	if _, err := note.NewSigner(skey); err != nil {
		return fmt.Errorf("origin %q: not a valid key name (non-empty, without spaces or '+')", origin)
	}
	return secretfile.Create(path, []byte(skey+"\n"))
}

// writePublicKey writes the verifier key to path unless it holds it already, replacing the file
// atomically.
func writePublicKey(path, vkey string) error {
	want := []byte(vkey + "\n")
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, want) {
		return nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".audit-key-pub-*")
	if err != nil {
		return fmt.Errorf("write verifier key %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("write verifier key %s: %w", path, err)
	}
	if _, err := f.Write(want); err != nil {
		f.Close()
		return fmt.Errorf("write verifier key %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write verifier key %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write verifier key %s: %w", path, err)
	}
	return nil
}

// VerifierKey answers the verifier key ("<name>+<hash>+<key>") that checkpoints verify with.
func (s *Signer) VerifierKey() string { return s.verifierKey }

// Origin answers the key's name, which is the origin line of its checkpoints.
func (s *Signer) Origin() string { return s.signer.Name() }

// KeyID answers "<name>+<8 hex digits of the key hash>", as in a note's signature line.
func (s *Signer) KeyID() string { return keyID(s.signer.Name(), s.signer.KeyHash()) }

func keyID(name string, hash uint32) string { return fmt.Sprintf("%s+%08x", name, hash) }

// KeyIDOf answers the key id ("<name>+<hash>") of a verifier key string.
func KeyIDOf(verifierKey string) (string, error) {
	v, err := note.NewVerifier(strings.TrimSpace(verifierKey))
	if err != nil {
		return "", fmt.Errorf("not a note verifier key (<name>+<hash>+<key>): %w", err)
	}
	return keyID(v.Name(), v.KeyHash()), nil
}
