package audit

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ExportLine answers an event's line of an export (without its newline): its canonical form
// with "prev_hash" and "hash" (hex) added at the end.
func ExportLine(e Event) ([]byte, error) {
	canonical, err := Canonical(e)
	if err != nil {
		return nil, fmt.Errorf("event %d: %w", e.Seq, err)
	}
	line := canonical[:len(canonical)-1] // without its closing brace
	line = fmt.Appendf(line, `,"prev_hash":"%s","hash":"%s"}`, hex.EncodeToString(e.PrevHash), hex.EncodeToString(e.Hash))
	return line, nil
}

// exportCheckpoint is an export's last line.
type exportCheckpoint struct {
	Checkpoint string `json:"checkpoint"`
}

// WriteExport writes an export (docs/audit.md): one JSON line per event, as given (by seq),
// then the line {"checkpoint": note}.
func WriteExport(w io.Writer, events []Event, note []byte) error {
	bw := bufio.NewWriter(w)
	for _, e := range events {
		line, err := ExportLine(e)
		if err != nil {
			return err
		}
		bw.Write(line)
		bw.WriteByte('\n')
	}
	last, err := encodeJSON(exportCheckpoint{Checkpoint: string(note)})
	if err != nil {
		return err
	}
	bw.Write(last)
	bw.WriteByte('\n')
	return bw.Flush()
}

// exportEvent is an event's line of an export.
type exportEvent struct {
	Seq       *uint64         `json:"seq"`
	Time      string          `json:"time"`
	Principal string          `json:"principal"`
	Holder    string          `json:"holder"`
	Action    string          `json:"action"`
	Subject   string          `json:"subject"`
	Details   json.RawMessage `json:"details"`
	PrevHash  string          `json:"prev_hash"`
	Hash      string          `json:"hash"`
}

// ReadExport reads an export: its events (details as written, hashes decoded from hex) and the
// note of its last line. Any other line, a line after the checkpoint, or no checkpoint is an
// error naming the line. Blank lines are skipped.
func ReadExport(r io.Reader) ([]Event, []byte, error) {
	br := bufio.NewReader(r)
	var (
		events []Event
		note   []byte
	)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, nil, err
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			if note != nil {
				return nil, nil, fmt.Errorf("line %d: after the checkpoint line, which must be the last", n)
			}
			e, cp, perr := parseExportLine(t)
			if perr != nil {
				return nil, nil, fmt.Errorf("line %d: %w", n, perr)
			}
			if cp != nil {
				note = cp
			} else {
				events = append(events, e)
			}
		}
		if err == io.EOF {
			break
		}
	}
	if note == nil {
		return nil, nil, errors.New("no checkpoint line: an export ends with {\"checkpoint\": \"<signed note>\"}")
	}
	return events, note, nil
}

func parseExportLine(line []byte) (Event, []byte, error) {
	var c exportCheckpoint
	if decodeStrict(line, &c) == nil {
		if c.Checkpoint == "" {
			return Event{}, nil, errors.New("checkpoint line: empty note")
		}
		return Event{}, []byte(c.Checkpoint), nil
	}
	var x exportEvent
	if err := decodeStrict(line, &x); err != nil {
		return Event{}, nil, fmt.Errorf("not an event: %w", err)
	}
	if x.Seq == nil {
		return Event{}, nil, errors.New("an event without seq")
	}
	e := Event{Seq: *x.Seq, Principal: x.Principal, Holder: x.Holder, Action: x.Action, Subject: x.Subject}
	var err error
	if e.Time, err = parseTime(x.Time); err != nil {
		return Event{}, nil, fmt.Errorf("event %d: time: %w", e.Seq, err)
	}
	if len(x.Details) > 0 && string(x.Details) != "null" {
		e.Details = []byte(x.Details)
	}
	if e.PrevHash, err = hex.DecodeString(x.PrevHash); err != nil {
		return Event{}, nil, fmt.Errorf("event %d: prev_hash: %w", e.Seq, err)
	}
	if e.Hash, err = hex.DecodeString(x.Hash); err != nil {
		return Event{}, nil, fmt.Errorf("event %d: hash: %w", e.Seq, err)
	}
	return e, nil, nil
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON object")
	}
	return nil
}
