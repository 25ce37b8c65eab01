package worker

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A Go build cache the command can read and never change: the prepare phase of the Go preset
// fills the repository's build cache, which the run's sandbox shows read-only. go cannot work
// with a read-only GOCACHE, so the run's go is given GOCACHEPROG: this program, which answers
// what the prepared cache holds and keeps what the run's go stores in a directory of the run's
// own, gone with it. Go's own file layout is read (cmd/go/internal/cache: "<xx>/<id>-a" entries
// naming "<xx>/<out>-d" outputs), and the same is written to the run's directory, so that
// every go process of the run (a test may run go itself) finds what the others stored.
//
// The protocol is cmd/go/internal/cacheprog's: JSON requests on stdin, one a line, a put's
// body as a base64 JSON string on the line after it; JSON responses on stdout, the first
// naming the commands known.

// goCacheHashSize is the size of an action or output id (sha256).
const goCacheHashSize = 32

// goCacheEntrySize is the size of an action entry file: "v1 <hex id> <hex out> <size, 20
// wide> <unix nanos, 20 wide>\n".
const goCacheEntrySize = 2 + 1 + 2*goCacheHashSize + 1 + 2*goCacheHashSize + 1 + 20 + 1 + 20 + 1

type goCacheRequest struct {
	ID       int64
	Command  string
	ActionID []byte `json:",omitempty"`
	OutputID []byte `json:",omitempty"`
	BodySize int64  `json:",omitempty"`
}

type goCacheResponse struct {
	ID            int64
	Err           string     `json:",omitempty"`
	KnownCommands []string   `json:",omitempty"`
	Miss          bool       `json:",omitempty"`
	OutputID      []byte     `json:",omitempty"`
	Size          int64      `json:",omitempty"`
	Time          *time.Time `json:",omitempty"`
	DiskPath      string     `json:",omitempty"`
}

// serveGoCache answers go's requests from in until "close" or its end: a get from the run's
// own directory (scratch) first, then from the prepared cache (base), which it never writes;
// a put into scratch.
//
// Every go process of a run starts one and asks it about every action it plans (some 700
// gets for a small module's `go test`, a few hundred more for each `go build` or `go tool` a
// test runs), each asker waiting for its answer: a request is answered at once, in turn (a
// get takes tens of microseconds; handing each to a goroutine of its own costs more than
// that, in thread switches). A put's body, megabytes of base64 for a compiled package, is
// decoded as it is read, into a buffer of the size go says, rather than read whole as a
// JSON string and decoded after.
func serveGoCache(in io.Reader, out io.Writer, base, scratch string) error {
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	send := func(r goCacheResponse) error {
		if err := enc.Encode(r); err != nil {
			return err
		}
		return w.Flush()
	}
	if err := send(goCacheResponse{KnownCommands: []string{"get", "put", "close"}}); err != nil {
		return err
	}
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := readGoCacheLine(r)
		if errors.Is(err, io.EOF) {
			return nil
		}
		var req goCacheRequest
		if err == nil {
			err = json.Unmarshal(line, &req)
		}
		if err != nil {
			return fmt.Errorf("read a request: %w", err)
		}
		res := goCacheResponse{ID: req.ID}
		switch req.Command {
		case "get":
			if e, ok := readGoCacheEntry(scratch, req.ActionID); ok {
				res = e.response(req.ID)
			} else if e, ok := readGoCacheEntry(base, req.ActionID); ok {
				res = e.response(req.ID)
			} else {
				res.Miss = true
			}
		case "put":
			var body []byte
			if req.BodySize > 0 {
				if body, err = readGoCacheBody(r, req.BodySize); err != nil {
					return fmt.Errorf("read the body of put %d: %w", req.ID, err)
				}
			}
			if int64(len(body)) != req.BodySize {
				res.Err = fmt.Sprintf("put %d: a body of %d bytes, said to be %d", req.ID, len(body), req.BodySize)
			} else if path, err := putGoCacheEntry(scratch, req.ActionID, req.OutputID, body); err != nil {
				res.Err = err.Error()
			} else {
				res.DiskPath = path
			}
		case "close":
			return send(res)
		default:
			res.Err = "unknown command " + strconv.Quote(req.Command)
		}
		if err := send(res); err != nil {
			return err
		}
	}
}

// readGoCacheLine answers the next line of r that is not blank, without its end: go writes
// each request as a line of its own (and a blank line after it).
func readGoCacheLine(r *bufio.Reader) ([]byte, error) {
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			var rest []byte
			line = append([]byte(nil), line...)
			rest, err = r.ReadBytes('\n')
			line = append(line, rest...)
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			return t, nil // a last line without its end too
		}
		if err != nil {
			return nil, err
		}
	}
}

