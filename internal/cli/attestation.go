package cli

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/attest"
)

var (
	digestPattern  = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	gitTreePattern = regexp.MustCompile(`^[0-9a-f]{40}$`)
	shellSafe      = regexp.MustCompile(`^[A-Za-z0-9_./:=@%+,-]+$`)
)

func newAttestationCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "attestation",
		Short: "fetch and verify the signed attestations workers attach to validations",
	}
	cmd.AddCommand(newAttestationGetCmd(g), newAttestationVerifyCmd(g))
	return cmd
}

func newAttestationGetCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "get DIGEST [-o FILE]",
		Short: "fetch a stored attestation (its DSSE JSON, exactly as stored) by its digest",
		Long: `Fetches the attestation whose digest is DIGEST (a job's or a change's attestation_digest) and
checks that the bytes received have that digest. It prints them, or saves them to FILE, unchanged,
for 'ag attestation verify'. With --json it prints the server's answer instead: the envelope,
its job and when it was stored.`,
		Example: `  ag attestation get sha256:3f2a... -o change.att.json
  ag attestation verify change.att.json --key ag-data/worker-w1.key.pub`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			digest := args[0]
			if !digestPattern.MatchString(digest) {
				return fmt.Errorf("%q is not a digest: use sha256:<64 lowercase hex>", digest)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Jobs.GetAttestation(cmd.Context(), &agwpv1.GetAttestationRequest{Digest: digest})
			if err != nil {
				return err
			}
			data := res.GetEnvelopeJson()
			if got := sha256Digest(data); got != digest {
				return fmt.Errorf("the server answered an attestation whose digest is %s, not %s: not saved", got, digest)
			}
			if output != "" {
				if err := os.WriteFile(output, data, 0o644); err != nil {
					return err
				}
			}
			switch {
			case g.json:
				return g.printJSON(res)
			case output != "":
				termPrintf(g.stdout, "saved attestation %s (job %s) to %s\n", digest, res.GetJobId(), output)
				return nil
			}
			_, err = g.stdout.Write(data)
			return err
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "save the attestation to FILE instead of printing it")
	return cmd
}

