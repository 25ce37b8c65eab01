package worker

import (
	"context"
	"crypto/ed25519"
	"fmt"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/attest"
)

// LoadOrCreateKey reads the worker's Ed25519 signing key from path (PKCS#8 PEM), creating it
// (mode 0600) when the file does not exist, writes its public key next to it as path+".pub"
// (PEM PUBLIC KEY, for `ag attestation verify --key` and auditors), and registers the public
// key with the server.
func LoadOrCreateKey(ctx context.Context, c *client.Client, path string) (ed25519.PrivateKey, error) {
	key, err := attest.LoadOrCreatePrivateKey(path)
	if err != nil {
		return nil, err
	}
	pub := key.Public().(ed25519.PublicKey)
	if err := attest.WritePublicKeyPEM(path+".pub", pub); err != nil {
		return nil, err
	}
	if _, err := c.Admin.RegisterWorkerKey(ctx, &agwpv1.RegisterWorkerKeyRequest{PublicKey: pub}); err != nil {
		return nil, fmt.Errorf("register worker key %s: %w", path, err)
	}
	return key, nil
}
