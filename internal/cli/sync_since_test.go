package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// TestSyncRefusesAHostileDifference ensures `ag sync`, answered what changed since its base
// (GetTreeRequest.since), checks the answer as it checks a whole tree, against the files of the
// checkout it did not name: a removed path no checkout may hold, a path both changed and
// removed, a new file under a file of the base or over its directory, or a difference from
// another revision than the one asked about are each refused, naming the path, with nothing
// changed. Each would otherwise remove a file outside the checkout, or leave the checkout's
// index believing in a tree no server holds.
func TestSyncRefusesAHostileDifference(t *testing.T) {
	t.Parallel()
	files := map[string]string{"a.txt": "a\n", "d/f": "f\n", "gone.txt": "gone\n"}
	for _, c := range []struct {
		name   string
		to     map[string]string
		tamper func(*agwpv1.GetTreeResponse)
		want   []string
	}{
		{"removed out of the checkout", files, func(r *agwpv1.GetTreeResponse) { r.Removed = append(r.Removed, "../x") },
			[]string{"../x", `".." segment`}},
		{"removed in .git", files, func(r *agwpv1.GetTreeResponse) { r.Removed = append(r.Removed, ".git/config") },
			[]string{".git/config", `".git"`}},
		{"changed and removed", map[string]string{"a.txt": "a, changed\n", "d/f": "f\n", "gone.txt": "gone\n"},
			func(r *agwpv1.GetTreeResponse) { r.Removed = append(r.Removed, "a.txt") }, []string{"a.txt", "both changed and removed"}},
		{"a file under a file of the base", map[string]string{"a.txt": "a\n", "a.txt/under": "u\n", "d/f": "f\n", "gone.txt": "gone\n"}, nil,
			[]string{"a.txt/under", "would be a file and also the directory"}},
		{"a file over a directory of the base", map[string]string{"a.txt": "a\n", "d": "d\n", "d/f": "f\n", "gone.txt": "gone\n"}, nil,
			[]string{"d/f", "would be a file and also the directory"}},
		{"a difference from another revision", map[string]string{"a.txt": "a, changed\n", "d/f": "f\n"},
			func(r *agwpv1.GetTreeResponse) { r.Since = "rev_0" }, []string{"asked for its difference from rev_1", "rev_0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f, url, dir, _ := newCheckout(t, files, true)
			f.set("rev_2", c.to)
			f.mu.Lock()
			f.tamper = c.tamper
			f.mu.Unlock()
			out, err := runAg("sync", "-C", dir, "--server", url, "--token", "t")
			if err == nil {
				t.Fatalf("ag sync: %s; want a refusal naming %q", out, c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ag sync: %v; want a refusal naming %q", err, w)
				}
			}
			assertFiles(t, dir, files)
			if got := baseRevision(t, dir); got != "rev_1" {
				t.Errorf("after the refused sync the checkout is at %s, want rev_1", got)
			}
		})
	}
}

// TestIntegrateLeavesTheIntegratedFileAsItIs ensures the sync after an integrate that landed
// does not fetch and write again the files the change sent: each is the new mainline's already.
// An editor holding one open sees it unchanged on disk (its inode and mtime), and the checkout
// is at the new mainline with nothing left to integrate.
func TestIntegrateLeavesTheIntegratedFileAsItIs(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, map[string]string{"a.txt": "a\n", "docs/b.md": "b\n"})
	alice := e.agent("alice")
	alice.write("a.txt", "a, edited\n")
	path := filepath.Join(alice.dir, "a.txt")
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	alice.integrate("edit a", "a.txt")
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("a.txt was written again by the sync after the integrate: %v then %v", before.ModTime(), after.ModTime())
	}
	if got := alice.read("a.txt"); got != "a, edited\n" {
		t.Errorf("a.txt after the integrate: %q", got)
	}
	var st struct {
		Edits []any `json:"edits"`
	}
	decode(t, "ag status --json", alice.must("status", "--json"), &st)
	if len(st.Edits) != 0 {
		t.Errorf("after the integrate ag status shows edits: %v", st.Edits)
	}
}

// TestASyncWhoseCheckoutMovedMeanwhileChangesNothing ensures a sync answered what changed since
// its base refuses, changing nothing, when another ag moved the checkout to another base between
// the question and the answer: the difference (here from rev_1 to rev_3) is from a base the
// checkout no longer has (rev_2), and applied to it would leave b.txt as rev_2 has it under an
// index that says rev_3.
func TestASyncWhoseCheckoutMovedMeanwhileChangesNothing(t *testing.T) {
	t.Parallel()
	f, url, dir, _ := newCheckout(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"}, true)
	rev2 := map[string]string{"a.txt": "a\n", "b.txt": "b, 2\n"}
	rev3 := map[string]string{"a.txt": "a, 3\n", "b.txt": "b\n"}
	f.set("rev_2", rev2)
	f.set("rev_3", rev3)
	var inner atomic.Bool
	var innerOut string
	var innerErr error
	f.mu.Lock()
	f.tamper = func(*agwpv1.GetTreeResponse) {
		if inner.Swap(true) {
			return
		}
		// Called with f.mu held, the answer from rev_1 to rev_3 made: the other ag syncs to
		// rev_2 before this one reads its checkout.
		f.mu.Unlock()
		f.set("rev_2", rev2)
		innerOut, innerErr = runAg("sync", "-C", dir, "--server", url, "--token", "t")
		f.set("rev_3", rev3)
		f.mu.Lock()
	}
	f.mu.Unlock()
	_, err := runAg("sync", "-C", dir, "--server", url, "--token", "t")
	if innerErr != nil {
		t.Fatalf("the other ag's sync: %v\n%s", innerErr, innerOut)
	}
	if err == nil || !strings.Contains(err.Error(), "moved this checkout from rev_1 to rev_2") {
		t.Errorf("the sync whose checkout moved meanwhile: %v; want a refusal saying so", err)
	}
	assertFiles(t, dir, rev2)
	if got := baseRevision(t, dir); got != "rev_2" {
		t.Errorf("after the refused sync the checkout is at %s, want rev_2 (where the other ag left it)", got)
	}
	// Run again, it syncs.
	if out, err := runAg("sync", "-C", dir, "--server", url, "--token", "t"); err != nil {
		t.Fatalf("ag sync again: %v\n%s", err, out)
	}
	assertFiles(t, dir, rev3)
}
