package postgres_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/jackc/pgx/v5"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/postgres"
	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// candidatesMigration is the migration that brings candidates (0011_candidates.sql).
const candidatesMigration = 11

// TestMigrationToCandidatesKeepsTheQueue ensures that a database of schema 10, the one-at-a-time
// gate, upgrades with its queue as it stood: the VALIDATING change becomes the one live
// candidate it was, on the revision it was built on and with its job, and the queue goes on from
// there: the job's pass lands it, and the QUEUED change behind it is built on it.
func TestMigrationToCandidatesKeepsTheQueue(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	if err := postgres.MigrateTo(ctx, url, candidatesMigration-1); err != nil {
		t.Fatalf("migrate to schema %d: %v", candidatesMigration-1, err)
	}
	start := time.Date(2026, 5, 4, 8, 0, 0, 0, time.UTC)
	q := newOldQueue(t, start)
	conn := connect(t, url)
	q.write(t, conn)

	clk := clock.NewFake(start.Add(time.Hour))
	db := open(t, url, clk) // migrates
	var name string
	if err := conn.QueryRow(ctx, `SELECT name FROM schema_version WHERE version = $1`, candidatesMigration).Scan(&name); err != nil ||
		name != "0011_candidates.sql" {
		t.Fatalf("migration %d is %q (%v), want 0011_candidates.sql", candidatesMigration, name, err)
	}

	// The validating change is the one candidate it was.
	want := store.Candidate{ID: "cnd_" + q.validating.ID, Repository: q.name, State: store.CandidateValidating,
		Revision: q.candidate.ID, ParentRevision: q.mainline.ID, JobID: q.jobID, Changes: []string{q.validating.ID},
		CreatedAt: q.validating.UpdatedAt, UpdatedAt: q.validating.UpdatedAt}
	for _, p := range []store.ListCandidatesParams{{ChangeID: q.validating.ID}, {Repository: q.name}} {
		got, err := db.ListCandidates(ctx, p)
		if err != nil {
			t.Fatalf("ListCandidates(%+v) after the migration: %v", p, err)
		}
		if len(got) != 1 || !sameCandidate(got[0], want) {
			t.Fatalf("ListCandidates(%+v) after the migration = %+v; want the one candidate %+v", p, got, want)
		}
	}
	if got, err := db.ListCandidates(ctx, store.ListCandidatesParams{ChangeID: q.queued.ID}); err != nil || len(got) != 0 {
		t.Fatalf("ListCandidates of the queued change = %+v, %v; want none", got, err)
	}
	for _, w := range []struct {
		c         store.Change
		candidate string
	}{{q.validating, want.ID}, {q.queued, ""}} {
		got, err := db.GetChange(ctx, w.c.ID)
		if err != nil {
			t.Fatalf("GetChange(%s) after the migration: %v", w.c.ID, err)
		}
		if got.State != w.c.State || got.CandidateID != w.candidate || got.CandidateRevision != w.c.CandidateRevision ||
			got.JobID != w.c.JobID || got.BatchLimit != 0 {
			t.Fatalf("GetChange(%s) after the migration = %s, candidate %q, revision %q, job %q, batch limit %d; want %s, %q, %q, %q, 0",
				w.c.ID, got.State, got.CandidateID, got.CandidateRevision, got.JobID, got.BatchLimit,
				w.c.State, w.candidate, w.c.CandidateRevision, w.c.JobID)
		}
	}

	// The job passes: the candidate lands, and the queued change is built on it.
	job, err := db.ClaimJob(ctx, store.ClaimJobParams{Holder: "runner|w1", Kinds: []string{"validate"}, Lease: time.Minute})
	if err != nil || job == nil || job.ID != q.jobID {
		t.Fatalf("ClaimJob(validate) after the migration = %v, %v; want the candidate's job %s", job, err, q.jobID)
	}
	att := &store.Attestation{Digest: repo.Digest([]byte("passed " + job.ID)), Envelope: []byte("passed " + job.ID), JobID: job.ID}
	if _, err := db.CompleteJob(ctx, store.CompleteJobParams{JobID: job.ID, Holder: "runner|w1", ClaimNumber: job.ClaimNumber,
		Result: []byte(`{"exit_code": 0}`), Attestation: att}); err != nil {
		t.Fatalf("CompleteJob(%s): %v", job.ID, err)
	}
	clk.Advance(time.Second)
	var decided []string
	changed, err := gate.AdvanceWith(ctx, db, q.name, func([]byte) gate.Rules {
		return gate.Rules{
			Decide: func(c store.Change, candidate store.Revision, job store.Job, att *store.Attestation) gate.Verdict {
				decided = append(decided, c.ID+" "+candidate.ID+" "+job.ID)
				if job.State == store.JobCompleted && att != nil && string(job.Result) == `{"exit_code": 0}` {
					return gate.Verdict{Outcome: gate.VerdictPass}
				}
				return gate.Verdict{Outcome: gate.VerdictPending}
			},
			Job: func(c store.Change, candidate store.Revision, _ string, _ store.Revision) store.EnqueueJobParams {
				return store.EnqueueJobParams{Kind: "validate", Payload: []byte(`{"revision":"` + candidate.ID + `"}`),
					MaxAttempts: 1, UniqueKey: "validate:" + candidate.ID, EnqueuedBy: "gate"}
			},
			Depth: 4,
		}
	})
	if err != nil {
		t.Fatalf("AdvanceQueue after the migration: %v", err)
	}
	if len(decided) == 0 || decided[0] != q.validating.ID+" "+q.candidate.ID+" "+q.jobID {
		t.Fatalf("Decide was asked about %v; want first the validating change, its candidate and its job", decided)
	}
	if len(changed) != 2 || changed[0].ID != q.validating.ID || changed[0].State != store.ChangeIntegrated ||
		changed[1].ID != q.queued.ID || changed[1].State != store.ChangeValidating {
		t.Fatalf("AdvanceQueue after the migration answered %+v; want the validating change integrated, then the queued one validating", changed)
	}
	landed := changed[0]
	if landed.IntegratedRevision != q.candidate.ID || landed.AttestationDigest != att.Digest || landed.JobID != q.jobID {
		t.Fatalf("the migrated candidate landed as %s with attestation %q, job %s; want %s, %q, %s",
			landed.IntegratedRevision, landed.AttestationDigest, landed.JobID, q.candidate.ID, att.Digest, q.jobID)
	}
	r, err := db.GetRepository(ctx, q.name)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := db.GetRevision(ctx, q.name, q.candidate.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Mainline != q.candidate.ID || rev.GitCommit == "" || r.MainlineCommit != rev.GitCommit {
		t.Fatalf("the repository is at %s, commit %q; want the landed candidate %s and its commit %q", r.Mainline, r.MainlineCommit,
			q.candidate.ID, rev.GitCommit)
	}
	typ, data, err := db.ReadGitObject(ctx, plumbing.NewHash(rev.GitCommit))
	if err != nil || typ != plumbing.CommitObject {
		t.Fatalf("ReadGitObject(%s) = %s, %v; want the landed candidate's commit", rev.GitCommit, typ, err)
	}
	var commit object.Commit
	o := &plumbing.MemoryObject{}
	o.SetType(typ)
	if _, err := o.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := commit.Decode(o); err != nil {
		t.Fatal(err)
	}
	if commit.TreeHash.String() != q.candidate.GitTree || !slices.Equal(commit.ParentHashes, []plumbing.Hash{plumbing.NewHash(q.mainline.GitCommit)}) {
		t.Fatalf("the landed commit has the tree %s and the parents %v; want the candidate's tree %s on the old mainline commit %s",
			commit.TreeHash, commit.ParentHashes, q.candidate.GitTree, q.mainline.GitCommit)
	}
	if h, err := db.ListCandidates(ctx, store.ListCandidatesParams{ChangeID: q.validating.ID}); err != nil || len(h) != 1 ||
		h[0].ID != want.ID || h[0].State != store.CandidateLanded || h[0].AttestationDigest != att.Digest {
		t.Fatalf("the history of the migrated change is %+v, %v; want its candidate %s landed with the attestation", h, err, want.ID)
	}
	next, err := db.ListCandidates(ctx, store.ListCandidatesParams{ChangeID: q.queued.ID})
	if err != nil || len(next) != 1 || next[0].State != store.CandidateValidating || next[0].ParentRevision != q.candidate.ID ||
		next[0].Revision != changed[1].CandidateRevision || !slices.Equal(next[0].Changes, []string{q.queued.ID}) {
		t.Fatalf("the queued change's candidates are %+v, %v; want one validating on the landed candidate %s", next, err, q.candidate.ID)
	}
	built, err := db.GetRevision(ctx, q.name, next[0].Revision)
	if err != nil {
		t.Fatal(err)
	}
	if want := q.filesAfter(); !slices.Equal(built.Tree, want) {
		t.Fatalf("the queued change was built as %v, want %v", built.Tree, want)
	}
}

// sameCandidate reports whether got is want, field for field.
func sameCandidate(got, want store.Candidate) bool {
	return got.ID == want.ID && got.Repository == want.Repository && got.State == want.State && got.Revision == want.Revision &&
		got.ParentRevision == want.ParentRevision && got.JobID == want.JobID && slices.Equal(got.Changes, want.Changes) &&
		got.AttestationDigest == want.AttestationDigest && got.Reason == want.Reason &&
		got.CreatedAt.Equal(want.CreatedAt) && got.UpdatedAt.Equal(want.UpdatedAt)
}

// oldQueue is what the build of schema 10 kept of a repository with a policy whose gate
// validated one change at a time: a mainline of two revisions; a change VALIDATING, made on
// the first and built on the second (its candidate revision, without a commit), with its
// validate job queued; and a change QUEUED behind it. Its git objects are in objs.
type oldQueue struct {
	name                  string
	created               time.Time
	first, mainline       store.Revision
	candidate             store.Revision
	integrated            store.Change // the change of the mainline's second revision
	validating, queued    store.Change
	edits                 map[string][]repo.FileEdit // by change
	jobID                 string
	jobCreated            time.Time
	objs                  *memory.Storage
	files, validatedFiles map[string]string // the mainline's and the candidate's
	queuedFiles           map[string]string // what the queued change writes
}

func newOldQueue(t *testing.T, start time.Time) oldQueue {
	t.Helper()
	at := func(minute int) time.Time { return start.Add(time.Duration(minute) * time.Minute) }
	q := oldQueue{name: "gated", created: at(0), objs: memory.NewStorage(), edits: map[string][]repo.FileEdit{},
		files:          map[string]string{"README.md": "# gated\n"},
		validatedFiles: map[string]string{"README.md": "# gated\n", "src/a.go": "package src\n\nconst A = 1\n"},
		queuedFiles:    map[string]string{"src/b.go": "package src\n\nconst B = 2\n"},
	}
	writeTree := func(files map[string]string) string {
		contents := map[string][]byte{}
		for p, c := range files {
			contents[p] = []byte(c)
		}
		id, err := gitstore.WriteFiles(q.objs, contents)
		if err != nil {
			t.Fatal(err)
		}
		return id.String()
	}
	q.first = store.Revision{ID: store.NewID("rev"), Repository: q.name, Holder: "admin", CreatedAt: at(0)}
	tree, commit, _, err := store.FirstRevision(q.objs, store.CreateRepositoryParams{Name: q.name, CreatedBy: "admin"},
		q.first.ID, at(0), "")
	if err != nil {
		t.Fatal(err)
	}
	q.first.GitTree, q.first.GitCommit = tree.String(), commit.String()

	change := func(state store.ChangeState, base store.Revision, author string, files map[string]string, created, updated time.Time) store.Change {
		c := store.Change{ID: store.NewID("chg"), Repository: q.name, State: state, BaseRevision: base.ID, Holder: author,
			Message: "change of " + author, CreatedAt: created, UpdatedAt: updated}
		for p, content := range files {
			c.Paths = append(c.Paths, p)
			if _, err := gitstore.WriteBlob(q.objs, []byte(content)); err != nil {
				t.Fatal(err)
			}
			q.edits[c.ID] = append(q.edits[c.ID], repo.FileEdit{Path: p, Digest: repo.Digest([]byte(content)), Size: uint64(len(content))})
		}
		slices.Sort(c.Paths)
		return c
	}
	q.integrated = change(store.ChangeIntegrated, q.first, "alice|w1", q.files, at(1), at(1))
	q.mainline = store.Revision{ID: store.NewID("rev"), Repository: q.name, Parent: q.first.ID, ChangeID: q.integrated.ID,
		Holder: q.integrated.Holder, GitTree: writeTree(q.files), CreatedAt: at(1)}
	if q.mainline.GitCommit, err = store.WriteRevisionCommit(q.objs, q.mainline, q.first.GitCommit,
		store.CommitInfo{Message: q.integrated.Message, FencingTokens: []uint64{1}, AuthoredAt: at(1), CommittedAt: at(1)}); err != nil {
		t.Fatal(err)
	}
	q.integrated.CandidateRevision, q.integrated.IntegratedRevision = q.mainline.ID, q.mainline.ID

	q.validating = change(store.ChangeValidating, q.first, "bob|w2", map[string]string{"src/a.go": q.validatedFiles["src/a.go"]}, at(2), at(3))
	q.candidate = store.Revision{ID: store.NewID("rev"), Repository: q.name, Parent: q.mainline.ID, ChangeID: q.validating.ID,
		Holder: q.validating.Holder, GitTree: writeTree(q.validatedFiles), CreatedAt: at(3)}
	q.jobID, q.jobCreated = store.NewID("job"), at(3)
	q.validating.CandidateRevision, q.validating.JobID = q.candidate.ID, q.jobID

	q.queued = change(store.ChangeQueued, q.mainline, "carol|w3", q.queuedFiles, at(4), at(4))
	return q
}

// filesAfter answers the tree the queued change is built as, on the candidate.
func (q oldQueue) filesAfter() repo.Tree {
	var t repo.Tree
	for _, files := range []map[string]string{q.validatedFiles, q.queuedFiles} {
		for p, c := range files {
			t = append(t, repo.Entry{Path: p, Digest: repo.Digest([]byte(c)), Size: uint64(len(c))})
		}
	}
	slices.SortFunc(t, func(a, b repo.Entry) int { return strings.Compare(a.Path, b.Path) })
	return t
}

// write writes q with the statements of the build of schema 10.
func (q oldQueue) write(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	exec := func(query string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(t.Context(), query, args...); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
	}
	exec(`INSERT INTO repositories (name, mainline, validation, lease_counter, created_at) VALUES ($1, $2, $3, 3, $4)`,
		q.name, q.mainline.ID, []byte(`{"command": ["make", "test"]}`), q.created)
	iter, err := q.objs.IterEncodedObjects(plumbing.AnyObject)
	if err != nil {
		t.Fatal(err)
	}
	if err := iter.ForEach(func(o plumbing.EncodedObject) error {
		data, err := gitstore.ObjectData(o)
		if err != nil {
			return err
		}
		id := o.Hash()
		if o.Type() == plumbing.BlobObject {
			exec(`INSERT INTO blobs (digest, content, size, git_id) VALUES ($1, $2, $3, $4)`, repo.Digest(data), data, len(data), id[:])
			return nil
		}
		exec(`INSERT INTO git_objects (id, type, data) VALUES ($1, $2, $3)`, id[:], int16(o.Type()), data)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []store.Revision{q.first, q.mainline, q.candidate} {
		digest := ""
		if r.ID == q.first.ID {
			digest = repo.Tree{}.Digest()
		}
		exec(`INSERT INTO revisions (id, repository, parent, change_id, author, tree_digest, git_tree, git_commit, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, r.ID, r.Repository, r.Parent, r.ChangeID, r.Holder, digest, r.GitTree,
			r.GitCommit, r.CreatedAt)
	}
	payload, err := json.Marshal(map[string]string{"change_id": q.validating.ID, "revision": q.candidate.ID, "git_tree": q.candidate.GitTree})
	if err != nil {
		t.Fatal(err)
	}
	exec(`INSERT INTO jobs (id, kind, state, payload, priority, max_attempts, run_after, created_at, updated_at, enqueued_by, unique_key)
		VALUES ($1, 'validate', 'queued', $2, 10, 2, $3, $3, $3, 'gate', $4)`, q.jobID, string(payload), q.jobCreated,
		"validate:"+q.candidate.ID)
	for i, c := range []store.Change{q.integrated, q.validating, q.queued} {
		var edits any // the first change was integrated before the policy was set: no edits kept
		if c.State != store.ChangeIntegrated {
			e, err := json.Marshal(q.edits[c.ID])
			if err != nil {
				t.Fatal(err)
			}
			edits = string(e)
		}
		exec(`INSERT INTO changes (id, repository, state, base_revision, candidate_revision, integrated_revision, author,
			message, paths, job_id, edits, fencing_tokens, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12, $13, $14)`,
			c.ID, c.Repository, string(c.State), c.BaseRevision, c.CandidateRevision, c.IntegratedRevision, c.Holder,
			c.Message, c.Paths, c.JobID, edits, fmt.Sprintf("[%d]", i+1), c.CreatedAt, c.UpdatedAt)
	}
}
