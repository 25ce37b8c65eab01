package repo

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestOverlap ensures the overlap rule of leases, as a table.
func TestOverlap(t *testing.T) {
	cases := []struct {
		p, q string
		want bool
	}{
		{"src/a.go", "src/a.go", true},  // file/file, same
		{"src/a.go", "src/b.go", false}, // file/file, different
		{"src/", "src/a.go", true},      // dir/file inside
		{"src/a.go", "src/", true},      // file/dir, symmetric
		{"src/", "docs/a.md", false},    // dir/file outside
		{"src/", "src/", true},          // dir/dir, same
		{"src/", "src/sub/", true},      // dir/dir, nested
		{"src/sub/", "src/", true},      // nested, symmetric
		{"src/", "srcx/", false},        // dir/dir siblings with a shared prefix
		{"src/a", "src/ab", false},      // siblings with a shared name prefix
		{"src/a/", "src/ab", false},     // a directory and a file sharing a name prefix
		{"src/a/", "src/a", false},      // the directory a/ and the file a are different paths
		{"a/b/c/d.go", "a/", true},      // deep file under a directory
		{"a/b/c/d.go", "a/b/c/e/", false},
	}
	for _, c := range cases {
		if got := Overlap(c.p, c.q); got != c.want {
			t.Errorf("Overlap(%q, %q) = %v, want %v", c.p, c.q, got, c.want)
		}
		if got := Overlap(c.q, c.p); got != c.want {
			t.Errorf("Overlap(%q, %q) = %v, want %v (symmetry)", c.q, c.p, got, c.want)
		}
	}
}

// TestValidatePath ensures only clean relative paths pass.
func TestValidatePath(t *testing.T) {
	good := []string{"a", "a/b.go", "a.b/c-d_e", "deep/er/path/x", "ünïcode/ok"}
	for _, p := range good {
		if err := ValidatePath(p, false); err != nil {
			t.Errorf("ValidatePath(%q) = %v, want ok", p, err)
		}
	}
	if err := ValidatePath("src/", true); err != nil {
		t.Errorf("ValidatePath(src/, dir) = %v", err)
	}
	bad := []string{"", "/abs", "a//b", "./a", "a/./b", "a/..", "../x", "a\x00b", "src/", "a\\b", strings.Repeat("x", MaxPathBytes+1), "\xff",
		"a\x1b[2Jb", "a\nb", "a\tb", "a\rb", "bell\a", "a\x7fb", "a\u009bb", "a\u0085b"}
	for _, p := range bad {
		if err := ValidatePath(p, false); err == nil {
			t.Errorf("ValidatePath(%q) = ok, want refused", p)
		}
	}
	// The longest path: 4,096 bytes in 17 segments of 240.
	longest := strings.Repeat(strings.Repeat("x", 240)+"/", 16) + strings.Repeat("x", 240)
	if err := ValidatePath(longest, false); len(longest) != MaxPathBytes || err != nil {
		t.Errorf("a path of %d bytes: %v, want ok", len(longest), err)
	}
	if err := ValidatePath("\x00", false); err == nil || !strings.Contains(err.Error(), "contains NUL") {
		t.Errorf("ValidatePath(NUL) = %v, want refused as NUL", err)
	}
}

