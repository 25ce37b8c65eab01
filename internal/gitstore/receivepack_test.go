package gitstore

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/pktline"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"
)

// The receive-pack side of a push, as git sends it and reads the answer. The server's tests push
// with the git binary (TestGitPushAttacks); these hold each bound and each refusal of the
// request's reading at its edge, and what git is answered, byte for byte.

// pkts writes lines as pkt-lines; "" is a flush.
func pkts(t *testing.T, lines ...string) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	e := pktline.NewEncoder(&b)
	for _, l := range lines {
		var err error
		if l == "" {
			err = e.Flush()
		} else {
			err = e.EncodeString(l)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return &b
}

// readPkts reads what a reader of pkt-lines would: each line, "" for a flush.
func readPkts(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	s := pktline.NewScanner(r)
	for s.Scan() {
		out = append(out, string(s.Bytes()))
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

const (
	oldID = "1111111111111111111111111111111111111111"
	newID = "2222222222222222222222222222222222222222"
)

func TestReadReceiveRequestReadsThePushAndNothingOfThePack(t *testing.T) {
	body := pkts(t,
		"shallow "+oldID+"\n",
		oldID+" "+newID+" refs/for/main\x00report-status side-band-64k push-options quiet agent=git/2.39\n",
		plumbing.ZeroHash.String()+" "+newID+" refs/heads/topic\x00ignored-capability\n",
		"",
		"ag.holder=a1\n",
		"ag.task=t_1",
		"",
	)
	body.WriteString("PACK...")
	req, err := ReadReceiveRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	want := []RefUpdate{
		{Old: plumbing.NewHash(oldID), New: plumbing.NewHash(newID), Name: "refs/for/main"},
		{Old: plumbing.ZeroHash, New: plumbing.NewHash(newID), Name: "refs/heads/topic"},
	}
	if fmt.Sprint(req.Updates) != fmt.Sprint(want) {
		t.Errorf("updates %v, want %v", req.Updates, want)
	}
	if got := strings.Join(req.Capabilities, " "); got != "report-status side-band-64k push-options quiet agent=git/2.39" {
		t.Errorf("capabilities %q: want the first command's only", got)
	}
	if got := strings.Join(req.Options, ","); got != "ag.holder=a1,ag.task=t_1" {
		t.Errorf("push options %q", got)
	}
	if len(req.Shallow) != 1 || req.Shallow[0] != plumbing.NewHash(oldID) {
		t.Errorf("shallow %v", req.Shallow)
	}
	if rest, _ := io.ReadAll(body); string(rest) != "PACK..." {
		t.Errorf("left %q of the body for the pack, want all of it", rest)
	}
	for _, c := range []struct {
		name string
		want bool
	}{{"push-options", true}, {"agent", true}, {"quiet", true}, {"side-band", false}, {"report-status-v2", false}, {"ofs-delta", false}} {
		if got := req.Asked(c.name); got != c.want {
			t.Errorf("Asked(%q) = %v, want %v", c.name, got, c.want)
		}
	}

	// Without push-options asked, what follows the commands is the pack's.
	body = pkts(t, oldID+" "+newID+" refs/for/main\x00report-status\n", "")
	body.WriteString("PACK")
	if req, err = ReadReceiveRequest(body); err != nil || len(req.Options) != 0 {
		t.Fatalf("a push without options: %+v, %v", req, err)
	}
	if rest, _ := io.ReadAll(body); string(rest) != "PACK" {
		t.Errorf("left %q for the pack", rest)
	}
}

func TestReadReceiveRequestRefusesWhatIsNoPushOrTooMuch(t *testing.T) {
	update := oldID + " " + newID + " refs/for/main"
	withOptions := update + "\x00push-options\n"
	repeat := func(line string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = line
		}
		return out
	}
	shallow := "shallow " + oldID + "\n"
	lines := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	// What a refusal says of the line it refuses: the line whole up to 120 bytes, cut after.
	for _, n := range []int{120, 121} {
		bad := strings.Repeat("x", n)
		_, err := ReadReceiveRequest(pkts(t, bad, ""))
		if want := bad[:min(n, 120)]; err == nil || !strings.Contains(err.Error(), `"`+want) || strings.Contains(err.Error(), `"`+want+`"`) != (n == 120) {
			t.Errorf("a malformed command of %d bytes: %v", n, err)
		}
	}
	if _, err := ReadReceiveRequest(pkts(t, update)); err == nil || !strings.Contains(err.Error(), "the request ended early") {
		t.Errorf("a request cut short: %v; want it said so", err)
	}
	for _, tc := range []struct {
		name  string
		lines []string
		ok    bool
	}{
		{"64 commands", lines([]string{withOptions}, repeat(update, 63), []string{""}, []string{""}), true},
		{"65 commands", lines([]string{withOptions}, repeat(update, 64), []string{""}, []string{""}), false},
		{"10,000 shallow lines", lines(repeat(shallow, 10000), []string{update, ""}), true},
		{"10,001 shallow lines", lines(repeat(shallow, 10001), []string{update, ""}), false},
		{"32 push options", lines([]string{withOptions, ""}, repeat("o=1", 32), []string{""}), true},
		{"33 push options", lines([]string{withOptions, ""}, repeat("o=1", 33), []string{""}), false},
		{"a push option of 1,024 bytes", []string{withOptions, "", strings.Repeat("o", 1024), ""}, true},
		{"a push option of 1,025 bytes", []string{withOptions, "", strings.Repeat("o", 1025), ""}, false},
		{"no command", []string{""}, false},
		{"shallow lines alone", []string{shallow, ""}, false},
		{"a shallow line after a command", []string{update, shallow, ""}, false},
		{"a malformed shallow line", []string{"shallow 12345\n", update, ""}, false},
		{"the commands cut short", []string{update}, false},
		{"the options cut short", []string{withOptions, "", "o=1"}, false},
		{"a command of two ids", []string{oldID + " " + newID, ""}, false},
		{"a command of no ref", []string{oldID + " " + newID + " ", ""}, false},
		{"a ref with a space", []string{oldID + " " + newID + " refs/for/ma in", ""}, false},
		{"a short old id", []string{oldID[1:] + " " + newID + " refs/for/main", ""}, false},
		{"a short new id", []string{oldID + " " + newID[1:] + " refs/for/main", ""}, false},
		{"an id not hex", []string{strings.Repeat("g", 40) + " " + newID + " refs/for/main", ""}, false},
		{"one id", []string{oldID, ""}, false},
	} {
		req, err := ReadReceiveRequest(pkts(t, tc.lines...))
		if tc.ok != (err == nil) {
			t.Errorf("%s: %+v, %v; want taken: %v", tc.name, req, err, tc.ok)
		}
	}
}

func TestAdvertiseReceiveRefsSaysMainAndWhatTheServerHolds(t *testing.T) {
	var b bytes.Buffer
	have := plumbing.NewHash(oldID)
	if err := AdvertiseReceiveRefs(&b, plumbing.NewHash(newID), []plumbing.Hash{have, have}); err != nil {
		t.Fatal(err)
	}
	want := []string{"# service=git-receive-pack\n", "",
		newID + " refs/heads/main\x00" + receiveCapabilities + "\n", oldID + " .have\n", oldID + " .have\n", ""}
	if got := readPkts(t, &b); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Errorf("advertised\n%q\nwant\n%q", got, want)
	}
	b.Reset()
	if err := AdvertiseReceiveRefs(&b, plumbing.ZeroHash, nil); err != nil {
		t.Fatal(err)
	}
	want = []string{"# service=git-receive-pack\n", "", plumbing.ZeroHash.String() + " capabilities^{}\x00" + receiveCapabilities + "\n", ""}
	if got := readPkts(t, &b); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Errorf("advertised for an empty repository\n%q\nwant\n%q", got, want)
	}
}

