package attestclient

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/ag-coord/ag/internal/attest"
)

// ReadPublicKey reads --key: a file holding a worker's public key (KEYFILE.pub, or the key file
// itself), or else the base64 of the raw key, so that a key pasted from a worker's log works as
// well as its file.
func ReadPublicKey(arg string) (ed25519.PublicKey, error) {
	data, err := os.ReadFile(arg)
	switch {
	case err == nil:
		pub, err := attest.ParsePublicKey(data)
		if err != nil {
			return nil, fmt.Errorf("--key %s: %w", arg, err)
		}
		return pub, nil
	case errors.Is(err, fs.ErrNotExist):
		pub, perr := attest.ParsePublicKey([]byte(arg))
		if perr != nil {
			return nil, fmt.Errorf("--key %s: no such file, and not the base64 of an Ed25519 public key", arg)
		}
		return pub, nil
	}
	return nil, fmt.Errorf("--key: %w", err)
}

// ReadEnvelope reads the attestation file name, or stdin for "-", so that `ag attestation get`
// can be piped into a verification without a file between them.
func ReadEnvelope(stdin io.Reader, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}
