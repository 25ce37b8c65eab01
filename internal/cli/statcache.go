package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"
)

// The stat cache is what spares `ag status` (and integrate, diff, sync, revert: everything that
// asks localEdits) from reading and hashing every file of a checkout each time, as git's index
// does: per file, the size, mtime, ctime, inode and mode it had when it was last hashed, and the
// digest. A file whose stat is as cached is taken to hold the cached digest; any other is read
// and hashed again.
//
// A stat that matches can still hide an edit when the edit came so soon after the hash that the
// mtime did not move: the "racily clean" files of git. Every cache carries the time its scan
// began (or its own mtime, when earlier), and an entry whose mtime is not at least a window older
// than that is never trusted: such a file is hashed again on every scan, until a scan that begins
// a window after its last write records it anew. The window is 100 ms where the cache file's own
// mtime has a fraction of a second, well over the kernel tick by which file systems' stamps lag
// the clock, and 2 s where it has none: the 1 s and 2 s granularity of some file systems (FAT,
// some network file systems).
//
// The cache lives in .ag/stat, written as every file of a checkout is (through os.Root, a new
// file renamed over the old), so a crash leaves the old cache or the new one. A cache that
// cannot be read, is truncated or of another version is ignored: the files are then hashed, as
// they were before there was a cache. A cache that cannot be written (a read-only checkout) only
// costs time.

// statCachePath is where a checkout keeps its stat cache.
const statCachePath = stateDir + "/stat"

// statCacheMagic heads a stat cache of this version.
const statCacheMagic = "ag-stat-cache 1"

// racyWindow is how much older than the cache's scan an mtime must be for its entry to be
// trusted, on a file system that stamps whole seconds; fineRacyWindow on one that stamps finer
// (as the cache file's own mtime tells), whose stamps lag the clock by a kernel tick at most.
const (
	racyWindow     = 2 * time.Second
	fineRacyWindow = 100 * time.Millisecond
)

// statEntry is what the cache knows of one file.
type statEntry struct {
	size   int64
	mtime  int64 // ns since the epoch
	ctime  int64 // ns since the epoch; 0 where the platform does not tell
	ino    uint64
	mode   fs.FileMode
	digest string // of the content, sha256:<hex>
}

// statOf answers the entry of a file with info and digest.
func statOf(info fs.FileInfo, digest string) statEntry {
	ino, ctime := fileIdentity(info)
	return statEntry{size: info.Size(), mtime: info.ModTime().UnixNano(), ctime: ctime, ino: ino, mode: info.Mode(), digest: digest}
}

// sameStat reports whether two entries describe the same file as stat sees it.
func (e statEntry) sameStat(o statEntry) bool {
	return e.size == o.size && e.mtime == o.mtime && e.ctime == o.ctime && e.ino == o.ino && e.mode == o.mode
}

// statCache is a checkout's stat cache.
type statCache struct {
	// stamp is when the scan that wrote the cache began (ns since the epoch), or the cache
	// file's own mtime when that is earlier: entries are trusted only when older than it.
	stamp   int64
	window  time.Duration // see racyWindow
	entries map[string]statEntry
}

// digestOf answers the cached digest of the file at path whose stat is now, when the cache may
// be trusted for it.
func (sc *statCache) digestOf(path string, now statEntry) (string, bool) {
	if sc == nil {
		return "", false
	}
	e, ok := sc.entries[path]
	if !ok || !e.sameStat(now) || e.mtime >= sc.stamp-sc.window.Nanoseconds() {
		return "", false
	}
	return e.digest, true
}

// loadStatCache reads the stat cache of the checkout opened as root; a missing or unreadable
// cache is an empty one.
func loadStatCache(root *os.Root) *statCache {
	empty := &statCache{entries: map[string]statEntry{}}
	info, err := root.Lstat(statCachePath)
	if err != nil || !info.Mode().IsRegular() {
		return empty
	}
	data, err := root.ReadFile(statCachePath)
	if err != nil {
		return empty
	}
	sc, err := parseStatCache(data)
	if err != nil {
		return empty
	}
	sc.stamp = min(sc.stamp, info.ModTime().UnixNano())
	sc.window = racyWindow
	if info.ModTime().Nanosecond() != 0 {
		sc.window = fineRacyWindow
	}
	return sc
}

