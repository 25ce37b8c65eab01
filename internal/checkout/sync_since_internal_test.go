package checkout

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/repo"
)

// TestMoveBaseIsTheBaseBuiltAfresh ensures moving a checkout's base by the paths a sync planned
// over gives the index that the whole new tree gives (SetBase, then baseIndex): each changed
// path takes its new file, an added one comes in sorted, a removed one leaves the base and,
// unless the disk's content of it is recorded, the index; every other entry is as it was,
// stats and all.
func TestMoveBaseIsTheBaseBuiltAfresh(t *testing.T) {
	t.Parallel()
	co := statTestCheckout(t, map[string]string{"a.txt": "a\n", "b/c.txt": "c\n", "b/d.txt": "d\n", "gone.txt": "g\n", "kept.txt": "k\n", "z.txt": "z\n"})
	// A scan records what is on disk: every file hashed, so the index holds their stats.
	if _, err := co.LocalEdits(); err != nil {
		t.Fatal(err)
	}
	// gone.txt is deleted on disk too (its entry is then neither hashed nor, once moved, in
	// the base); b/d.txt stays on disk, hashed, while the revision removes it.
	if err := os.Remove(co.root + "/gone.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := co.LocalEdits(); err != nil {
		t.Fatal(err)
	}
	file := func(content, mode string) treeFile { return treeFile{digest: repo.Digest([]byte(content)), Mode: mode} }
	to := map[string]treeFile{
		"a.txt":       file("a, 2\n", repo.ModeFile),
		"kept.txt":    file("k\n", repo.ModeExecutable),
		"b/new.txt":   file("new\n", repo.ModeFile),
		"0first.txt":  file("first\n", repo.ModeFile),
		"vendor/lib":  {Mode: repo.ModeGitlink, commit: strings.Repeat("5e", 20)},
		"link-to-a":   file("a.txt", repo.ModeSymlink),
		"zz/deep/new": file("deep\n", repo.ModeFile),
	}
	removed := []string{"b/d.txt", "gone.txt"}

	moved, err := Find(co.root)
	if err != nil {
		t.Fatal(err)
	}
	from := baseFilesAt(t, moved, to, removed)
	moved.base = nil // as a sync over part of the tree has it: no map of every file
	root, err := os.OpenRoot(co.root)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := moved.moveBase(root, "rev_2", from, to); err != nil {
		t.Fatalf("moveBase: %v", err)
	}
	got, err := moved.loadIndex(root)
	if err != nil {
		t.Fatal(err)
	}

	afresh, err := Find(co.root)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := afresh.BaseFiles()
	if err != nil {
		t.Fatal(err)
	}
	target := map[string]treeFile{}
	for p, f := range whole {
		target[p] = f
	}
	for _, p := range removed {
		delete(target, p)
	}
	for p, f := range to {
		target[p] = f
	}
	old, err := afresh.loadIndex(root)
	if err != nil {
		t.Fatal(err)
	}
	want, err := baseIndex(target, old)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got.entries, want.entries, func(a, b indexEntry) bool { return a == b }) {
		t.Errorf("moveBase's index:\n%v\nthe whole tree's:\n%v", got.entries, want.entries)
	}
	if moved.BaseRevision != "rev_2" || !moved.baseChanged {
		t.Errorf("after moveBase the checkout is at %s (changed %v), want rev_2 to be saved", moved.BaseRevision, moved.baseChanged)
	}
	// Saved and read again, it is the same.
	if err := moved.Save(); err != nil {
		t.Fatal(err)
	}
	again, err := Find(co.root)
	if err != nil {
		t.Fatal(err)
	}
	read, err := again.loadIndex(root)
	if err != nil {
		t.Fatal(err)
	}
	if again.BaseRevision != "rev_2" || !slices.EqualFunc(read.entries, want.entries, func(a, b indexEntry) bool { return a == b }) {
		t.Errorf("the saved index, read again at %s:\n%v\nwant:\n%v", again.BaseRevision, read.entries, want.entries)
	}

	// One path added alone, sorting before every other, comes in at its place.
	first := map[string]treeFile{"00.txt": file("00\n", repo.ModeFile)}
	if err := again.moveBase(root, "rev_3", nil, first); err != nil {
		t.Fatalf("moveBase of one added path: %v", err)
	}
	target["00.txt"] = first["00.txt"]
	if want, err = baseIndex(target, read); err != nil {
		t.Fatal(err)
	}
	if got, err := again.loadIndex(root); err != nil || !slices.EqualFunc(got.entries, want.entries, func(a, b indexEntry) bool { return a == b }) {
		t.Errorf("moveBase's index with one path added (%v):\n%v\nwant:\n%v", err, got.entries, want.entries)
	}
}

// mapKeys answers m's keys.
func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestCheckPlaceRefusesAPathAboveOrUnderAnother ensures a path a difference adds is refused
// when a file the difference did not name lies above it (a file, a link, a submodule) or under
// it, unless the difference removed that file; and taken otherwise.
func TestCheckPlaceRefusesAPathAboveOrUnderAnother(t *testing.T) {
	t.Parallel()
	file := func(content, mode string) treeFile { return treeFile{digest: repo.Digest([]byte(content)), Mode: mode} }
	x, err := baseIndex(map[string]treeFile{
		"a":      file("a\n", repo.ModeFile),
		"d/f":    file("f\n", repo.ModeFile),
		"l":      file("d", repo.ModeSymlink),
		"s":      {Mode: repo.ModeGitlink, commit: strings.Repeat("5e", 20)},
		"dx":     file("x\n", repo.ModeFile),
		"d.txt":  file("t\n", repo.ModeFile),
		"e/f/g":  file("g\n", repo.ModeFile),
		"e/f.go": file("go\n", repo.ModeFile),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	baseOf := func(p string) (treeFile, bool, error) {
		i, ok := x.find(p)
		if !ok || !x.entries[i].inBase {
			return treeFile{}, false, nil
		}
		return x.entries[i].baseFile(), true, nil
	}
	for _, c := range []struct {
		path    string
		removed []string
		want    string // "" when taken
	}{
		{"a/x", nil, `"a" would be a file and also the directory of "a/x"`},
		{"a/x", []string{"a"}, ""},
		{"d", nil, `"d" would be a file and also the directory of "d/f"`},
		{"d", []string{"d/f"}, ""},
		{"l/x", nil, "a symbolic link of the same tree"},
		{"s/x", nil, "a submodule of the same tree"},
		{"e/f", nil, `"e/f" would be a file and also the directory of "e/f/g"`},
		{"d/g", nil, ""},
		{"n/new", nil, ""},
		{"e/f/h", nil, ""},
	} {
		removed := map[string]bool{}
		for _, p := range c.removed {
			removed[p] = true
		}
		target := map[string]treeFile{c.path: file("new\n", repo.ModeFile)}
		err := x.checkPlace(c.path, target, removed, baseOf)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("checkPlace(%q, removed %q): %v, want it taken", c.path, c.removed, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("checkPlace(%q, removed %q): %v, want a refusal saying %q", c.path, c.removed, err, c.want)
		}
	}
}
