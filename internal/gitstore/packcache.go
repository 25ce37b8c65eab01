package gitstore

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// A first clone of a long history asks for every object, and building that pack is most of
// the clone's time: reading and inflating every object, finding deltas, compressing them again
// (docs/benchmarks.md). git's own server avoids it by sending what its last repack wrote. ag
// keeps, per repository, the last pack a whole clone of its mainline was sent, in a file of a
// cache directory, and sends the next whole clone that pack followed by what the mainline
// gained since: the objects a fetch from the pack's commit would get, written after it in the
// same pack, its header counting both and its checksum over both.
//
// The cached pack is used only when its commit is an ancestor of the mainline (the walk of what
// the mainline gained since reaches it), and with the same history boundary: then every object
// of it is one of the mainline's history, whatever store or earlier run wrote the file, since
// git names each object by its content. Before its first use by a process, its bytes are
// checked against its own checksum; a file that fails is removed, and the clone is built
// afresh.
//
// What a whole clone sends becomes the cache when there was none, or when it added at least
// packCacheRewriteObjects objects to the cached pack; once the pack has grown a quarter past
// the one a clone last built afresh (what the mainline gains is sent without deltas against
// the cached pack), the next whole clone builds it afresh, deltas and all.

// PackCache is a directory of cached packs, one per repository.
type PackCache struct {
	dir string

	mu       sync.Mutex
	verified map[string]fileVersion // path → the version of the file whose checksum was checked
}

// fileVersion tells a file's versions apart: a cached pack is replaced by a rename, never
// written in place.
type fileVersion struct {
	size  int64
	mtime time.Time
	inode uint64
}

// NewPackCache answers the cache kept in dir, which it makes (readable by its owner only: the
// packs hold every repository's content).
func NewPackCache(dir string) (*PackCache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pack cache: %w", err)
	}
	// What a crash left of a pack being written: an hour old, it is no clone's any more.
	if stale, err := filepath.Glob(filepath.Join(dir, "new-*.pack")); err == nil {
		for _, p := range stale {
			if info, err := os.Stat(p); err == nil && time.Since(info.ModTime()) > time.Hour {
				_ = os.Remove(p)
			}
		}
	}
	return &PackCache{dir: dir, verified: map[string]fileVersion{}}, nil
}

// packCacheRewriteObjects is how many objects a whole clone must add to the cached pack for
// what it sent to become the cache: fewer are cheaper to send again than to write again.
const packCacheRewriteObjects = 256

// packCacheMagic ends a cache file: the pack, its description (packMeta, JSON), the
// description's length (4 bytes, big-endian), then this.
const packCacheMagic = "ag-pack-cache-1\n"

// packMeta describes a cached pack.
type packMeta struct {
	Tips       []string `json:"tips"`        // the commits the pack holds with their history
	Stops      []string `json:"stops"`       // where that history stops (Snapshot.Shallow), sorted
	Objects    uint32   `json:"objects"`     // as its header says
	BuiltBytes int64    `json:"built_bytes"` // the size of the pack a clone last built afresh
}

// cachedPack is a cache file open for reading.
type cachedPack struct {
	f     *os.File
	path  string
	meta  packMeta
	bytes int64 // the pack's, header and checksum included
}

func (c *PackCache) path(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(c.dir, hex.EncodeToString(sum[:16])+".pack")
}

// open answers the cached pack of key, nil when there is none or the file is not one this
// version wrote whole (it is then removed).
func (c *PackCache) open(key string) *cachedPack {
	p := c.path(key)
	f, err := os.Open(p)
	if err != nil {
		return nil
	}
	cp, err := readCachedPack(f, p)
	if err == nil {
		err = c.verify(cp)
	}
	if err != nil {
		f.Close()
		_ = os.Remove(p)
		return nil
	}
	return cp
}

