package checkout

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/maphash"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/ag-coord/ag/internal/repo"
)

// A checkout's index is what ag knows of each of its paths, as git's index is: the content and
// mode the base revision has there (a submodule's commit for a submodule), and the stat (size,
// mtime, ctime, inode, mode) and content digest the file on disk had when it was last hashed. A
// symbolic link is a path too: its content is its target, read with readlink and never
// followed. The stat's mode tells what the path held when hashed: a link, or a regular file
// executable or not, so a chmod alone is an edit. A scan that finds a file with the stat it had
// takes its content to be the one recorded, without reading it: that is what spares `ag status`
// (and integrate, diff, sync, revert: everything that asks localEdits) from reading and hashing
// every file of a checkout.
//
// A stat that matches can still hide an edit when the edit came so soon after the hash that the
// mtime did not move: the "racily clean" files of git. Every index carries the time its scan
// began (or its own mtime, when earlier), and an entry whose mtime is not at least a window older
// than that is never trusted: such a file is hashed again on every scan, until a scan that begins
// a window after its last write records it anew. The window is 100 ms where the index file's own
// mtime has a fraction of a second, well over the kernel tick by which file systems' stamps lag
// the clock, and 2 s where it has none: the 1 s and 2 s granularity of some file systems (FAT,
// some network file systems).
//
// The index is binary, sorted by path, and read in one piece without a copy per path: at 100,000
// files the JSON map and the text stat cache it replaces took most of a status's time to decode.
// It ends with a CRC-32C of what precedes it, so a file cut short or damaged is refused rather
// than read as a checkout with fewer files.
//
// The base part changes only with the base revision, and checkout.json names the index that
// goes with its base revision: a new base is written to a new index file, then checkout.json is
// renamed over the old one naming it, then the old index is removed, so a crash at any point
// leaves a checkout.json whose index is whole and of its base. A scan rewrites the index it was
// given in place (a new file renamed over it): only the stat part differs, so either file is
// right for the base. A new base that differs from the index by a few paths is written as an
// overlay of those paths over the index it came from (index_split.go), as git's split index.

// indexMagic heads an index of this version. The versions before it (2, before the watcher's
// token, and 3) knew no modes: read as this one, every executable, link and submodule of their
// base would pass for a plain file, so they are refused (errIndexOldVersion) and rebuilt from the
// server's tree of the base revision (workspace.rebuildOldIndex).
const (
	indexMagic       = "ag-index\x00\x04"
	indexMagicPrefix = "ag-index\x00" // then the version, one byte
)

// indexPrefix begins the name of every index file under .ag.
const indexPrefix = "index-"

