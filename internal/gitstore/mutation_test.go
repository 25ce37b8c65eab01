package gitstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/pktline"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Tests written for the mutation run of this package (scripts/mutation, docs/testing.md): each
// holds one rule at its edges, where a mutant of it would answer otherwise.

// TestDeltaSizesReadsGitsHeaderAndRefusesADamagedOne holds the reading of a delta's two sizes,
// by which the server refuses a delta that would make more than its bound before it makes a
// byte: each size is little-endian base 128 of at most 10 bytes.
func TestDeltaSizesReadsGitsHeaderAndRefusesADamagedOne(t *testing.T) {
	cont := func(n int) []byte { return []byte(strings.Repeat("\x80", n)) }
	for _, tc := range []struct {
		name        string
		delta       []byte
		src, target uint64
		ok          bool
	}{
		{"one byte each", []byte{5, 7, 0x90}, 5, 7, true},
		{"several bytes each", []byte{0xac, 0x02, 0xff, 0xff, 0x03, 1}, 300, 65535, true},
		{"the largest of one byte", []byte{0x7f, 0}, 127, 0, true},
		{"ten bytes", append(append(cont(9), 0x01), 3), 1 << 63, 3, true},
		{"eleven bytes", append(append(cont(10), 0x01), 3), 0, 0, false},
		{"the target of eleven bytes", append([]byte{1}, append(cont(10), 0x01)...), 0, 0, false},
		{"cut in the base's size", cont(3), 0, 0, false},
		{"cut in the target's size", []byte{4, 0x81}, 0, 0, false},
		{"no target's size", []byte{4}, 0, 0, false},
		{"empty", nil, 0, 0, false},
	} {
		src, target, ok := DeltaSizes(tc.delta)
		if ok != tc.ok || ok && (src != tc.src || target != tc.target) {
			t.Errorf("%s: DeltaSizes(% x) = %d, %d, %v; want %d, %d, %v", tc.name, tc.delta, src, target, ok, tc.src, tc.target, tc.ok)
		}
	}
}

// TestFormatMessageChangesOnlyWhatGitWouldMisread holds that an agent's message reaches the
// commit as written but for a line git would take for a patch's divider, and that a trailer
// key is letters, digits and '-' only, each end of each range included.
func TestFormatMessageChangesOnlyWhatGitWouldMisread(t *testing.T) {
	msg := "Title\n\n\tindented\n  two spaces\n---x stays\n--- becomes\n---\n----\nend"
	got, err := FormatMessage(msg, nil)
	want := "Title\n\n\tindented\n  two spaces\n---x stays\n ---  becomes\n ---\n----\nend\n"
	want = strings.Replace(want, " ---  becomes", " --- becomes", 1)
	if err != nil || got != want {
		t.Errorf("FormatMessage(%q) = %q, %v; want %q", msg, got, err, want)
	}
	for _, key := range []string{"Ag-09", "AZ", "az", "a-z-0-9", "0", "9", "A", "Z", "a", "z", "-"} {
		if _, err := FormatMessage("m", []Trailer{{Key: key, Value: "v"}}); err != nil {
			t.Errorf("trailer key %q: %v; want it taken", key, err)
		}
	}
	for _, key := range []string{"/", ":", "@", "[", "`", "{", "a b", "Ag_X", "é"} {
		if _, err := FormatMessage("m", []Trailer{{Key: key, Value: "v"}}); err == nil {
			t.Errorf("trailer key %q taken; want it refused", key)
		}
	}
}

// TestAPackCacheRemovesOnlyWhatACrashLeftAnHourAgo holds that opening the cache removes a pack
// a crash left half written an hour ago, and no other file: a pack being written now, by
// another process of the same cache, is kept.
func TestAPackCacheRemovesOnlyWhatACrashLeftAnHourAgo(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, age time.Duration) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("PACK"), 0o600); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := write("new-1.pack", time.Hour+time.Minute)
	fresh := write("new-2.pack", time.Hour-time.Minute)
	kept := write("abc.pack", 48*time.Hour)
	if _, err := NewPackCache(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("%s, written by a crash over an hour ago, is still there (%v)", stale, err)
	}
	for _, p := range []string{fresh, kept} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
}