// verify checks cp's checksum over its bytes, once per version of its file.
func (c *PackCache) verify(cp *cachedPack) error {
	info, err := cp.f.Stat()
	if err != nil {
		return err
	}
	v := fileVersion{size: info.Size(), mtime: info.ModTime(), inode: inodeOf(info)}
	c.mu.Lock()
	done := c.verified[cp.path] == v
	c.mu.Unlock()
	if done {
		return nil
	}
	h := sha1.New()
	if _, err := io.Copy(h, io.NewSectionReader(cp.f, 0, cp.bytes-20)); err != nil {
		return err
	}
	sum := make([]byte, 20)
	if _, err := cp.f.ReadAt(sum, cp.bytes-20); err != nil {
		return err
	}
	if !bytes.Equal(sum, h.Sum(nil)) {
		return errors.New("the cached pack's checksum does not match")
	}
	c.mu.Lock()
	c.verified[cp.path] = v
	c.mu.Unlock()
	return nil
}

func readCachedPack(f *os.File, path string) (*cachedPack, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	tail := int64(4 + len(packCacheMagic))
	if info.Size() < tail+32 {
		return nil, errors.New("too short")
	}
	end := make([]byte, tail)
	if _, err := f.ReadAt(end, info.Size()-tail); err != nil {
		return nil, err
	}
	if string(end[4:]) != packCacheMagic {
		return nil, errors.New("not a cached pack")
	}
	metaLen := int64(binary.BigEndian.Uint32(end[:4]))
	packBytes := info.Size() - tail - metaLen
	if metaLen > 1<<20 || packBytes < 32 {
		return nil, errors.New("damaged")
	}
	raw := make([]byte, metaLen)
	if _, err := f.ReadAt(raw, packBytes); err != nil {
		return nil, err
	}
	var meta packMeta
	if err := json.Unmarshal(raw, &meta); err != nil {
		return nil, err
	}
	var head [12]byte
	if _, err := f.ReadAt(head[:], 0); err != nil {
		return nil, err
	}
	if string(head[:4]) != "PACK" || binary.BigEndian.Uint32(head[4:8]) != 2 || binary.BigEndian.Uint32(head[8:]) != meta.Objects {
		return nil, errors.New("not the pack its description says")
	}
	return &cachedPack{f: f, path: path, meta: meta, bytes: packBytes}, nil
}

func (cp *cachedPack) close() { cp.f.Close() }

// tips answers the commits the pack holds with their history.
func (cp *cachedPack) tips() ([]plumbing.Hash, error) {
	var out []plumbing.Hash
	for _, t := range cp.meta.Tips {
		h, ok := parseHash([]byte(t))
		if !ok {
			return nil, fmt.Errorf("cached pack: tip %q", t)
		}
		out = append(out, h)
	}
	return out, nil
}

// copyEntries copies the pack's entries, neither its header nor its checksum, to w.
func (cp *cachedPack) copyEntries(w io.Writer) error {
	_, err := io.Copy(w, io.NewSectionReader(cp.f, 12, cp.bytes-32))
	return err
}

// packTee writes what a whole clone is sent into a new cache file.
type packTee struct {
	f    *os.File
	dest string
	n    int64
	err  error
}

// create answers a writer of key's next cached pack, nil if the file cannot be made: the cache
// only saves time.
func (c *PackCache) create(key string) *packTee {
	f, err := os.CreateTemp(c.dir, "new-*.pack")
	if err != nil {
		return nil
	}
	return &packTee{f: f, dest: c.path(key)}
}

// Write never fails: a cache file that cannot be written is given up, not the clone.
func (t *packTee) Write(p []byte) (int, error) {
	if t.err == nil {
		var n int
		n, t.err = t.f.Write(p)
		t.n += int64(n)
	}
	return len(p), nil
}

// commit ends the file with meta and puts it in place of the cached pack.
func (t *packTee) commit(meta packMeta) error {
	defer t.abort()
	if t.err != nil {
		return t.err
	}
	raw, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	end := binary.BigEndian.AppendUint32(raw, uint32(len(raw)))
	end = append(end, packCacheMagic...)
	if _, err := t.f.Write(end); err != nil {
		return err
	}
	if err := t.f.Sync(); err != nil {
		return err
	}
	if err := t.f.Close(); err != nil {
		return err
	}
	return os.Rename(t.f.Name(), t.dest)
}