// verifiedAttestation is what `ag attestation verify` reports: who validated what.
type verifiedAttestation struct {
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

func newAttestationVerifyCmd(g *globals) *cobra.Command {
	var key, subjectDigest string
	cmd := &cobra.Command{
		Use:   "verify FILE --key PUBKEY [--subject-digest GITTREE|sha256:...]",
		Short: "verify an attestation offline and print who validated what",
		Long: `Verifies an attestation (DSSE JSON, as 'ag attestation get' saves it; FILE "-" reads standard
input) without a server: its signature with the key PUBKEY, its payload type, and its statement,
an in-toto test-result about one tree. It then prints the result, the subject (repository,
revision, git tree id and tree digest), the job and claim, the worker, the key, the run's
times, exit code, log digest, and how the command was isolated from the worker's secrets.

PUBKEY is a file holding the worker's public key (ag-worker writes it next to its key as
KEYFILE.pub), the worker's private key file, or the base64 of the raw 32-byte public key.
With --subject-digest the attested tree must be exactly that one: a git tree id (40 hex, what
'git rev-parse COMMIT^{tree}' prints for the mainline's commit) or a tree digest (sha256:...,
as 'ag repo show' prints it). Attestations signed before git tree ids name the tree digest
only.

It exits non-zero when anything does not verify. A FAILED validation that verifies is a valid
attestation: check the printed result.`,
		Example: `  ag attestation verify change.att.json --key ag-data/worker-w1.key.pub
  ag attestation get sha256:3f2a... | ag attestation verify - --key w1.pub --subject-digest "$(git rev-parse "$COMMIT^{tree}")"
  ag attestation verify change.att.json --key w1.pub --subject-digest sha256:9c1e...`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if key == "" {
				return errors.New("--key is required: the worker's public key (KEYFILE.pub), its key file, or base64")
			}
			if subjectDigest != "" && !digestPattern.MatchString(subjectDigest) && !gitTreePattern.MatchString(subjectDigest) {
				return fmt.Errorf("--subject-digest %q: use a git tree id (40 lowercase hex) or sha256:<64 lowercase hex>", subjectDigest)
			}
			pub, err := readPublicKey(key)
			if err != nil {
				return err
			}
			data, err := readFileOrStdin(cmd.InOrStdin(), args[0])
			if err != nil {
				return err
			}
			report, err := verifyAttestation(cmd.Context(), data, pub, subjectDigest)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if g.json {
				b, err := json.MarshalIndent(report, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(g.stdout, string(b))
				return err
			}
			printVerified(g, report)
			return nil
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "the signer's public key: a PEM file (KEYFILE.pub or the key file itself) or base64 (required)")
	cmd.Flags().StringVar(&subjectDigest, "subject-digest", "", "require the attested tree to be this one: its git tree id (40 hex) or its tree digest (sha256:...)")
	return cmd
}

// verifyAttestation checks an envelope's signature with pub, that it is a validation's
// statement, and (when given) that its subject is the tree subjectDigest: a git tree id or a
// tree digest.
func verifyAttestation(ctx context.Context, data []byte, pub ed25519.PublicKey, subjectDigest string) (verifiedAttestation, error) {
	env, err := attest.Decode(data)
	if err != nil {
		return verifiedAttestation{}, fmt.Errorf("not a DSSE envelope: %w", err)
	}
	v, keyID, err := attest.VerifyValidation(ctx, env, [][]byte{pub})
	switch {
	case errors.Is(err, attest.ErrNotVerified):
		return verifiedAttestation{}, fmt.Errorf("the signature does not verify with key %s: the attestation was changed, or another key signed it", attest.KeyID(pub))
	case err != nil:
		return verifiedAttestation{}, fmt.Errorf("signed by key %s, but %w", attest.KeyID(pub), err)
	}
	if err := attestsTree(v, subjectDigest); err != nil {
		return verifiedAttestation{}, err
	}
	report := verifiedAttestation{
		Verified:       true,
		EnvelopeDigest: sha256Digest(data),
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
	case gitTreePattern.MatchString(want) && v.GitTree == "":
		return fmt.Errorf("it names no git tree (%s, tree %s), so not git tree %s: compare its tree digest", v.Subject(), v.TreeDigest, want)
	case gitTreePattern.MatchString(want) && v.GitTree != want:
		return fmt.Errorf("it attests git tree %s (%s), not %s", v.GitTree, v.Subject(), want)
	case gitTreePattern.MatchString(want):
		return nil
	case v.TreeDigest == "":
		return fmt.Errorf("it names no tree digest (%s, git tree %s), so not %s: compare its git tree", v.Subject(), v.GitTree, want)
	case v.TreeDigest != want:
		return fmt.Errorf("it attests tree %s (%s), not %s", v.TreeDigest, v.Subject(), want)
	}
	return nil
}

func printVerified(g *globals, r verifiedAttestation) {
	termPrintf(g.stdout, "verified: %s, signed by key %s\n", r.Result, r.KeyID)
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			termPrintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("result", r.Result)
	row("subject", r.Subject)
	row("git tree", r.GitTree)
	row("tree digest", r.TreeDigest)
	row("job", fmt.Sprintf("%s (claim %d)", r.JobID, r.ClaimNumber))
	row("worker", r.Worker)
	command := shellJoin(r.Command)
	if r.Timeout != "" {
		command += " (timeout " + r.Timeout + ")"
	}
	row("command", command)
	if !r.StartedAt.IsZero() {
		row("started", r.StartedAt.Local().Format(time.RFC3339Nano))
	}
	if !r.FinishedAt.IsZero() {
		took := ""
		if !r.StartedAt.IsZero() {
			took = " (" + r.FinishedAt.Sub(r.StartedAt).Round(time.Millisecond).String() + ")"
		}
		row("finished", r.FinishedAt.Local().Format(time.RFC3339Nano)+took)
	}
	row("exit code", fmt.Sprint(r.ExitCode))
	row("reason", r.Reason)
	isolation := r.Isolation
	if isolation == attest.IsolationNone {
		isolation += " (the command ran with the worker's rights: it could have read the worker's key)"
	}
	row("isolation", isolation)
	row("log digest", r.LogDigest)
	row("key id", r.KeyID)
	row("attestation", r.EnvelopeDigest)
	_ = tw.Flush()
}

// shellJoin writes argv as a shell would need it typed, quoting what needs quotes.
func shellJoin(argv []string) string {
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

// readPublicKey reads --key: a file, or else the base64 of the raw key.
func readPublicKey(arg string) (ed25519.PublicKey, error) {
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

func readFileOrStdin(stdin io.Reader, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
