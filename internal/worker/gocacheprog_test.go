package worker

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goCacheCall is a request to the run's cache program, with a put's body.
type goCacheCall struct {
	req  goCacheRequest
	body []byte
}

// goCacheSession speaks go's GOCACHEPROG protocol to the run's cache program as one go process
// does: calls, as cmd/go writes them (a request, a blank line, a put's body as a JSON string
// of base64 on a line of its own), then close. It answers the answers by request id, and
// fails the test unless the program named its commands first, answered each request once,
// and the close last.
func goCacheSession(t *testing.T, base, scratch string, calls ...goCacheCall) map[int64]goCacheResponse {
	t.Helper()
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, c := range append(calls, goCacheCall{req: goCacheRequest{ID: 1 << 40, Command: "close"}}) {
		if err := enc.Encode(c.req); err != nil {
			t.Fatal(err)
		}
		in.WriteByte('\n')
		if c.body != nil {
			fmt.Fprintf(&in, "\"%s\"\n", base64.StdEncoding.EncodeToString(c.body))
		}
	}
	var out bytes.Buffer
	if err := serveGoCache(&in, &out, base, scratch); err != nil {
		t.Fatalf("serveGoCache: %v", err)
	}
	dec := json.NewDecoder(&out)
	var res []goCacheResponse
	for dec.More() {
		var r goCacheResponse
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		res = append(res, r)
	}
	if len(res) != len(calls)+2 || strings.Join(res[0].KnownCommands, ",") != "get,put,close" || res[len(res)-1].ID != 1<<40 {
		t.Fatalf("answers %+v, want the known commands, an answer a request, and the close's last", res)
	}
	byID := map[int64]goCacheResponse{}
	for _, r := range res[1 : len(res)-1] {
		if _, dup := byID[r.ID]; dup {
			t.Fatalf("two answers to request %d: %+v", r.ID, res)
		}
		byID[r.ID] = r
	}
	for _, c := range calls {
		if _, ok := byID[c.req.ID]; !ok {
			t.Fatalf("no answer to request %d: %+v", c.req.ID, res)
		}
	}
	return byID
}