// TestValidatePathRefusesControlCharacters ensures no path holds a character a terminal acts on
// when the path is printed, C0, DEL or C1, and that the refusal names the character, while the
// characters on either side of those ranges pass.
func TestValidatePathRefusesControlCharacters(t *testing.T) {
	refused := map[string]string{
		"src/\x1b[2J.go":             "U+001B",
		"src/\x1b]52;c;aGk=\a.go":    "U+001B",
		"docs/bell\a":                "U+0007",
		"a\nchange chg_x integrated": "U+000A",
		"tab\tin/name":               "U+0009",
		"cr\r":                       "U+000D",
		"\x01start":                  "U+0001",
		"end\x1f":                    "U+001F",
		"del\x7f/x":                  "U+007F",
		"csi\u009b31m":               "U+009B",
		"c1/\u0080":                  "U+0080",
		"c1/\u009f":                  "U+009F",
		"dir\x1b/":                   "U+001B",
	}
	for p, char := range refused {
		err := ValidatePath(p, true)
		if err == nil || !strings.Contains(err.Error(), "contains the control character "+char) {
			t.Errorf("ValidatePath(%q) = %v, want refused naming %s", p, err, char)
		}
	}
	for _, p := range []string{"space in/name", "tilde~", "nbsp\u00a0x", "latin\u00ff", "\u00c2x", "emoji/\U0001f600"} {
		if err := ValidatePath(p, false); err != nil {
			t.Errorf("ValidatePath(%q) = %v, want ok", p, err)
		}
	}
}

// TestValidatePathRefusesReservedAndImpossibleSegments ensures a repository can hold neither a
// .git nor a .ag directory under any spelling a file system takes for it, nor a segment no file
// system can hold, while names that only look alike pass.
func TestValidatePathRefusesReservedAndImpossibleSegments(t *testing.T) {
	reserved := []string{
		".git/config", ".git/HEAD", ".ag/checkout.json", "sub/.git/hooks/pre-commit", "a/b/.ag/x",
		".GIT/config", ".Git/info/exclude", ".AG/checkout.json", ".git./config", ".git . /config",
		"git~1/config", "GIT~1/config", ".g\u200cit/config", "\ufeff.git/config", "x/.ag", ".git",
		"git~1./config", "git~1 /config", "GIT~1. ./config", ".git::$INDEX_ALLOCATION/config", ".git:x/config",
		"GIT~1:x/config", ".ag::$INDEX_ALLOCATION/checkout.json", "ag~1/checkout.json", "AG~1./checkout.json",
		// each end of each range of code points HFS+ ignores
		".g\u200fit/config", ".gi\u202at/config", ".gi\u202et/config", "\u206a.git/config", ".git\u206f/config",
	}
	for _, p := range reserved {
		err := ValidatePath(p, false)
		if err == nil || !strings.Contains(err.Error(), "no repository may hold") {
			t.Errorf("ValidatePath(%q) = %v, want refused as reserved", p, err)
		}
	}
	for _, p := range []string{".git/", ".ag/", "x/.GIT/"} {
		if err := ValidatePath(p, true); err == nil {
			t.Errorf("ValidatePath(%q, dir) = ok, want refused as reserved", p)
		}
	}
	long := strings.Repeat("n", MaxSegmentBytes+1)
	if err := ValidatePath("a/"+long+"/b", false); err == nil || !strings.Contains(err.Error(), "256 bytes, more than 255") {
		t.Errorf("a 256-byte segment: %v, want refused naming its length", err)
	}
	fine := []string{".gitignore", ".gitattributes", ".github/workflows/ci.yml", ".agent/x", "git/config",
		"ag/x", ".git2/x", "a.git/x", strings.Repeat("n", MaxSegmentBytes), "git~2/x", "a:b", "ag~10/x",
		// git and ag without their dot, under the trailing dots and spaces NTFS drops
		"git./x", "ag. /x",
		// names beyond ASCII, near .git and not it
		"café.txt", ".gït/config", "gït~1/x",
		// the code points on either side of those HFS+ ignores
		".g\u200bit/config", ".g\u2010it/config", ".g\u2029it/config", ".g\u202fit/config", ".g\u2069it/config", ".g\u2070it/config"}
	for _, p := range fine {
		if err := ValidatePath(p, false); err != nil {
			t.Errorf("ValidatePath(%q) = %v, want ok", p, err)
		}
	}
}

