// Package attest signs and verifies the DSSE envelopes that workers attach to completed jobs.
// Keys are Ed25519; a key's id is "sha256:" and the hex sha256 of the raw 32-byte public key.
package attest

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// PayloadTypeInToto is the DSSE payload type of an in-toto Statement.
const PayloadTypeInToto = "application/vnd.in-toto+json"

// KeyID answers the id of an Ed25519 public key.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Signer signs DSSE envelopes with an Ed25519 private key.
type Signer struct {
	key ed25519.PrivateKey
}

// NewSigner wraps an Ed25519 private key.
func NewSigner(key ed25519.PrivateKey) *Signer { return &Signer{key: key} }

// Sign implements dsse.Signer; data is the pre-authentication encoding.
func (s *Signer) Sign(_ context.Context, data []byte) ([]byte, error) {
	return ed25519.Sign(s.key, data), nil
}

// KeyID implements dsse.Signer.
func (s *Signer) KeyID() (string, error) {
	return KeyID(s.key.Public().(ed25519.PublicKey)), nil
}

// SignEnvelope signs payload of payloadType into a DSSE envelope.
func (s *Signer) SignEnvelope(ctx context.Context, payloadType string, payload []byte) (*dsse.Envelope, error) {
	es, err := dsse.NewEnvelopeSigner(s)
	if err != nil {
		return nil, err
	}
	return es.SignPayload(ctx, payloadType, payload)
}

type verifier struct {
	pub ed25519.PublicKey
}

func (v verifier) Verify(_ context.Context, data, sig []byte) error {
	if !ed25519.Verify(v.pub, data, sig) {
		return errors.New("ed25519 signature does not verify")
	}
	return nil
}

func (v verifier) KeyID() (string, error)   { return KeyID(v.pub), nil }
func (v verifier) Public() crypto.PublicKey { return v.pub }

// ErrNotVerified: no signature of the envelope verifies with any of the keys given.
var ErrNotVerified = errors.New("attestation signature does not verify")

// Verify checks that env carries a valid signature by one of keys (raw Ed25519 public keys) and
// answers the id of the key that verified.
func Verify(ctx context.Context, env *dsse.Envelope, keys [][]byte) (string, error) {
	if len(keys) == 0 {
		return "", fmt.Errorf("%w: the signer has registered no key (RegisterWorkerKey)", ErrNotVerified)
	}
	var vs []dsse.Verifier
	for _, k := range keys {
		if len(k) != ed25519.PublicKeySize {
			continue
		}
		vs = append(vs, verifier{pub: ed25519.PublicKey(k)})
	}
	ev, err := dsse.NewMultiEnvelopeVerifier(1, vs...)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNotVerified, err)
	}
	accepted, err := ev.Verify(ctx, env)
	if err != nil || len(accepted) == 0 {
		return "", fmt.Errorf("%w with any key registered by the signer", ErrNotVerified)
	}
	return accepted[0].KeyID, nil
}

// FromProto converts the wire envelope to the DSSE library's form.
func FromProto(e *agwpv1.Envelope) *dsse.Envelope {
	env := &dsse.Envelope{PayloadType: e.GetPayloadType(), Payload: dsseB64(e.GetPayload())}
	for _, s := range e.GetSignatures() {
		env.Signatures = append(env.Signatures, dsse.Signature{KeyID: s.GetKeyid(), Sig: dsseB64(s.GetSig())})
	}
	return env
}

// ToProto converts a DSSE envelope to the wire form.
func ToProto(env *dsse.Envelope) (*agwpv1.Envelope, error) {
	payload, err := env.DecodeB64Payload()
	if err != nil {
		return nil, fmt.Errorf("decode envelope payload: %w", err)
	}
	out := &agwpv1.Envelope{PayloadType: env.PayloadType, Payload: payload}
	for _, s := range env.Signatures {
		sig, err := decodeB64(s.Sig)
		if err != nil {
			return nil, fmt.Errorf("decode envelope signature: %w", err)
		}
		out.Signatures = append(out.Signatures, &agwpv1.EnvelopeSignature{Keyid: s.KeyID, Sig: sig})
	}
	return out, nil
}

// Encode answers the stored form of an envelope, its DSSE JSON, and its digest.
func Encode(env *dsse.Envelope) (data []byte, digest string, err error) {
	data, err = json.Marshal(env)
	if err != nil {
		return nil, "", fmt.Errorf("encode envelope: %w", err)
	}
	sum := sha256.Sum256(data)
	return data, "sha256:" + hex.EncodeToString(sum[:]), nil
}
