package attest_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ag-coord/ag/internal/attest"
)

// TestLoadOrCreatePrivateKey ensures a missing key is created with mode 0600 and read back the
// same afterwards, also when several callers race to create it.
func TestLoadOrCreatePrivateKey(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sub", "worker.key")
	keys := make([]ed25519.PrivateKey, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := attest.LoadOrCreatePrivateKey(path)
			if err != nil {
				t.Errorf("LoadOrCreatePrivateKey: %v", err)
			}
			keys[i] = k
		}()
	}
	wg.Wait()
	for i, k := range keys {
		if !k.Equal(keys[0]) {
			t.Fatalf("caller %d got another key than caller 0", i)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("key file mode = %v, want 0600", got)
	}
	again, err := attest.LoadOrCreatePrivateKey(path)
	if err != nil || !again.Equal(keys[0]) {
		t.Errorf("loading again: %v, same key %v", err, again.Equal(keys[0]))
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("the key directory holds %d files, want only the key (no temporary files left)", len(entries))
	}

	if err := os.WriteFile(path, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := attest.LoadOrCreatePrivateKey(path); err == nil {
		t.Error("a file that is no key was accepted")
	}
}

// TestParsePublicKey ensures the public key is read from the .pub file, the private key file
// and the base64 of the raw key alike, and that anything else is refused.
func TestParsePublicKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "k.key")
	priv, err := attest.LoadOrCreatePrivateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	want := priv.Public().(ed25519.PublicKey)
	pubPEM, err := attest.MarshalPublicKeyPEM(want)
	if err != nil {
		t.Fatal(err)
	}
	if err := attest.WritePublicKeyPEM(keyPath+".pub", want); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(keyPath + ".pub")
	if err != nil || !bytes.Equal(written, pubPEM) {
		t.Fatalf("the .pub file = %q, %v; want %q", written, err, pubPEM)
	}
	privPEM, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"PEM PUBLIC KEY":  pubPEM,
		"PEM PRIVATE KEY": privPEM,
		"base64":          []byte(base64.StdEncoding.EncodeToString(want) + "\n"),
		"raw base64":      []byte(base64.RawStdEncoding.EncodeToString(want)),
	} {
		got, err := attest.ParsePublicKey(data)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !got.Equal(want) {
			t.Errorf("%s: another key", name)
		}
	}
	for name, data := range map[string][]byte{
		"empty":          nil,
		"garbage":        []byte("hello, world"),
		"short base64":   []byte(base64.StdEncoding.EncodeToString(want[:16])),
		"other PEM type": []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
	} {
		if _, err := attest.ParsePublicKey(data); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestWritePublicKeyPEM ensures the .pub file auditors are handed is readable by them
// (0644, where the private key is 0600), replaces a file holding another key, and leaves a file
// that already holds this key as it is: a worker writes it at every start.
func TestWritePublicKeyPEM(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "w.key.pub")
	oldPriv, err := attest.LoadOrCreatePrivateKey(filepath.Join(dir, "old.key"))
	if err != nil {
		t.Fatal(err)
	}
	priv, err := attest.LoadOrCreatePrivateKey(filepath.Join(dir, "w.key"))
	if err != nil {
		t.Fatal(err)
	}
	pub := priv.Public().(ed25519.PublicKey)

	if err := attest.WritePublicKeyPEM(path, oldPriv.Public().(ed25519.PublicKey)); err != nil {
		t.Fatal(err)
	}
	if err := attest.WritePublicKeyPEM(path, pub); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := attest.ParsePublicKey(data); err != nil || !got.Equal(pub) {
		t.Fatalf("the .pub file holds %x (%v), want the new key %x", got, err, pub)
	}
	written, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := written.Mode().Perm(); got != 0o644 {
		t.Errorf(".pub file mode = %v, want 0644", got)
	}

	if err := attest.WritePublicKeyPEM(path, pub); err != nil {
		t.Fatal(err)
	}
	again, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(written, again) {
		t.Error("writing the key a file already holds replaced the file")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Errorf("the directory holds %d files, want the two keys and the .pub (no temporary files left)", len(entries))
	}
}
