package cli_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/cli"
)

// leaseOut is a lease in the JSON of `ag lease ... --json` and `ag status --json`.
type leaseOut struct {
	ID        string    `json:"id"`
	Paths     []string  `json:"paths"`
	Holder    string    `json:"holder"`
	Token     uint64    `json:"fencingToken,string"`
	State     string    `json:"state"`
	ExpiresAt time.Time `json:"expiresAt"`
}

type editOut struct {
	Path     string `json:"path"`
	Status   string `json:"status"`
	Conflict bool   `json:"conflict"`
}

type statusOut struct {
	Repository   string     `json:"repository"`
	Holder       string     `json:"holder"`
	BaseRevision string     `json:"baseRevision"`
	Mainline     string     `json:"mainline"`
	UpToDate     bool       `json:"upToDate"`
	Edits        []editOut  `json:"edits"`
	Leases       []leaseOut `json:"leases"`
}

type syncOut struct {
	From      string   `json:"from"`
	To        string   `json:"to"`
	Applied   bool     `json:"applied"`
	Updated   []string `json:"updated"`
	Deleted   []string `json:"deleted"`
	Merged    []string `json:"merged"`
	Kept      []string `json:"kept"`
	Conflicts []struct {
		Path    string `json:"path"`
		Reason  string `json:"reason"`
		Markers bool   `json:"markers"`
	} `json:"conflicts"`
}

// TestJSONOutputs ensures status, sync, lease acquire, renew and release, diff and revert print
// the JSON docs/cli.md documents, and that it says what happened.
func TestJSONOutputs(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "d/c.txt": "c\n"})
	alice, bob := e.agent("alice"), e.agent("bob")

	var l leaseOut
	decode(t, "ag lease acquire --json", alice.must("lease", "acquire", "a.txt", "--json"), &l)
	if l.ID == "" || l.Holder != "alice|alice" || !slices.Equal(l.Paths, []string{"a.txt"}) || l.State != "LEASE_STATE_ACTIVE" || l.Token == 0 {
		t.Errorf("ag lease acquire --json: %+v; want an active lease on a.txt held by alice|alice with a token", l)
	}
	var renewed struct{ Leases []leaseOut }
	decode(t, "ag lease renew --json", alice.must("lease", "renew", "--ttl", "10m", "--json"), &renewed)
	if len(renewed.Leases) != 1 || renewed.Leases[0].ID != l.ID || !renewed.Leases[0].ExpiresAt.After(l.ExpiresAt) {
		t.Errorf("ag lease renew --json: %+v; want lease %s with a later expiry than %v", renewed, l.ID, l.ExpiresAt)
	}

	alice.write("a.txt", "a, alice's\n")
	alice.write("new.txt", "new\n")
	var st statusOut
	decode(t, "ag status --json", alice.must("status", "--json"), &st)
	wantEdits := []editOut{{Path: "a.txt", Status: "modified"}, {Path: "new.txt", Status: "added"}}
	if st.Repository != "app" || st.Holder != "alice" || !st.UpToDate || st.Mainline != st.BaseRevision ||
		!slices.Equal(st.Edits, wantEdits) || len(st.Leases) != 1 || st.Leases[0].ID != l.ID {
		t.Errorf("ag status --json: %+v; want app up to date, edits %v, lease %s", st, wantEdits, l.ID)
	}

	var diff struct {
		BaseRevision string `json:"baseRevision"`
		Files        []struct {
			Path, Status, Diff string
			Binary             bool
		} `json:"files"`
	}
	decode(t, "ag diff --json", alice.must("diff", "--json"), &diff)
	if diff.BaseRevision != st.BaseRevision || len(diff.Files) != 2 || diff.Files[0].Path != "a.txt" || diff.Files[0].Status != "modified" ||
		!strings.Contains(diff.Files[0].Diff, "-a\n+a, alice's\n") || diff.Files[1].Status != "added" || !strings.Contains(diff.Files[1].Diff, "--- /dev/null\n") {
		t.Errorf("ag diff --json: %+v; want a.txt modified and new.txt added, with their diffs", diff)
	}

	var released struct {
		Released []leaseOut `json:"released"`
		Dropped  []struct {
			ID     string   `json:"id"`
			Paths  []string `json:"paths"`
			Reason string   `json:"reason"`
		} `json:"dropped"`
	}
	decode(t, "ag lease release --json", alice.must("lease", "release", "--json"), &released)
	if len(released.Released) != 1 || released.Released[0].ID != l.ID || released.Released[0].State != "LEASE_STATE_RELEASED" || len(released.Dropped) != 0 {
		t.Errorf("ag lease release --json: %+v; want lease %s released, none dropped", released, l.ID)
	}

	var reverted struct{ Reverted []editOut }
	decode(t, "ag revert --json", alice.must("revert", "new.txt", "--json"), &reverted)
	if !slices.Equal(reverted.Reverted, []editOut{{Path: "new.txt", Status: "added"}}) || alice.read("new.txt") != "" {
		t.Errorf("ag revert new.txt --json: %+v, new.txt now %q; want new.txt removed", reverted, alice.read("new.txt"))
	}

	bob.integrate("bob's b", "b.txt")
	bob.write("d/c.txt", "c, bob's\n")
	bob.integrate("bob's c", "d/")
	var s syncOut
	decode(t, "ag sync --json", alice.must("sync", "--json"), &s)
	if s.From != st.BaseRevision || s.To == s.From || !s.Applied || !slices.Equal(s.Updated, []string{"d/c.txt"}) ||
		len(s.Deleted)+len(s.Merged)+len(s.Kept)+len(s.Conflicts) != 0 {
		t.Errorf("ag sync --json: %+v; want applied, from %s, d/c.txt updated and nothing else", s, st.BaseRevision)
	}
	// b.txt: bob's integration kept its content, so only c.txt changed.
	decode(t, "a second ag sync --json", alice.must("sync", "--json"), &s)
	if s.From != s.To || !s.Applied || len(s.Updated) != 0 {
		t.Errorf("a second ag sync --json: %+v; want applied with nothing updated", s)
	}
}

