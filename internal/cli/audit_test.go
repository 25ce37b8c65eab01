package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
	"github.com/ag-coord/ag/internal/audit"
	"github.com/ag-coord/ag/internal/cli"
	"github.com/ag-coord/ag/internal/store/storetest"
	"github.com/ag-coord/ag/internal/testutil/syncbuf"
)

// auditLog is an audit log sealed in memory as a store would keep it.
type auditLog struct {
	signer      *audit.Signer
	events      []audit.Event
	hashes      map[int64][]byte
	head        audit.Head
	checkpoints []audit.StoredCheckpoint
}

func newAuditLog(t *testing.T, signer *audit.Signer, batches ...int) *auditLog {
	t.Helper()
	l := &auditLog{signer: signer, hashes: map[int64][]byte{}}
	for _, n := range batches {
		l.seal(t, n, nil)
	}
	return l
}

func (l *auditLog) readHashes(indexes []int64) ([][]byte, error) {
	out := make([][]byte, len(indexes))
	for i, x := range indexes {
		h, ok := l.hashes[x]
		if !ok {
			return nil, fmt.Errorf("no tree hash %d", x)
		}
		out[i] = h
	}
	return out, nil
}

// seal seals n new events, changing each with edit when given.
func (l *auditLog) seal(t *testing.T, n int, edit func(*audit.Event)) {
	t.Helper()
	pending := make([]audit.Event, n)
	for i := range pending {
		k := len(l.events) + i
		pending[i] = audit.Event{
			ID: int64(k), Time: time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC).Add(time.Duration(k) * time.Second),
			Principal: "ci", Holder: "ci|w1", Action: "job.claimed", Subject: fmt.Sprintf("job/job_%d", k),
			Details: fmt.Appendf(nil, `{"lease_expires_at":"2026-11-30T18:10:00Z","claim":%d}`, k%3+1),
		}
		if k%5 == 0 {
			pending[i].Holder, pending[i].Action, pending[i].Details = "", "change.requeued", nil
		}
		if edit != nil {
			edit(&pending[i])
		}
	}
	s, err := l.signer.SealFunc(time.Now)(l.head, pending, l.readHashes)
	if err != nil {
		t.Fatal(err)
	}
	for idx, h := range storetest.SealTreeHashes(l.head, s) {
		l.hashes[idx] = h
	}
	l.events = append(l.events, storetest.SealedEvents(l.head, pending, s)...)
	l.head = s.Head
	l.checkpoints = append(l.checkpoints, s.Checkpoint)
}

func (l *auditLog) export(t *testing.T, events []audit.Event, cp audit.StoredCheckpoint) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := audit.WriteExport(&buf, events, cp.Note); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func newAuditKey(t *testing.T) (*audit.Signer, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.key")
	s, err := audit.LoadOrCreateKey(path, "ag-test")
	if err != nil {
		t.Fatal(err)
	}
	return s, path
}