// TestTreeEncodingRoundTrips ensures the canonical encoding decodes to the same tree and that
// the digest depends on every field.
func TestTreeEncodingRoundTrips(t *testing.T) {
	tree := Tree{{Path: "a.go", Digest: Digest([]byte("a")), Size: 1}, {Path: "dir/b\nc", Digest: Digest([]byte("bc")), Size: 2}}
	got, err := DecodeTree(tree.Encode())
	if err != nil || len(got) != 2 || got[1] != tree[1] {
		t.Fatalf("round trip = %v, %v", got, err)
	}
	changed := Tree{tree[0], {Path: "dir/b\nc", Digest: tree[1].Digest, Size: 3}}
	if tree.Digest() == changed.Digest() {
		t.Fatal("digest ignores the size")
	}
	if empty, err := DecodeTree(Tree{}.Encode()); err != nil || len(empty) != 0 {
		t.Fatalf("empty tree = %v, %v", empty, err)
	}
	if _, err := DecodeTree([]byte("a\x00sha256:x\x00")); err == nil {
		t.Fatal("a truncated encoding decoded")
	}
	// A path after the last entry without its digest and size, and a path twice, are no tree.
	if got, err := DecodeTree(append(tree.Encode(), "e.go\x00"...)); err == nil {
		t.Errorf("an encoding ending in a path alone decoded as %v", got)
	}
	twice := Tree{tree[0], tree[0]}
	if got, err := DecodeTree(twice.Encode()); err == nil {
		t.Errorf("an encoding holding a path twice decoded as %v", got)
	}
}

// TestTreeLookup ensures a tree answers the entry at a path, and nothing for a path it does
// not hold, before, between or after its entries.
func TestTreeLookup(t *testing.T) {
	tree := Tree{{Path: "b", Digest: Digest([]byte("b"))}, {Path: "d/e", Digest: Digest([]byte("e"))}}
	for _, e := range tree {
		if got, ok := tree.Lookup(e.Path); !ok || got != e {
			t.Errorf("Lookup(%q) = %v, %v", e.Path, got, ok)
		}
	}
	for _, p := range []string{"a", "c", "d", "d/", "z"} {
		if got, ok := tree.Lookup(p); ok {
			t.Errorf("Lookup(%q) = %v, want nothing", p, got)
		}
	}
}

