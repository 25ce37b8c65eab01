package gitstore

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// sampleFiles holds names whose git order differs from plain byte order: a directory "foo"
// sorts as "foo/", after "foo-bar" and "foo.c" and before "foo0".
var sampleFiles = map[string][]byte{
	"README.md":         []byte("# app\n"),
	"foo-bar":           []byte("dash\n"),
	"foo.c":             []byte("int main(void) { return 0; }\n"),
	"foo/x.go":          []byte("package foo\n"),
	"foo/sub/deep/y":    []byte(""),
	"foo0":              []byte("zero\n"),
	"docs/a b.txt":      []byte("a space\n"),
	"docs/ünïcode.md":   []byte("utf-8 name\n"),
	"docs/empty-dir/.k": []byte("keep\n"),
	"bin.dat":           {0, 1, 2, 255, 0, 10},
}

// TestObjectIDsMatchGit ensures blob, tree and commit ids are those git computes for the same
// content: blobs by `git hash-object`, trees by `git update-index` + `git write-tree` and a
// root by `git mktree`, commits by `git commit-tree`, trailers read back by
// `git interpret-trailers --parse`.
func TestObjectIDsMatchGit(t *testing.T) {
	t.Parallel()
	needGit(t)
	env := gitEnv(t)
	dir := t.TempDir()
	git(t, env, dir, nil, "init", "-q", "-b", "main")

	s := newStorer()
	root, err := WriteFiles(s, sampleFiles)
	if err != nil {
		t.Fatal(err)
	}
	paths := make([]string, 0, len(sampleFiles))
	for p := range sampleFiles {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		want := strings.TrimSpace(git(t, env, dir, sampleFiles[p], "hash-object", "-w", "--stdin"))
		if got := BlobID(sampleFiles[p]).String(); got != want {
			t.Errorf("blob of %s: got %s, git says %s", p, got, want)
		}
		git(t, env, dir, nil, "update-index", "--add", "--cacheinfo", "100644,"+want+","+p)
	}
	wantRoot := strings.TrimSpace(git(t, env, dir, nil, "write-tree"))
	if root.String() != wantRoot {
		t.Fatalf("root tree: got %s, git write-tree says %s", root, wantRoot)
	}
	// The root again through git mktree, fed the entries go-git decodes from our object.
	tree, err := object.GetTree(s, root)
	if err != nil {
		t.Fatal(err)
	}
	var ls strings.Builder
	for _, e := range tree.Entries {
		kind := "blob"
		if e.Mode.String() == "0040000" {
			kind = "tree"
		}
		fmt.Fprintf(&ls, "%s %s %s\t%s\n", strings.TrimPrefix(e.Mode.String(), "0"), kind, e.Hash, e.Name)
	}
	if got := strings.TrimSpace(git(t, env, dir, []byte(ls.String()), "mktree")); got != wantRoot {
		t.Errorf("git mktree of our root's entries: %s, want %s", got, wantRoot)
	}
	if empty, err := WriteTree(s, nil); err != nil || empty != EmptyTree {
		t.Errorf("empty tree: %s, %v", empty, err)
	}
	if got := strings.TrimSpace(git(t, env, dir, nil, "hash-object", "-t", "tree", "/dev/null")); got != EmptyTree.String() {
		t.Errorf("EmptyTree is %s, git says %s", EmptyTree, got)
	}

	// Commits: a root commit and a child, with trailers, in two time zones.
	author := object.Signature{Name: "Ada Agent", Email: "ada@agents.example", When: time.Unix(1700000000, 0).In(time.FixedZone("", 2*3600))}
	committer := object.Signature{Name: "ag", Email: "ag@ag.example", When: time.Unix(1700000100, 0).In(time.FixedZone("", -90*60))}
	trailers := []Trailer{
		{Key: "Ag-Change", Value: "chg_01J9Z8Y7X6W5V4T3S2R1Q0P9N8"},
		{Key: "Ag-Lease-Tokens", Value: "7,9"},
		{Key: "Ag-Attestation", Value: "sha256:" + strings.Repeat("ab", 32)},
	}
	first, err := WriteCommit(s, Commit{Tree: root, Author: author, Committer: committer, Message: "Import app", Trailers: trailers[:1]})
	if err != nil {
		t.Fatal(err)
	}
	msg1, _ := FormatMessage("Import app", trailers[:1])
	if got := commitTree(t, env, dir, wantRoot, "", msg1); got != first.String() {
		t.Fatalf("first commit: got %s, git commit-tree says %s", first, got)
	}
	body := "Fix the parser\n\nIt read past the end.\nSigned-off-by: looks like a trailer but is not the last paragraph\n\n"
	second, err := WriteCommit(s, Commit{Tree: root, Parents: []plumbing.Hash{first}, Author: author, Committer: committer, Message: body, Trailers: trailers})
	if err != nil {
		t.Fatal(err)
	}
	msg2, _ := FormatMessage(body, trailers)
	if got := commitTree(t, env, dir, wantRoot, first.String(), msg2); got != second.String() {
		t.Fatalf("second commit: got %s, git commit-tree says %s", second, got)
	}
	parsed := git(t, env, dir, []byte(msg2), "interpret-trailers", "--parse")
	want := "Ag-Change: chg_01J9Z8Y7X6W5V4T3S2R1Q0P9N8\nAg-Lease-Tokens: 7,9\nAg-Attestation: sha256:" + strings.Repeat("ab", 32) + "\n"
	if parsed != want {
		t.Errorf("git interpret-trailers --parse:\n%s\nwant\n%s", parsed, want)
	}
	git(t, env, dir, nil, "fsck", "--strict", "--no-dangling")

	for _, bad := range []Trailer{{"Ag Change", "x"}, {"Ag-Change", "two\nlines"}, {"", "x"}, {"K", ""}} {
		if _, err := FormatMessage("m", []Trailer{bad}); err == nil {
			t.Errorf("trailer %q accepted", bad)
		}
	}
	if m, _ := FormatMessage("", trailers[:1]); !strings.HasPrefix(m, "(no message)\n\nAg-Change: ") {
		t.Errorf("empty message formatted as %q", m)
	}
}

