package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/repo"
)

// The tests of this file check the worker's safety code one rule at a time, so that a change to
// one of them fails a test here (issue 41's mutation run, docs/testing.md#mutation-testing):
// the sandbox's mounts and environment, the checks that the tree checked out is the job's, and
// the Go cache a run sees.

// TestASubmoduleNamesACommitAndNothingElse: GetTree's entry of a submodule that also names a
// blob, by its digest alone or by its size alone, is refused for good, as one naming both is.
func TestASubmoduleNamesACommitAndNothingElse(t *testing.T) {
	t.Parallel()
	commit := strings.Repeat("5e", 20)
	for what, in := range map[string]*agwpv1.TreeEntry{
		"a digest": {Path: "m", Mode: "160000", GitlinkCommit: commit, Digest: digestOf([]byte("x"))},
		"a size":   {Path: "m", Mode: "160000", GitlinkCommit: commit, Size: 1},
	} {
		if got, err := treeEntry(in); err == nil || !strings.Contains(err.Error(), "a submodule is a commit only") {
			t.Errorf("treeEntry of a submodule naming %s = %+v, %v; want it refused as naming a blob", what, got, err)
		}
	}
}

// TestGoCacheTakesAnEmptyPutWithoutABody: go writes no body after a put of nothing (an empty
// output, as a package with no code compiles to); the cache program stores the empty file and
// reads the next line as the next request.
func TestGoCacheTakesAnEmptyPutWithoutABody(t *testing.T) {
	t.Parallel()
	base, scratch := t.TempDir(), t.TempDir()
	id := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
	res := goCacheSession(t, base, scratch,
		goCacheCall{req: goCacheRequest{ID: 1, Command: "put", ActionID: id("empty"), OutputID: id("empty output")}},
		goCacheCall{req: goCacheRequest{ID: 2, Command: "get", ActionID: id("empty")}},
	)
	if r := res[1]; r.Err != "" || r.DiskPath == "" {
		t.Fatalf("put of nothing = %+v, want it stored", r)
	}
	r := res[2]
	b, err := os.ReadFile(r.DiskPath)
	if r.Miss || r.Size != 0 || err != nil || len(b) != 0 {
		t.Errorf("get after a put of nothing = %+v (%q, %v), want the empty output", r, b, err)
	}
}

// TestGoCacheReadsABodyAsAJSONString: a put's body is a JSON string, which JSON lets any of its
// blanks (space, tab, CR, LF) precede; anything else there is no body, and the cache program
// stops rather than store what it is not sure of.
func TestGoCacheReadsABodyAsAJSONString(t *testing.T) {
	t.Parallel()
	id := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
	session := func(before string) (string, error) {
		var in bytes.Buffer
		req, err := json.Marshal(goCacheRequest{ID: 1, Command: "put", ActionID: id("a"), OutputID: id("out"), BodySize: 4})
		if err != nil {
			t.Fatal(err)
		}
		in.Write(req)
		in.WriteString("\n" + before + `"` + base64.StdEncoding.EncodeToString([]byte("body")) + "\"\n")
		in.WriteString(`{"ID":2,"Command":"close"}` + "\n")
		var out bytes.Buffer
		err = serveGoCache(&in, &out, t.TempDir(), t.TempDir())
		return out.String(), err
	}
	for _, blank := range []string{"\n", " ", "\r", "\t", "\n \r\t\n"} {
		out, err := session(blank)
		if err != nil || !strings.Contains(out, `"DiskPath"`) || !strings.Contains(out, `"ID":2`) {
			t.Errorf("a body after %q: %v\n%s\nwant it stored, then the close answered", blank, err, out)
		}
	}
	for _, junk := range []string{"x", "\n{", "\\"} {
		if out, err := session(junk); err == nil || !strings.Contains(err.Error(), "not a JSON string") {
			t.Errorf("a body after %q: %v\n%s\nwant the program to stop: no JSON string", junk, err, out)
		}
	}
}

// goCacheInput answers what a go process writes for a put of body (its request, a blank line,
// the body as a JSON string on a line of its own), with pad blanks before the string.
func goCacheInput(t *testing.T, action string, body []byte, pad int) []byte {
	t.Helper()
	h := sha256.Sum256([]byte(action))
	o := sha256.Sum256([]byte(action + " output"))
	req, err := json.Marshal(goCacheRequest{ID: 1, Command: "put", ActionID: h[:], OutputID: o[:], BodySize: int64(len(body))})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Appendf(nil, "%s\n\n%s\"%s\"\n", req, strings.Repeat(" ", pad), base64.StdEncoding.EncodeToString(body))
}

// TestGoCacheStoresNoBodyCutShort: a go process that dies in the middle of a put's body (the
// string never closed) leaves nothing in the run's cache, even when the bytes it sent are the
// whole body: only a closed string is a body.
func TestGoCacheStoresNoBodyCutShort(t *testing.T) {
	t.Parallel()
	in := goCacheInput(t, "cut", []byte("body"), 0)
	in = bytes.TrimSuffix(in, []byte("\"\n"))
	scratch := t.TempDir()
	var out bytes.Buffer
	served := make(chan error, 1)
	go func() { served <- serveGoCache(bytes.NewReader(in), &out, t.TempDir(), scratch) }()
	var err error
	select {
	case err = <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("the cache program still reads a put cut short after 10 s: it never ends at the end of its input")
	}
	if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a put cut short: %v, want the unclosed string said", err)
	}
	if files := snapshot(t, scratch); files != "" || strings.Contains(out.String(), "DiskPath") {
		t.Errorf("a put cut short was stored:\n%s\n%s", files, out.String())
	}
}

