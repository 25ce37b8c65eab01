package gitstore

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// TestPlainPackIsAPackGitReads writes every object of a small history as a pack the way large
// fetches are sent, each object whole or a delta against its newer version, and has git index
// it strictly and check every object's id: a header, size, delta or checksum wrong anywhere
// would fail. The older versions of a file that changes a line at a time are deltas, each
// against the next, up to the newest, which is whole.
func TestPlainPackIsAPackGitReads(t *testing.T) {
	t.Parallel()
	needGit(t)
	env := gitEnv(t)
	r := &served{t: t, s: newStorer()}
	r.commit("Import app", sampleFiles)
	big := bytes.Repeat([]byte("a line that makes a blob larger than one header byte holds\n"), 3000)
	for i := range 5 {
		r.commit(fmt.Sprintf("Step %d", i), map[string][]byte{fmt.Sprintf("steps/%d.txt", i): fmt.Appendf(nil, "%d\n", i), "big.txt": append(big, byte('0'+i))})
	}
	ids, bases, err := objectsToSend(context.Background(), r.s, []plumbing.Hash{r.main}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pack bytes.Buffer
	if err := writePlainPack(&pack, r.s, ids, bases); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	git(t, env, dir, nil, "init", "-q", "--bare")
	git(t, env, dir, pack.Bytes(), "index-pack", "--strict", "--stdin")
	listed := strings.Fields(git(t, env, dir, nil, "rev-list", "--objects", r.main.String()))
	// rev-list prints each object's id, and a tree's or blob's path after it.
	n := 0
	for _, f := range listed {
		if len(f) == 40 {
			n++
		}
	}
	if n < len(ids) {
		t.Fatalf("git reads %d objects from the pack, want the %d sent", n, len(ids))
	}
	git(t, env, dir, nil, "fsck", "--strict", "--no-dangling", r.main.String())

	deltas := packDeltas(t, env, dir)
	newest := strings.TrimSpace(git(t, env, dir, nil, "rev-parse", r.main.String()+":big.txt"))
	if _, ok := deltas[newest]; ok {
		t.Errorf("the newest big.txt is a delta; want it whole")
	}
	older := strings.TrimSpace(git(t, env, dir, nil, "rev-parse", r.main.String()+"~1:big.txt"))
	if deltas[older] != newest {
		t.Errorf("big.txt of the commit before is a delta against %q; want the newest, %s (deltas: %v)", deltas[older], newest, deltas)
	}
	if len(deltas) < 5 {
		t.Errorf("%d objects of the pack are deltas; want at least the 4 older big.txt and the trees that changed with them", len(deltas))
	}
}

// TestLargeFetchesSendAPlainPack clones through the handler, over git's side band, with every
// fetch large enough to be sent without deltas: the real git client must take the pack, check
// out the files and find the clone whole. Not parallel: it lowers plainPackObjects, which
// parallel tests read, and they wait until it has returned.
func TestLargeFetchesSendAPlainPack(t *testing.T) {
	needGit(t)
	defer func(old int) { plainPackObjects = old }(plainPackObjects)
	plainPackObjects = 1
	env := gitEnv(t)
	r := &served{t: t, s: newStorer()}
	r.commit("Import app", sampleFiles)
	// Random bytes do not compress: the blob's pack entry is more than a side-band packet.
	big := make([]byte, 200<<10)
	if _, err := rand.NewChaCha8([32]byte{3, 4}).Read(big); err != nil {
		t.Fatal(err)
	}
	r.commit("Grow", map[string][]byte{"big.bin": big})
	srv := httptest.NewServer(http.StripPrefix("/git/app.git", NewHandler(r.open)))
	t.Cleanup(srv.Close)
	dir := filepath.Join(t.TempDir(), "app")
	if _, stderr, err := gitRun(env, "", nil, "clone", "--progress", srv.URL+"/git/app.git", dir); err != nil {
		t.Fatalf("git clone: %v\n%s", err, stderr)
	}
	git(t, env, dir, nil, "fsck", "--strict", "--no-dangling", "--full")
	if got := strings.TrimSpace(git(t, env, dir, nil, "rev-parse", "HEAD")); got != r.main.String() {
		t.Fatalf("cloned HEAD %s, want %s", got, r.main)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "big.bin")); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("big.bin in the clone: %d bytes, %v; want the %d written", len(got), err, len(big))
	}
}

