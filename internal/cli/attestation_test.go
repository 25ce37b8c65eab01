package cli_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/cli"
)

const (
	attestedTree    = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	attestedGitTree = "89abcdef0123456789abcdef0123456789abcdef"
)

// signedAttestation answers the stored form of a validation of attestedTree and
// attestedGitTree signed by the key it creates at keyPath, and that key.
func signedAttestation(t *testing.T, keyPath string) ([]byte, ed25519.PrivateKey) {
	t.Helper()
	return signedAttestationOf(t, keyPath, attestedTree, attestedGitTree)
}

// signedAttestationOf is signedAttestation for a tree digest and a git tree id, either empty.
func signedAttestationOf(t *testing.T, keyPath, treeDigest, gitTree string) ([]byte, ed25519.PrivateKey) {
	t.Helper()
	key, err := attest.LoadOrCreatePrivateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	env, err := attest.NewSigner(key).SignValidation(context.Background(), attest.Validation{
		Repository: "shop", Revision: "rev_42", TreeDigest: treeDigest, GitTree: gitTree, Result: attest.ResultPassed,
		Command: []string{"go", "test", "./..."}, Timeout: 5 * time.Minute, JobID: "job_7", ClaimNumber: 2,
		Worker: "ci|w1", StartedAt: start, FinishedAt: start.Add(1500 * time.Millisecond),
		LogDigest: "sha256:" + strings.Repeat("cd", 32), Isolation: attest.IsolationBubblewrap,
	})
	if err != nil {
		t.Fatal(err)
	}
	data, _, err := attest.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	return data, key
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func runAg(args ...string) (string, error) {
	var out, errb bytes.Buffer
	err := cli.Run(context.Background(), args, &out, &errb)
	return out.String() + errb.String(), err
}

// TestAttestationVerify ensures `ag attestation verify` accepts an attestation with the
// signer's key in any of its forms and prints who validated what, and refuses another key, a
// tampered file and another subject with a non-zero exit.
func TestAttestationVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "worker.key")
	data, key := signedAttestation(t, keyFile)
	pub := key.Public().(ed25519.PublicKey)
	file := writeFile(t, dir, "att.json", data)
	pubFile := keyFile + ".pub"
	if err := attest.WritePublicKeyPEM(pubFile, pub); err != nil {
		t.Fatal(err)
	}

	t.Run("the signer's key", func(t *testing.T) {
		t.Parallel()
		for _, k := range []string{pubFile, keyFile, base64.StdEncoding.EncodeToString(pub)} {
			out, err := runAg("attestation", "verify", file, "--key", k, "--subject-digest", attestedTree)
			if err != nil {
				t.Fatalf("verify --key %s: %v\n%s", k, err, out)
			}
			for _, want := range []string{
				"verified: PASSED", "shop@rev_42", "git tree:     " + attestedGitTree, "tree digest:  " + attestedTree,
				"job_7 (claim 2)", "ci|w1", "go test ./... (timeout 5m0s)",
				attest.KeyID(pub), "sha256:" + strings.Repeat("cd", 32), "(1.5s)", sha256Hex(data), "isolation:    bubblewrap",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		}
	})
	t.Run("--json", func(t *testing.T) {
		t.Parallel()
		out, err := runAg("attestation", "verify", file, "--key", pubFile, "--json")
		if err != nil {
			t.Fatalf("verify --json: %v\n%s", err, out)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		for k, want := range map[string]any{
			"verified": true, "result": "PASSED", "repository": "shop", "revision": "rev_42", "treeDigest": attestedTree, "gitTree": attestedGitTree,
			"jobId": "job_7", "claimNumber": 2.0, "worker": "ci|w1", "keyId": attest.KeyID(pub), "exitCode": 0.0,
			"envelopeDigest": sha256Hex(data), "startedAt": "2025-03-01T12:00:00Z", "isolation": "bubblewrap",
		} {
			if got[k] != want {
				t.Errorf("%s = %v, want %v", k, got[k], want)
			}
		}
	})
	t.Run("another key", func(t *testing.T) {
		t.Parallel()
		other, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		out, err := runAg("attestation", "verify", file, "--key", base64.StdEncoding.EncodeToString(other))
		if err == nil || !strings.Contains(err.Error(), "does not verify") {
			t.Errorf("verify with another key = %v, want a refusal\n%s", err, out)
		}
	})
	t.Run("a tampered file", func(t *testing.T) {
		t.Parallel()
		var env map[string]any
		if err := json.Unmarshal(data, &env); err != nil {
			t.Fatal(err)
		}
		payload, err := base64.StdEncoding.DecodeString(env["payload"].(string))
		if err != nil {
			t.Fatal(err)
		}
		env["payload"] = base64.StdEncoding.EncodeToString(bytes.Replace(payload, []byte("PASSED"), []byte("FAILED"), 1))
		forged, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		flipped := bytes.Clone(data)
		i := bytes.Index(flipped, []byte(`"sig":"`)) + len(`"sig":"`) + 3
		flipped[i] ^= 0x01
		for name, b := range map[string][]byte{"payload": forged, "signature": flipped, "truncated": data[:len(data)/2]} {
			out, err := runAg("attestation", "verify", writeFile(t, t.TempDir(), "att.json", b), "--key", pubFile)
			if err == nil {
				t.Errorf("%s: a tampered attestation verified\n%s", name, out)
			}
		}
	})
	t.Run("its git tree", func(t *testing.T) {
		t.Parallel()
		if out, err := runAg("attestation", "verify", file, "--key", pubFile, "--subject-digest", attestedGitTree); err != nil {
			t.Errorf("verify --subject-digest %s: %v\n%s", attestedGitTree, err, out)
		}
	})
	t.Run("another subject", func(t *testing.T) {
		t.Parallel()
		for _, other := range []string{"sha256:" + strings.Repeat("ef", 32), strings.Repeat("ef", 20)} {
			out, err := runAg("attestation", "verify", file, "--key", pubFile, "--subject-digest", other)
			if err == nil || !strings.Contains(err.Error(), "not "+other) {
				t.Errorf("verify --subject-digest %s = %v, want a refusal\n%s", other, err, out)
			}
		}
	})
	t.Run("a malformed subject", func(t *testing.T) {
		t.Parallel()
		for _, bad := range []string{
			strings.ToUpper(attestedGitTree), attestedGitTree[:39], "sha1:" + attestedGitTree,
			strings.TrimPrefix(attestedTree, "sha256:"), strings.ToUpper(attestedTree),
		} {
			out, err := runAg("attestation", "verify", file, "--key", pubFile, "--subject-digest", bad)
			if err == nil || !strings.Contains(err.Error(), "git tree id (40 lowercase hex) or sha256:") {
				t.Errorf("verify --subject-digest %s = %v, want a refusal of its form\n%s", bad, err, out)
			}
		}
	})
	t.Run("no key", func(t *testing.T) {
		t.Parallel()
		if _, err := runAg("attestation", "verify", file); err == nil {
			t.Error("verify without --key succeeded")
		}
		if _, err := runAg("attestation", "verify", file, "--key", filepath.Join(dir, "missing.pub")); err == nil {
			t.Error("verify with a missing key file succeeded")
		}
	})
}

// fakeJobs answers GetAttestation with stored bytes, honest or not.
type fakeJobs struct {
	agwpv1connect.UnimplementedJobServiceHandler
	stored []byte
}

func (f fakeJobs) GetAttestation(_ context.Context, req *agwpv1.GetAttestationRequest) (*agwpv1.GetAttestationResponse, error) {
	return &agwpv1.GetAttestationResponse{Digest: req.GetDigest(), EnvelopeJson: f.stored, JobId: "job_7"}, nil
}

// TestAttestationGet ensures `ag attestation get` saves the stored bytes unchanged, so they
// verify, and refuses bytes whose digest is not the one asked for.
func TestAttestationGet(t *testing.T) {
	t.Parallel()
	data, key := signedAttestation(t, filepath.Join(t.TempDir(), "worker.key"))
	digest := sha256Hex(data)
	serve := func(stored []byte) string {
		mux := http.NewServeMux()
		mux.Handle(agwpv1connect.NewJobServiceHandler(fakeJobs{stored: stored}))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	honest := serve(data)
	dir := t.TempDir()
	file := filepath.Join(dir, "att.json")
	if out, err := runAg("attestation", "get", digest, "-o", file, "--server", honest, "--token", "t"); err != nil {
		t.Fatalf("get: %v\n%s", err, out)
	}
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("saved %q, %v; want the stored bytes", got, err)
	}
	pub := base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
	if out, err := runAg("attestation", "verify", file, "--key", pub); err != nil {
		t.Errorf("verify the saved attestation: %v\n%s", err, out)
	}
	if out, err := runAg("attestation", "get", digest, "--server", honest, "--token", "t"); err != nil || out != string(data) {
		t.Errorf("get to stdout = %q, %v; want the stored bytes", out, err)
	}

	lying := serve(append(bytes.Clone(data), ' '))
	other := filepath.Join(dir, "lie.json")
	if _, err := runAg("attestation", "get", digest, "-o", other, "--server", lying, "--token", "t"); err == nil {
		t.Error("get accepted bytes of another digest")
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("get saved bytes of another digest: %v", err)
	}
	if _, err := runAg("attestation", "get", "sha256:nothex", "--server", honest, "--token", "t"); err == nil {
		t.Error("get accepted a malformed digest")
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestAttestationVerifyOneTreeName ensures an attestation that names its tree by one of git tree
// id and tree digest verifies against that one, is refused against the other with a word on
// what to compare instead, and prints only what it names.
func TestAttestationVerifyOneTreeName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		name, treeDigest, gitTree string
		match, other, refusal     string
	}{
		{"the git tree alone", "", attestedGitTree, attestedGitTree, attestedTree, "it names no tree digest"},
		{"the tree digest alone", attestedTree, "", attestedTree, attestedGitTree, "it names no git tree"},
	} {
		keyFile := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".key")
		data, _ := signedAttestationOf(t, keyFile, c.treeDigest, c.gitTree)
		file := writeFile(t, dir, filepath.Base(keyFile)+".att.json", data)
		out, err := runAg("attestation", "verify", file, "--key", keyFile, "--subject-digest", c.match)
		if err != nil {
			t.Fatalf("%s: verify --subject-digest %s: %v\n%s", c.name, c.match, err, out)
		}
		if strings.Contains(out, "git tree:") != (c.gitTree != "") || strings.Contains(out, "tree digest:") != (c.treeDigest != "") {
			t.Errorf("%s: output names what the attestation does not, or leaves out what it does:\n%s", c.name, out)
		}
		if out, err := runAg("attestation", "verify", file, "--key", keyFile, "--subject-digest", c.other); err == nil || !strings.Contains(err.Error(), c.refusal) {
			t.Errorf("%s: verify --subject-digest %s = %v, want a refusal: %s\n%s", c.name, c.other, err, c.refusal, out)
		}
		out, err = runAg("attestation", "verify", file, "--key", keyFile, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		if _, ok := got["gitTree"]; ok != (c.gitTree != "") {
			t.Errorf("%s: --json gitTree = %v", c.name, got["gitTree"])
		}
		if _, ok := got["treeDigest"]; ok != (c.treeDigest != "") {
			t.Errorf("%s: --json treeDigest = %v", c.name, got["treeDigest"])
		}
	}
}

// TestAttestationVerifyEarlierForm ensures attestations that workers signed before envelopes
// lost their key id and the predicate became the spec's test-result still verify.
func TestAttestationVerifyEarlierForm(t *testing.T) {
	t.Parallel()
	att := filepath.Join("..", "attest", "testdata", "legacy-passed.att.json")
	pub := filepath.Join("..", "attest", "testdata", "legacy.key.pub")
	out, err := runAg("attestation", "verify", att, "--key", pub, "--subject-digest", attestedTree)
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	for _, want := range []string{"verified: PASSED", "shop@rev_42", "job_7 (claim 2)", "ci|w1", "isolation:    bubblewrap", "(1.5s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "git tree") {
		t.Errorf("an attestation signed before git tree ids shows one:\n%s", out)
	}
	if _, err := runAg("attestation", "verify", att, "--key", pub, "--subject-digest", attestedGitTree); err == nil || !strings.Contains(err.Error(), "it names no git tree") {
		t.Errorf("verify an earlier attestation against a git tree = %v, want a refusal", err)
	}
}