// TestACachedPackIsReadOnlyAsTheFileItsDescriptionSays holds the checks of a cache file before
// its checksum is: the description at its end within its bound, a pack of at least a header
// and a checksum, and a header of git's version 2 counting the objects the description says.
// Each part wrong alone is refused; each bound met exactly is taken.
func TestACachedPackIsReadOnlyAsTheFileItsDescriptionSays(t *testing.T) {
	file := func(magic string, version, count uint32, checksum int, meta string) string {
		var b []byte
		b = append(b, magic...)
		b = binary.BigEndian.AppendUint32(b, version)
		b = binary.BigEndian.AppendUint32(b, count)
		b = append(b, make([]byte, checksum)...)
		b = append(b, meta...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(meta)))
		b = append(b, packCacheMagic...)
		p := filepath.Join(t.TempDir(), "x.pack")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	read := func(p string) (*cachedPack, error) {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		cp, err := readCachedPack(f, p)
		if err != nil {
			f.Close()
			return nil, err
		}
		t.Cleanup(cp.close)
		return cp, nil
	}
	meta := `{"tips":[],"objects":3}`
	// A description of 1 MiB exactly, the most it may be: JSON allows the spaces.
	largest := meta + strings.Repeat(" ", 1<<20-len(meta))
	for _, tc := range []struct {
		name  string
		path  string
		bytes int64 // 0: refused
	}{
		{"a whole file", file("PACK", 2, 3, 20, meta), 32},
		{"a pack of more bytes", file("PACK", 2, 3, 21, meta), 33},
		{"a description of 1 MiB", file("PACK", 2, 3, 20, largest), 32},
		{"a description of 1 MiB and a byte", file("PACK", 2, 3, 20, largest+" "), 0},
		{"a pack of 31 bytes", file("PACK", 2, 3, 19, meta), 0},
		{"another magic", file("PACX", 2, 3, 20, meta), 0},
		{"another version", file("PACK", 3, 3, 20, meta), 0},
		{"another count", file("PACK", 2, 4, 20, meta), 0},
		{"a description that is no JSON", file("PACK", 2, 3, 20, "{"+meta), 0},
	} {
		cp, err := read(tc.path)
		switch {
		case tc.bytes == 0 && err == nil:
			t.Errorf("%s: read as a cached pack of %d bytes; want it refused", tc.name, cp.bytes)
		case tc.bytes != 0 && err != nil:
			t.Errorf("%s: %v; want it read", tc.name, err)
		case tc.bytes != 0 && (cp.bytes != tc.bytes || cp.meta.Objects != 3):
			t.Errorf("%s: read as %d bytes and %d objects, want %d and 3", tc.name, cp.bytes, cp.meta.Objects, tc.bytes)
		}
	}
}

