package chaos

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/store"
)

// finalState is what the checks read after the run, through the API with the admin token.
type finalState struct {
	jobs    map[string]*agwpv1.Job
	changes map[string]*agwpv1.Change

	events      []event
	rawEvents   []store.AuditEvent
	checkpoint  *agwpv1.GetCheckpointResponse
	verifierKey string // from the audit key's .pub file

	gated        []revision // the gated repository's mainline, newest first, down to its root
	free         []revision // the free repository's
	attestations map[string]*agwpv1.GetAttestationResponse
	workerKeys   [][]byte          // raw Ed25519 public keys of the ag-worker processes, from their .pub files
	gatedFiles   map[string][]byte // the gated mainline's files
}

// revision is a revision of a mainline's chain.
type revision struct {
	id, parent, change, treeDigest string
	entries                        int
}

// event is an audit event with its details decoded.
type event struct {
	store.AuditEvent
	det map[string]any
}

func (e event) subjectID() string {
	_, id, _ := strings.Cut(e.Subject, "/")
	return id
}

func (e event) str(key string) string {
	s, _ := e.det[key].(string)
	return s
}

func (e event) num(key string) (uint64, bool) {
	n, ok := e.det[key].(json.Number)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(n.String(), 10, 64)
	return v, err == nil
}

func (e event) strs(key string) []string {
	l, _ := e.det[key].([]any)
	out := make([]string, 0, len(l))
	for _, v := range l {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func (e event) time(key string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, e.str(key))
	return t, err == nil
}

// collect reads the final state. Before it reads the audit log it waits until the sealer
// caught up, so that the log holds every change the run made.
func (r *run) collect(ctx context.Context) (*finalState, error) {
	fs := &finalState{jobs: map[string]*agwpv1.Job{}, changes: map[string]*agwpv1.Change{},
		attestations: map[string]*agwpv1.GetAttestationResponse{}, gatedFiles: map[string][]byte{}}
	c := r.admin[0]

	vk, err := os.ReadFile(r.auditKey + ".pub")
	if err != nil {
		return nil, fmt.Errorf("the audit verifier key: %w", err)
	}
	fs.verifierKey = strings.TrimSpace(string(vk))

	// The audit log, once sealed up to a checkpoint that covers it all and nothing changes.
	deadline := time.Now().Add(20 * time.Second)
	for {
		cp, err := c.Audit.GetCheckpoint(ctx, &agwpv1.GetCheckpointRequest{})
		if err != nil {
			return nil, fmt.Errorf("audit checkpoint: %w", err)
		}
		events, err := r.auditEvents(ctx)
		if err != nil {
			return nil, err
		}
		stable := fs.checkpoint != nil && len(events) == len(fs.rawEvents) && cp.GetSize() == fs.checkpoint.GetSize()
		fs.checkpoint, fs.rawEvents = cp, events
		if (stable && cp.GetSize() == uint64(len(events))) || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, e := range fs.rawEvents {
		ev := event{AuditEvent: e}
		if len(e.Details) > 0 {
			dec := json.NewDecoder(bytes.NewReader(e.Details))
			dec.UseNumber()
			if err := dec.Decode(&ev.det); err != nil {
				return nil, fmt.Errorf("audit event %d: details: %w", e.Seq, err)
			}
		}
		fs.events = append(fs.events, ev)
	}

	for page := ""; ; {
		res, err := c.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{PageSize: 1000, PageToken: page})
		if err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		for _, j := range res.GetJobs() {
			fs.jobs[j.GetId()] = j
		}
		if page = res.GetNextPageToken(); page == "" {
			break
		}
	}
	for _, repo := range []string{gatedRepo, freeRepo} {
		for page := ""; ; {
			res, err := c.Repos.ListChanges(ctx, &agwpv1.ListChangesRequest{Repository: repo, PageSize: 1000, PageToken: page})
			if err != nil {
				return nil, fmt.Errorf("list changes of %s: %w", repo, err)
			}
			for _, ch := range res.GetChanges() {
				fs.changes[ch.GetId()] = ch
			}
			if page = res.GetNextPageToken(); page == "" {
				break
			}
		}
	}

	if fs.gated, err = r.mainlineChain(ctx, gatedRepo, fs.gatedFiles); err != nil {
		return nil, err
	}
	if fs.free, err = r.mainlineChain(ctx, freeRepo, nil); err != nil {
		return nil, err
	}
	for _, rv := range fs.gated {
		ch, ok := fs.changes[rv.change]
		if !ok || ch.GetAttestationDigest() == "" {
			continue
		}
		d := ch.GetAttestationDigest()
		att, err := c.Jobs.GetAttestation(ctx, &agwpv1.GetAttestationRequest{Digest: d})
		if err != nil {
			return nil, fmt.Errorf("get attestation %s of change %s: %w", d, ch.GetId(), err)
		}
		fs.attestations[d] = att
	}

	pubs, _ := filepath.Glob(filepath.Join(r.dir, "workers", "*.pub"))
	for _, p := range pubs {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		k, err := attest.ParsePublicKey(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		fs.workerKeys = append(fs.workerKeys, []byte(ed25519.PublicKey(k)))
	}
	return fs, nil
}

// mainlineChain answers the repository's mainline from its head down to the root, by the
// parent links, and puts the head's files into files when it is not nil.
func (r *run) mainlineChain(ctx context.Context, name string, files map[string][]byte) ([]revision, error) {
	c := r.admin[0]
	repo, err := c.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: name})
	if err != nil {
		return nil, fmt.Errorf("get repository %s: %w", name, err)
	}
	var chain []revision
	seen := map[string]bool{}
	for rev := repo.GetRepository().GetMainline(); rev != ""; {
		if seen[rev] {
			return nil, fmt.Errorf("the mainline of %s loops back to revision %s", name, rev)
		}
		seen[rev] = true
		t, err := c.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: name, Revision: rev})
		if err != nil {
			return nil, fmt.Errorf("get tree %s@%s: %w", name, rev, err)
		}
		chain = append(chain, revision{id: rev, parent: t.GetParent(), change: t.GetChangeId(), treeDigest: t.GetTreeDigest(), entries: len(t.GetEntries())})
		if len(chain) == 1 && files != nil {
			for _, e := range t.GetEntries() {
				b, err := c.Repos.GetBlob(ctx, &agwpv1.GetBlobRequest{Digest: e.GetDigest()})
				if err != nil {
					return nil, fmt.Errorf("get blob %s of %s: %w", e.GetDigest(), e.GetPath(), err)
				}
				files[e.GetPath()] = b.GetContent()
			}
		}
		rev = t.GetParent()
	}
	return chain, nil
}

