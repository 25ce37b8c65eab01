package cli

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/audit"
)

const (
	// auditPage is the page size of ListAuditEvents calls (the server's maximum).
	auditPage = 1000
	// auditFollowWait is how long `ag audit tail -f` long-polls for the next event.
	auditFollowWait = 30 * time.Second
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
			ctx := cmd.Context()
			if cmd.Flags().Changed("lines") {
				if after, err = printLastAuditEvents(ctx, g, c, last); err != nil {
					return err
				}
				if !follow {
					return nil
				}
			}
			wait := false
			for {
				req := &agwpv1.ListAuditEventsRequest{AfterSeq: after, PageSize: auditPage}
				if wait {
					req.Wait = durationpb.New(auditFollowWait)
				}
				res, err := c.Audit.ListAuditEvents(ctx, req)
				if err != nil {
					if follow && ctx.Err() != nil {
						return nil // interrupted
					}
					return err
				}
				for _, pe := range res.GetEvents() {
					e, err := auditEventOf(pe)
					if err != nil {
						return err
					}
					if err := printAuditEvent(g, e); err != nil {
						return err
					}
					after = e.Seq
				}
				n := len(res.GetEvents())
				if n == 0 && !follow {
					return nil
				}
				wait = follow && n < auditPage
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events as they are sealed, until interrupted")
	cmd.Flags().Uint64Var(&after, "after", 0, "print only the events after this seq")
	cmd.Flags().IntVarP(&last, "lines", "n", 0, "print only the last N sealed events")
	return cmd
}

// printLastAuditEvents prints the last n sealed events and answers the seq of the newest one
// sealed. Sealed events are numbered from 1 without gaps and the newest checkpoint covers a
// prefix of them, so reading from n before its size reads at least the last n.
func printLastAuditEvents(ctx context.Context, g *globals, c *client.Client, n int) (uint64, error) {
	var after uint64
	cp, err := c.Audit.GetCheckpoint(ctx, &agwpv1.GetCheckpointRequest{})
	switch {
	case connect.CodeOf(err) == connect.CodeNotFound: // nothing sealed yet
	case err != nil:
		return 0, err
	case cp.GetSize() > uint64(n):
		after = cp.GetSize() - uint64(n)
	}
	var kept []audit.Event
	for {
		res, err := c.Audit.ListAuditEvents(ctx, &agwpv1.ListAuditEventsRequest{AfterSeq: after, PageSize: auditPage})
		if err != nil {
			return 0, err
		}
		for _, pe := range res.GetEvents() {
			e, err := auditEventOf(pe)
			if err != nil {
				return 0, err
			}
			kept = append(kept, e)
			after = e.Seq
		}
		if len(kept) > n {
			kept = kept[len(kept)-n:]
		}
		if len(res.GetEvents()) == 0 {
			break
		}
	}
	for _, e := range kept {
		if err := printAuditEvent(g, e); err != nil {
			return 0, err
		}
	}
	return after, nil
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

// auditEventOf answers the event as the store holds it, from what the server sends: its
// details as stored (details_json), or else re-encoded from the Struct (the canonical form
// sorts them again; numbers above 2^53 would not survive that).
func auditEventOf(e *agwpv1.AuditEvent) (audit.Event, error) {
	out := audit.Event{
		Seq: e.GetSeq(), Time: e.GetTime().AsTime(), Principal: e.GetPrincipal(), Holder: e.GetHolder(),
		Action: e.GetAction(), Subject: e.GetSubject(), PrevHash: e.GetPrevHash(), Hash: e.GetHash(),
	}
	if e.GetDetailsJson() != "" {
		out.Details = []byte(e.GetDetailsJson())
	} else if e.GetDetails() != nil {
		d, err := protojson.Marshal(e.GetDetails())
		if err != nil {
			return audit.Event{}, fmt.Errorf("event %d: details: %w", e.GetSeq(), err)
		}
		out.Details = d
	}
	return out, nil
}

// fetchAuditEvents answers the sealed events after seq 0, by seq: all of them (upTo 0), or the
// first upTo, which must exist.
func fetchAuditEvents(ctx context.Context, c *client.Client, upTo uint64) ([]audit.Event, error) {
	var events []audit.Event
	var after uint64
	for upTo == 0 || after < upTo {
		res, err := c.Audit.ListAuditEvents(ctx, &agwpv1.ListAuditEventsRequest{AfterSeq: after, PageSize: auditPage})
		if err != nil {
			return nil, err
		}
		if len(res.GetEvents()) == 0 {
			if upTo != 0 {
				return nil, fmt.Errorf("the server lists %d events, but its checkpoint covers %d", len(events), upTo)
			}
			break
		}
		for _, pe := range res.GetEvents() {
			switch {
			case pe.GetSeq() <= after:
				return nil, fmt.Errorf("the server listed event %d after event %d", pe.GetSeq(), after)
			case upTo != 0 && pe.GetSeq() > upTo:
				return events, nil // a gap before upTo: for verify to name
			}
			e, err := auditEventOf(pe)
			if err != nil {
				return nil, err
			}
			events = append(events, e)
			after = e.Seq
		}
	}
	return events, nil
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
			cp, err := c.Audit.GetCheckpoint(cmd.Context(), &agwpv1.GetCheckpointRequest{})
			if err != nil {
				return err
			}
			events, err := fetchAuditEvents(cmd.Context(), c, cp.GetSize())
			if err != nil {
				return err
			}
			if out == "" {
				return audit.WriteExport(g.stdout, events, []byte(cp.GetNote()))
			}
			if err := writeFileAtomic(out, 0o644, func(w io.Writer) error {
				return audit.WriteExport(w, events, []byte(cp.GetNote()))
			}); err != nil {
				return err
			}
			termPrintf(g.stdout, "exported %d events and the checkpoint signed by %s to %s\n", len(events), cp.GetKeyId(), out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "write the export to this file instead of standard output")
	return cmd
}

// auditVerified is what `ag audit verify --json` prints.
type auditVerified struct {
	Verified bool   `json:"verified"`
	Source   string `json:"source"`
	Events   uint64 `json:"events"`
	// CheckpointSize is how many of the events the signed checkpoint covers; the others are
	// chained to them but not signed yet.
	CheckpointSize uint64 `json:"checkpointSize"`
	UnsignedEvents uint64 `json:"unsignedEvents"`
	Origin         string `json:"origin"`
	KeyID          string `json:"keyId"`
	RootHash       string `json:"rootHash"`
	HeadHash       string `json:"headHash"`
	// PreviousCheckpointSize is the size of the remembered checkpoint the log was found to
	// extend (0: none remembered).
	PreviousCheckpointSize uint64 `json:"previousCheckpointSize,omitempty"`
	StateFile              string `json:"stateFile,omitempty"`
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
			vkey, err := readVerifierKey(key)
			if err != nil {
				return err
			}
			keyID, err := audit.KeyIDOf(vkey)
			if err != nil {
				return err
			}
			useState := file == "" || cmd.Flags().Changed("state")

			var (
				events []audit.Event
				msg    []byte
				c      *client.Client
				source string
				// serverKey is the verifier key the server names, for a hint when it is not KEY.
				serverKey string
			)
			if file != "" {
				source = file
				events, msg, err = readExportFile(cmd.InOrStdin(), file)
				if err != nil {
					return fmt.Errorf("%s: %w", file, err)
				}
			} else {
				if c, err = g.client(); err != nil {
					return err
				}
				source = c.BaseURL()
				res, err := c.Audit.GetCheckpoint(cmd.Context(), &agwpv1.GetCheckpointRequest{})
				if err != nil {
					return err
				}
				msg, serverKey = []byte(res.GetNote()), strings.TrimSpace(res.GetVerifierKey())
				if events, err = fetchAuditEvents(cmd.Context(), c, 0); err != nil {
					return err
				}
			}
			cp, err := audit.OpenCheckpoint(msg, vkey)
			if err != nil {
				if serverKey != "" && serverKey != vkey {
					return fmt.Errorf("the checkpoint of %s: %w (the server says it signs with %s)", source, err, serverKey)
				}
				return fmt.Errorf("the checkpoint of %s: %w", source, err)
			}
			res, err := audit.Verify(events, cp)
			if err != nil {
				return notVerified(source, events, err)
			}
			report := auditVerified{
				Verified: true, Source: source, Events: res.Events, CheckpointSize: res.Covered, UnsignedEvents: res.Uncovered(),
				Origin: cp.Origin, KeyID: keyID, RootHash: hex.EncodeToString(cp.Root[:]), HeadHash: hex.EncodeToString(cp.Head),
			}

			if useState {
				var old *audit.Checkpoint
				rememberedIn := statePath // where old was read: the legacy file, before it moves
				if statePath == "" {
					if statePath, rememberedIn, old, err = defaultAuditState(cp.Origin, keyID, vkey); err != nil {
						return err
					}
				} else if old, err = loadAuditState(statePath, vkey); err != nil {
					return err
				}
				if old != nil {
					if err := checkRemembered(cmd.Context(), c, events, cp, *old, rememberedIn); err != nil {
						return notVerified(source, events, err)
					}
					report.PreviousCheckpointSize = old.Size
				}
				if err := saveAuditState(statePath, msg, cp, keyID); err != nil {
					return err
				}
				report.StateFile = statePath
			}
			return printAuditVerified(g, report)
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "file", "", "verify this export offline (\"-\": standard input) instead of the server's log")
	f.StringVar(&key, "key", "", "the audit verifier key, or a file holding it (the server's <audit-key>.pub) (required)")
	f.StringVar(&statePath, "state", "", "where to remember the verified checkpoint (default <config dir>/ag/audit-<key id>.json)")
	return cmd
}

// checkRemembered checks that the log still holds the events of the checkpoint verified before:
// from the events themselves, and (against a server) with its consistency proof.
func checkRemembered(ctx context.Context, c *client.Client, events []audit.Event, cp, old audit.Checkpoint, statePath string) error {
	switch {
	case old.Origin != cp.Origin:
		return fmt.Errorf("the checkpoint is of log %q, the one remembered in %s of log %q", cp.Origin, statePath, old.Origin)
	case old.Size > cp.Size:
		return fmt.Errorf("the newest checkpoint covers %d events, fewer than the %d of the one verified before (%s): the log was truncated or rolled back", cp.Size, old.Size, statePath)
	}
	if err := audit.Consistent(events, old); err != nil {
		return fmt.Errorf("%w (remembered in %s)", err, statePath)
	}
	if c == nil {
		return nil
	}
	proof, err := c.Audit.GetConsistencyProof(ctx, &agwpv1.GetConsistencyProofRequest{OldSize: old.Size, NewSize: cp.Size})
	if err != nil {
		return fmt.Errorf("consistency proof from the %d events verified before to %d: %w", old.Size, cp.Size, err)
	}
	if err := audit.CheckConsistency(proof.GetHashes(), old.Size, old.Root, cp.Size, cp.Root); err != nil {
		return fmt.Errorf("the server's consistency proof from the %d events verified before (%s): %w", old.Size, statePath, err)
	}
	return nil
}

// notVerified explains a verification failure, showing the event it names.
func notVerified(source string, events []audit.Event, err error) error {
	var ve *audit.VerifyError
	if errors.As(err, &ve) && ve.Seq >= 1 && ve.Seq <= uint64(len(events)) {
		e := events[ve.Seq-1]
		if line, lerr := audit.ExportLine(e); lerr == nil {
			return fmt.Errorf("the audit log of %s does not verify: %w\n  found at place %d: %s", source, err, ve.Seq, line)
		}
	}
	return fmt.Errorf("the audit log of %s does not verify: %w", source, err)
}

func printAuditVerified(g *globals, r auditVerified) error {
	if g.json {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(g.stdout, string(b))
		return err
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

func readExportFile(stdin io.Reader, name string) ([]audit.Event, []byte, error) {
	if name == "-" {
		return audit.ReadExport(stdin)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	return audit.ReadExport(f)
}

// readVerifierKey reads --key: a file holding the verifier key (or the signer key, whose
// verifier key it derives), or else the verifier key itself.
func readVerifierKey(arg string) (string, error) {
	data, err := os.ReadFile(arg)
	switch {
	case err == nil:
		k := strings.TrimSpace(string(data))
		if strings.HasPrefix(k, "PRIVATE+KEY+") {
			s, err := audit.NewSigner(k)
			if err != nil {
				return "", fmt.Errorf("--key %s: %w", arg, err)
			}
			return s.VerifierKey(), nil
		}
		if _, err := audit.KeyIDOf(k); err != nil {
			return "", fmt.Errorf("--key %s: %w", arg, err)
		}
		return k, nil
	case errors.Is(err, fs.ErrNotExist):
		k := strings.TrimSpace(arg)
		if _, err := audit.KeyIDOf(k); err != nil {
			return "", fmt.Errorf("--key %s: no such file, and not a verifier key (<name>+<hash>+<key>)", arg)
		}
		return k, nil
	}
	return "", fmt.Errorf("--key: %w", err)
}

// auditState is the checkpoint `ag audit verify` verified last, in its state file.
type auditState struct {
	Origin     string    `json:"origin"`
	Size       uint64    `json:"size"`
	RootHash   string    `json:"rootHash"`
	HeadHash   string    `json:"headHash"`
	KeyID      string    `json:"keyId"`
	Checkpoint string    `json:"checkpoint"` // the signed note, which is what counts
	VerifiedAt time.Time `json:"verifiedAt"`
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// defaultAuditState answers the default state file of the log whose checkpoints the verifier key
// vkey (of key id keyID) opens, <config dir>/ag/audit-<key id>.json, and the checkpoint
// remembered for that log with the file it was read from, or nil. Without that file, it takes
// the checkpoint of the file of earlier builds, audit-<origin>.json, which every log of that
// origin shared, when that checkpoint is this log's (its signature verifies with vkey); the
// next save writes it to the new file.
func defaultAuditState(origin, keyID, vkey string) (path, rememberedIn string, old *audit.Checkpoint, err error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", "", nil, fmt.Errorf("no place for the state file (pass --state): %w", err)
	}
	dir = filepath.Join(dir, "ag")
	path = filepath.Join(dir, "audit-"+unsafeFileChars.ReplaceAllString(keyID, "_")+".json")
	if old, err = loadAuditState(path, vkey); err != nil || old != nil {
		return path, path, old, err
	}
	legacy := filepath.Join(dir, "audit-"+unsafeFileChars.ReplaceAllString(origin, "_")+".json")
	if old, err := loadAuditState(legacy, vkey); err == nil && old != nil && old.Origin == origin {
		return path, legacy, old, nil
	}
	return path, path, nil, nil // none, or another log's
}

// loadAuditState answers the checkpoint remembered at path, its signature checked again with
// vkey, or nil when there is none yet.
func loadAuditState(path, vkey string) (*audit.Checkpoint, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state file: %w", err)
	}
	var st auditState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	cp, err := audit.OpenCheckpoint([]byte(st.Checkpoint), vkey)
	if err != nil {
		return nil, fmt.Errorf("state file %s: the checkpoint remembered there: %w (another key or another log? pass another --state, or remove the file to start over)", path, err)
	}
	return &cp, nil
}

func saveAuditState(path string, msg []byte, cp audit.Checkpoint, keyID string) error {
	data, err := json.MarshalIndent(auditState{
		Origin: cp.Origin, Size: cp.Size, RootHash: hex.EncodeToString(cp.Root[:]), HeadHash: hex.EncodeToString(cp.Head),
		KeyID: keyID, Checkpoint: string(msg), VerifiedAt: time.Now().UTC(),
	}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	return writeFileAtomic(path, 0o600, func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
}

// writeFileAtomic writes a file through a temporary file renamed into place, so that a crash
// leaves the old file or the new one.
func writeFileAtomic(path string, perm os.FileMode, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(f.Name(), path)
}