// TestGoCacheReadsABodyWhoseEndStartsABuffer: the cache program reads go's requests through a
// buffer of 64 KiB; a body whose closing quote is the first byte of the next buffer is stored
// whole, as any other.
func TestGoCacheReadsABodyWhoseEndStartsABuffer(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("compiled"), 6000) // 48,000 bytes: 64,000 of base64
	const buffer = 64 << 10
	base := len(goCacheInput(t, "edge", body, 0)) - len("\"\n") // where the closing quote is
	for _, shift := range []int{-2, -1, 0, 1, 2} {
		in := goCacheInput(t, "edge", body, buffer-base+shift)
		in = append(in, `{"ID":2,"Command":"close"}`+"\n"...)
		scratch := t.TempDir()
		var out bytes.Buffer
		if err := serveGoCache(bytes.NewReader(in), &out, t.TempDir(), scratch); err != nil {
			t.Fatalf("closing quote at %d: %v", buffer+shift, err)
		}
		dec := json.NewDecoder(&out)
		var known, put goCacheResponse
		if err := dec.Decode(&known); err != nil {
			t.Fatal(err)
		}
		if err := dec.Decode(&put); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(put.DiskPath); put.Err != "" || err != nil || !bytes.Equal(got, body) {
			t.Errorf("closing quote at %d: put = %+v, %v; want the body stored whole", buffer+shift, put, err)
		}
	}
}

// TestGoCacheTakesOnlyAWholeEntryOfItsAction: an entry of the prepared cache is answered only
// when every field of it is what go writes: its own action id, an output id of 32 bytes, a
// size and a time that are numbers. Any other entry is a miss, whatever output file it names:
// go then builds the package itself.
func TestGoCacheTakesOnlyAWholeEntryOfItsAction(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	id := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
	output, short := id("output"), id("output")[:31]
	for _, o := range [][]byte{output, short} {
		if err := writeWhole(goCachePath(base, o, "d"), []byte("built")); err != nil {
			t.Fatal(err)
		}
	}
	empty := id("empty output")
	if err := writeWhole(goCachePath(base, empty, "d"), nil); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixNano()
	entries := map[string]string{
		"whole":                  fmt.Sprintf("v1 %x %x %20d %20d\n", id("whole"), output, 5, now),
		"of another action":      fmt.Sprintf("v1 %x %x %20d %20d\n", id("another"), output, 5, now),
		"of a 31-byte output id": fmt.Sprintf("v1 %x %x %22d %20d\n", id("of a 31-byte output id"), short, 5, now),
		"of a size not a number": fmt.Sprintf("v1 %x %x %20s %20d\n", id("of a size not a number"), empty, "none", now),
		"of a time not a number": fmt.Sprintf("v1 %x %x %20d %20s\n", id("of a time not a number"), output, 5, "yesterday"),
	}
	// go writes an entry of one size: one cut short or grown, whatever it holds, is none.
	cut := map[string]string{
		"of two bytes":              "v1",
		"of a space more, its size": fmt.Sprintf("v1 %x %x %20d %20d \n", id("of a space more, its size"), output, 5, now),
	}
	var calls []goCacheCall
	n := int64(0)
	ids := map[string]int64{}
	for what, text := range entries {
		if len(text) != goCacheEntrySize {
			t.Fatalf("the entry %s has %d bytes, not an entry's %d", what, len(text), goCacheEntrySize)
		}
	}
	maps.Copy(entries, cut)
	for what, text := range entries {
		action := id(what)
		if err := writeWhole(goCachePath(base, action, "a"), []byte(text)); err != nil {
			t.Fatal(err)
		}
		n++
		ids[what] = n
		calls = append(calls, goCacheCall{req: goCacheRequest{ID: n, Command: "get", ActionID: action}})
	}
	res := goCacheSession(t, base, t.TempDir(), calls...)
	for what, n := range ids {
		r := res[n]
		if what == "whole" {
			if r.Miss || r.Size != 5 || r.DiskPath != goCachePath(base, output, "d") {
				t.Errorf("get of a whole entry = %+v, want its output", r)
			}
		} else if !r.Miss {
			t.Errorf("get of an entry %s = %+v, want a miss", what, r)
		}
	}
}

// TestGoCacheRefusesAPutOfAShortID: a put whose action id or output id is not 32 bytes is
// answered an error, and stores nothing a later get could be answered from.
func TestGoCacheRefusesAPutOfAShortID(t *testing.T) {
	t.Parallel()
	id := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
	scratch := t.TempDir()
	body := []byte("built")
	res := goCacheSession(t, t.TempDir(), scratch,
		goCacheCall{req: goCacheRequest{ID: 1, Command: "put", ActionID: id("a")[:31], OutputID: id("out a"), BodySize: 5}, body: body},
		goCacheCall{req: goCacheRequest{ID: 2, Command: "put", ActionID: id("b"), OutputID: id("out b")[:31], BodySize: 5}, body: body},
		goCacheCall{req: goCacheRequest{ID: 3, Command: "get", ActionID: id("b")}},
	)
	for _, n := range []int64{1, 2} {
		if r := res[n]; r.Err == "" || r.DiskPath != "" {
			t.Errorf("put %d of an id of 31 bytes = %+v, want an error", n, r)
		}
	}
	if r := res[3]; !r.Miss {
		t.Errorf("get after a put of a short output id = %+v, want a miss", r)
	}
	if files := snapshot(t, scratch); files != "" {
		t.Errorf("puts of short ids stored:\n%s", files)
	}
}