// TestAuditVerifyOffline ensures `ag audit verify --file` accepts an untouched export with the
// key in each of its forms, and refuses, naming the first bad event, a changed, deleted or
// swapped event, a truncated export and a checkpoint signed by another key.
func TestAuditVerifyOffline(t *testing.T) {
	t.Parallel()
	signer, keyFile := newAuditKey(t)
	l := newAuditLog(t, signer, 7, 13, 10)
	data := l.export(t, l.events, l.checkpoints[2])
	dir := t.TempDir()
	file := writeFile(t, dir, "audit.jsonl", data)

	for _, key := range []string{keyFile + ".pub", keyFile, signer.VerifierKey()} {
		out, err := runAg("audit", "verify", "--file", file, "--key", key)
		if err != nil {
			t.Fatalf("verify --key %s: %v\n%s", key, err, out)
		}
		if !strings.Contains(out, "verified: 30 events of "+file+", checkpoint of 30 events signed by "+signer.KeyID()) {
			t.Errorf("verify --key %s:\n%s", key, out)
		}
	}
	out, err := runAg("audit", "verify", "--file", file, "--key", keyFile+".pub", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var report map[string]any
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if report["verified"] != true || report["events"] != 30.0 || report["checkpointSize"] != 30.0 || report["keyId"] != signer.KeyID() || report["origin"] != "ag-test" {
		t.Errorf("report %v", report)
	}
	// An export with events after its checkpoint (the checkpoint of 20).
	out, err = runAg("audit", "verify", "--file", writeFile(t, dir, "more.jsonl", l.export(t, l.events, l.checkpoints[1])), "--key", signer.VerifierKey())
	if err != nil || !strings.Contains(out, "checkpoint of 20 events") || !strings.Contains(out, "10 events after the checkpoint are chained but not signed") {
		t.Errorf("events after the checkpoint: %v\n%s", err, out)
	}

	lines := strings.SplitAfter(string(data), "\n")
	lines = lines[:len(lines)-1] // the empty string after the last newline
	edited := slices.Clone(lines)
	edited[11] = strings.Replace(edited[11], `"subject":"job/job_11"`, `"subject":"job/job_99"`, 1)
	swapped := slices.Clone(lines)
	swapped[3], swapped[4] = swapped[4], swapped[3]
	other, _ := newAuditKey(t)
	for name, tc := range map[string]struct {
		lines []string
		key   string
		want  []string
	}{
		"an edited event": {edited, keyFile + ".pub", []string{"does not verify: event 12: hash does not match", `found at place 12: {"seq":12,`, "job/job_99"}},
		"a deleted event": {slices.Delete(slices.Clone(lines), 4, 5), keyFile + ".pub", []string{"event 5: missing"}},
		"swapped events":  {swapped, keyFile + ".pub", []string{"event 4: ", "reordered"}},
		"truncated":       {slices.Delete(slices.Clone(lines), 27, 30), keyFile + ".pub", []string{"event 28: missing: the checkpoint covers 30 events"}},
		"another key":     {lines, other.VerifierKey(), []string{"signed by " + signer.KeyID() + ", not by key " + other.KeyID()}},
		"no checkpoint":   {lines[:30], keyFile + ".pub", []string{"no checkpoint line"}},
		"a forged checkpoint": {append(slices.Clone(lines[:30]), strings.Replace(lines[30], `\n30\n`, `\n29\n`, 1)), keyFile + ".pub",
			[]string{"does not match the checkpoint's text"}},
	} {
		f := writeFile(t, t.TempDir(), "audit.jsonl", []byte(strings.Join(tc.lines, "")))
		out, err := runAg("audit", "verify", "--file", f, "--key", tc.key)
		if err == nil {
			t.Errorf("%s: verified\n%s", name, out)
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v\nwant ...%s...", name, err, want)
			}
		}
	}

	if _, err := runAg("audit", "verify", "--file", file); err == nil || !strings.Contains(err.Error(), "--key is required") {
		t.Errorf("verify without --key: %v", err)
	}
	if _, err := runAg("audit", "verify", "--file", file, "--key", filepath.Join(dir, "missing.pub")); err == nil || !strings.Contains(err.Error(), "no such file, and not a verifier key") {
		t.Errorf("verify with a missing key file: %v", err)
	}
	if _, err := runAg("audit", "verify", "--file", filepath.Join(dir, "missing.jsonl"), "--key", signer.VerifierKey()); err == nil {
		t.Error("verified a missing file")
	}
}

// fakeAudit serves an audit log as the server does, from an auditLog: the events sealed, the
// checkpoint chosen, proofs from the stored hashes.
type fakeAudit struct {
	agwpv1connect.UnimplementedAuditServiceHandler
	mu         sync.Mutex
	log        *auditLog
	checkpoint int           // index in log.checkpoints
	changed    chan struct{} // closed by the next set; nil until a long poll waits for it
}

func (f *fakeAudit) set(l *auditLog, checkpoint int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log, f.checkpoint = l, checkpoint
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

// next answers a channel closed by the next set.
func (f *fakeAudit) next() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	return f.changed
}

func (f *fakeAudit) snapshot() (*auditLog, []audit.Event, audit.StoredCheckpoint) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.log, slices.Clone(f.log.events), f.log.checkpoints[f.checkpoint]
}

