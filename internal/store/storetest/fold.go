package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// The spellings of one name that a checkout on macOS or Windows writes to one file.
const (
	cafeNFC   = "caf\u00e9.txt"  // é precomposed
	cafeNFD   = "cafe\u0301.txt" // e and a combining acute accent
	cafeUpper = "CAF\u00c9.TXT"
)

// testFoldedLeasesConflict: a lease on one spelling of a name conflicts with another holder's
// lease on any other spelling, files and directories alike, and the answers keep every path
// byte for byte as written.
func testFoldedLeasesConflict(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	for i, c := range []struct{ held, asked string }{
		{cafeNFC, cafeNFD},
		{cafeNFD, cafeNFC},
		{cafeNFC, cafeUpper},
		{cafeUpper, cafeNFD},
		{"Docs/", "docs/a"},
		{"docs/a", "DOCS/"},
		{"Docs/", "docs/sub/"},
		{"src/" + cafeNFD, "SRC/"},
		{"\u03a3\u0399\u03a3\u03a5\u03a6\u039f\u03a3.md", "\u03c3\u03b9\u03c3\u03c5\u03c6\u03bf\u03c2.md"}, // ΣΙΣΥΦΟΣ, σισυφος
	} {
		name := fmt.Sprintf("fold-%d", i)
		b.createRepo(t, name)
		held := b.acquire(t, name, alice, time.Minute, c.held)
		if len(held.Paths) != 1 || held.Paths[0] != c.held {
			t.Fatalf("AcquireLease(%q) answers the paths %q, want them as written", c.held, held.Paths)
		}
		_, err := b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: name, Paths: []string{c.asked}, Holder: bob, TTL: time.Minute})
		wantConflict(t, fmt.Sprintf("%s holds %q, %s asks for %q", alice, c.held, bob, c.asked), err, c.asked, held, c.held)
		if got := b.lease(t, held.ID).Paths; len(got) != 1 || got[0] != c.held {
			t.Fatalf("GetLease answers the paths %q, want %q byte for byte", got, c.held)
		}
	}
	// Names that only look alike are different names.
	b.createRepo(t, "apart")
	b.acquire(t, "apart", alice, time.Minute, "Docs/", cafeNFC)
	b.acquire(t, "apart", bob, time.Minute, "docsa", "Docs", "cafe.txt", "caf\u00e9.txt.bak", "\uff24ocs/")
}

// testFoldedTokens: the fencing token of a lease on one spelling is the token of every other
// spelling, both for integrating and for being superseded.
func testFoldedTokens(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Minute, cafeNFC, "Docs/")
	c := b.mustIntegrate(t, integrateParams("web", r.Mainline, alice, []uint64{l.FencingToken},
		put(cafeNFD, "nfd\n"), put("docs/a.txt", "a\n")))
	tree := b.revision(t, "web", c.IntegratedRevision).Tree
	if got := treePaths(tree); strings.Join(got, "|") != cafeNFD+"|docs/a.txt" {
		t.Fatalf("the integrated tree holds %q, want the paths as written, byte for byte", got)
	}

	// Another holder's later lease on a third spelling makes alice's token stale for all.
	l2, err := b.rs.AcquireLease(b.ctx, store.AcquireLeaseParams{Repository: "web", Paths: []string{cafeUpper}, Holder: bob, TTL: time.Minute})
	wantConflict(t, "bob asks for "+cafeUpper, err, cafeUpper, l, cafeNFC)
	b.clk.Advance(2 * time.Minute)
	l2 = b.acquire(t, "web", bob, time.Minute, cafeUpper)
	err = b.refusedIntegrate(t, "with a token superseded on another spelling", integrateParams("web", c.IntegratedRevision, alice,
		[]uint64{l.FencingToken}, put(cafeNFD, "late\n")))
	wantRefusal(t, "alice integrates "+cafeNFD+" after bob took "+cafeUpper, err, cafeNFD, "stale", cafeUpper)
	// bob's token, on the upper-case spelling, integrates the NFD file that the tree holds.
	c2 := b.mustIntegrate(t, integrateParams("web", c.IntegratedRevision, bob, []uint64{l2.FencingToken}, put(cafeNFD, "bob\n")))
	if got := b.revision(t, "web", c2.IntegratedRevision).Tree; !treeHasContent(got, cafeNFD, "bob\n") {
		t.Fatalf("after bob's change the tree is %v, want %q holding bob's content", treePaths(got), cafeNFD)
	}
}

