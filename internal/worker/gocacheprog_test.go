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

// TestGoCacheServesThePreparedCacheAndNeverWritesIt speaks go's GOCACHEPROG protocol to the
// run's cache program: an entry of the prepared cache (in Go's own layout) is answered from
// there, a put lands in the run's own directory and is answered from there after, a damaged
// entry of the prepared cache is a miss, and nothing of the prepared cache changes, whatever
// the run puts, the same action ids included.
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

	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	request := func(r goCacheRequest, body []byte) {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
		if body != nil {
			if err := enc.Encode(base64.StdEncoding.EncodeToString(body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	request(goCacheRequest{ID: 1, Command: "get", ActionID: id("prepared action")}, nil)
	request(goCacheRequest{ID: 2, Command: "get", ActionID: id("damaged action")}, nil)
	request(goCacheRequest{ID: 3, Command: "put", ActionID: id("run action"), OutputID: id("run output"), BodySize: 9}, []byte("run's own"))
	request(goCacheRequest{ID: 4, Command: "get", ActionID: id("run action")}, nil)
	// A put of the prepared cache's own action: the run's answer changes, the cache does not.
	request(goCacheRequest{ID: 5, Command: "put", ActionID: id("prepared action"), OutputID: id("poison"), BodySize: 6}, []byte("poison"))
	request(goCacheRequest{ID: 6, Command: "get", ActionID: id("prepared action")}, nil)
	request(goCacheRequest{ID: 7, Command: "close"}, nil)

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
	if len(res) != 8 || strings.Join(res[0].KnownCommands, ",") != "get,put,close" {
		t.Fatalf("answers %+v, want the known commands and then one answer a request", res)
	}
	read := func(r goCacheResponse) string {
		b, err := os.ReadFile(r.DiskPath)
		if err != nil {
			t.Fatalf("answer %d: %v", r.ID, err)
		}
		return string(b)
	}
	if r := res[1]; r.Miss || read(r) != "compiled by the prepare phase" || !strings.HasPrefix(r.DiskPath, base) || r.Size != 29 {
		t.Errorf("get of a prepared entry = %+v, want it from the prepared cache", r)
	}
	if r := res[2]; !r.Miss {
		t.Errorf("get of an entry whose output is damaged = %+v, want a miss", r)
	}
	if r := res[4]; r.Miss || read(r) != "run's own" || !strings.HasPrefix(r.DiskPath, scratch) {
		t.Errorf("get after a put = %+v, want the run's own entry", r)
	}
	if r := res[6]; r.Miss || read(r) != "poison" || !strings.HasPrefix(r.DiskPath, scratch) {
		t.Errorf("get after the run put over a prepared action = %+v, want the run's entry, from its own directory", r)
	}
	if after := snapshot(t, base); after != before {
		t.Errorf("the prepared cache changed:\nbefore:\n%s\nafter:\n%s", before, after)
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