func TestTheReceiveReportIsWhatGitReads(t *testing.T) {
	refs := []RefStatus{{Name: "refs/for/main"}, {Name: "refs/heads/x", Refusal: " only refs/for/main\nis\rtaken\x00here\n"}}

	// Without side-band: the report alone, progress dropped, messages too.
	var b bytes.Buffer
	r := NewReceiveReporter(&b, &ReceiveRequest{Capabilities: []string{"report-status"}})
	if err := r.Progress("validating"); err != nil {
		t.Fatal(err)
	}
	if err := r.Message("refused"); err != nil {
		t.Fatal(err)
	}
	if err := r.Report("", refs); err != nil {
		t.Fatal(err)
	}
	want := []string{"unpack ok\n", "ok refs/for/main\n", "ng refs/heads/x only refs/for/main; is taken here\n", ""}
	if got := readPkts(t, &b); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Errorf("report\n%q\nwant\n%q", got, want)
	}

	// With side-band: progress and messages on channel 2 (progress not when quiet), the report
	// on channel 1, then a flush.
	for _, quiet := range []bool{false, true} {
		caps := []string{"report-status", "side-band-64k"}
		if quiet {
			caps = append(caps, "quiet")
		}
		b.Reset()
		r = NewReceiveReporter(&b, &ReceiveRequest{Capabilities: caps})
		if err := r.Progress("validating\n"); err != nil {
			t.Fatal(err)
		}
		if err := r.Message("refused\n\n"); err != nil {
			t.Fatal(err)
		}
		if err := r.Report("a tree holds .git", nil); err != nil {
			t.Fatal(err)
		}
		report := pkts(t, "unpack a tree holds .git\n", "").String()
		want := []string{"\x02validating\n", "\x02refused\n", "\x01" + report, ""}
		if quiet {
			want = want[1:]
		}
		if got := readPkts(t, &b); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
			t.Errorf("side-band answer (quiet: %v)\n%q\nwant\n%q", quiet, got, want)
		}
	}

	// A report larger than a side-band packet goes in pieces, each within it; a refusal is cut
	// to 900 bytes.
	many := make([]RefStatus, 200)
	for i := range many {
		many[i] = RefStatus{Name: fmt.Sprintf("refs/heads/%03d", i), Refusal: strings.Repeat("x", 1000)}
	}
	var plain bytes.Buffer
	if err := NewReceiveReporter(&plain, &ReceiveRequest{}).Report("", many); err != nil {
		t.Fatal(err)
	}
	// A refusal of 900 bytes is whole, one of 901 cut with "...".
	var edge bytes.Buffer
	if err := NewReceiveReporter(&edge, &ReceiveRequest{}).Report("", []RefStatus{
		{Name: "a", Refusal: strings.Repeat("y", 900)}, {Name: "b", Refusal: strings.Repeat("z", 901)}}); err != nil {
		t.Fatal(err)
	}
	if got := readPkts(t, &edge); len(got) != 4 || got[1] != "ng a "+strings.Repeat("y", 900)+"\n" ||
		got[2] != "ng b "+strings.Repeat("z", 900)+"...\n" {
		t.Errorf("refusals of 900 and 901 bytes reported as %q", got)
	}
	lines := readPkts(t, bytes.NewReader(plain.Bytes()))
	if len(lines) != 202 || lines[1] != "ng refs/heads/000 "+strings.Repeat("x", 900)+"...\n" {
		t.Fatalf("a long report: %d lines, the first ref's %q", len(lines), lines[1])
	}
	b.Reset()
	if err := NewReceiveReporter(&b, &ReceiveRequest{Capabilities: []string{"side-band-64k"}}).Report("", many); err != nil {
		t.Fatal(err)
	}
	var data bytes.Buffer
	packets := readPkts(t, &b)
	for _, p := range packets[:len(packets)-1] {
		if p[0] != 1 || len(p)+4 > 65520 {
			t.Fatalf("a side-band packet of %d bytes on channel %d", len(p)+4, p[0])
		}
		data.WriteString(p[1:])
	}
	if len(packets) < 3 || packets[len(packets)-1] != "" || data.String() != plain.String() {
		t.Errorf("the report in %d side-band packets is not the report", len(packets))
	}
}