func (f *fakeAudit) ListAuditEvents(ctx context.Context, req *agwpv1.ListAuditEventsRequest) (*agwpv1.ListAuditEventsResponse, error) {
	wait := time.NewTimer(req.GetWait().AsDuration())
	defer wait.Stop()
	for {
		// Taken before the events are read, so that a set in between still ends the wait.
		next := f.next()
		_, events, _ := f.snapshot()
		out := &agwpv1.ListAuditEventsResponse{}
		for _, e := range events {
			if e.Seq <= req.GetAfterSeq() || len(out.Events) >= int(max(req.GetPageSize(), 1)) {
				continue
			}
			pe := &agwpv1.AuditEvent{
				Seq: e.Seq, Time: timestamppb.New(e.Time), Principal: e.Principal, Holder: e.Holder, Action: e.Action,
				Subject: e.Subject, PrevHash: e.PrevHash, Hash: e.Hash,
			}
			if e.Details != nil {
				pe.Details = &structpb.Struct{}
				if err := pe.Details.UnmarshalJSON(e.Details); err != nil {
					return nil, err
				}
			}
			out.Events = append(out.Events, pe)
		}
		if len(out.Events) > 0 {
			return out, nil
		}
		select {
		case <-next:
		case <-wait.C:
			return out, nil
		case <-ctx.Done():
			return out, nil
		}
	}
}

func (f *fakeAudit) GetCheckpoint(context.Context, *agwpv1.GetCheckpointRequest) (*agwpv1.GetCheckpointResponse, error) {
	l, _, cp := f.snapshot()
	return &agwpv1.GetCheckpointResponse{
		Size: cp.Size, HeadHash: cp.HeadHash, RootHash: cp.RootHash, Note: string(cp.Note),
		KeyId: l.signer.KeyID(), Origin: l.signer.Origin(), VerifierKey: l.signer.VerifierKey(),
	}, nil
}

func (f *fakeAudit) GetConsistencyProof(_ context.Context, req *agwpv1.GetConsistencyProofRequest) (*agwpv1.GetConsistencyProofResponse, error) {
	l, _, _ := f.snapshot()
	proof, err := audit.ConsistencyProof(req.GetOldSize(), req.GetNewSize(), l.readHashes)
	if err != nil {
		return nil, err
	}
	return &agwpv1.GetConsistencyProofResponse{OldSize: req.GetOldSize(), NewSize: req.GetNewSize(), Hashes: proof}, nil
}