// racyWindow is how much older than the index's scan an mtime must be for its entry to be
// trusted, on a file system that stamps whole seconds; fineRacyWindow on one that stamps finer
// (as the index file's own mtime tells), whose stamps lag the clock by a kernel tick at most.
const (
	racyWindow     = 2 * time.Second
	fineRacyWindow = 100 * time.Millisecond
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sha256Sum is a content digest as bytes: the API's "sha256:<hex>" without the text.
type sha256Sum [32]byte

func (d sha256Sum) String() string { return "sha256:" + hex.EncodeToString(d[:]) }

// parseSum reads a digest "sha256:<hex>".
func parseSum(digest string) (sha256Sum, bool) {
	var d sha256Sum
	h, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(h) != 64 {
		return d, false
	}
	_, err := hex.Decode(d[:], []byte(h))
	return d, err == nil
}

// fileStat is what the index keeps of a file's stat. The mode is the platform's raw one, and
// ctime and inode are 0 where the platform does not tell.
type fileStat struct {
	size  int64
	mtime int64 // ns since the epoch
	ctime int64 // ns since the epoch; every write, chmod or utimes moves it on
	ino   uint64
	mode  uint32
}

// indexEntry is what the index knows of one path.
type indexEntry struct {
	path   string
	inBase bool // the base revision has a file here, with content base and mode baseMode
	// base is the content's digest; for a submodule, its commit's 20 bytes and zeros.
	base     sha256Sum
	baseMode string // repo.ModeFile, ModeExecutable, ModeSymlink or ModeGitlink; "" unless inBase
	hashed   bool   // the file on disk had stat when it was hashed to local
	removed  bool   // in an overlay only: the shared index's entry of this path is gone
	stat     fileStat
	local    sha256Sum
}

// index is a checkout's index.
type index struct {
	// stamp is when the scan that wrote the index began (ns since the epoch), or the index
	// file's own mtime when that is earlier: stats are trusted only when older than it.
	stamp   int64
	window  time.Duration // see racyWindow
	entries []indexEntry  // sorted by path, each path once
	// watch is the checkout watcher's token taken before the scan that wrote the index began:
	// the changes since it are those the stats here do not know of (watch.go).
	watch WatchToken
	// shared is the whole index file the entries were read from or last written to, "" for
	// entries of no file; linkOf names the overlay whose link shared is, "" when shared is
	// itself the named index; changed are the paths whose entries differ from shared's. See
	// index_split.go.
	shared  string
	linkOf  string
	changed map[string]bool
	// crc is the checksum of the file this index was decoded from; sharedCRC that of shared.
	crc, sharedCRC uint32
}

// trusted answers the content of the file at entry e whose stat is now, when the index may be
// trusted for it.
func (x *index) trusted(e *indexEntry, now fileStat) (sha256Sum, bool) {
	if !e.hashed || e.stat != now || e.stat.mtime >= x.stamp-x.window.Nanoseconds() {
		return sha256Sum{}, false
	}
	return e.local, true
}

// Flags of an entry in the encoding. A base entry of none of the mode flags is a 100644 file.
const (
	entryInBase = 1 << iota
	entryHashed
	entryBaseExecutable
	entryBaseSymlink
	entryBaseGitlink
	entryRemoved // an overlay's only, and alone

	entryModes   = entryBaseExecutable | entryBaseSymlink | entryBaseGitlink
	entryAllFlag = entryInBase | entryHashed | entryModes | entryRemoved
)

// modeFlag answers the flag of a base mode; modeOfFlags the mode of an entry's flags.
func modeFlag(mode string) uint32 {
	switch mode {
	case repo.ModeExecutable:
		return entryBaseExecutable
	case repo.ModeSymlink:
		return entryBaseSymlink
	case repo.ModeGitlink:
		return entryBaseGitlink
	}
	return 0
}

func modeOfFlags(flags uint32) (string, bool) {
	switch flags & entryModes {
	case 0:
		return repo.ModeFile, true
	case entryBaseExecutable:
		return repo.ModeExecutable, true
	case entryBaseSymlink:
		return repo.ModeSymlink, true
	case entryBaseGitlink:
		return repo.ModeGitlink, true
	}
	return "", false
}

// indexRecord is the size of an entry's record in the encoding: path offset (4) and length (4),
// flags (4), base digest (32), size, mtime, ctime, inode (8 each), mode (4), local digest (32).
const indexRecord = 4 + 4 + 4 + 32 + 8*4 + 4 + 32

// writeTo writes the index as decodeIndex reads it:
//
//	"ag-index" 0x00 0x04, stamp (8 bytes), count (4 bytes),
//	watcher session (16 bytes, zero without a watcher), watcher sequence (8 bytes)
//	count records of indexRecord bytes, in path order
//	the paths, one after the other
//	CRC-32C of all the above (4 bytes)
//
// with integers little-endian. Records of one size make reading an index of 100,000 files a
// few milliseconds: what a scan reads before it can compare anything. It is written through
// one small buffer, not built whole first: memory a process has not touched yet costs a page
// fault per page, and for the megabytes of a large checkout's index those faults cost more
// than the encoding.
func (x *index) writeTo(w io.Writer) error {
	_, err := writeEntries(w, indexMagic, x.stamp, x.watch, nil, x.entries)
	return err
}

// writeEntries writes an index of entries headed by magic (a whole index's or an overlay's),
// the header's own fields, then extra; it answers the file's checksum.
func writeEntries(w io.Writer, magic string, stamp int64, watch WatchToken, extra []byte, entries []indexEntry) (uint32, error) {
	out := crcWriter{w: w}
	b := make([]byte, 0, 64<<10)
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint64(b, uint64(stamp))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(entries)))
	session := sessionBytes(watch.Session)
	b = append(b, session[:]...)
	b = binary.LittleEndian.AppendUint64(b, watch.Seq)
	b = append(b, extra...)
	off := 0
	for i := range entries {
		if len(b)+indexRecord > cap(b) {
			if b = out.flush(b); out.err != nil {
				return 0, out.err
			}
		}
		e := &entries[i]
		var flags uint32
		switch {
		case e.removed:
			flags = entryRemoved
		case e.inBase:
			flags = entryInBase | modeFlag(e.baseMode)
		}
		if e.hashed && !e.removed {
			flags |= entryHashed
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(off))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e.path)))
		b = binary.LittleEndian.AppendUint32(b, flags)
		b = append(b, e.base[:]...)
		b = binary.LittleEndian.AppendUint64(b, uint64(e.stat.size))
		b = binary.LittleEndian.AppendUint64(b, uint64(e.stat.mtime))
		b = binary.LittleEndian.AppendUint64(b, uint64(e.stat.ctime))
		b = binary.LittleEndian.AppendUint64(b, e.stat.ino)
		b = binary.LittleEndian.AppendUint32(b, e.stat.mode)
		b = append(b, e.local[:]...)
		off += len(e.path)
	}
	for i := range entries {
		if p := entries[i].path; len(b)+len(p) > cap(b) {
			if b = out.flush(b); out.err != nil {
				return 0, out.err
			}
			if len(p) > cap(b) {
				out.crc = crc32.Update(out.crc, castagnoli, []byte(p))
				if _, err := io.WriteString(w, p); err != nil {
					return 0, err
				}
				continue
			}
		}
		b = append(b, entries[i].path...)
	}
	b = out.flush(b)
	if out.err != nil {
		return 0, out.err
	}
	_, err := w.Write(binary.LittleEndian.AppendUint32(b, out.crc))
	return out.crc, err
}