// readGoCacheBody reads the body of a put from r: the JSON string of standard base64 that go
// writes after the request ('"', base64, '"'; nothing in base64 is escaped in JSON), decoded
// as it comes. size is what go says the body holds: the buffer's size to start with.
func readGoCacheBody(r *bufio.Reader, size int64) ([]byte, error) {
	for {
		c, err := r.ReadByte()
		if err != nil {
			return nil, err
		}
		if c == '"' {
			break
		}
		if c != '\n' && c != ' ' && c != '\r' && c != '\t' {
			return nil, fmt.Errorf("a body starts with %q, not a JSON string", c)
		}
	}
	body := bytes.NewBuffer(make([]byte, 0, min(size, 1<<28)))
	_, err := body.ReadFrom(base64.NewDecoder(base64.StdEncoding, &quotedReader{r: r}))
	return body.Bytes(), err
}

// quotedReader reads r up to the next '"', which it consumes, then ends.
type quotedReader struct {
	r    *bufio.Reader
	done bool
}

func (q *quotedReader) Read(p []byte) (int, error) {
	if q.done {
		return 0, io.EOF
	}
	if q.r.Buffered() == 0 {
		if _, err := q.r.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the string was not closed
			}
			return 0, err
		}
	}
	buf, _ := q.r.Peek(min(q.r.Buffered(), len(p)))
	if i := bytes.IndexByte(buf, '"'); i >= 0 {
		buf, q.done = buf[:i], true
	}
	n := copy(p, buf)
	_, _ = q.r.Discard(n)
	if q.done {
		_, _ = q.r.Discard(1)
	}
	return n, nil
}

type goCacheEntry struct {
	output []byte
	size   int64
	time   time.Time
	// file is the output's file: "<xx>/<out>-d", or the one file in it when that is a
	// directory, an executable's entry.
	file string
}

func (e goCacheEntry) response(id int64) goCacheResponse {
	t := e.time
	return goCacheResponse{ID: id, OutputID: e.output, Size: e.size, Time: &t, DiskPath: e.file}
}

// goCachePath answers where Go's file cache keeps id's file of kind ("a" or "d") under dir.
func goCachePath(dir string, id []byte, kind string) string {
	h := hex.EncodeToString(id)
	return filepath.Join(dir, h[:2], h+"-"+kind)
}

// readGoCacheEntry reads action's entry under dir, as cmd/go does: an entry that is not whole,
// or whose output is missing or of another size, is a miss.
//
// An executable that `go tool` (or `go run`) linked is kept by cmd/go's own cache as a
// directory in place of the output file, "<xx>/<out>-d/<name>", the one file in it. The
// prepare phase leaves those of the toolchain's tools that go builds on demand (cmd/nm,
// cmd/covdata, ...: goToolsScript), and their entries are answered with the file in the
// directory: go then runs the tool from the prepared cache rather than compile and link it
// again in every run. (go stores no executable through GOCACHEPROG: only its own file cache
// keeps them, so a run's own directory never holds one.)
func readGoCacheEntry(dir string, action []byte) (goCacheEntry, bool) {
	if len(action) != goCacheHashSize {
		return goCacheEntry{}, false
	}
	b, err := os.ReadFile(goCachePath(dir, action, "a"))
	if err != nil || len(b) != goCacheEntrySize || string(b[:3]) != "v1 " || b[len(b)-1] != '\n' {
		return goCacheEntry{}, false
	}
	f := strings.Fields(string(b[3:]))
	if len(f) != 4 || f[0] != hex.EncodeToString(action) {
		return goCacheEntry{}, false
	}
	output, err := hex.DecodeString(f[1])
	if err != nil || len(output) != goCacheHashSize {
		return goCacheEntry{}, false
	}
	size, err1 := strconv.ParseInt(f[2], 10, 64)
	nanos, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || size < 0 {
		return goCacheEntry{}, false
	}
	file := goCachePath(dir, output, "d")
	fi, err := os.Stat(file)
	if err == nil && fi.IsDir() {
		file, fi, err = executableFile(file)
	}
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
		return goCacheEntry{}, false
	}
	return goCacheEntry{output: output, size: size, time: time.Unix(0, nanos), file: file}, true
}

// executableFile answers the one file of dir, an executable's entry of go's file cache.
func executableFile(dir string) (string, os.FileInfo, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, err
	}
	if len(entries) != 1 {
		return "", nil, fmt.Errorf("%s: an executable's entry holds one file, this one %d", dir, len(entries))
	}
	file := filepath.Join(dir, entries[0].Name())
	fi, err := os.Lstat(file)
	return file, fi, err
}

// putGoCacheEntry stores body as output's file and the entry of action naming it under dir,
// each whole or not at all, and answers the output's path.
func putGoCacheEntry(dir string, action, output, body []byte) (string, error) {
	if len(action) != goCacheHashSize || len(output) != goCacheHashSize {
		return "", errors.New("a put names an action id and an output id of 32 bytes")
	}
	path := goCachePath(dir, output, "d")
	if err := writeWhole(path, body); err != nil {
		return "", err
	}
	entry := fmt.Sprintf("v1 %x %x %20d %20d\n", action, output, len(body), time.Now().UnixNano())
	if err := writeWhole(goCachePath(dir, action, "a"), []byte(entry)); err != nil {
		return "", err
	}
	return path, nil
}

// writeWhole writes b to path through a file beside it renamed into place.
func writeWhole(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // gone already after the rename
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