// TestWarmSaysWhenTheCachedPackCannotBeWritten holds that Warm, run after an import so that the
// first clone finds a pack ready, says when the pack could not be put in place, rather than
// leaving the first clone to build it without a word.
func TestWarmSaysWhenTheCachedPackCannotBeWritten(t *testing.T) {
	t.Parallel()
	r := &served{t: t, s: newStorer()}
	r.commit("Import", sampleFiles)
	cache, err := NewPackCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A directory holding a file where the pack goes: the pack, written whole, cannot be renamed
	// over it.
	if err := os.MkdirAll(filepath.Join(cache.path("app"), "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	snap, _ := r.open(t.Context())
	snap.CacheKey = "app"
	if err := cache.Warm(t.Context(), snap); err == nil {
		t.Errorf("Warm with the cached pack's place taken: no error")
	}
	if left, _ := filepath.Glob(filepath.Join(cache.dir, "new-*.pack")); len(left) != 0 {
		t.Errorf("Warm left %v", left)
	}
}

// TestPackTreeReadsEachEntryAndRefusesOneCutShort holds the reading of a tree the store keeps,
// which the server's integrate edits in place: each entry's mode, name and id, the last entry
// ending the data exactly, and a tree cut anywhere refused.
func TestPackTreeReadsEachEntryAndRefusesOneCutShort(t *testing.T) {
	id := func(b byte) (h [20]byte) {
		for i := range h {
			h[i] = b
		}
		return h
	}
	a, b := id(0xaa), id(0xbb)
	data := []byte("100644 a.txt\x00" + string(a[:]) + "40000 dir\x00" + string(b[:]))
	tree, err := PackTree(data)
	if err != nil {
		t.Fatal(err)
	}
	if tree.Len() != 2 {
		t.Fatalf("%d entries, want 2", tree.Len())
	}
	for i, want := range []struct {
		name string
		mode filemode.FileMode
		id   [20]byte
	}{{"a.txt", filemode.Regular, a}, {"dir", filemode.Dir, b}} {
		e := tree.Entry(i)
		if e.Name != want.name || e.Mode != want.mode || e.Hash != want.id {
			t.Errorf("entry %d: %s %v %s, want %s %v %x", i, e.Name, e.Mode, e.Hash, want.name, want.mode, want.id)
		}
	}
	for cut := 1; cut < len(data); cut++ {
		if _, err := PackTree(data[:cut]); err == nil && cut != len(data)-(10+20) {
			t.Errorf("the tree cut at byte %d of %d read", cut, len(data))
		}
	}
	for _, bad := range []string{" a\x00" + string(a[:]), "1006x4 a\x00" + string(a[:]), "100644 a" + string(a[:])} {
		if _, err := PackTree([]byte(bad)); err == nil {
			t.Errorf("PackTree(%q) read", bad)
		}
	}
	if empty, err := PackTree(nil); err != nil || empty.Len() != 0 {
		t.Errorf("the empty tree: %v, %v", empty, err)
	}
}

// TestGitReadsTheRefsWithGETOrHEADOnly holds that info/refs, the one GET of the protocol,
// answers GET and HEAD and nothing else.
func TestGitReadsTheRefsWithGETOrHEADOnly(t *testing.T) {
	t.Parallel()
	r := &served{t: t, s: newStorer()}
	r.commit("Import", sampleFiles)
	h := NewHandler(r.open)
	for _, tc := range []struct {
		method string
		code   int
	}{{http.MethodGet, http.StatusOK}, {http.MethodHead, http.StatusOK}, {http.MethodPost, http.StatusMethodNotAllowed},
		{http.MethodPut, http.StatusMethodNotAllowed}} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, "/info/refs?service=git-upload-pack", nil))
		if rec.Code != tc.code {
			t.Errorf("%s info/refs: %d, want %d", tc.method, rec.Code, tc.code)
		}
	}
}

// TestAnUploadPackRequestTakesOnlyHavesAfterItsWants holds that a line among the haves of a
// fetch is a have of one id, the flush of a round, or done: a want there, of the same length as
// a have, is refused, not taken for one.
func TestAnUploadPackRequestTakesOnlyHavesAfterItsWants(t *testing.T) {
	want := "want " + strings.Repeat("1", 40) + "\n"
	have := "have " + strings.Repeat("2", 40) + "\n"
	req, err := ReadUploadPackRequest(pkts(t, want, "", have, "", have, "done\n"))
	if err != nil || len(req.Haves) != 2 || !req.Done {
		t.Fatalf("a fetch of two rounds of haves: %+v, %v", req, err)
	}
	for _, lines := range [][]string{
		{want, "", want, "done\n"},
		{want, "", "have " + strings.Repeat("2", 39) + "\n", "done\n"},
		{want, "", "have " + strings.Repeat("g", 40) + "\n", "done\n"},
		{want, "", "shallow " + strings.Repeat("2", 40) + "\n", "done\n"},
	} {
		if req, err := ReadUploadPackRequest(pkts(t, lines...)); err == nil {
			t.Errorf("%q read: %+v", lines, req)
		}
	}
}

