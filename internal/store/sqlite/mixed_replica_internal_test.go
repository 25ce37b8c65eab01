package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// TestABatchAnOldReplicaLandedForItsFirstChangeIsIntegratedWhole ensures that when a replica of
// the version before candidates lands a batch candidate by its rules (the mainline moves to the
// candidate, and only the oldest validating change is integrated), the next advance integrates
// the batch's other changes, whose edits are on the mainline, instead of rebuilding and
// rejecting them as conflicts.
func TestABatchAnOldReplicaLandedForItsFirstChangeIsIntegratedWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ag.db")
	db, err := Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := db.CreateRepository(ctx, store.CreateRepositoryParams{Name: "web", CreatedBy: "admin",
		Validation: []byte(`{"command": ["make", "test"], "timeout": "60s"}`)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := db.AcquireLease(ctx, store.AcquireLeaseParams{Repository: "web", Paths: []string{"src/"}, Holder: "alice|w1", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var changes []store.Change
	for _, name := range []string{"src/a.go", "src/b.go"} {
		content := []byte("package src // " + name)
		sum := sha256.Sum256(content)
		digest := "sha256:" + hex.EncodeToString(sum[:])
		c, err := db.Integrate(ctx, store.IntegrateParams{Repository: "web", BaseRevision: r.Mainline, Holder: "alice|w1",
			FencingTokens: []uint64{l.FencingToken}, Paths: []string{name}, Message: "edit " + name,
			Blobs: []store.Blob{{Digest: digest, Content: content}},
			Edits: []repo.FileEdit{{Path: name, Digest: digest, Size: uint64(len(content))}}})
		if err != nil {
			t.Fatal(err)
		}
		changes = append(changes, c)
	}
	rules := gate.Rules{Depth: 1, Batch: 2,
		Decide: func(store.Change, store.Revision, store.Job, *store.Attestation) gate.Verdict {
			return gate.Verdict{Outcome: gate.VerdictPending}
		},
		Job: func(c store.Change, candidate store.Revision, _ string, _ store.Revision) store.EnqueueJobParams {
			return store.EnqueueJobParams{Kind: "validate", MaxAttempts: 1, EnqueuedBy: "alice"}
		},
	}
	built, err := gate.AdvanceWith(ctx, db, "web", func([]byte) gate.Rules { return rules })
	if err != nil || len(built) != 2 || built[0].CandidateID != built[1].CandidateID {
		t.Fatalf("AdvanceQueue = %v, %v; want both changes in one batch", built, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// The old replica's pass: the mainline moves to the candidate, and the oldest validating
	// change alone is integrated.
	raw, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	cand := built[0].CandidateRevision
	for _, q := range []string{
		`UPDATE repositories SET mainline = '` + cand + `' WHERE name = 'web'`,
		`UPDATE changes SET state = 'integrated', integrated_revision = '` + cand + `' WHERE id = '` + changes[0].ID + `'`,
	} {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := gate.AdvanceWith(ctx, db, "web", func([]byte) gate.Rules { return rules })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != changes[1].ID || got[0].State != store.ChangeIntegrated || got[0].IntegratedRevision != cand {
		t.Fatalf("AdvanceQueue after the old replica's landing answered %+v; want %s integrated as %s", got, changes[1].ID, cand)
	}
	h, err := db.ListCandidates(ctx, store.ListCandidatesParams{ChangeID: changes[1].ID})
	if err != nil || len(h) != 1 || h[0].State != store.CandidateLanded {
		t.Fatalf("the batch's candidates = %+v, %v; want it landed", h, err)
	}
}