// parseStatCache reads a stat cache:
//
//	ag-stat-cache 1 STAMP
//	SIZE MTIME CTIME INODE MODE DIGEST PATH
//	...
//	end COUNT
//
// with numbers in decimal, the digest's hex without "sha256:", and the path as it is, or quoted
// as Go quotes strings when it holds a line break or starts with a quote.
func parseStatCache(data []byte) (*statCache, error) {
	header, rest, ok := bytes.Cut(data, []byte("\n"))
	stamp, found := strings.CutPrefix(string(header), statCacheMagic+" ")
	if !ok || !found {
		return nil, errors.New("not a stat cache of this version")
	}
	sc := &statCache{entries: map[string]statEntry{}}
	var err error
	if sc.stamp, err = strconv.ParseInt(stamp, 10, 64); err != nil {
		return nil, err
	}
	for len(rest) > 0 {
		var line []byte
		if line, rest, ok = bytes.Cut(rest, []byte("\n")); !ok {
			return nil, errors.New("truncated")
		}
		if count, end := bytes.CutPrefix(line, []byte("end ")); end {
			if n, err := strconv.Atoi(string(count)); err != nil || n != len(sc.entries) || len(rest) > 0 {
				return nil, errors.New("truncated or damaged")
			}
			return sc, nil
		}
		path, e, err := parseStatLine(string(line))
		if err != nil {
			return nil, err
		}
		sc.entries[path] = e
	}
	return nil, errors.New("truncated")
}

func parseStatLine(line string) (string, statEntry, error) {
	var fields [6]string
	for i := range fields {
		var ok bool
		if fields[i], line, ok = strings.Cut(line, " "); !ok {
			return "", statEntry{}, errors.New("short line")
		}
	}
	var nums [5]int64
	for i := range nums {
		n, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			return "", statEntry{}, err
		}
		nums[i] = n
	}
	path := line
	if strings.HasPrefix(path, `"`) {
		var err error
		if path, err = strconv.Unquote(path); err != nil {
			return "", statEntry{}, err
		}
	}
	if len(fields[5]) != 64 {
		return "", statEntry{}, errors.New("bad digest")
	}
	return path, statEntry{size: nums[0], mtime: nums[1], ctime: nums[2], ino: uint64(nums[3]), mode: fs.FileMode(nums[4]), digest: "sha256:" + fields[5]}, nil
}

// encode answers the cache as parseStatCache reads it.
func (sc *statCache) encode() []byte {
	var b bytes.Buffer
	b.Grow(64 + len(sc.entries)*160)
	w := bufio.NewWriter(&b)
	fmt.Fprintf(w, "%s %d\n", statCacheMagic, sc.stamp)
	var num []byte
	for path, e := range sc.entries {
		for _, n := range []int64{e.size, e.mtime, e.ctime, int64(e.ino), int64(e.mode)} {
			num = strconv.AppendInt(num[:0], n, 10)
			w.Write(num)
			w.WriteByte(' ')
		}
		w.WriteString(strings.TrimPrefix(e.digest, "sha256:"))
		w.WriteByte(' ')
		if strings.ContainsAny(path, "\r\n") || strings.HasPrefix(path, `"`) {
			path = strconv.Quote(path)
		}
		w.WriteString(path)
		w.WriteByte('\n')
	}
	fmt.Fprintf(w, "end %d\n", len(sc.entries))
	_ = w.Flush() // a bytes.Buffer takes every write
	return b.Bytes()
}

// save writes the cache into the checkout opened as root, atomically.
func (sc *statCache) save(root *os.Root) error {
	return writeFile(root, statCachePath, sc.encode())
}