// TestARunsDiskTooSmallForItsCheckoutIsSaid: a run whose own disk cannot hold its checkout
// fails with the disk's size named (the worker's failure to run the job, which a worker of more
// disk may run); any other error, or one of a run held to no disk, is answered as it is.
func TestARunsDiskTooSmallForItsCheckoutIsSaid(t *testing.T) {
	t.Parallel()
	full := fmt.Errorf("check out a.txt: %w", syscall.ENOSPC)
	other := fmt.Errorf("check out a.txt: %w", syscall.EIO)
	held := &runLimit{limits: Limits{Disk: 16 << 20}}
	err := held.explain(full)
	if err == nil || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "the run's disk (16 MiB) cannot hold what the command starts with") {
		t.Errorf("a full disk of 16 MiB: %v, want it named", err)
	}
	for what, c := range map[string]struct {
		r   *runLimit
		err error
	}{
		"no limits":           {nil, full},
		"no disk limit":       {&runLimit{limits: Limits{Memory: 1 << 30}}, full},
		"another error":       {held, other},
		"no error":            {held, nil},
		"no limits, no error": {nil, nil},
	} {
		if got := c.r.explain(c.err); got != c.err {
			t.Errorf("%s: explain(%v) = %v, want the error as it is", what, c.err, got)
		}
	}
}

// TestPolicyLimitsAreCountsFromZeroToHalfTheRange: a policy's limit of 0 asks for none (the
// worker's holds), and a limit is at most 2^62, both ends taken; past that, or at 2^63 and
// beyond, which no int64 holds, it is refused.
func TestPolicyLimitsAreCountsFromZeroToHalfTheRange(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		limits  map[string]any
		want    Limits
		refused bool
	}{
		{map[string]any{"pids": 0, "memory_bytes": "0", "disk_bytes": 0}, Limits{}, false},
		{map[string]any{"disk_bytes": "4611686018427387904"}, Limits{Disk: 1 << 62}, false},
		{map[string]any{"disk_bytes": 1 << 62}, Limits{Disk: 1 << 62}, false},
		{map[string]any{"disk_bytes": "4611686018427388928"}, Limits{}, true}, // 2^62 + 1024, the next float64
		{map[string]any{"memory_bytes": float64(1 << 63)}, Limits{}, true},
		{map[string]any{"memory_bytes": 1e19}, Limits{}, true},
	} {
		s, err := structpb.NewStruct(map[string]any{"limits": c.limits})
		if err != nil {
			t.Fatal(err)
		}
		got, err := payloadLimits(s)
		switch {
		case c.refused && err == nil:
			t.Errorf("limits %v = %+v, want them refused", c.limits, got)
		case !c.refused && (err != nil || got != c.want):
			t.Errorf("limits %v = %+v, %v; want %+v", c.limits, got, err, c.want)
		}
	}
}

// TestTheTreeARunSeesHasTheMainlinesProtectedPaths: the tree a run sees (what a preset keys
// its caches by) is the candidate's with the mainline's entries in place of those under a
// protected path, also where the mainline holds more of them than the candidate holds
// entries; with no protected path it is the candidate's.
func TestTheTreeARunSeesHasTheMainlinesProtectedPaths(t *testing.T) {
	t.Parallel()
	entry := func(path, content string) repo.Entry {
		return repo.Entry{Path: path, Digest: digestOf([]byte(content)), Size: uint64(len(content))}
	}
	link := entry("ci", "../../victim")
	link.Mode = repo.ModeSymlink
	candidate := repo.Tree{entry("a.txt", "candidate's"), link}
	mainline := repo.Tree{entry("a.txt", "mainline's"), entry("ci/a.sh", "a"), entry("ci/b.sh", "b"), entry("ci/c.sh", "c")}
	paths := func(tree repo.Tree) string {
		var out []string
		for _, e := range tree {
			out = append(out, e.Path+"="+e.Digest[len(e.Digest)-6:])
		}
		return strings.Join(out, " ")
	}
	var none *protectedOverlay
	if got, want := paths(none.over(candidate)), paths(candidate); got != want {
		t.Errorf("the tree of a run without protected paths = %s, want the candidate's %s", got, want)
	}
	o, err := overlayFor(&client.ProtectedFrom{Revision: "rev_1", Paths: []string{"ci/"}}, candidate, mainline)
	if err != nil {
		t.Fatal(err)
	}
	want := paths(repo.Tree{candidate[0], mainline[1], mainline[2], mainline[3]})
	if got := paths(o.over(candidate)); got != want {
		t.Errorf("the tree of a run with ci/ protected = %s, want %s", got, want)
	}
}

// treeServer is a server's RepositoryService whose GetTree answers what answer says, and
// counts the calls.
type treeServer struct {
	agwpv1connect.UnimplementedRepositoryServiceHandler
	answer func(*agwpv1.GetTreeRequest) *agwpv1.GetTreeResponse
	calls  atomic.Int32
}

func (s *treeServer) GetTree(_ context.Context, req *agwpv1.GetTreeRequest) (*agwpv1.GetTreeResponse, error) {
	s.calls.Add(1)
	return s.answer(req), nil
}

// serveTrees answers a validator that is a client of s.
func serveTrees(t *testing.T, s *treeServer) *Validator {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(agwpv1connect.NewRepositoryServiceHandler(s))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &Validator{Client: client.New(srv.URL, "t"), CacheDir: t.TempDir()}
}