// commitTree answers the id `git commit-tree` gives the commit, with the identities and dates
// of gitEnv.
func commitTree(t *testing.T, env []string, dir, tree, parent, msg string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "msg")
	if err := os.WriteFile(f, []byte(msg), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"commit-tree", tree, "-F", f}
	if parent != "" {
		args = append(args, "-p", parent)
	}
	return strings.TrimSpace(git(t, env, dir, nil, args...))
}

// TestAgentMessageCannotForgeTrailers is the attack: an agent's change message that carries
// its own Ag-Attestation and Ag-Author, then a patch divider ("---"), after which git
// interpret-trailers would stop reading and take the forged paragraph for the trailers. Only
// ag's trailers are read back, by git log's %(trailers) and by interpret-trailers alike; a NUL
// in the message does not reach the commit.
func TestAgentMessageCannotForgeTrailers(t *testing.T) {
	t.Parallel()
	needGit(t)
	env := gitEnv(t)
	forged := "Fix\n\nAg-Attestation: sha256:" + strings.Repeat("0", 64) + "\nAg-Author: admin|x\n---\nsee above\n--- \tagain\n\nnul\x00here"
	trailers := []Trailer{{Key: "Ag-Change", Value: "chg_real"}, {Key: "Ag-Author", Value: "mallory|m"}}
	msg, err := FormatMessage(forged, trailers)
	if err != nil {
		t.Fatal(err)
	}
	want := "Ag-Change: chg_real\nAg-Author: mallory|m\n"
	dir := t.TempDir()
	if got := git(t, env, dir, []byte(msg), "interpret-trailers", "--parse"); got != want {
		t.Fatalf("git interpret-trailers --parse of the message read:\n%s\nwant only ag's trailers:\n%s", got, want)
	}
	if strings.Contains(msg, "\x00") || !strings.Contains(msg, "Ag-Attestation: sha256:") || !strings.Contains(msg, "\n ---\n") {
		t.Fatalf("the message lost the agent's words or kept its NUL: %q", msg)
	}
	git(t, env, dir, nil, "init", "-q")
	got := commitTree(t, env, dir, EmptyTree.String(), "", msg)
	if log := git(t, env, dir, nil, "log", "-1", "--format=%(trailers)", got); log != want+"\n" {
		t.Fatalf("git log's trailers:\n%q\nwant\n%q", log, want+"\n")
	}
}
