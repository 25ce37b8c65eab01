package server_test

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"context"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// plumb runs git plumbing in dir with stdin and answers its output's first line.
func (f *pushFixture) plumb(dir, stdin string, args ...string) string {
	f.t.Helper()
	out, errOut, err := f.git.runInput(dir, stdin, args...)
	if err != nil {
		f.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return strings.TrimSpace(out)
}

// pushCommit pushes the commit id of dir to refs/for/main as holder wt.
func (f *pushFixture) pushCommit(dir, id string, args ...string) (string, bool) {
	return f.push(dir, append(args, "origin", id+":refs/for/main")...)
}

// TestGitPushAttacks ensures what a hostile pusher sends is refused with a line saying why, and
// lands nothing: a tree that plants .git/config, commit trailers that pose as ag's (they land
// as the agent's text, never as ag's trailers), a pack declaring more objects or bytes than a
// push may carry, a pack whose deltas or commits name objects nobody holds, a push under a lease
// an admin broke and another holder took since, and a push of one repository's commit to
// another repository.
func TestGitPushAttacks(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			f := newPushFixture(t, backend, nil)
			ctx := context.Background()
			l := f.lease("wt", "src/", "README.md")
			_, start := f.mainline()

			// .git/config, made with plumbing since git's porcelain would not.
			blob := f.plumb(f.dir, "[core]\n\tfsmonitor = touch /tmp/pwned\n", "hash-object", "-w", "--stdin")
			inner := f.plumb(f.dir, "100644 blob "+blob+"\tconfig\n", "mktree")
			readme := f.plumb(f.dir, "", "rev-parse", "HEAD:README.md")
			src := f.plumb(f.dir, "", "rev-parse", "HEAD:src")
			tree := f.plumb(f.dir, "040000 tree "+inner+"\t.git\n100644 blob "+readme+"\tREADME.md\n040000 tree "+src+"\tsrc\n", "mktree")
			evil := f.plumb(f.dir, "", "commit-tree", tree, "-p", "HEAD", "-m", "Plant a config")
			out, ok := f.pushCommit(f.dir, evil)
			if ok || !strings.Contains(out, "remote: tree "+tree) || !strings.Contains(out, `".git"`) {
				t.Fatalf("a push planting .git/config = ok %v:\n%s", ok, out)
			}

			// Trailers that pose as ag's stay the agent's words.
			f.commit(f.dir, "Honest work\n\nAg-Attestation: sha256:"+strings.Repeat("f", 64)+"\nAg-Author: admin|root", map[string]string{"src/x.go": "package a\n"})
			if out, ok := f.push(f.dir); !ok {
				t.Fatalf("a push with forged trailers in its message = not landed:\n%s", out)
			}
			check := f.clone("check")
			trailers := f.git.must(check, nil, "log", "-1", "--format=%(trailers:only,unfold)")
			if strings.Contains(trailers, "Ag-Attestation: sha256:ffff") || strings.Contains(trailers, "admin|root") ||
				!strings.Contains(trailers, "Ag-Author: ada|wt") {
				t.Fatalf("the landed commit's trailers are:\n%s\nwant ag's own, not the message's", trailers)
			}
			_, landed := f.mainline()

			// Packs too large, or naming what nobody holds, sent as git would.
			for _, c := range []struct {
				name string
				pack []byte
				says string
			}{
				{"4 billion objects declared", packHeader(0xffffffff), "declares 4294967295 objects"},
				{"a delta against an object nobody holds", refDeltaPack(), "deltas are against objects the server does not hold"},
			} {
				res := rawPush(t, f.srv.URL, f.token, landed, c.pack, -1)
				if !strings.Contains(res, c.says) || !strings.Contains(res, "ng refs/for/main") {
					t.Errorf("%s: the push answered %q, want a refusal saying %q", c.name, res, c.says)
				}
			}
			if res := rawPush(t, f.srv.URL, f.token, landed, nil, 1<<30); !strings.Contains(res, "413") || !strings.Contains(res, "more than the 256 MiB") {
				t.Errorf("a push declaring 1 GiB answered %q, want 413", res)
			}

			// A commit naming a tree the push does not carry, which git itself would not send.
			orphan := fmt.Sprintf("tree %s\nparent %s\nauthor a <a@a> 0 +0000\ncommitter a <a@a> 0 +0000\n\nOrphan\n", strings.Repeat("ab", 20), landed)
			pack, id := objectPack(1, []byte(orphan))
			if res := rawPush(t, f.srv.URL, f.token, id, pack, -1); !strings.Contains(res, "name objects the push does not carry and the server does not hold") ||
				!strings.Contains(res, "ng refs/for/main") {
				t.Errorf("a push of a commit naming a missing tree answered %q", res)
			}

			// The lease was broken and granted to another: the later grant wins.
			if _, err := f.srv.Admin.Leases.BreakLease(ctx, &agwpv1.BreakLeaseRequest{LeaseId: l.GetId()}); err != nil {
				t.Fatal(err)
			}
			f.lease("bob", "src/")
			f.commit(f.dir, "After the break", map[string]string{"src/y.go": "package a\n"})
			out, ok = f.push(f.dir, "-o", "ag.holder=wt", "-o", fmt.Sprintf("ag.lease-token=%d", l.GetFencingToken()))
			if ok || !strings.Contains(out, "remote: src/y.go: leased by ada|bob until ") {
				t.Fatalf("a push under a broken lease another holder took = ok %v:\n%s", ok, out)
			}

			// Another repository: the commit's history meets none of its mainline.
			if _, err := f.srv.Admin.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "other"}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.ada.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: "other", Paths: []string{"src/"}, Holder: "wt"}); err != nil {
				t.Fatal(err)
			}
			stdout, stderr, err := f.git.run(f.dir, nil, append(f.auth(), "push", "-o", "ag.holder=wt", f.srv.URL+"/git/other.git", "HEAD:refs/for/main")...)
			if err == nil || !strings.Contains(stderr, "remote: the pushed history shares no commit with the mainline") {
				t.Fatalf("a push of app's history to other = %v:\n%s%s", err, stdout, stderr)
			}
			if _, now := f.mainline(); now != landed || now == start {
				t.Fatalf("the mainline is %s after the attacks, want %s", now, landed)
			}
		})
	}
}