// TestAValidatorKeepsAFewMainlineTrees: the candidates of one queue, validated in turn for two
// mainlines, fetch each mainline's tree once; a validator keeps at most mainlineTrees of them.
func TestAValidatorKeepsAFewMainlineTrees(t *testing.T) {
	t.Parallel()
	d := digestOf([]byte("exit 0\n"))
	s := &treeServer{answer: func(req *agwpv1.GetTreeRequest) *agwpv1.GetTreeResponse {
		return &agwpv1.GetTreeResponse{Revision: req.GetRevision(), Entries: []*agwpv1.TreeEntry{{Path: "test.sh", Digest: d, Size: 7}}}
	}}
	v := serveTrees(t, s)
	for _, rev := range []string{"rev_1", "rev_2", "rev_1", "rev_2", "rev_1"} {
		if _, err := v.mainlineTree(context.Background(), "app", rev); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.calls.Load(); n != 2 {
		t.Errorf("five validations over two mainlines fetched their trees %d times, want twice", n)
	}
	for i := range 2 * mainlineTrees {
		if _, err := v.mainlineTree(context.Background(), "app", fmt.Sprint("rev_", 10+i)); err != nil {
			t.Fatal(err)
		}
		if n := len(v.trees); n > mainlineTrees {
			t.Fatalf("the validator keeps %d mainline trees, more than %d", n, mainlineTrees)
		}
	}
}

// TestTheSandboxShowsNoSystemDirectoryTheMachineLacks: a system directory the machine does not
// have (/lib32 on most) is not shown, so the command's PATH keeps none of the worker's
// directories under it.
func TestTheSandboxShowsNoSystemDirectoryTheMachineLacks(t *testing.T) {
	t.Parallel()
	needUnix(t)
	var missing []string
	for _, dir := range systemDirs {
		if _, err := os.Lstat(dir); err != nil {
			missing = append(missing, dir)
		}
	}
	if len(missing) == 0 {
		t.Skip("this machine has every system directory the sandbox may show")
	}
	for _, dir := range missing {
		sb := testSandbox(t, SandboxConfig{PATH: dir + "/bin:/usr/bin"})
		env, err := sb.Env(nil)
		if err != nil {
			t.Fatal(err)
		}
		if path := lastValue(env, "PATH"); path != "/usr/bin" {
			t.Errorf("with the worker's PATH %s/bin:/usr/bin, the command's PATH is %s, want /usr/bin: %s is not there to show", dir, path, dir)
		}
	}
}

// TestTheSandboxsOwnDirectoriesAreNoOperatorsToShow: --sandbox-ro refuses what is not a
// directory, and the directories the sandbox makes its own (/, /tmp, /ag, /proc, /dev and what
// lies under them), also named through a link; a directory named through a link is shown where
// the link leads, which is where the command finds it.
func TestTheSandboxsOwnDirectoriesAreNoOperatorsToShow(t *testing.T) {
	t.Parallel()
	needUnix(t)
	testSandbox(t, SandboxConfig{})
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	toolchain := filepath.Join(dir, "toolchain")
	if err := os.Mkdir(toolchain, 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"to-proc": "/proc", "to-toolchain": toolchain} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, ro := range []string{"/", "/tmp", "/proc", "/proc/self", "/dev", "/dev/shm", filepath.Join(dir, "to-proc")} {
		_, err := NewSandbox(SandboxConfig{ReadOnly: []string{ro}})
		if err == nil || !strings.Contains(err.Error(), "are the sandbox's own") {
			t.Errorf("--sandbox-ro %s: %v, want it refused as the sandbox's own", ro, err)
		}
	}
	if _, err := NewSandbox(SandboxConfig{ReadOnly: []string{file}}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("--sandbox-ro of a file: %v, want it refused as not a directory", err)
	}
	sb, err := NewSandbox(SandboxConfig{ReadOnly: []string{filepath.Join(dir, "to-toolchain")}})
	if err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(toolchain)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(sb.readOnly, " "), "--ro-bind "+real+" "+real; got != want {
		t.Errorf("--sandbox-ro of a link to a toolchain shows %q, want %q", got, want)
	}
}

// TestASecretBehindALinkIsStillHidden: the worker's key named through a link is refused where
// it really lies in a directory every validation sees: a system directory, or one the operator
// shows.
func TestASecretBehindALinkIsStillHidden(t *testing.T) {
	t.Parallel()
	needUnix(t)
	testSandbox(t, SandboxConfig{})
	dir := t.TempDir()
	toolchain := filepath.Join(dir, "toolchain")
	if err := os.Mkdir(toolchain, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(toolchain, "worker.key"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"keys": toolchain, "usr-bin": "/usr/bin"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewSandbox(SandboxConfig{ReadOnly: []string{toolchain}, Hidden: []string{filepath.Join(dir, "keys", "worker.key")}}); err == nil {
		t.Error("NewSandbox showed a directory holding the key named through a link")
	}
	if _, err := NewSandbox(SandboxConfig{Hidden: []string{filepath.Join(dir, "usr-bin", "env")}}); err == nil {
		t.Error("NewSandbox took a key in /usr/bin, named through a link, which every validation sees")
	}
}

// TestAnOperatorsDirectoryIsRefusedForTheSecretItHolds: --sandbox-ro of a directory holding
// the worker's key or its Go seed is refused with the secret named; one that holds neither is
// shown, whatever else it holds (the worker's working directory here), also when the worker has
// no Go seed.
func TestAnOperatorsDirectoryIsRefusedForTheSecretItHolds(t *testing.T) {
	t.Parallel()
	needUnix(t)
	testSandbox(t, SandboxConfig{})
	dir := t.TempDir()
	key, seed := filepath.Join(dir, "worker.key"), filepath.Join(dir, "go-seed")
	for name, cfg := range map[string]SandboxConfig{
		key:  {ReadOnly: []string{dir}, Hidden: []string{key}},
		seed: {ReadOnly: []string{dir}, GoSeed: seed},
	} {
		if _, err := NewSandbox(cfg); err == nil || !strings.Contains(err.Error(), "holds "+name+", which validations must not read") {
			t.Errorf("--sandbox-ro of the directory holding %s: %v, want it refused naming it", name, err)
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewSandbox(SandboxConfig{ReadOnly: []string{wd}, Hidden: []string{key}}); err != nil {
		t.Errorf("--sandbox-ro of the worker's working directory, which holds no secret: %v", err)
	}
}

// TestTheCommandsPATHNamesEachDirectoryOnce: a directory of the worker's PATH that the sandbox
// shows twice over (under /usr, and as an operator's --sandbox-ro) is in the command's PATH
// once, where the worker's has it.
func TestTheCommandsPATHNamesEachDirectoryOnce(t *testing.T) {
	t.Parallel()
	needUnix(t)
	sb := testSandbox(t, SandboxConfig{ReadOnly: []string{"/usr/bin"}, PATH: "/usr/bin:/usr/sbin"})
	env, err := sb.Env(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := lastValue(env, "PATH"); got != "/usr/bin:/usr/sbin" {
		t.Errorf("the command's PATH is %s, want /usr/bin:/usr/sbin", got)
	}
}

// TestARunWithEgressNeedsTheProxyAndTheForwarder: a run whose policy asks for egress is not
// started without the proxy's socket, nor by a worker without the forwarder (one that gives
// its runs its own network), rather than started with a network other than the one asked.
func TestARunWithEgressNeedsTheProxyAndTheForwarder(t *testing.T) {
	t.Parallel()
	needUnix(t)
	closed := testSandbox(t, SandboxConfig{})
	shared := testSandbox(t, SandboxConfig{SharedNetwork: true})
	dir := t.TempDir()
	sock := filepath.Join(dir, "egress.sock")
	for what, c := range map[string]struct {
		sb   *Sandbox
		sock string
	}{
		"no proxy's socket":      {closed, ""},
		"a worker's own network": {shared, sock},
	} {
		cmd, box, err := c.sb.command([]string{"true"}, boxDirs{Tree: dir, Home: dir, Tmp: dir, Network: attest.NetworkEgress, EgressSocket: c.sock}, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "a run with egress needs the proxy's socket and the forwarder") {
			t.Errorf("a run with egress and %s: %v, %v; want it refused", what, cmd, err)
		}
		if box != nil {
			box.close()
		}
	}
}

// TestASandboxBwrapDidNotReportWholeIsNoPIDNamespace: when bwrap's report of its sandbox lacks
// the sandbox's PID namespace, or names a first process that is no sandbox's (pid 0 or 1), the
// run is not taken as one in a PID namespace of its own (which its attestation would say), and
// nothing is killed.
func TestASandboxBwrapDidNotReportWholeIsNoPIDNamespace(t *testing.T) {
	t.Parallel()
	needUnix(t)
	for _, info := range []sandboxInfo{
		{ChildPID: os.Getpid(), PIDNS: 0},
		{ChildPID: 1, PIDNS: 42},
		{ChildPID: 0, PIDNS: 42},
	} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		close(done)
		b := &boxRun{infoR: r, infoDone: done, info: info}
		gone, own := b.end(time.Second)
		w.Close()
		if !gone || own {
			t.Errorf("bwrap reported %+v: gone %v, own PID namespace %v; want gone, and not its own", info, gone, own)
		}
	}
}

// TestARunLeavesNoDescriptorOpen: a sandboxed run closes every pipe it made to bwrap, so a
// worker's descriptors do not grow with the runs it does. Not parallel: it counts the
// process's descriptors.
func TestARunLeavesNoDescriptorOpen(t *testing.T) {
	needUnix(t)
	sb := testSandbox(t, SandboxConfig{})
	workDir := t.TempDir()
	run := func() {
		if res, out, err := runIn(t, workDir, sb, "true", nil, 10*time.Second); err != nil || res.ExitCode != 0 {
			t.Fatalf("true in the sandbox: %+v, %v\n%s", res, err, out)
		}
	}
	open := func() int {
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(fds)
	}
	run()
	before := open()
	for range 5 {
		run()
	}
	if after := open(); after > before {
		t.Errorf("five sandboxed runs left %d more descriptors open", after-before)
	}
}

// TestAProcessInTheWorkersPIDNamespaceIsNeverKilled: when bwrap reports a sandbox in the
// worker's own PID namespace (no sandbox at all), its end kills nothing (the process it names
// is the worker's, or another of the machine's) and the run is not taken as one in a PID
// namespace of its own.
func TestAProcessInTheWorkersPIDNamespaceIsNeverKilled(t *testing.T) {
	t.Parallel()
	needUnix(t)
	ours, err := pidNamespace("self")
	if err != nil {
		t.Fatal(err)
	}
	bystander := exec.Command("sleep", "60")
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bystander.Process.Kill()
		_ = bystander.Wait()
	})
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	done := make(chan struct{})
	close(done)
	b := &boxRun{infoR: r, infoDone: done, info: sandboxInfo{ChildPID: bystander.Process.Pid, PIDNS: ours}}
	gone, own := b.end(100 * time.Millisecond)
	if !gone || own {
		t.Errorf("a sandbox in the worker's PID namespace: gone %v, own PID namespace %v; want gone, and not its own", gone, own)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", bystander.Process.Pid))
	if state, _, ok := parseStat(string(stat)); err != nil || !ok || state == "Z" {
		t.Errorf("the end of a sandbox in the worker's PID namespace killed the process bwrap named: state %q, %v", state, err)
	}
}

// TestASelfCheckThatFailsSaysHowBwrapEnded: a bubblewrap that starts the check's command and
// exits with a failure fails the worker's start-up check with its status, which is what the
// operator needs to read, whatever the command left in its checkout. Not parallel: it writes
// an executable and runs it, which a fork of another test in between would make busy.
func TestASelfCheckThatFailsSaysHowBwrapEnded(t *testing.T) {
	needUnix(t)
	// A bwrap that proves the start on fd 5, as the start shell does, writes the pid the
	// check's command writes, and fails.
	fake := filepath.Join(t.TempDir(), "bwrap")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nprintf x >&5\necho 2 > pid\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	broken := *testSandbox(t, SandboxConfig{})
	broken.bwrap = fake
	err := broken.SelfCheck(context.Background(), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), fake+" exited with status 3") {
		t.Errorf("the self-check with a bwrap that exits 3: %v, want its status said", err)
	}
}

// TestEndingASandboxKillsItsNamespaceAndNothingElse: the end of a run kills the first process
// of its sandbox's PID namespace, and so every process of it, also one that would not die with
// bwrap (here a bwrap without --die-with-parent, whose command sleeps a minute); it kills no
// process of another namespace, whatever pid bwrap named.
func TestEndingASandboxKillsItsNamespaceAndNothingElse(t *testing.T) {
	t.Parallel()
	needUnix(t)
	testSandbox(t, SandboxConfig{})
	ours, err := pidNamespace("self")
	if err != nil {
		t.Fatal(err)
	}
	var self syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &self); err != nil || self.Ino != ours || ours == 0 {
		t.Fatalf("pidNamespace(self) = %d, the kernel says %d (%v)", ours, self.Ino, err)
	}

	infoR, infoW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer infoR.Close()
	bwrap := exec.Command("bwrap", "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
		"--info-fd", "3", "--", "sleep", "60")
	bwrap.ExtraFiles = []*os.File{infoW}
	if err := bwrap.Start(); err != nil {
		t.Fatal(err)
	}
	infoW.Close()
	exited := make(chan struct{})
	go func() {
		_ = bwrap.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = bwrap.Process.Kill()
		<-exited
	})
	var info sandboxInfo
	if err := json.NewDecoder(infoR).Decode(&info); err != nil {
		t.Fatalf("bwrap's report: %v", err)
	}
	t.Cleanup(func() {
		// Whatever the test found, the sandbox's first process goes (with a signal from the
		// host, it takes SIGKILL only).
		if got, err := pidNamespace(strconv.Itoa(info.ChildPID)); err == nil && got == info.PIDNS {
			_ = syscall.Kill(info.ChildPID, syscall.SIGKILL)
		}
	})
	if got, err := pidNamespace(strconv.Itoa(info.ChildPID)); err != nil || got != info.PIDNS || got == ours {
		t.Fatalf("pidNamespace of the sandbox's first process = %d, %v; bwrap says %d, the worker's is %d", got, err, info.PIDNS, ours)
	}
	if !namespaceAlive(info.PIDNS) {
		t.Fatal("namespaceAlive answers that a sandbox whose command sleeps has no process alive")
	}

	bystander := exec.Command("sleep", "60")
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bystander.Process.Kill()
		_ = bystander.Wait()
	})
	// A namespace no process is in, and a pid of the worker's namespace: nothing to end.
	if !endNamespace(bystander.Process.Pid, info.PIDNS+1<<40, 10*time.Second) {
		t.Error("endNamespace of a namespace no process is in did not answer that it is empty")
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", bystander.Process.Pid))
	if state, _, ok := parseStat(string(stat)); err != nil || !ok || state == "Z" {
		t.Errorf("endNamespace killed a process of the worker's namespace it was named: state %q, %v", state, err)
	}
	if !endNamespace(info.ChildPID, info.PIDNS, 10*time.Second) || namespaceAlive(info.PIDNS) {
		t.Error("the sandbox's namespace is alive after endNamespace of its first process")
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Error("bwrap still runs 10 s after the end of its sandbox")
	}
}