// TestDiffRevertAndIntegratePaths ensures `ag diff` shows local edits as a unified diff against
// the base, `ag revert` puts edited, deleted and added files back as the base has them, and
// `ag integrate PATH` sends only the edits under PATH, the others staying local edits: one
// unleased file no longer blocks the rest.
func TestDiffRevertAndIntegratePaths(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, map[string]string{"a.txt": "one\ntwo\nthree\n", "b.txt": "b\n", "src/c.txt": "c\n", "src/d.txt": "d\n"})
	alice := e.agent("alice")
	alice.write("a.txt", "one\n2\nthree\n")
	alice.write("src/new.txt", "new\n")
	if err := removeAll(alice.dir, "src/d.txt"); err != nil {
		t.Fatal(err)
	}
	want := "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
	if out := alice.must("diff", "a.txt"); out != want {
		t.Errorf("ag diff a.txt printed:\n%s\nwant:\n%s", out, want)
	}
	out := alice.must("diff", "src/")
	if !strings.Contains(out, "--- /dev/null\n+++ b/src/new.txt\n@@ -0,0 +1 @@\n+new\n") ||
		!strings.Contains(out, "--- a/src/d.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-d\n") || strings.Contains(out, "a.txt") {
		t.Errorf("ag diff src/ printed:\n%s\nwant src/new.txt added and src/d.txt deleted, nothing of a.txt", out)
	}

	// Only src/ is integrated, under a lease of src/ alone; a.txt stays a local edit.
	alice.must("lease", "acquire", "src/")
	if _, errOut, code := alice.run("integrate", "-m", "everything"); code != cli.ExitLease || !strings.Contains(errOut, "a.txt") {
		t.Errorf("ag integrate of every edit, a.txt unleased: exit %d, want 3 naming a.txt\n%s", code, errOut)
	}
	out = alice.must("integrate", "-m", "src only", "src/")
	if !regexp.MustCompile(`^change \S+ integrated: 2 paths, mainline \S+\n$`).MatchString(out) {
		t.Errorf("ag integrate src/ printed %q, want 2 paths integrated", out)
	}
	var st statusOut
	decode(t, "ag status --json", alice.must("status", "--json"), &st)
	if !st.UpToDate || !slices.Equal(st.Edits, []editOut{{Path: "a.txt", Status: "modified"}}) {
		t.Errorf("after integrating src/: %+v; want up to date with a.txt the only local edit", st)
	}

	// Revert: a.txt back to the base, a new file removed, a deleted one restored.
	alice.write("b.txt", "b, edited\n")
	alice.write("added.txt", "added\n")
	if err := removeAll(alice.dir, "src/c.txt"); err != nil {
		t.Fatal(err)
	}
	out = alice.must("revert", "a.txt", "added.txt", "src/")
	for _, line := range []string{"reverted a.txt (modified)", "removed added.txt (added)", "restored src/c.txt (deleted)"} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("ag revert printed:\n%s\nwant the line %q", out, line)
		}
	}
	if alice.read("a.txt") != "one\ntwo\nthree\n" || alice.read("added.txt") != "" || alice.read("src/c.txt") != "c\n" {
		t.Errorf("after ag revert: a.txt %q, added.txt %q, src/c.txt %q; want the base's a.txt and c.txt, no added.txt",
			alice.read("a.txt"), alice.read("added.txt"), alice.read("src/c.txt"))
	}
	decode(t, "ag status --json", alice.must("status", "--json"), &st)
	if !slices.Equal(st.Edits, []editOut{{Path: "b.txt", Status: "modified"}}) {
		t.Errorf("after ag revert: edits %v; want b.txt alone, which was not named", st.Edits)
	}
}