// auditEvents answers every sealed audit event, by seq.
func (r *run) auditEvents(ctx context.Context) ([]store.AuditEvent, error) {
	var out []store.AuditEvent
	var after uint64
	for {
		res, err := r.admin[0].Audit.ListAuditEvents(ctx, &agwpv1.ListAuditEventsRequest{AfterSeq: after, PageSize: 1000})
		if err != nil {
			return nil, fmt.Errorf("list audit events after %d: %w", after, err)
		}
		if len(res.GetEvents()) == 0 {
			return out, nil
		}
		for _, pe := range res.GetEvents() {
			if pe.GetSeq() <= after {
				return nil, fmt.Errorf("the server listed audit event %d after event %d", pe.GetSeq(), after)
			}
			e, err := storeAuditEvent(pe)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
			after = e.Seq
		}
	}
}

// storeAuditEvent answers the event as the store holds it: its details as stored
// (details_json), or else re-encoded from the Struct.
func storeAuditEvent(e *agwpv1.AuditEvent) (store.AuditEvent, error) {
	out := store.AuditEvent{
		Seq: e.GetSeq(), Time: e.GetTime().AsTime(), Principal: e.GetPrincipal(), Holder: e.GetHolder(),
		Action: e.GetAction(), Subject: e.GetSubject(), PrevHash: slices.Clone(e.GetPrevHash()), Hash: slices.Clone(e.GetHash()),
	}
	if e.GetDetailsJson() != "" {
		out.Details = []byte(e.GetDetailsJson())
	} else if e.GetDetails() != nil {
		d, err := protojson.Marshal(e.GetDetails())
		if err != nil {
			return store.AuditEvent{}, fmt.Errorf("audit event %d: details: %w", e.GetSeq(), err)
		}
		out.Details = d
	}
	return out, nil
}