// TestHandleNeedsAClientASignerAndACacheAndWarnsOfNoSandbox: a validator lacking any of its
// client, signer or cache directory runs nothing and says what it needs; one without a sandbox,
// told to run anyway, warns in its log that the command can read its token and key, and one
// with a sandbox does not.
func TestHandleNeedsAClientASignerAndACacheAndWarnsOfNoSandbox(t *testing.T) {
	t.Parallel()
	needUnix(t)
	payload, err := structpb.NewStruct(map[string]any{
		"repository": "r", "candidate_revision": "rev", "tree_digest": digestOf(nil), "command": []any{"true"}, "timeout": "1m",
	})
	if err != nil {
		t.Fatal(err)
	}
	job := func() *Job { return &Job{Job: &agwpv1.Job{Id: "job1", Kind: client.KindValidate, Payload: payload}} }
	// A server that answers the tree of another revision: Handle fails at once after its start.
	dead := serveTrees(t, &treeServer{answer: func(*agwpv1.GetTreeRequest) *agwpv1.GetTreeResponse {
		return &agwpv1.GetTreeResponse{Revision: "another"}
	}}).Client
	signer := attest.NewSigner(nil)
	for what, v := range map[string]*Validator{
		"a client":          {Signer: signer, CacheDir: t.TempDir(), Unsandboxed: true},
		"a signer":          {Client: dead, CacheDir: t.TempDir(), Unsandboxed: true},
		"a cache directory": {Client: dead, Signer: signer, Unsandboxed: true},
	} {
		if _, err := v.Handle(context.Background(), job()); err == nil || !strings.Contains(err.Error(), "a client, a signer and a cache directory are required") {
			t.Errorf("a validator without %s: %v, want it said that it needs one", what, err)
		}
	}
	for _, sb := range []*Sandbox{nil, testSandbox(t, SandboxConfig{})} {
		var log bytes.Buffer
		v := &Validator{Client: dead, Signer: signer, CacheDir: t.TempDir(), Sandbox: sb, Unsandboxed: sb == nil,
			Logger: slog.New(slog.NewTextHandler(&log, nil))}
		if _, err := v.Handle(context.Background(), job()); err == nil || !strings.Contains(err.Error(), "the server answered revision another") {
			t.Fatalf("Handle of a job whose server answers another revision: %v", err)
		}
		if warned := strings.Contains(log.String(), "UNSAFE: running the validation command without a sandbox"); warned != (sb == nil) {
			t.Errorf("sandboxed %v: the log warns of no sandbox: %v, want %v\n%s", sb != nil, warned, sb == nil, log.String())
		}
	}
}

