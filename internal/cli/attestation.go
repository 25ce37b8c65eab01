package cli

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/attestclient"
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
			if !attestclient.IsDigest(digest) {
				return fmt.Errorf("%q is not a digest: use sha256:<64 lowercase hex>", digest)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := attestclient.Fetch(cmd.Context(), c, digest)
			if err != nil {
				return err
			}
			data := res.GetEnvelopeJson()
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
type verifiedAttestation = attestclient.Report

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
			if subjectDigest != "" && !attestclient.IsDigest(subjectDigest) && !attestclient.IsGitTree(subjectDigest) {
				return fmt.Errorf("--subject-digest %q: use a git tree id (40 lowercase hex) or sha256:<64 lowercase hex>", subjectDigest)
			}
			pub, err := attestclient.ReadPublicKey(key)
			if err != nil {
				return err
			}
			data, err := attestclient.ReadEnvelope(cmd.InOrStdin(), args[0])
			if err != nil {
				return err
			}
			report, err := attestclient.Verify(cmd.Context(), data, pub, subjectDigest)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if g.json {
				return g.printValue(report)
			}
			printVerified(g, report)
			return nil
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "the signer's public key: a PEM file (KEYFILE.pub or the key file itself) or base64 (required)")
	cmd.Flags().StringVar(&subjectDigest, "subject-digest", "", "require the attested tree to be this one: its git tree id (40 hex) or its tree digest (sha256:...)")
	return cmd
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
	command := attestclient.ShellCommand(r.Command)
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