// TestGoCacheServesThePreparedCacheAndNeverWritesIt speaks go's GOCACHEPROG protocol to the
// run's cache program: an entry of the prepared cache (in Go's own layout) is answered from
// there, a put lands in the run's own directory and is answered from there after (to the same
// go process, or another of the run), a damaged entry of the prepared cache is a miss, and
// nothing of the prepared cache changes, whatever the run puts, the same action ids included.
func TestGoCacheServesThePreparedCacheAndNeverWritesIt(t *testing.T) {
	t.Parallel()
	base, scratch := t.TempDir(), t.TempDir()
	id := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
	if _, err := putGoCacheEntry(base, id("prepared action"), id("prepared output"), []byte("compiled by the prepare phase")); err != nil {
		t.Fatal(err)
	}
	if _, err := putGoCacheEntry(base, id("damaged action"), id("damaged output"), []byte("12345")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goCachePath(base, id("damaged output"), "d"), []byte("1234"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, base)

	get := func(n int64, action string) goCacheCall {
		return goCacheCall{req: goCacheRequest{ID: n, Command: "get", ActionID: id(action)}}
	}
	put := func(n int64, action, output, body string) goCacheCall {
		return goCacheCall{req: goCacheRequest{ID: n, Command: "put", ActionID: id(action), OutputID: id(output), BodySize: int64(len(body))}, body: []byte(body)}
	}
	first := goCacheSession(t, base, scratch,
		get(1, "prepared action"),
		get(2, "damaged action"),
		put(3, "run action", "run output", "run's own"),
		// A put of the prepared cache's own action: the run's answer changes, the cache does not.
		put(5, "prepared action", "poison", "poison"),
		// A body that is not the size the request says is refused.
		goCacheCall{req: goCacheRequest{ID: 7, Command: "put", ActionID: id("short"), OutputID: id("short"), BodySize: 9}, body: []byte("short")},
	)
	// What the first go process put, the next one of the run reads.
	next := goCacheSession(t, base, scratch, get(4, "run action"), get(6, "prepared action"), get(8, "short"))
	read := func(r goCacheResponse) string {
		b, err := os.ReadFile(r.DiskPath)
		if err != nil {
			t.Fatalf("answer %d: %v", r.ID, err)
		}
		return string(b)
	}
	if r := first[1]; r.Miss || read(r) != "compiled by the prepare phase" || !strings.HasPrefix(r.DiskPath, base) || r.Size != 29 {
		t.Errorf("get of a prepared entry = %+v, want it from the prepared cache", r)
	}
	if r := first[2]; !r.Miss {
		t.Errorf("get of an entry whose output is damaged = %+v, want a miss", r)
	}
	if r := first[3]; r.Err != "" || read(r) != "run's own" || !strings.HasPrefix(r.DiskPath, scratch) {
		t.Errorf("put = %+v, want the run's own file", r)
	}
	if r := next[4]; r.Miss || read(r) != "run's own" || !strings.HasPrefix(r.DiskPath, scratch) {
		t.Errorf("get after a put = %+v, want the run's own entry", r)
	}
	if r := next[6]; r.Miss || read(r) != "poison" || !strings.HasPrefix(r.DiskPath, scratch) {
		t.Errorf("get after the run put over a prepared action = %+v, want the run's entry, from its own directory", r)
	}
	if r := first[7]; r.Err == "" || !next[8].Miss {
		t.Errorf("put of a body shorter than said = %+v, then get %+v; want an error and a miss", r, next[8])
	}
	if after := snapshot(t, base); after != before {
		t.Errorf("the prepared cache changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestGoCacheAnswersEveryRequestOfAGoProcess: a go process asks about every action it plans,
// from several goroutines at once; the cache program answers each request once, whatever
// their order, large puts among gets, and each answer is right for its request.
func TestGoCacheAnswersEveryRequestOfAGoProcess(t *testing.T) {
	t.Parallel()
	base, scratch := t.TempDir(), t.TempDir()
	id := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
	var calls []goCacheCall
	big := bytes.Repeat([]byte("a compiled package "), 1<<16)
	for i := range 200 {
		action := fmt.Sprint("action ", i)
		switch i % 3 {
		case 0:
			if _, err := putGoCacheEntry(base, id(action), id(action+" output"), []byte(action)); err != nil {
				t.Fatal(err)
			}
		case 1:
			body := []byte(action)
			if i%30 == 1 {
				body = append(big, body...)
			}
			calls = append(calls, goCacheCall{req: goCacheRequest{ID: int64(1000 + i), Command: "put", ActionID: id(action),
				OutputID: id(action + " output"), BodySize: int64(len(body))}, body: body})
			continue
		}
		calls = append(calls, goCacheCall{req: goCacheRequest{ID: int64(i), Command: "get", ActionID: id(action)}})
	}
	res := goCacheSession(t, base, scratch, calls...)
	for _, c := range calls {
		r := res[c.req.ID]
		i := c.req.ID % 1000
		switch {
		case c.req.Command == "put":
			if b, err := os.ReadFile(r.DiskPath); r.Err != "" || err != nil || !bytes.HasSuffix(b, []byte(fmt.Sprint("action ", i))) {
				t.Errorf("put %d = %+v, want its body stored", c.req.ID, r)
			}
		case i%3 == 0:
			if b, err := os.ReadFile(r.DiskPath); r.Miss || err != nil || string(b) != fmt.Sprint("action ", i) {
				t.Errorf("get %d = %+v, want the prepared entry", c.req.ID, r)
			}
		default:
			if !r.Miss {
				t.Errorf("get %d of an action nobody stored = %+v, want a miss", c.req.ID, r)
			}
		}
	}
}

// snapshot answers every file under dir with its content's digest, one a line.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		content, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %x\n", strings.TrimPrefix(path, dir), sha256.Sum256(content))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestGoCacheServesAToolThePrepareBuilt: go's own cache keeps an executable that `go tool`
// linked as a directory holding it ("<out>-d/nm"), and the prepare phase leaves the
// toolchain's tools there (goToolsScript). The run's cache program answers such an entry
// with the executable, for go to run it from the prepared cache; a directory that holds
// anything but one file of the entry's size is a miss, as for go.
func TestGoCacheServesAToolThePrepareBuilt(t *testing.T) {
	t.Parallel()
	base, scratch := t.TempDir(), t.TempDir()
	id := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
	tool := []byte("\x7fELF the nm the prepare phase linked")
	// executable writes an entry of go's own cache for an executable: the action's entry
	// names an output whose "-d" is a directory, which holds files.
	executable := func(name string, files map[string][]byte, size int) {
		t.Helper()
		if _, err := putGoCacheEntry(base, id(name+" action"), id(name+" output"), make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		dir := goCachePath(base, id(name+" output"), "d")
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, b := range files {
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	executable("nm", map[string][]byte{"nm": tool}, len(tool))
	executable("two", map[string][]byte{"nm": tool, "objdump": tool}, len(tool))
	executable("short", map[string][]byte{"nm": tool[:10]}, len(tool))
	executable("empty", nil, 0)
	executable("link", nil, len(tool))
	if err := os.Symlink("/usr/bin/env", filepath.Join(goCachePath(base, id("link output"), "d"), "nm")); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, base)

	var calls []goCacheCall
	for i, name := range []string{"nm", "two", "short", "empty", "link"} {
		calls = append(calls, goCacheCall{req: goCacheRequest{ID: int64(i + 1), Command: "get", ActionID: id(name + " action")}})
	}
	res := goCacheSession(t, base, scratch, calls...)
	want := filepath.Join(goCachePath(base, id("nm output"), "d"), "nm")
	if r := res[1]; r.Miss || r.DiskPath != want || r.Size != int64(len(tool)) {
		t.Errorf("get of a tool the prepare phase built = %+v, want a hit at %s", r, want)
	} else if b, err := os.ReadFile(r.DiskPath); err != nil || string(b) != string(tool) {
		t.Errorf("the tool answered reads %q, %v", b, err)
	}
	for i, what := range []string{"two files", "a file of another size", "no file", "a symbolic link"} {
		if r := res[int64(i+2)]; !r.Miss {
			t.Errorf("get of an executable's entry whose directory holds %s = %+v, want a miss", what, r)
		}
	}
	if after := snapshot(t, base); after != before {
		t.Errorf("the prepared cache changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