// TestAStoppedCommandHasTwoSecondsUnlessTold: a command that is stopped gets 2 s between
// SIGTERM and SIGKILL, unless the worker was given another grace (--kill-grace); none given,
// or a negative one, is the 2 s.
func TestAStoppedCommandHasTwoSecondsUnlessTold(t *testing.T) {
	t.Parallel()
	for given, want := range map[time.Duration]time.Duration{0: 2 * time.Second, -time.Second: 2 * time.Second, time.Millisecond: time.Millisecond, time.Minute: time.Minute} {
		if got := (&Validator{KillGrace: given}).killGrace(); got != want {
			t.Errorf("the grace of a worker given %v is %v, want %v", given, got, want)
		}
	}
}

// TestARunThatGoesWellWarnsOfNothing: a validation that passes, without a sandbox, in one, or in
// one held to limits, leaves no warning in the worker's log but the one of running unsandboxed: its work
// directory, its cgroup and its file system went as they should.
func TestARunThatGoesWellWarnsOfNothing(t *testing.T) {
	t.Parallel()
	needUnix(t)
	cl, treeDigest, signer, _ := serveCandidate(t, map[string]string{"a.txt": "fine\n"})
	payload, err := structpb.NewStruct(map[string]any{
		"repository": "app", "candidate_revision": "rev_1", "tree_digest": treeDigest,
		"command": []any{"sh", "-c", "test -f a.txt"}, "timeout": "1m",
	})
	if err != nil {
		t.Fatal(err)
	}
	workDir := t.TempDir()
	for _, c := range []struct{ sandboxed, limited bool }{{false, false}, {true, false}, {true, true}} {
		sandboxed := c.sandboxed
		var log bytes.Buffer
		v := &Validator{Client: cl, Signer: signer, CacheDir: t.TempDir(), WorkDir: workDir, Unsandboxed: !sandboxed,
			Logger: slog.New(slog.NewTextHandler(&log, nil))}
		if sandboxed {
			v.Sandbox = testSandbox(t, SandboxConfig{})
		}
		if c.limited {
			v.Limits = NewLimiter(Limits{Memory: 1 << 30, Pids: 1024}, workDir)
		}
		out, err := v.Handle(context.Background(), &Job{Job: &agwpv1.Job{Id: "job_1", Kind: client.KindValidate, Payload: payload, Attempts: 1, ClaimedBy: "ci|w1"}})
		if err != nil || out.Result.GetFields()["result"].GetStringValue() != attest.ResultPassed {
			t.Fatalf("sandboxed %v: Handle = %v, %v; want a pass\n%s", sandboxed, out.Result, err, log.String())
		}
		for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
			if strings.Contains(line, "level=WARN") && !strings.Contains(line, "UNSAFE") {
				t.Errorf("sandboxed %v: the worker warns: %s", sandboxed, line)
			}
		}
	}
	if left, _ := os.ReadDir(workDir); len(left) != 0 {
		t.Errorf("the runs left %v in the work directory", left)
	}
}