// TestSyncMerges ensures `ag sync` merges a text file that the mainline and a local edit both
// changed in different places, keeping it a local edit on the new mainline that integrates;
// refuses, changing nothing, when the changes overlap; with --merge writes the conflict between
// git's diff3 markers, exits 4, and has status, diff and integrate say so; and resolves with
// --ours (back to the local content) and --theirs (the mainline's).
func TestSyncMerges(t *testing.T) {
	t.Parallel()
	base := "one\ntwo\nthree\nfour\nfive\nsix\nseven\n"
	e := newCLIEnv(t, map[string]string{"a.txt": base, "bin.dat": "\x00bin\n"})
	alice, bob := e.agent("alice"), e.agent("bob")

	// A clean merge: bob changes the top, alice the bottom.
	alice.write("a.txt", strings.Replace(base, "seven", "SEVEN", 1))
	bob.write("a.txt", strings.Replace(base, "one", "ONE", 1))
	bob.integrate("bob: ONE", "a.txt")
	out := alice.must("sync")
	if !strings.Contains(out, "merged with your edits, still local edits: a.txt\n") {
		t.Errorf("ag sync with a clean merge printed %q, want a.txt merged", out)
	}
	merged := strings.Replace(strings.Replace(base, "one", "ONE", 1), "seven", "SEVEN", 1)
	if got := alice.read("a.txt"); got != merged {
		t.Errorf("after the merge a.txt holds %q, want %q", got, merged)
	}
	alice.integrate("alice: SEVEN", "a.txt")
	bob.must("sync")
	if got := bob.read("a.txt"); got != merged {
		t.Errorf("bob's a.txt after alice integrated the merge: %q, want %q", got, merged)
	}

	// Overlapping changes: refused, nothing changed.
	alice.write("a.txt", strings.Replace(merged, "four", "four, alice's", 1))
	bob.write("a.txt", strings.Replace(merged, "four", "four, bob's", 1))
	bob.integrate("bob: four", "a.txt")
	var s syncOut
	out, errOut, code := alice.run("sync", "--json")
	decode(t, "ag sync --json with a conflict", out, &s)
	if code != cli.ExitConflict || s.Applied || len(s.Conflicts) != 1 || s.Conflicts[0].Path != "a.txt" || s.Conflicts[0].Markers ||
		!strings.Contains(errOut, "ag sync --merge") {
		t.Errorf("ag sync over an overlapping edit: exit %d, %+v\n%s\nwant exit 4, not applied, a.txt in conflict, and the ways out", code, s, errOut)
	}
	aliceFour := strings.Replace(merged, "four", "four, alice's", 1)
	if got := alice.read("a.txt"); got != aliceFour {
		t.Errorf("after the refused sync a.txt holds %q, want alice's edit", got)
	}

	// --merge writes the markers.
	before := baseRevision(t, alice.dir)
	out, errOut, code = alice.run("sync", "--merge")
	marked := "ONE\ntwo\nthree\n<<<<<<< ours\nfour, alice's\n||||||| base\nfour\n=======\nfour, bob's\n>>>>>>> theirs\nfive\nsix\nSEVEN\n"
	if code != cli.ExitConflict || !strings.Contains(out, "conflict in a.txt: 1 conflicting changes, written between markers") || alice.read("a.txt") != marked {
		t.Errorf("ag sync --merge: exit %d\nstdout:\n%s\nstderr:\n%s\na.txt:\n%s\nwant exit 4, the conflict listed and a.txt:\n%s", code, out, errOut, alice.read("a.txt"), marked)
	}
	if baseRevision(t, alice.dir) == before {
		t.Errorf("ag sync --merge left the checkout at %s; want it on the new mainline", before)
	}
	var st statusOut
	decode(t, "ag status --json", alice.must("status", "--json"), &st)
	if !slices.Equal(st.Edits, []editOut{{Path: "a.txt", Status: "modified", Conflict: true}}) {
		t.Errorf("ag status --json after the conflict: edits %+v; want a.txt modified, in conflict", st.Edits)
	}
	alice.must("lease", "acquire", "a.txt")
	if _, errOut, code := alice.run("integrate", "-m", "markers"); code != cli.ExitConflict || !strings.Contains(errOut, "a.txt") {
		t.Errorf("ag integrate of a file with conflict markers: exit %d, want 4 naming a.txt\n%s", code, errOut)
	}
	// --ours: back to alice's content, as an edit on the new mainline, which integrates.
	alice.must("sync", "--ours", "a.txt")
	if got := alice.read("a.txt"); got != aliceFour {
		t.Errorf("after ag sync --ours a.txt: %q, want alice's %q", got, aliceFour)
	}
	alice.must("integrate", "-m", "alice: four, hers")
	alice.must("lease", "release")

	// --theirs: bob's edit dropped for the mainline's.
	bob.write("a.txt", "bob's own\n")
	out = bob.must("sync", "--theirs", "a.txt")
	if got := bob.read("a.txt"); got != aliceFour || !strings.HasPrefix(out, "synced to ") {
		t.Errorf("ag sync --theirs a.txt printed %q and left a.txt %q; want the mainline's %q", out, got, aliceFour)
	}

	// A binary file changed on both sides does not merge, even with --merge.
	alice.write("bin.dat", "\x00alice\n")
	bob.write("bin.dat", "\x00bob\n")
	bob.integrate("bob: bin", "bin.dat")
	if _, errOut, code := alice.run("sync", "--merge"); code != cli.ExitConflict || !strings.Contains(errOut, "bin.dat (a binary file changed on both sides)") {
		t.Errorf("ag sync --merge over a binary conflict: exit %d, want 4 naming bin.dat\n%s", code, errOut)
	}
	alice.must("sync", "--theirs", "bin.dat")
	if got := alice.read("bin.dat"); got != "\x00bob\n" {
		t.Errorf("after ag sync --theirs bin.dat: %q, want bob's", got)
	}
}