// crcWriter writes buffers to w, keeping the CRC-32C of all it wrote.
type crcWriter struct {
	w   io.Writer
	crc uint32
	err error
}

// flush writes b and answers it emptied for more.
func (c *crcWriter) flush(b []byte) []byte {
	if c.err == nil {
		c.crc = crc32.Update(c.crc, castagnoli, b)
		_, c.err = c.w.Write(b)
	}
	return b[:0]
}

// encode answers the index as writeTo writes it.
func (x *index) encode() []byte {
	var b bytes.Buffer
	_ = x.writeTo(&b)
	return b.Bytes()
}

// errIndexDamaged is what decodeIndex answers for anything but an index ag wrote whole;
// errIndexOldVersion for an index of a version that knew no modes.
var (
	errIndexDamaged    = errors.New("not a whole index of this version")
	errIndexOldVersion = errors.New("an index written by an ag that knew no modes")
)

// decodeIndex reads an index, which keeps data: its paths are strings over it, not copies.
// Paths are not checked here (see checkout.baseFiles): a scan only compares them with what it
// finds on disk.
func decodeIndex(data []byte) (*index, error) { return decodeIndexSpare(data, true, 0) }

// decodeIndexSpare is decodeIndex of data it keeps (its paths are strings over data) or, when
// not keep, of data it copies the paths out of (a mapped file's, unmapped after), leaving room
// for spare more entries, which an overlay applied to the index will add.
func decodeIndexSpare(data []byte, keep bool, spare int) (*index, error) {
	overlay := bytes.HasPrefix(data, []byte(overlayMagic))
	if !overlay && !bytes.HasPrefix(data, []byte(indexMagic)) {
		if oldIndexVersion(data) {
			return nil, errIndexOldVersion
		}
		return nil, errIndexDamaged
	}
	head := len(indexMagic) + 36
	if len(data) < head+4 {
		return nil, errIndexDamaged
	}
	body := data[:len(data)-4]
	le := binary.LittleEndian
	x := &index{stamp: int64(le.Uint64(data[len(indexMagic):])), crc: le.Uint32(data[len(body):])}
	if crc32.Checksum(body, castagnoli) != x.crc {
		return nil, errIndexDamaged
	}
	count := int(le.Uint32(data[len(indexMagic)+8:]))
	var session [16]byte
	copy(session[:], data[len(indexMagic)+12:])
	x.watch = WatchToken{Session: sessionString(session), Seq: le.Uint64(data[len(indexMagic)+28:])}
	if overlay {
		// The shared index's name, then its checksum.
		if len(body) < head+1 {
			return nil, errIndexDamaged
		}
		n := int(body[head])
		if len(body) < head+1+n+4 || !validIndexName(string(body[head+1:head+1+n])) {
			return nil, errIndexDamaged
		}
		x.shared = string(body[head+1 : head+1+n])
		x.sharedCRC = le.Uint32(body[head+1+n:])
		head += 1 + n + 4
	}
	if count > (len(body)-head)/indexRecord {
		return nil, errIndexDamaged
	}
	records, names := body[head:head+count*indexRecord], body[head+count*indexRecord:]
	// data is the caller's to give away, never written after: its paths are taken as strings
	// without copying megabytes.
	all := unsafe.String(unsafe.SliceData(names), len(names))
	if !keep {
		all = string(names)
	}
	x.entries = make([]indexEntry, count, count+spare)
	end := 0
	for i := range x.entries {
		r := records[i*indexRecord : (i+1)*indexRecord]
		off, n, flags := int(le.Uint32(r)), int(le.Uint32(r[4:])), le.Uint32(r[8:])
		mode, ok := modeOfFlags(flags)
		if off != end || n == 0 || n > len(names)-off || flags&^entryAllFlag != 0 || !ok || flags&entryInBase == 0 && flags&entryModes != 0 {
			return nil, errIndexDamaged
		}
		end = off + n
		e := &x.entries[i]
		e.path = all[off:end]
		if i > 0 && e.path <= x.entries[i-1].path {
			return nil, errIndexDamaged
		}
		if flags&entryRemoved != 0 {
			if !overlay || flags != entryRemoved {
				return nil, errIndexDamaged
			}
			e.removed = true
			continue
		}
		e.inBase, e.hashed = flags&entryInBase != 0, flags&entryHashed != 0
		if e.inBase {
			e.baseMode = mode
		}
		copy(e.base[:], r[12:44])
		e.stat = fileStat{size: int64(le.Uint64(r[44:])), mtime: int64(le.Uint64(r[52:])), ctime: int64(le.Uint64(r[60:])), ino: le.Uint64(r[68:]), mode: le.Uint32(r[76:])}
		copy(e.local[:], r[80:112])
	}
	if end != len(names) {
		return nil, errIndexDamaged
	}
	return x, nil
}