// uploadPack answers a stateless request made of lines ("" a flush), as ServeHTTP would, and
// what it wrote.
func uploadPack(t *testing.T, snap Snapshot, lines ...string) []byte {
	t.Helper()
	req, err := ReadUploadPackRequest(pkts(t, lines...))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := UploadPack(t.Context(), &out, snap, req); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestAFetchIsSentAThinPackOnlyWhenItAskedForOne holds that a client that did not ask for a
// thin pack gets a pack git can index alone: a delta against what it holds would be a missing
// base to it. And that progress goes on side-band only, and not to a client that asked for none.
func TestAFetchIsSentAThinPackOnlyWhenItAskedForOne(t *testing.T) {
	t.Parallel()
	needGit(t)
	env := gitEnv(t)
	var big strings.Builder
	for i := 0; big.Len() < 32<<10; i++ {
		fmt.Fprintf(&big, "line %d of a file large enough for a delta\n", i)
	}
	r := &served{t: t, s: newStorer()}
	first := r.commit("Import", map[string][]byte{"big.txt": []byte(big.String())})
	next := r.commit("Change a line", map[string][]byte{"big.txt": []byte(strings.Replace(big.String(), "line 7 ", "line seven ", 1))})
	snap, _ := r.open(t.Context())
	fetch := func(caps string) []byte {
		return uploadPack(t, snap, "want "+next.String()+" "+caps+"\n", "", "have "+first.String()+"\n", "done\n")
	}
	// index has git index the pack after the ACK line, alone (no --fix-thin).
	index := func(answer []byte) error {
		ack := pktline.NewScanner(bytes.NewReader(answer))
		if !ack.Scan() || !strings.HasPrefix(string(ack.Bytes()), "ACK ") {
			t.Fatalf("the answer does not start with an ACK: %q", answer[:min(len(answer), 60)])
		}
		pack := answer[4+len(ack.Bytes()):]
		dir := t.TempDir()
		git(t, env, dir, nil, "init", "-q", "--bare")
		if _, stderr, err := gitRun(env, dir, pack, "index-pack", "--stdin"); err != nil {
			return fmt.Errorf("git index-pack: %v: %s", err, stderr)
		}
		return nil
	}
	if err := index(fetch("ofs-delta")); err != nil {
		t.Errorf("a fetch that did not ask for a thin pack was sent one: %v", err)
	}
	if index(fetch("ofs-delta thin-pack")) == nil {
		t.Errorf("a fetch that asked for a thin pack was sent the file whole: this test would not see a thin pack")
	}

	progress := func(caps string) bool {
		answer := uploadPack(t, snap, "want "+next.String()+" "+caps+"\n", "", "done\n")
		for _, line := range readPkts(t, bytes.NewReader(answer)) {
			if strings.HasPrefix(line, "\x02ag: sending ") {
				return true
			}
		}
		return false
	}
	if !progress("ofs-delta side-band-64k") {
		t.Errorf("a fetch with side-band was told no progress")
	}
	if progress("ofs-delta side-band-64k no-progress") {
		t.Errorf("a fetch that asked for no progress was told it")
	}
	// Without side-band there is no channel for it: the pack follows the NAK, and nothing else.
	answer := uploadPack(t, snap, "want "+next.String()+" ofs-delta\n", "", "done\n")
	if !bytes.HasPrefix(answer, []byte("0008NAK\nPACK")) {
		t.Errorf("a fetch without side-band: %q..., want the NAK and the pack", answer[:min(len(answer), 16)])
	}
}

// TestACachedPackOfAnotherHistoryBoundaryIsNotSent holds that the cached pack of a repository
// imported shallow is not what a whole clone is sent once the repository's history stops
// elsewhere (imported again, deeper, under the same name): it is built afresh.
func TestACachedPackOfAnotherHistoryBoundaryIsNotSent(t *testing.T) {
	t.Parallel()
	r := &served{t: t, s: newStorer()}
	r.commit("One", map[string][]byte{"a.txt": []byte("1\n")})
	second := r.commit("Two", map[string][]byte{"a.txt": []byte("2\n")})
	r.commit("Three", map[string][]byte{"a.txt": []byte("3\n")})
	cacheDir := t.TempDir()
	cache, err := NewPackCache(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	warm := func() os.FileInfo {
		t.Helper()
		snap, _ := r.open(t.Context())
		snap.CacheKey = "app"
		if err := cache.Warm(t.Context(), snap); err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(cache.path("app"))
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	r.shallow = []plumbing.Hash{second}
	shallow := warm()
	if again := warm(); !os.SameFile(shallow, again) {
		t.Fatalf("Warm of the same history built its pack again")
	}
	r.shallow = nil
	if whole := warm(); os.SameFile(shallow, whole) {
		t.Errorf("the cached pack of the history shallow at %s is kept for the whole history", second)
	}
}

// TestAFetchWantsOnlyTheMainlineAndItsHistory holds SECURITY.md's "a fetch may want only the
// mainline's commit or its ancestors": a commit the store holds that never reached the
// mainline (a candidate's), or one below where the repository's history stops, is refused and
// nothing of it is sent; the mainline's commit and each ancestor are taken.
func TestAFetchWantsOnlyTheMainlineAndItsHistory(t *testing.T) {
	t.Parallel()
	r := &served{t: t, s: newStorer()}
	one := r.commit("One", map[string][]byte{"a.txt": []byte("1\n")})
	two := r.commit("Two", map[string][]byte{"a.txt": []byte("2\n")})
	main := r.commit("Three", map[string][]byte{"a.txt": []byte("3\n")})
	// A candidate: a commit on the mainline's tree that the mainline never moved to.
	candidate, err := WriteCommit(r.s, Commit{Tree: EmptyTree, Parents: []plumbing.Hash{main}, Message: "candidate"})
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := r.open(t.Context())
	for _, tc := range []struct {
		name  string
		wants []plumbing.Hash
		ok    bool
	}{
		{"the mainline", []plumbing.Hash{main}, true},
		{"an ancestor", []plumbing.Hash{one}, true},
		{"the mainline and its ancestors", []plumbing.Hash{main, two, one}, true},
		{"a candidate", []plumbing.Hash{candidate}, false},
		{"an ancestor and a candidate", []plumbing.Hash{one, candidate}, false},
		{"an id nobody holds", []plumbing.Hash{plumbing.NewHash(strings.Repeat("4", 40))}, false},
	} {
		var lines []string
		for i, w := range tc.wants {
			line := "want " + w.String()
			if i == 0 {
				line += " ofs-delta"
			}
			lines = append(lines, line+"\n")
		}
		req, err := ReadUploadPackRequest(pkts(t, append(lines, "", "done\n")...))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err = UploadPack(t.Context(), &out, snap, req)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "not our ref")):
			t.Errorf("%s: %v; want it refused as not our ref", tc.name, err)
		case !tc.ok && bytes.Contains(out.Bytes(), []byte("PACK")):
			t.Errorf("%s: a pack was sent", tc.name)
		}
	}

	// Where the history stops, the walk stops: what lies below is not the repository's.
	r.shallow = []plumbing.Hash{two}
	snap, _ = r.open(t.Context())
	if err := wantable(t.Context(), snap, []plumbing.Hash{two}); err != nil {
		t.Errorf("the commit the history stops at: %v", err)
	}
	if err := wantable(t.Context(), snap, []plumbing.Hash{one}); err == nil {
		t.Errorf("a commit below where the history stops was taken")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := wantable(ctx, snap, []plumbing.Hash{two}); err == nil {
		t.Errorf("a walk of a fetch that is gone went on")
	}
	if err := wantable(ctx, snap, []plumbing.Hash{main}); err != nil {
		t.Errorf("the mainline alone needs no walk: %v", err)
	}
}

// TestAPathThatTurnsFromADirectoryIntoAFileIsNoDeltaOfIt holds that a pack never makes a file
// a delta of the directory it replaced, or the other way round: git types a delta by its base,
// so such an entry would make every clone fail. An agent can make the two all but equal (a
// file holding the tree's own bytes), so that only the type keeps the delta out. Both a whole
// clone and a fetch of the change (a thin pack) are checked with git's fsck.
func TestAPathThatTurnsFromADirectoryIntoAFileIsNoDeltaOfIt(t *testing.T) {
	t.Parallel()
	needGit(t)
	env := gitEnv(t)
	r := &served{t: t, s: newStorer()}
	files := map[string][]byte{"other.txt": []byte("other\n")}
	for i := range 64 {
		files[fmt.Sprintf("x/file-%02d.txt", i)] = fmt.Appendf(nil, "%d\n", i)
	}
	r.commit("A directory", files)
	// The directory's tree as git encodes it, held as the file that replaces it.
	snap, _ := r.open(t.Context())
	c, err := object.GetCommit(snap.Objects, snap.Main)
	if err != nil {
		t.Fatal(err)
	}
	root, err := c.Tree()
	if err != nil {
		t.Fatal(err)
	}
	x, err := root.FindEntry("x")
	if err != nil {
		t.Fatal(err)
	}
	o, err := snap.Objects.EncodedObject(plumbing.TreeObject, x.Hash)
	if err != nil {
		t.Fatal(err)
	}
	treeBytes, err := ObjectData(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(r.open))
	t.Cleanup(srv.Close)
	dir := filepath.Join(t.TempDir(), "clone")
	if _, stderr, err := gitRun(env, "", nil, "clone", "-q", srv.URL, dir); err != nil {
		t.Fatalf("git clone: %v\n%s", err, stderr)
	}

	turn := map[string][]byte{"x": append(slices.Clone(treeBytes), '!')}
	for p := range files {
		if strings.HasPrefix(p, "x/") {
			turn[p] = nil
		}
	}
	r.commit("The directory becomes a file", turn)
	if _, stderr, err := gitRun(env, dir, nil, "fetch", "-q", "origin"); err != nil {
		t.Fatalf("git fetch: %v\n%s", err, stderr)
	}
	git(t, env, dir, nil, "fsck", "--strict", "--no-dangling", "--full")
	whole := filepath.Join(t.TempDir(), "whole")
	if _, stderr, err := gitRun(env, "", nil, "clone", "-q", srv.URL, whole); err != nil {
		t.Fatalf("git clone after the change: %v\n%s", err, stderr)
	}
	git(t, env, whole, nil, "fsck", "--strict", "--no-dangling", "--full")
	if got, err := os.ReadFile(filepath.Join(whole, "x")); err != nil || !bytes.Equal(got, turn["x"]) {
		t.Errorf("x in the clone: %d bytes, %v; want the file of %d", len(got), err, len(turn["x"]))
	}
}

// TestATreeNamesEachEntryOnce holds that a tree from elsewhere (an import, a push) is refused
// when it names an entry twice, also as a file and a directory, which git's ordering puts
// apart ("a", "a.b", "a/"): git's fsck reports it (duplicateEntries), so every clone that
// checks what it fetches would fail, and no checkout can hold both.
func TestATreeNamesEachEntryOnce(t *testing.T) {
	blob := plumbing.NewHash(strings.Repeat("1", 40))
	sub := plumbing.NewHash(strings.Repeat("2", 40))
	raw := func(entries ...string) []byte {
		var b []byte
		for i := 0; i < len(entries); i += 2 {
			id := blob
			if strings.HasPrefix(entries[i], "40000 ") {
				id = sub
			}
			b = append(b, entries[i]+" "+entries[i+1]+"\x00"...)
			b = append(b, id[:]...)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
		ok   bool
	}{
		{"a file, another, a directory", raw("100644", "a", "100644", "a.b", "40000", "b"), true},
		{"a file named twice", raw("100644", "a", "100644", "a"), false},
		{"a file and a directory of one name", raw("100644", "a", "100644", "a.b", "40000", "a"), false},
		{"a file and a directory of one name, side by side", raw("100644", "a", "40000", "a"), false},
		{"a directory named twice", raw("40000", "d", "40000", "d"), false},
	} {
		if _, err := DecodeCanonicalTree(tc.data); (err == nil) != tc.ok {
			t.Errorf("%s: %v; want taken: %v", tc.name, err, tc.ok)
		}
	}
}