// TestLeaseConflictMessages ensures a refused lease names the path actually leased, not the
// one asked for, with its holder and expiry, and says how long it waited.
func TestLeaseConflictMessages(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, map[string]string{"src/a.go": "a\n", "src/b.go": "b\n"})
	alice, bob := e.agent("alice"), e.agent("bob")
	var l leaseOut
	decode(t, "ag lease acquire --json", bob.must("lease", "acquire", "src/a.go", "--json"), &l)
	until := l.ExpiresAt.UTC().Format(time.RFC3339)
	_, errOut, code := alice.run("lease", "acquire", "src/")
	if code != cli.ExitLease || !strings.Contains(errOut, "src/a.go is leased to bob|bob (lease "+l.ID) ||
		!strings.Contains(errOut, until+", under src/ which you asked for") || strings.Contains(errOut, "src/ is leased") {
		t.Errorf("alice leases src/ while bob holds src/a.go: exit %d\n%s\nwant exit 3 naming src/a.go, bob and %s", code, errOut, until)
	}
	start := time.Now()
	_, errOut, code = alice.run("lease", "acquire", "src/a.go", "--wait", "1s")
	if code != cli.ExitLease || !strings.Contains(errOut, "waited 1") || time.Since(start) < time.Second {
		t.Errorf("ag lease acquire --wait 1s: exit %d\n%s\nwant exit 3 after a second, saying it waited", code, errOut)
	}
}

// TestIntegrateShowsQueuePosition ensures a change queued for validation says where it
// stands in the queue: next in line, or how many are ahead.
func TestIntegrateShowsQueuePosition(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	if _, err := e.srv.Admin.Repos.SetValidation(context.Background(), &agwpv1.SetValidationRequest{
		Repository: "app", Validation: &agwpv1.Validation{Command: []string{"true"}},
	}); err != nil {
		t.Fatal(err)
	}
	alice, bob := e.agent("alice"), e.agent("bob")
	alice.must("lease", "acquire", "a.txt")
	alice.write("a.txt", "a, alice's\n")
	out := alice.must("integrate", "-m", "a", "--no-wait")
	if !regexp.MustCompile(`^change \S+ (queued \(next in line\)|validating): 1 paths`).MatchString(out) {
		t.Errorf("the first queued change printed %q, want it next in line", out)
	}
	bob.must("lease", "acquire", "b.txt")
	bob.write("b.txt", "b, bob's\n")
	out = bob.must("integrate", "-m", "b", "--no-wait")
	if !regexp.MustCompile(`^change \S+ queued \(1 ahead\): 1 paths`).MatchString(out) {
		t.Errorf("the second queued change printed %q, want one ahead of it", out)
	}
}
