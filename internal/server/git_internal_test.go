package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/store"
)

// memorySource is a gitObjectSource over a go-git memory storage that counts object reads.
type memorySource struct {
	s     *memory.Storage
	reads atomic.Int64
}

func (m *memorySource) GetRepository(context.Context, string) (store.Repository, error) {
	return store.Repository{}, store.ErrNotFound
}

func (m *memorySource) ReadGitObject(_ context.Context, id plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	m.reads.Add(1)
	o, err := m.s.EncodedObject(plumbing.AnyObject, id)
	if err != nil {
		return plumbing.InvalidObject, nil, store.ErrNotFound
	}
	r, err := o.Reader()
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return o.Type(), b, err
}

// history writes n commits, each adding a file of size bytes and changing a shared one, and
// answers the last commit and how many objects the history holds.
func history(t *testing.T, s *memory.Storage, n, size int) (plumbing.Hash, int) {
	t.Helper()
	files := map[string][]byte{}
	var main plumbing.Hash
	for i := range n {
		content := bytes.Repeat(fmt.Appendf(nil, "file %d line\n", i), size/12+1)[:size]
		files[fmt.Sprintf("f/%03d.txt", i)] = content
		files["shared.txt"] = fmt.Appendf(nil, "version %d\n", i)
		root, err := gitstore.WriteFiles(s, files)
		if err != nil {
			t.Fatal(err)
		}
		var parents []plumbing.Hash
		if !main.IsZero() {
			parents = []plumbing.Hash{main}
		}
		when := time.Unix(1700000000+int64(i)*60, 0).UTC()
		sig := object.Signature{Name: "ag", Email: "ag@ag.example", When: when}
		if main, err = gitstore.WriteCommit(s, gitstore.Commit{Tree: root, Parents: parents, Message: fmt.Sprintf("commit %d", i), Author: sig, Committer: sig}); err != nil {
			t.Fatal(err)
		}
	}
	return main, len(s.Objects)
}

// TestGitObjectsAreReadOnlyAndTyped ensures the storer answers objects by type as go-git's own
// storers do (another type is not found), and refuses every write.
func TestGitObjectsAreReadOnlyAndTyped(t *testing.T) {
	t.Parallel()
	src := &memorySource{s: memory.NewStorage()}
	main, _ := history(t, src.s, 1, 100)
	o := newGitObjects(context.Background(), src, slog.New(slog.DiscardHandler))

	c, err := o.EncodedObject(plumbing.CommitObject, main)
	if err != nil || c.Type() != plumbing.CommitObject || c.Hash() != main {
		t.Fatalf("EncodedObject(commit): %v, %v", c, err)
	}
	if _, err := o.EncodedObject(plumbing.BlobObject, main); !errors.Is(err, plumbing.ErrObjectNotFound) {
		t.Errorf("a commit asked for as a blob: %v, want ErrObjectNotFound", err)
	}
	if a, err := o.EncodedObject(plumbing.AnyObject, main); err != nil || a.Size() != c.Size() {
		t.Errorf("EncodedObject(any): %v, %v", a, err)
	}
	commit, err := object.GetCommit(o, main)
	if err != nil || commit.Message != "commit 0\n" {
		t.Fatalf("GetCommit through the storer: %v, %v", commit, err)
	}
	missing := plumbing.NewHash(strings.Repeat("ab", 20))
	if _, err := o.EncodedObject(plumbing.AnyObject, missing); !errors.Is(err, plumbing.ErrObjectNotFound) {
		t.Errorf("a missing object: %v, want ErrObjectNotFound", err)
	}
	if err := o.HasEncodedObject(missing); !errors.Is(err, plumbing.ErrObjectNotFound) {
		t.Errorf("HasEncodedObject of a missing object: %v", err)
	}
	if err := o.HasEncodedObject(main); err != nil {
		t.Errorf("HasEncodedObject of the commit: %v", err)
	}
	if size, err := o.EncodedObjectSize(main); err != nil || size != c.Size() {
		t.Errorf("EncodedObjectSize: %d, %v; want %d", size, err, c.Size())
	}

	if _, err := o.SetEncodedObject(o.NewEncodedObject()); err == nil {
		t.Error("SetEncodedObject stored an object")
	}
	if _, err := c.Writer(); err == nil {
		t.Error("an object answered a writer")
	}
	if err := o.AddAlternate("/elsewhere"); err == nil {
		t.Error("AddAlternate was accepted")
	}
	if _, err := o.IterEncodedObjects(plumbing.AnyObject); err == nil {
		t.Error("IterEncodedObjects listed every object")
	}
}

