package attest_test

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/secure-systems-lab/go-securesystemslib/signerverifier"

	"github.com/ag-coord/ag/internal/attest"
)

// fingerprintVerifier is a dsse.Verifier as a third party writes one with no key id of its
// own: the DSSE library then names the key by its SSH fingerprint (dsse.SHA256KeyID).
type fingerprintVerifier struct{ pub ed25519.PublicKey }

func (v fingerprintVerifier) Verify(_ context.Context, data, sig []byte) error {
	if !ed25519.Verify(v.pub, data, sig) {
		return errors.New("bad signature")
	}
	return nil
}
func (v fingerprintVerifier) KeyID() (string, error)   { return dsse.SHA256KeyID(v.pub) }
func (v fingerprintVerifier) Public() crypto.PublicKey { return v.pub }

// noKeyIDVerifier is the same verifier answering no key id at all.
type noKeyIDVerifier struct{ fingerprintVerifier }

func (noKeyIDVerifier) KeyID() (string, error) { return "", nil }

// TestThirdPartyVerifiersAccept ensures a worker's envelope, in the form the server stores,
// verifies with go-securesystemslib's DSSE verifier built the library's ways from the files
// the worker hands out (KEYFILE.pub, or the key file itself), with nothing told about ag.
func TestThirdPartyVerifiersAccept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keyPath := filepath.Join(t.TempDir(), "w1.key")
	priv, err := attest.LoadOrCreatePrivateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	pub := priv.Public().(ed25519.PublicKey)
	if err := attest.WritePublicKeyPEM(keyPath+".pub", pub); err != nil {
		t.Fatal(err)
	}
	signed, err := attest.NewSigner(priv).SignValidation(ctx, sampleValidation())
	if err != nil {
		t.Fatal(err)
	}
	stored, _, err := attest.Encode(signed)
	if err != nil {
		t.Fatal(err)
	}
	env, err := attest.Decode(stored)
	if err != nil {
		t.Fatal(err)
	}
	if len(env.Signatures) != 1 || env.Signatures[0].KeyID != "" {
		t.Errorf("signatures = %+v, want one without a key id", env.Signatures)
	}

	verifiers := map[string]dsse.Verifier{
		"SSH fingerprint key id (dsse.SHA256KeyID)": fingerprintVerifier{pub},
		"no key id": noKeyIDVerifier{fingerprintVerifier{pub}},
	}
	for _, file := range []string{keyPath + ".pub", keyPath} {
		pemBytes, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		key, err := signerverifier.LoadKey(pemBytes)
		if err != nil {
			t.Fatalf("signerverifier.LoadKey(%s): %v", filepath.Base(file), err)
		}
		sv, err := signerverifier.NewED25519SignerVerifierFromSSLibKey(key)
		if err != nil {
			t.Fatal(err)
		}
		verifiers["signerverifier.LoadKey("+filepath.Base(file)+")"] = sv
	}
	for name, v := range verifiers {
		ev, err := dsse.NewEnvelopeVerifier(v)
		if err != nil {
			t.Fatal(err)
		}
		accepted, err := ev.Verify(ctx, env)
		if err != nil || len(accepted) != 1 {
			t.Errorf("%s: %d accepted, %v", name, len(accepted), err)
		}
	}

	// And a tampered envelope is refused by them, so they do check.
	bad := *env
	bad.PayloadType = "application/json"
	ev, err := dsse.NewEnvelopeVerifier(verifiers["signerverifier.LoadKey(w1.key.pub)"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ev.Verify(ctx, &bad); err == nil {
		t.Error("a changed payload type verified")
	}
}

// legacyKey answers the public key of the fixtures in testdata, signed by workers before
// envelopes lost their key id and the predicate became the spec's.
func legacyKey(t *testing.T) ed25519.PublicKey {
	t.Helper()
	data, err := os.ReadFile("testdata/legacy.key.pub")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return k.(ed25519.PublicKey)
}

// TestStoredAttestationsOfEarlierWorkersVerify ensures envelopes stored before this version
// (key id "sha256:<hex>", ag's fields beside the spec's in the predicate) still verify and
// read back the same.
func TestStoredAttestationsOfEarlierWorkersVerify(t *testing.T) {
	t.Parallel()
	pub := legacyKey(t)
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for file, want := range map[string]attest.Validation{
		"legacy-passed.att.json": {
			Repository: "shop", Revision: "rev_42", TreeDigest: treeDigest, Result: attest.ResultPassed,
			Command: []string{"go", "test", "./..."}, Timeout: 5 * time.Minute, JobID: "job_7", ClaimNumber: 2,
			Worker: "ci|w1", StartedAt: start, FinishedAt: start.Add(1500 * time.Millisecond),
			LogDigest: "sha256:" + strings.Repeat("cd", 32), Isolation: attest.IsolationBubblewrap,
		},
		"legacy-failed-no-isolation.att.json": {
			Repository: "shop", Revision: "rev_43", TreeDigest: "sha256:" + strings.Repeat("fedcba9876543210", 4),
			Result: attest.ResultFailed, Command: []string{"make", "check"}, JobID: "job_8", ClaimNumber: 1,
			Worker: "ci|w2", StartedAt: start, FinishedAt: start.Add(time.Minute), ExitCode: -1,
			LogDigest: "sha256:" + strings.Repeat("ab", 32), Reason: "timed out after 1m0s",
		},
	} {
		data, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		env, err := attest.Decode(data)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if got := env.Signatures[0].KeyID; got != attest.KeyID(pub) {
			t.Fatalf("%s: the fixture's key id is %q, not the earlier form %q", file, got, attest.KeyID(pub))
		}
		got, keyID, err := attest.VerifyValidation(context.Background(), env, [][]byte{pub})
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if keyID != attest.KeyID(pub) {
			t.Errorf("%s: key id = %s, want %s", file, keyID, attest.KeyID(pub))
		}
		sameValidation(t, got, want)
	}
}

// TestVerifyIgnoresTheKeyIDHint ensures a signature verifies whatever key id it carries, and
// that a key id naming the right key does not make another key's signature verify.
func TestVerifyIgnoresTheKeyIDHint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pub, signer := newKey(t)
	otherPub, _ := newKey(t)
	env, err := signer.SignValidation(ctx, sampleValidation())
	if err != nil {
		t.Fatal(err)
	}
	for _, keyID := range []string{"", attest.KeyID(pub), attest.KeyID(otherPub), "some-other-id"} {
		e := *env
		e.Signatures = []dsse.Signature{{KeyID: keyID, Sig: env.Signatures[0].Sig}}
		if got, err := attest.Verify(ctx, &e, [][]byte{otherPub, pub}); err != nil || got != attest.KeyID(pub) {
			t.Errorf("key id %q: %q, %v", keyID, got, err)
		}
		if _, err := attest.Verify(ctx, &e, [][]byte{otherPub}); !errors.Is(err, attest.ErrNotVerified) {
			t.Errorf("key id %q with another key: err = %v, want ErrNotVerified", keyID, err)
		}
	}
}