// keptDeltas is a storer that keeps some objects as deltas (DeltaStorer), which must never be
// read whole when they go in a pack as kept.
type keptDeltas struct {
	*countingStorer
	t    *testing.T
	kept map[plumbing.Hash]StoredDelta
	// sent: kept objects whose base is in the pack, so written as kept.
	sent map[plumbing.Hash]bool
}

func (k keptDeltas) StoredDeltas(ids []plumbing.Hash) (map[plumbing.Hash]StoredDelta, error) {
	out := map[plumbing.Hash]StoredDelta{}
	for _, id := range ids {
		if d, ok := k.kept[id]; ok {
			out[id] = d
		}
	}
	return out, nil
}

func (k keptDeltas) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if k.sent[h] {
		k.t.Errorf("the pack writer read %s whole, which it was to send as kept", h)
	}
	return k.countingStorer.EncodedObject(t, h)
}

// TestAPackCarriesTheDeltasTheStoreKeeps: an object the store keeps as git's delta against
// another object of the pack goes in the pack as that delta, never read whole: an OFS_DELTA
// when its base was written before it, a REF_DELTA when the base comes after. One kept against
// an object the pack lacks goes whole. Git indexes the pack strictly and finds every object.
func TestAPackCarriesTheDeltasTheStoreKeeps(t *testing.T) {
	t.Parallel()
	needGit(t)
	env := gitEnv(t)
	r := &served{t: t, s: newStorer()}
	r.commit("Import app", sampleFiles)
	big := bytes.Repeat([]byte("a line that makes a blob larger than one header byte holds\n"), 3000)
	var versions [][]byte
	for i := range 5 {
		v := append(bytes.Clone(big), byte('0'+i))
		versions = append(versions, v)
		r.commit(fmt.Sprintf("Step %d", i), map[string][]byte{"big.txt": v})
	}
	ids, bases, err := objectsToSend(context.Background(), r.s, []plumbing.Hash{r.main}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := func(i int) plumbing.Hash { return BlobID(versions[i]) }
	keep := func(of, against []byte) StoredDelta {
		d := packfile.DiffDelta(against, of)
		z, err := Deflate(d)
		if err != nil {
			t.Fatal(err)
		}
		return StoredDelta{Base: BlobID(against), Size: len(d), Deflated: z}
	}
	outside := []byte("a blob no commit holds\n")
	k := keptDeltas{countingStorer: r.s, t: t,
		kept: map[plumbing.Hash]StoredDelta{
			id(1): keep(versions[1], versions[2]), // against a newer version
			id(3): keep(versions[3], versions[0]), // against an older one
			id(2): keep(versions[2], outside),     // against what the pack lacks: sent whole
		},
		sent: map[plumbing.Hash]bool{id(1): true, id(3): true},
	}
	var pack bytes.Buffer
	if err := writePlainPack(&pack, k, ids, bases); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	git(t, env, dir, nil, "init", "-q", "--bare")
	git(t, env, dir, pack.Bytes(), "index-pack", "--strict", "--stdin")
	git(t, env, dir, nil, "fsck", "--strict", "--no-dangling", r.main.String())
	deltas := packDeltas(t, env, dir)
	for _, v := range []int{1, 3} {
		if got, want := deltas[id(v).String()], k.kept[id(v)].Base.String(); got != want {
			t.Errorf("version %d is in the pack against %q, want the base it is kept against, %s", v, got, want)
		}
	}
	if base, ok := deltas[id(2).String()]; ok && base == BlobID(outside).String() {
		t.Errorf("version 2 is in the pack against a blob the pack lacks")
	}
}

// packDeltas answers, of the one pack of the git directory dir, each object kept as a delta
// with its base, as git's verify-pack -v lists them: "id type size packed-size offset" for a
// whole object, then "depth base" for a delta.
func packDeltas(t *testing.T, env []string, dir string) map[string]string {
	t.Helper()
	idx, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.idx"))
	if err != nil || len(idx) != 1 {
		t.Fatalf("the pack's index: %v, %v", idx, err)
	}
	deltas := map[string]string{}
	for _, line := range strings.Split(git(t, env, dir, nil, "verify-pack", "-v", idx[0]), "\n") {
		if f := strings.Fields(line); len(f) == 7 {
			deltas[f[0]] = f[6]
		}
	}
	return deltas
}