// packHeader answers a pack's header declaring n objects, and nothing after it.
func packHeader(n uint32) []byte {
	b := []byte("PACK\x00\x00\x00\x02")
	return binary.BigEndian.AppendUint32(b, n)
}

// refDeltaPack answers a pack of one REF_DELTA object whose base nobody holds.
func refDeltaPack() []byte {
	var buf bytes.Buffer
	buf.Write(packHeader(1))
	delta := []byte{5, 5, 5, 'h', 'e', 'l', 'l', 'o'} // base size 5, target size 5, insert 5 bytes
	buf.WriteByte(0x70 | byte(len(delta)&0x0f))       // type 7 (REF_DELTA), size's low bits
	buf.Write(bytes.Repeat([]byte{0xee}, 20))         // the base's id
	buf.Write(deflate(delta))
	sum := sha1.Sum(buf.Bytes())
	buf.Write(sum[:])
	return buf.Bytes()
}

// objectPack answers a pack of one object of type typ (1 a commit) and content, and its id.
func objectPack(typ byte, content []byte) ([]byte, string) {
	var buf bytes.Buffer
	buf.Write(packHeader(1))
	size := len(content)
	first := typ<<4 | byte(size&0x0f)
	size >>= 4
	if size > 0 {
		first |= 0x80
	}
	buf.WriteByte(first)
	for size > 0 {
		b := byte(size & 0x7f)
		size >>= 7
		if size > 0 {
			b |= 0x80
		}
		buf.WriteByte(b)
	}
	buf.Write(deflate(content))
	sum := sha1.Sum(buf.Bytes())
	buf.Write(sum[:])
	id := sha1.Sum(append([]byte(fmt.Sprintf("commit %d\x00", len(content))), content...))
	return buf.Bytes(), fmt.Sprintf("%x", id)
}

// rawPush sends one receive-pack request to refs/for/main of app as holder wt, naming newID
// (any id) with pack as its body after the commands, declaring length bytes when not -1, and
// answers what came back.
func rawPush(t *testing.T, url, token, newID string, pack []byte, length int64) string {
	t.Helper()
	var body bytes.Buffer
	cmd := fmt.Sprintf("%s %s refs/for/main\x00report-status side-band-64k push-options\n", strings.Repeat("0", 40), newID)
	fmt.Fprintf(&body, "%04x%s0000", len(cmd)+4, cmd)
	opt := "ag.holder=wt\n"
	fmt.Fprintf(&body, "%04x%s0000", len(opt)+4, opt)
	body.Write(pack)
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if length < 0 {
		length = int64(body.Len())
	}
	fmt.Fprintf(conn, "POST /git/app.git/git-receive-pack HTTP/1.1\r\nHost: ag\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/x-git-receive-pack-request\r\nContent-Length: %d\r\n\r\n", token, length)
	if int64(body.Len()) <= length {
		_, _ = conn.Write(body.Bytes())
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "no answer: " + err.Error()
	}
	defer res.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(res.Body)
	return fmt.Sprintf("%d %s", res.StatusCode, out.String())
}

// deflate answers data compressed as a pack's objects are.
func deflate(data []byte) []byte {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	_, _ = w.Write(data)
	_ = w.Close()
	return buf.Bytes()
}