func serveAudit(t *testing.T, f *fakeAudit) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(agwpv1connect.NewAuditServiceHandler(f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestAuditAgainstServer ensures `ag audit export` writes what verifies offline, `ag audit
// verify` checks the server's log and remembers its checkpoint, then accepts a log that grew and
// refuses one rewritten or rolled back since, and `ag audit tail` prints events, following new
// ones with -f.
func TestAuditAgainstServer(t *testing.T) {
	t.Parallel()
	signer, keyFile := newAuditKey(t)
	l := newAuditLog(t, signer, 10, 15)
	f := &fakeAudit{}
	f.set(l, 1)
	url := serveAudit(t, f)
	ag := func(args ...string) (string, error) {
		return runAg(append([]string{"--server", url, "--token", "t"}, args...)...)
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state", "audit.json")

	// Export: to stdout and to a file, the same bytes, which verify offline.
	out, err := ag("audit", "export")
	if err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	if want := l.export(t, l.events, l.checkpoints[1]); out != string(want) {
		t.Errorf("export:\n%s\nwant:\n%s", out, want)
	}
	file := filepath.Join(dir, "audit.jsonl")
	if out, err := ag("audit", "export", "--out", file); err != nil || !strings.Contains(out, "exported 25 events") {
		t.Fatalf("export --out: %v\n%s", err, out)
	}
	if data, err := os.ReadFile(file); err != nil || !bytes.Equal(data, l.export(t, l.events, l.checkpoints[1])) {
		t.Errorf("export --out wrote %q, %v", data, err)
	}
	if out, err := runAg("audit", "verify", "--file", file, "--key", keyFile+".pub"); err != nil {
		t.Errorf("verify the export: %v\n%s", err, out)
	}

	// Verify against the server, remembering the checkpoint.
	out, err = ag("audit", "verify", "--key", keyFile+".pub", "--state", state)
	if err != nil || !strings.Contains(out, "verified: 25 events of "+url) || !strings.Contains(out, "first verification: checkpoint remembered in "+state) {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v, %v", fi, err)
	}

	// The log grows: 10 more signed, 4 more sealed after the checkpoint served.
	l.seal(t, 10, nil)
	l.seal(t, 4, nil)
	f.set(l, 2)
	out, err = ag("audit", "verify", "--key", signer.VerifierKey(), "--state", state, "--json")
	if err != nil {
		t.Fatalf("verify a grown log: %v\n%s", err, out)
	}
	var report map[string]any
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatal(err)
	}
	if report["events"] != 39.0 || report["checkpointSize"] != 35.0 || report["unsignedEvents"] != 4.0 || report["previousCheckpointSize"] != 25.0 || report["stateFile"] != state {
		t.Errorf("report %v", report)
	}

	// Rolled back to an older checkpoint than the one remembered.
	f.set(l, 1)
	if out, err := ag("audit", "verify", "--key", keyFile+".pub", "--state", state); err == nil || !strings.Contains(err.Error(), "rolled back") {
		t.Errorf("verify a rolled back log: %v\n%s", err, out)
	}

	// Rewritten by a server holding the key: a new chain in which event 3 differs, signed. It
	// verifies on its own, but not against what was verified before.
	forged := newAuditLog(t, signer)
	for _, n := range []int{10, 15, 10} {
		forged.seal(t, n, func(e *audit.Event) {
			if e.ID == 2 {
				e.Subject = "job/forged"
			}
		})
	}
	f.set(forged, 2)
	if out, err := ag("audit", "verify", "--key", keyFile+".pub", "--state", filepath.Join(dir, "fresh.json")); err != nil {
		t.Errorf("the forged log on its own: %v\n%s", err, out)
	}
	out, err = ag("audit", "verify", "--key", keyFile+".pub", "--state", state)
	if err == nil || !strings.Contains(err.Error(), "event 35: ") || !strings.Contains(err.Error(), "verified before") {
		t.Errorf("verify a rewritten log: %v\n%s", err, out)
	}
	if data, _ := os.ReadFile(state); !strings.Contains(string(data), `"size": 35`) {
		t.Errorf("a failed verification changed the state file:\n%s", data)
	}

	// Another key than the server's.
	other, _ := newAuditKey(t)
	if _, err := ag("audit", "verify", "--key", other.VerifierKey(), "--state", filepath.Join(dir, "other.json")); err == nil || !strings.Contains(err.Error(), "the server says it signs with "+signer.VerifierKey()) {
		t.Errorf("verify with another key: %v", err)
	}

	// Tail: lines, JSON lines, and -f.
	f.set(l, 2)
	out, err = ag("audit", "tail", "--after", "36")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(got) != 3 || !strings.HasPrefix(got[0], "    37  2026-11-30T18:00:36.000000Z  ci|w1 ") || !strings.Contains(got[0], " job.claimed ") ||
		!strings.HasSuffix(got[0], ` job/job_36  {"claim":1,"lease_expires_at":"2026-11-30T18:10:00Z"}`) || !strings.Contains(got[1], " 38  ") {
		t.Errorf("tail:\n%s", out)
	}
	// The last events: -n reads from the checkpoint's size back, and prints the newest n.
	out, err = ag("audit", "tail", "-n", "2")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(got) != 2 || !strings.HasPrefix(got[0], "    38  ") || !strings.HasPrefix(got[1], "    39  ") {
		t.Errorf("tail -n 2:\n%s", out)
	}
	if out, err = ag("audit", "tail", "-n", "0"); err != nil || out != "" {
		t.Errorf("tail -n 0: %v\n%s", err, out)
	}
	if _, err = ag("audit", "tail", "-n", "2", "--after", "3"); err == nil || !strings.Contains(err.Error(), "give one") {
		t.Errorf("tail -n with --after: %v", err)
	}
	out, err = ag("audit", "tail", "--after", "38", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if line, _ := audit.ExportLine(l.events[38]); out != string(line)+"\n" {
		t.Errorf("tail --json:\n%s\nwant %s", out, line)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var buf syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- cli.Run(ctx, []string{"--server", url, "--token", "t", "audit", "tail", "-f", "--after", "37"}, &buf, &buf)
	}()
	waitUntil := func(what string, ok func() bool) {
		t.Helper()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(10 * time.Second); !ok(); <-tick.C {
			if time.Now().After(deadline) {
				t.Fatalf("waited for %s:\n%s", what, buf.String())
			}
		}
	}
	waitUntil("events 38 and 39", func() bool { return strings.Contains(buf.String(), "job/job_38") })
	next := newAuditLog(t, signer)
	next.events, next.hashes, next.head = slices.Clone(l.events), maps.Clone(l.hashes), l.head
	next.seal(t, 2, nil)
	f.set(next, 0)
	waitUntil("event 41", func() bool { return strings.Contains(buf.String(), "job/job_40") })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("tail -f ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tail -f did not stop when interrupted")
	}
	if n := strings.Count(buf.String(), "\n"); n != 4 {
		t.Errorf("tail -f printed %d lines:\n%s", n, buf.String())
	}
}

// TestAuditStatePerLog ensures `ag audit verify` without --state remembers each log apart, by
// its key: two servers of the same origin, each verified in turn, each found consistent with
// its own last checkpoint rather than one looking rewritten; and that the shared file of
// earlier builds is taken over by the log it belongs to, and ignored by the others.
func TestAuditStatePerLog(t *testing.T) {
	config := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", config)
	t.Setenv("HOME", config)
	dir, err := os.UserConfigDir()
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(dir, "ag")

	type logServer struct {
		signer *audit.Signer
		key    string
		log    *auditLog
		fake   *fakeAudit
		url    string
	}
	newServer := func(batches ...int) *logServer {
		s := &logServer{fake: &fakeAudit{}}
		s.signer, s.key = newAuditKey(t) // the same origin, ag-test, for every server
		s.log = newAuditLog(t, s.signer, batches...)
		s.fake.set(s.log, len(s.log.checkpoints)-1)
		s.url = serveAudit(t, s.fake)
		return s
	}
	verify := func(s *logServer) map[string]any {
		t.Helper()
		out, err := runAg("--server", s.url, "--token", "t", "audit", "verify", "--key", s.key+".pub", "--json")
		if err != nil {
			t.Fatalf("verify %s: %v\n%s", s.url, err, out)
		}
		var report map[string]any
		if err := json.Unmarshal([]byte(out), &report); err != nil {
			t.Fatalf("verify %s: %v\n%s", s.url, err, out)
		}
		return report
	}
	stateOf := func(s *logServer) string {
		return filepath.Join(dir, "audit-"+strings.ReplaceAll(s.signer.KeyID(), "+", "_")+".json")
	}

	a, b := newServer(10), newServer(7)
	if r := verify(a); r["stateFile"] != stateOf(a) || r["previousCheckpointSize"] != nil {
		t.Errorf("first verification of a: %v, want a state file of its own, %s", r, stateOf(a))
	}
	if r := verify(b); r["stateFile"] != stateOf(b) || r["previousCheckpointSize"] != nil {
		t.Errorf("first verification of b: %v, want a state file of its own, %s", r, stateOf(b))
	}
	a.log.seal(t, 5, nil)
	a.fake.set(a.log, 1)
	if r := verify(a); r["previousCheckpointSize"] != 10.0 || r["checkpointSize"] != 15.0 {
		t.Errorf("a grown: %v, want consistent with the 10 events verified before", r)
	}
	if r := verify(b); r["previousCheckpointSize"] != 7.0 {
		t.Errorf("b again: %v, want consistent with the 7 events verified before", r)
	}

	// The file of earlier builds, audit-<origin>.json, holding c's checkpoint: c takes it over,
	// d (another key, the same origin) starts afresh rather than failing on it.
	c, d := newServer(4), newServer(3)
	msg := c.log.checkpoints[0].Note
	legacy := filepath.Join(dir, "audit-ag-test.json")
	data, err := json.Marshal(map[string]any{"origin": "ag-test", "size": 4, "checkpoint": string(msg)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(legacy, data, 0o600); err != nil {
		t.Fatal(err)
	}
	c.log.seal(t, 2, nil)
	c.fake.set(c.log, 1)
	if r := verify(c); r["previousCheckpointSize"] != 4.0 || r["stateFile"] != stateOf(c) {
		t.Errorf("c with the state of an earlier build: %v, want consistent with its 4 events, remembered in %s", r, stateOf(c))
	}
	if r := verify(d); r["previousCheckpointSize"] != nil || r["stateFile"] != stateOf(d) {
		t.Errorf("d beside the state of an earlier build of another log: %v, want a first verification", r)
	}

	// The legacy file still guards c: rewritten, c does not verify against it.
	forged := newAuditLog(t, c.signer)
	forged.seal(t, 4, func(e *audit.Event) {
		if e.ID == 1 {
			e.Subject = "job/forged"
		}
	})
	if err := os.Remove(stateOf(c)); err != nil {
		t.Fatal(err)
	}
	c.fake.set(forged, 0)
	if out, err := runAg("--server", c.url, "--token", "t", "audit", "verify", "--key", c.key+".pub"); err == nil || !strings.Contains(err.Error(), legacy) {
		t.Errorf("c rewritten, with the state of an earlier build: %v, want a failure naming %s\n%s", err, legacy, out)
	}
}
