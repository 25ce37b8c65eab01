// Package attest signs and verifies the DSSE envelopes that workers attach to completed jobs.
// Keys are Ed25519; ag names a key by "sha256:" and the hex sha256 of its raw 32-byte public key
// (KeyID), but its envelopes carry no key id (see Signer.KeyID).
package attest

import (
	"context"
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

// KeyID answers ag's id of an Ed25519 public key: the id the server registers it under and
// that `ag attestation verify` prints. Envelopes signed before ag left key ids out of them
// carry it as their signature's key id; Verify accepts them as it accepts the new ones.
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

// KeyID implements dsse.Signer: it answers "", so signatures carry an empty key id. DSSE
// makes the key id an optional, unauthenticated hint, and verifiers try a signature without
// one against every key they hold. A non-empty id would have to match the verifier's own
// computation, and go-securesystemslib alone has two (signerverifier.LoadKey's hash of the
// securesystemslib key, and dsse.SHA256KeyID's SSH fingerprint for verifiers without one), so
// no single id is accepted by every verifier built from the worker's public key PEM; an empty
// one is (docs/validation.md).
func (s *Signer) KeyID() (string, error) { return "", nil }

// SignEnvelope signs payload of payloadType into a DSSE envelope.
func (s *Signer) SignEnvelope(ctx context.Context, payloadType string, payload []byte) (*dsse.Envelope, error) {
	es, err := dsse.NewEnvelopeSigner(s)
	if err != nil {
		return nil, err
	}
	return es.SignPayload(ctx, payloadType, payload)
}

// ErrNotVerified: no signature of the envelope verifies with any of the keys given.
var ErrNotVerified = errors.New("attestation signature does not verify")

// Verify checks that env carries a valid signature by one of keys (raw Ed25519 public keys) and
// answers ag's id (KeyID) of the key that verified. A signature's key id is a hint that
// nothing authenticates, so it is not read: every key is tried on every signature, and
// envelopes with an empty key id (as workers sign them now), with KeyID of the signing key (as
// they signed them before) or with any other verify alike.
func Verify(_ context.Context, env *dsse.Envelope, keys [][]byte) (string, error) {
	if len(keys) == 0 {
		return "", fmt.Errorf("%w: the signer has registered no key (RegisterWorkerKey)", ErrNotVerified)
	}
	if env == nil || len(env.Signatures) == 0 {
		return "", fmt.Errorf("%w: the envelope has no signature", ErrNotVerified)
	}
	payload, err := env.DecodeB64Payload()
	if err != nil {
		return "", fmt.Errorf("%w: payload: %v", ErrNotVerified, err)
	}
	pae := dsse.PAE(env.PayloadType, payload)
	for _, s := range env.Signatures {
		sig, err := decodeB64(s.Sig)
		if err != nil || len(sig) != ed25519.SignatureSize {
			continue
		}
		for _, k := range keys {
			if len(k) == ed25519.PublicKeySize && ed25519.Verify(ed25519.PublicKey(k), pae, sig) {
				return KeyID(ed25519.PublicKey(k)), nil
			}
		}
	}
	return "", fmt.Errorf("%w with any key registered by the signer", ErrNotVerified)
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