// oldIndexVersion reports whether data begins as an index of a version before modes (2 or 3).
func oldIndexVersion(data []byte) bool {
	rest, ok := bytes.CutPrefix(data, []byte(indexMagicPrefix))
	return ok && len(rest) > 0 && (rest[0] == 2 || rest[0] == 3)
}

// validIndexName reports whether name is one saveIn gives an index file: checkout.json names
// it, and must not name another file of the checkout, or one outside it.
func validIndexName(name string) bool {
	rest, ok := strings.CutPrefix(name, indexPrefix)
	if !ok || rest == "" || len(rest) > 64 {
		return false
	}
	for _, r := range rest {
		if !('A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
			return false
		}
	}
	return true
}

// readIndex reads the index file name under .ag of the checkout opened as root: a whole
// index, or an overlay applied to the whole index it names (index_split.go).
func readIndex(root *os.Root, name string) (*index, error) {
	x, err := readIndexFile(root, name, 0)
	if err != nil {
		return nil, err
	}
	if x.shared == "" {
		// A whole index: its own shared file.
		x.shared, x.sharedCRC = name, x.crc
		return x, nil
	}
	added := 0
	for i := range x.entries {
		if !x.entries[i].removed {
			added++
		}
	}
	shared, err := readIndexFile(root, x.shared, added)
	if err != nil {
		return nil, err
	}
	if shared.shared != "" || shared.crc != x.sharedCRC {
		return nil, fmt.Errorf("%s: its shared index %s: %w", StateDir+"/"+name, x.shared, errIndexDamaged)
	}
	if err := x.applyTo(shared.entries); err != nil {
		return nil, fmt.Errorf("%s: %w", StateDir+"/"+name, err)
	}
	x.linkOf = name
	return x, nil
}

// readIndexFile decodes the index file name under .ag, leaving room for spare more entries.
func readIndexFile(root *os.Root, name string, spare int) (*index, error) {
	path := StateDir + "/" + name
	if info, err := root.Lstat(path); err != nil {
		return nil, err
	} else if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := root.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	x, err := decodeIndexFile(f, info.Size(), spare)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	x.stamp = min(x.stamp, info.ModTime().UnixNano())
	x.window = racyWindow
	if info.ModTime().Nanosecond() != 0 {
		x.window = fineRacyWindow
	}
	return x, nil
}

