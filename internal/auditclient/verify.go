package auditclient

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
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/audit"
)

// PageSize is the page size of ListAuditEvents calls (the server's maximum).
const PageSize = 1000

// LastEvents answers the last n sealed events and the seq of the newest one sealed. Sealed
// events are numbered from 1 without gaps and the newest checkpoint covers a prefix of them, so
// reading from n before its size reads at least the last n.
func LastEvents(ctx context.Context, c *client.Client, n int) ([]audit.Event, uint64, error) {
	var after uint64
	cp, err := c.Audit.GetCheckpoint(ctx, &agwpv1.GetCheckpointRequest{})
	switch {
	case connect.CodeOf(err) == connect.CodeNotFound: // nothing sealed yet
	case err != nil:
		return nil, 0, err
	case cp.GetSize() > uint64(n):
		after = cp.GetSize() - uint64(n)
	}
	var kept []audit.Event
	for {
		res, err := c.Audit.ListAuditEvents(ctx, &agwpv1.ListAuditEventsRequest{AfterSeq: after, PageSize: PageSize})
		if err != nil {
			return nil, 0, err
		}
		for _, pe := range res.GetEvents() {
			e, err := EventOf(pe)
			if err != nil {
				return nil, 0, err
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
	return kept, after, nil
}

// EventOf answers the event as the store holds it, from what the server sends: its
// details as stored (details_json), or else re-encoded from the Struct (the canonical form
// sorts them again; numbers above 2^53 would not survive that).
func EventOf(e *agwpv1.AuditEvent) (audit.Event, error) {
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

// FetchEvents answers the sealed events after seq 0, by seq: all of them (upTo 0), or the
// first upTo, which must exist.
func FetchEvents(ctx context.Context, c *client.Client, upTo uint64) ([]audit.Event, error) {
	var events []audit.Event
	var after uint64
	for upTo == 0 || after < upTo {
		res, err := c.Audit.ListAuditEvents(ctx, &agwpv1.ListAuditEventsRequest{AfterSeq: after, PageSize: PageSize})
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
			e, err := EventOf(pe)
			if err != nil {
				return nil, err
			}
			events = append(events, e)
			after = e.Seq
		}
	}
	return events, nil
}

// Report is what `ag audit verify --json` prints.
type Report struct {
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

// VerifyOptions is one verification of an audit log: an export file, or a server's log.
type VerifyOptions struct {
	// VerifierKey is the key checkpoints must be signed with (ReadVerifierKey).
	VerifierKey string
	// File is an export to verify offline ("-": Stdin); empty: the log of the server Dial
	// reaches, dialled only then so that a bad key is told before a missing server.
	File  string
	Stdin io.Reader
	Dial  func() (*client.Client, error)
	// UseState remembers the checkpoint in StatePath (empty: DefaultState's file) and checks
	// the log against the one remembered there before.
	UseState  bool
	StatePath string
}

// Verify checks a log's chain, Merkle tree and signed checkpoint, and that it still holds the
// checkpoint verified before; the error names the first event that does not verify.
func Verify(ctx context.Context, o VerifyOptions) (*Report, error) {
	vkey := o.VerifierKey
	keyID, err := audit.KeyIDOf(vkey)
	if err != nil {
		return nil, err
	}
	var (
		events []audit.Event
		msg    []byte
		c      *client.Client
		source string
		// serverKey is the verifier key the server names, for a hint when it is not vkey.
		serverKey string
	)
	if o.File != "" {
		source = o.File
		events, msg, err = ReadExportFile(o.Stdin, o.File)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.File, err)
		}
	} else {
		if c, err = o.Dial(); err != nil {
			return nil, err
		}
		source = c.BaseURL()
		res, err := c.Audit.GetCheckpoint(ctx, &agwpv1.GetCheckpointRequest{})
		if err != nil {
			return nil, err
		}
		msg, serverKey = []byte(res.GetNote()), strings.TrimSpace(res.GetVerifierKey())
		if events, err = FetchEvents(ctx, c, 0); err != nil {
			return nil, err
		}
	}
	cp, err := audit.OpenCheckpoint(msg, vkey)
	if err != nil {
		if serverKey != "" && serverKey != vkey {
			return nil, fmt.Errorf("the checkpoint of %s: %w (the server says it signs with %s)", source, err, serverKey)
		}
		return nil, fmt.Errorf("the checkpoint of %s: %w", source, err)
	}
	res, err := audit.Verify(events, cp)
	if err != nil {
		return nil, NotVerified(source, events, err)
	}
	report := &Report{
		Verified: true, Source: source, Events: res.Events, CheckpointSize: res.Covered, UnsignedEvents: res.Uncovered(),
		Origin: cp.Origin, KeyID: keyID, RootHash: hex.EncodeToString(cp.Root[:]), HeadHash: hex.EncodeToString(cp.Head),
	}
	if !o.UseState {
		return report, nil
	}
	statePath := o.StatePath
	var old *audit.Checkpoint
	rememberedIn := statePath // where old was read: the legacy file, before it moves
	if statePath == "" {
		if statePath, rememberedIn, old, err = DefaultState(cp.Origin, keyID, vkey); err != nil {
			return nil, err
		}
	} else if old, err = LoadState(statePath, vkey); err != nil {
		return nil, err
	}
	if old != nil {
		if err := CheckRemembered(ctx, c, events, cp, *old, rememberedIn); err != nil {
			return nil, NotVerified(source, events, err)
		}
		report.PreviousCheckpointSize = old.Size
	}
	if err := SaveState(statePath, msg, cp, keyID); err != nil {
		return nil, err
	}
	report.StateFile = statePath
	return report, nil
}

// CheckRemembered checks that the log still holds the events of the checkpoint verified before:
// from the events themselves, and (against a server) with its consistency proof.
func CheckRemembered(ctx context.Context, c *client.Client, events []audit.Event, cp, old audit.Checkpoint, statePath string) error {
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

// NotVerified explains a verification failure, showing the event it names.
func NotVerified(source string, events []audit.Event, err error) error {
	var ve *audit.VerifyError
	if errors.As(err, &ve) && ve.Seq >= 1 && ve.Seq <= uint64(len(events)) {
		e := events[ve.Seq-1]
		if line, lerr := audit.ExportLine(e); lerr == nil {
			return fmt.Errorf("the audit log of %s does not verify: %w\n  found at place %d: %s", source, err, ve.Seq, line)
		}
	}
	return fmt.Errorf("the audit log of %s does not verify: %w", source, err)
}

// ReadExportFile reads the export name, or stdin for "-".
func ReadExportFile(stdin io.Reader, name string) ([]audit.Event, []byte, error) {
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

// ReadVerifierKey reads --key: a file holding the verifier key (or the signer key, whose
// verifier key it derives), or else the verifier key itself.
func ReadVerifierKey(arg string) (string, error) {
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

// state is the checkpoint `ag audit verify` verified last, in its state file.
type state struct {
	Origin     string    `json:"origin"`
	Size       uint64    `json:"size"`
	RootHash   string    `json:"rootHash"`
	HeadHash   string    `json:"headHash"`
	KeyID      string    `json:"keyId"`
	Checkpoint string    `json:"checkpoint"` // the signed note, which is what counts
	VerifiedAt time.Time `json:"verifiedAt"`
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// DefaultState answers the default state file of the log whose checkpoints the verifier key
// vkey (of key id keyID) opens, <config dir>/ag/audit-<key id>.json, and the checkpoint
// remembered for that log with the file it was read from, or nil. Without that file, it takes
// the checkpoint of the file of earlier builds, audit-<origin>.json, which every log of that
// origin shared, when that checkpoint is this log's (its signature verifies with vkey); the
// next save writes it to the new file.
func DefaultState(origin, keyID, vkey string) (path, rememberedIn string, old *audit.Checkpoint, err error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", "", nil, fmt.Errorf("no place for the state file (pass --state): %w", err)
	}
	dir = filepath.Join(dir, "ag")
	path = filepath.Join(dir, "audit-"+unsafeFileChars.ReplaceAllString(keyID, "_")+".json")
	if old, err = LoadState(path, vkey); err != nil || old != nil {
		return path, path, old, err
	}
	legacy := filepath.Join(dir, "audit-"+unsafeFileChars.ReplaceAllString(origin, "_")+".json")
	if old, err := LoadState(legacy, vkey); err == nil && old != nil && old.Origin == origin {
		return path, legacy, old, nil
	}
	return path, path, nil, nil // none, or another log's
}

// LoadState answers the checkpoint remembered at path, its signature checked again with
// vkey, or nil when there is none yet.
func LoadState(path, vkey string) (*audit.Checkpoint, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state file: %w", err)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	cp, err := audit.OpenCheckpoint([]byte(st.Checkpoint), vkey)
	if err != nil {
		return nil, fmt.Errorf("state file %s: the checkpoint remembered there: %w (another key or another log? pass another --state, or remove the file to start over)", path, err)
	}
	return &cp, nil
}

// SaveState remembers the verified checkpoint cp (signed note msg) at path, owner-only.
func SaveState(path string, msg []byte, cp audit.Checkpoint, keyID string) error {
	data, err := json.MarshalIndent(state{
		Origin: cp.Origin, Size: cp.Size, RootHash: hex.EncodeToString(cp.Root[:]), HeadHash: hex.EncodeToString(cp.Head),
		KeyID: keyID, Checkpoint: string(msg), VerifiedAt: time.Now().UTC(),
	}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	return WriteFileAtomic(path, 0o600, func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
}

// WriteFileAtomic writes a file through a temporary file renamed into place, so that a crash
// leaves the old file or the new one.
func WriteFileAtomic(path string, perm os.FileMode, write func(io.Writer) error) error {
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