// TestGitObjectsKeepTheirCacheBounded ensures the contents kept stay within the cache's size,
// the least recently used dropped first, and an object larger than the cache is served
// without being kept.
func TestGitObjectsKeepTheirCacheBounded(t *testing.T) {
	t.Parallel()
	src := &memorySource{s: memory.NewStorage()}
	var ids []plumbing.Hash
	for i := range 10 {
		id, err := gitstore.WriteBlob(src.s, bytes.Repeat([]byte{byte('a' + i)}, 1000))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	big, err := gitstore.WriteBlob(src.s, bytes.Repeat([]byte("B"), 5000))
	if err != nil {
		t.Fatal(err)
	}
	o := newGitObjects(context.Background(), src, slog.New(slog.DiscardHandler))
	o.maxBytes = 3500
	for _, id := range ids {
		if _, err := o.EncodedObject(plumbing.BlobObject, id); err != nil {
			t.Fatal(err)
		}
		if o.bytes > o.maxBytes {
			t.Fatalf("the cache holds %d bytes, more than its %d", o.bytes, o.maxBytes)
		}
	}
	reads := src.reads.Load()
	for _, id := range ids[7:] { // the three most recent are kept
		if err := o.HasEncodedObject(id); err != nil {
			t.Fatal(err)
		}
	}
	if got := src.reads.Load() - reads; got != 0 {
		t.Errorf("reading the three most recent objects again read the source %d times, want 0", got)
	}
	if err := o.HasEncodedObject(ids[0]); err != nil || src.reads.Load()-reads != 1 {
		t.Errorf("reading the oldest object again: %v after %d reads, want 1 read", err, src.reads.Load()-reads)
	}
	b, err := o.EncodedObject(plumbing.BlobObject, big)
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Reader()
	if err != nil {
		t.Fatal(err)
	}
	content, _ := io.ReadAll(r)
	if len(content) != 5000 || o.bytes > o.maxBytes {
		t.Errorf("the large object: %d bytes read, the cache holds %d of %d", len(content), o.bytes, o.maxBytes)
	}
}

// TestGitPackReadsEachObjectAFewTimes ensures building a pack through the storer reads each
// object from the store once when the contents fit the cache, and a few times (not once per
// object compared with it) when they do not, and that the pack holds every object.
func TestGitPackReadsEachObjectAFewTimes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		maxBytes int
		perObj   float64
	}{
		{"fits", gitCacheBytes, 1},
		{"does not fit", 32 << 10, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			src := &memorySource{s: memory.NewStorage()}
			main, objects := history(t, src.s, 40, 1500) // 60 KiB of files
			o := newGitObjects(context.Background(), src, slog.New(slog.DiscardHandler))
			o.maxBytes = c.maxBytes
			req, err := gitstore.ReadUploadPackRequest(strings.NewReader(wantLines(main)))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := gitstore.UploadPack(context.Background(), &out, gitstore.Snapshot{Objects: o, Main: main}, req); err != nil {
				t.Fatal(err)
			}
			reads := src.reads.Load()
			if limit := int64(c.perObj * float64(objects)); reads > limit {
				t.Errorf("a pack of %d objects read the source %d times, more than %d", objects, reads, limit)
			}
			t.Logf("a pack of %d objects read the source %d times; %d bytes kept at the end", objects, reads, o.bytes)
			if o.bytes > o.maxBytes {
				t.Errorf("the cache holds %d bytes, more than its %d", o.bytes, o.maxBytes)
			}
			// The answer is NAK, then the pack on side-band channel 1: every object is in it.
			demux := sideband.NewDemuxer(sideband.Sideband64k, bytes.NewReader(out.Bytes()[len("0008NAK\n"):]))
			got := memory.NewStorage()
			if err := packfile.UpdateObjectStorage(got, demux); err != nil {
				t.Fatalf("read the pack: %v", err)
			}
			if len(got.Objects) != objects {
				t.Errorf("the pack holds %d objects, want %d", len(got.Objects), objects)
			}
		})
	}
}

// wantLines is an upload-pack request for one commit, done at once.
func wantLines(h plumbing.Hash) string {
	want := fmt.Sprintf("want %s side-band-64k ofs-delta no-progress\n", h)
	return fmt.Sprintf("%04x%s0000%04xdone\n", len(want)+4, want, len("done\n")+4)
}