// TestReferencesAreWhatGitsConnectivityCheckFollows holds what a tree or commit of an import or
// a push names, which must all be held before it is taken: a tree's subtrees and blobs, links
// and executables among them, but no submodule's commit; a commit's tree and parents; and the
// refusals of a tree ag would not serve.
func TestReferencesAreWhatGitsConnectivityCheckFollows(t *testing.T) {
	s := memory.NewStorage()
	blob := plumbing.NewHash(oldID)
	sub := plumbing.NewHash(newID)
	tree, err := WriteTree(s, []File{
		{Path: "a/b.txt", Blob: blob, Mode: filemode.Regular},
		{Path: "run.sh", Blob: blob, Mode: filemode.Executable},
		{Path: "link", Blob: blob, Mode: filemode.Symlink},
		{Path: "vendor/lib", Blob: sub, Mode: filemode.Submodule},
	})
	if err != nil {
		t.Fatal(err)
	}
	refsOf := func(h plumbing.Hash) ([]Reference, error) {
		o, err := s.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			t.Fatal(err)
		}
		data, err := ObjectData(o)
		if err != nil {
			t.Fatal(err)
		}
		return References(o, data)
	}
	refs, err := refsOf(tree)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range refs {
		if r.From != tree {
			t.Errorf("%v is from %s, not the tree", r, r.From)
		}
		got = append(got, r.What+" "+r.ID.String()[:4])
	}
	if want := "tree a ????,blob of link 1111,blob of run.sh 1111,tree vendor ????"; strings.Join(maskTrees(got), ",") != want {
		t.Errorf("the root tree names %v, want %s", got, want)
	}

	parent := plumbing.NewHash(strings.Repeat("3", 40))
	commit, err := WriteCommit(s, Commit{Tree: tree, Parents: []plumbing.Hash{parent, sub}, Message: "m"})
	if err != nil {
		t.Fatal(err)
	}
	refs, err = refsOf(commit)
	if err != nil {
		t.Fatal(err)
	}
	want := []Reference{{commit, "tree", tree}, {commit, "parent commit", parent}, {commit, "parent commit", sub}}
	if fmt.Sprint(refs) != fmt.Sprint(want) {
		t.Errorf("the commit names %v, want %v", refs, want)
	}

	refuse := func(what string, o plumbing.EncodedObject, data []byte) {
		t.Helper()
		if refs, err := References(o, data); err == nil {
			t.Errorf("%s: taken, naming %v", what, refs)
		}
	}
	treeOf := func(entries ...object.TreeEntry) (plumbing.EncodedObject, []byte) {
		o := s.NewEncodedObject()
		if err := (&object.Tree{Entries: entries}).Encode(o); err != nil {
			t.Fatal(err)
		}
		data, err := ObjectData(o)
		if err != nil {
			t.Fatal(err)
		}
		return o, data
	}
	o, data := treeOf(object.TreeEntry{Name: ".git", Mode: filemode.Dir, Hash: tree})
	refuse("a tree holding .git", o, data)
	o, data = treeOf(object.TreeEntry{Name: "lib", Mode: filemode.Submodule, Hash: plumbing.ZeroHash})
	refuse("a submodule of the null commit", o, data)
	o, data = treeOf(object.TreeEntry{Name: "x", Mode: filemode.FileMode(0o100600), Hash: blob})
	refuse("a mode git does not write", o, data)
	unsorted := []byte("100644 b\x00" + string(blob[:]) + "100644 a\x00" + string(blob[:]))
	o = s.NewEncodedObject()
	o.SetType(plumbing.TreeObject)
	w, _ := o.Writer()
	_, _ = w.Write(unsorted)
	_ = w.Close()
	refuse("a tree out of git's order", o, unsorted)

	noTree := s.NewEncodedObject()
	noTree.SetType(plumbing.CommitObject)
	w, _ = noTree.Writer()
	_, _ = w.Write([]byte("author a <a> 0 +0000\ncommitter a <a> 0 +0000\n\nm\n"))
	_ = w.Close()
	refuse("a commit without a tree", noTree, nil)
	refuse("a blob", s.NewEncodedObject(), nil)
}

// maskTrees hides the ids of trees, which depend on the encoding of the tree below them.
func maskTrees(refs []string) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		if strings.HasPrefix(r, "tree ") {
			r = r[:len(r)-4] + "????"
		}
		out[i] = r
	}
	return out
}