// TestIsDigestAndIsGitID ensures the ids every request names are read as ag writes them: a
// sha256 digest as "sha256:" and 64 lowercase hex digits, a git object id as 40.
func TestIsDigestAndIsGitID(t *testing.T) {
	hex64 := strings.Repeat("0123456789abcdef", 4)
	for s, want := range map[string]bool{
		"sha256:" + hex64: true, Digest([]byte("x")): true,
		hex64: false, "sha256:" + hex64[:63]: false, "sha256:" + hex64 + "0": false,
		"sha256:" + strings.ToUpper(hex64): false, "sha256:" + hex64[:63] + "g": false,
		"sha256:" + hex64[:63] + "/": false, "sha256:" + hex64[:63] + ":": false, "sha256:" + hex64[:63] + "`": false,
		"sha512:" + hex64: false, "": false,
	} {
		if got := IsDigest(s); got != want {
			t.Errorf("IsDigest(%q) = %v, want %v", s, got, want)
		}
	}
	for s, want := range map[string]bool{
		hex64[:40]: true, strings.Repeat("9", 40): true, strings.Repeat("f", 40): true,
		hex64[:39]: false, hex64[:41]: false, strings.ToUpper(hex64[:40]): false,
		hex64[:39] + "g": false, hex64[:39] + "/": false, hex64[:39] + ":": false, hex64[:39] + "`": false, "": false,
	} {
		if got := IsGitID(s); got != want {
			t.Errorf("IsGitID(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestAncestors ensures a path's ancestors are the directories that hold it, outermost first,
// and that a directory is not its own ancestor: a store finds the leases over a path among
// them.
func TestAncestors(t *testing.T) {
	for p, want := range map[string][]string{
		"a":        nil,
		"a/":       nil,
		"a/b":      {"a/"},
		"a/b/":     {"a/"},
		"a/b/c.go": {"a/", "a/b/"},
	} {
		if got := Ancestors(p); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("Ancestors(%q) = %q, want %q", p, got, want)
		}
	}
}

// FuzzPathAndOverlap ensures validation never panics, that a valid path has no empty, "." or
// ".." segment and no control character, and that the overlap rule is symmetric and agrees with Covers.
func FuzzPathAndOverlap(f *testing.F) {
	f.Add("src/a.go", "src/")
	f.Add("src/a", "src/ab")
	f.Add("../x", "a//b")
	f.Add("a\x1b[2J", "b\u009b")
	f.Fuzz(func(t *testing.T, p, q string) {
		errP := ValidatePath(p, true)
		if errP == nil {
			for _, seg := range strings.Split(strings.TrimSuffix(p, "/"), "/") {
				if seg == "" || seg == "." || seg == ".." {
					t.Fatalf("ValidatePath(%q) accepted segment %q", p, seg)
				}
			}
			for _, r := range p {
				if r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f {
					t.Fatalf("ValidatePath(%q) accepted the control character %U", p, r)
				}
			}
		}
		if Overlap(p, q) != Overlap(q, p) {
			t.Fatalf("Overlap(%q, %q) is not symmetric", p, q)
		}
		if ValidatePath(q, false) == nil && errP == nil && Covers(p, q) != Overlap(p, q) {
			t.Fatalf("Covers(%q, %q) = %v disagrees with Overlap for a file", p, q, Covers(p, q))
		}
	})
}

// TestEditsThatDoNotApply ensures a conflict, a collision and an edit no tree takes are told
// apart from a failure of the store, also when wrapped: the first refuse a change, the last
// fails the call. And that only a write of content writes a blob.
func TestEditsThatDoNotApply(t *testing.T) {
	for _, err := range []error{
		&ConflictError{Path: "a"}, &CollisionError{File: "a", Under: "a/b"}, &InvalidEditError{Path: "m", Reason: "is a submodule"},
		fmt.Errorf("integrate: %w", &ConflictError{Path: "a"}),
	} {
		if !DoesNotApply(err) {
			t.Errorf("DoesNotApply(%v) = false", err)
		}
	}
	if DoesNotApply(errors.New("database is locked")) || DoesNotApply(nil) {
		t.Error("DoesNotApply of a store's failure or of nil = true")
	}
	if got := (&InvalidEditError{Path: "m", Reason: "is a submodule"}).Error(); got != "m is a submodule" {
		t.Errorf("InvalidEditError = %q", got)
	}
	for e, want := range map[FileEdit]bool{
		{Path: "a", Digest: Digest(nil)}: true, {Path: "a", Delete: true}: false,
		{Path: "m", GitlinkCommit: strings.Repeat("a", 40)}: false,
	} {
		if got := e.WritesBlob(); got != want {
			t.Errorf("%+v.WritesBlob() = %v, want %v", e, got, want)
		}
	}
}

// TestLeaseRefusal ensures a refused path says who holds it and until when, or that the caller
// holds no lease on it, with the command that lets it through.
func TestLeaseRefusal(t *testing.T) {
	until := time.Date(2026, 12, 6, 10, 4, 5, 0, time.FixedZone("CET", 3600))
	if got, want := LeaseRefusal("src/a.go", "bob|agent-2", until), "src/a.go: leased by bob|agent-2 until 09:04:05Z; `ag lease acquire src/a.go --wait 5m`"; got != want {
		t.Errorf("LeaseRefusal = %q, want %q", got, want)
	}
	if got, want := LeaseRefusal("src/a.go", "", time.Time{}), "src/a.go: not under a current lease of yours; `ag lease acquire src/a.go`"; got != want {
		t.Errorf("LeaseRefusal = %q, want %q", got, want)
	}
}