// abort removes the file unless commit put it in place.
func (t *packTee) abort() {
	t.f.Close()
	_ = os.Remove(t.f.Name())
}

// hashStrings answers hs as hex, sorted.
func hashStrings(hs []plumbing.Hash) []string {
	out := make([]string, 0, len(hs))
	for _, h := range hs {
		out = append(out, h.String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Warm builds the cached pack of snap's whole mainline, as a whole clone would send it, unless
// one the next clone can use is there: run after an import, it spares the first clone the
// building.
func (c *PackCache) Warm(ctx context.Context, snap Snapshot) error {
	if snap.Main.IsZero() {
		return nil
	}
	snap.Cache = c
	clone, err := snap.planClone(ctx, []plumbing.Hash{snap.Main})
	if err != nil {
		return err
	}
	defer clone.close()
	switch {
	case clone.tee != nil:
		if err := clone.write(io.Discard, snap.Objects); err != nil {
			return err
		}
		return clone.cacheErr
	case clone.cached == nil:
		return errors.New("pack cache: cannot create a file in its directory")
	}
	return nil
}

// clonePack is how a whole clone's pack is made: the cached pack and what the mainline gained
// after it, or the objects listed afresh; and, when what is sent is to become the cache, the
// file it goes to.
type clonePack struct {
	list     *sendList
	cached   *cachedPack
	tee      *packTee
	meta     packMeta
	cacheErr error // why what was sent did not become the cache
}

// planClone answers how a whole clone of wants is sent from snap, a snapshot with a cache.
func (snap Snapshot) planClone(ctx context.Context, wants []plumbing.Hash) (*clonePack, error) {
	list, cached, err := snap.fromCache(ctx, wants)
	if err != nil {
		return nil, err
	}
	clone := &clonePack{list: list, cached: cached, meta: packMeta{Tips: hashStrings(wants), Stops: hashStrings(snap.Shallow)}}
	switch {
	case cached == nil:
		if clone.list, err = listObjects(ctx, snap.Objects, wants, nil, snap.stops()); err != nil {
			return nil, err
		}
		clone.tee = snap.Cache.create(snap.CacheKey)
	case len(list.ids) >= packCacheRewriteObjects:
		clone.tee = snap.Cache.create(snap.CacheKey)
		clone.meta.BuiltBytes = cached.meta.BuiltBytes
	}
	return clone, nil
}

// objects answers how many objects the pack holds.
func (clone *clonePack) objects() int {
	n := len(clone.list.ids)
	if clone.cached != nil {
		n += int(clone.cached.meta.Objects)
	}
	return n
}

// write writes the pack to w and, when it is to become the cache, to its file: a cache that
// cannot be written is given up (cacheErr), not the clone.
func (clone *clonePack) write(w io.Writer, s storer.EncodedObjectStorer) error {
	if clone.tee != nil {
		w = io.MultiWriter(w, clone.tee)
	}
	var err error
	if clone.cached != nil {
		err = writePackWith(w, s, clone.cached, clone.list.ids, clone.list.bases, nil)
	} else {
		err = writePack(w, s, clone.list.ids, clone.list.bases)
	}
	if err != nil || clone.tee == nil {
		return err
	}
	clone.meta.Objects = uint32(clone.objects())
	if clone.meta.BuiltBytes == 0 {
		clone.meta.BuiltBytes = clone.tee.n
	}
	clone.cacheErr = clone.tee.commit(clone.meta)
	clone.tee = nil
	return nil
}

// close lets go of the cached pack, and of a cache file not written whole.
func (clone *clonePack) close() {
	if clone.cached != nil {
		clone.cached.close()
	}
	if clone.tee != nil {
		clone.tee.abort()
	}
}