// baseIndex answers an index of the base files, carrying over what old knows of the files on
// disk.
func baseIndex(files map[string]treeFile, old *index) (*index, error) {
	x := &index{entries: make([]indexEntry, 0, len(files))}
	if old != nil {
		x.stamp, x.window, x.watch = old.stamp, old.window, old.watch
		for _, e := range old.entries {
			if e.hashed {
				e.inBase, e.base, e.baseMode = false, sha256Sum{}, ""
				x.entries = append(x.entries, e)
			}
		}
	}
	pos := make(map[string]int, len(x.entries))
	for i, e := range x.entries {
		pos[e.path] = i
	}
	for p, f := range files {
		sum, err := f.baseSum()
		if err != nil {
			return nil, fmt.Errorf("file %q %v", ShortPath(p), err)
		}
		if i, ok := pos[p]; ok {
			x.entries[i].inBase, x.entries[i].base, x.entries[i].baseMode = true, sum, f.Mode
			continue
		}
		x.entries = append(x.entries, indexEntry{path: p, inBase: true, base: sum, baseMode: f.Mode})
	}
	slices.SortFunc(x.entries, func(a, b indexEntry) int { return strings.Compare(a.path, b.path) })
	return x, nil
}

// staleIndexAge is how old an index file that checkout.json does not name must be to be
// removed as a crash's leftover: younger, it may be another ag's, about to be named.
const staleIndexAge = 10 * time.Minute

// removeStaleIndexes removes the index files under .ag that checkout.json does not name (keep)
// and that are older than staleIndexAge: those a crash left before checkout.json named them,
// and those of earlier bases whose removal a crash cut short. It removes the stat cache that
// came before the index too.
func removeStaleIndexes(root *os.Root, keep string) {
	_ = root.Remove(StateDir + "/stat")
	entries, err := fs.ReadDir(root.FS(), StateDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), indexPrefix) || e.Name() == keep {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleIndexAge {
			_ = root.Remove(StateDir + "/" + e.Name())
		}
	}
}

// checkBase refuses base files no ag wrote: ag writes, reverts and removes files by these
// paths, so a path into .git or out of the checkout must not pass because the index was edited
// by hand, copied from someone else, or damaged; nor a path under another of them, which a
// write would reach through a link.
func checkBase(files map[string]treeFile) error {
	for p, f := range files {
		if err := repo.ValidatePath(p, false); err != nil {
			return fmt.Errorf("file %q %v", ShortPath(p), err)
		}
		if err := f.check(); err != nil {
			return fmt.Errorf("file %q %v", ShortPath(p), err)
		}
	}
	return checkNothingUnder(files)
}

// pathTable finds the entries of an index by path. A scan looks up every file it finds, as
// bytes; a map of strings cost twice as long to build at 100,000 files, and a copy of each path
// to look up.
type pathTable struct {
	x     *index
	seed  maphash.Seed
	slots []int32 // 1 + the entry hashed there, 0 for none: open addressing, probed linearly
	mask  uint64
}

func newPathTable(x *index) *pathTable {
	size := 8
	for size < 2*len(x.entries) {
		size <<= 1
	}
	t := &pathTable{x: x, seed: maphash.MakeSeed(), slots: make([]int32, size), mask: uint64(size - 1)}
	for i := range x.entries {
		h := maphash.String(t.seed, x.entries[i].path) & t.mask
		for t.slots[h] != 0 {
			h = (h + 1) & t.mask
		}
		t.slots[h] = int32(i + 1)
	}
	return t
}

// searchTable is a pathTable that searches the sorted entries instead of hashing them all
// first: for a scan that looks up the few paths a watcher named, building the table of a large
// checkout's every path would cost more than all its lookups.
func searchTable(x *index) *pathTable { return &pathTable{x: x} }

// find answers the entry at path.
func (t *pathTable) find(path []byte) (int, bool) {
	if t.slots == nil {
		return slices.BinarySearchFunc(t.x.entries, path, func(e indexEntry, p []byte) int { return strings.Compare(e.path, string(p)) })
	}
	for h := maphash.Bytes(t.seed, path) & t.mask; ; h = (h + 1) & t.mask {
		s := t.slots[h]
		if s == 0 {
			return 0, false
		}
		if t.x.entries[s-1].path == string(path) {
			return int(s - 1), true
		}
	}
}