// TestTheWorkerFetchesEveryBlobItsCacheLacks: a candidate some of whose blobs the worker's
// cache holds already (an earlier candidate's) has the others fetched, whichever come first.
func TestTheWorkerFetchesEveryBlobItsCacheLacks(t *testing.T) {
	t.Parallel()
	files := map[string]string{"a.txt": "cached\n", "b.txt": "fetched\n", "c.txt": "fetched too\n"}
	cl, treeDigest, _, _ := serveCandidate(t, files)
	v := &Validator{Client: cl, CacheDir: t.TempDir()}
	cachedBlob(t, v, files["a.txt"])
	tree, err := v.fetchTree(context.Background(), client.ValidatePayload{Repository: "app", CandidateRevision: "rev_1", TreeDigest: treeDigest})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.fetchBlobs(context.Background(), tree); err != nil {
		t.Fatal(err)
	}
	for p, content := range files {
		if got, err := os.ReadFile(v.blobPath(digestOf([]byte(content)))); err != nil || string(got) != content {
			t.Errorf("the blob of %s in the cache: %q, %v; want %q", p, got, err, content)
		}
	}
}

// TestALinkOfNoTargetOrANULIsRefusedAsSuch: a tree holding a symbolic link whose target is
// empty or holds a NUL is refused for what its link is, before anything is made of it.
func TestALinkOfNoTargetOrANULIsRefusedAsSuch(t *testing.T) {
	t.Parallel()
	needUnix(t)
	for target, want := range map[string]string{"": "the link's target is empty", "a\x00b": "the link's target holds NUL"} {
		v := &Validator{CacheDir: t.TempDir()}
		tree := modeTreeOf(t, v, map[string]modeFile{"link": {repo.ModeSymlink, target}})
		root := t.TempDir()
		_, err := v.materialize(context.Background(), root, tree)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a link to %q: %v, want it refused: %s", target, err, want)
		}
		if entries, _ := os.ReadDir(root); len(entries) != 0 {
			t.Errorf("a link to %q left %v in the checkout", target, entries)
		}
	}
}

