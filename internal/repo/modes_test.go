package repo

import (
	"slices"
	"strings"
	"testing"
)

// TestTreeDigestKeepsTreesBeforeModes ensures a tree of mode 100644 files hashes as it did before
// trees had modes, whether its entries say "" or "100644": attestations signed then name these
// digests.
func TestTreeDigestKeepsTreesBeforeModes(t *testing.T) {
	a, empty := Digest([]byte("a\n")), Digest(nil)
	const before = "sha256:b835115e5a3f64ed852eac68cf15c279f246eb6032f1647c36f8ac9a5df5278c" // these entries before trees had modes
	for _, tree := range []Tree{
		{{Path: "a.txt", Digest: a, Size: 2}, {Path: "dir/b", Digest: empty}},
		{{Path: "a.txt", Digest: a, Size: 2, Mode: ModeFile}, {Path: "dir/b", Digest: empty, Mode: ModeFile}},
	} {
		if got := tree.Digest(); got != before {
			t.Errorf("the digest of %v = %s, want the digest it had before modes, %s", tree, got, before)
		}
	}
}

// TestTreeDigestSeesModes ensures a chmod, a file becoming a link to the same bytes, and a
// submodule moving to another commit each change the tree's digest, and that the encoding reads
// back to the same entries.
func TestTreeDigestSeesModes(t *testing.T) {
	script, target := Digest([]byte("#!/bin/sh\n")), Digest([]byte("script.sh"))
	commit := strings.Repeat("5e", 20)
	base := Tree{
		{Path: "link", Digest: target, Size: 9, Mode: ModeSymlink},
		{Path: "script.sh", Digest: script, Size: 10, Mode: ModeExecutable},
		{Path: "vendor/lib", Mode: ModeGitlink, GitlinkCommit: commit},
	}
	variants := map[string]Tree{
		"chmod -x":             {base[0], {Path: "script.sh", Digest: script, Size: 10}, base[2]},
		"a link made a file":   {{Path: "link", Digest: target, Size: 9}, base[1], base[2]},
		"a submodule moved on": {base[0], base[1], {Path: "vendor/lib", Mode: ModeGitlink, GitlinkCommit: strings.Repeat("6f", 20)}},
	}
	seen := map[string]string{base.Digest(): "the base"}
	for what, tree := range variants {
		d := tree.Digest()
		if other, ok := seen[d]; ok {
			t.Errorf("%s has the digest of %s: %s", what, other, d)
		}
		seen[d] = what
	}

	enc := base.Encode()
	for _, want := range []string{"script.sh\x00100755 " + script + "\x0010\x00", "link\x00120000 " + target + "\x009\x00",
		"vendor/lib\x00160000 " + commit + "\x000\x00"} {
		if !strings.Contains(string(enc), want) {
			t.Errorf("the encoding %q does not hold %q", enc, want)
		}
	}
	back, err := DecodeTree(enc)
	if err != nil || !slices.Equal(back, base) {
		t.Fatalf("DecodeTree(Encode()) = %v, %v; want %v", back, err, base)
	}
	if _, err := DecodeTree([]byte("x\x00100664 " + script + "\x001\x00")); err == nil {
		t.Error("DecodeTree accepted a mode no entry has")
	}
}

// TestCheckSymlinkTarget ensures a link's target is something, holds no NUL and fits a path,
// wherever it points.
func TestCheckSymlinkTarget(t *testing.T) {
	for _, ok := range []string{"a", "../../etc/passwd", "/etc/passwd", ".git/config", strings.Repeat("x", MaxSymlinkTarget)} {
		if err := CheckSymlinkTarget([]byte(ok)); err != nil {
			t.Errorf("CheckSymlinkTarget(%.40q) = %v, want ok", ok, err)
		}
	}
	for bad, says := range map[string]string{"": "empty", "a\x00b": "NUL", "\x00/etc/passwd": "NUL", strings.Repeat("x", MaxSymlinkTarget+1): "more than 4096"} {
		if err := CheckSymlinkTarget([]byte(bad)); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("CheckSymlinkTarget(%.40q) = %v, want a refusal saying %q", bad, err, says)
		}
	}
}