// testSecondSpellingRefused: a change that adds a second spelling of a name the tree holds,
// of a file or of a directory at any depth, is refused naming both; one that adds a name with
// no other spelling is not.
func testSecondSpellingRefused(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Minute, "docs/", "Docs/", "src/", "SRC/", cafeNFC, cafeNFD, cafeUpper, "new/")
	tokens := []uint64{l.FencingToken}
	c := b.mustIntegrate(t, integrateParams("web", r.Mainline, alice, tokens,
		put(cafeNFC, "nfc\n"), put("docs/b.txt", "b\n"), put("src/deep/x.go", "x\n")))
	base := c.IntegratedRevision
	for _, cc := range []struct {
		edit         string
		added, other string
	}{
		{cafeNFD, cafeNFD, cafeNFC},
		{cafeUpper, cafeUpper, cafeNFC},
		{"Docs/a.txt", "Docs/", "docs/"},
		{"SRC/deep/y.go", "SRC/", "src/"},
		{"src/DEEP/y.go", "src/DEEP/", "src/deep/"},
		{"src/deep/X.go", "src/deep/X.go", "src/deep/x.go"},
	} {
		err := b.refusedIntegrate(t, "adding "+cc.edit, integrateParams("web", base, alice, tokens, put(cc.edit, "second\n")))
		var invalid *repo.InvalidEditError
		if !errors.As(err, &invalid) || invalid.Path != cc.edit {
			t.Fatalf("Integrate adding %q: err = %v (%T), want a *repo.InvalidEditError about %q", cc.edit, err, err, cc.edit)
		}
		for _, m := range []string{fmt.Sprintf("%q", cc.added), fmt.Sprintf("%q", cc.other)} {
			if !strings.Contains(invalid.Reason, m) {
				t.Fatalf("Integrate adding %q: the reason %q does not name %s", cc.edit, invalid.Reason, m)
			}
		}
	}
	// Two spellings added by one change are refused too.
	err := b.refusedIntegrate(t, "adding two spellings at once", integrateParams("web", base, alice, tokens,
		put("new/A.txt", "1\n"), put("new/a.txt", "2\n")))
	var invalid *repo.InvalidEditError
	if !errors.As(err, &invalid) {
		t.Fatalf("Integrate adding new/A.txt and new/a.txt: err = %v (%T), want a *repo.InvalidEditError", err, err)
	}
	// Edits of the existing spelling, new names and a delete are fine.
	b.mustIntegrate(t, integrateParams("web", base, alice, tokens,
		put(cafeNFC, "nfc 2\n"), put("docs/c.txt", "c\n"), put("src/deep/z.go", "z\n"), del("docs/b.txt")))
}

// testBothSpellingsImported: a history holding two spellings of one name is imported as it is
// (git keeps them apart), and changes to either spelling are accepted; the paths round-trip
// byte for byte.
func testBothSpellingsImported(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	files := map[string]modeFile{
		cafeNFC:       {repo.ModeFile, "nfc\n"},
		cafeNFD:       {repo.ModeFile, "nfd\n"},
		"Docs/a.txt":  {repo.ModeFile, "A\n"},
		"docs/a.txt":  {repo.ModeFile, "a\n"},
		"README.md":   {repo.ModeFile, "r\n"},
		"readme.md":   {repo.ModeFile, "r2\n"},
		"other/x.txt": {repo.ModeFile, "x\n"},
	}
	r := b.importModes(t, "both", nil, files)
	if got := treePaths(b.mainlineTree(t, "both")); len(got) != len(files) {
		t.Fatalf("the imported tree holds %q, want all %d paths", got, len(files))
	}
	l := b.acquire(t, "both", alice, time.Minute, cafeNFD, "Docs/", "readme.md")
	c := b.mustIntegrate(t, integrateParams("both", r.Mainline, alice, []uint64{l.FencingToken},
		put(cafeNFD, "nfd 2\n"), put(cafeNFC, "nfc 2\n"), put("docs/a.txt", "a2\n"), put("Docs/b.txt", "B\n"), put("README.md", "R\n")))
	tree := b.revision(t, "both", c.IntegratedRevision).Tree
	for path, content := range map[string]string{cafeNFD: "nfd 2\n", cafeNFC: "nfc 2\n", "docs/a.txt": "a2\n",
		"Docs/a.txt": "A\n", "Docs/b.txt": "B\n", "README.md": "R\n", "readme.md": "r2\n"} {
		if !treeHasContent(tree, path, content) {
			t.Fatalf("the tree after changes to both spellings is %q: %q does not hold %q", treePaths(tree), path, content)
		}
	}
	// A third spelling is still a new one.
	err := b.refusedIntegrate(t, "adding a third spelling", integrateParams("both", c.IntegratedRevision, alice,
		[]uint64{l.FencingToken}, put(cafeUpper, "third\n")))
	var invalid *repo.InvalidEditError
	if !errors.As(err, &invalid) {
		t.Fatalf("Integrate adding %q: err = %v (%T), want a *repo.InvalidEditError", cafeUpper, err, err)
	}
}

func treePaths(tree repo.Tree) []string {
	var out []string
	for _, f := range tree {
		out = append(out, f.Path)
	}
	return out
}

func treeHasContent(tree repo.Tree, path, content string) bool {
	for _, f := range tree {
		if f.Path == path {
			return f.Digest == repo.Digest([]byte(content))
		}
	}
	return false
}
