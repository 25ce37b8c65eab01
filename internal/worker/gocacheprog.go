package worker

import (
	"bufio"
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
	dec := json.NewDecoder(bufio.NewReader(in))
	for {
		var req goCacheRequest
		if err := dec.Decode(&req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read a request: %w", err)
		}
		res := goCacheResponse{ID: req.ID}
		switch req.Command {
		case "get":
			if e, ok := readGoCacheEntry(scratch, req.ActionID); ok {
				res = e.response(req.ID, scratch)
			} else if e, ok := readGoCacheEntry(base, req.ActionID); ok {
				res = e.response(req.ID, base)
			} else {
				res.Miss = true
			}
		case "put":
			var body []byte
			if req.BodySize > 0 {
				var encoded string
				if err := dec.Decode(&encoded); err != nil {
					return fmt.Errorf("read the body of put %d: %w", req.ID, err)
				}
				var err error
				if body, err = base64.StdEncoding.DecodeString(encoded); err != nil {
					return fmt.Errorf("decode the body of put %d: %w", req.ID, err)
				}
			}
			if path, err := putGoCacheEntry(scratch, req.ActionID, req.OutputID, body); err != nil {
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

type goCacheEntry struct {
	output []byte
	size   int64
	time   time.Time
}

func (e goCacheEntry) response(id int64, dir string) goCacheResponse {
	t := e.time
	return goCacheResponse{ID: id, OutputID: e.output, Size: e.size, Time: &t, DiskPath: goCachePath(dir, e.output, "d")}
}

// goCachePath answers where Go's file cache keeps id's file of kind ("a" or "d") under dir.
func goCachePath(dir string, id []byte, kind string) string {
	h := hex.EncodeToString(id)
	return filepath.Join(dir, h[:2], h+"-"+kind)
}

// readGoCacheEntry reads action's entry under dir, as cmd/go does: an entry that is not whole,
// or whose output is missing or of another size, is a miss.
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
	if fi, err := os.Stat(goCachePath(dir, output, "d")); err != nil || fi.Size() != size {
		return goCacheEntry{}, false
	}
	return goCacheEntry{output: output, size: size, time: time.Unix(0, nanos)}, true
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
