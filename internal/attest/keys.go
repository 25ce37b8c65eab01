package attest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ag-coord/ag/internal/secretfile"
)

// LoadOrCreatePrivateKey reads an Ed25519 private key from path (PEM "PRIVATE KEY", PKCS#8),
// creating it with mode 0600 (and its directory with 0700) when the file does not exist. Two
// processes that start at once on the same path end up with the same key: the file appears
// with its whole content or not at all.
func LoadOrCreatePrivateKey(path string) (ed25519.PrivateKey, error) {
	key, err := readPrivateKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := createPrivateKey(path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	return readPrivateKey(path)
}

func readPrivateKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	return key, nil
}

// createPrivateKey writes a new key to a temporary file and links it into place, which fails
// with fs.ErrExist when someone else created the key first.
func createPrivateKey(path string) error {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return secretfile.Create(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

// ParsePrivateKey reads an Ed25519 private key in PEM "PRIVATE KEY" (PKCS#8) form.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PEM PRIVATE KEY (PKCS#8)")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an Ed25519 key", k)
	}
	return key, nil
}

// ParsePublicKey reads an Ed25519 public key from any form an operator may hand over: PEM
// "PUBLIC KEY" (PKIX, as MarshalPublicKeyPEM writes it), PEM "PRIVATE KEY" (PKCS#8; the public
// key is derived from it), or the standard base64 of the raw 32-byte key.
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	if block, _ := pem.Decode(data); block != nil {
		switch block.Type {
		case "PUBLIC KEY":
			k, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("PEM PUBLIC KEY: %w", err)
			}
			pub, ok := k.(ed25519.PublicKey)
			if !ok {
				return nil, fmt.Errorf("PEM PUBLIC KEY: a %T, not an Ed25519 key", k)
			}
			return pub, nil
		case "PRIVATE KEY":
			key, err := ParsePrivateKey(data)
			if err != nil {
				return nil, fmt.Errorf("PEM PRIVATE KEY: %w", err)
			}
			return key.Public().(ed25519.PublicKey), nil
		default:
			return nil, fmt.Errorf("a PEM %q block: want PUBLIC KEY or PRIVATE KEY", block.Type)
		}
	}
	text := strings.TrimSpace(string(data))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		raw, err := enc.DecodeString(text)
		if err != nil {
			continue
		}
		if len(raw) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("base64 of %d bytes: an Ed25519 public key is %d", len(raw), ed25519.PublicKeySize)
		}
		return ed25519.PublicKey(raw), nil
	}
	return nil, errors.New("not an Ed25519 public key: want PEM PUBLIC KEY, PEM PRIVATE KEY, or the base64 of the raw 32 bytes")
}

// MarshalPublicKeyPEM answers pub as PEM "PUBLIC KEY" (PKIX), the form to hand to auditors.
func MarshalPublicKeyPEM(pub ed25519.PublicKey) ([]byte, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("an Ed25519 public key is %d bytes, not %d", ed25519.PublicKeySize, len(pub))
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// WritePublicKeyPEM writes pub as PEM "PUBLIC KEY" to path (mode 0644), replacing the file
// atomically, and leaves a file that already holds exactly that content alone.
func WritePublicKeyPEM(path string, pub ed25519.PublicKey) error {
	data, err := MarshalPublicKeyPEM(pub)
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".pub-*")
	if err != nil {
		return fmt.Errorf("write public key %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write public key %s: %w", path, err)
	}
	return nil
}