// TestTheCheckoutHasGitsModesWhateverTheUmask: a worker started with a umask that keeps
// permissions from others (077) still checks files out as git does, 0644 and 0755: a check that
// reads them sees the repository's modes. Not parallel: it sets the process's umask.
func TestTheCheckoutHasGitsModesWhateverTheUmask(t *testing.T) {
	needUnix(t)
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	v := &Validator{CacheDir: t.TempDir()}
	tree := modeTreeOf(t, v, map[string]modeFile{"run.sh": {repo.ModeExecutable, "exit 0\n"}, "a.txt": {"", "a\n"}})
	root := t.TempDir()
	if _, err := v.materialize(context.Background(), root, tree); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"run.sh": 0o755, "a.txt": 0o644} {
		if fi, err := os.Stat(filepath.Join(root, name)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %v", name, fi.Mode(), err, want)
		}
	}
}

// TestARunsDirectoryGoesWhateverTheCommandLeft: a run directory goes when its command left a
// directory it may not write (0500) holding a file, which a first removal cannot remove unless
// the worker is root.
func TestARunsDirectoryGoesWhateverTheCommandLeft(t *testing.T) {
	t.Parallel()
	needUnix(t)
	dir := filepath.Join(t.TempDir(), "run")
	locked := filepath.Join(dir, "tree", "locked")
	if err := os.MkdirAll(locked, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(locked, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(locked, 0o500); err != nil {
		t.Fatal(err)
	}
	if err := removeAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the run directory is still there: %v", err)
	}
}

// TestAFailureAloneRunsOnce: failing runs of a worker one after the other (nothing ran beside
// them) each run once: only a run that overlapped another is run again alone.
func TestAFailureAloneRunsOnce(t *testing.T) {
	t.Parallel()
	needUnix(t)
	cl, treeDigest, signer, _ := serveCandidate(t, map[string]string{"a.txt": "broken\n"})
	count := filepath.Join(t.TempDir(), "runs")
	payload := map[string]any{
		"repository": "app", "candidate_revision": "rev_1", "tree_digest": treeDigest,
		"command": []any{"sh", "-c", `echo run >> "$COUNT"; exit 1`}, "timeout": "1m", "env": map[string]any{"COUNT": count},
	}
	v := &Validator{Client: cl, Signer: signer, CacheDir: t.TempDir(), WorkDir: t.TempDir(), Unsandboxed: true}
	for i := range 3 {
		out, err := handleValidate(t, v, payload)
		if err != nil || out.Result.GetFields()["result"].GetStringValue() != attest.ResultFailed {
			t.Fatalf("validation %d: %v, %v; want a failure", i+1, out.Result, err)
		}
		if runs, _ := os.ReadFile(count); strings.Count(string(runs), "run") != i+1 {
			t.Fatalf("after %d failing validations, one at a time, the command ran %d times", i+1, strings.Count(string(runs), "run"))
		}
	}
}

// TestAJobsResultSaysWhyItFailedAndNothingWhenItPassed: the result a worker sends with a job
// carries the reason of a run that failed without failing by itself (here, its timeout), as
// the attestation does, and no reason for a run that passed.
func TestAJobsResultSaysWhyItFailedAndNothingWhenItPassed(t *testing.T) {
	t.Parallel()
	needUnix(t)
	cl, treeDigest, signer, _ := serveCandidate(t, map[string]string{"a.txt": "a\n"})
	v := &Validator{Client: cl, Signer: signer, CacheDir: t.TempDir(), WorkDir: t.TempDir(), Unsandboxed: true, KillGrace: 100 * time.Millisecond}
	for _, c := range []struct {
		command []any
		timeout string
		result  string
		reason  string
	}{
		{[]any{"true"}, "1m", attest.ResultPassed, ""},
		{[]any{"sleep", "60"}, "300ms", attest.ResultFailed, "timed out after 300ms"},
	} {
		out, err := handleValidate(t, v, map[string]any{
			"repository": "app", "candidate_revision": "rev_1", "tree_digest": treeDigest,
			"command": c.command, "timeout": c.timeout,
		})
		if err != nil {
			t.Fatalf("%v: %v", c.command, err)
		}
		fields := out.Result.GetFields()
		reason, hasReason := fields["reason"]
		if got := fields["result"].GetStringValue(); got != c.result || hasReason != (c.reason != "") || reason.GetStringValue() != c.reason {
			t.Errorf("%v: result %s, reason %v (%q); want %s, reason %q", c.command, got, hasReason, reason.GetStringValue(), c.result, c.reason)
		}
	}
}

// TestAWorkerWithoutASandboxRunsNoPresetsPhase: a preset's prepare phase, before the command
// and after it (the Go preset warms the caches for the next candidates), runs only in the
// sandbox: a worker run with --unsafe-no-sandbox runs the command as asked and neither.
func TestAWorkerWithoutASandboxRunsNoPresetsPhase(t *testing.T) {
	t.Parallel()
	needUnix(t)
	cl, treeDigest, signer, _ := serveCandidate(t, map[string]string{"go.mod": "module example.com/a\n", "a.go": "package a\n"})
	v := &Validator{Client: cl, Signer: signer, CacheDir: t.TempDir(), WorkDir: t.TempDir(), Unsandboxed: true}
	out, err := handleValidate(t, v, map[string]any{
		"repository": "app", "candidate_revision": "rev_1", "tree_digest": treeDigest,
		"command": []any{"true"}, "timeout": "1m", "preset": client.PresetGo,
	})
	if err != nil || out.Result.GetFields()["result"].GetStringValue() != attest.ResultPassed {
		t.Fatalf("an unsandboxed run with the Go preset: %v, %v; want it passed", out.Result, err)
	}
	if _, warming := v.warming.Load("app"); warming {
		t.Error("an unsandboxed worker warms the Go preset's caches after the run")
	}
	if _, err := os.Lstat(filepath.Join(v.CacheDir, "prepared")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an unsandboxed worker made preset caches: %v", err)
	}
}
