package attestclient

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/attest"
)

var (
	digest    = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	gitTree   = regexp.MustCompile(`^[0-9a-f]{40}$`)
	shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:=@%+,-]+$`)
)

// IsDigest reports whether s is an attestation's or a tree's digest: sha256:<64 lowercase hex>.
func IsDigest(s string) bool { return digest.MatchString(s) }

// IsGitTree reports whether s is a git tree id: 40 lowercase hex.
func IsGitTree(s string) bool { return gitTree.MatchString(s) }

// Fetch asks the server for the attestation named d and refuses an answer whose bytes have
// another digest, so that nothing unchecked is saved or printed.
func Fetch(ctx context.Context, c *client.Client, d string) (*agwpv1.GetAttestationResponse, error) {
	res, err := c.Jobs.GetAttestation(ctx, &agwpv1.GetAttestationRequest{Digest: d})
	if err != nil {
		return nil, err
	}
	if got := Digest(res.GetEnvelopeJson()); got != d {
		return nil, fmt.Errorf("the server answered an attestation whose digest is %s, not %s: not saved", got, d)
	}
	return res, nil
}

// Report is what Verify found: who validated what.
type Report struct {
	Verified       bool      `json:"verified"`
	EnvelopeDigest string    `json:"envelopeDigest"`
	KeyID          string    `json:"keyId"`
	Result         string    `json:"result"`
	Subject        string    `json:"subject"`
	Repository     string    `json:"repository"`
	Revision       string    `json:"revision"`
	GitTree        string    `json:"gitTree,omitempty"`    // absent from attestations that predate it
	TreeDigest     string    `json:"treeDigest,omitempty"` // absent from those that name the git tree alone
	JobID          string    `json:"jobId"`
	ClaimNumber    uint32    `json:"claimNumber"`
	Worker         string    `json:"worker"`
	Command        []string  `json:"command"`
	Timeout        string    `json:"timeout,omitempty"`
	StartedAt      time.Time `json:"startedAt"`
	FinishedAt     time.Time `json:"finishedAt"`
	ExitCode       int       `json:"exitCode"`
	LogDigest      string    `json:"logDigest"`
	Reason         string    `json:"reason,omitempty"`
	// Isolation is how the command was kept from the worker's secrets: "bubblewrap", "none",
	// or "unknown" for an attestation made before workers said.
	Isolation string `json:"isolation"`
}

// Verify checks an envelope's signature with pub, that it is a validation's
// statement, and (when given) that its subject is the tree subjectDigest: a git tree id or a
// tree digest.
func Verify(ctx context.Context, data []byte, pub ed25519.PublicKey, subjectDigest string) (Report, error) {
	env, err := attest.Decode(data)
	if err != nil {
		return Report{}, fmt.Errorf("not a DSSE envelope: %w", err)
	}
	v, keyID, err := attest.VerifyValidation(ctx, env, [][]byte{pub})
	switch {
	case errors.Is(err, attest.ErrNotVerified):
		return Report{}, fmt.Errorf("the signature does not verify with key %s: the attestation was changed, or another key signed it", attest.KeyID(pub))
	case err != nil:
		return Report{}, fmt.Errorf("signed by key %s, but %w", attest.KeyID(pub), err)
	}
	if err := attestsTree(v, subjectDigest); err != nil {
		return Report{}, err
	}
	report := Report{
		Verified:       true,
		EnvelopeDigest: Digest(data),
		KeyID:          keyID,
		Result:         v.Result,
		Subject:        v.Subject(),
		Repository:     v.Repository,
		Revision:       v.Revision,
		GitTree:        v.GitTree,
		TreeDigest:     v.TreeDigest,
		JobID:          v.JobID,
		ClaimNumber:    v.ClaimNumber,
		Worker:         v.Worker,
		Command:        v.Command,
		StartedAt:      v.StartedAt,
		FinishedAt:     v.FinishedAt,
		ExitCode:       v.ExitCode,
		LogDigest:      v.LogDigest,
		Reason:         v.Reason,
		Isolation:      v.Isolation,
	}
	if report.Isolation == "" {
		report.Isolation = "unknown"
	}
	if v.Timeout > 0 {
		report.Timeout = v.Timeout.String()
	}
	return report, nil
}

// attestsTree checks that v's subject is the tree want names, by its git tree id (40 hex) or
// its tree digest ("sha256:<hex>"); an empty want checks nothing.
func attestsTree(v attest.Validation, want string) error {
	switch {
	case want == "":
		return nil
	case gitTree.MatchString(want) && v.GitTree == "":
		return fmt.Errorf("it names no git tree (%s, tree %s), so not git tree %s: compare its tree digest", v.Subject(), v.TreeDigest, want)
	case gitTree.MatchString(want) && v.GitTree != want:
		return fmt.Errorf("it attests git tree %s (%s), not %s", v.GitTree, v.Subject(), want)
	case gitTree.MatchString(want):
		return nil
	case v.TreeDigest == "":
		return fmt.Errorf("it names no tree digest (%s, git tree %s), so not %s: compare its git tree", v.Subject(), v.GitTree, want)
	case v.TreeDigest != want:
		return fmt.Errorf("it attests tree %s (%s), not %s", v.TreeDigest, v.Subject(), want)
	}
	return nil
}

// Digest is the sha256 digest of b as attestations are named by: "sha256:<hex>".
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ShellCommand writes argv as a POSIX shell needs it typed, quoting what needs quotes, so that
// the command an attestation names reads as it ran and can be run again to reproduce it.
func ShellCommand(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if shellSafe.MatchString(a) {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
