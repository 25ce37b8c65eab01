package storetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

// newEvents seals the log and answers the events since markLog.
func (b *abundle) newEvents(t *testing.T) []store.AuditEvent {
	t.Helper()
	b.sealAll(t)
	return b.auditEvents(t, b.mark)
}

// testMirrors checks a forge mirror's life: set (pending, the credential kept), a push's
// outcomes recorded (a pushed commit kept while a failure records none), the outcome of a push
// to a URL set again since ignored, a mirror that diverges recording it once, and removal.
func testMirrors(t *testing.T, newStore Factory) {
	b := setupAudit(t, newStore)
	b.createRepo(t, "web")
	b.createRepo(t, "api")
	_, err := b.rs.GetMirror(b.ctx, "web")
	wantErr(t, "GetMirror of a repository without one", err, store.ErrNotFound)
	_, err = b.rs.SetMirror(b.ctx, store.SetMirrorParams{Repository: "nope", URL: "https://forge.example/nope.git", Branch: "main"})
	wantErr(t, "SetMirror of an unknown repository", err, store.ErrNotFound)

	b.markLog(t)
	secret := []byte("forge-token-never-shown")
	m, err := b.rs.SetMirror(b.ctx, store.SetMirrorParams{Repository: "web", URL: "https://forge.example/web.git", Branch: "main", Credential: secret})
	if err != nil {
		t.Fatalf("SetMirror: %v", err)
	}
	want := store.Mirror{Repository: "web", URL: "https://forge.example/web.git", Branch: "main", Credential: secret,
		State: store.MirrorPending, UpdatedAt: b.clk.Now()}
	assertFields(t, "SetMirror", m, want)
	got, err := b.rs.GetMirror(b.ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	assertFields(t, "GetMirror", got, want)
	events := b.newEvents(t)
	if len(events) != 1 || events[0].Action != "repository.mirror_set" || bytes.Contains(events[0].Details, secret) ||
		!bytes.Contains(events[0].Details, []byte("https://forge.example/web.git")) {
		t.Fatalf("SetMirror recorded %+v, want one repository.mirror_set naming the URL and not the credential", events)
	}

	const commit = "0123456789abcdef0123456789abcdef01234567"
	b.clk.Advance(time.Second)
	record := func(p store.MirrorPushParams) {
		t.Helper()
		if err := b.rs.RecordMirrorPush(b.ctx, p); err != nil {
			t.Fatalf("RecordMirrorPush(%+v): %v", p, err)
		}
	}
	record(store.MirrorPushParams{Repository: "web", URL: m.URL, State: store.MirrorCurrent, PushedCommit: commit})
	record(store.MirrorPushParams{Repository: "web", URL: m.URL, State: store.MirrorFailing, LastError: "connection refused"})
	got, _ = b.rs.GetMirror(b.ctx, "web")
	want.State, want.PushedCommit, want.LastError, want.UpdatedAt = store.MirrorFailing, commit, "connection refused", b.clk.Now()
	assertFields(t, "GetMirror after a push and a failure", got, want)
	record(store.MirrorPushParams{Repository: "web", URL: "https://forge.example/old.git", State: store.MirrorCurrent, PushedCommit: "ffff"})
	if got, _ := b.rs.GetMirror(b.ctx, "web"); got.PushedCommit != commit || got.State != store.MirrorFailing {
		t.Fatalf("a push to a URL the mirror no longer has changed it: %+v", got)
	}

	b.markLog(t)
	record(store.MirrorPushParams{Repository: "web", URL: m.URL, State: store.MirrorDiverged, LastError: "the forge's main is at abc"})
	record(store.MirrorPushParams{Repository: "web", URL: m.URL, State: store.MirrorDiverged, LastError: "the forge's main is at abc"})
	if events := b.newEvents(t); len(events) != 1 || events[0].Action != "repository.mirror_diverged" || events[0].Subject != "repository/web" {
		t.Fatalf("a mirror diverging twice recorded %+v, want one repository.mirror_diverged", events)
	}

	if _, err := b.rs.SetMirror(b.ctx, store.SetMirrorParams{Repository: "api", URL: "https://forge.example/api.git", Branch: "trunk"}); err != nil {
		t.Fatal(err)
	}
	all, err := b.rs.ListMirrors(b.ctx)
	if err != nil || len(all) != 2 || all[0].Repository != "api" || all[1].Repository != "web" || all[0].Branch != "trunk" {
		t.Fatalf("ListMirrors = %+v, %v", all, err)
	}
	if _, err := b.rs.SetMirror(b.ctx, store.SetMirrorParams{Repository: "web"}); err != nil {
		t.Fatalf("SetMirror without a URL (remove): %v", err)
	}
	_, err = b.rs.GetMirror(b.ctx, "web")
	wantErr(t, "GetMirror of a removed mirror", err, store.ErrNotFound)
}
