package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/auditclient"
)

func newAuditCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "read, export and verify the tamper-evident audit log",
		Long: `The audit log holds every state change as an event, sealed in a hash chain and a Merkle tree
whose root the server signs in checkpoints with its audit key (docs/audit.md). Reading it takes
the admin or reader role.`,
	}
	cmd.AddCommand(newAuditTailCmd(g), newAuditExportCmd(g), newAuditVerifyCmd(g))
	return cmd
}

func newAuditTailCmd(g *globals) *cobra.Command {
	var (
		follow bool
		after  uint64
		last   int
	)
	cmd := &cobra.Command{
		Use:   "tail [-f] [-n N | --after SEQ]",
		Short: "print sealed audit events",
		Long: `Prints sealed audit events, oldest first, one line each: seq, time (UTC), who (the holder
"<principal>|<label>", or the principal), action, subject and details: the last N with -n,
those after --after, or all. With -f it then waits for new events and prints them as they are
sealed, until interrupted. With --json each event is one JSON line of the export format
(docs/audit.md).`,
		Example: `  ag audit tail -n 20
  ag audit tail --after 1200
  ag audit tail -f --json | jq 'select(.action == "lease.broken")'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if last < 0 {
				return withExit(ExitUsage, fmt.Errorf("-n %d: give the number of events to print, 0 or more", last))
			}
			if cmd.Flags().Changed("lines") && cmd.Flags().Changed("after") {
				return withExit(ExitUsage, errors.New("-n and --after both say where to start: give one"))
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			return auditclient.Tail(cmd.Context(), c, auditclient.TailOptions{FromLast: cmd.Flags().Changed("lines"), Last: last, After: after, Follow: follow},
				func(e audit.Event) error { return printAuditEvent(g, e) })
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events as they are sealed, until interrupted")
	cmd.Flags().Uint64Var(&after, "after", 0, "print only the events after this seq")
	cmd.Flags().IntVarP(&last, "lines", "n", 0, "print only the last N sealed events")
	return cmd
}

// printAuditEvent prints one event: a line for people, or its export line with --json.
func printAuditEvent(g *globals, e audit.Event) error {
	if g.json {
		line, err := audit.ExportLine(e)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(g.stdout, "%s\n", line)
		return err
	}
	who := e.Principal
	if e.Holder != "" {
		who = e.Holder
	}
	details := ""
	if len(e.Details) > 0 {
		d, err := audit.CanonicalDetails(e.Details)
		if err != nil {
			return fmt.Errorf("event %d: %w", e.Seq, err)
		}
		details = "  " + string(d)
	}
	return termPrintf(g.stdout, "%6d  %s  %-14s  %-22s  %s%s\n", e.Seq, e.Time.UTC().Format("2006-01-02T15:04:05.000000Z"), who, e.Action, e.Subject, details)
}

func newAuditExportCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "export [--out FILE]",
		Short: "export the audit log up to its newest checkpoint",
		Long: `Writes the sealed events up to the newest checkpoint, one JSON line each by seq, then a line
with the signed checkpoint (docs/audit.md): the file 'ag audit verify --file' checks offline.
It writes to standard output, or to FILE (replaced atomically).`,
		Example: `  ag audit export > audit.jsonl
  ag audit export --out audit.jsonl && ag audit verify --file audit.jsonl --key ag-data/audit.key.pub`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			x, err := auditclient.FetchExport(cmd.Context(), c)
			if err != nil {
				return err
			}
			if out == "" {
				return x.Write(g.stdout)
			}
			if err := x.WriteFile(out); err != nil {
				return err
			}
			termPrintf(g.stdout, "exported %d events and the checkpoint signed by %s to %s\n", len(x.Events), x.Checkpoint.GetKeyId(), out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "write the export to this file instead of standard output")
	return cmd
}

func newAuditVerifyCmd(g *globals) *cobra.Command {
	var file, key, statePath string
	cmd := &cobra.Command{
		Use:   "verify [--file FILE] --key KEY [--state FILE]",
		Short: "verify the audit log's chain, Merkle tree and signed checkpoint",
		Long: `Verifies the audit log: every event's canonical form and hash, seqs 1, 2, 3, ... without a gap,
each prev_hash the previous event's hash, the Merkle root of the checkpoint's first events and
the hash of its last, and the checkpoint's signature with KEY (docs/audit.md).

KEY is the verifier key ("<name>+<hash>+<key>"), or a file holding it: the server's
<audit-key>.pub (or the key file itself).

With --file it checks an export (from 'ag audit export'; "-" reads standard input) offline.
Without, it checks the server's newest checkpoint and all its events; events sealed after the
checkpoint are chain-checked and counted apart. It then remembers the checkpoint in the state
file and, on the next run, checks that the log still holds the remembered checkpoint's events
unchanged: recomputing its root from the events and with the server's consistency proof. With
--file the state file is used only when --state is given.

The default state file is <config dir>/ag/audit-<key id>.json, one per log: the key id
("<origin>+<hash>") names the log's signing key, so two servers each with its own key are
remembered apart even when both have the origin "ag", and the replicas of one log, which share
its key, share its state.

It exits 0 only when everything verifies; otherwise it names the first event that does not.`,
		Example: `  ag audit verify --key ag-data/audit.key.pub
  ag audit verify --file audit.jsonl --key 'ag+1a2b3c4d+AbCd...'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if key == "" {
				return errors.New("--key is required: the audit verifier key, or the file holding it (the server's <audit-key>.pub)")
			}
			vkey, err := auditclient.ReadVerifierKey(key)
			if err != nil {
				return err
			}
			report, err := auditclient.Verify(cmd.Context(), auditclient.VerifyOptions{
				VerifierKey: vkey, File: file, Stdin: cmd.InOrStdin(), Dial: g.client,
				UseState: file == "" || cmd.Flags().Changed("state"), StatePath: statePath,
			})
			if err != nil {
				return err
			}
			return printAuditVerified(g, *report)
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "file", "", "verify this export offline (\"-\": standard input) instead of the server's log")
	f.StringVar(&key, "key", "", "the audit verifier key, or a file holding it (the server's <audit-key>.pub) (required)")
	f.StringVar(&statePath, "state", "", "where to remember the verified checkpoint (default <config dir>/ag/audit-<key id>.json)")
	return cmd
}

func printAuditVerified(g *globals, r auditclient.Report) error {
	if g.json {
		return g.printValue(r)
	}
	termPrintf(g.stdout, "verified: %d events of %s, checkpoint of %d events signed by %s\n", r.Events, r.Source, r.CheckpointSize, r.KeyID)
	termPrintf(g.stdout, "  root hash %s, head hash %s\n", r.RootHash, r.HeadHash)
	if r.UnsignedEvents > 0 {
		fmt.Fprintf(g.stdout, "  %d events after the checkpoint are chained but not signed yet\n", r.UnsignedEvents)
	}
	switch {
	case r.PreviousCheckpointSize > 0:
		fmt.Fprintf(g.stdout, "  consistent with the checkpoint of %d events verified before; remembered in %s\n", r.PreviousCheckpointSize, r.StateFile)
	case r.StateFile != "":
		fmt.Fprintf(g.stdout, "  first verification: checkpoint remembered in %s\n", r.StateFile)
	}
	return nil
}