// TestVerifyRefusesAnEnvelopeWithoutSignature ensures an envelope with no signature, or none
// at all, is refused as unverified and says why, rather than reaching the signature loop (or a
// nil envelope's payload).
func TestVerifyRefusesAnEnvelopeWithoutSignature(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pub, signer := newKey(t)
	env, err := signer.SignValidation(ctx, sampleValidation())
	if err != nil {
		t.Fatal(err)
	}
	unsigned := *env
	unsigned.Signatures = nil
	for name, e := range map[string]*dsse.Envelope{"no envelope": nil, "no signature": &unsigned} {
		_, err := attest.Verify(ctx, e, [][]byte{pub})
		if !errors.Is(err, attest.ErrNotVerified) || !strings.Contains(err.Error(), "the envelope has no signature") {
			t.Errorf("%s: err = %v, want ErrNotVerified saying the envelope has no signature", name, err)
		}
	}
}

// TestVerifyRefusesASignatureThatIsNotBase64 ensures a signature is read only when all of it
// is base64: the right signature followed by a byte that is not base64 does not verify, so one
// signed statement has one stored form and not as many as there are ways to pad it.
func TestVerifyRefusesASignatureThatIsNotBase64(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pub, signer := newKey(t)
	env, err := signer.SignValidation(ctx, sampleValidation())
	if err != nil {
		t.Fatal(err)
	}
	sig, err := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]string{
		"the standard alphabet": base64.StdEncoding.EncodeToString(sig) + "!",
		// Verify also reads the URL alphabet, whose decoder answers the 64 bytes of the
		// signature along with its error here
		"the URL alphabet": base64.URLEncoding.EncodeToString(sig) + "!",
	} {
		bad := *env
		bad.Signatures = []dsse.Signature{{Sig: s}}
		if _, err := attest.Verify(ctx, &bad, [][]byte{pub}); !errors.Is(err, attest.ErrNotVerified) {
			t.Errorf("%s, a '!' after the signature: err = %v, want ErrNotVerified", name, err)
		}
		// and the same signature without the '!' verifies
		bad.Signatures = []dsse.Signature{{Sig: strings.TrimSuffix(s, "!")}}
		if _, err := attest.Verify(ctx, &bad, [][]byte{pub}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestVerifyReadsEverySignature ensures a signature that cannot be read (not base64, or not
// the size of an Ed25519 signature) does not hide a valid one after it: whoever adds a
// signature to an envelope cannot make it unverifiable by putting junk first.
func TestVerifyReadsEverySignature(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pub, signer := newKey(t)
	env, err := signer.SignValidation(ctx, sampleValidation())
	if err != nil {
		t.Fatal(err)
	}
	for name, junk := range map[string]string{
		"not base64":    "%%%",
		"a short one":   base64.StdEncoding.EncodeToString([]byte("short")),
		"another's one": base64.StdEncoding.EncodeToString(make([]byte, ed25519.SignatureSize)),
	} {
		e := *env
		e.Signatures = []dsse.Signature{{Sig: junk}, env.Signatures[0]}
		if got, err := attest.Verify(ctx, &e, [][]byte{pub}); err != nil || got != attest.KeyID(pub) {
			t.Errorf("%s before the valid signature: %q, %v", name, got, err)
		}
	}
}
